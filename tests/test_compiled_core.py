"""The mypyc-compiled event loop (tools/compile_core.py) gives the pure-Python kernel's ns: parity cases (analytical
folded and unfolded, congestion's compiled link queues, with a timeline's link load too) and a generated ``--platform
hgx-h100`` step run under the compiled tree in a subprocess, and every rank's finish time must equal the pure run's
(and the reference's, for the parity cases); the two timelines are the same bytes.

Opt-in like the build itself: skipped when mypyc (``pip install mypy``) or a C compiler is missing."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from astra_sim_testing import find_shared_dir, parity_cases, parity_kwargs

ROOT = Path(__file__).resolve().parents[1]
SHARED = find_shared_dir()
#: parity rows (shared/parity/cases.csv) and whether each may fold: a collective over a 4 x 4 ring-switch network
#: folded and unfolded, compute overlapping communication, congestion cases folded and unfolded, and each compiled
#: native collective (direct, halving-doubling, double binary tree) unfolded
PARITY = [("Ring_Switch_4x4__all_reduce__64MB__unaware", True), ("Ring_Switch_4x4__all_reduce__64MB__unaware", False),
          ("overlap_8npus__Ring_8__sys_ring_1d__mem_NO_MEMORY_EXPANSION__unaware", True),
          ("p2p_shift_8npus__Switch_8__sys_ring_1d__mem_NO_MEMORY_EXPANSION__aware", True),
          ("p2p_shift_8npus__Switch_8__sys_ring_1d__mem_NO_MEMORY_EXPANSION__aware", False),
          ("Switch_8__all_to_all__1GB__aware", False),
          ("Ring_8__direct__all_reduce__64MB__unaware", False), ("Ring_8__direct__reduce_scatter__64MB__aware", False),
          ("Ring_8__halvingDoubling__all_reduce__64MB__unaware", False),
          ("Ring_8__halvingDoubling__all_gather__64MB__aware", False),
          ("Ring_8__doubleBinaryTree__all_reduce__64MB__unaware", False),
          # the congestion backend's compiled link queues (astra_network_congestion.links): multi-hop routes and
          # queues on a 4 x 4 ring-switch, each native collective on it, and a ring folded and unfolded
          ("Ring_Switch_4x4__all_to_all__64MB__aware_md", False),
          ("Ring_Switch_4x4__all_reduce__1GB__aware_md", False),
          ("Ring_8__halvingDoubling__all_reduce__64MB__aware", False),
          ("Ring_8__direct__all_to_all__64MB__aware", False),
          ("Ring_8__doubleBinaryTree__all_reduce__64MB__aware", False),
          ("Ring_8__all_reduce__1GB__aware", True), ("Ring_8__all_reduce__1GB__aware", False)]
#: the congestion case also run with a timeline (the link-load recording variant of the link queues)
TIMELINE = "Ring_Switch_4x4__all_to_all__64MB__aware_md"
#: a small dense Llama (a Hugging Face config.json) as tests/test_one_engine.py steps it
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 512, "num_hidden_layers": 2,
         "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 1536, "vocab_size": 1024,
         "max_position_embeddings": 256, "torch_dtype": "bfloat16", "tie_word_embeddings": False}

#: what the subprocess runs: each case of the JSON file argv[1], written to argv[2] as per-rank finish times, with
#: the kernel modules that were loaded compiled; "{side}" in an option's value is argv[3] (a timeline's file)
CHILD = """
import json, sys
from astra_sim import simulate
from astra_sim.runner import run_spec
from astra_sim.spec import RunSpec

out = []
for case in json.load(open(sys.argv[1])):
    if "spec" in case:
        report = run_spec(RunSpec.from_mapping(case["spec"]))
    else:
        kwargs = {k: v.replace("{side}", sys.argv[3]) if isinstance(v, str) else v for k, v in case["kwargs"].items()}
        report = simulate(*case["args"], **kwargs)
    out.append({"ns": [r.finish_ns for r in report.ranks], "simulated": report.settings["fold"]["simulated_ranks"]})
ours = {n: m for n, m in sys.modules.items()
        if n.startswith(("astra_sim", "astra_folding", "astra_collectives_native", "astra_network_congestion"))}
compiled = sorted(n for n, m in ours.items() if not (getattr(m, "__file__", None) or ".py").endswith(".py"))
json.dump({"runs": out, "compiled": compiled, "loaded": sorted(ours)}, open(sys.argv[2], "w"))
"""


def _compile_core():
    spec = importlib.util.spec_from_file_location("compile_core", ROOT / "tools" / "compile_core.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def compiled_tree(tmp_path_factory):
    if importlib.util.find_spec("mypyc") is None:
        pytest.skip("mypyc is not installed (pip install mypy): the compiled core is opt-in")
    if shutil.which(os.environ.get("CC", "cc")) is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the compiled core is opt-in")
    tool = _compile_core()
    out = tmp_path_factory.mktemp("compiled")
    started = time.perf_counter()
    # the C compiler at -O0: the same ns (exactness is what is tested here, not speed; no -ffast-math at any level)
    # for a third of -O3's CPU (8.6 against 23.0 s user for the 10 modules on this machine)
    tool.compile_core(out, opt_level="0", quiet=True)
    print(f"compiled {len(tool.DEFAULT_MODULES)} modules in {time.perf_counter() - started:.0f} s")
    return out, tool.DEFAULT_MODULES


def _cases(tmp_path):
    """(simulate()'s cases, what each must equal besides the pure run: the reference's (max, min) ns or None)."""
    rows = {row["id"]: row for row in parity_cases(SHARED)}
    cases, expected = [], []
    for case_id, fold in PARITY:
        row = rows.get(case_id)
        if row is None:
            continue
        parity = SHARED / "parity"
        configs = parity / "configs"
        args = [str(parity / row["trace"]), str(configs / f"{row['system']}.json"),
                str(configs / f"{row['network']}.yml"), str(configs / f"{row['memory']}.json")]
        kwargs = dict(network_backend=row["backend"], fold=fold, **parity_kwargs(row["extra"]))
        cases.append({"args": args, "kwargs": kwargs})
        expected.append((int(row["max_ns"]), int(row["min_ns"])))
        if case_id == TIMELINE:  # again with a timeline: the link queues report every link's busy intervals
            cases.append({"args": args, "kwargs": {**kwargs, "timeline": str(tmp_path / "timeline-{side}.json")}})
            expected.append(expected[-1])
    from astra_workload_generators.llm import LlmSpec, generate_llm_workload

    model = tmp_path / "config.json"
    model.write_text(json.dumps(LLAMA))
    prefix = str(tmp_path / "llama")
    generate_llm_workload(LlmSpec.from_mapping({"model": str(model), "tp": 8, "dp": 1, "micro_batches": 2}), prefix,
                          on_warning=lambda line: None)
    for fold in (True, False):
        cases.append({"spec": {"workload": prefix, "platform": "hgx-h100", "nodes": 1, "fold": fold}})
        expected.append(None)
    return cases, expected


def _run(cases, tmp_path, tree=None):
    """The cases' results in a fresh process (``tree`` first on PYTHONPATH)."""
    given, got = tmp_path / "cases.json", tmp_path / f"got-{'compiled' if tree else 'pure'}.json"
    given.write_text(json.dumps(cases))
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH")) if p)
    side = "compiled" if tree else "pure"
    done = subprocess.run([sys.executable, "-c", CHILD, str(given), str(got), side], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(got.read_text())


@pytest.mark.slow
def test_the_compiled_core_gives_the_pure_kernels_ns(compiled_tree, tmp_path):
    tree, modules = compiled_tree
    cases, expected = _cases(tmp_path)
    pure = _run(cases, tmp_path)
    compiled = _run(cases, tmp_path, tree)
    # each side ran the kernel it names: every module of the compiled set that the cases load (the congestion link
    # queues only with the parity cases, from ../shared) is the compiled one, and the engine always is
    loaded = set(compiled["loaded"])
    assert pure["compiled"] == [] and compiled["compiled"] == sorted(m for m in modules if m in loaded)
    assert "astra_sim.engine" in compiled["compiled"]
    for case, reference, a, b in zip(cases, expected, pure["runs"], compiled["runs"]):
        assert b["ns"] == a["ns"], case
        assert b["simulated"] == a["simulated"], case  # the same fold decision
        if reference is not None:
            assert (max(a["ns"]), min(a["ns"])) == reference, case
    if any("timeline" in case.get("kwargs", {}) for case in cases):  # the parity cases' timeline (../shared)
        timelines = [(tmp_path / f"timeline-{side}.json").read_bytes() for side in ("pure", "compiled")]
        assert b'"network links"' in timelines[0] and timelines[1] == timelines[0]  # the same link load
    folds = [run["simulated"] < len(run["ns"]) for run in pure["runs"]]
    assert any(folds) and not all(folds)  # a folded run and an unfolded one


@pytest.mark.parametrize("argv, says", [
    (["--module", "astra_sim.no_such_module"], "--module astra_sim.no_such_module: no such module"),
    (["--module", "no_such_package.engine"], "--module no_such_package.engine: no such module"),
    (["--out", str(ROOT / "core" / "compiled")], "must be outside the source trees"),
])
def test_compile_core_names_a_bad_flag(argv, says, tmp_path, capsys):
    argv = argv if "--out" in argv else [*argv, "--out", str(tmp_path / "out")]
    assert _compile_core().main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("compile_core: ") and says in err and len(err.strip().splitlines()) == 1


def test_compile_core_replaces_only_a_compiled_tree(tmp_path, capsys):
    """A folder that holds anything but an earlier compiled tree is never removed."""
    (tmp_path / "notes.txt").write_text("mine")
    assert _compile_core().main(["--out", str(tmp_path)]) == 2
    assert "exists and is not a compiled tree" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"

