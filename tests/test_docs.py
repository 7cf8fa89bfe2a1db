"""The plugin docs stay true to the code (datasette's test_docs.py, adapted).

* every hookspec has a section in docs/plugins/hooks.md whose heading is its exact
  signature, in hookspec order, with parameters, return value, when it fires, an
  example and an "Implemented by:" line that matches the plugins in this repository;
* every example in hooks.md is a working plugin module (they are loaded together
  and run a small simulation);
* the tutorial embeds the example plugin's files verbatim;
* relative links in the docs point at files (and anchors) that exist.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import types
from pathlib import Path

import pytest

from astra_sim import hookspecs
from astra_sim.plugins import available_plugins, build_registry, make_plugin_manager

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HOOKS_MD = DOCS / "plugins" / "hooks.md"
TUTORIAL_MD = DOCS / "plugins" / "writing-plugins.md"
EXAMPLE = ROOT / "examples" / "plugins" / "astra-network-constant"

#: Pages other people write; links to them are checked once they exist.
PENDING_PAGES = {DOCS / "usage.md", DOCS / "configuration.md"}


def hook_signatures():
    """``name(arg, ...)`` for every hookspec, in the order hookspecs.py declares them."""
    pm = make_plugin_manager(select=[])
    names = [
        name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
        if name.startswith("astra_") and fn.__module__ == hookspecs.__name__
    ]
    names.sort(key=lambda name: inspect.getsourcelines(getattr(hookspecs, name))[1])
    assert names, "no hookspecs found"
    return [f"{name}({', '.join(getattr(pm.hook, name).spec.argnames)})" for name in names]


def hook_sections():
    """``{signature: section text}`` from hooks.md, in document order."""
    text = HOOKS_MD.read_text(encoding="utf-8")
    parts = re.split(r"^### `([^`]+)`[ \t]*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def python_blocks(text):
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


@pytest.mark.parametrize("signature", hook_signatures())
def test_every_hook_is_documented(signature):
    text = HOOKS_MD.read_text(encoding="utf-8")
    assert f"### `{signature}`" in text, f"undocumented hook (no heading with its exact signature): {signature}"


def test_hooks_are_documented_in_hookspec_order():
    documented = [sig for sig in hook_sections() if sig in hook_signatures()]
    assert documented == hook_signatures()


def test_no_section_for_a_hook_that_does_not_exist():
    stale = [sig for sig in hook_sections() if sig not in hook_signatures()]
    assert not stale, f"hooks.md documents hooks that hookspecs.py does not declare: {stale}"


@pytest.mark.parametrize("signature", hook_signatures())
def test_each_section_is_complete(signature):
    section = hook_sections()[signature]
    name = signature.split("(")[0]
    for part in ("Parameters:", "Returns:", "When it fires:", "Implemented by:"):
        assert part in section, f"section {signature} has no {part!r}"
    for arg in signature.split("(")[1].rstrip(")").split(", "):
        assert f"- `{arg}` –" in section, f"section {signature} does not describe parameter {arg!r}"
    blocks = [b for b in python_blocks(section) if f"def {name}(" in b]
    assert blocks, f"section {signature} has no example implementing {name}"
    assert f'<a id="{name}"></a>' in HOOKS_MD.read_text(encoding="utf-8"), f"no anchor for {name}"


def _repo_plugins():
    """Names of the plugins in this repository: the kernel's builtin, plugins/*, and the example."""
    return {"builtin", "network_constant"} | {p.name for p in (ROOT / "plugins").iterdir() if p.is_dir()}


def _implementers():
    """hook name -> set of repository plugins that implement it (those that can be checked here)."""
    repo = _repo_plugins()
    installed = [name for name in available_plugins() if name in repo]
    pm = make_plugin_manager(select=installed)
    found = {}
    for name, plugin in pm.list_name_plugin():
        if plugin is None or name not in repo:
            continue
        for caller in pm.get_hookcallers(plugin) or ():
            found.setdefault(caller.name, set()).add(name)
    if "network_constant" not in installed:  # not installed here: read its hooks from the source
        tree = ast.parse((EXAMPLE / "src" / "astra_network_constant" / "plugin.py").read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("astra_"):
                found.setdefault(node.name, set()).add("network_constant")
    checked = set(installed) | {"builtin", "network_constant"}
    return found, checked


@pytest.mark.parametrize("signature", hook_signatures())
def test_implemented_by_matches_the_plugins(signature):
    name = signature.split("(")[0]
    section = hook_sections()[signature]
    paragraph = section.split("Implemented by:", 1)[1].split("\n\n", 1)[0]
    listed = {word for word in re.findall(r"\b[a-z_0-9]+\b", paragraph) if word in _repo_plugins()}
    found, checked = _implementers()
    actual = found.get(name, set())
    missing = actual - listed
    assert not missing, f"{signature}: 'Implemented by' does not list {sorted(missing)}"
    wrong = {p for p in listed - actual if p in checked}
    assert not wrong, f"{signature}: 'Implemented by' lists {sorted(wrong)}, which do not implement it"


def _example_modules():
    modules = []
    for i, block in enumerate(python_blocks(HOOKS_MD.read_text(encoding="utf-8"))):
        module = types.ModuleType(f"hooks_md_example_{i}")
        exec(compile(block, f"docs/plugins/hooks.md (example {i})", "exec"), module.__dict__)
        modules.append(module)
    return modules


def test_hook_examples_are_working_plugins(tmp_path, capsys):
    """Every example in hooks.md, loaded together: they register, add an option and run a simulation."""
    modules = _example_modules()
    pm = make_plugin_manager(select=[], extra_plugins=modules)  # pluggy validates names and arguments
    registry = build_registry(pm)
    assert "json" in registry.names("workload_format")
    assert "myRing" in registry.names("collective_algorithm")
    assert "twice_as_fast" in registry.names("compute_model")
    assert "fixed" in registry.names("network_backend")
    assert "flat" in registry.names("memory_backend")
    assert "my-box" in registry.names("platform")
    from astra_sim.platforms import get_platform

    box = get_platform("my-box", pm)
    assert box.describe(2)["total_gpus"] == 8
    assert box.resolve(2, {}).compute_model == "replay"
    from astra_sim.metrics import metric_registry

    assert metric_registry(pm).entries["stats.message_log_lines"].unit == "count"
    from astra_sim.executors import make_executor

    with make_executor(executor="inprocess", pm=pm) as executor:
        assert sorted(executor.run(lambda task, payload: task * payload, [(2, 3), (4, 5)])) == [(2, 6), (4, 20)]
    import argparse

    parser = argparse.ArgumentParser()
    pm.hook.astra_add_run_options(parser=parser)
    log = tmp_path / "messages.log"
    assert parser.parse_args(["--message-log", str(log)]).message_log == str(log)

    # 4 ranks (the "fixed" network), each: a 3 us COMP node, then a 10000-byte MEM_LOAD, then a
    # 64 KiB ALL_REDUCE with the renamed ring, read from JSON traces.
    trace = [
        {"id": 1, "name": "gemm", "type": "COMP_NODE", "duration_micros": 3, "attrs": {"is_cpu_op": False}},
        {"id": 2, "name": "load", "type": "MEM_LOAD_NODE", "data_deps": [1],
         "attrs": {"is_cpu_op": False, "tensor_size": 10000}},
        {"id": 3, "name": "ar", "type": "COMM_COLL_NODE", "data_deps": [2],
         "attrs": {"is_cpu_op": False, "comm_type": 0, "comm_size": 65536}},
    ]
    for rank in range(4):
        (tmp_path / f"job.{rank}.json").write_text(json.dumps(trace))
    system = {
        "scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 4, "collective-optimization": "localBWAware", "local-mem-bw": 1600,
        "all-reduce-implementation": ["myRing"],
    }
    (tmp_path / "system.json").write_text(json.dumps(system))
    (tmp_path / "network.yml").write_text("# the 'fixed' network reads no file\n")

    from astra_sim.simulation import simulate

    report = simulate(
        tmp_path / "job", tmp_path / "system.json", tmp_path / "network.yml",
        plugin_manager=pm, network_backend="fixed", memory_backend="flat", compute_model="twice_as_fast",
        options={"message_log": str(log), "announce": True},
    )
    compute = 3000 // 2                                   # twice_as_fast
    memory = 2000 + 10000 // 50                           # flat
    m = 65536 // 4 // 4                                   # ring: 4 chunks, 4 NPUs
    t, e, r = 500 + m // 100, 10, 3 * (m // 1600)        # fixed network, endpoint delay, reduction
    ring = 4 * (2 * 3 * t + 7 * e + 3 * r)
    assert report.settings["workload_format"] == "json"
    assert [x.finish_ns for x in report.ranks] == [compute + memory + ring] * 4
    assert log.read_text() == f"fixed {report.stats['messages']} {report.max_finish_ns}\n"
    assert "starting: 4 NPUs, network fixed" in capsys.readouterr().err


def test_tutorial_embeds_the_example_files():
    text = TUTORIAL_MD.read_text(encoding="utf-8")
    for relative in (
        "pyproject.toml",
        "network.yml",
        "src/astra_network_constant/__init__.py",
        "src/astra_network_constant/network.py",
        "src/astra_network_constant/plugin.py",
    ):
        content = (EXAMPLE / relative).read_text(encoding="utf-8").rstrip("\n")
        assert content in text, f"docs/plugins/writing-plugins.md is out of date with {relative}"


def test_tutorial_covers_the_essentials():
    text = TUTORIAL_MD.read_text(encoding="utf-8")
    for needle in (
        'network_constant = "astra_network_constant.plugin"', "pip install -e", "astra plugins",
        "--network-backend constant", "-p no:", "ASTRA_PLUGINS", "shared_dir", "parity_dir",
        "registered by two", "never called per simulation event",
    ):
        assert needle in text, f"writing-plugins.md does not mention {needle!r}"
    for role in ("workload_format", "collective_algorithm", "compute_model", "network_backend", "memory_backend"):
        assert f"registry.{role}(" in text, f"writing-plugins.md does not show registry.{role}(...)"


def _slug(heading):
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path):
    text = path.read_text(encoding="utf-8")
    ids = set(re.findall(r'<a id="([^"]+)"', text))
    ids |= {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}
    return ids


@pytest.mark.parametrize(
    "page",
    sorted(DOCS.rglob("*.md")) + [EXAMPLE / "README.md"],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_relative_links_resolve(page):
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # no links inside code blocks
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path_part, _, anchor = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        if path in PENDING_PAGES and not path.exists():
            continue
        assert path.exists(), f"{page.relative_to(ROOT)}: broken link {target}"
        if anchor and path.suffix == ".md":
            assert anchor in _anchors(path), f"{page.relative_to(ROOT)}: no anchor #{anchor} in {path_part or page.name}"
