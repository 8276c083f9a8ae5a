"""The project's import graph, read from the source with ast, and the rules it must keep.

The layers point one way: ``simcore`` < ``topologies`` < ``calibrate`` < ``experiments``; a module
may import only modules of its own layer or of the layers before it, and no two modules may import
each other, directly or through others. What counts as an import:

- every ``import`` / ``from ... import`` statement, including those inside functions (a deferred
  import is a dependency all the same; deferring it only hides a cycle until run time);
- except those under ``if TYPE_CHECKING:`` (they never run);
- a package's ``__init__`` importing its own submodules is not an edge, nor is a module importing
  one of its ancestor packages (Python imports a package before its submodules, so those edges would
  make every re-exporting package a cycle);
- ``from pkg import name``, where ``pkg/__init__.py`` re-exports ``name`` from one of its own
  submodules, is an edge to that submodule: the dependency is the module that defines it.

Used by ``tests/test_architecture.py`` on the real tree and on small fake trees.
``python -m tests.architecture [ROOT]`` prints one line per problem (nothing when clean).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import networkx as nx

__all__ = [
    "HEAVY",
    "LAYERS",
    "SIMCORE_FORBIDDEN",
    "ImportGraph",
    "ImportSite",
    "build_graph",
    "cycles",
    "deferred_project_imports",
    "heavy_module_level_imports",
    "module_level_caches",
    "package_cycles",
    "problems",
    "upward_imports",
]

LAYERS = ("simcore", "topologies", "calibrate", "experiments")  # each may import only those before it
# Optional heavy dependencies: the only ones a module may import inside a function instead of at the top.
HEAVY = ("torch", "matplotlib", "seaborn", "pandas", "sklearn", "ray")
# What the simulator must never pull in when imported: it answers in about a second without them.
SIMCORE_FORBIDDEN = ("torch", "matplotlib", "seaborn", "ray", "pandas")


@dataclass(frozen=True)
class ImportSite:
    """One import statement's target: who imports what, where, and whether inside a function."""

    importer: str
    target: str  # the dotted name as written (resolved for relative imports), e.g. "torch.nn"
    line: int
    deferred: bool  # inside a function (runs when called, not when the module is imported)
    type_checking: bool  # under ``if TYPE_CHECKING:`` (never runs)
    name: str | None = None  # ``from target import name``
    module: str | None = None  # the project module depended on (None: outside the project)


@dataclass(frozen=True)
class ImportGraph:
    """Modules of the project (name -> file), every import site, and the module-to-module graph."""

    root: Path
    modules: dict[str, Path]
    sites: tuple[ImportSite, ...]
    graph: nx.DiGraph  # edge attribute "sites": the ImportSites behind the edge

    def where(self, importer: str, imported: str) -> str:
        """``path:line`` of each import behind an edge, ``(in a function)`` where deferred."""
        sites = self.graph.edges[importer, imported]["sites"]
        places = [self.place(s) + (" (in a function)" if s.deferred else "") for s in sites]
        return ", ".join(dict.fromkeys(places))

    def place(self, site: ImportSite) -> str:
        """``path:line`` of one import, the path relative to the root."""
        return f"{self.modules[site.importer].relative_to(self.root).as_posix()}:{site.line}"


def _module_name(rel: Path) -> str:
    name = ".".join(rel.with_suffix("").parts)
    return name.removesuffix(".__init__")


def _find_modules(root: Path) -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.py")):
            modules[_module_name(path.relative_to(root))] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, deferred: bool, typing_only: bool) -> Iterator[tuple[ast.stmt, bool, bool]]:
    """Every import statement under ``node`` with (inside a function, under TYPE_CHECKING)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, deferred, typing_only
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _walk(child, True, typing_only)
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), deferred, True)
            for stmt in child.orelse:
                yield from _walk(ast.Module(body=[stmt], type_ignores=[]), deferred, typing_only)
        else:
            yield from _walk(child, deferred, typing_only)


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> list[tuple[str, str | None]]:
    """(module written, imported name or None) pairs of one statement, relative names resolved."""
    if isinstance(node, ast.Import):
        return [(alias.name, None) for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, base] if base else parts)
    return [(base, alias.name) for alias in node.names]


def _sites(name: str, path: Path) -> list[ImportSite]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node, deferred, typing_only in _walk(tree, False, False):
        assert isinstance(node, ast.Import | ast.ImportFrom)
        for module, imported in _targets(node, package):
            found.append(ImportSite(name, module, node.lineno, deferred, typing_only, imported))
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest project module that ``name`` starts with (``None`` outside the project)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _direct(site: ImportSite, modules: dict[str, Path]) -> str | None:
    """The module a statement names: ``from pkg import sub`` names ``pkg.sub`` when that is a module."""
    if site.name is not None and f"{site.target}.{site.name}" in modules:
        return f"{site.target}.{site.name}"
    return _resolve(site.target, modules)


def _reexports(modules: dict[str, Path], sites: dict[str, list[ImportSite]]) -> dict[str, dict[str, str]]:
    """package -> {name: its own submodule the package's ``__init__`` imports ``name`` from}."""
    table: dict[str, dict[str, str]] = {}
    for package, path in modules.items():
        if path.name != "__init__.py":
            continue
        for site in sites[package]:
            source = _direct(site, modules)
            if site.name is None or site.deferred or source is None or not source.startswith(package + "."):
                continue
            table.setdefault(package, {})[site.name] = source
    return table


def _depends_on(
    site: ImportSite, modules: dict[str, Path], reexports: dict[str, dict[str, str]]
) -> str | None:
    """The project module an import depends on, following a package's re-exports to their source."""
    target = _direct(site, modules)
    seen: set[str] = set()
    while target is not None and site.name in reexports.get(target, {}) and target not in seen:
        seen.add(target)
        target = reexports[target][site.name]
    return target


def _related(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def build_graph(root: Path | str) -> ImportGraph:
    """Read every module of the four layers under ``root`` and build the module import graph."""
    root = Path(root)
    modules = _find_modules(root)
    raw = {name: _sites(name, path) for name, path in modules.items()}
    reexports = _reexports(modules, raw)
    sites = [replace(s, module=_depends_on(s, modules, reexports)) for name in modules for s in raw[name]]
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for site in sites:
        if site.type_checking or site.module is None or _related(site.importer, site.module):
            continue
        if not graph.has_edge(site.importer, site.module):
            graph.add_edge(site.importer, site.module, sites=[])
        graph.edges[site.importer, site.module]["sites"].append(site)
    return ImportGraph(root, modules, tuple(sites), graph)


def cycles(graph: ImportGraph) -> list[str]:
    """One line per group of modules that import each other: one concrete cycle, and the group."""
    lines = []
    for component in sorted((sorted(c) for c in nx.strongly_connected_components(graph.graph)), key=str):
        if len(component) < 2:
            continue
        loop = nx.find_cycle(graph.graph.subgraph(component), source=component[0])
        path = " -> ".join([a for a, _ in loop] + [loop[0][0]])
        detail = "; ".join(f"{a} -> {b} at {graph.where(a, b)}" for a, b in loop)
        group = (
            f" (all of {', '.join(component)} are in this cycle group)" if len(component) > len(loop) else ""
        )
        lines.append(f"import cycle: {path}{group}: {detail}")
    return lines


def package_of(module: str, depth: int = 2) -> str:
    """The unit a module belongs to at package level: its first ``depth`` dotted parts
    (``simcore.strategies.runner`` -> ``simcore.strategies``; a top-level module stands alone)."""
    return ".".join(module.split(".")[:depth])


def package_cycles(graph: ImportGraph, depth: int = 2) -> list[str]:
    """One line per group of packages that import each other (through any of their modules).

    A package-level cycle can hide behind a module graph without one: ``a.x`` imports ``b.y`` and
    ``b.z`` imports ``a.w``. Each line names one module-level edge per package edge of a cycle.
    """
    packages = nx.DiGraph()
    for a, b in graph.graph.edges:
        pa, pb = package_of(a, depth), package_of(b, depth)
        if pa != pb and not packages.has_edge(pa, pb):
            packages.add_edge(pa, pb, via=(a, b))
    lines = []
    for component in sorted((sorted(c) for c in nx.strongly_connected_components(packages)), key=str):
        if len(component) < 2:
            continue
        loop = nx.find_cycle(packages.subgraph(component), source=component[0])
        path = " -> ".join([a for a, _ in loop] + [loop[0][0]])
        detail = "; ".join(
            f"{packages.edges[a, b]['via'][0]} -> {packages.edges[a, b]['via'][1]} at "
            f"{graph.where(*packages.edges[a, b]['via'])}"
            for a, b in loop
        )
        lines.append(f"package cycle: {path}: {detail}")
    return lines


# Containers a module-level name may start empty as only to be filled at run time (a cache).
_CONTAINERS = frozenset(
    {"dict", "list", "set", "OrderedDict", "WeakKeyDictionary", "WeakValueDictionary", "defaultdict",
     "deque", "Counter"}
)  # fmt: skip
# Memoised functions of other arguments that still only read data files once, each with why.
READ_ONCE = {
    "simcore.workload.loader._build_preset": "a preset's workload: immutable, a pure function of the "
    "preset file and the arguments that select it",
}
_CACHE_DECORATORS = frozenset({"cache", "lru_cache", "functools.cache", "functools.lru_cache"})


def _empty_container(value: ast.expr) -> bool:
    if isinstance(value, ast.Dict):
        return not value.keys
    if isinstance(value, ast.List | ast.Set):
        return not value.elts
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name in _CONTAINERS and not value.args and not value.keywords
    return False


def _cache_decorator(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(target) in _CACHE_DECORATORS


def module_level_caches(graph: ImportGraph, layer: str = "simcore") -> list[str]:
    """Module-level state a run fills in: names bound to an empty container at module level, and
    functions memoised with ``functools.cache``/``lru_cache`` that take arguments.

    A memoised function of no arguments reads a data file once, and one whose arguments are all names
    (``str``) looks a name up in such a table (both allowed); anything keyed by what a run passes in
    (topologies, workloads, sizes) is a cache, and caches are objects owned by whoever
    runs a sweep, handed down, so that no test or benchmark has to clear them by hand.
    """
    lines = []
    for name, path in sorted(graph.modules.items()):
        if name.split(".")[0] != layer:
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            place = f"{path.relative_to(graph.root).as_posix()}:{node.lineno}"
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                if _empty_container(node.value):
                    lines.append(
                        f"{name}.{ast.unparse(target)} is a module-level container filled at run time ({place})"
                    )
            elif isinstance(node, ast.FunctionDef) and any(map(_cache_decorator, node.decorator_list)):
                arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                by_name = all(
                    a.annotation is not None and ast.unparse(a.annotation) == "str" for a in arguments
                )
                allowed = f"{name}.{node.name}" in READ_ONCE
                if not (by_name or allowed) or node.args.vararg or node.args.kwarg:
                    lines.append(f"{name}.{node.name} is memoised at module level on its arguments ({place})")
    return lines


def _layer(module: str) -> int:
    return LAYERS.index(module.split(".")[0])


def upward_imports(graph: ImportGraph) -> list[str]:
    """One line per import of a later layer by an earlier one, naming both modules."""
    return [
        f"upward import: {a} -> {b} ({' < '.join(LAYERS)}) at {graph.where(a, b)}"
        for a, b in sorted(graph.graph.edges)
        if _layer(b) > _layer(a)
    ]


def heavy_module_level_imports(
    graph: ImportGraph, layer: str = "simcore", packages: Iterable[str] = SIMCORE_FORBIDDEN
) -> list[str]:
    """Imports of ``packages`` that run when a module of ``layer`` is imported (not inside functions)."""
    banned = set(packages)
    return [
        f"{s.importer} imports {s.target} at module level ({graph.place(s)})"
        for s in graph.sites
        if s.importer.split(".")[0] == layer
        and s.target.split(".")[0] in banned
        and not s.deferred
        and not s.type_checking
    ]


def _heavy_at_import(graph: ImportGraph) -> set[str]:
    """Project modules whose import (following module-level project imports) imports a heavy package."""
    heavy = {
        s.importer
        for s in graph.sites
        if s.target.split(".")[0] in HEAVY and not s.deferred and not s.type_checking
    }
    eager = nx.DiGraph()
    eager.add_nodes_from(graph.modules)
    for module in graph.modules:  # importing a.b.c first imports the packages a and a.b
        parts = module.split(".")
        eager.add_edges_from((module, ".".join(parts[:i])) for i in range(1, len(parts)))
    for s in graph.sites:
        if not s.deferred and not s.type_checking and s.module is not None and s.module != s.importer:
            eager.add_edge(s.importer, s.module)
    return {m for m in graph.modules if heavy & (nx.descendants(eager, m) | {m})}


def deferred_project_imports(graph: ImportGraph) -> list[str]:
    """Project modules imported inside functions, other than modules that pull in a heavy dependency.

    Deferring an import is allowed only to keep an optional heavy dependency (torch, plotting, ...)
    out of import time; a project module whose import pulls one in counts as that dependency.
    """
    heavy = _heavy_at_import(graph)
    lines = [
        f"{s.importer} imports {s.module} inside a function ({graph.place(s)})"
        for s in graph.sites
        if s.deferred and not s.type_checking and s.module is not None and s.module not in heavy
    ]
    return list(dict.fromkeys(lines))


def problems(root: Path | str) -> list[str]:
    """Every cycle (of modules or of packages) and upward import under ``root``, one line each."""
    graph = build_graph(root)
    return cycles(graph) + package_cycles(graph) + upward_imports(graph)


def main(argv: Iterable[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    found = problems(args[0] if args else ".")
    for line in found:
        print(f"- {line}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
