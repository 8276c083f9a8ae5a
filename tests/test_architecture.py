"""The layers point one way and no modules import each other; the checker itself is tested too.

The real-tree tests read the project's source (``tests/architecture.py`` builds the graph); the
checker tests build small fake package trees with a known cycle, upward import or deferred import
and assert each is reported, so a checker that reports nothing cannot pass.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.architecture import (
    LAYERS,
    build_graph,
    cycles,
    deferred_project_imports,
    heavy_module_level_imports,
    main,
    module_level_caches,
    package_cycles,
    upward_imports,
)
from tests.paths import REPO


def _listing(title: str, lines: list[str]) -> str:
    return f"{len(lines)} {title}:\n" + "\n".join(f"  {line}" for line in lines)


# --- the real tree -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def repo_graph():
    return build_graph(REPO)


def test_the_graph_reads_the_whole_project(repo_graph) -> None:
    # A checker that found no modules would find no problems: make sure it sees the tree.
    assert {m.split(".")[0] for m in repo_graph.modules} == set(LAYERS)
    assert "simcore.net.network" in repo_graph.modules and "experiments.what_if.cli" in repo_graph.modules
    assert repo_graph.graph.number_of_edges() > 100


def test_no_import_cycles(repo_graph) -> None:
    found = cycles(repo_graph)
    assert not found, _listing("import cycles (imports inside functions count)", found)


def test_no_package_cycles(repo_graph) -> None:
    # strategies -> fastpath -> strategies through different modules once hid from the module test.
    found = package_cycles(repo_graph)
    assert not found, _listing("package-level import cycles", found)


def test_simcore_keeps_no_module_level_caches(repo_graph) -> None:
    found = module_level_caches(repo_graph, "simcore")
    assert not found, _listing("module-level caches in simcore (make them objects a sweep owns)", found)


def test_no_upward_imports(repo_graph) -> None:
    found = upward_imports(repo_graph)
    assert not found, _listing(f"upward imports (layers {' < '.join(LAYERS)})", found)


def test_simcore_imports_no_heavy_dependency_at_module_level(repo_graph) -> None:
    found = heavy_module_level_imports(repo_graph, "simcore")
    assert not found, _listing("module-level imports of heavy packages in simcore", found)


def test_no_deferred_project_imports(repo_graph) -> None:
    found = deferred_project_imports(repo_graph)
    assert not found, _listing("project modules imported inside functions (move them to the top)", found)


# --- the checker, on fake trees ----------------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (path -> source) under ``root``, with an empty __init__.py in every package."""
    for rel, source in files.items():
        path = root / rel
        for parent in path.relative_to(root).parents:
            if parent != Path(".") and not (root / parent / "__init__.py").exists():
                (root / parent).mkdir(parents=True, exist_ok=True)
                (root / parent / "__init__.py").write_text("", encoding="utf-8")
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return root


CLEAN = {
    "simcore/units.py": "import math\n",
    "simcore/net/network.py": "from simcore.units import math\nfrom . import routing\n",
    "simcore/net/routing.py": "import networkx\n",
    "topologies/builders.py": "from simcore.net.network import routing\n",
    "calibrate/fit.py": "import topologies.builders\nfrom simcore import units\n",
    "experiments/what_if/cli.py": "from calibrate.fit import x\nfrom topologies import builders\n",
}


def test_a_clean_tree_has_no_problems(tmp_path: Path) -> None:
    graph = build_graph(_tree(tmp_path, CLEAN))
    assert graph.graph.has_edge("simcore.net.network", "simcore.net.routing")  # relative import resolved
    assert graph.graph.has_edge("experiments.what_if.cli", "topologies.builders")  # from pkg import submodule
    assert cycles(graph) == [] and upward_imports(graph) == []
    assert main([str(tmp_path)]) == 0


def test_an_injected_cycle_is_reported_naming_both_modules(tmp_path: Path) -> None:
    files = CLEAN | {"simcore/net/routing.py": "def route():\n    from simcore.net import network\n"}
    graph = build_graph(_tree(tmp_path, files))
    [line] = cycles(graph)
    assert "simcore.net.network" in line and "simcore.net.routing" in line
    assert "simcore/net/routing.py:2 (in a function)" in line
    assert main([str(tmp_path)]) == 1


def test_a_longer_cycle_across_packages_is_reported(tmp_path: Path) -> None:
    files = CLEAN | {
        "simcore/a.py": "from simcore.b import f\n",
        "simcore/b.py": "from simcore.net.c import g\n",
        "simcore/net/c.py": "import simcore.a\n",
    }
    [line] = cycles(build_graph(_tree(tmp_path, files)))
    assert all(name in line for name in ("simcore.a", "simcore.b", "simcore.net.c"))


def test_an_injected_upward_import_is_reported_naming_both_modules(tmp_path: Path) -> None:
    files = CLEAN | {"simcore/units.py": "def load():\n    from topologies.builders import build\n"}
    graph = build_graph(_tree(tmp_path, files))
    [line] = upward_imports(graph)
    assert line.startswith("upward import: simcore.units -> topologies.builders")
    assert main([str(tmp_path)]) == 1


def test_each_layer_may_import_only_those_before_it(tmp_path: Path) -> None:
    files = CLEAN | {
        "topologies/spec.py": "import calibrate.fit\n",
        "calibrate/job.py": "from experiments.what_if import cli\n",
    }
    found = upward_imports(build_graph(_tree(tmp_path, files)))
    assert [line.split(" (")[0] for line in found] == [
        "upward import: calibrate.job -> experiments.what_if.cli",
        "upward import: topologies.spec -> calibrate.fit",
    ]


def test_type_checking_imports_do_not_count(tmp_path: Path) -> None:
    files = CLEAN | {
        "simcore/units.py": """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from topologies.builders import Spec
                from simcore.net.network import Network
            """,
    }
    graph = build_graph(_tree(tmp_path, files))
    assert cycles(graph) == [] and upward_imports(graph) == []
    # The same imports outside the guard are an upward import and a cycle.
    files["simcore/units.py"] = (
        "from topologies.builders import Spec\nfrom simcore.net.network import Network\n"
    )
    graph = build_graph(_tree(tmp_path / "unguarded", files))
    assert len(cycles(graph)) == 1 and len(upward_imports(graph)) == 1


def test_a_package_init_importing_its_own_submodules_is_not_a_cycle(tmp_path: Path) -> None:
    files = CLEAN | {
        "simcore/net/__init__.py": "from simcore.net.network import Network\nfrom .routing import route\n",
        "simcore/net/routing.py": "import simcore.net\nfrom simcore.net import network\n",
    }
    graph = build_graph(_tree(tmp_path, files))
    # routing -> network is an edge; network -> routing too: that is the one real cycle here.
    [line] = cycles(graph)
    assert line.startswith("import cycle: simcore.net.network -> simcore.net.routing -> simcore.net.network:")
    files["simcore/net/routing.py"] = "import simcore.net\n"
    assert cycles(build_graph(_tree(tmp_path / "b", files))) == []


def test_a_reexported_name_is_an_import_of_the_module_that_defines_it(tmp_path: Path) -> None:
    # network imports Route through the package __init__, which takes it from routing; routing
    # imports network: a cycle an import of the package alone would hide.
    files = CLEAN | {
        "simcore/net/__init__.py": "from simcore.net.routing import Route\n",
        "simcore/net/network.py": "from simcore.net import Route\n",
        "simcore/net/routing.py": "def f():\n    from simcore.net.network import Network\n",
    }
    [line] = cycles(build_graph(_tree(tmp_path, files)))
    assert "simcore.net.network" in line and "simcore.net.routing" in line


def test_heavy_imports_at_module_level_are_reported_and_deferred_ones_are_not(tmp_path: Path) -> None:
    files = CLEAN | {
        "simcore/plot.py": """\
            try:
                import matplotlib.pyplot as plt
            except ImportError:
                plt = None
            class Trace:
                import pandas
            def draw():
                import seaborn
            """,
        "simcore/torchy.py": "from torch import nn\n",
        "calibrate/job.py": "import torch\n",
    }
    found = heavy_module_level_imports(build_graph(_tree(tmp_path, files)), "simcore")
    assert [line.split(" (")[0] for line in found] == [
        "simcore.plot imports matplotlib.pyplot at module level",
        "simcore.plot imports pandas at module level",
        "simcore.torchy imports torch at module level",
    ]


def test_deferred_project_imports_are_listed_except_those_that_pull_in_a_heavy_package(
    tmp_path: Path,
) -> None:
    files = CLEAN | {
        "simcore/units.py": "def f():\n    from simcore.net import routing\n",
        "calibrate/job.py": "import torch\n",
        "calibrate/wrapper.py": "from calibrate.job import x\n",
        "experiments/run.py": """\
            def main():
                import matplotlib
                from calibrate.wrapper import x
                from topologies.builders import y
            """,
    }
    found = deferred_project_imports(build_graph(_tree(tmp_path, files)))
    assert found == [
        "simcore.units imports simcore.net.routing inside a function (simcore/units.py:2)",
        "experiments.run imports topologies.builders inside a function (experiments/run.py:4)",
    ]


def test_a_cycle_between_packages_through_different_modules_is_reported(tmp_path: Path) -> None:
    files = CLEAN | {
        "simcore/strategies/runner.py": "from simcore.fastpath.evaluate import run\n",
        "simcore/fastpath/evaluate.py": "run = 1\n",
        "simcore/fastpath/step.py": "from simcore.strategies.runner import x\n",
    }
    graph = build_graph(_tree(tmp_path, files))
    assert cycles(graph) == []  # no module imports itself through others
    [line] = package_cycles(graph)
    assert line.startswith("package cycle: simcore.fastpath -> simcore.strategies -> simcore.fastpath")
    assert "simcore/strategies/runner.py:1" in line and "simcore/fastpath/step.py:1" in line
    assert main([str(tmp_path)]) == 1
    del files["simcore/fastpath/step.py"]
    assert package_cycles(build_graph(_tree(tmp_path / "b", files))) == []


def test_module_level_caches_are_reported_and_read_once_tables_are_not(tmp_path: Path) -> None:
    files = CLEAN | {
        "simcore/caches.py": """\
            import functools
            import weakref
            from collections import OrderedDict
            TABLE = {"adamw": 8}
            NAMES = ("a", "b")
            _MEMO = {}
            _SEEN: OrderedDict[int, int] = OrderedDict()
            _BY_TOPOLOGY = weakref.WeakKeyDictionary()
            @functools.cache
            def table():
                return {}
            @functools.cache
            def arch_of(gpu: str) -> str:
                return gpu
            @functools.lru_cache(maxsize=8)
            def build(name, size):
                return name * size
            """,
    }
    found = module_level_caches(build_graph(_tree(tmp_path, files)), "simcore")
    assert [line.split(" (")[0] for line in found] == [
        "simcore.caches._MEMO is a module-level container filled at run time",
        "simcore.caches._SEEN is a module-level container filled at run time",
        "simcore.caches._BY_TOPOLOGY is a module-level container filled at run time",
        "simcore.caches.build is memoised at module level on its arguments",
    ]
