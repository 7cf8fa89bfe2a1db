#!/usr/bin/env python3
"""Refit the partly calibrated presets' GEMM efficiencies on the published peak-GEMM table, and write them.

Regenerate (from the repository root):

    .venv/bin/python plugins/gpu_model/fit/fit_peak_gemm.py          # print the fit, the errors and the ceilings
    .venv/bin/python plugins/gpu_model/fit/fit_peak_gemm.py --write  # and rewrite the presets' fitted lines

Data: ``astra_gpu_model/data/published_peak_gemm.csv`` (fit data: the stas00/ml-engineering MAMF table, AMD's
max-achievable FLOPs blog, torchao's and flashinfer's Blackwell benchmarks; each row names its source). Method:
``astra_gpu_model.calibration.fit_peak_efficiency`` with each preset's own tile set (``gemm_tiles``), which holds
every dtype's best modelled shape to the published maximum. Only the lines marked
``# fitted: calibration.fit_peak_efficiency('NAME')`` are rewritten, and the lines of other presets marked
``# copied: calibration.fit_peak_efficiency('NAME')`` (a preset without a published measurement of that format that
assumes NAME's fitted value: written with it, so that a refit of NAME cannot leave a stale copy behind).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "src"))  # run from a checkout without installing

from astra_gpu_model.calibration import fit_peak_efficiency, load_published_peak_gemm, predict_gemm_s  # noqa: E402
from astra_gpu_model.gpu import load_gpu  # noqa: E402
from astra_sim.safeio import write_text_atomic  # noqa: E402

PRESETS = HERE.parents[1] / "src" / "astra_gpu_model" / "presets"
KEYS = ("compute_efficiency", "fp8_gemm_scale", "fp4_gemm_scale", "mxfp8_gemm_scale")


def rewrite(name, fit):
    """The preset's text with its fitted lines set to ``fit``'s values (a missing fitted line is an error)."""
    path = PRESETS / f"{name}.yaml"
    text = path.read_text()
    for key in KEYS:
        if fit.get(key) is None:
            continue
        pattern = re.compile(rf"^(  {key}: )[0-9.]+(\s+# fitted: calibration\.fit_peak_efficiency\('{name}'\))$",
                             re.MULTILINE)
        text, count = pattern.subn(lambda m: f"{m.group(1)}{fit[key]}{m.group(2)}", text)
        if count != 1:
            raise SystemExit(f"{path}: expected one fitted line for efficiency.{key}, found {count}")
    return path, text


def rewrite_copies(name, fit):
    """``{path: text}`` of every preset whose lines marked ``# copied: calibration.fit_peak_efficiency('NAME')``
    change when set to ``fit``'s values."""
    out = {}
    for path in sorted(PRESETS.glob("*.yaml")):
        text = path.read_text()
        changed = text
        for key in KEYS:
            if fit.get(key) is None:
                continue
            pattern = re.compile(rf"^(  {key}: )[0-9.]+(\s+# copied: calibration\.fit_peak_efficiency\('{name}'\).*)$",
                                 re.MULTILINE)
            changed = pattern.sub(lambda m: f"{m.group(1)}{fit[key]}{m.group(2)}", changed)
        if changed != text:
            out[path] = changed
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the presets' fitted lines")
    args = parser.parse_args(argv)
    points = load_published_peak_gemm()
    for name in sorted({p["gpu"] for p in points}):
        fit = fit_peak_efficiency(name)
        print(f"{name}: " + ", ".join(f"{k} {fit[k]}" for k in KEYS if fit.get(k) is not None)
              + "; best modelled TFLOP/s " + ", ".join(f"{d} {v:,.1f}" for d, v in fit["ceiling_tflops"].items()))
        if args.write:
            path, text = rewrite(name, fit)
            write_text_atomic(path, text)
            for copy_path, copy_text in rewrite_copies(name, fit).items():
                write_text_atomic(copy_path, copy_text)
        gpu = load_gpu(name)
        for p in (p for p in points if p["gpu"] == name):
            if not args.write:  # the preset's own values, as a run uses them
                seconds = predict_gemm_s(gpu, [p["m"]], p["n"], p["k"], dtype=p["dtype"])[0]
                model = 2.0 * p["m"] * p["n"] * p["k"] / seconds / 1e12
                print(f"  {p['dtype']:6} {p['m']}x{p['n']}x{p['k']}: published {p['tflops']:,.1f}, preset "
                      f"{model:,.1f} TFLOP/s ({model / p['tflops'] - 1:+.1%})  [{p['source']}]")


if __name__ == "__main__":
    main()
