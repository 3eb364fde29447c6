"""Stage 1, intake: a request becomes validated updates with sequence numbers (bodies, rows,
landing files, Idempotency-Keys), handed to the WAL through ``loader.abc.UpdateLog``."""
