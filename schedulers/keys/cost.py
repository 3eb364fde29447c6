"""What a latest table's batch costs beyond its keys: the stored rows its upsert rewrites.

A latest table's batch costs ``overhead + per_key * keys`` (schedulers/model.py) plus what
its upsert touches of the table. A MERGE (``upsert = "merge"``) rewrites every data file
holding one of the batch's keys and copies that file's other rows: with ``k`` keys spread
at random over ``S`` stored keys in files of ``f`` keys each, a file holds none of them with
probability ``(1 - f/S)^k``, so the batch copies about ``S * (1 - (1 - f/S)^k)`` rows (``k``
counting only the keys the table holds, a share learned from the loads: a new key falls in
no file), a
cost that grows with the table, not the batch (BENCHMARKS.md: 100 keys into 100M keys cost
75x an append). The deletion-vector upsert rewrites nothing: ``f = 0``, and its search (a
row group per key) is part of ``per_key``. Pure, as every scheduling model here: the
simulator runs it as the truth, the live dispatcher fits ``per_row`` from the MERGE's own
timing and reads ``S`` and ``f`` from each load's result (loader/loading/dispatcher.py).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: Smoothing of the learned seconds per copied row (as the other online estimates).
PER_ROW_GAIN = 0.25
#: Rows a MERGE must have copied for its timing to teach ``per_row`` (below it the fixed
#: part of the MERGE, its scan and commit, dominates the sample).
MIN_COPIED = 10_000


class Rewrite(BaseModel):
    """What a latest table's upsert rewrites of the table, and what a rewritten row costs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Keys (rows) the table holds.
    stored_keys: int = Field(default=0, ge=0, strict=True)
    #: Keys a data file holds, each file rewritten whole when a batch key falls in it
    #: (0: the upsert rewrites no file, as with deletion vectors).
    file_keys: int = Field(default=0, ge=0, strict=True)
    #: Seconds per row the rewrite copies.
    per_row: float = Field(default=0.0, ge=0.0, allow_inf_nan=False, strict=True)
    #: The share of a batch's keys the table holds already (the others touch no file).
    held_share: float = Field(default=1.0, ge=0.0, le=1.0, allow_inf_nan=False)

    def rows(self, keys: int) -> float:
        """Expected rows a batch of ``keys`` keys (spread at random) rewrites."""
        stored = self.stored_keys
        if keys <= 0 or stored <= 0 or self.file_keys <= 0:
            return 0.0
        share = min(1.0, self.file_keys / stored)
        return stored * (1.0 - (1.0 - share) ** (keys * self.held_share))

    def seconds(self, keys: int) -> float:
        """Expected seconds a batch of ``keys`` keys spends rewriting."""
        return self.per_row * self.rows(keys)

    def grown(self, new_keys: int) -> Rewrite:
        """The table after a batch stored ``new_keys`` keys it did not hold."""
        return self.model_copy(update={"stored_keys": self.stored_keys + new_keys}) if new_keys else self


def learned(
    rewrite: Rewrite,
    stored_rows: int,
    file_rows: float,
    copied: float,
    seconds: float | None,
    held: tuple[float, float] | None = None,
) -> Rewrite:
    """``rewrite`` after a load that left ``stored_rows`` rows in files of ``file_rows`` rows
    (0: an upsert that rewrites none) and copied ``copied`` rows in ``seconds`` (the
    rewrite's own time; None: unknown); ``held``: of its keys, how many the table held
    (updated) and how many it did not (inserted)."""
    per_row, share = rewrite.per_row, rewrite.held_share
    if seconds is not None and copied >= MIN_COPIED:
        sample = seconds / copied
        per_row = sample if per_row == 0.0 else per_row + PER_ROW_GAIN * (sample - per_row)
    if held is not None and sum(held) > 0:
        share += PER_ROW_GAIN * (held[0] / sum(held) - share)
    return Rewrite(
        stored_keys=max(0, int(stored_rows)), file_keys=max(0, round(file_rows)), per_row=per_row, held_share=share
    )
