"""Seeded workload generators (``schedulers.generators``): reproducible, valid traces with
the requested utilization, quasiperiodic inter-arrivals in [B/2, B], and the section 4
stretch counterexample defeating every policy."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from schedulers import generators
from schedulers.generators import GENERATORS
from schedulers.model import Trace
from schedulers.registry import POLICIES, make_policy
from schedulers.simulator import simulate
from schedulers.traces import read_trace, trace_lines, write_trace

#: Generators that draw from a seed (the counterexample is deterministic and takes none).
SEEDED = ("quasiperiodic", "poisson", "bursty")
#: Small but non-trivial settings so the whole file runs in well under a second or two.
SMALL = {"tables": 8, "horizon": 150.0, "workers": 2, "utilization": 0.5}


def make(kind: str, seed: int = 0, **overrides: object) -> Trace:
    if kind == "counterexample":
        return GENERATORS[kind](**{k: v for k, v in overrides.items() if k in ("tables", "workers", "utilization")})
    return GENERATORS[kind](**{**SMALL, "seed": seed, **overrides})


def test_registry_lists_the_documented_generators() -> None:
    assert set(GENERATORS) == {"quasiperiodic", "poisson", "bursty", "counterexample"}


# -- reproducibility ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", SEEDED)
@pytest.mark.parametrize("seed", [0, 7])
def test_same_seed_same_trace_byte_for_byte(kind: str, seed: int, tmp_path: Path) -> None:
    first, second = make(kind, seed), make(kind, seed)
    assert first == second
    write_trace(first, tmp_path / "a.jsonl")
    write_trace(second, tmp_path / "b.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


@pytest.mark.parametrize("kind", SEEDED)
def test_different_seed_different_trace(kind: str) -> None:
    a, b, c = make(kind, 0), make(kind, 1), make(kind, 2)
    assert a.update_releases != b.update_releases
    assert b.update_releases != c.update_releases
    assert a.update_releases != c.update_releases


@pytest.mark.parametrize("kind", SEEDED)
def test_skewed_weights_depend_on_the_seed_too(kind: str) -> None:
    a = make(kind, 0, weighting="skewed")
    b = make(kind, 1, weighting="skewed")
    assert [s.weight for s in a.tables] != [s.weight for s in b.tables]
    assert make(kind, 0, weighting="skewed") == a


def test_counterexample_is_deterministic() -> None:
    assert make("counterexample") == make("counterexample")
    assert list(trace_lines(make("counterexample"))) == list(trace_lines(make("counterexample")))


# -- validity ---------------------------------------------------------------------------------


def assert_valid(trace: Trace) -> None:
    """The trace satisfies the format rules read_trace enforces."""
    names = [s.name for s in trace.tables]
    assert len(set(names)) == len(names)
    assert all(0 <= tid < len(trace.tables) for tid in trace.update_tables)
    assert trace.update_releases == sorted(trace.update_releases)
    for releases in trace.releases_by_table():
        assert all(r > 0 and math.isfinite(r) for r in releases)
        assert all(a < b for a, b in zip(releases, releases[1:]))


@pytest.mark.parametrize("kind", list(GENERATORS))
@pytest.mark.parametrize("weighting", ["uniform", "skewed"])
def test_generated_trace_is_valid_and_round_trips(kind: str, weighting: str, tmp_path: Path) -> None:
    options = {} if kind == "counterexample" else {"weighting": weighting, "overhead": 0.05}
    trace = make(kind, 3, **options)
    assert trace.n_updates > 0
    assert_valid(trace)
    path = tmp_path / f"{kind}.jsonl"
    write_trace(trace, path)
    assert read_trace(path) == trace  # read_trace re-validates every line


@pytest.mark.parametrize("kind", SEEDED)
def test_weights_and_overhead(kind: str) -> None:
    uniform = make(kind, 4, overhead=0.25)
    assert all(s.weight == 1.0 for s in uniform.tables)
    assert all(s.overhead == 0.25 for s in uniform.tables)
    skewed = make(kind, 4, weighting="skewed")
    assert all(1.0 <= s.weight <= 20.0 for s in skewed.tables)
    assert len({s.weight for s in skewed.tables}) > 1


@pytest.mark.parametrize("kind", SEEDED)
def test_releases_stay_within_the_horizon(kind: str) -> None:
    trace = make(kind, 5, horizon=80.0)
    assert max(trace.update_releases) <= 80.0


# -- utilization ------------------------------------------------------------------------------


@pytest.mark.parametrize("utilization,workers,tables", [(0.5, 4, 30), (0.3, 2, 7), (0.9, 8, 40), (0.05, 1, 3)])
def test_quasiperiodic_utilization_is_exact(utilization: float, workers: int, tables: int) -> None:
    trace = generators.quasiperiodic(tables=tables, workers=workers, utilization=utilization, horizon=50.0, seed=1)
    alphas = {s.alpha for s in trace.tables}
    assert alphas == {utilization * workers / tables}  # Theorem 4.3: one alpha for all
    assert sum(s.alpha for s in trace.tables) / workers == pytest.approx(utilization, rel=1e-12)


@pytest.mark.parametrize("kind", ["poisson", "bursty"])
@pytest.mark.parametrize("utilization,workers,tables", [(0.5, 4, 30), (0.3, 2, 12), (0.6, 3, 20)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_utilization_of_spread_alphas(kind: str, utilization: float, workers: int, tables: int, seed: int) -> None:
    trace = make(kind, seed, utilization=utilization, workers=workers, tables=tables, horizon=20.0)
    alphas = [s.alpha for s in trace.tables]
    assert all(0.0 < a <= 1.0 for a in alphas)
    achieved = sum(alphas) / workers
    assert achieved <= utilization * (1 + 1e-12)
    if all(a < 1.0 for a in alphas):  # no cap hit: exactly the requested utilization
        assert achieved == pytest.approx(utilization, rel=1e-12)
    assert len(set(alphas)) > 1  # log-normal spread


@pytest.mark.parametrize("kind", ["poisson", "bursty"])
def test_alphas_capped_at_one(kind: str) -> None:
    # Asked for sum(alpha) = 0.9 * 8 = 7.2 over 3 tables: every alpha would exceed 1.
    trace = make(kind, 0, utilization=0.9, workers=8, tables=3, horizon=20.0)
    alphas = [s.alpha for s in trace.tables]
    assert max(alphas) == 1.0
    assert sum(alphas) / 8 < 0.9


@pytest.mark.parametrize("kind", ["poisson", "bursty"])
def test_zero_spread_gives_equal_alphas(kind: str) -> None:
    trace = make(kind, 0, alpha_spread=0.0, utilization=0.5, workers=2, tables=8)
    assert {s.alpha for s in trace.tables} == {0.125}


def test_counterexample_utilization() -> None:
    trace = generators.stretch_counterexample(tables=4, workers=2, utilization=0.5)
    assert [s.alpha for s in trace.tables] == [0.25] * 4
    assert sum(s.alpha for s in trace.tables) / 2 == 0.5
    capped = generators.stretch_counterexample(tables=1, workers=4, utilization=0.5)
    assert capped.tables[0].alpha == 1.0  # min(1, 0.5 * 4 / 1)


# -- quasiperiodic shape ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("periods", [(1.0, 10.0, 100.0), (2.0, 3.0), (5.0,)])
def test_quasiperiodic_interarrivals_and_period_hints(seed: int, periods: tuple[float, ...]) -> None:
    trace = generators.quasiperiodic(tables=9, periods=periods, horizon=300.0, seed=seed)
    for i, (spec, releases) in enumerate(zip(trace.tables, trace.releases_by_table())):
        b = periods[i % len(periods)]  # dealt round-robin
        assert spec.period == b
        assert releases, spec.name
        previous = 0.0  # the first update covers (0, r_1]: its length is in [B/2, B] too
        for r in releases:
            assert b / 2 <= r - previous <= b * (1 + 1e-9), (spec.name, previous, r)
            previous = r
        assert 300.0 - releases[-1] < b  # arrivals continue until the horizon


# -- the stretch counterexample ---------------------------------------------------------------


def test_counterexample_shape() -> None:
    trace = generators.stretch_counterexample(tables=4, huge=100.0, tiny=0.01)
    for i, releases in enumerate(trace.releases_by_table()):
        assert len(releases) == 2
        assert releases[0] == pytest.approx(100.0 + i * 0.01 / 8)
        assert releases[1] - releases[0] == pytest.approx(0.01)
    assert len(set(trace.update_releases)) == trace.n_updates  # offsets keep releases distinct


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize(
    "tables,huge,tiny,utilization,workers",
    [(4, 100.0, 0.01, 0.5, 2), (1, 50.0, 0.5, 0.2, 1), (6, 1000.0, 0.001, 0.9, 3)],
)
def test_counterexample_defeats_every_policy(
    policy: str, tables: int, huge: float, tiny: float, utilization: float, workers: int
) -> None:
    trace = generators.stretch_counterexample(
        tables=tables, huge=huge, tiny=tiny, utilization=utilization, workers=workers
    )
    alpha = trace.tables[0].alpha
    result = simulate(trace, make_policy(policy), workers)
    assert result.freshness.max_stretch >= alpha * huge / tiny * (1 - 1e-9)
    assert result.freshness.updates == 2 * tables


# -- argument checking ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", SEEDED)
@pytest.mark.parametrize(
    "bad",
    [
        {"tables": 0},
        {"workers": 0},
        {"utilization": 0.0},
        {"utilization": -1.0},
        {"utilization": math.nan},
        {"utilization": math.inf},
        {"horizon": 0.0},
        {"weighting": "zipf"},
    ],
)
def test_bad_arguments_raise_value_error(kind: str, bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        make(kind, **bad)


@pytest.mark.parametrize("periods", [(), (0.0,), (1.0, -2.0)])
def test_quasiperiodic_rejects_bad_periods(periods: tuple[float, ...]) -> None:
    with pytest.raises(ValueError):
        generators.quasiperiodic(periods=periods)


@pytest.mark.parametrize("rate_range", [(0.0, 1.0), (2.0, 1.0), (-1.0, 1.0)])
def test_poisson_rejects_bad_rate_range(rate_range: tuple[float, float]) -> None:
    with pytest.raises(ValueError):
        generators.poisson(rate_range=rate_range)


@pytest.mark.parametrize("huge,tiny", [(1.0, 1.0), (1.0, 2.0), (1.0, 0.0)])
def test_counterexample_rejects_bad_sizes(huge: float, tiny: float) -> None:
    with pytest.raises(ValueError):
        generators.stretch_counterexample(huge=huge, tiny=tiny)
