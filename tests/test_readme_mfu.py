"""The README's GPT-3 175B / 1024 H100 command computes MFU; held to Megatron's FLOP formula worked by hand.

Narayanan et al. SC'21 (arXiv:2104.04473), eq. 3 without recomputation: a step of B sequences of s tokens through
l layers of width h with a vocabulary of V costs F = 72 B s l h^2 (1 + s / (6 h) + V / (12 l h)) FLOPs.
MFU = F / (step time x GPUs x peak): the H100 SXM5's dense bf16 peak is 989.4 TFLOP/s (NVIDIA H100 datasheet).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _readme_commands():
    """The two command lines of the README's MFU block (found by its trace name, so the test runs what the README
    says)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if "trace/gpt3-175b" in line and line.startswith(".venv/bin/astra")]
    assert len(lines) == 2, lines
    return [shlex.split(line) for line in lines]


@pytest.mark.slow
def test_the_readme_command_gives_megatron_flops_and_mfu(tmp_path):
    env = {**os.environ, "ASTRA_PROGRESS": "0"}
    for argv in _readme_commands():
        argv[0] = str(BIN / "astra")
        out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
        assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "gpt3-175b.json").read_text())
    t = report["stats"]["throughput"]
    # the layout in the README's words
    assert "--tp 8 --pp 8 --dp 16" in " ".join(_readme_commands()[0]) and report["summary"]["npus"] == 1024
    B, s, l, h, V = 16 * 16, 2048, 96, 12288, 50257  # 16 micro-batches x DP 16 sequences; GPT-3 175B (Brown et al.)
    flops = 72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h))
    assert t["sequences_per_step"] == B and t["tokens_per_step"] == B * s
    # the generator counts the vocabulary padded to a multiple of 128 x TP (Megatron's): within 0.1 %
    assert t["model_flops_per_step"] == pytest.approx(flops, rel=1e-3)
    step_s = report["summary"]["max_finish_ns"] / 1e9
    peak = 989.4e12
    assert t["peak_flop_per_s_per_gpu"] == peak
    assert t["mfu"] == pytest.approx(t["model_flops_per_step"] / (step_s * 1024 * peak), rel=1e-9)
    assert t["mfu"] == pytest.approx(flops / (step_s * 1024 * peak), rel=1e-3)
    assert 0.05 < t["mfu"] < 0.8  # a plausible training step
    assert t["tokens_per_s"] == pytest.approx(B * s / step_s, rel=1e-9)
    # the terminal line names it
    assert re.search(r"% MFU of 989\.4 bf16 TFLOP/s", out.stderr + out.stdout)
