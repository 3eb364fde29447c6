"""The systems compared: the Structured Streaming peer and loader variants.

A loader variant is a code directory (a checkout of the repository; its ``loader serve``
runs with ``PYTHONPATH`` pointing there, so any git revision can be measured from a
worktree) plus environment overrides (``LOADER_*``, applied over the benchmark's config
file) and config settings. The default list is issue 14's; ``--variants FILE`` replaces
it with a JSON list of objects with the same fields, e.g.::

    [{"name": "before", "kind": "loader", "code": "/work/wt-before",
      "label": "loader before issue 14 (7d9de65)"},
     {"name": "grouped-8", "kind": "loader", "env": {"LOADER_LOADING__MAX_TABLES_PER_JOB": "8"}},
     {"name": "peer", "kind": "peer", "conf": {"spark.driver.memory": "2g"}}]

``code`` may be relative to this repository's root (default: the root itself).
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
        path = Path(self.code)
        return (path if path.is_absolute() else REPO_ROOT / path).resolve()

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
        items = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the variants file {path}: {exc}") from exc
    if not isinstance(items, list) or not items:
        raise ValueError(f"{path} must hold a non-empty JSON list of variants")
    variants = []
    for k, item in enumerate(items):
        try:
            variant = Variant(**item)
        except TypeError as exc:
            raise ValueError(
                f"variant {k} of {path}: {exc}; fields: {', '.join(Variant.__dataclass_fields__)}"
            ) from exc
        if variant.kind not in ("loader", "peer"):
            raise ValueError(f"variant {variant.name!r} of {path}: kind must be 'loader' or 'peer'")
        variants.append(variant)
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: variant names must be unique, got {names}")
    return variants


def check_code_dir(variant: Variant) -> None:
    """A loader variant's code directory must hold the loader; say how to make it if not."""
    if variant.kind != "loader":
        return
    code = variant.code_dir
    if not (code / "loader" / "__init__.py").is_file() or not (code / "cli" / "__init__.py").is_file():
        hint = (
            f"; create it with: git worktree add --detach {BEFORE_CODE} {BEFORE_REV}"
            if variant.code == BEFORE_CODE
            else ""
        )
        raise ValueError(f"variant {variant.name!r}: {code} holds no loader checkout (loader/, cli/){hint}")


def code_revision(code: Path) -> dict[str, Any]:
    """git revision of a code directory and whether its code differs from that revision."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", "-C", str(code), *args], capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip()

    dirty = git("status", "--porcelain", "--", "loader", "api", "cli", "schedulers")
    return {"commit": git("rev-parse", "--short", "HEAD"), "modified": bool(dirty) if dirty is not None else None}
