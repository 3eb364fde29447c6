"""What GET /v1/tables reports about a table: one read model over the service's parts.

Freshness comes from the same ledger the metrics use, so the API and Prometheus agree.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from loader.intake.requests import iso

if TYPE_CHECKING:
    from loader.service import LoaderService


def policy_groups(service: LoaderService) -> dict[str, int]:
    """Table -> index of its GroupAndRun group (empty for policies without groups)."""
    groups = service.dispatcher.policy.describe().get("groups") or []
    return {name: k for k, group in enumerate(groups) for name in group.get("tables", [])}


def all_table_statuses(service: LoaderService) -> list[dict[str, Any]]:
    """Every table's status; the policy is described once, not once per table."""
    groups = policy_groups(service)
    return [table_status(service, name, groups) for name in service.tables]


def table_status(service: LoaderService, table: str, groups: dict[str, int] | None = None) -> dict[str, Any]:
    """NotFound for an unknown table; otherwise staleness, pending work and load progress."""
    entry = service.entry(table)
    d = service.dispatcher
    tid = d.index[table]
    state = d.states[tid]
    now = time.time()
    group = (policy_groups(service) if groups is None else groups).get(table)
    return {
        "name": table,
        "schema": entry.schema.model_dump(mode="json"),
        "weight": state.weight,
        "period_hint": entry.period_hint,
        "period_estimate": state.period_estimate,
        "paused": entry.paused,
        "running": state.running,
        "current_upto": d.ledger.current_upto(tid),
        "current_upto_iso": iso(d.ledger.current_upto(tid)),
        "staleness_seconds": d.ledger.staleness_at(tid, now),
        "staleness_integral": d.ledger.staleness_integral_at(tid, now),
        # Up to the finish of the last load, as the simulator counts it (comparisons).
        "staleness_integral_at_last_load": d.ledger.table(tid).staleness,
        "low_bound": d.ledger.low_bound(tid),
        "max_stretch": d.ledger.max_stretch(tid),
        "pending_updates": state.pending_count,
        "pending_bytes": d.pending.bytes(table),
        "pending_resident_bytes": d.pending.resident_bytes(table),
        "pending_spilled_bytes": d.pending.spilled_bytes(table),
        "last_sequence": service.tables[table].next_seq - 1,
        "last_loaded_sequence": service.tables[table].committed_seq,
        "delta_version": entry.delta_version,
        "alpha": state.alpha,
        "overhead_seconds": state.overhead,
        "group": group,
        "failures": d.failures(table),
        "quarantined_updates": sum(len(e.updates) for e in service.quarantine.active(table))
        if service.quarantine is not None
        else 0,
    }
