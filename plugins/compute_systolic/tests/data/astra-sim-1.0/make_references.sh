#!/bin/bash
# Regenerate generated/ and per_pass/ with ASTRA-sim 1.0's own generator and its pinned SCALE-sim.
# Needs (outside this repository):
#   ASTRA1  a checkout of github.com/astra-sim/astra-sim at branch ASTRA-sim-1.0 (07d5d19)
#   SCALESIM a checkout of github.com/scalesim-project/scale-sim-v2 at c28fd1b (its extern/compute/SCALE-Sim)
#   VENV    python3 -m venv $VENV && $VENV/bin/pip install numpy==1.23.5 'pandas<2.3' tqdm absl-py configparser setuptools
#           (scale-sim-v2 of 2021 uses np.int, gone in numpy 1.24; the generator runs `python3 setup.py install`
#            of SCALE-sim into whatever python3 is first on PATH, hence the venv)
# Usage: ASTRA1=... SCALESIM=... VENV=... plugins/compute_systolic/tests/data/astra-sim-1.0/make_references.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
export PATH=$VENV/bin:$PATH
GEN=$ASTRA1/scripts/workload_generator
cd "$GEN"
python3 - "$HERE" "$SCALESIM" <<'PY'
import json, os, subprocess, sys, glob, shutil, contextlib, io, tempfile
here, scalesim = sys.argv[1], sys.argv[2]
for run in json.load(open(os.path.join(here, "runs.json"))):
    cfg = os.path.join(here, "configs", run["config"])
    mnk = os.path.join(here, "mnk", run["mnk"])
    out = os.path.join(here, "generated", run["name"] + ".txt")
    subprocess.run(["python3", "gen_astrasim_workload_input.py", f"--datatype_size={run['datatype_size']}",
                    f"--mnk={mnk}", f"--num_npus={run['npus']}", f"--num_packages={run['packages']}",
                    f"--output_file={out}", f"--parallel={run['parallel']}", f"--run_name={run['name']}",
                    f"--scalesim_config={cfg}", f"--scalesim_path={scalesim}"], check=True,
                   stdout=subprocess.DEVNULL)
    # each pass again, alone, from the topology files the generator wrote (it reads one overwritten report)
    stem = os.path.basename(mnk)[:-4]
    target = os.path.join(here, "per_pass", run["name"])
    os.makedirs(target, exist_ok=True)
    for part in ("fwd_pass", "inp_grad", "weight_grad"):
        topo = os.path.join("outputs", run["parallel"], run["name"], f"{stem}_{part}.csv")
        work = tempfile.mkdtemp()
        code = ("import contextlib, io, sys; from scalesim.scale_sim import scalesim\n"
                "with contextlib.redirect_stdout(io.StringIO()):\n"
                f"    s = scalesim(save_disk_space=True, verbose=False, config={cfg!r}, topology={topo!r})\n"
                f"    s.run_scale(top_path={work!r})\n"
                "print(s.config.get_run_name())")
        name = subprocess.run(["python3", "-c", code], check=True, capture_output=True, text=True).stdout.strip()
        shutil.copy(os.path.join(work, name, "COMPUTE_REPORT.csv"), os.path.join(target, f"{part}.csv"))
    print(run["name"], "done")
PY
