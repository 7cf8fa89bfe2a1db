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
    # Issue 34 asks for a kernel under 8k lines; this ratchet keeps it from growing while it gets there (each change
    # of the bound is explained in its commit). 8,762 once validation's step interval note moved to its plugin;
    # 8,071 once the kernel's docstrings were cut to the why (hookspecs' to the short form of docs/plugins/hooks.md),
    # hand-rolled helpers and wrappers became stdlib calls and chakra.types read the schema's enums (session 44);
    # 7,984 once the rank symmetries moved to the folding plugin (astra_folding.symmetry, session 45); 8,122 for the
    # host that launches in trace order (astra_sim.workload.host: its walk, the held ops' wake-up, session 50); 7,934
    # once format_share moved to astra_analysis, duplicated loops became one and stray __all__ lists went (session 51);
    # 7,916 after the event loop's session-51 work (no net lines) and the Chakra reader's one unreadable-file error;
    # 7,929 once DataSet's, CommunicatorGroup's and default_system_config's packed assignments, written on fewer lines
    # only for this count, were one statement a line again; 7,936 once the Chakra writer's names load on first use
    # (PEP 562 in astra_sim.chakra, session 52: a run that never writes a trace skips building its varint table);
    # 7,943 for the compact report's key of a rank's numbers and breakdown object (+6: a 4,096-rank report no longer
    # serialises every rank's record, -23 % of that run's instructions) and a small trace's bytes as its own digest
    # (+1, -4.6 %) (session 54; the lazy pluggy and tracemalloc imports took no net line); 7,946 for reading each
    # rank's trace with os.open/os.read (+3: 4 system calls a file instead of 7, 60 -> 44 ms CPU for 4,096 files);
    # 7,963 for safeio.parse_yaml_once (+17), the one parse-by-text cache the GPU and network readers share, where
    # each plugin had written its own (-22 lines in network_analytical, gpu_model's folded into it); 7,999 for the
    # plugins' entry points kept on disk (+36, session 55: no importlib.metadata import and scan, about 50 ms of each
    # command's start-up on the 2-core VM); 7,995 once generated.py no longer imported socket and pathlib and sys.py's
    # imports were joined (session 55).
    assert sum(sizes.values()) <= 7_995, sum(sizes.values())
