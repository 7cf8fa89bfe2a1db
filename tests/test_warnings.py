"""Runs that match the reference but would surprise: each warns once on stderr and in the report;
numbers no hardware can have are errors naming the key and the range (core/astra_sim/limits.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from astra_sim import simulate
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_sim.config import parse_system_config
from astra_sim.errors import ConfigError
from astra_sim.limits import LIMITS, check_number
from astra_sim.report import read_report
from astra_sim_testing import system_config

MIB = 1 << 20


@pytest.fixture
def env(tmp_path):
    class Env:
        dir = tmp_path

        def trace(self, npus, name="ar"):
            prefix = tmp_path / name
            for rank in range(npus):
                write_et(f"{prefix}.{rank}.et", make_metadata(), [make_node(
                    1, "ar", T.COMM_COLL_NODE, attrs={"comm_type": T.ALL_REDUCE, "comm_size": MIB})])
            return str(prefix)

        def network(self, dims, extra=""):
            path = tmp_path / f"net{'x'.join(map(str, dims))}.yml"
            path.write_text(f"topology: [ {', '.join(['Ring'] * len(dims))} ]\n"
                            f"npus_count: [ {', '.join(map(str, dims))} ]\n"
                            f"bandwidth: [ {', '.join(['50'] * len(dims))} ]\n"
                            f"latency: [ {', '.join(['500'] * len(dims))} ]\n{extra}")
            return str(path)

        def system(self, dims=1, name="sys.json", **overrides):
            path = tmp_path / name
            data = system_config(dims)
            data.update(overrides)
            path.write_text(json.dumps(data))
            return str(path)

        def cli(self, workload, system, network, *extra):
            return main(["run", "--workload-configuration", workload, "--system-configuration", system,
                         "--network-configuration", network, *extra])

    return Env()


def warnings_of(capsys, rc):
    out, err = capsys.readouterr()
    assert rc == 0, err
    return [line for line in err.splitlines() if line.startswith("astra: warning: ")], out


# ---------------------------------------------------------------- the three silent cases


def test_more_traces_than_npus(capsys, env):
    rc = env.cli(env.trace(8), env.system(), env.network([4]), "--report-json", str(env.dir / "r.json"))
    warned, _ = warnings_of(capsys, rc)
    assert len(warned) == 1
    assert "has traces for 8 ranks" in warned[0] and "has 4 NPUs: ranks 4..7 are not simulated" in warned[0]
    assert "give the network 8 NPUs" in warned[0]
    report = read_report(env.dir / "r.json")
    assert report["warnings"] == [warned[0][len("astra: warning: "):]]
    assert len(report["ranks"]) == 4


def test_same_traces_as_npus_is_quiet(capsys, env):
    warned, _ = warnings_of(capsys, env.cli(env.trace(4), env.system(), env.network([4])))
    assert warned == []


def test_short_implementation_list_on_a_3d_network(capsys, env):
    """The issue's case: a one-entry all-reduce list on 4x4x4 runs the 64-rank all-reduce in
    dimension 0 only. One warning for the whole run, however many ranks build that topology."""
    prefix, net = env.trace(64), env.network([4, 4, 4])
    short = simulate(prefix, env.system(1, "one.json"), net)
    full = simulate(prefix, env.system(3, "three.json"), net)
    assert short.max_finish_ns < full.max_finish_ns  # the surprise: less work, silently
    assert len(short.warnings) == 1 and full.warnings == []
    warned, _ = warnings_of(capsys, env.cli(prefix, env.system(1, "one.json"), net))
    assert len(warned) == 1
    assert "'all-reduce-implementation' lists 1 algorithm(s) for a 3-dimensional network (4 x 4 x 4 NPUs)" in warned[0]
    assert "runs in dimension 0 only, among 4 of the 64 NPUs" in warned[0]
    assert "['ring', 'ring', 'ring']" in warned[0]


def test_one_algorithm_spanning_every_npu_is_quiet(env):
    prefix, net = env.trace(16, "ar16"), env.network([4, 4])
    system = env.system(1, "onering.json", **{"all-reduce-implementation": ["oneRing"]})
    assert simulate(prefix, system, net).warnings == []
    two = env.system(2, "twodims.json", **{"all-reduce-implementation": ["ring", "direct"]})
    assert [w for w in simulate(prefix, two, net).warnings if "dimension" in w] == []


def test_ignored_and_misspelt_keys(capsys, env):
    system = env.system(**{"boost-mode": 0, "active-chunks-per-dimensions": 2})
    warned, out = warnings_of(capsys, env.cli(env.trace(4), system, env.network([4], "latencies: [ 1 ]\n")))
    assert any("'boost-mode' has no effect: the reference ignores it too" in w for w in warned)
    assert any("'active-chunks-per-dimensions' is not a system configuration key and is ignored; did you mean "
               "'active-chunks-per-dimension'?" in w for w in warned)
    assert any("'latencies' is not a network configuration key and is ignored; did you mean 'latency'?" in w
               for w in warned)
    assert "warning" not in out  # stdout keeps the table only


def test_scale_flags_without_effect(capsys, env):
    warned, _ = warnings_of(capsys, env.cli(env.trace(4), env.system(), env.network([4]), "--comm-scale", "2",
                                            "--compute-scale=1"))
    assert len(warned) == 1 and warned[0].startswith("astra: warning: --comm-scale=2 has no effect")


def test_quiet_silences_warnings_but_the_report_keeps_them(capsys, env):
    path = env.dir / "r.json"
    rc = env.cli(env.trace(8), env.system(**{"boost-mode": 1}), env.network([4]), "-q", "--report-json", str(path))
    out, err = capsys.readouterr()
    assert rc == 0 and out == "" and err == ""
    assert len(json.loads(path.read_text())["warnings"]) == 2


def test_warnings_print_before_an_error(capsys, env):
    """A warning raised before a failure still reaches the terminal (it may explain the failure)."""
    rc = env.cli(env.trace(4), env.system(**{"boost-mode": 1}), env.network([8]))
    err = capsys.readouterr().err.splitlines()
    assert rc == 2
    assert "'boost-mode' has no effect" in err[0] and err[0].startswith("astra: warning: ")
    assert err[-1].startswith("astra: error: ") and "does not exist" in err[-1]


# ---------------------------------------------------------------- ranges


@pytest.mark.parametrize("key", ["endpoint-delay", "active-chunks-per-dimension", "preferred-dataset-splits",
                                 "local-mem-bw", "peak-perf", "local-reduction-delay", "L", "o", "g", "G"])
@settings(max_examples=40, deadline=None)
@given(value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10 ** 20, 10 ** 20)))
def test_system_keys_accept_exactly_their_range(tmp_path_factory, key, value):
    limit = LIMITS[key]
    data = {key: value}
    inside = (isinstance(value, int) or value == value and abs(value) != float("inf")) and limit.admits(value)
    if inside:
        cfg = parse_system_config("sys.json", data=data)
        assert cfg is not None
    else:
        with pytest.raises(ConfigError) as info:
            parse_system_config("sys.json", data=data)
        message = str(info.value)
        assert message.startswith(f"sys.json: key {key!r} must be ") and limit.describe() in message


@settings(max_examples=200, deadline=None)
@given(key=st.sampled_from(sorted(LIMITS)),
       value=st.one_of(st.floats(), st.integers(-10 ** 12, 10 ** 12), st.booleans(), st.text(max_size=3), st.none()))
def test_check_number_property(key, value):
    limit = LIMITS[key]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    finite = number and value == value and abs(value) != float("inf")
    whole = finite and (not limit.integer or float(value).is_integer())
    if whole and limit.admits(value):
        assert check_number("f", key, value) == value
    else:
        with pytest.raises(ConfigError, match=rf"^f: key '{key}' must be (an integer|a number) "):
            check_number("f", key, value)


@pytest.mark.parametrize("line,key", [
    ("bandwidth: [ 1e308 ]", "bandwidth[0]"), ("bandwidth: [ -50 ]", "bandwidth[0]"),
    ("latency: [ -500 ]", "latency[0]"), ("latency: [ 1.0e+12 ]", "latency[0]"),
])
def test_network_values_no_hardware_has(capsys, env, line, key):
    net = env.dir / "bad.yml"
    good = {"bandwidth": "bandwidth: [ 50 ]", "latency": "latency: [ 500 ]"}
    good[key.split("[")[0]] = line
    net.write_text(f"topology: [ Ring ]\nnpus_count: [ 4 ]\n{good['bandwidth']}\n{good['latency']}\n")
    rc = env.cli(env.trace(4), env.system(), str(net))
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert f"bad.yml: key {key!r} must be a number " in err and "<= " in err


def test_memory_values_no_hardware_has(capsys, env):
    mem = env.dir / "mem.json"
    mem.write_text(json.dumps({"memory-type": "PER_NPU_MEMORY_EXPANSION", "remote-mem-latency": 10,
                               "remote-mem-bw": 1e308}))
    rc = env.cli(env.trace(4), env.system(), env.network([4]), "--remote-memory-configuration", str(mem))
    err = capsys.readouterr().err
    assert rc == 2 and "mem.json: key 'remote-mem-bw' must be a number >= 1 and <= 1,000,000 (bytes/ns" in err
