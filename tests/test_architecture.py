"""The house rules of the tree, read from the import graph (docs/architecture.md draws it).

- ``loader/`` is grouped by the stage of the data path, and a module imports only its own
  stage and earlier ones: core -> intake -> durability -> pending -> loading -> ops. An
  earlier stage reaches a later one through a Protocol of ``loader/abc.py``, never by
  importing it; the wiring (``loader/service.py``, ``loader/config.py``) sits above all stages.
- ``schedulers/`` is pure and below everything; ``api/`` sits on ``loader/``, ``cli/`` on
  both; ``testing/`` is the harness shared by ``tests/``, ``benchmarks/`` and ``trials/``,
  none of which imports another.
- No import circles, among modules or among packages.

Every import counts: at module level, inside functions, and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("schedulers", "producer", "loader", "api", "cli", "testing", "tests", "benchmarks", "trials")

#: Layers from the bottom; a module may import its own layer and the ones below it. Within
#: the last layer each package stands alone (``SEPARATE``).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("schedulers",),
    ("producer",),  # the producer client: nothing of the service (httpx and pydantic only)
    ("loader.core", "loader.abc"),  # the shared vocabulary, and the ports between stages
    ("loader.intake",),  # 1. a request becomes validated, numbered updates
    ("loader.durability",),  # 2. the WAL, the catalog, recovery, quarantine
    ("loader.pending",),  # 3. waiting to be loaded, spilled beyond memory
    ("loader.loading",),  # 4. the dispatcher, Spark and the Delta commit
    ("loader.ops",),  # 5. status, exports, metrics, maintenance
    ("loader",),  # the wiring: loader.service, loader.config
    ("api",),
    ("cli",),
    ("testing",),
    ("tests", "benchmarks", "trials"),
)
SEPARATE = {"tests", "benchmarks", "trials"}


def module_files(root: Path = ROOT) -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (``from package import module`` names the module)."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(filter(None, (resolve(alias.name) for alias in node.names)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    found.add(target if target in modules else resolve(base))  # type: ignore[arg-type]
        graph[name] = {target for target in found if target and target != name}
    return graph


def layer(module: str) -> tuple[int, str]:
    """(layer index, the prefix that placed it): the longest matching prefix wins."""
    best: tuple[int, str] | None = None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[1])):
                best = (index, prefix)
    assert best is not None, f"{module} belongs to no layer: add its package to LAYERS"
    return best


def upward_imports(graph: Mapping[str, Iterable[str]]) -> list[str]:
    wrong = []
    for module, targets in graph.items():
        (mine, my_prefix), top = layer(module), module.split(".")[0]
        for target in targets:
            theirs, their_prefix = layer(target)
            if theirs > mine:
                wrong.append(f"{module} imports {target} ({their_prefix} comes after {my_prefix})")
            elif top in SEPARATE and target.split(".")[0] in SEPARATE - {top}:
                wrong.append(f"{module} imports {target} ({top} and {target.split('.')[0]} share testing/ only)")
    return sorted(wrong)


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph.get(start, ())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def package_graph(graph: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """The same graph between packages (``loader.intake``, ``cli``, ...), for package circles."""
    packages: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph.items():
        for target in targets:
            a, b = layer(module)[1], layer(target)[1]
            if a != b:
                packages[a].add(b)
    return packages


@functools.cache
def project_graph() -> dict[str, set[str]]:
    """Parsed on first use, not at collection: every test process collects this module, one runs it (2.5 s)."""
    return import_graph(module_files())


def test_no_module_imports_from_a_later_stage_or_layer() -> None:
    assert not upward_imports(project_graph()), "\n".join(upward_imports(project_graph()))


def test_no_import_circles_among_modules() -> None:
    assert not circles(project_graph()), circles(project_graph())


def test_no_import_circles_among_packages() -> None:
    assert not circles(package_graph(project_graph())), circles(package_graph(project_graph()))


def test_the_stages_are_where_the_map_says() -> None:
    """Every module of loader/ is in a stage, the ports or the wiring; none is left at the top."""
    top_level = sorted(
        m
        for m in project_graph()
        if m.startswith("loader.")
        and m.count(".") == 1
        and m
        not in {
            "loader.abc",
            "loader.config",
            "loader.service",
            "loader.core",
            "loader.intake",
            "loader.durability",
            "loader.pending",
            "loader.loading",
            "loader.ops",
        }
    )
    assert not top_level, f"modules outside the stages (docs/architecture.md): {top_level}"


def test_the_checks_catch_what_they_are_for() -> None:
    """The rules above on a small graph with one of each fault."""
    graph = {
        "loader.intake.submission": {"loader.loading.dispatcher", "loader.abc"},  # a later stage
        "loader.loading.dispatcher": {"loader.pending.store"},  # fine: an earlier one
        "loader.pending.store": {"loader.abc"},
        "loader.abc": set(),
        "tests.test_x": {"benchmarks.y"},  # a sibling of the last layer
        "benchmarks.y": {"testing.report"},
        "testing.report": set(),
        "cli.a": {"cli.b"},  # a circle
        "cli.b": {"cli.a"},
    }
    assert upward_imports(graph) == [
        "loader.intake.submission imports loader.loading.dispatcher (loader.loading comes after loader.intake)",
        "tests.test_x imports benchmarks.y (tests and benchmarks share testing/ only)",
    ]
    assert circles(graph) == [["cli.a", "cli.b"]]
    assert circles(package_graph({"loader.intake.a": {"loader.pending.b"}, "loader.pending.b": {"loader.intake.a"}}))
