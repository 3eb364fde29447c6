"""The systems compared: the Structured Streaming peer and loader variants.

A loader variant is a code directory (a checkout, absolute or relative to this repository,
put on ``PYTHONPATH``: any git revision can be measured from a worktree), environment
overrides (``LOADER_*``) and config settings. ``--variants FILE`` replaces the default list
with a JSON list of objects of the same fields, e.g.
``[{"name": "grouped-8", "kind": "loader", "env": {"LOADER_LOADING__MAX_TABLES_PER_JOB": "8"}}]``.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from testing.report import REPO_ROOT

BEFORE_REV = "7d9de65"
BEFORE_CODE = "/work/wt-before"


@dataclass(frozen=True)
class Variant:
    name: str
    kind: Literal["loader", "peer"]
    label: str = ""
    #: loader: the checkout whose code runs (absolute, or relative to this repository).
    code: str = "."
    #: loader: environment overrides (``LOADER_*``).
    env: dict[str, str] = field(default_factory=dict)
    #: loader: top-level config settings over the benchmark's (e.g. {"workers": 2}).
    settings: dict[str, Any] = field(default_factory=dict)
    #: peer: Spark configuration over the peer's defaults.
    conf: dict[str, str] = field(default_factory=dict)

    @property
    def code_dir(self) -> Path:
        return (REPO_ROOT / self.code).resolve()  # (an absolute ``code`` replaces the root)

    @property
    def log_kind(self) -> str:
        """Which commit log the outside reader follows."""
        return "spark-sink" if self.kind == "peer" else "delta"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.kind == "loader":
            out["code_dir"] = str(self.code_dir)
            out["code_git"] = code_revision(self.code_dir)
        return out


DEFAULT_VARIANTS: tuple[Variant, ...] = (
    # 4 GB of driver heap: with Spark's default 1 GB, 1,000 streaming queries filled the old
    # generation during start-up and the driver then spent its time in full GCs (260 of them,
    # 477 s, and not one micro-batch committed 5 minutes into priming). The loaders keep 1 GB.
    Variant(
        "peer",
        "peer",
        label="Spark Structured Streaming, one query per table, trigger 1 s, Parquet sink, driver heap 4 GB",
        conf={"spark.driver.memory": "4g"},
    ),
    Variant("before", "loader", label=f"loader before issue 14 (git {BEFORE_REV}), default settings", code=BEFORE_CODE),
    Variant(
        "single",
        "loader",
        label="loader after part 2 (cheaper job), one table per job",
        env={"LOADER_LOADING__MAX_TABLES_PER_JOB": "1"},
    ),
    Variant("grouped", "loader", label="loader after parts 3+4 (group jobs), default settings"),
)


def load_variants(path: Path) -> list[Variant]:
    """Variants from a JSON list (see the module docstring); a clear error for a bad entry."""
    try:
        variants = [Variant(**item) for item in json.loads(path.read_text(encoding="utf-8"))]
    except (OSError, TypeError, ValueError) as exc:
        raise ValueError(f"the variants file {path}: {exc}; fields: {', '.join(Variant.__dataclass_fields__)}") from exc
    names = [v.name for v in variants]
    if not names or len(set(names)) != len(names) or any(v.kind not in ("loader", "peer") for v in variants):
        raise ValueError(f"{path} must hold a JSON list of variants with unique names, kind 'loader' or 'peer'")
    return variants


def check_code_dir(variant: Variant) -> None:
    """A loader variant's code directory must hold the loader; say how to make it if not."""
    code = variant.code_dir
    if variant.kind == "loader" and not all((code / p / "__init__.py").is_file() for p in ("loader", "cli")):
        how = f"; create it with: git worktree add --detach {BEFORE_CODE} {BEFORE_REV}"
        hint = how if variant.code == BEFORE_CODE else ""
        raise ValueError(f"variant {variant.name!r}: {code} holds no loader checkout (loader/, cli/){hint}")


def code_revision(code: Path) -> dict[str, Any]:
    """git revision of a code directory and whether its code differs from that revision."""

    def git(*args: str) -> str | None:
        done = subprocess.run(["git", "-C", str(code), *args], capture_output=True, text=True, timeout=10, check=False)
        return done.stdout.strip() if done.returncode == 0 else None

    dirty = git("status", "--porcelain", "--", "loader", "api", "cli", "schedulers")
    return {"commit": git("rev-parse", "--short", "HEAD"), "modified": bool(dirty) if dirty is not None else None}
