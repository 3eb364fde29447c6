"""The harness every benchmark runs on (see benchmarks/README.md)."""
