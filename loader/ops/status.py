"""What GET /v1/tables reports about a table: one read model over every stage's state of it.

Freshness comes from the same ledger the metrics use, so the API and Prometheus agree.
"""

from __future__ import annotations

import time
from typing import Any

from loader.durability.catalog import Catalog
from loader.durability.quarantine import QuarantineStore
from loader.intake.sequencing import iso
from loader.intake.submission import Intake
from loader.loading.dispatcher import Dispatcher


class TableStatuses:
    """Each table's status: its declaration (catalog), intake's counters, the dispatcher's
    scheduling and freshness state, the pending store's bytes, the quarantine's count."""

    def __init__(self, catalog: Catalog, intake: Intake, dispatcher: Dispatcher, quarantine: QuarantineStore) -> None:
        self.catalog = catalog
        self.intake = intake
        self.dispatcher = dispatcher
        self.quarantine = quarantine

    def policy_groups(self) -> dict[str, int]:
        """Table -> index of its GroupAndRun group (empty for policies without groups)."""
        groups = self.dispatcher.policy.describe().get("groups") or []
        return {name: k for k, group in enumerate(groups) for name in group.get("tables", [])}

    def all(self) -> list[dict[str, Any]]:
        """Every table's status; the policy is described once, not once per table."""
        groups = self.policy_groups()
        return [self.table(name, groups) for name in self.intake.tables]

    def table(self, table: str, groups: dict[str, int] | None = None) -> dict[str, Any]:
        """NotFound for an unknown table; otherwise staleness, pending work and load progress."""
        entry = self.catalog.entry(table)
        d = self.dispatcher
        tid = d.index[table]
        state = d.states[tid]
        sequence = self.intake.tables[table]
        now = time.time()
        group = (self.policy_groups() if groups is None else groups).get(table)
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
            "last_sequence": sequence.next_seq - 1,
            "last_loaded_sequence": sequence.committed_seq,
            "delta_version": entry.delta_version,
            "alpha": state.alpha,
            "overhead_seconds": state.overhead,
            "group": group,
            "failures": d.failures(table),
            "quarantined_updates": sum(len(e.updates) for e in self.quarantine.active(table)),
        }
