"""The docs name only what exists: settings and ``loader`` commands, checked against the code.

Docs drift when the code moves under them: a setting renamed, a section split, an option
dropped. These tests read README.md, docs/*.md and deploy/loader.example.toml the way a
reader would follow them, and check each name against the code itself (no Spark, no
server, well under a second of work):

1. **Settings.** A name counts as a setting where the text says so unambiguously:

   - ``[section]`` or ``[section] name`` (``= value``) in backticks, as the TOML file is
     written (``[spark] mode = "connect"``, ``[[views]]``);
   - ``section.name`` in backticks, when ``section`` is a section of the configuration
     (``spill.memory_budget_bytes``, ``caching.global_caches``). ``spark.`` followed by two
     or more parts is a Spark property, a free-form key inside ``[spark] conf``
     (``spark.sql.shuffle.partitions``); file names (``metrics.py``) and failpoints
     (``spill.write``, ``loader.core.failpoints.POINTS``) are not settings;
   - ``name = value`` in backticks whose value is TOML (``max_tables_per_job = 1``): a
     config file is TOML, so ``timed = True`` is Python, not a setting;
   - ``LOADER_<NAME>`` environment variables (``__`` between nested parts, the old flat
     names of ``loader.config.ALIASES`` included), except the ones the code reads for
     something else (the CLI's ``--token``, failpoints);
   - a Markdown table whose first column is headed ``setting``;
   - fenced ``toml`` blocks, parsed with tomllib, every key walked and the block
     validated as a configuration;
   - keyword arguments of ``LoaderProducer``/``AsyncLoaderProducer``/``ProducerSettings``
     in fenced ``python`` blocks;
   - deploy/loader.example.toml: loaded whole by ``load_settings``, every key walked, and
     the settings it shows commented out (``# dir = "/fast-disk/loader-wal"``) walked too.

   A bare name in backticks (``workers``) is not taken for a setting: code names of every
   kind share that form. Where the section is known, the value shown is validated as well.

   The model is ``loader.config.Settings`` with its nested sections, which hold the table
   and view declarations (``loader/core/tables.py``, ``loader/core/views.py``); a table
   headed ``setting`` in docs/producers.md is ``producer.settings.ProducerSettings``.

2. **Commands.** Every ``loader <command>`` the docs show, on a line of a shell block or in
   backticks, answers ``--help`` with exit status 0 (typer's CliRunner on ``cli.app.app``),
   and every ``--option`` shown with it is one of that command's.

Every failure names the file, the line and the name, so the fix starts at the doc line.
"""

from __future__ import annotations

import ast
import bisect
import os
import re
import tomllib
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
import typer.main
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from typer.testing import CliRunner

from cli.app import app
from loader.config import ALIASES, Settings, load_settings
from loader.core import failpoints
from loader.core.schema import TableSchema
from loader.core.views import CachingConfig
from producer.settings import ProducerSettings

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
EXAMPLE = REPO / "deploy" / "loader.example.toml"
PRODUCER_DOC = "producers.md"

#: Classes whose keyword arguments are producer settings (docs/producers.md's examples).
PRODUCER_CLASSES = {"LoaderProducer", "AsyncLoaderProducer", "ProducerSettings"}

#: ``name = value`` in backticks that is code, not a setting: (doc, name) -> the code file
#: that has it (checked to still have it, so the exception cannot outlive the code).
NOT_SETTINGS: dict[tuple[str, str], str] = {
    ("scheduling.md", "max_tables"): "schedulers/job_groups.py",  # GroupedPolicy's argument
}

#: File names are not settings (``metrics.py`` is not ``[metrics] py``).
FILE_SUFFIXES = {"py", "md", "toml", "json", "jsonl", "yml", "yaml", "png", "parquet", "csv", "ndjson", "log", "txt"}


# -- the configuration model --------------------------------------------------------------

#: The annotation of a mapping whose keys are the operator's own (``[spark] conf``,
#: ``policy_params``): any key inside it is fine.
FREE_FORM = "free-form"

Models = tuple[type[BaseModel], ...] | str  # the models a value may be, or FREE_FORM


def _inner(annotation: Any) -> Models:
    """The models a value of ``annotation`` may hold, through Optional, unions, lists and tuples."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _inner(get_args(annotation)[0])
    if annotation is dict or origin in (dict, Mapping):
        return FREE_FORM
    if origin in (Union, types.UnionType, list, tuple, set, frozenset, Sequence):
        found: list[type[BaseModel]] = []
        for arg in get_args(annotation):
            if arg is Ellipsis:
                continue
            inner = _inner(arg)
            if inner == FREE_FORM:
                return FREE_FORM
            found += inner  # type: ignore[arg-type]
        return tuple(found)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return (annotation,)
    return ()


def _fields(model: type[BaseModel], name: str) -> list[FieldInfo]:
    """The field ``name`` as the TOML file spells it (the alias where there is one: ``schema``)."""
    return [info for key, info in model.model_fields.items() if (info.alias or key) == name]


def reachable(*roots: type[BaseModel]) -> list[type[BaseModel]]:
    """Every model nested under ``roots``, roots included."""
    seen: list[type[BaseModel]] = []
    todo = list(roots)
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.append(model)
        for info in model.model_fields.values():
            inner = _inner(info.annotation)
            if inner != FREE_FORM:
                todo += inner  # type: ignore[arg-type]
    return seen


LOADER_MODELS = reachable(Settings)
LOADER_FIELD_NAMES = {info.alias or key for m in LOADER_MODELS for key, info in m.model_fields.items()} | set(ALIASES)
ALL_FIELD_NAMES = LOADER_FIELD_NAMES | set(ProducerSettings.model_fields)

#: First parts of ``a.b`` that name a section: the root's fields holding models (``spill``,
#: ``tables``, ``views``, ...), and the two nested tables the docs name on their own.
ANCHORS: dict[str, Models] = {
    key: inner
    for key, info in Settings.model_fields.items()
    if (inner := _inner(info.annotation)) == FREE_FORM or inner
}
ANCHORS["caching"] = (CachingConfig,)  # a view's [views.caching]
ANCHORS["schema"] = (TableSchema,)  # a table's schema.columns, schema.key, ...


@dataclass
class Resolved:
    """What a dotted path names: ``unknown`` (the first part that is no setting, as ``a.b``)
    or the fields it may be (several where a union holds several models)."""

    unknown: str | None = None
    fields: list[FieldInfo] = field(default_factory=list)


def resolve(path: Sequence[str], models: Models) -> Resolved:
    """Walk ``path`` down the models (a key inside a free-form mapping is always fine)."""
    if models == (Settings,) and path and path[0] in ALIASES:  # an old flat name
        path = [*ALIASES[path[0]], *path[1:]]
    current: Models = models
    found: list[FieldInfo] = []
    for i, part in enumerate(path):
        if current == FREE_FORM:
            return Resolved()
        found = [info for model in current for info in _fields(model, part)]  # type: ignore[union-attr]
        if not found:
            return Resolved(unknown=".".join(path[: i + 1]))
        inners = [_inner(info.annotation) for info in found]
        current = FREE_FORM if FREE_FORM in inners else tuple(m for inner in inners for m in inner)
    return Resolved(fields=found)


def value_problem(fields: list[FieldInfo], text: str) -> str | None:
    """Why the TOML value ``text`` fits none of ``fields`` (None: it fits one). Field
    validators (``policy``'s list of names) are not run: the type and its bounds are."""
    try:
        value = tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return f"its value {text} is not a TOML value (a config file is TOML)"
    errors = []
    for info in fields:
        annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        try:
            TypeAdapter(annotation).validate_python(value)
            return None
        except ValidationError as exc:
            errors.append(exc.errors()[0]["msg"])
    return f"its value {text} is invalid: {'; '.join(errors)}"


def toml_unknown_keys(data: Mapping[str, Any], models: Models, trail: tuple[str, ...] = ()) -> Iterator[str]:
    """Every key of a parsed TOML document (nested tables, arrays of tables) that is no setting."""
    for key, value in data.items():
        if models == FREE_FORM or (not trail and models == (Settings,) and key in ALIASES):
            continue
        path = (*trail, key)
        found = [info for model in models for info in _fields(model, key)]  # type: ignore[union-attr]
        if not found:
            yield ".".join(path)
            continue
        inners = [_inner(info.annotation) for info in found]
        inner: Models = FREE_FORM if FREE_FORM in inners else tuple(m for i in inners for m in i)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, dict):
                yield from toml_unknown_keys(item, inner, path)


# -- reading the docs --------------------------------------------------------------------


@dataclass
class Fence:
    lang: str
    first_line: int  # line number of the block's first line of content
    text: str  # its lines, without the indentation of the fence itself


@dataclass
class Doc:
    """A Markdown file as prose (fenced blocks blanked, so line numbers hold) and its blocks."""

    path: Path
    prose: str
    fences: list[Fence]

    @classmethod
    def read(cls, path: Path) -> Doc:
        lines = path.read_text(encoding="utf-8").split("\n")
        prose = list(lines)
        fences: list[Fence] = []
        opened: tuple[str, int, list[str]] | None = None
        indent = 0
        for index, line in enumerate(lines):
            if line.strip().startswith("```"):
                if opened is None:
                    opened = (line.strip()[3:].strip().lower(), index + 2, [])
                    indent = len(line) - len(line.lstrip())
                else:
                    fences.append(Fence(opened[0], opened[1], "\n".join(opened[2])))
                    opened = None
                prose[index] = ""
            elif opened is not None:
                opened[2].append(line[indent:] if not line[:indent].strip() else line)
                prose[index] = ""
        return cls(path, "\n".join(prose), fences)

    @property
    def name(self) -> str:
        return self.path.name

    def where(self, line: int) -> str:
        try:
            shown = self.path.relative_to(REPO)
        except ValueError:
            shown = self.path
        return f"{shown}:{line}"

    def spans(self) -> Iterator[tuple[int, str]]:
        """Inline code (a span may wrap onto the next line, not across a blank one), with its
        line and its text on one line."""
        starts = [0] + [m.end() for m in re.finditer("\n", self.prose)]
        for match in re.finditer(r"`((?:[^`\n]|\n(?![ \t]*\n))+)`", self.prose):
            yield bisect.bisect_right(starts, match.start()), " ".join(match.group(1).split())

    def table_rows(self, header: str) -> Iterator[tuple[int, str]]:
        """First cells of the rows of every table whose first column is headed ``header``."""
        lines = self.prose.split("\n")
        inside = False
        for number, line in enumerate(lines, start=1):
            cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else None
            if cells is None:
                inside = False
            elif cells[0] == header:
                inside = True
            elif inside and not set(cells[0]) <= set("-: "):
                yield number, cells[0]


def example_comments() -> Doc:
    """deploy/loader.example.toml's comments as prose (same line numbers), for their spans."""
    lines = EXAMPLE.read_text(encoding="utf-8").split("\n")
    text = "\n".join(line.split("#", 1)[1] if "#" in line else "" for line in lines)
    return Doc(EXAMPLE, text, [])


# -- the checks --------------------------------------------------------------------------

SECTION_SPAN = re.compile(r"\[\[?([A-Za-z_][\w.]*)\]\]?(?:\s+([A-Za-z_]\w*)(?:\s*=\s*(.+))?)?")
DOTTED_SPAN = re.compile(r"([a-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\s*=\s*(.+))?")
ASSIGNMENT_SPAN = re.compile(r"([a-z_]\w*)\s*=\s*(.+)")
ENVIRONMENT = re.compile(r"\bLOADER_([A-Z0-9_]*[A-Z0-9])\b")


def _named(
    doc: Doc, line: int, path: Sequence[str], value: str | None, models: Models = (Settings,), shown: str = ""
) -> list[str]:
    """The problem with a mention of setting ``path`` (from ``models``), if any; ``shown`` is
    how the doc wrote it."""
    anchor = shown.split(".")[0] + "." if shown else ""  # ``caching.`` of ``caching.observations``
    shown = shown or ".".join(path)
    resolved = resolve(path, models)
    if resolved.unknown is not None:
        return [f"{doc.where(line)}: `{shown}` is not a setting (no `{anchor}{resolved.unknown}` in the configuration)"]
    if value is not None and resolved.fields:
        problem = value_problem(resolved.fields, value)
        if problem:
            return [f"{doc.where(line)}: `{shown}`: {problem}"]
    return []


def span_problems(doc: Doc) -> list[str]:
    """Settings named in backticks: ``[section] name``, ``section.name``, ``name = value``."""
    problems: list[str] = []
    for line, span in doc.spans():
        if match := SECTION_SPAN.fullmatch(span):
            section, name, value = match.groups()
            problems += _named(doc, line, [*section.split("."), *([name] if name else [])], value)
        elif (match := DOTTED_SPAN.fullmatch(span)) and match.group(1).split(".")[0] in ANCHORS:
            parts = match.group(1).split(".")
            if parts[-1] in FILE_SUFFIXES or (parts[0] == "spark" and len(parts) > 2) or span in failpoints.POINTS:
                continue  # a file name; a Spark property (free-form, inside [spark] conf); a failpoint
            problems += _named(doc, line, parts[1:], match.group(2), ANCHORS[parts[0]], shown=match.group(1))
        elif match := ASSIGNMENT_SPAN.fullmatch(span):
            name, value = match.groups()
            try:
                tomllib.loads(f"value = {value}")
            except tomllib.TOMLDecodeError:
                continue  # code of another language (``timed = True``)
            if name not in ALL_FIELD_NAMES and (doc.name, name) not in NOT_SETTINGS:
                problems.append(f"{doc.where(line)}: `{name}` is not a setting of any configuration model")
    return problems


@cache
def _cli_environment() -> frozenset[str]:
    """Environment variables the CLI's options read (``LOADER_TOKEN``): not settings."""
    command = typer.main.get_command(app)
    names = set()
    for sub in command.commands.values():  # type: ignore[attr-defined]
        for param in sub.params:
            envvar = getattr(param, "envvar", None)
            names.update([envvar] if isinstance(envvar, str) else envvar or [])
    return frozenset(names)


def environment_problems(doc: Doc, text: str) -> list[str]:
    """``LOADER_*`` variables: settings, nested with ``__``, or old flat names."""
    other = _cli_environment() | {failpoints.ENV, failpoints.WORKER_ENV}
    problems: list[str] = []
    for number, line in enumerate(text.split("\n"), start=1):
        for match in ENVIRONMENT.finditer(line):
            if match.group(0) in other:
                continue
            path = match.group(1).lower().split("__")
            resolved = resolve(path, (Settings,))
            if resolved.unknown is not None:
                problems.append(
                    f"{doc.where(number)}: {match.group(0)} is not a setting's environment variable "
                    f"(no `{resolved.unknown}` in the configuration)"
                )
    return problems


def table_problems(doc: Doc) -> list[str]:
    """Names in the first column of a table headed ``setting``."""
    models: Models = (ProducerSettings,) if doc.name == PRODUCER_DOC else (Settings,)
    problems: list[str] = []
    for line, cell in doc.table_rows("setting"):
        for name in re.findall(r"`([^`]+)`", cell):
            path = name.split(".")
            if models == (Settings,) and len(path) == 1:  # a nested setting's own name, section unsaid
                if name not in LOADER_FIELD_NAMES:
                    problems.append(f"{doc.where(line)}: `{name}` is not a setting")
                continue
            problems += _named(doc, line, path, None, models)
    return problems


def line_of(text: str, key: str) -> int:
    """The first line of TOML ``text`` that sets (or opens) the last part of dotted ``key``."""
    last = re.escape(key.split(".")[-1])
    lines = text.split("\n")
    return next((n for n, line in enumerate(lines, start=1) if re.match(rf"\s*\[*\s*\"?{last}\b", line)), 1)


def fence_problems(doc: Doc) -> list[str]:
    """TOML blocks: every key a setting, the block a valid configuration; Python blocks:
    the producer's keyword arguments."""
    problems: list[str] = []
    for fence in doc.fences:
        if fence.lang == "toml":
            try:
                data = tomllib.loads(fence.text)
            except tomllib.TOMLDecodeError as exc:
                problems.append(f"{doc.where(fence.first_line)}: the TOML block does not parse: {exc}")
                continue
            for key in toml_unknown_keys(data, (Settings,)):
                line = fence.first_line - 1 + line_of(fence.text, key)
                problems.append(f"{doc.where(line)}: `{key}` is not a setting")
            try:
                Settings.model_validate(data)  # (model_validate: no environment read)
            except ValidationError as exc:
                why = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
                problems.append(f"{doc.where(fence.first_line)}: the TOML block is not a valid configuration: {why}")
        elif fence.lang == "python":
            for node in ast.walk(ast.parse(fence.text)):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) in PRODUCER_CLASSES:
                    for keyword in node.keywords:
                        if keyword.arg is not None and not _fields(ProducerSettings, keyword.arg):
                            line = fence.first_line + node.lineno - 1
                            problems.append(f"{doc.where(line)}: `{keyword.arg}` is not a producer setting")
    return problems


def setting_problems(doc: Doc) -> list[str]:
    """Every way ``doc`` names settings (the module docstring lists them)."""
    everything = doc.path.read_text(encoding="utf-8")  # (environment variables: code blocks too)
    return span_problems(doc) + environment_problems(doc, everything) + table_problems(doc) + fence_problems(doc)


def _report(problems: list[str]) -> str:
    return f"{len(problems)} doc line(s) name what the code does not have:\n  " + "\n  ".join(problems)


@pytest.fixture(autouse=True)
def _no_loader_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks read files only: a LOADER_* variable of the shell running the tests must
    not change what ``load_settings`` makes of the example."""
    for name in [n for n in os.environ if n.upper().startswith("LOADER_")]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_settings_named_in_docs_exist(path: Path) -> None:
    """A setting a doc names is one an operator can set: a renamed or removed setting makes
    the doc line that still names it fail here."""
    problems = setting_problems(Doc.read(path))
    assert not problems, _report(problems)


def test_example_configuration_loads_and_names_only_settings() -> None:
    """deploy/loader.example.toml is "every setting, with comments": it must load as it is,
    each key in it must be a field (walked here, not only left to pydantic), and so must
    each setting it shows commented out and each one its comments name."""
    text = EXAMPLE.read_text(encoding="utf-8")
    load_settings(EXAMPLE)
    doc = example_comments()
    problems = [
        f"{doc.where(line_of(text, key))}: `{key}` is not a setting"
        for key in toml_unknown_keys(tomllib.loads(text), (Settings,))
    ]
    section: list[str] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if header := re.fullmatch(r"\s*\[\[?([^\]]+)\]\]?\s*(#.*)?", line):
            section = header.group(1).strip().split(".")
        elif commented := re.fullmatch(r"#\s*([A-Za-z_]\w*|\"[^\"]+\")\s*=\s*(.+)", line.strip()):
            key, value = commented.groups()
            try:
                (name,) = tomllib.loads(f"{key} = {value}")  # (a trailing comment is TOML too)
            except tomllib.TOMLDecodeError:
                continue  # prose that happens to hold an "="
            problems += _named(doc, number, [*section, name], value)
    problems += span_problems(doc) + environment_problems(doc, text)
    assert not problems, _report(problems)


def test_exceptions_still_name_code() -> None:
    """Each assignment let pass as code (``NOT_SETTINGS``) is still in the code it names:
    an exception must not outlive its reason."""
    for (doc, name), where in NOT_SETTINGS.items():
        assert (REPO / "docs" / doc).exists(), doc
        assert re.search(rf"\b{name}\b", (REPO / where).read_text(encoding="utf-8")), f"{name} is gone from {where}"


def test_configuration_models_refuse_unknown_keys() -> None:
    """The walk above trusts that a key the models lack is an error at start-up, not a
    silently ignored typo: every model of the configuration (and the producer's) forbids
    extra keys."""
    lenient = [m.__name__ for m in [*LOADER_MODELS, ProducerSettings] if m.model_config.get("extra") != "forbid"]
    assert not lenient, f"models that accept unknown keys: {lenient}"


def test_setting_checks_catch_a_wrong_name(tmp_path: Path) -> None:
    """The recognisers do find settings (a check that finds nothing passes vacuously): a doc
    naming wrong settings in each recognised form fails, each at its line."""
    bad = tmp_path / "bad.md"
    text = "\n".join(
        [
            "Set `[spark] mood = \"connect\"` and `spill.memory_budget` and `[loading] max_attempts = -1`,",  # 1
            "`LOADER_SPARK__MOOD=x`, `per_table_serie = \"top-k\"`; fine: `spark.sql.shuffle.partitions`,",  # 2
            "`metrics.py`, `[spark] mode = \"connect\"`, `timed = True`, `LOADER_TOKEN`.",  # 3
            "",
            "| setting | default |",  # 5
            "| --- | --- |",
            "| `workerz` | 2 |",  # 7
            "",
            "```toml",
            "[[tables]]",
            'name = "t"',
            "wieght = 2.0",  # 12
            "```",
        ]
    )
    bad.write_text(text, encoding="utf-8")
    found = setting_problems(Doc.read(bad))
    problems = "\n".join(found)
    for line, name in [
        (1, "spark.mood"),
        (1, "spill.memory_budget"),
        (1, "loading.max_attempts"),
        (2, "LOADER_SPARK__MOOD"),
        (2, "per_table_serie"),
        (7, "workerz"),
        (12, "tables.wieght"),
    ]:
        assert re.search(rf"bad\.md:{line}: .*{re.escape(name)}", problems), f"not caught: {name} (line {line})"
    assert len(found) == 8, problems  # the seven above, and the TOML block's validation


# -- commands ----------------------------------------------------------------------------

SHELL = {"", "sh", "bash", "shell", "console"}
#: ``loader ...``, ``.venv/bin/loader ...`` or ``$ loader ...``: in a block, at the start of
#: a line (an indented ``loader`` in a block is prose of a drawing: "loader against ...").
COMMAND_LINE = re.compile(r"(?:\$\s+)?(?:\S*/)?loader\s+(\S.*)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


@dataclass(frozen=True)
class Command:
    where: str
    text: str  # what follows ``loader``: the command, its arguments and options

    @property
    def name(self) -> str:
        return self.text.split()[0]

    @property
    def options(self) -> list[str]:
        return OPTION.findall(self.text)


def commands_shown(doc: Doc) -> list[Command]:
    """``loader <command> ...`` on a line of a shell block (continuations joined, comments
    dropped) or as a code span."""
    found: list[Command] = []
    for fence in doc.fences:
        if fence.lang not in SHELL:
            continue
        lines = fence.text.split("\n")
        index = 0
        while index < len(lines):
            start, line = index, lines[index]
            while line.rstrip().endswith("\\") and index + 1 < len(lines):
                index += 1
                line = line.rstrip()[:-1] + " " + lines[index]
            index += 1
            line = re.sub(r"\s#.*$", "", line).rstrip()
            if match := COMMAND_LINE.fullmatch(line):
                found.append(Command(doc.where(fence.first_line + start), match.group(1)))
    for line, span in doc.spans():
        if match := COMMAND_LINE.fullmatch(span):
            found.append(Command(doc.where(line), match.group(1)))
    return [c for c in found if re.fullmatch(r"[a-z][a-z-]*", c.name)]  # (not a placeholder: <command>)


@cache
def _help(name: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [name, "--help"])
    return result.exit_code, result.output


@cache
def _options(name: str) -> frozenset[str]:
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    return frozenset(opt for param in command.params for opt in (*param.opts, *param.secondary_opts)) | {"--help"}


def command_problems(doc: Doc) -> list[str]:
    problems: list[str] = []
    for command in commands_shown(doc):
        status, output = _help(command.name)
        if status != 0:
            said = " ".join(re.sub(r"[╭╮╰╯│─]+", " ", output).split())  # (rich's box drawn away)
            problems.append(f"{command.where}: `loader {command.name} --help` exits {status}: {said[:200]}")
            continue
        unknown = [o for o in command.options if o not in _options(command.name)]
        if unknown:
            problems.append(f"{command.where}: `loader {command.name}` has no option {', '.join(unknown)}")
    return problems


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_loader_commands_in_docs_answer_help(path: Path) -> None:
    """A command the docs show runs: ``loader <command> --help`` exits 0, and the options
    shown with it exist, so a reader copying the line gets the command the doc describes."""
    problems = command_problems(Doc.read(path))
    assert not problems, _report(problems)


def test_readme_shows_commands() -> None:
    """The command check above sees the README's commands (not a vacuous pass): the service,
    the producer client and the simulator, at least."""
    names = {command.name for command in commands_shown(Doc.read(README))}
    assert {"serve", "demo", "submit", "simulate", "compare", "gen-trace", "sample"} <= names, names
