"""Stage 5, operations: what operators see and what runs on a timer (the status read model,
trace exports, Prometheus metrics, maintenance jobs)."""
