"""Delta writers behind the Sink protocol (loader/loading/sinks/base.py) and the factory choosing one.

Importing this package stays cheap (``loader.loading.sinks.base`` is imported by the service
without Spark); the Spark-backed sinks are imported when a sink is made.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from loader.loading.sinks.base import Sink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from loader.loading.sinks.probe import WriterKind

__all__ = ["Sink", "make_sink"]


def make_sink(kind: WriterKind, warehouse: Path, spark: SparkSession, lean: Iterable[str] | None = None) -> Sink:
    """The sink for ``writer = kind``; DeltaJarsMissing if delta-spark cannot run here.

    ``lean``: the lean changes its code paths follow (loader/loading/spark.py); None = the default ones.
    """
    from loader.loading.sinks.probe import choose_writer
    from loader.loading.spark import DEFAULT_LEAN

    changes = DEFAULT_LEAN if lean is None else lean
    if choose_writer(kind, spark) == "delta-spark":
        from loader.loading.sinks.delta_spark import DeltaSparkSink

        return DeltaSparkSink(Path(warehouse), spark, changes)
    from loader.loading.sinks.delta_rs import DeltaRsSink

    return DeltaRsSink(Path(warehouse), spark, changes)
