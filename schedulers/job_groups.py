"""Multi-table jobs: a free worker loads a group of tables in one job and pays the job's
fixed cost once.

Cost model. The paper's single-table job costs overhead_i + alpha_i * L_i (Bateni et al.
section 2). Part of overhead_i is the cost of any job at all (for the loader: starting a
Spark job, planning, launching its tasks), the same for every table; call it O, the shared
overhead. A job loading the tables of a group G costs

    O + sum over i in G of m_i,   m_i = max(0, overhead_i - O) + alpha_i * L_i

so a group of one costs exactly the paper's overhead_i + alpha_i * L_i whenever
overhead_i >= O. The driver (simulator or service) tells the policy O through
``Policy.observe_job_overhead``; the service measures it online (loader/loading/estimates.py).

The rule (``GroupedPolicy``). The base policy (MYOPIC, max-benefit, ... unchanged) picks
the job's first table, exactly the table it would load alone. The job then takes further
available tables j in decreasing order of their marginal benefit rate w_j * L_j / m_j
(weighted staleness reduction per second of extra work: loading j makes it current up to
its newest release, lowering its staleness by L_j) while the group holds fewer than
``max_tables`` tables and j passes the rule's test. W_G = sum over i in G of w_i * L_i.

- ``rate`` (default): add j while w_j * L_j / m_j >= W_G / C(G), C(G) the job's predicted
  cost so far. That is max-benefit's criterion (benefit per second of work, Golab et al.
  ICDE 2009) applied to the job as the unit: j joins when its own rate beats the rate of
  the job without it, so the job's rate only grows. A table left out would start in a
  later job that pays O again, so its rate there is w_j * L_j / (O + m_j), below its
  marginal rate here: what keeps a table out is a job whose members reduce staleness
  faster than it would (j has little pending, or costs much per row).
- ``delay`` (one job of look-ahead): add j while w_j * L_j * O >= m_j * W_G. In this job
  j's reduction arrives m_j after the group's, and delays the group's W_G by m_j (a loss
  of m_j * W_G staleness-seconds); left for this worker's next job, j would pay O more (a
  gain of w_j * L_j * O by taking it now). Conservative: in an overloaded system a table
  left out waits much longer than one O, so this rule forms groups that are too small.

Measured (simulator, Poisson arrivals, overhead 0.17 s of which O = 0.15 s, 2 workers;
BENCHMARKS.md, scheduling): at 200 and 1,000 tables ``rate`` is the fresher, and ``delay``
stops at about 5 tables per job. With both, the candidate with the best rate has the best
gain-to-loss ratio and W_G only grows, so the first candidate refused ends the group.

If another worker is idle now (the driver offers free workers in turn and says how many
remain), j would instead start at once on that worker, in parallel: the job stays a single
table and the idle workers share the due tables. With O = 0 nothing is shared and no
group forms, so ``GroupedPolicy`` with ``max_tables=1``, O = 0 or an idle worker is its
base policy.
"""

from __future__ import annotations

from typing import Any

from schedulers.base import LazyHeap, Policy, TableInfo, TableView

#: How a job grows: "rate" (the default) or "delay" (see the module docstring).
RULES = ("rate", "delay")
#: Marginal costs below this count as this (a zero-cost table would divide by zero).
MIN_SECONDS = 1e-6
#: The filler's index is re-keyed when the shared overhead moved by more than this, relative.
REKEY_TOLERANCE = 0.1


def marginal_cost(info: TableInfo, job_overhead: float) -> float:
    """m_i: what table i adds to a job that already pays the shared overhead O (alpha_i * L_i
    is ``batch_work``: a latest table's is per key, ``schedulers.model.TableState``)."""
    return max(0.0, info.overhead - job_overhead) + info.batch_work


def job_cost(tables: list[TableInfo], job_overhead: float) -> float:
    """Predicted seconds of one job loading every table's next batch (the model above)."""
    if len(tables) == 1:
        info = tables[0]
        return max(info.overhead, job_overhead) + info.batch_work
    return job_overhead + sum(marginal_cost(info, job_overhead) for info in tables)


class GroupedPolicy(Policy):
    """Any eager, worker-agnostic policy, offered whole groups (see the module docstring)."""

    def __init__(self, base: Policy, max_tables: int, job_overhead: float = 0.0, rule: str = "rate") -> None:
        if rule not in RULES:
            raise ValueError(f"unknown grouping rule {rule!r}; choose one of: {', '.join(RULES)}")
        if max_tables < 1:
            raise ValueError("max_tables_per_job must be at least 1")
        if not base.worker_agnostic or base.timed:
            raise ValueError(
                f"policy {base.name!r} assigns tables to particular workers or times; multi-table jobs "
                "need an eager, worker-agnostic policy (myopic, max-benefit, fifo): set max_tables_per_job = 1"
            )
        self.base = base
        self.name = f"{base.name}+groups({max_tables})"  # type: ignore[misc]
        self.eager = base.eager  # type: ignore[misc]
        self.batch_limit = base.batch_limit
        self.max_tables = max_tables
        self.rule = rule
        self.job_overhead = max(0.0, job_overhead)
        self._keyed_overhead = self.job_overhead
        self._filler = LazyHeap()
        self.jobs = 0
        self.grouped_tables = 0

    def attach(self, view: TableView, workers: int) -> None:
        self.view = view
        self.workers = workers
        self._filler = LazyHeap()
        self.base.attach(view, workers)
        for tid in range(len(view)):
            self._index(tid)

    def table_added(self, tid: int) -> None:
        self.base.table_added(tid)

    def observe_job_overhead(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.job_overhead = seconds
        self.base.observe_job_overhead(seconds)
        keyed = self._keyed_overhead
        if abs(seconds - keyed) > REKEY_TOLERANCE * max(keyed, MIN_SECONDS):
            self._keyed_overhead = seconds
            for tid in range(len(self.view)):
                self._index(tid)

    def _index(self, tid: int) -> None:
        info = self.view[tid]
        if not info.available:
            self._filler.set(tid, None)
            return
        marginal = max(0.0, info.overhead - self._keyed_overhead) + info.batch_work
        rate = info.weight * info.batch_length / (marginal if marginal > MIN_SECONDS else MIN_SECONDS)
        self._filler.set(tid, (-rate, info.oldest_pending))

    def notify(self, tid: int, now: float) -> None:
        self.base.notify(tid, now)
        self._index(tid)

    def choose(self, worker: int, now: float) -> int | None:
        return self.base.choose(worker, now)

    def choose_group(self, worker: int, now: float, idle_after: int = 0) -> list[int]:
        head = self.base.choose(worker, now)
        if head is None:
            return []
        group = [head]
        overhead = self.job_overhead
        if self.max_tables > 1 and overhead > 0.0 and idle_after == 0:
            view = self.view
            first = view[head]
            weight_sum = first.weight * first.batch_length
            # The job's cost so far (rate rule) or the fixed O (delay rule): the divisor of W_G.
            cost = job_cost([first], overhead) if self.rule == "rate" else overhead
            refused: list[int] = []
            while len(group) < self.max_tables:
                top = self._filler.peek()
                if top is None:
                    break
                tid = top[1]
                if tid == head:
                    self._filler.pop()
                    refused.append(tid)
                    continue
                info = view[tid]
                gain = info.weight * info.batch_length
                marginal = max(MIN_SECONDS, marginal_cost(info, overhead))
                if gain * cost < marginal * weight_sum:
                    break
                self._filler.pop()
                group.append(tid)
                weight_sum += gain
                if self.rule == "rate":
                    cost += marginal
            for tid in refused:
                self._index(tid)
        self.jobs += 1
        self.grouped_tables += len(group)
        return group

    def describe(self) -> dict[str, Any]:
        return {
            **self.base.describe(),
            "job_groups": {
                "max_tables_per_job": self.max_tables,
                "job_overhead_seconds": self.job_overhead,
                "jobs": self.jobs,
                "mean_tables_per_job": self.grouped_tables / self.jobs if self.jobs else None,
            },
        }


def with_groups(policy: Policy, max_tables: int, job_overhead: float = 0.0, rule: str = "rate") -> Policy:
    """The configured policy, offered multi-table jobs when ``max_tables`` > 1."""
    if max_tables <= 1:
        return policy
    return GroupedPolicy(policy, max_tables, job_overhead, rule)
