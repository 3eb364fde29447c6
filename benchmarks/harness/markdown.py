"""Sections of BENCHMARKS.md: their fixed text (``benchmarks/templates/``), declarative tables,
shared cell formats, and the one writer of sections.

Each benchmark owns the block between ``<!-- SECTION:begin -->`` and ``<!-- SECTION:end -->``
and rewrites only that block, so benchmarks run apart write one file.
"""

from __future__ import annotations

import math
import os
import re
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from testing.report import BENCHMARKS_MD, MD_HEADER, fmt_num, md_table, replace_section, status

Cell = str | Callable[[Any], Any]
Formats = Mapping[str, Callable[[Any], str]]
TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


def missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def f2(value: float | None) -> str:
    return "–" if missing(value) else "inf" if value == math.inf else f"{value:.2f}"


def pct(value: float) -> str:
    return f"{100 * value:+.1f}%"


#: Formats every table and template may name in a placeholder's spec: ``{ratio:f2}``.
FORMATS: dict[str, Callable[[Any], str]] = {"f2": f2, "num": fmt_num, "pct": pct, "status": status}
FORMATS |= {"num3": lambda v: fmt_num(v, 3), "num4": lambda v: fmt_num(v, 4), "thousands": lambda v: f"{v / 1000:.0f}"}


class _Formatter(string.Formatter):
    """``str.format`` whose format spec may also name a function of ``formats``: ``{p99:ms}``."""

    def __init__(self, formats: Formats | None = None) -> None:
        self.formats = {**FORMATS, **(formats or {})}

    def format_field(self, value: Any, spec: str) -> str:
        return self.formats[spec](value) if spec in self.formats else format(value, spec)


class Lookup:
    """A function a template calls with words: ``{ratio[random one]}`` is ``ratio("random", "one")``."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function

    def __getitem__(self, words: str) -> Any:
        return self.function(*words.split())


class Template:
    """A section's fixed text: the blocks of ``benchmarks/templates/<section>.md`` (and of ``common.md``),
    each the lines after a line ``%% name`` up to the next such line (a line ``%% name: text`` starts
    the block with ``text``, all after ``: ``), with ``str.format`` placeholders."""

    def __init__(self, section: str, formats: Formats | None = None) -> None:
        self.blocks: dict[str, str] = {}
        for name in ("common", section):
            text = (TEMPLATES / f"{name}.md").read_text(encoding="utf-8")
            parts = re.split(r"^%% ([^\s:]+)(?:\n|: )", text, flags=re.M)
            self.blocks |= dict(zip(parts[1::2], parts[2::2], strict=True))
        self.formatter = _Formatter(formats)

    def __call__(self, block: str, /, **values: Any) -> str:
        """The block, filled (it ends with its last line's newline)."""
        return self.formatter.vformat(self.blocks[block], (), values)

    def line(self, block: str, /, **values: Any) -> str:
        """A one-line block, filled, without its newline (a phrase, a note, a target)."""
        return self(block, **values).removesuffix("\n")

    def table(self, block: str, rows: Iterable[Any], align: str | None = None, **values: Any) -> str:
        """A table whose block holds its headers' line (filled with ``values``) and its cells' line,
        unless ``rows`` are their cells."""
        headers, *line = self.blocks[block].splitlines()
        headers = self.formatter.vformat(headers, (), values)
        return table(headers, line[0] if line else None, rows, align, self.formatter.formats)


def cell(spec: Cell, row: Any, formats: Formats | None = None) -> str:
    """A format string applied to the row (a mapping's keys by name, ``"{median[p50_ms]:.2f}"``;
    a sequence's items by position, ``"{0}"``), or a function of the row."""
    if callable(spec):
        return str(spec(row))
    mapping = isinstance(row, Mapping)
    return _Formatter(formats).vformat(spec, () if mapping else row, row if mapping else {})


def table(
    headers: str | Sequence[str],
    cells: str | Sequence[Cell] | None,
    rows: Iterable[Any],
    align: str | None = None,
    formats: Formats | None = None,
) -> str:
    """A Markdown table declared by its headers and one row's cells, each a list or a string
    of `` | ``-separated items (``"p50 ms | p99 ms"``, ``"{p50:.1f} | {p99:ms}"``, ``ms`` a
    function of ``formats`` or ``FORMATS``): one row per item of ``rows`` (``cells`` None:
    each row is its cells). ``align``: l, r or c per column (default l then r), or "-": ``---`` for all."""
    heads = headers.split(" | ") if isinstance(headers, str) else headers
    if cells is not None:
        specs = cells.split(" | ") if isinstance(cells, str) else cells
        rows = [[cell(spec, row, formats) for spec in specs] for row in rows]
    if align != "-":
        return md_table(heads, rows, align)
    first, _, *body = md_table(heads, rows).split("\n")
    return "\n".join([first, "| " + " | ".join("---" for _ in heads) + " |", *body])


def bullets(items: Iterable[str]) -> str:
    return "\n".join(f"- {item}" for item in items)


def publish(sections: Mapping[str, str], path: Path = BENCHMARKS_MD) -> Path:
    """Rewrite the named sections of ``path`` (created with its header if absent), in one write."""
    text = path.read_text(encoding="utf-8") if path.exists() else MD_HEADER
    for name, body in sections.items():
        text = replace_section(text, name, body)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path
