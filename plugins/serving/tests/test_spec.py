"""ServeSpec and astra_serving.serve(): the same deployment through every door (command line, mapping, Python),
errors that name the key, and no argv or argparse internals between plugins."""

import argparse
import json
import pathlib
import re

import pytest
from hypothesis import given, strategies as st

import astra_serving
from astra_serving.spec import ServeSpec
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim_testing.fuzzing import fuzz_settings

SRC = pathlib.Path(astra_serving.__file__).parent


def cli_spec(*argv):
    parser = ServeSpec.add_cli_args(argparse.ArgumentParser(add_help=False))
    return ServeSpec.from_cli_args(parser.parse_args(list(argv)))


def test_from_mapping_equals_from_cli_args():
    argv = ["--model", "llama3-8b", "--platform", "hgx-h100", "--tp", "2", "--qps", "3.5", "--requests", "40",
            "--prompt-len", "uniform:100:800", "--no-chunked-prefill", "--no-step-elementwise", "--router",
            "least-loaded", "--host-us-per-seq", "10", "--run-arg=--gpu-memory-op-rates=off", "--run-arg=--no-fold"]
    mapping = {"model": "llama3-8b", "platform": "hgx-h100", "tp": 2, "qps": 3.5, "requests": 40,
               "prompt-len": "uniform:100:800", "no_chunked_prefill": True, "step-elementwise": False,
               "router": "least-loaded", "host_us_per_seq": 10.0, "run": {"gpu-memory-op-rates": "off", "fold": False}}
    a, b = cli_spec(*argv), ServeSpec.from_mapping(mapping)
    assert a.run == {"gpu_memory_op_rates": "off", "no_fold": True}
    assert b.run == {"gpu_memory_op_rates": "off", "fold": False}
    assert a.replace(run={}) == b.replace(run={})
    assert ServeSpec.from_mapping({**mapping, "run": {}}, flags=["--run-arg=--gpu-memory-op-rates=off",
                                                                 "--run-arg=--no-fold"]) == a
    assert a.qps == 3.5 and a.tp == 2 and a.no_chunked_prefill and not a.step_elementwise
    assert ServeSpec.from_mapping({"preset": "gpt3-13b", "platform": "dgx-a100"}) == ServeSpec(
        preset="gpt3-13b", platform="dgx-a100")  # the dataclass's defaults are the parser's
    assert a.replace(tp=4).tp == 4 and a.tp == 2


@pytest.mark.parametrize("mapping,words", [
    ({"model": "m", "platform": "p", "max-num-seq": 4}, ["max-num-seq", "did you mean 'max-num-seqs'"]),
    ({"model": "m", "platform": "p", "qps": "fast"}, ["qps", "expected positive numbers"]),
    ({"model": "m", "platform": "p", "qps": "1,2"}, ["one rate per spec"]),
    ({"model": "m", "platform": "p", "router": "random"}, ["router", "round-robin"]),
    ({"model": "m", "platform": "p", "tp": 0}, ["tp", "positive integer"]),
    ({"model": "m", "platform": "p", "exact-shapes": "yes"}, ["exact-shapes", "true or false"]),
    ({"model": "m", "platform": "p", "run": {"host-launch-uss": 0}}, ["run", "host_launch_uss", "did you mean"]),
    ({"model": "m", "platform": "p", "run": [1]}, ["run", "mapping"]),
    ({"model": "m", "platform": "p", "tp": 1, "TP": 2}, []),
    ({"model": "m", "tp": 2, "t-p": 1}, ["t-p"]),
    ({"platform": "p"}, ["--preset", "--model"]),
    ({"model": "m", "platform": "p", "max_num_seqs": 2, "max-num-seqs": 3}, ["the same option"]),
])
def test_bad_options_are_config_errors_naming_the_key(mapping, words):
    with pytest.raises(ConfigError) as caught:
        ServeSpec.from_mapping(mapping, where="spec.yaml: serve")
    message = str(caught.value)
    assert message.startswith("spec.yaml: serve") and "\n" not in message
    for word in words:
        assert word in message


def test_replace_names_an_unknown_field():
    with pytest.raises(ConfigError, match="'qpss'.*did you mean 'qps'"):
        ServeSpec(model="m", platform="p").replace(qpss=3)


_KEYS = ["model", "preset", "platform", "tp", "pp", "qps", "requests", "prompt-len", "router", "max_num_seqs",
         "no-chunked-prefill", "step-elementwise", "run-arg", "run", "bucket-ratio", "host-us-per-seq", "seed",
         "disaggregate", "nic-gbit", "qpss", "", "-q", "help", "report-json"]
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=12), st.lists(st.text(max_size=6), max_size=2),
                    st.dictionaries(st.sampled_from(["host-launch-us", "fold", "nope", "gpu"]),
                                    st.one_of(st.booleans(), st.integers(-2, 5), st.text(max_size=5)), max_size=2))


@fuzz_settings(150)
@given(st.dictionaries(st.one_of(st.sampled_from(_KEYS), st.text(max_size=8)), _VALUES, max_size=6))
def test_random_mappings_raise_only_config_errors(mapping):
    try:
        spec = ServeSpec.from_mapping(mapping)
    except ConfigError:
        return
    assert isinstance(spec, ServeSpec)


def test_serve_api_equals_the_command(tmp_path):
    """astra_serving.serve(spec) gives what astra serve reports for the same deployment, and the mapping form the
    same again."""
    out = tmp_path / "r.json"
    argv = ["--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "4", "--requests", "30", "--output-len",
            "exp:40", "--seed", "3"]
    assert main(["serve", *argv, "--report-json", str(out), "-q"]) == 0
    cli = json.loads(out.read_text())
    report, requests = astra_serving.serve(ServeSpec(model="llama3-8b", platform="hgx-h100", qps=4, requests=30,
                                                     output_len="exp:40", seed=3))
    again, _ = astra_serving.serve({"model": "llama3-8b", "platform": "hgx-h100", "qps": 4, "requests": 30,
                                    "output-len": "exp:40", "seed": 3})
    for r in (cli, report, again):
        r.pop("wall_s")
        r.pop("cpu_s")
        r["step_simulator"].pop("simulation_wall_s")
        r["step_simulator"].pop("shapes_simulated")  # the memo is shared: later runs simulate fewer shapes
        r["step_simulator"].pop("shapes_from_cache")  # and the first may read the persistent cache
    assert json.loads(json.dumps(report)) == cli and again == report
    assert len(requests) == 30 and all(r.finish_ns > r.arrival_ns for r in requests)


def test_serve_checks_a_spec_made_in_code():
    with pytest.raises(ConfigError, match="--model CONFIG.*--preset"):
        astra_serving.serve(ServeSpec(platform="hgx-h100", qps=1))
    with pytest.raises(ConfigError, match="--qps.*--trace"):
        astra_serving.serve(ServeSpec(model="llama3-8b", platform="hgx-h100", qps=1, trace="t.jsonl"))
    with pytest.raises(ConfigError, match="unknown --platform 'hgx-h1000'"):
        astra_serving.serve(ServeSpec(model="llama3-8b", platform="hgx-h1000", qps=1))


def test_no_argv_between_plugins():
    """The plugin reaches the kernel and the generator through their Python APIs: no astra_sim.cli, no argparse
    internals (the kernel's cliutil and the specs' from_mapping are the public way)."""
    banned = re.compile(r"_actions|_SubParsersAction|_option_string_actions|astra_sim\.cli\b(?!util)|"
                        r"from astra_sim import cli\b")
    found = [f"{path.name}:{n}: {line.strip()}" for path in sorted(SRC.glob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if banned.search(line)]
    assert not found, found


def test_resolve_checks_before_anything_runs():
    spec = ServeSpec(model="llama3-8b", platform="hgx-h100", tp=2, qps=1)
    resolved = spec.resolve()
    assert resolved.layout.gpus == 2 and resolved.layout.dp == 4 and resolved.virtual_engines == 1
    assert resolved.capacity.blocks > 0 and resolved.platform.name == "hgx-h100"
    with pytest.raises(ConfigError, match="virtual engines are for --pp > 1"):
        spec.replace(virtual_engines=2).resolve()
    with pytest.raises(ConfigError, match="--nodes 2: a replica of TP 2"):
        spec.replace(nodes=2).resolve()
