"""Stage 3, pending: acknowledged updates waiting to be loaded, per table, under a memory
budget, spilled to disk by the policies of ``loader.pending.spill``."""
