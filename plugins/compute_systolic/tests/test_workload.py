"""``astra workload systolic`` against ASTRA-sim 1.0's own generator (tests/data/astra-sim-1.0, see its README)."""

import json
from pathlib import Path

import pytest

from astra_sim.cli import main
from astra_sim.errors import ConfigError, WorkloadError
from astra_sim.report import read_report

from astra_compute_systolic.config import load_config
from astra_compute_systolic.workload import MnkLayer, Split, generate, pass_comms, pass_gemms, read_mnk

DATA = Path(__file__).resolve().parent / "data" / "astra-sim-1.0"
RUNS = json.loads((DATA / "runs.json").read_text())
PASSES = ("fwd_pass", "inp_grad", "weight_grad")


def _args(run, out, *extra):
    return ["workload", "systolic", str(DATA / "mnk" / run["mnk"]), "--config", str(DATA / "configs" / run["config"]),
            "--npus", str(run["npus"]), "--packages", str(run["packages"]), "--parallel", run["parallel"],
            "--datatype-size", str(run["datatype_size"]), "-o", str(out), *extra]


@pytest.mark.parametrize("run", RUNS, ids=[r["name"] for r in RUNS])
def test_byte_for_byte_the_generators_file(tmp_path, run, capsys):
    out = tmp_path / "w.txt"
    assert main(_args(run, out, "--exact-generator")) == 0
    assert out.read_bytes() == (DATA / "generated" / f"{run['name']}.txt").read_bytes()


def _report_column2(run, part):
    lines = (DATA / "per_pass" / run["name"] / f"{part}.csv").read_text().splitlines()[1:]
    return [line.split(",")[1] for line in lines]   # ' 1234', as the generator takes it


@pytest.mark.parametrize("run", RUNS, ids=[r["name"] for r in RUNS])
def test_each_pass_gets_its_own_scalesim_run(tmp_path, run):
    """Default mode: every pass's cycles are those SCALE-sim reports for that pass alone; the rest of the
    line is the generator's."""
    out = tmp_path / "w.txt"
    assert main(_args(run, out)) == 0
    mine = out.read_text().split("\n")
    ref = (DATA / "generated" / f"{run['name']}.txt").read_text().split("\n")
    assert mine[:2] == ref[:2] and len(mine) == len(ref)
    cycles = {part: _report_column2(run, part) for part in PASSES}
    for i, (a, b) in enumerate(zip(mine[2:], ref[2:])):
        fa, fb = a.split("\t"), b.split("\t")
        assert [fa[k] for k in (2, 5, 8)] == [cycles[p][i] for p in PASSES]
        assert fa[8] == fb[8]                                         # the generator's value is the last pass's
        assert [fa[k] for k in (0, 1, 3, 4, 6, 7, 9, 10, 11, 12)] == [fb[k] for k in (0, 1, 3, 4, 6, 7, 9, 10, 11, 12)]


def test_the_generators_own_report_reuse_is_visible_in_its_output():
    text = (DATA / "generated" / "example_DATA.txt").read_text().split("\n")
    assert text[0] == "DATA" and text[1] == "7" and not text[-1].endswith("\n")
    for line in text[2:]:
        f = line.split("\t")
        assert f[2] == f[5] == f[8] and f[2].startswith(" ")


def test_runs_as_a_text_workload(tmp_path):
    """The file the generator writes (13 columns) runs in astra run."""
    from astra_sim_testing import write_network_config, write_system_config

    run = RUNS[0]
    out = tmp_path / "w.txt"
    assert main(_args(run, out)) == 0
    net = write_network_config(tmp_path / "net.yml", npus=(16,))
    sys_ = write_system_config(tmp_path / "sys.json", 1)
    report = tmp_path / "r.json"
    assert main(["run", "--workload-configuration", str(out), "--system-configuration", str(sys_),
                 "--network-configuration", str(net), "--report-json", str(report), "-q"]) == 0
    data = read_report(report)
    lines = [line.split("\t") for line in out.read_text().split("\n")[2:]]
    # DATA: every forward and weight gradient, input gradients but the first layer's (ASTRA-sim 1.0's loop);
    # the text reader takes 1.0's compute times as duration_micros, as Chakra's converter does
    cycles = sum(int(f[2]) + int(f[8]) for f in lines) + sum(int(f[5]) for f in lines[1:])
    assert data["ranks"][0]["compute_ns"] == 1000 * cycles


def test_chakra_output(tmp_path, capsys):
    run = next(r for r in RUNS if r["parallel"] == "HYBRID_DATA_MODEL")
    prefix = tmp_path / "t"
    assert main(_args(run, prefix, "--chakra", "--dims", "8,2")) == 0
    assert all((tmp_path / f"t.{r}.et").exists() for r in range(run["npus"]))
    from astra_sim.chakra import read_et
    from astra_sim.chakra import types as T

    nodes = read_et(str(tmp_path / "t.0.et")).nodes
    comp = [n for n in nodes if n.type == T.COMP_NODE]
    ref = (DATA / "generated" / f"{run['name']}.txt").read_text().split("\n")[2:]
    assert len(comp) == 3 * len(ref)


def test_pass_gemms_and_comms_follow_the_generator():
    split = Split(16, 2, 2)
    layer = MnkLayer("L", 1024, 512, 256, "HYBRID_DATA_MODEL", 2)
    # topology rows (m', k, 1, k, 1, n'), (m', n', .., k), (k, m', .., n') as GEMMs (M, N, K)
    assert pass_gemms(layer, split) == ((512, 64, 256), (512, 256, 64), (256, 64, 512))
    assert pass_comms(layer, split) == [("ALLGATHER", 1024 * 512 * 2 // 16), ("REDUCESCATTER", 1024 * 256 * 2 // 2),
                                        ("ALLREDUCE", 256 * 512 * 2 // 8)]
    data = MnkLayer("L", 100, 7, 3, "DATA", 2)
    assert pass_gemms(data, Split(16)) == ((6, 7, 3), (6, 3, 7), (3, 7, 6))       # int(100 / 16) = 6
    assert pass_comms(data, Split(16)) == [("NONE", 0), ("NONE", 0), ("ALLREDUCE", 42)]


def test_mnk_errors(tmp_path):
    path = tmp_path / "m.csv"
    for text, words in [("Layer,m,n,k\nA,1,2\n", "expected 4 columns"),
                        ("Layer,m,n,k\nA,1,x,3\n", "n must be an integer"),
                        ("Layer,m,n,k\nA,0,2,3\n", "m must be >= 1"),
                        ("Layer,m,n,k\n\nA,1,2,3\n", "empty line"),
                        ("Layer,m,n,k\n", "no layer lines")]:
        path.write_text(text)
        with pytest.raises(WorkloadError, match=words) as info:
            read_mnk(path, "DATA")
        assert str(path) in str(info.value)
    path.write_text("Layer,m,n,k\nA,1,2,3\n")
    with pytest.raises(WorkloadError, match="HYBRID_CUSTOMIZED needs 5 columns"):
        read_mnk(path, "HYBRID_CUSTOMIZED")
    path.write_text("Layer,m,n,k,p\nA,1,2,3,PIPELINE\n")
    with pytest.raises(WorkloadError, match="must be one of"):
        read_mnk(path, "HYBRID_CUSTOMIZED")
    with pytest.raises(ConfigError, match="--parallel"):
        read_mnk(path, "SEQUENCE")


def test_a_pass_split_to_nothing_is_an_error(tmp_path, capsys):
    path = tmp_path / "m.csv"
    path.write_text("Layer,m,n,k\nsmall,4,8,8\n")
    with pytest.raises(WorkloadError, match="layer 'small'.*empty dimension"):
        generate(read_mnk(path, "DATA"), load_config(DATA / "configs" / "google.cfg"), Split(8), "DATA")
    with pytest.raises(ConfigError, match="multiple of --packages"):
        Split(6, 4)
