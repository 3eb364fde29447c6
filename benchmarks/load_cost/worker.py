"""Loads measured in one Spark driver process (so its JVM goes away with it whatever happens).

    python -m benchmarks.load_cost.worker SPEC.json     # prints one JSON object on stdout

A variant is a set of lean changes (loader/loading/spark.py ``LEAN_CHANGES``), switched between
loads in the one session: the sink follows ``sink.lean``; ``no_checksum_files`` is the JVM's
local-filesystem flag; ``no_call_sites`` is a static Spark setting that PySpark reads once into
``pyspark.errors.utils._enable_debugging_cache``, so the variant sets that cache instead.
Modes: ``changes`` (rounds of one load per variant, rotated) and ``breakdown`` (blocks per
variant and size, with Spark's event log and CPU by JVM thread kind).
"""

from __future__ import annotations

import collections
import dataclasses
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import child
from benchmarks.harness.spark import SCHEMA, timed
from benchmarks.load_cost import probes
from benchmarks.service.commit import make_batch
from loader.core.updates import Batch
from testing.report import log

#: Lean changes with Spark settings of their own, and how a variant switches them at run time.
RUNTIME_SETTINGS = {"no_call_sites"}
#: Spark's event log, uncompressed in one file per application (``probes.read_event_log`` reads it).
EVENT_LOG = {"spark.eventLog.enabled": "true", "spark.eventLog.rolling.enabled": "false"}
EVENT_LOG["spark.eventLog.compress"] = "false"


@dataclasses.dataclass
class Table:
    """One variant's table: its sink and lean changes, its last sequence number, the rows it holds."""

    sink: Any
    lean: frozenset[str]
    name: str = "t"
    seq: int = 0
    rows: int = 0

    def batch(self, updates: int, rows_per_update: int) -> Batch:
        batch = make_batch(self.name, updates * rows_per_update, rows_per_update, self.seq + 1, self.rows)
        self.seq, self.rows = batch.last_seq, self.rows + updates * rows_per_update
        return batch


class Session:
    """The Spark session, one table per variant, the probes around the sink."""

    def __init__(self, spec: dict[str, Any], root: Path) -> None:
        from loader.loading.sinks.delta_rs import DeltaRsSink
        from loader.loading.spark import LEAN_CHANGES, build_spark_session

        unhandled = sorted(n for n, c in LEAN_CHANGES.items() if c.conf and n not in RUNTIME_SETTINGS)
        if unhandled:
            raise SystemExit(f"load_cost worker cannot switch the Spark settings of {unhandled} between loads")
        self.spec = spec
        self.events = root / "events" if spec.get("event_log") else None
        conf = {} if self.events is None else EVENT_LOG | {"spark.eventLog.dir": str(self.events)}
        if self.events is not None:
            self.events.mkdir()
        began = time.perf_counter()
        self.spark = build_spark_session(spec["master"], conf, "load-cost", fair_pools=2, lean=frozenset())
        self.start_seconds = time.perf_counter() - began
        self.recorder = probes.PhaseRecorder()
        self._undo = probes.count_py4j(self.recorder)
        self.tables: dict[str, Table] = {}
        for name, lean in spec["variants"].items():
            sink = DeltaRsSink(root / "warehouse" / name, self.spark, lean)
            self._instrument(sink)
            sink.ensure_table("t", SCHEMA)
            self.tables[name] = Table(sink, frozenset(lean))
        self._patch_classes()
        gateway = getattr(self.spark.sparkContext._gateway, "proc", None)
        pid = gateway.pid if gateway is not None else None
        self.jvm = probes.JvmThreads(pid) if pid is not None and probes.JvmThreads.available(pid) else None
        self.app_id = self.spark.sparkContext.applicationId
        # The service's worker threads each load in their own FAIR pool; so does this one.
        sink.use_pool("worker-0")

    def _instrument(self, sink: Any) -> None:
        r = self.recorder
        sink._current_table = r.wrap("open table, read app transaction", sink._current_table)
        sink._write_parquet = r.wrap("Spark write job", sink._write_parquet)
        sink._publish = r.wrap("publish (rename, footer stats)", sink._publish)

    def _patch_classes(self) -> None:
        import pyarrow.parquet as pq
        from deltalake import DeltaTable

        from loader.loading.sinks import delta_rs

        r = self.recorder
        DeltaTable.transaction_version = r.wrap("open table, read app transaction", DeltaTable.transaction_version)
        DeltaTable.create_write_transaction = r.wrap("Delta commit (deltalake)", DeltaTable.create_write_transaction)
        DeltaTable.update_incremental = r.wrap("handle refresh", DeltaTable.update_incremental)
        pq.write_table = r.wrap("rows to Parquet (pyarrow)", pq.write_table, nested=True)
        delta_rs.build_batch_frame = r.wrap("build DataFrame (py4j)", delta_rs.build_batch_frame)
        shutil.rmtree = r.wrap("staging cleanup", shutil.rmtree)

    def load(self, variant: str, updates: int) -> dict[str, Any]:
        """One load of the variant's table, measured, after switching the session-wide parts of its
        lean changes (the sink's own are its ``lean``)."""
        import pyspark.errors.utils as pyspark_errors

        from loader.loading.spark import set_write_checksums

        table = self.tables[variant]
        pyspark_errors._enable_debugging_cache = "no_call_sites" not in table.lean  # type: ignore[attr-defined]
        set_write_checksums(self.spark, "no_checksum_files" not in table.lean)
        batch = table.batch(updates, self.spec["rows_per_update"])
        jvm0 = self.jvm.total() if self.jvm else None
        cpu0 = time.process_time()
        result, record = self.recorder.run(lambda: table.sink.load(batch, SCHEMA))
        cpu = time.process_time() - cpu0
        jvm = self.jvm.total() - jvm0 if self.jvm and jvm0 is not None else None
        if result.skipped or result.rows != len(batch.updates) * self.spec["rows_per_update"]:
            wrote = f"wrote {result.rows} rows (skipped={result.skipped})"
            raise RuntimeError(f"{variant}: load of {batch.last_seq} {wrote}")
        return {**record, "python_cpu": cpu, "jvm_cpu": jvm}

    def reference(self) -> float:
        return timed(lambda: self.spark.range(100).count())[1]

    def hadoop_conf(self) -> dict[str, Any]:
        """The Hadoop configuration a write job serializes into its tasks (and a scan broadcasts):
        how many properties, from which files, how many bytes ``Configuration.write`` makes."""
        jvm = self.spark._jvm  # type: ignore[attr-defined]
        conf = self.spark._jsparkSession.sessionState().newHadoopConf()  # type: ignore[attr-defined]
        buffer = jvm.org.apache.hadoop.io.DataOutputBuffer()
        conf.write(buffer)
        sources: dict[str, int] = collections.Counter()
        iterator = conf.iterator()
        while iterator.hasNext():
            found = conf.getPropertySources(iterator.next().getKey())
            sources[found[0] if found else "unknown"] += 1
        return {"properties": conf.size(), "bytes": buffer.getLength(), "by_source": dict(sources)}

    def audit(self) -> dict[str, Any]:
        """Each table holds every row loaded once, and its app transaction is the last sequence."""
        from deltalake import DeltaTable

        from loader.durability.transactions import app_id
        from testing.tables import read_delta

        out = {}
        for name, table in self.tables.items():
            path = table.sink.table_path(table.name)
            ids = read_delta(path).column("id").to_pylist()
            txn = DeltaTable(str(path)).transaction_version(app_id(table.name))
            found = {"rows": len(ids), "expected": table.rows, "distinct": len(set(ids))}
            out[name] = found | {"txn": txn, "expected_txn": table.seq}
            out[name]["ok"] = len(ids) == len(set(ids)) == table.rows and txn == table.seq
        return out

    def stop(self) -> None:
        self._undo()
        self.spark.stop()


def rotate(items: list[str], k: int) -> list[str]:
    k %= len(items)
    return items[k:] + items[:k]


def run_changes(session: Session, spec: dict[str, Any]) -> dict[str, Any]:
    names = list(spec["variants"])
    results: dict[str, dict[int, list[dict[str, Any]]]] = {n: collections.defaultdict(list) for n in names}
    reference: list[float] = []
    rounds = spec["warmup"] + spec["runs"]
    for r in range(rounds):  # the first ``warmup`` rounds are left out
        for updates in spec["sizes"]:
            for name in rotate(names, r):
                results[name][updates].append(session.load(name, updates))
        reference.append(session.reference())
        log(f"round {r + 1}/{rounds}")
    variants = {n: {str(u): loads[spec["warmup"] :] for u, loads in by.items()} for n, by in results.items()}
    return {"variants": variants, "reference_range_count": reference[spec["warmup"] :]}


def run_breakdown(session: Session, spec: dict[str, Any]) -> dict[str, Any]:
    """Per batch size, rounds of one load per variant (alternating), each load with the JVM's
    CPU by thread kind around it."""
    names = list(spec["variants"])
    for r in range(spec["warmup"]):
        for updates in spec["sizes"]:
            for name in rotate(names, r):
                session.load(name, updates)
        log(f"warm-up round {r + 1}/{spec['warmup']}")
    blocks = {(name, updates): [] for updates in spec["sizes"] for name in names}
    threads: dict[tuple[str, int], dict[str, float]] = {key: collections.defaultdict(float) for key in blocks}
    for updates in spec["sizes"]:
        for r in range(spec["runs"]):
            for name in rotate(names, r):
                before = session.jvm.snapshot() if session.jvm else None
                blocks[name, updates].append(session.load(name, updates))
                if session.jvm and before is not None:
                    for kind, seconds in probes.cpu_delta(before, session.jvm.snapshot()).items():
                        threads[name, updates][kind] += seconds
        log(f"{updates} update(s): {spec['runs']} rounds done")
    out = []
    for (name, updates), loads in blocks.items():
        block = {"variant": name, "updates": updates, "rows": updates * spec["rows_per_update"], "loads": loads}
        cpu = {k: v / len(loads) for k, v in threads[name, updates].items()} if session.jvm else None
        out.append(block | {"jvm_threads": cpu})
    return {"blocks": out}


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="load-cost-", dir=spec.get("work_dir")))
    session: Session | None = None
    try:
        session = Session(spec, root)
        result: dict[str, Any] = {"spark_start_seconds": session.start_seconds, "app_id": session.app_id}
        breakdown = spec["mode"] == "breakdown"
        result |= run_breakdown(session, spec) if breakdown else run_changes(session, spec)
        result["audit"] = session.audit()
        if breakdown:
            result["hadoop_conf"] = session.hadoop_conf()
        events = session.events
        session.stop()
        session = None
        if events is not None and breakdown:
            # Each load's Spark job, found in the event log by the wall-clock marks of its write call.
            log_events = probes.read_event_log(events)
            for block in result["blocks"]:
                windows = [tuple(load["marks"]["Spark write job"]) for load in block["loads"]]
                block["spark_phases"] = probes.spark_phases(log_events, windows)  # type: ignore[arg-type]
    finally:
        if session is not None:
            session.stop()
        shutil.rmtree(root, ignore_errors=True)
    return result


if __name__ == "__main__":
    raise SystemExit(child.main(measure))
