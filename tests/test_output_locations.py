"""Every command that writes a file checks where it writes before any work: an output folder that cannot be made or
written gives a one-line error naming the flag and the path (exit 2), with nothing simulated; a write that fails
late for a full disk (ENOSPC) gives a one-line error too, and leaves no partial file.

The commands run in this process through ``astra_sim.cli.main``: an unwritable folder is one under a regular file
(this works for root too, whom a read-only mode does not stop), and a full disk is every write into the output
folder failing with ENOSPC after its first bytes (the writers' temporary file then must be removed).
``test_real_read_only_and_full_folders`` does the same on a read-only and a 64 KiB tmpfs, where a user namespace
can mount one."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import astra_sim.safeio as safeio
from astra_sim.cli import main

ROOT = Path(__file__).resolve().parents[1]
SYSTOLIC_CFG = ROOT / "examples" / "systolic" / "ws_32x32.cfg"
MSCCL_XML = ROOT / "examples" / "msccl"
INFRAGRAPH = ROOT / "examples" / "infragraph" / "dgx_h100"
PYTORCH_HOST = (ROOT / "plugins" / "workload_generators" / "tests" / "data" / "pytorch_public"
                / "hta_simple_add_et.json.gz")
SPEC = """
workload:
  llm: {preset: gpt3-13b, layers: 2, hidden: 256, heads: 8, kv-heads: 8, ffn-hidden: 512, seq-len: 128, tp: 2, pp: 1, dp: 1, micro-batches: 1}
run: {platform: hgx-h100, compute-model: gpu}
axes:
  grid: {workload.llm.tp: [1, 2]}
"""
#: a one-job cluster on a 4-NPU ring (astra cluster), its network and system beside it
CLUSTER = """
system: sys.json
network: net.yml
gpus_per_node: 2
jobs:
  - {name: a, gpus: 4, steps: 2, workload: {micro: {collective: all_reduce, size: 1KiB}}}
"""
CLUSTER_NET = "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n"
CLUSTER_SYS = """{"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 1,
 "preferred-dataset-splits": 1, "collective-optimization": "baseline", "local-mem-bw": 1600,
 "all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"],
 "reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["direct"]}
"""
LLM = ["--layers", "2", "--hidden", "256", "--heads", "8", "--kv-heads", "8", "--ffn-hidden", "512", "--vocab", "1000",
       "--seq-len", "128", "--tp", "2", "--micro-batches", "1"]
SERVE = ["serve", "--preset", "llama3-8b", "--platform", "hgx-h100", "--qps", "4", "--requests", "2", "-q"]
SEARCH = ["search", "--preset", "gpt3-13b", "--platform", "hgx-h100", "--gpus", "8", "--global-batch", "8",
          "--tp", "8", "--pp", "1", "--mbs", "1", "--zero", "1", "--recompute", "none", "--exhaustive", "--no-progress"]


def _inputs(folder):
    """The small input files the commands read, made once per test."""
    folder.mkdir(parents=True, exist_ok=True)
    assert main(["workload", "micro", "--collective", "all_reduce", "--size", "1MiB", "--npus", "8",
                 "-o", str(folder / "ar")]) == 0
    (folder / "topo.csv").write_text("name,M,N,K,\ng,64,32,128,\n")
    (folder / "spec.yaml").write_text(SPEC)
    (folder / "model.txt").write_text("DATA\n1\nfc1 -1 5 NONE 0 5 NONE 0 5 ALLREDUCE 1024 1\n")
    (folder / "report.json").write_text(_report_json(folder))
    (folder / "cluster.yaml").write_text(CLUSTER)
    (folder / "net.yml").write_text(CLUSTER_NET)
    (folder / "sys.json").write_text(CLUSTER_SYS)
    assert main(["workload", "llm", *LLM, "-o", str(folder / "compact")]) == 0
    return folder


def _report_json(folder):
    out = folder / "run.json"
    assert main(["run", "--workload-configuration", str(folder / "ar"), "--platform", "hgx-h100", "-q",
                 "-o", str(out)]) == 0
    return out.read_text()


#: (id, argv(inputs, out folder) -> list, the flag, the path the flag names (relative to the out folder))
CASES = [
    ("run -o", lambda i, o: ["run", "--workload-configuration", f"{i}/ar", "--platform", "hgx-h100", "-q",
                             "-o", f"{o}/r.json"], "--output", "r.json"),
    ("run --timeline", lambda i, o: ["run", "--workload-configuration", f"{i}/ar", "--platform", "hgx-h100", "-q",
                                     "--timeline", f"{o}/t.json"], "--timeline", "t.json"),
    ("run --power-timeline", lambda i, o: ["run", "--workload-configuration", f"{i}/ar", "--platform", "hgx-h100",
                                           "-q", "--power-timeline", f"{o}/p.json"], "--power-timeline", "p.json"),
    ("serve -o", lambda i, o: [*SERVE, "-o", f"{o}/s.json"], "--output", "s.json"),
    ("serve --timeline", lambda i, o: [*SERVE, "--timeline", f"{o}/t.json"], "--timeline", "t.json"),
    ("serve --save-trace", lambda i, o: [*SERVE, "--save-trace", f"{o}/t.jsonl"], "--save-trace", "t.jsonl"),
    ("serve --requests-csv", lambda i, o: [*SERVE, "--requests-csv", f"{o}/r.csv"], "--requests-csv", "r.csv"),
    ("search -o", lambda i, o: [*SEARCH, "-o", f"{o}/a.json"], "--output", "a.json"),
    ("search --points", lambda i, o: [*SEARCH, "--points", f"{o}/p.csv"], "--points", "p.csv"),
    ("search --plot", lambda i, o: [*SEARCH, "--plot", f"{o}/p.png"], "--plot", "p.png"),
    ("search --serve -o", lambda i, o: ["search", "--serve", "--preset", "llama3-8b", "--platform", "hgx-h100",
                                        "--qps", "2", "--requests", "2", "--slo-ttft-p99", "1000", "--tp", "1",
                                        "-o", f"{o}/a.json"], "--output", "a.json"),
    ("sweep -o", lambda i, o: ["sweep", f"{i}/spec.yaml", "-o", f"{o}/r.csv", "--no-progress"], "--output", "r.csv"),
    ("sweep -o parquet", lambda i, o: ["sweep", f"{i}/spec.yaml", "-o", f"{o}/r.parquet", "--no-progress"],
     "--output", "r.parquet"),
    ("validate -o", lambda i, o: ["validate", "--only", "nccl-allreduce-h100-8gpu-nvls", "-o", f"{o}/v.json"],
     "--output", "v.json"),
    ("validate --save-residuals", lambda i, o: ["validate", "--only", "nccl-allreduce-h100-8gpu-nvls", "--cv",
                                                "--save-residuals", f"{o}/res.json"], "--save-residuals", "res.json"),
    ("workload llm", lambda i, o: ["workload", "llm", *LLM, "-o", f"{o}/g"], "--output", "g"),
    ("workload micro", lambda i, o: ["workload", "micro", "--collective", "all_reduce", "--size", "1KiB", "--npus",
                                     "4", "-o", f"{o}/m"], "--output", "m"),
    ("workload scale", lambda i, o: ["workload", "scale", f"{i}/ar", "--to-npus", "16", "-o", f"{o}/s"],
     "--output", "s"),
    ("workload convert-text", lambda i, o: ["workload", "convert-text", f"{i}/model.txt", "--npus", "2",
                                            "-o", f"{o}/c"], "--output", "c"),
    ("workload micro --chakra-suite", lambda i, o: ["workload", "micro", "--chakra-suite", "--npus", "2",
                                                    "-o", f"{o}/suite"], "--output", "suite"),
    ("workload convert-pytorch", lambda i, o: ["workload", "convert-pytorch", str(PYTORCH_HOST), "--rank", "0",
                                               "-o", f"{o}/p"], "--output", "p"),
    ("workload expand", lambda i, o: ["workload", "expand", f"{i}/compact", "-o", f"{o}/e"], "--output", "e"),
    ("workload systolic", lambda i, o: ["workload", "systolic", f"{i}/topo.csv", "--config", str(SYSTOLIC_CFG),
                                        "--npus", "4", "--parallel", "DATA", "-o", f"{o}/w.txt"], "--output", "w.txt"),
    ("workload systolic --chakra", lambda i, o: ["workload", "systolic", f"{i}/topo.csv", "--config",
                                                 str(SYSTOLIC_CFG), "--npus", "4", "--parallel", "DATA", "--chakra",
                                                 "-o", f"{o}/w"], "--output", "w"),
    ("compute systolic", lambda i, o: ["compute", "systolic", f"{i}/topo.csv", "--gemm", "--config",
                                       str(SYSTOLIC_CFG), "-o", f"{o}/c.csv"], "--output", "c.csv"),
    ("systolic", lambda i, o: ["systolic", f"{i}/topo.csv", "--gemm", "--config", str(SYSTOLIC_CFG),
                               "-o", f"{o}/c.csv"], "--output", "c.csv"),
    ("msccl to-chakra", lambda i, o: ["msccl", "to-chakra", str(next(MSCCL_XML.glob("*.xml"))), "--size", "4096",
                                      "-q", "-o", f"{o}/x"], "--output", "x"),
    ("plot", lambda i, o: ["plot", f"{i}/report.json", "-o", f"{o}/pics"], "--output", "pics"),
    ("cluster -o", lambda i, o: ["cluster", f"{i}/cluster.yaml", "-o", f"{o}/c.json"], "--output", "c.json"),
    ("infragraph --to-analytical", lambda i, o: ["infragraph", str(next(INFRAGRAPH.glob("*.yaml"))),
                                                 "--to-analytical", "-o", f"{o}/n.yaml"], "--output", "n.yaml"),
    ("fabric -o", lambda i, o: ["fabric", "rail:nodes_per_leaf=2", "--platform", "hgx-h100", "--nodes", "4",
                                "-o", f"{o}/f.yaml"], "--output", "f.yaml"),
]
IDS = [case[0] for case in CASES]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return _inputs(tmp_path_factory.mktemp("inputs"))


@pytest.fixture
def no_simulation(monkeypatch):
    """Any simulation started fails the test: the output check must come first."""
    from astra_sim.simulation import Simulation

    def refused(self, *args, **kwargs):
        raise AssertionError("a simulation started before the output location was checked")

    monkeypatch.setattr(Simulation, "run", refused)


#: a flag's other spellings an error may use
SHORT = {"--output": "-o"}


def _one_line_error(capsys, path, flag=None):
    """The command's one error line names the path (and the flag, long or short)."""
    err = capsys.readouterr().err.strip()
    lines = [line for line in err.splitlines() if line.startswith("astra: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert path in lines[0], (path, lines[0])
    if flag is not None:
        assert f"{flag} " in lines[0] or f"{SHORT.get(flag, flag)} " in lines[0], (flag, lines[0])
    return lines[0]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_an_unwritable_output_folder_is_an_error_before_any_work(case, inputs, tmp_path, capsys, no_simulation):
    _, argv, flag, name = case
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    out = blocker / "sub"
    assert main(argv(inputs, out)) == 2
    _one_line_error(capsys, str(out), flag)
    assert blocker.read_text() == "a file, not a folder"


@contextlib.contextmanager
def _full_disk(monkeypatch, folder, whole_files=0):
    """Every write into ``folder`` through the atomic writer fails with ENOSPC after its first bytes (after
    ``whole_files`` whole ones)."""
    real = safeio.atomic_output
    written = []

    class Full:
        def __init__(self, handle):
            self.handle = handle

        def write(self, data):
            self.handle.write(bytes(data[:10]) if isinstance(data, (bytes, bytearray, memoryview)) else data[:10])
            self.handle.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):
            return getattr(self.handle, name)

    @contextlib.contextmanager
    def full(path):
        with real(path) as handle:
            inside = os.path.abspath(os.fspath(path)).startswith(str(folder) + os.sep)
            if inside:
                written.append(path)
            yield Full(handle) if inside and len(written) > whole_files else handle

    monkeypatch.setattr(safeio, "atomic_output", full)
    yield


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_full_disk_is_a_one_line_error_and_leaves_no_partial_file(case, inputs, tmp_path, capsys, monkeypatch):
    _, argv, flag, name = case
    out = tmp_path / "out"
    out.mkdir()
    with _full_disk(monkeypatch, out):
        code = main(argv(inputs, out))
    assert code != 0
    line = _one_line_error(capsys, str(out))
    kept = [p.name for p in out.rglob("*") if p.is_file() and str(p) in line]  # the finished work, named
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name not in kept)
    assert left == [], left  # the folder was empty: no output, no part of one, no partial set of rank files


#: the commands whose whole result is one report written last: a late failure prints it on stdout instead
REPORT_ON_STDOUT = ["serve -o", "validate -o", "cluster -o"]


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in REPORT_ON_STDOUT], ids=REPORT_ON_STDOUT)
def test_a_late_write_failure_keeps_the_report_on_stdout(case, inputs, tmp_path, capsys, monkeypatch):
    """The report is computed (minutes of simulation); a full disk at its write must not lose it: the one error
    line says where it went, and stdout ends with it whole (the JSON -o would have held)."""
    _, argv, flag, name = case
    out = tmp_path / "out"
    out.mkdir()
    with _full_disk(monkeypatch, out):
        assert main(argv(inputs, out)) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("astra: error:")]
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert f"{out / name}: cannot write: No space left on device" in lines[0], lines[0]
    assert lines[0].endswith("on stdout instead"), lines[0]
    text = captured.out
    start = 0 if text.startswith("{") else text.index("\n{\n") + 1  # after validate's table, if any
    report = json.loads(text[start:])
    assert isinstance(report, dict) and report  # the whole report, parsed
    assert list(out.iterdir()) == []


#: the commands that write several files
MANY_FILES = ["workload llm", "workload micro", "workload micro --chakra-suite", "workload scale",
              "workload convert-text", "workload expand", "workload systolic --chakra", "msccl to-chakra"]


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in MANY_FILES], ids=[n for n, *_ in CASES if n in MANY_FILES])
def test_a_disk_full_after_the_first_file_leaves_no_partial_set(case, inputs, tmp_path, capsys, monkeypatch):
    _, argv, flag, name = case
    out = tmp_path / "out"
    out.mkdir()
    with _full_disk(monkeypatch, out, whole_files=1):
        assert main(argv(inputs, out)) != 0
    _one_line_error(capsys, str(out))
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == []


_REAL = """
import errno, json, os, subprocess, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
import test_output_locations as t
from astra_sim.cli import main

base = Path({base!r})
inputs = t._inputs(base / "inputs")
ro, full = base / "ro", base / "full"
ro.mkdir(); full.mkdir()
subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)], check=True)
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
try:
    with open(full / "filler", "wb") as handle:  # the disk is full before the command starts
        while True:
            handle.write(b"x" * 4096)
            handle.flush()
except OSError as exc:
    assert exc.errno == errno.ENOSPC, exc
out = {{}}
for name, argv, flag, target in t.CASES:
    for kind, folder in (("ro", ro), ("full", full)):
        sys.stderr.flush()
        log = base / "err.txt"
        with open(log, "w") as err:
            saved = os.dup(2)
            os.dup2(err.fileno(), 2)
            real_stderr, sys.stderr = sys.stderr, open(2, "w", closefd=False)
            try:
                code = main(argv(inputs, folder))
            except BaseException as exc:
                code = repr(exc)
            finally:
                sys.stderr.flush()
                sys.stderr = real_stderr
                os.dup2(saved, 2)
                os.close(saved)
        left = sorted(p.name for p in folder.rglob("*") if p.is_file() and p.name != "filler")
        out[name + " " + kind] = {{"code": code, "err": log.read_text(), "left": left}}
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("unshare") or not shutil.which("mount"), reason="needs unshare and mount")
def test_real_read_only_and_full_folders(tmp_path):
    """A read-only tmpfs and a full 64 KiB tmpfs, mounted in a user namespace (where the machine allows one):
    every command exits non-zero with one error line naming the folder, without a traceback, and leaves no file
    there but one it names (the kept results)."""
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("no user namespaces here")
    script = _REAL.format(tests=str(Path(__file__).parent), base=str(tmp_path))
    done = subprocess.run(["unshare", "-rm", sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    results = json.loads(done.stdout.strip().splitlines()[-1])
    for key, got in results.items():
        lines = [line for line in got["err"].splitlines() if line.startswith("astra: error:")]
        assert got["code"] not in (0, None) and isinstance(got["code"], int), (key, got)
        assert len(lines) == 1 and "Traceback" not in got["err"], (key, got["err"])
        folder = str(tmp_path / key.rsplit(" ", 1)[1])
        assert folder in lines[0], (key, lines[0])
        assert all(n.endswith(".journal") and n in lines[0] for n in got["left"]), (key, got["left"])
