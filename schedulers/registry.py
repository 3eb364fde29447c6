"""Policy names, as used in configuration, the CLI and reports."""

from __future__ import annotations

from collections.abc import Callable

from schedulers.base import Policy
from schedulers.fifo import FifoPolicy
from schedulers.group_and_run import GroupAndRunPolicy
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


def make_policy(name: str, **options: object) -> Policy:
    """A fresh policy by name; options a policy does not take are dropped."""
    factory = POLICIES.get(name)
    if factory is None:
        raise ValueError(f"unknown policy {name!r}; choose one of: {', '.join(POLICIES)}")
    accepted = POLICY_OPTIONS.get(name, ())
    return factory(**{key: value for key, value in options.items() if key in accepted and value is not None})
