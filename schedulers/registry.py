"""Policy names, as used in configuration, the CLI and reports."""

from __future__ import annotations

from collections.abc import Callable

from schedulers.base import Policy
from schedulers.fifo import FifoPolicy
from schedulers.group_and_run import GroupAndRunPolicy
from schedulers.job_groups import with_groups
from schedulers.max_benefit import MaxBenefitPolicy
from schedulers.myopic import MyopicPolicy
from schedulers.peers import IntervalPolicy, NoBatchingPolicy

POLICIES: dict[str, Callable[..., Policy]] = {
    "fifo": FifoPolicy,
    "myopic": MyopicPolicy,
    "group-and-run": GroupAndRunPolicy,
    "group-and-run-wc": lambda **options: GroupAndRunPolicy(work_conserving=True, **options),
    "max-benefit": MaxBenefitPolicy,
    "interval": IntervalPolicy,
    "no-batching": NoBatchingPolicy,
}

#: Options each policy accepts (the rest are ignored, so one option set serves ``compare``).
POLICY_OPTIONS: dict[str, tuple[str, ...]] = {
    "group-and-run": ("tolerance", "regroup_gap"),
    "group-and-run-wc": ("tolerance", "regroup_gap"),
    "interval": ("period", "default_period"),
}


#: Policies that can be offered multi-table jobs (eager and worker-agnostic; ``schedulers.job_groups``).
GROUPABLE: tuple[str, ...] = ("fifo", "myopic", "max-benefit")


def make_policy(
    name: str, *, max_tables_per_job: int = 1, job_overhead: float = 0.0, group_rule: str = "rate", **options: object
) -> Policy:
    """A fresh policy by name; options a policy does not take are dropped.

    ``max_tables_per_job`` > 1 offers the policy multi-table jobs (``schedulers.job_groups``);
    1 is the paper's single-table policy, unchanged.
    """
    factory = POLICIES.get(name)
    if factory is None:
        raise ValueError(f"unknown policy {name!r}; choose one of: {', '.join(POLICIES)}")
    accepted = POLICY_OPTIONS.get(name, ())
    policy = factory(**{key: value for key, value in options.items() if key in accepted and value is not None})
    return with_groups(policy, max_tables_per_job, job_overhead, group_rule)
