"""The loader service core, one folder per stage of the data path (docs/architecture.md).

An update travels ``intake`` (a request becomes validated, numbered updates) ->
``durability`` (the WAL; acknowledged once it holds them) -> ``pending`` (waiting per table,
spilled beyond memory) -> ``loading`` (the dispatcher picks a table, a worker runs one Spark
job and one Delta commit) -> ``ops`` (freshness, status, metrics, maintenance). ``core``
holds what every stage shares, ``abc`` the ports through which an earlier stage calls a
later one, ``service`` wires them and owns their start and stop order, ``config`` every
setting. A module imports only its own stage and earlier ones (tests/test_architecture.py).
"""
