"""A batch's rows cross to a worker process as a file and slices of it, never pickled."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

from loader.core.updates import Batch, FileFormat
from loader.loading.workers.handoff import hand_off, take_over
from loader.loading.workers.messages import LoadRequest
from tests.loader.loading.test_sinks import ORDERS, file_update, order_rows, rows_update


def _batch(tmp_path: Path, sizes: tuple[int, ...]) -> Batch:
    rng = random.Random(3)
    landing = tmp_path / "orders.csv"
    landing.write_text("id,name,amount\n1,ada,1.5\n", encoding="utf-8")
    updates, first = [], 0
    for seq, size in enumerate(sizes, start=1):
        updates.append(rows_update("orders", seq, order_rows(rng, range(first, first + size))))
        first += size
    updates.append(file_update("orders", len(sizes) + 1, landing, FileFormat.csv))
    return Batch("orders", tuple(updates))


def test_rows_cross_as_one_file_and_small_batches_come_back_into_memory(tmp_path: Path) -> None:
    batch = _batch(tmp_path, (3, 0, 5))
    moved, path = hand_off(batch, ORDERS, tmp_path)
    assert path is not None and path.is_file()
    assert all(u.rows is None for u in moved.updates)
    assert [(u.spilled.offset, u.spilled.rows) for u in moved.updates[:3]] == [(0, 3), (3, 0), (3, 5)]  # type: ignore[union-attr]
    assert moved.updates[3].files == batch.updates[3].files and moved.updates[3].spilled is None
    request = LoadRequest((moved,), (ORDERS,), (str(path),), False, "sc://x:1", 1.0)
    assert len(pickle.dumps(request)) < 4096  # a descriptor: no row data

    back = take_over(moved, str(path), inline_max_bytes=1 << 20)
    for before, after in zip(batch.updates[:3], back.updates[:3]):
        assert after.spilled is None and after.rows is not None
        assert after.rows.equals(before.rows.cast(ORDERS.arrow()))  # type: ignore[union-attr]
    assert [u.seq for u in back.updates] == [u.seq for u in batch.updates]


def test_large_batches_stay_file_slices_for_the_executors(tmp_path: Path) -> None:
    moved, path = hand_off(_batch(tmp_path, (20_000, 20_000)), ORDERS, tmp_path)
    kept = take_over(moved, str(path), inline_max_bytes=1 << 20)
    assert kept == moved
    assert sum(ref.rows for ref in kept.spilled) == 40_000


def test_a_batch_without_rows_in_memory_needs_no_file(tmp_path: Path) -> None:
    batch = _batch(tmp_path, ())
    moved, path = hand_off(batch, ORDERS, tmp_path)
    assert path is None and moved == batch
    assert take_over(moved, None, 1 << 20) == batch
    assert not list(tmp_path.glob("*.parquet"))
