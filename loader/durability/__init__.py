"""Stage 2, durability: what must survive a crash (the WAL and its format, the catalog,
Delta's application transactions, recovery, quarantined batches)."""
