"""A benchmark's declaration and its command line (the flags: benchmarks/README.md)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness import results
from benchmarks.harness.markdown import publish
from testing import report
from testing.report import BENCHMARKS_MD, LoadMonitor, fmt_duration, log


@dataclass
class Run:
    """What ``measure`` gets: the parsed arguments, the ``meta`` block (add to it what the
    section needs), and ``save`` for partial results (an interrupted run keeps them)."""

    bench: Benchmark
    args: argparse.Namespace
    meta: dict[str, Any]
    path: Path | None

    def save(self, figures: dict[str, Any]) -> None:
        if self.path is not None:
            results.save(self.path, {"benchmark": self.bench.module, "meta": self.meta, **figures})

    def parts(self, **measures: Callable[[], Any]) -> dict[str, Any]:
        """The figures of each part, measured in order, but of those ``--skip`` leaves out."""
        return {name: measure() for name, measure in measures.items() if name not in self.args.skip}

    def previous(self) -> dict[str, Any]:
        """The results file as the last run left it ({} if none)."""
        return results.load(self.path) if self.path is not None and self.path.exists() else {}


@dataclass
class Benchmark:
    """One benchmark: how to measure, how to render its section from the results. Named after the
    module that defines ``measure`` (``benchmarks/<name>.py`` or ``benchmarks/<name>/__main__.py``)."""

    measure: Callable[[Run], dict[str, Any]]  #: the figures (the results' keys besides ``meta``)
    render: Callable[[dict[str, Any]], str]  #: the section, from the results alone
    package: str = "loader"  #: the code measured (fingerprinted in the provenance)
    fingerprints: tuple[str, ...] = ()  #: more packages fingerprinted
    quick_saves: bool = False  #: a quick run writes ``<stem>-quick.json`` (else it only prints)
    repeats: tuple[int, int] | None = None  #: ``--repeats`` defaults (quick, full)
    seed: int | None = None  #: ``--seed`` default
    parts: tuple[str, ...] = ()  #: what ``--skip`` may leave out
    #: Flags whose default depends on ``--quick``: name -> (quick, full, help), ``--name-with-dashes``.
    counts: Mapping[str, tuple[Any, Any, str]] = field(default_factory=dict)
    options: Callable[[argparse.ArgumentParser], None] | None = None  #: the benchmark's own flags
    #: Figures derived from the raw ones (verdicts, summaries, plots): after a run and on ``--render``.
    finish: Callable[[dict[str, Any]], None] | None = None

    def __post_init__(self) -> None:
        defining = sys.modules[self.measure.__module__]  # ``__main__`` under ``python -m``: its spec names it
        self.module: str = defining.__spec__.name.removesuffix(".__main__")  #: ``benchmarks.<name>``
        self.doc: str = defining.__doc__ or ""  #: ``--help`` shows it
        self.stem: str = self.module.rpartition(".")[2]  #: the results file's name
        self.section: str = self.stem.replace("_", "-")  #: its section of BENCHMARKS.md and its template

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(
            prog=f"python -m {self.module}", description=self.doc, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        add = parser.add_argument
        add("--quick", action="store_true", help="smoke run: its figures replace no published ones")
        if self.repeats:
            add("--repeats", type=int, help=f"runs per figure (default {self.repeats[1]}; quick {self.repeats[0]})")
        if self.seed is not None:
            add("--seed", type=int, default=self.seed, help=f"(default {self.seed})")
        if self.parts:
            add("--skip", default="", help=f"parts to leave out, comma-separated: {', '.join(self.parts)}")
        add("--json", type=Path, help=f"results file (default {results.path(self.stem)})")
        add("--markdown", type=Path, help=f"file whose section to rewrite (default {BENCHMARKS_MD.name}; quick: none)")
        add("--render", "--rerender", action="store_true", help="measure nothing: render the saved results again")
        for name, (quick, full, what) in self.counts.items():
            add(f"--{name.replace('_', '-')}", type=type(full), help=f"{what} ({full}; quick {quick})")
        if self.options:
            self.options(parser)
        return parser

    def parse(self, argv: Sequence[str] | None) -> argparse.Namespace:
        parser = self.parser()
        args = parser.parse_args(argv)
        if self.repeats:
            args.repeats = args.repeats if args.repeats is not None else self.repeats[0 if args.quick else 1]
            if args.repeats < 1:
                parser.error("--repeats must be at least 1")
        if self.parts:
            args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
            if args.skip - set(self.parts):
                parser.error(f"--skip takes {', '.join(self.parts)}")
        for name, (quick, full, _) in self.counts.items():
            if getattr(args, name) is None:
                setattr(args, name, quick if args.quick else full)
        return args

    def main(self, argv: Sequence[str] | None = None) -> int:
        args = self.parse(argv)
        saved = args.json or (results.path(self.stem, args.quick) if self.quick_saves or not args.quick else None)
        markdown = args.markdown or (None if args.quick else BENCHMARKS_MD)
        if args.render:
            if saved is None:
                raise SystemExit("a quick run of this benchmark saves nothing to render: give --json")
            found = results.load(saved)
        else:
            # The provenance: command, machine, the code measured (fingerprinted), load at start and end.
            began, fingerprint = time.perf_counter(), report.source_fingerprint
            packages = (self.package, *self.fingerprints)
            meta: dict[str, Any] = {"command": report.command_line(self.module, argv), "quick": args.quick}
            meta |= {"repeats": args.repeats} if self.repeats else {}
            meta |= {"skipped": sorted(args.skip)} if self.parts else {}
            meta["machine"] = machine = report.machine_info(self.package)
            machine |= {f"{p}_sha256": fingerprint(p) for p in self.fingerprints}
            with LoadMonitor() as monitor:
                figures = self.measure(Run(self, args, meta, saved))
            meta |= {"run_seconds": time.perf_counter() - began, "loadavg_end": report.load_average()}
            meta["loadavg_peak"] = monitor.peak
            meta |= {f"{p}_unchanged_during_run": fingerprint(p) == machine[f"{p}_sha256"] for p in packages}
            found = {"benchmark": self.module, "meta": meta, **figures}
            log(f"{self.module}: measured in {fmt_duration(time.perf_counter() - began)}")
        if self.finish:
            self.finish(found)
        if saved is not None and (self.finish or not args.render):
            results.save(saved, found)
            log(f"results: {saved}")
        text = self.render(found)
        print(text)
        if markdown is not None:
            publish({self.section: text}, markdown)
            log(f"wrote the {self.section} section of {markdown}")
        if misses := text.count("| MISS |"):
            log(f"{misses} MISS in the section (a target or claim not met)")
        return 0
