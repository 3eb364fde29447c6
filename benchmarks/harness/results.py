"""Results files: one schema for every benchmark (benchmarks/README.md describes it), JSON in
and out (strict: inf and nan stored as strings, read back as floats), repeated runs.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from testing.report import RESULTS_DIR, log, median, write_json

SCHEMA = 1
T = TypeVar("T")


def path(stem: str, quick: bool = False) -> Path:
    return RESULTS_DIR / f"{stem}{'-quick' if quick else ''}.json"


def save(where: Path, results: dict[str, Any]) -> Path:
    """Write atomically, the schema version first."""
    return write_json(where, {"schema": SCHEMA, **{k: v for k, v in results.items() if k != "schema"}})


def _numbers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    return float(value) if value in ("inf", "-inf", "nan") else value


def load(where: Path) -> dict[str, Any]:
    results = json.loads(where.read_text(encoding="utf-8"))
    if results.get("schema") != SCHEMA:
        raise ValueError(f"{where}: results schema {results.get('schema')!r}, this harness reads {SCHEMA}")
    return _numbers(results)


def int_keys(mapping: Mapping[str, T]) -> dict[int, T]:
    """A dict keyed by numbers again (JSON keys are strings)."""
    return {int(k): v for k, v in mapping.items()}


def interleaved(repeats: int, plans: Mapping[str, Callable[[], T]], label: str = "") -> dict[str, list[T]]:
    """Each plan's runs, ``repeats`` of each, interleaved: a noisy minute hits every plan alike (logged if
    ``label``)."""
    runs: dict[str, list[T]] = {name: [] for name in plans}
    for k in range(repeats):
        for name, plan in plans.items():
            if label:
                log(f"{name}, run {k + 1}/{repeats}" + (f" ({label})" if label != name else ""))
            runs[name].append(plan())
    return runs


def repeat(times: int, label: str, run: Callable[..., T], *args: Any) -> list[T]:
    """``run(*args)`` ``times`` times, logging each."""
    return interleaved(times, {label: functools.partial(run, *args)}, label)[label]


def stats(values: Iterable[float | None]) -> dict[str, Any]:
    """Median (NaN if none), min, max (None if none) and count of the values that are not None."""
    kept = [v for v in values if v is not None]
    return {"median": median(kept), "min": min(kept, default=None), "max": max(kept, default=None), "n": len(kept)}


def medians(runs: Iterable[Mapping[str, Any]], keys: Iterable[str] | None = None) -> dict[str, Any]:
    """Per key, the median over runs (NaN where no run has it); of a mapping, its medians."""
    runs = list(runs)
    keys = list(keys) if keys is not None else list(runs[0]) if runs else []
    values = {k: [r[k] for r in runs if k in r] for k in keys}
    return {k: medians(v) if v and isinstance(v[0], Mapping) else median(v) for k, v in values.items()}
