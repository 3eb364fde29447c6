"""A view's ``caching`` table becomes the executor's settings (loader/core/views.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from loader.core.views import CachingConfig
from schedulers.views.engine import EngineSettings


def test_defaults_are_the_executors() -> None:
    """The paper's W, and the measured W_d and sizing (docs/join-views.md), unless a view sets them."""
    ours, engine = CachingConfig().engine(seed=1), EngineSettings()
    assert (ours.window, ours.bloom_tuples, ours.profile_probability) == (
        engine.window,
        engine.bloom_tuples,
        engine.profile_probability,
    )
    assert ours.reoptimizer.buckets_per_key == engine.reoptimizer.buckets_per_key


def test_probe_window_and_sizing_are_settable() -> None:
    settings = CachingConfig(probe_window=50, buckets_per_key=4).engine(seed=1)
    assert settings.bloom_tuples == 50 and settings.reoptimizer.buckets_per_key == 4.0
    assert CachingConfig(buckets_per_key="unbounded").engine(seed=1).reoptimizer.buckets_per_key is None


@pytest.mark.parametrize("bad", [0, -1.5, float("inf"), "lots"])
def test_a_bad_sizing_is_refused_with_what_to_give(bad: object) -> None:
    with pytest.raises(ValidationError, match="buckets_per_key"):
        CachingConfig(buckets_per_key=bad)  # type: ignore[arg-type]
