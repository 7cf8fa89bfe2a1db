"""The case studies (examples/case-studies/<name>/, docs/case-studies.md): each one's ``--small`` form runs in
under 2 minutes and gives its headline ratio within the tolerance its ``expected.json`` states; every study has
the files the index promises."""

from __future__ import annotations

import importlib.util
import json
import re
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "examples" / "case-studies"
NAMES = sorted(p.name for p in STUDIES.iterdir() if (p / "run.py").is_file())


def _load(name):
    spec = importlib.util.spec_from_file_location(f"case_study_{name.replace('-', '_')}", STUDIES / name / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_studies_and_the_index_names_each():
    assert NAMES
    index = (ROOT / "docs" / "case-studies.md").read_text()
    for name in NAMES:
        assert f"examples/case-studies/{name}/" in index, name
    assert "docs/case-studies.md" in "\n".join((ROOT / "README.md").read_text().splitlines()[:12])


@pytest.mark.parametrize("name", NAMES)
def test_each_study_has_its_readme_figure_and_expected_ratio(name):
    folder = STUDIES / name
    expected = json.loads((folder / "expected.json").read_text())
    assert expected["headline"] and 0 < expected["tolerance"] < 0.5
    assert expected["small"]["ratio"] > 0 and expected["full"]["ratio"] > 0
    readme = (folder / "README.md").read_text()
    assert "(figure.png)" in readme and (folder / "figure.png").stat().st_size > 0
    assert "**The claim.**" in readme and "**Why ours" in readme
    prose = re.sub(r"^```.*?^```", "", readme, flags=re.M | re.S)
    for target in re.findall(r"\]\(([^)\s#]+)[^)]*\)", prose):
        if not re.match(r"[a-z]+:", target):
            assert (folder / target).exists(), f"{name}/README.md: broken link {target}"


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_the_small_form_gives_the_expected_ratio_in_under_two_minutes(name, tmp_path, capsys):
    study = _load(name)
    missing = [module for module in getattr(study, "REQUIRES", []) if importlib.util.find_spec(module) is None]
    if missing:
        pytest.skip(f"{name} needs {', '.join(missing)} (make install installs it)")
    start = time.monotonic()
    assert study.main_(["--small", "--out", str(tmp_path)]) == 0, capsys.readouterr().out
    assert time.monotonic() - start < 120
    ours = json.loads((tmp_path / "ours.json").read_text())
    assert ours["form"] == "small" and ours["ok"]
    assert list(tmp_path.glob("figure*.png"))


def test_a_ratio_outside_the_tolerance_fails_the_check(tmp_path, capsys):
    import sys

    sys.path.insert(0, str(STUDIES))
    try:
        from casestudy import check
    finally:
        sys.path.remove(str(STUDIES))
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "expected.json").write_text(json.dumps({"headline": "h", "tolerance": 0.05, "full": {"ratio": 2.0},
                                                      "small": {"ratio": 1.0}}))
    assert check(folder, True, 1.04, tmp_path) == 0
    assert check(folder, True, 1.06, tmp_path) == 1
    assert "OUTSIDE THE TOLERANCE" in capsys.readouterr().out
    assert check(folder, False, 2.0, tmp_path) == 0


def _module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("n", [2, 3, 8, 72])
def test_the_allpairs_program_passes_the_msccl_checks_and_sends_two_rounds(n, tmp_path):
    """The MSCCL-vs-NCCL study's all-pairs all-reduce: every send has its receive, nothing deadlocks (the
    reader's static checks), and each GPU sends 2 (n - 1) messages of one chunk."""
    from astra_collectives_msccl.msccl_ir import parse_msccl

    algorithms = _module(STUDIES / "msccl-vs-nccl" / "algorithms.py", "case_study_msccl_algorithms")
    path = tmp_path / "allpairs.xml"
    path.write_text(algorithms.allpairs_allreduce_xml(n))
    parse_msccl(str(path))
    sends = re.findall(r'type="s" srcbuf="i" srcoff="\d+" dstbuf="\w" dstoff="\d+" cnt="1"', path.read_text())
    assert len(sends) == 2 * (n - 1) * n
    with pytest.raises(ValueError, match="at least 2 GPUs"):
        algorithms.allpairs_allreduce_xml(1)


@pytest.mark.parametrize("layers", [1, 2, 5])
def test_the_moe_step_streams_each_layer_once_per_pass_and_double_buffers(layers):
    """The disaggregated-memory study's step: 2 L - 1 loads (the backward's first layer is resident) and L
    gradient stores of one layer's expert weights each; a load waits for the computation two positions before
    it; without remote memory, the same GEMMs and no requests; both build as micro graphs."""
    from astra_workload_generators.micro import graph_trace

    moe = _module(STUDIES / "disaggregated-memory-moe" / "run.py", "case_study_moe")
    _, _, weights = moe.expert_shapes()
    remote, hbm = moe.moe_graph(layers, remote=True), moe.moe_graph(layers, remote=False)
    loads = [n for n in remote["nodes"] if n["type"] == "mem_load"]
    stores = [n for n in remote["nodes"] if n["type"] == "mem_store"]
    assert len(loads) == 2 * layers - 1 and len(stores) == layers
    assert {n["size"] for n in loads + stores} == {weights} and weights == 4 * 3 * 7168 * 2048 * 2
    assert [(n["name"], n["attrs"]) for n in remote["nodes"] if n["type"] == "comp"] == \
        [(n["name"], n["attrs"]) for n in hbm["nodes"]]
    if layers >= 2:
        (second,) = [n for n in loads if n["name"] == "load_fwd1"]
        assert second["data_deps"] == ["load_fwd0"]
    if layers >= 3:
        (third,) = [n for n in loads if n["name"] == "load_fwd2"]
        assert third["data_deps"] == ["load_fwd1", "aten::bmm.down_fwd0"]
    for spec in (remote, hbm):
        assert len(graph_trace(spec, 2).ranks) == 2


def test_the_congestion_study_writes_its_step_and_tells_the_all_reduce_from_the_incast(tmp_path):
    """The ns-3 study's inputs (no ns-3 needed): 12 ranks, the group's all-reduce, the incast's sends and NPU 0's
    receives only under ``incast``; DCQCN's keys only in DCQCN's config; the all-reduce's end from an fct file."""
    from astra_sim.chakra import read_et, types as T

    study = _module(STUDIES / "ns3-congestion-control" / "run.py", "case_study_ns3_cc")
    networks = study.machine(tmp_path)
    assert "RP_TIMER" in networks["dcqcn"].read_text() and "RP_TIMER" not in networks["dctcp"].read_text()
    assert "CC_MODE 0" in networks["tcp"].read_text()
    for scenario, sends in (("quiet", 0), ("incast", 4)):
        prefix = study.traces(tmp_path, scenario)
        nodes = [read_et(f"{prefix}.{rank}.et").nodes for rank in range(study.NPUS)]
        assert sum(n.type == T.COMM_COLL_NODE for rank in nodes for n in rank) == 8
        assert sum(n.type == T.COMM_SEND_NODE for rank in nodes for n in rank) == sends
        assert sum(n.type == T.COMM_RECV_NODE for n in nodes[0]) == sends
    fct = tmp_path / "fct.txt"
    fct.write_text("0a000002 0a000006 49153 5000 524288 0 12000 11000\n"
                   "0a000022 0a000002 49153 5000 4194304 0 1180000 90000\n"
                   "0a000006 0a00000a 49153 5000 524288 500000 26000 11000\n")
    assert study.all_reduce_ns(study.flows(fct)) == 526000


def _shared_msccl():
    from astra_sim_testing import find_shared_dir

    shared = find_shared_dir()
    return shared / "samples" / "msccl" if shared else None


@pytest.mark.skipif(_shared_msccl() is None or not _shared_msccl().is_dir(), reason="shared/samples/msccl not found")
def test_the_study_programs_time_like_msccl_tools_own_on_8_gpus(tmp_path):
    """What the MSCCL-vs-NCCL README says of its programs, at 1 MiB on 8 H100 (its setup): the ring takes exactly
    msccl-tools' ring's time, and the all-pairs program within 10 % of msccl-tools' all-pairs (whose reduction
    is split over 8 threadblocks)."""
    from astra_sim import simulate
    from astra_workload_generators.micro import generate_micro

    study = _load("msccl-vs-nccl")
    _, network, systems = study.machine(tmp_path, "h100x8")
    system = json.loads(Path(systems[0]).read_text())
    generate_micro(str(tmp_path / "ar"), collective="all_reduce", size="1MiB", npus=8)

    def time_of(xml):
        path = tmp_path / f"{Path(xml).stem}.json"
        path.write_text(json.dumps(dict(system, **{"all-reduce-implementation-custom": [str(xml)]})))
        return simulate(str(tmp_path / "ar"), str(path), str(network), network_backend="flow",
                        gpu="H100-SXM5-80GB", msccl_protocol=True).max_finish_ns

    samples = _shared_msccl()
    assert time_of(tmp_path / "h100x8" / "ring_8gpu.xml") == time_of(samples / "allreduce_ring_8gpu_1ch_LL128.xml")
    ours = time_of(tmp_path / "h100x8" / "allpairs_8gpu.xml")
    theirs = time_of(samples / "allreduce_allpairs_8gpu_LL.xml")
    assert theirs <= ours <= 1.10 * theirs
