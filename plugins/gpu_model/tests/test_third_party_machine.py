"""A machine added by a third-party package (docs/hardware.md): the package is built from the doc's own blocks, made
installed as pip makes it (a .dist-info with its entry point, on PYTHONPATH), and run through `astra platforms`,
`astra run --platform h200-nvl` and `astra_sim.simulate(..., extra_plugins=[plugin])`. A machine whose numbers rest on
assumptions says so in `astra platforms --json` and in the report."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from astra_gpu_model.platforms import PLATFORMS, machine_assumptions

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "hardware.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
BIN = Path(sys.executable).parent


def _blocks():
    """``[(language, info after it, body)]`` of the doc's fenced blocks."""
    return [(m.group(1), m.group(2).strip(), m.group(3)) for m in FENCE.finditer(DOC.read_text(encoding="utf-8"))]


def _package(folder):
    """The doc's package written under ``folder``/astra-h200-nvl (its ``file=`` blocks, and the empty
    ``__init__.py`` its layout shows); the project folder."""
    project = folder / "astra-h200-nvl"
    files = {info.partition("file=")[2]: body for _, info, body in _blocks() if info.startswith("file=")}
    assert set(files) == {"pyproject.toml", "src/astra_h200_nvl/H200-NVL.yaml", "src/astra_h200_nvl/plugin.py"}
    for name, body in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(body, encoding="utf-8")
    (project / "src" / "astra_h200_nvl" / "__init__.py").write_text("")
    return project


def _installed(folder, project):
    """What `pip install` leaves for the package (its metadata and entry points, read from its pyproject.toml) in a
    folder of its own; the PYTHONPATH that makes it installed."""
    meta = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    site = folder / "site"
    info = site / f"{meta['name'].replace('-', '_')}-{meta['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n")
    points = meta["entry-points"]["astra_sim.plugins"]
    (info / "entry_points.txt").write_text("[astra_sim.plugins]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    return os.pathsep.join([str(project / "src"), str(site)])


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    """The package built and installed, and a decode trace the doc's commands made (``trace/decode``)."""
    folder = tmp_path_factory.mktemp("third-party")
    project = _package(folder)
    env = dict(os.environ, PYTHONPATH=_installed(folder, project), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
               COLUMNS="100")
    env.pop("ASTRA_PLUGINS", None)
    shell = [body for language, _, body in _blocks() if language == "sh" and "pip install" in body]
    assert len(shell) == 1
    commands = "\n".join(line for line in shell[0].splitlines() if not line.startswith("pip install"))
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", commands], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return {"folder": folder, "project": project, "env": env, "out": done.stdout, "err": done.stderr}


def _astra(machine, *args):
    done = subprocess.run([str(BIN / "astra"), *args], cwd=machine["folder"], env=machine["env"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _step(machine, platform, name):
    path = machine["folder"] / f"{name}.json"
    _astra(machine, "run", "--platform", platform, "--host-launch-us", "0", "--workload-configuration",
           "trace/decode", "--report-json", str(path), "-q")
    return json.loads(path.read_text())


def test_the_installed_package_is_a_plugin_and_its_machine_a_platform(machine):
    assert "h200_nvl" in machine["out"] and "astra-h200-nvl" in machine["out"]  # astra plugins
    rows = {row["name"]: row for row in json.loads(_astra(machine, "platforms", "--json").stdout)}
    row = rows["h200-nvl"]
    assert (row["gpu"], row["gpus_per_node"], row["hbm_bandwidth_gbps"], row["hbm_capacity_gb"]) == (
        "H200-NVL", 8, 4800, 141)
    assert row["bf16_tflops"] == rows["h100-nvl"]["bf16_tflops"]  # inherited from its base, the H100 NVL
    assert row["scaleup_gb_per_s_per_direction"] == 64.0 and row["nvlink_bridge_gb_per_s_per_direction"] == 450
    assert row["calibration"] == "fitted"
    assert row["sources"]["nic"].startswith("ASSUMPTION") and "datasheet" in row["sources"]["gpus_per_node"]
    # its assumed numbers, the platform's and the GPU's
    assert row["assumptions"] == ["nic", "gpu.scaleup"]


def test_a_run_on_it_says_what_is_assumed_and_decodes_faster_than_h100_nvl(machine):
    h200 = _step(machine, "h200-nvl", "h200")
    h100 = _step(machine, "h100-nvl", "h100")
    assert h200["settings"]["platform"]["name"] == "h200-nvl"
    assumed = h200["settings"]["platform_defaults"]["assumptions"]
    assert assumed.startswith("nic, gpu.scaleup: assumed")
    # decode reads the weights and the KV cache: 4.8 TB/s of HBM against 3.9 TB/s, the same compute and links
    fast, slow = h200["summary"]["max_finish_ns"], h100["summary"]["max_finish_ns"]
    assert fast < 0.95 * slow, (fast, slow)
    assert fast > 3.9 / 4.8 * slow * 0.95  # not faster than its bandwidth allows


def test_the_python_api_runs_it_without_installing(machine):
    block = [body for language, _, body in _blocks() if language == "python" and "extra_plugins" in body]
    assert len(block) == 1
    script = block[0] + "\nprint(report.to_dict()['summary']['max_finish_ns'])\n"
    env = dict(machine["env"], PYTHONPATH=str(machine["project"] / "src"))  # the package's source, no entry point
    done = subprocess.run([sys.executable, "-c", script], cwd=machine["folder"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    cli = _astra(machine, "run", "--platform", "h200-nvl", "--workload-configuration", "trace/decode",
                 "--report-json", str(machine["folder"] / "cli.json"), "-q")
    assert cli.returncode == 0
    expected = json.loads((machine["folder"] / "cli.json").read_text())["summary"]["max_finish_ns"]
    assert int(done.stdout.split()[-1]) == expected  # the same answer through both doors
    without = subprocess.run([sys.executable, "-c", "import astra_sim; astra_sim.get_platform('h200-nvl')"],
                             cwd=machine["folder"], env=env, capture_output=True, text=True, timeout=120)
    assert without.returncode != 0 and "unknown --platform 'h200-nvl'" in without.stderr


def test_shipped_machines_list_their_assumed_numbers():
    assert "gpu_proxy" in PLATFORMS["gb200-nvl72"].numbers()["assumptions"]
    assert "nic" in PLATFORMS["mi325x"].numbers()["assumptions"]
    assert "nic" not in PLATFORMS["hgx-h100"].numbers()["assumptions"]
    # the network model's shared assumptions stay in sources, out of a machine's own list
    numbers = PLATFORMS["hgx-h100"].numbers()
    assert numbers["sources"]["fabric_latency"].startswith("ASSUMPTION")
    assert not {"scaleup_latency", "fabric_latency", "fabric_topology"} & set(numbers["assumptions"])


def test_assumed_numbers_are_found_by_their_sources():
    from astra_gpu_model.gpu import load_gpu

    gpu = load_gpu("B200")
    names = machine_assumptions({"nic": "ASSUMPTION: one per GPU", "gpus_per_node": "a datasheet",
                                 "other": "  unverified: a forum post"}, gpu)
    assert names[:2] == ["nic", "other"] and "gpus_per_node" not in names
    assert "gpu.boost_clock_mhz" in names  # B200's clock: UNVERIFIED in its preset
