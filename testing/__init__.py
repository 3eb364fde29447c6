"""The test harness shared by tests/, benchmarks/ and trials/ (none of which imports another):
in-process and out-of-process services, fakes, trial engines, invariants, report helpers."""
