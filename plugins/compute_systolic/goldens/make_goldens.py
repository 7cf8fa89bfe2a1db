"""Regenerate the golden COMPUTE_REPORT.csv files by running the real SCALE-sim (``scalesim`` 3.0.0).

Not part of the package and never imported by it: run it with a scratch virtual environment that has
SCALE-sim, outside this repository (SCALE-sim needs numpy<2), see README.md:

    python3 -m venv /tmp/scalesim-venv
    /tmp/scalesim-venv/bin/pip install 'numpy<2' scalesim==3.0.0
    /tmp/scalesim-venv/bin/python plugins/compute_systolic/goldens/make_goldens.py

For every config in configs/ and topology in topologies/ it runs SCALE-sim once (all layers of the
topology) and copies its COMPUTE_REPORT.csv to reports/<config>/<topology>.csv, byte for byte. SCALE-sim
3.0.0 insists on a layout file even with custom layouts off; an empty one (header only) is given.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_one(config: Path, topology: Path, work: Path) -> str:
    from scalesim.scale_sim import scalesim  # the scratch venv's SCALE-sim

    layout = work / "empty_layout.csv"
    layout.write_text("Layer name,\n")
    out = work / "out"
    with contextlib.redirect_stdout(io.StringIO()):
        sim = scalesim(save_disk_space=True, verbose=False, config=str(config), topology=str(topology),
                       layout=str(layout), input_type_gemm=False)
        sim.run_scale(top_path=str(out))
    run_name = sim.config.get_run_name()
    return (out / run_name / "COMPUTE_REPORT.csv").read_text()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="config name(s) to run (default: all)")
    args = parser.parse_args(argv)
    import numpy
    import scalesim  # noqa: F401

    from importlib.metadata import version

    versions = (f"scalesim {version('scalesim')}, numpy {numpy.__version__}, "
                f"python {platform.python_version()} ({platform.machine()})")
    print(versions, file=sys.stderr)
    configs = sorted((HERE / "configs").glob("*.cfg"))
    topologies = sorted((HERE / "topologies").glob("*.csv"))
    for config in configs:
        if args.only and config.stem not in args.only:
            continue
        for topology in topologies:
            work = Path(tempfile.mkdtemp(prefix="scalesim-golden-"))
            start = time.time()
            report = run_one(config, topology, work)
            target = HERE / "reports" / config.stem / f"{topology.stem}.csv"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(report)
            shutil.rmtree(work, ignore_errors=True)
            print(f"{config.stem} {topology.stem}: {report.count(chr(10)) - 1} layers, "
                  f"{time.time() - start:.1f} s", file=sys.stderr)
    (HERE / "reports" / "VERSIONS.txt").write_text(versions + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
