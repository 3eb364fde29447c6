"""A job's cost as the live machinery runs it, stage by stage (issue 37, part 3).

The paper's model (Bateni et al., section 2) gives a batch one processing time, and the
table-level model of ``schedulers.job_groups`` gives a multi-table job one duration: its
tables become visible together at its end. The live service runs a job in stages
(loader/core/timeline.py): the choice and the hand-off, the Spark job, then each table's
publish and Delta commit (a few at once on the worker's table threads), then the reply. So a
job's first table is visible well before its last, and the worker is busy a little after the
last commit. A simulator that knows this predicts what an outside reader of the Delta logs sees.

:class:`StageCosts` is that model, each part fixed + per table (n tables in the job):

- ``before``: from the choice to the Spark job's start (dispatch, hand-off, transport, prepare);
- ``spark``: the Spark job; its per-table part holds the measured batches' data work, so the
  model is for batches like the measured ones (``offsets`` takes extra work per member; the
  simulator passes none: a what-if on much larger batches needs the table-level model);
- ``commit``: one table's commit as they complete: the time between successive commits' ends
  (with the table threads, the rate at which they finish), the tables in the job's order;
- ``after``: from the last commit to the worker's report (the reply).

:func:`fit_stage_costs` fits it to measured timelines (least squares of each part against
n, the way ``loader.loading.estimates`` fits alpha and the overhead). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class StageCosts:
    """Seconds of each part of a job of n tables: ``fixed + per_table * n``."""

    before_fixed: float = 0.0
    before_per_table: float = 0.0
    spark_fixed: float = 0.0
    spark_per_table: float = 0.0
    commit_per_table: float = 0.0
    after_fixed: float = 0.0
    #: Jobs the fit saw (0: set by hand).
    jobs: int = 0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if name != "jobs" and not value >= 0.0:
                raise ValueError(f"stage cost {name} must be a number of seconds >= 0, not {value!r}")

    def offsets(self, works: Sequence[float]) -> tuple[list[float], float]:
        """For a job whose members have data work ``works`` (alpha_i * L_i, in the job's
        order): seconds from its start until each member's commit, and until its end."""
        n = len(works)
        at = self.before_fixed + self.before_per_table * n + self.spark_fixed + self.spark_per_table * n + sum(works)
        visible = []
        for _ in works:
            at += self.commit_per_table
            visible.append(at)
        return visible, at + self.after_fixed

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class MeasuredJob:
    """What the fit needs of one live job's timeline (seconds)."""

    tables: int
    before: float
    spark: float
    #: Each table's publish + commit, in commit order.
    commits: Sequence[float]
    after: float


def _line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least squares ``y = a + b x``, both clipped at 0 (a cost is never negative); one
    distinct x: its mean as the fixed part. Written out: two sums, not worth numpy here
    (this package imports nothing outside the standard library)."""
    if not points:
        return 0.0, 0.0
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx <= 1e-12:
        return max(0.0, my), 0.0
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    if b < 0:
        return max(0.0, my), 0.0
    a = my - b * mx
    if a < 0:
        return 0.0, sum(x * y for x, y in points) / sum(x * x for x, _ in points)
    return a, b


def fit_stage_costs(jobs: Iterable[MeasuredJob]) -> StageCosts:
    """The stage costs that fit the measured jobs best (see the module docstring)."""
    jobs = list(jobs)
    before = _line([(j.tables, j.before) for j in jobs])
    spark = _line([(j.tables, j.spark) for j in jobs])
    commits = [c for j in jobs for c in j.commits]
    after = _line([(j.tables, j.after) for j in jobs])
    return StageCosts(
        before_fixed=before[0],
        before_per_table=before[1],
        spark_fixed=spark[0],
        spark_per_table=spark[1],
        commit_per_table=sum(commits) / len(commits) if commits else 0.0,
        after_fixed=after[0] + after[1] * (sum(j.tables for j in jobs) / len(jobs) if jobs else 0.0),
        jobs=len(jobs),
    )
