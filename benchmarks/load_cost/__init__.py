"""The fixed cost of one small load and what each lean change saves (``python -m benchmarks.load_cost``).

``worker`` runs the loads in a process of its own, ``probes`` measures them (phases, py4j,
Spark's event log, JVM threads, Java Flight Recorder), ``cluster`` starts and stops a
standalone cluster, ``report`` writes the ``load-cost`` section of BENCHMARKS.md.
"""
