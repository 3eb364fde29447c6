"""The ``loader`` command line: the service (serve, demo), its client (submit, export-trace)
and the scheduling simulator (simulate, compare, gen-trace, sample, report)."""
