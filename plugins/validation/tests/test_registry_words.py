"""A case's stored words (``run``, ``workload``, ``serve``) are parsed when the registry loads, by the parsers its run
uses: a typo or a refused value names the case, its file and the flag before any case is simulated."""

from __future__ import annotations

import pytest
import yaml

from astra_sim.errors import ConfigError
from astra_validation.registry import load_cases


def _registry(tmp_path, cases):
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"cases": cases}))
    return path


def _collective(**over):
    case = dict(name="bad-case", kind="collective", source="s", hardware="h", platform="hgx-h100", nodes=2,
                collective="all_reduce", size_bytes=1 << 26, measured={"bus_bandwidth_gbps": 400})
    case.update(over)
    return case


@pytest.mark.parametrize("over, flag", [
    ({"run": ["--nccl-version", "9.9.9"]}, "--nccl-version"),
    ({"run": ["--no-such-flag", "1"]}, "--no-such-flag"),
    ({"kind": "memory", "workload": ["--layers", "2", "--tp", "two"], "measured": {"peak_bytes": 10**9},
      "measured_what": "nvidia-smi"}, "--tp"),
    ({"kind": "serving", "serve": ["--model", "llama3-8b", "--qps", "fast"], "measured": {"tpot_p50_ms": 20.0}},
     "--qps"),
    ({"kind": "serving", "serve": ["--model", "llama3-8b"], "run": ["--nccl-version", "2.26.2"],
      "measured": {"tpot_p50_ms": 20.0}}, "'run' is for"),
])
def test_a_bad_word_fails_the_load_naming_the_case_file_and_flag(tmp_path, over, flag):
    path = _registry(tmp_path, [_collective(**over)])
    with pytest.raises(ConfigError) as info:
        load_cases(path)
    message = str(info.value)
    assert "'bad-case'" in message and str(path) in message and flag in message


def test_good_words_load_and_a_known_release_is_accepted(tmp_path):
    (case,) = load_cases(_registry(tmp_path, [_collective(run=["--nccl-version", "2.26.2"])]))
    assert case.run == ("--nccl-version", "2.26.2")
    # a reader that wants only names or metrics skips the parse
    (case,) = load_cases(_registry(tmp_path, [_collective(run=["--no-such-flag"])]), check=False)
    assert case.run == ("--no-such-flag",)
