"""Online estimates of a table's processing-time model: duration = overhead + alpha * length.

Each finished batch gives one observation (batch length in seconds of data, measured
duration). An exponentially weighted least-squares fit (forgetting factor ``decay``)
tracks drift, e.g. a table whose rows grow wider. With too little spread in lengths
to separate the two terms, alpha keeps its previous value and overhead absorbs the rest.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DecayedLine:
    """Exponentially weighted sums for a least-squares line y = a + b * x (forgetting factor
    ``decay``), shared by both estimates below."""

    decay: float
    _w: float = 0.0
    _x: float = 0.0
    _y: float = 0.0
    _xx: float = 0.0
    _xy: float = 0.0

    def add(self, x: float, y: float) -> tuple[float, float, float, float]:
        """Fold in one point; returns (mean x, mean y, variance of x, covariance)."""
        d = self.decay
        self._w = d * self._w + 1.0
        self._x = d * self._x + x
        self._y = d * self._y + y
        self._xx = d * self._xx + x * x
        self._xy = d * self._xy + x * y
        mean_x, mean_y = self._x / self._w, self._y / self._w
        return mean_x, mean_y, self._xx / self._w - mean_x * mean_x, self._xy / self._w - mean_x * mean_y


#: The least coefficient of variation of the lengths seen for the slope to be fitted.
MIN_SPREAD = 0.05


@dataclass
class CostEstimate:
    alpha: float
    overhead: float
    decay: float = 0.9
    observations: int = 0

    def __post_init__(self) -> None:
        self._line = DecayedLine(self.decay)
        self._rows = 0.0  # decayed sums of rows written and of length loaded
        self._length = 0.0

    def observe(self, length: float, duration: float, rows: int | None = None) -> None:
        """One batch: its length (seconds of data, or keys), its duration and, when known,
        the rows it wrote (only for ``seconds_per_row``: the model itself is per length)."""
        mean_x, mean_y, var_x, cov = self._line.add(length, duration)
        self.observations += 1
        # A slope needs lengths that differ: from nearly equal ones (a latest table's batches of
        # 99 or 100 keys) it is noise (measured: 1e6 s a key), so it needs a spread of MIN_SPREAD.
        if self.observations >= 3 and var_x > max(1e-9, (MIN_SPREAD * mean_x) ** 2):
            self.alpha = max(0.0, cov / var_x)
        self.overhead = max(0.0, mean_y - self.alpha * mean_x)
        if rows is not None and length > 0:
            self._rows = self.decay * self._rows + rows
            self._length = self.decay * self._length + length

    @property
    def seconds_per_row(self) -> float | None:
        """alpha in the unit people read: load seconds per row written (alpha over the rows a
        second of data, or a key, brought lately); None before a batch with rows."""
        return self.alpha * self._length / self._rows if self._rows > 0 else None

    def predict(self, length: float) -> float:
        return self.overhead + self.alpha * length


@dataclass
class JobOverheadEstimate:
    """The fixed cost O every Spark job pays whatever it loads, shared by the tables of a
    multi-table job (schedulers/job_groups.py's cost model).

    A job of k tables lasting D seconds is one observation of D - sum of alpha_i * L_i
    = O + k * o, with o the mean extra overhead a table adds (its own files and Delta
    commit). An exponentially weighted least-squares fit over k gives O as the intercept:
    the information is in how a job's duration grows with the tables it holds, which
    single-table jobs alone cannot tell apart from a table's own overhead. Until jobs of
    different sizes have been seen, O keeps its starting value (``[loading]
    job_overhead_seconds``).
    """

    overhead: float
    per_table: float = 0.0
    decay: float = 0.98
    observations: int = 0

    def __post_init__(self) -> None:
        self._line = DecayedLine(self.decay)

    def observe(self, tables: int, duration: float, variable_work: float) -> None:
        """One finished job of ``tables`` tables; ``variable_work`` = sum of alpha_i * L_i."""
        mean_x, mean_y, var_x, cov = self._line.add(float(tables), max(0.0, duration - variable_work))
        self.observations += 1
        if var_x > 0.05:  # job sizes differ enough to separate O from the per-table part
            self.per_table = max(0.0, cov / var_x)
            self.overhead = max(0.0, mean_y - self.per_table * mean_x)

    def attribute(self, duration: float, work: list[float]) -> list[float]:
        """Each table's share of a job, as the duration a job of that table alone would have
        had: O plus its part of the rest, in proportion to ``work``.

        ``work`` should be each table's measured own seconds (``LoadResult.own_seconds``).
        Splitting by the estimates' own predictions instead feeds them back into themselves:
        a table once predicted dear is charged more, stays dear, and the grouping rule,
        which ranks tables by benefit per predicted second, leaves it out of groups
        (measured: 200 tables whose estimates spread 0 to 0.3 s of overhead, the dearest
        loaded rarely)."""
        total = sum(work)
        rest = max(0.0, duration - self.overhead)
        if total <= 0.0:
            return [self.overhead + rest / len(work)] * len(work)
        return [self.overhead + rest * w / total for w in work]
