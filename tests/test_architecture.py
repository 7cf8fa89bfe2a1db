"""The architecture holds: plugins use each other through Python (no argv, no argparse internals, no
astra_sim.cli), every import between distributions is declared and none forms a cycle, the kernel imports no
plugin and no test tool, and kernel modules stay a size a reader can hold."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
KERNEL = ROOT / "core" / "astra_sim"
PLUGINS = sorted(p for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists())
#: argparse's private names a plugin must not reach for (the kernel's cliutil wraps what they did)
ARGPARSE_INTERNALS = ("_actions", "_SubParsersAction", "_option_string_actions", "_StoreTrueAction",
                      "_AppendAction", "_positionals", "_optionals")


def _distribution(folder):
    """(distribution name, its top-level packages, {dependency names}) of a pyproject folder."""
    data = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    packages = data["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    deps = list(data["project"].get("dependencies", []))
    for extra in data["project"].get("optional-dependencies", {}).values():
        deps += extra
    names = {re.split(r"[<>=\[ ;]", d, maxsplit=1)[0].strip().lower() for d in deps}
    return data["project"]["name"].lower(), {Path(p).name for p in packages}, names


DISTRIBUTIONS = {folder: _distribution(folder) for folder in [ROOT, ROOT / "testing", *PLUGINS]}
PACKAGE_OF = {package: name for name, packages, _ in DISTRIBUTIONS.values() for package in packages}


def _sources(folder):
    src = folder / "src" if (folder / "src").is_dir() else folder / "core"
    return sorted(src.rglob("*.py"))


def _imported_packages(path):
    """Top-level packages a module imports (anywhere in it: lazy imports count too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("folder", PLUGINS, ids=lambda p: p.name)
def test_plugins_use_each_other_through_python_not_argv(folder):
    for path in _sources(folder):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "astra_sim.cli":
                pytest.fail(f"{path.relative_to(ROOT)}:{node.lineno} imports astra_sim.cli")
            if isinstance(node, ast.Import) and any(a.name == "astra_sim.cli" for a in node.names):
                pytest.fail(f"{path.relative_to(ROOT)}:{node.lineno} imports astra_sim.cli")
            if isinstance(node, ast.Attribute) and node.attr in ARGPARSE_INTERNALS:
                pytest.fail(f"{path.relative_to(ROOT)}:{node.lineno} reaches argparse's private {node.attr}")


@pytest.mark.parametrize("folder", PLUGINS + [ROOT / "testing"], ids=lambda p: p.name)
def test_every_import_between_distributions_is_declared(folder):
    name, own, declared = DISTRIBUTIONS[folder]
    for path in _sources(folder):
        for package in _imported_packages(path) - own:
            other = PACKAGE_OF.get(package)
            if other is not None and other != name:
                assert other in declared, f"{path.relative_to(ROOT)} imports {package} ({other}), which " \
                                          f"{folder.name}/pyproject.toml does not declare"


def test_no_import_cycle_between_distributions():
    graph = nx.DiGraph()
    for folder, (name, own, _) in DISTRIBUTIONS.items():
        graph.add_node(name)
        for path in _sources(folder):
            for package in _imported_packages(path) - own:
                other = PACKAGE_OF.get(package)
                if other is not None and other != name:
                    graph.add_edge(name, other)
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, f"import cycles between distributions: {cycles}"


def test_the_kernel_imports_no_plugin_and_no_test_tool():
    plugin_packages = {package for folder in PLUGINS for package in DISTRIBUTIONS[folder][1]}
    forbidden = plugin_packages | {"pytest", "hypothesis", "astra_sim_testing", "_pytest"}
    for path in _sources(ROOT):
        bad = _imported_packages(path) & forbidden
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_kernel_modules_stay_small_and_the_kernel_does_not_grow():
    sizes = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in KERNEL.rglob("*.py")}
    large = {str(p.relative_to(ROOT)): n for p, n in sizes.items() if n > 600}
    assert not large, f"kernel modules over 600 lines (split them along their concepts): {large}"
    # Issue 34 asks for a kernel under 8k lines; this ratchet keeps it from growing while it gets there. 10,645
    # lines once the native collectives moved to plugins/collectives_native; then + 318 for the progress lines
    # and shell completion, the compact report layout, and the bounds and signal handling of issue 39; 10,039
    # once folding moved to plugins/folding (the kernel keeps the symmetry's description, astra_sim.symmetry);
    # + 91 for the engine's end of a nanosecond and the completions that commute when one issues work (37); + 26
    # for compact workloads' group images along cycles; + 42 for issue 39's Dask re-scatter, reclaiming every kind
    # of leftover and the full-disk check; + 6 for a progress line that counts from the process start (38); + 13
    # for the LinkFoldingNetwork capability (a network with shared links that folds by link orbits, 37); + 55 for
    # safe I/O's recovered files (a write that fails late keeps its result, 39); + 7 for the host model's CUDA
    # graphs (one launch per graph, 35) and the platform table's mark of partly assumed GEMM times (40); 9,929 once
    # the breakdown moved to plugins/analysis (hook astra_report_breakdown) and the Dask executor to
    # plugins/executor_dask (34); + 8 for the time-fold driver's entry in the event loop (37) and the scale-out
    # kind in the platform table (40); + 16 for folding as composition (37); 9,668 once the views of the spans moved to
    # plugins/analysis (astra_analysis.views; the kernel keeps the recording, astra_sim.spans, made only when a plugin
    # asks) and dead and duplicated kernel code went (34); + 2 for the run's own "the loop has started" flag, which
    # record_spans checks (the engine counts its events only when its loop returns, so a mid-run call slipped by);
    # + 18 for the platform table's default scale-out fabric, a column or at 80 columns a note (40); + 35 for the
    # compiled core's typed hot attributes and Algorithm's mypyc_attr (issue 37, tools/compile_core.py); + 6 for the
    # engine's queue made public to the folding plugin (it read the privates) and Simulation.node_observers.
    # 9,387 after one session: - 565 for the compact workload format (to plugins/workload_compact), `astra platforms`
    # (to gpu_model), the safe XML reader (to collectives_msccl), one-command limits (to their commands) and merged
    # duplicates (34); + 155 for the Chakra writer's direct node encoder (encode_node, 37); the rest for the system
    # layer's known collective ends (piecewise contention, 36), astra run without the plugins' command parsers and
    # the refusal of a workload prefix that two formats read.
    assert sum(sizes.values()) <= 9_387, sum(sizes.values())
