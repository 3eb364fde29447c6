"""Tables' staleness over a window (loader/ops/history.py, GET /v1/tables:history): the
sawtooth drawn from the record of finished batches, exact, never sampled."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import pytest

from loader.core.errors import NotFound
from loader.loading.observed import ObservedRecord
from loader.ops.history import split_names, staleness_lines, thin
from schedulers.freshness import FreshnessLedger
from testing.service_harness import OPERATOR, ORDERS_ONLY, PRODUCER, Harness

#: (finish, newest release loaded) of three loads of a table current up to 100 when added at 100.
LOADS = [(110.0, 105.0), (120.0, 118.0), (130.0, 125.0)]


def _recorded(capacity: int) -> Any:
    """A dispatcher's freshness ledger and batch ring, fed with ``LOADS``."""
    ledger = FreshnessLedger()
    ledger.add_table("a", origin=100.0)
    observed = ObservedRecord(max_updates=0, max_batches=capacity)
    observed.add_table(0, 100.0, added=100.0)
    previous = 100.0
    for finish, last in LOADS:
        ledger.record_batch(0, finish, [last], 0, 1, previous)
        observed.batch(0, 0, finish - 1.0, finish, last, last, 1)
        previous = last
    return SimpleNamespace(index={"a": 0}, ledger=ledger, observed=observed)


def _points(dispatcher: Any, since: float, now: float = 135.0) -> list[tuple[float, float]]:
    [line] = staleness_lines(dispatcher, ["a"], since, now)
    assert line.staleness_seconds == now - 125.0
    return line.points


def test_a_line_drops_at_each_load_and_grows_with_slope_one_between() -> None:
    assert _points(_recorded(100), since=90.0) == [
        (100.0, 0.0),  # added at 100, current up to 100: known from there, not from 90
        (110.0, 10.0),
        (110.0, 5.0),
        (120.0, 15.0),
        (120.0, 2.0),
        (130.0, 12.0),
        (130.0, 5.0),
        (135.0, 10.0),
    ]


def test_a_window_starts_at_what_the_table_was_current_up_to_then() -> None:
    assert _points(_recorded(100), since=115.0) == [
        (115.0, 10.0),
        (120.0, 15.0),
        (120.0, 2.0),
        (130.0, 12.0),
        (130.0, 5.0),
        (135.0, 10.0),
    ]
    assert _points(_recorded(100), since=132.0) == [(132.0, 7.0), (135.0, 10.0)]


def test_a_line_starts_where_the_ring_stops_knowing() -> None:
    """The ring dropped the first load: the line starts at that load's finish, after it."""
    assert _points(_recorded(2), since=90.0) == [
        (110.0, 5.0),
        (120.0, 15.0),
        (120.0, 2.0),
        (130.0, 12.0),
        (130.0, 5.0),
        (135.0, 10.0),
    ]
    # With the record off only the last load is known (from the ledger).
    assert _points(_recorded(0), since=90.0) == [(130.0, 5.0), (135.0, 10.0)]


def test_an_unknown_table_or_a_bad_list_is_refused() -> None:
    with pytest.raises(NotFound):
        staleness_lines(_recorded(10), ["a", "nope"], 90.0, 135.0)
    assert split_names(" a, b ,a") == ["a", "b"]
    with pytest.raises(Exception, match="separated by commas"):
        split_names("a,,b")
    with pytest.raises(Exception, match="at most 50"):
        split_names(",".join(f"t{i}" for i in range(51)))


def test_thinning_keeps_the_shape_of_a_busy_line() -> None:
    """10,000 loads a second apart, each peak a little higher: thinned to about the limit,
    in time order, with the first and last vertex, the highest peak and the drops intact."""
    points: list[tuple[float, float]] = [(0.0, 0.0)]
    for k in range(1, 10_001):
        points += [(float(k), 1.0 + k * 1e-4), (float(k), 0.1)]
    points.append((10_000.5, 0.6))
    kept = thin(points, 600)
    assert len(kept) <= 602
    assert kept[0] == points[0] and kept[-1] == points[-1]
    assert kept == sorted(kept, key=lambda p: p[0])  # stable: a peak stays before its drop
    assert max(v for _, v in kept) == max(v for _, v in points)
    assert min(v for _, v in kept[1:-1]) == 0.1
    for (t0, v0), (t1, v1) in zip(kept, kept[1:]):
        if t0 == t1:
            assert v0 > v1, "at a load the peak comes before the drop"
    assert thin(points[:50], 600) == points[:50]


# -- through the API ---------------------------------------------------------------------------
def _history(harness: Harness, token: str = OPERATOR, **params: Any) -> Any:
    return harness.client.get("/v1/tables:history", params=params, headers={"Authorization": f"Bearer {token}"})


def test_the_api_draws_each_load_the_service_made(harness: Harness) -> None:
    """The drops are the loads of GET /v1/admin/schedule, at their finish, to finish minus
    the newest release loaded; the last vertex is the staleness GET /v1/tables reports."""
    for k in range(4):
        row = {"order_id": k, "amount": 1.0, "country": "DE"}
        assert harness.post("/v1/tables/orders/updates", token=PRODUCER, json={"rows": [row]}).status_code == 202
        harness.wait_loaded("orders", k + 1)
    answer = _history(harness, tables="orders", seconds=600)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    [line] = body["tables"]
    points = [tuple(p) for p in line["points"]]
    assert body["since"] <= line["start"] == points[0][0]
    assert points[-1] == (body["now"], line["staleness_seconds"])
    status = harness.status("orders")
    assert line["staleness_seconds"] == pytest.approx(body["now"] - status["current_upto"], abs=1e-6)
    schedule = harness.get("/v1/admin/schedule")
    origin = float(schedule.headers["X-Schedule-Origin"])
    batches = [b for b in map(json.loads, schedule.text.splitlines()) if b["table"] == "orders"]
    drops = [(t1, v1) for (t0, v0), (t1, v1) in zip(points, points[1:]) if t0 == t1]
    assert line["loads"] == len(batches) == len(drops) >= 1
    for (finish, after), batch in zip(drops, batches):
        assert finish == pytest.approx(batch["finish"] + origin, abs=1e-6)
        assert after == pytest.approx(batch["finish"] - batch["last_release"], abs=1e-6)
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t1 > t0:
            assert v1 - v0 == pytest.approx(t1 - t0, abs=1e-6), "staleness grows with slope 1 between loads"


def test_the_stalest_tables_the_token_may_see(harness: Harness) -> None:
    harness.post("/v1/tables/clicks/updates", token=PRODUCER, json={"rows": [{"url": "/", "n": 1}]})
    harness.wait_loaded("clicks", 1)
    names = [line["name"] for line in _history(harness, stalest=2).json()["tables"]]
    assert names == ["orders", "clicks"]  # orders never loaded: stalest
    assert [line["name"] for line in _history(harness, stalest=1).json()["tables"]] == ["orders"]
    limited = _history(harness, token=ORDERS_ONLY, stalest=10).json()["tables"]
    assert [line["name"] for line in limited] == ["orders"]
    assert _history(harness, token=ORDERS_ONLY, tables="clicks").status_code == 403
    assert _history(harness, tables="orders,nope").status_code == 404
    assert _history(harness, tables="orders,,clicks").status_code == 422
    assert _history(harness, seconds=0.5).status_code == 422
    assert _history(harness, token="").status_code == 401
    started = time.time()
    window = _history(harness, tables="orders", seconds=5).json()
    assert window["since"] == pytest.approx(window["now"] - 5) and window["now"] >= started
