"""A batch's in-memory rows on their way to a worker process: one Parquet file per batch.

Rows live in the service process (the pending store); a worker process cannot see them.
Pickling them would cost the service process the serialisation under its GIL, which is
what issue 15 moves out of it. Instead pyarrow writes them, with the GIL released, as one
uncompressed Parquet file shaped like a spill segment (the table's Arrow schema, updates
in sequence order), and each update is described to the worker as a ``SpilledRows`` slice
of it, so the sinks read it with the code that reads spill segments, by path, also on a
cluster's executors. Spill segments and landing copies cross as they are: paths.

In the worker, a small batch's rows are read back into memory (:func:`take_over`) so the
sink's fastest path for small batches (rows inline in the plan, ``inline_small_rows``)
stays the path they take; larger ones Spark's executors read from the file itself.

The service deletes a batch's file once the worker answered (or died); files left by a
crash are removed with the directory's other contents at the next start.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from loader.core.evolution import conform_rows
from loader.core.schema import TableSchema
from loader.core.updates import Batch, SpilledRows, Update

SUFFIX = ".parquet"


def hand_off(batch: Batch, schema: TableSchema, directory: Path) -> tuple[Batch, Path | None]:
    """The batch with no rows in memory: its in-memory rows written to one file in
    ``directory`` (returned, None when it had none) and referred to by slices."""
    held = [u.rows for u in batch.updates if u.rows is not None]
    if not held:
        return batch, None
    # Rows of the table's schema (as intake and the WAL's replay make them) pass as they are:
    # a cast per update holds the GIL ~20 us each, ms per batch.
    data = pa.concat_tables([conform_rows(rows, schema) for rows in held])
    path = directory / f"{batch.table}-{batch.last_seq}-{uuid.uuid4().hex}{SUFFIX}"
    pq.write_table(data, path, compression="none", use_dictionary=False, write_statistics=False)
    updates: list[Update] = []
    offset = 0
    for update in batch.updates:
        if update.rows is None:
            updates.append(update)
            continue
        count = update.rows.num_rows
        ref = SpilledRows(str(path), offset, count, data.num_rows, update.rows.get_total_buffer_size())
        updates.append(dataclasses.replace(update, rows=None, spilled=ref))
        offset += count
    return Batch(batch.table, tuple(updates)), path


def take_over(batch: Batch, handoff: str | None, inline_max_bytes: int) -> Batch:
    """In the worker: the batch as the sink should see it. Rows of a handoff file of at most
    ``inline_max_bytes`` (their Arrow size) are back in memory; others stay file slices."""
    if handoff is None:
        return batch
    slices = [u.spilled for u in batch.updates if u.spilled is not None and u.spilled.path == handoff]
    if sum(s.nbytes for s in slices) > inline_max_bytes:
        return batch
    data = pq.read_table(handoff)
    updates = tuple(
        dataclasses.replace(u, rows=data.slice(u.spilled.offset, u.spilled.rows), spilled=None)
        if u.spilled is not None and u.spilled.path == handoff
        else u
        for u in batch.updates
    )
    return Batch(batch.table, updates)
