"""Stage 4, loading: the dispatcher drives the scheduling policy on the wall clock and runs
each batch as one Spark job and one Delta commit on a worker (sinks, Spark session)."""
