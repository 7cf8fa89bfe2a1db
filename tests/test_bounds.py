"""Bounds on generators and readers, checked before the work starts: each a one-line error naming the limit and the
environment variable that raises it (astra_sim.limits), and the serve trace reader streamed with bounded nesting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from hypothesis import example, given, strategies as st

import astra_serving.requests as requests_module
import astra_sweep.spec as sweep_spec
import astra_workload_generators.micro as micro
from astra_serving.requests import MAX_REQUESTS, generate_requests, read_trace
from astra_sim.errors import ConfigError
from astra_sweep.spec import MAX_SWEEP_POINTS
from astra_workload_generators.micro import MAX_MICRO_NPUS
from astra_sim_testing.fuzzing import fuzz_settings


def astra(*argv, env=None, timeout=120):
    environment = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "astra_sim.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, env=environment)


# ------------------------------------------------------------------------------------------------ serve
def test_generating_more_requests_than_the_limit_is_refused_before_drawing():
    started = time.perf_counter()
    with pytest.raises(ConfigError, match=rf"--requests 10,000,000 is more than the {MAX_REQUESTS:,} requests.*"
                                          "ASTRA_MAX_REQUESTS raises the limit"):
        generate_requests(10_000_000, 5.0, ("fixed", 10), ("fixed", 10))
    assert time.perf_counter() - started < 1
    assert len(generate_requests(1000, 5.0, ("fixed", 10), ("fixed", 10))) == 1000


def test_astra_serve_refuses_ten_million_requests_at_once():
    done = astra("serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "5", "--requests", "10000000")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"astra: error: --requests 10,000,000 is more than the {MAX_REQUESTS:,} requests one run holds (about "
        f"{MAX_REQUESTS * requests_module.REQUEST_BYTES >> 20:,} MiB); ASTRA_MAX_REQUESTS raises the limit")
    lowered = astra("serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "5", "--requests", "20",
                    env={"ASTRA_MAX_REQUESTS": "10"})
    assert lowered.returncode == 2 and "--requests 20 is more than the 10 requests" in lowered.stderr


def test_a_trace_with_more_requests_than_the_limit_names_the_line(tmp_path, monkeypatch):
    monkeypatch.setattr(requests_module, "MAX_REQUESTS", 5)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"arrival_s": i, "prompt_tokens": 3, "output_tokens": 2}) + "\n"
                            for i in range(6)))
    with pytest.raises(ConfigError, match=r"t.jsonl:6: more than 5 requests .*ASTRA_MAX_REQUESTS raises the limit"):
        read_trace(path)
    path.write_text(path.read_text().splitlines(True)[0] * 5)
    assert len(read_trace(path)) == 5


def test_deep_nesting_in_a_serve_trace_is_refused_like_the_other_readers(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 2}\n'
                    + '{"prefix_group": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(ConfigError, match=r"deep.jsonl:2: nested more than 200 levels deep"):
        read_trace(path)


def test_a_line_longer_than_the_limit_is_refused_before_it_is_held(tmp_path, monkeypatch):
    monkeypatch.setattr(requests_module, "MAX_LINE_CHARS", 100)
    path = tmp_path / "long.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,3," + "2" * 200 + "\n")
    with pytest.raises(ConfigError, match=r"long.csv:2: line longer than 100 characters"):
        read_trace(path)


def test_a_trace_larger_than_the_byte_limit_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setattr(requests_module, "MAX_TRACE_BYTES", 50)
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps({"arrival_s": 0, "prompt_tokens": 3, "output_tokens": 2}) + "\n" * 40)
    with pytest.raises(ConfigError, match=r"big.jsonl: request trace of 96 bytes, more than the 50 accepted "
                                          r"\(ASTRA_MAX_TRACE_BYTES raises the limit\)"):
        read_trace(path)


def test_a_trace_that_is_not_utf8_or_missing_is_one_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n0,3,\xff\xfe\n")
    with pytest.raises(ConfigError, match=r"bad.csv: not UTF-8"):
        read_trace(path)
    with pytest.raises(ConfigError, match=r"does not exist"):
        read_trace(tmp_path / "nope.jsonl")


@st.composite
def hostile_lines(draw):
    valid = json.dumps({"arrival_s": 0.5, "prompt_tokens": 3, "output_tokens": 2})
    depth = draw(st.integers(0, 3000))
    nested = "[" * depth + "1" + "]" * depth
    line = draw(st.sampled_from([
        '{"arrival_s": 1, "prompt_tokens": 2, "output_tokens": %s}' % nested,
        '{"arrival_s": 1, "prompt_tokens": 2, "output_tokens": 1, "prefix_group": %s}' % nested,
        '{"a": ' * depth + "1" + "}" * depth,
        nested,
        '{"arrival_s": 1, "prompt_tokens": 2, "output_tokens": 1, "priority": %s}' % nested,
    ]))
    lines = [valid] * draw(st.integers(0, 3)) + [line] + [valid] * draw(st.integers(0, 3))
    return "\n".join(lines) + draw(st.sampled_from(["", "\n"]))


@fuzz_settings(60)
@given(text=hostile_lines())
@example(text='{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1, "prefix_group": ' + "[" * 5000 + "]" * 5000
         + "}")
def test_nested_values_in_a_serve_trace_read_or_give_a_one_line_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("s") / "t.jsonl"
    path.write_text(text)
    try:
        requests = read_trace(path)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith(str(path)) and "\n" not in message and len(message) < 1000
    else:
        assert requests and all(r.prompt_tokens >= 1 for r in requests)


# ------------------------------------------------------------------------------------------------ micro
def test_micro_refuses_more_npus_than_the_limit_before_writing(tmp_path):
    started = time.perf_counter()
    done = astra("workload", "micro", "--npus", "10000000", "--collective", "all_reduce", "--size", "1KiB",
                 "-o", str(tmp_path / "ar"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"--npus 10,000,000 is more than the {MAX_MICRO_NPUS:,} NPUs" in done.stderr
    assert "ASTRA_MAX_MICRO_NPUS raises the limit" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == [] and time.perf_counter() - started < 60
    lowered = astra("workload", "micro", "--npus", "8", "--collective", "all_reduce", "--size", "1KiB",
                    "-o", str(tmp_path / "ar"), env={"ASTRA_MAX_MICRO_NPUS": "4"})
    assert lowered.returncode == 2 and "more than the 4 NPUs" in lowered.stderr


def test_micro_bound_in_the_python_api(tmp_path, monkeypatch):
    monkeypatch.setattr(micro, "MAX_MICRO_NPUS", 3)
    with pytest.raises(ConfigError, match="ASTRA_MAX_MICRO_NPUS"):
        micro.generate_micro(tmp_path / "x", npus=4, compute=1)
    assert len(micro.generate_micro(tmp_path / "x", npus=3, compute=1)["paths"]) == 3


# ------------------------------------------------------------------------------------------------ sweep
def test_a_sweep_of_a_million_points_is_refused_before_any_is_made():
    started = time.perf_counter()
    axes = {"grid": {"a": list(range(1000)), "b": list(range(1000))}}
    with pytest.raises(ConfigError, match=rf"spec.yaml: axes make 1,000,000 points or more, over the "
                                          rf"{MAX_SWEEP_POINTS:,} one sweep runs \(ASTRA_MAX_SWEEP_POINTS"):
        sweep_spec._expand_axes(axes, "spec.yaml")
    huge_space = {"random": {"n": 3, "seed": 1, "space": {f"x{i}": list(range(60)) for i in range(10)}}}
    names, combos = sweep_spec._expand_axes(huge_space, "spec.yaml")  # 6 x 10^17 combinations: sampled, not listed
    assert len(combos) == 3 and len(names) == 10
    huge_space["random"]["space"]["x10"] = list(range(100))
    with pytest.raises(ConfigError, match=r"spec.yaml: axes.random.space has 6.05e\+19 combinations"):
        sweep_spec._expand_axes(huge_space, "spec.yaml")
    assert time.perf_counter() - started < 5


def test_the_sweep_bound_counts_every_block(monkeypatch):
    monkeypatch.setattr(sweep_spec, "MAX_SWEEP_POINTS", 20)
    axes = {"grid": {"a": [1, 2, 3, 4, 5]}, "zip": {"b": [1, 2, 3], "c": [4, 5, 6]}}
    assert len(sweep_spec._expand_axes({"grid": axes["grid"]}, "s")[1]) == 5
    with pytest.raises(ConfigError, match="axes make 15 points"):
        monkeypatch.setattr(sweep_spec, "MAX_SWEEP_POINTS", 14)
        sweep_spec._expand_axes(axes, "s")


def test_the_sweep_cli_refuses_a_million_points(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("workload:\n  llm: {preset: gpt3-13b, layers: 4, tp: 2, pp: 2, dp: 2, micro-batches: 2}\n"
                    "run: {platform: hgx-h100}\naxes:\n  grid:\n"
                    f"    workload.llm.micro-batches: {list(range(1, 1001))}\n"
                    f"    workload.llm.layers: {list(range(1, 1001))}\n")
    done = astra("sweep", str(spec), "-o", str(tmp_path / "r.csv"), "--jobs", "1", "--no-progress")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "axes make 1,000,000 points or more" in done.stderr and "ASTRA_MAX_SWEEP_POINTS" in done.stderr
    assert not (tmp_path / "r.csv").exists()
