"""ASTRA-sim's own regression test template (``tests/rt_template``) against ``astra run``.

The template runs its binary, strips three spdlog prefixes from every stdout line (``clean_log``)
and diffs the rest against ``refs/stdout.txt``. Here the binary is a one-line wrapper around
``astra run --astra-sim-log``, laid out at the path the template's ``run.sh`` expects, and the
trace is the same one-node all-reduce, written by ``astra workload micro`` (the template's generator
needs mlcommons' ``chakra`` package). ``tests/data/rt_template/SOURCE.md`` names the data's origin.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from astra_sim.chakra import encode_et, make_metadata, make_node, types as T

DATA = Path(__file__).parent / "data" / "rt_template"
ASTRA = Path(sys.executable).parent / "astra"
BINARY = "build/astra_analytical/build/bin/AstraSim_Analytical_Congestion_Aware"

#: The template's comparison, step for step: run the binary into outputs/stdout.txt (via tee),
#: strip three bracketed prefixes from each line, diff against refs/stdout.txt.
DRIVER = r"""#!/bin/bash
set -e
HERE=$(dirname "$(realpath "$0")")
BIN=${HERE}/../../build/astra_analytical/build/bin/AstraSim_Analytical_Congestion_Aware
rm -rf "${HERE}"/outputs/*
"${HERE}"/inputs/workload/gen.sh
"${BIN}" \
    --workload-configuration="${HERE}"/inputs/workload/chakra_trace \
    --system-configuration="${HERE}"/inputs/system_cfg.json \
    --network-configuration="${HERE}"/inputs/network_cfg.yml \
    --remote-memory-configuration="${HERE}"/inputs/remote_memory_cfg.json \
    | tee "${HERE}"/outputs/stdout.txt
sed -E 's/\[[^]]+\] //; s/\[[^]]+\] //; s/\[[^]]+\] //' < "${HERE}"/outputs/stdout.txt > "${HERE}"/outputs/stdout_clean.txt
diff "${HERE}"/outputs/stdout_clean.txt "${HERE}"/refs/stdout.txt || (echo "Failed." ; exit 1)
echo "Ok."
"""

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("bash", "sed", "diff", "tee", "realpath")),
                                reason="needs bash, sed, diff, tee and realpath")


def _layout(root, backend="congestion", filter_cmd=""):
    """The template's folder tree under ``root`` with our binary wrapper and trace generator."""
    template = root / "tests" / "rt_template"
    shutil.copytree(DATA / "inputs", template / "inputs")
    shutil.copytree(DATA / "refs", template / "refs")
    (template / "outputs").mkdir()
    gen = template / "inputs" / "workload" / "gen.sh"
    gen.parent.mkdir()
    gen.write_text(
        "#!/bin/bash\nset -e\ncd \"$(dirname \"$(realpath \"$0\")\")\"\n"
        f"\"{ASTRA}\" workload micro --collective all_reduce --size 1MiB --npus 8 --name All-Reduce "
        "--first-id 1 -o chakra_trace >/dev/null\n"
    )
    binary = root / BINARY
    binary.parent.mkdir(parents=True)
    binary.write_text(f"#!/bin/sh\nexec \"{ASTRA}\" run --network-backend {backend} --astra-sim-log \"$@\"{filter_cmd}\n")
    for script in (gen, binary):
        script.chmod(0o755)
    return template


def _run(script):
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "80"})


@pytest.mark.parametrize("backend", ["congestion", "analytical"])
def test_rt_template_passes(tmp_path, backend):
    template = _layout(tmp_path, backend)
    driver = template / "run.sh"
    driver.write_text(DRIVER)
    proc = _run(driver)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith("Ok.")
    clean = (template / "outputs" / "stdout_clean.txt").read_text()
    assert clean == (DATA / "refs" / "stdout.txt").read_text()
    assert clean.count("finished, 117780 cycles, exposed communication 117780 cycles.") == 8
    # our summary and the ignored-key warning go to stderr, out of the compared stream
    assert "astra: warning:" in proc.stderr and "'boost-mode' has no effect" in proc.stderr


def test_rt_template_fails_without_the_prefixes(tmp_path):
    """The old --astra-sim-log (bare lines): clean_log eats 'sys[0] ' and the diff fails."""
    template = _layout(tmp_path, filter_cmd=" | sed -E 's/^(\\[[^]]+\\] ){3}//'")
    # exec replaces the shell, so the filter needs a pipeline instead
    binary = tmp_path / BINARY
    binary.write_text(binary.read_text().replace("exec ", ""))
    driver = template / "run.sh"
    driver.write_text(DRIVER)
    proc = _run(driver)
    assert proc.returncode != 0
    assert "Failed." in proc.stdout and "sysfinished" in (template / "outputs" / "stdout_clean.txt").read_text()


def test_generated_trace_is_the_templates(tmp_path):
    """gen.sh's trace: the template generator's node (id 1, "All-Reduce", is_cpu_op false,
    ALL_REDUCE of 1 MiB) behind a version 0.0.4 GlobalMetadata, byte for byte."""
    template = _layout(tmp_path)
    subprocess.run(["bash", str(template / "inputs" / "workload" / "gen.sh")], check=True, timeout=60)
    node = make_node(1, "All-Reduce", T.COMM_COLL_NODE,
                     attrs={"is_cpu_op": False, "comm_type": T.ALL_REDUCE, "comm_size": 1_048_576})
    expected = encode_et(make_metadata("0.0.4"), [node])
    for rank in range(8):
        assert (template / "inputs" / "workload" / f"chakra_trace.{rank}.et").read_bytes() == expected


@pytest.mark.skipif(not os.environ.get("ASTRA_SIM_REFERENCE"),
                    reason="set ASTRA_SIM_REFERENCE to a checkout of astra-sim/astra-sim to run its run.sh")
def test_reference_run_sh_unchanged(tmp_path):
    """The template's own run.sh, byte for byte, with its binary path holding our wrapper."""
    template = _layout(tmp_path)
    source = Path(os.environ["ASTRA_SIM_REFERENCE"]) / "tests" / "rt_template" / "run.sh"
    shutil.copy(source, template / "run.sh")
    proc = _run(template / "run.sh")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith("Ok.")
