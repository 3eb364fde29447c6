"""Staleness as an outside reader sees it (testing/observed_staleness.py): the arithmetic
the freshness benchmark reports, checked by hand-worked cases and against the Poisson
closed form for the ideal."""

from __future__ import annotations

import math

import numpy as np
import pytest

from testing.observed_staleness import (
    ObservedUpdate,
    as_ideal,
    max_staleness,
    staleness_integral,
    summarize,
)


def test_staleness_counts_from_the_newest_visible_arrival() -> None:
    # Arrivals at 1 and 2, both visible at 3; window [0, 4], current at 0.
    updates = [ObservedUpdate(1.0, 3.0), ObservedUpdate(2.0, 3.0)]
    # [0, 3): t - 0 -> 4.5; [3, 4]: t - 2 -> 1.5.
    assert staleness_integral(updates, 0.0, 4.0, base=0.0) == pytest.approx(6.0)
    # Ideal: [0, 1): t -> 0.5; [1, 2): t - 1 -> 0.5; [2, 4]: t - 2 -> 2.
    assert staleness_integral(as_ideal(updates), 0.0, 4.0, base=0.0) == pytest.approx(3.0)
    assert max_staleness(updates, 0.0, 4.0, base=0.0) == pytest.approx(3.0)


def test_an_older_update_seen_later_does_not_make_the_table_staler() -> None:
    # The newer update (arrival 2) shows at 2.5, the older (arrival 1) only at 3.5.
    updates = [ObservedUpdate(2.0, 2.5), ObservedUpdate(1.0, 3.5)]
    # [0, 2.5): t -> 3.125; [2.5, 4]: t - 2 -> (0.5 + 2) / 2 * 1.5 = 1.875.
    assert staleness_integral(updates, 0.0, 4.0, base=0.0) == pytest.approx(5.0)


def test_the_window_may_open_after_visibilities() -> None:
    updates = [ObservedUpdate(1.0, 1.5), ObservedUpdate(5.0, 6.0)]
    # Window [2, 7]: newest visible arrival 1 until 6, then 5.
    expected = (2.0 - 1.0 + 6.0 - 1.0) / 2 * 4.0 + (1.0 + 2.0) / 2 * 1.0
    assert staleness_integral(updates, 2.0, 7.0, base=0.0) == pytest.approx(expected)


def test_ideal_staleness_of_poisson_arrivals_is_the_mean_gap() -> None:
    # Time-average age of the newest Poisson arrival is 1/rate.
    rng = np.random.default_rng(3)
    rate, horizon = 0.5, 20_000.0
    arrivals = np.cumsum(rng.exponential(1 / rate, size=int(rate * horizon * 1.2)))
    updates = [ObservedUpdate(float(a), float(a)) for a in arrivals if a < horizon]
    mean = staleness_integral(updates, 100.0, horizon, base=0.0) / (horizon - 100.0)
    assert mean == pytest.approx(1 / rate, rel=0.05)


def test_summary_latency_and_starvation() -> None:
    tables = {
        "fresh": [ObservedUpdate(1.0, 1.5), ObservedUpdate(4.0, 4.5)],
        "slow": [ObservedUpdate(2.0, 9.0)],
        "lost": [ObservedUpdate(3.0, None)],
        # Arrived before the window: counts for staleness, not for latency.
        "early": [ObservedUpdate(-1.0, 20.0)],
    }
    summary = summarize(tables, 0.0, 10.0, dict.fromkeys(tables, 0.0), starved_after=5.0)
    assert summary.window_updates == 4
    assert summary.never_visible == 1
    assert summary.latency_max == math.inf
    assert sorted(summary.starved) == ["lost", "slow"]
    by_name = {t.name: t for t in summary.tables}
    assert by_name["lost"].mean_staleness == pytest.approx(5.0)  # never visible: t - 0
    assert by_name["lost"].ideal_mean_staleness == pytest.approx((4.5 + 24.5) / 10)
    assert summary.ratio == pytest.approx(summary.mean_staleness / summary.ideal_mean_staleness)


def test_summary_refuses_an_empty_window() -> None:
    with pytest.raises(ValueError, match="empty window"):
        summarize({"t": []}, 5.0, 5.0, {"t": 0.0}, starved_after=1.0)
