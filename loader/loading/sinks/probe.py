"""Which Delta writer a Spark session can run: native Delta Spark needs its JVM jars."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from loader.core.errors import StartError
from loader.loading.spark import delta_jvm_available

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

WriterKind = Literal["auto", "delta-rs", "delta-spark"]
Writer = Literal["delta-rs", "delta-spark"]

MISSING_JARS = (
    "writer=delta-spark needs Delta Lake's JVM classes (io.delta.sql.DeltaSparkSessionExtension), "
    "which this Spark session does not have: set spark.jars.packages=io.delta:delta-spark_4.2_2.13:4.4.1 "
    "(needs Maven access; or spark.jars naming the downloaded jars) or use writer=delta-rs"
)


class DeltaJarsMissing(RuntimeError, StartError):
    """delta-spark was requested but the session cannot load Delta's classes."""


def choose_writer(kind: WriterKind, spark: SparkSession) -> Writer:
    """``auto`` takes the native writer when its jars are loadable, else delta-rs."""
    if kind == "delta-rs":
        return "delta-rs"
    if kind not in ("auto", "delta-spark"):
        raise ValueError(f"unknown writer {kind!r}; choose auto, delta-rs or delta-spark")
    native = delta_jvm_available(spark)
    if kind == "delta-spark" and not native:
        raise DeltaJarsMissing(MISSING_JARS)
    return "delta-spark" if native else "delta-rs"
