"""Loads in worker processes (issue 15): the service hands batches to P processes, each a
Spark Connect client running the sinks; see loader/loading/workers/pool.py."""
