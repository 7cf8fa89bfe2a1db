"""RunSpec, the reader of every door's run options (astra run's flags, a sweep's run: mapping, simulate()'s keywords):
the same spec from every form, and nothing but a spec or a one-line ConfigError naming the key from any input."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import example, given, strategies as st

from astra_sim.errors import ConfigError
from astra_sim.spec import RunSpec, run_parser
from astra_sim_testing.fuzzing import fuzz_settings


def test_the_command_line_a_mapping_and_argv_give_one_spec():
    argv = ["--workload-configuration", "w", "--platform", "hgx-h100", "--nodes", "2", "--gpu", "B200",
            "--no-fold", "--host-launch-us", "0", "--rendezvous-protocol", "true"]
    from_cli = RunSpec.from_cli_args(run_parser().parse_args(argv))
    from_argv = RunSpec.from_argv(argv)
    from_mapping = RunSpec.from_mapping({"workload": "w", "platform": "hgx-h100", "nodes": 2, "gpu": "B200",
                                         "fold": False, "host-launch-us": 0, "rendezvous_protocol": True})
    assert from_cli == from_argv == from_mapping
    assert from_cli.fold is False and from_cli.rendezvous is True and from_cli.options["gpu"] == "B200"
    # every plugin option is there with the command line's default
    assert from_cli.options["gpu_default_dtype"] == "bf16"
    assert RunSpec.from_mapping(from_cli.to_mapping()) == from_cli


def test_replace_keeps_the_spec_and_changes_options_by_name():
    spec = RunSpec.from_mapping({"workload": "w", "platform": "hgx-h100"})
    changed = spec.replace(nodes=4, gpu="H200-SXM")
    assert changed.nodes == 4 and changed.options["gpu"] == "H200-SXM" and spec.options["gpu"] != "H200-SXM"


@pytest.mark.parametrize("mapping, message", [
    ({"workload": "w", "platfrom": "hgx-h100"}, r"unknown astra run option 'platfrom' \(did you mean 'platform'\?\)"),
    ({"workload": "w", "nodes": 0}, "nodes"),
    ({"workload": "w", "nodes": "two"}, "nodes"),
    ({"workload": "w", "no_fold": "yes"}, "not true or false"),
    ({"workload": "w", "gpu-default-dtype": "fp64"}, "not one of"),
    ({"platform": "hgx-h100"}, "workload-configuration"),
    ({"workload": "w", "num-queues-per-dim": [1, 2]}, "not a valid --num-queues-per-dim value"),
])
def test_a_bad_option_is_one_line_naming_it(mapping, message):
    with pytest.raises(ConfigError, match=message) as info:
        RunSpec.from_mapping(mapping, where="spec.yaml: run")
    assert "\n" not in str(info.value)


_KEYS = st.sampled_from(["workload", "platform", "nodes", "gpu", "no-fold", "fold", "host_launch_us", "network-backend",
                         "num-queues-per-dim", "injection-scale", "rendezvous-protocol", "gpu-tf32", "bogus",
                         "platform-collective", "compute_model", ""]) | st.text(max_size=12)
_VALUES = (st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(max_size=12) | st.lists(st.integers(), max_size=3) | st.dictionaries(st.text(max_size=3),
                                                                                       st.integers(), max_size=2))


@fuzz_settings(300)
@given(st.dictionaries(_KEYS, _VALUES, max_size=6))
@example({"workload": "w", "injection-scale": float("nan")})
@example({"workload": "w", "nodes": 10**30})
@example({"workload": "-w"})
def test_any_mapping_is_a_spec_or_a_one_line_config_error(mapping):
    try:
        spec = RunSpec.from_mapping(mapping, where="fuzz")
    except ConfigError as exc:
        assert str(exc).startswith("fuzz") and "\n" not in str(exc)
    else:
        assert isinstance(spec, RunSpec) and isinstance(spec.options, dict)


@fuzz_settings(200)
@given(st.lists(st.text(max_size=14) | st.sampled_from(["--platform", "--nodes", "--workload-configuration", "-q",
                                                         "--gpu", "--no-fold", "--"]), max_size=6))
def test_any_argv_is_a_spec_or_a_one_line_config_error(argv):
    try:
        RunSpec.from_argv(argv, where="fuzz")
    except ConfigError as exc:
        assert str(exc).startswith("fuzz") and "\n" not in str(exc)


def test_the_run_parser_is_astra_runs():
    """RunSpec.add_cli_args is what `astra run` parses (no second copy of its flags)."""
    from astra_sim.cli import build_parser
    from astra_sim.cliutil import option_names
    from astra_sim.plugins import default_plugin_manager

    top = build_parser(default_plugin_manager())
    run = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    output_only = {"output", "report-json", "json", "per-rank", "max-table-ranks", "partial-report", "quiet", "plugin"}
    assert set(option_names(run)) - output_only == set(option_names(run_parser()))
