"""The loader service core, one folder per stage of the data path (docs/architecture.md).

An update travels ``intake`` (a request becomes validated, numbered updates) ->
``durability`` (the WAL; acknowledged once it holds them) -> ``pending`` (waiting per table,
spilled beyond memory) -> ``loading`` (the dispatcher picks a table, a worker runs one Spark
job and one Delta commit) -> ``ops`` (freshness, status, metrics, maintenance). ``core``
holds what every stage shares, ``abc`` the ports through which an earlier stage calls a
later one, ``service`` wires them and owns their start and stop order, ``config`` every
setting. A module imports only its own stage and earlier ones (tests/test_architecture.py).
"""

import os

# gRPC (the Spark Connect client) restarts its poller thread in a forked child when its fork
# support is on; a child started with preexec_fn (the Connect server: its own process group,
# nice, SCHED_IDLE) then aborts before exec about 1 time in 40 while channels are busy
# (grpcio >= 1.80, grpc/grpc#43055; tests/loader/test_fork.py). The loader forks only to
# exec, so it needs none of that support: off, before anything imports grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
