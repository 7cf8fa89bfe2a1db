"""The ``astra`` command line (core/astra_sim/cli.py): flags, report JSON, log lines, plugin selection."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from astra_sim import __version__
from astra_sim.chakra import make_metadata, make_node, types as T, write_et
from astra_sim.cli import main
from astra_sim.report import read_report
from astra_sim_testing import system_config, reduction_ns

GIB = 1 << 30
MIB = 1 << 20
ASTRA = Path(sys.executable).parent / "astra"
BW, LAT = 100.0, 200.0

SYSTEM = system_config()


def t_msg(m):
    return int(LAT + m / (BW * GIB / 1e9))


def r_red(m):
    return reduction_ns(m)


def ar_ns(e=10, handshake=0):
    """Ring-4 all-reduce of 1 MiB, p = 4."""
    m = MIB // 16
    return 4 * (6 * (t_msg(m) + handshake) + 7 * e + 3 * r_red(m))


def rs_chunk_ns():
    m = MIB // 16
    return 3 * t_msg(m) + 4 * 10 + 3 * r_red(m)


@pytest.fixture(autouse=True)
def _no_plugin_env(monkeypatch):
    monkeypatch.delenv("ASTRA_PLUGINS", raising=False)


@pytest.fixture
def files(tmp_path):
    system = tmp_path / "sys.json"
    system.write_text(json.dumps(SYSTEM))
    net = tmp_path / "net.yml"
    net.write_text(f"topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ {BW} ]\nlatency: [ {LAT} ]\n")

    def trace(name, nodes_for_rank):
        prefix = tmp_path / name
        for rank in range(4):
            write_et(f"{prefix}.{rank}.et", make_metadata(), nodes_for_rank(rank))
        return str(prefix)

    ar = trace("ar", lambda r: [make_node(1, "ar", T.COMM_COLL_NODE,
                                          attrs={"comm_type": T.ALL_REDUCE, "comm_size": MIB})])
    rs = trace("rs", lambda r: [make_node(1, "rs", T.COMM_COLL_NODE,
                                          attrs={"comm_type": T.REDUCE_SCATTER, "comm_size": MIB})])
    return {"dir": tmp_path, "system": str(system), "net": str(net), "ar": ar, "rs": rs, "trace": trace}


def unprefixed(out):
    """stdout lines without spdlog's three bracketed prefixes (as ASTRA-sim's regression test strips them)."""
    return [re.sub(r"^(\[[^]]+\] ){3}", "", line) for line in out.splitlines()]


def run_cli(capsys, *args):
    capsys.readouterr()
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def base_args(files, workload=None, eq=True):
    workload = workload or files["ar"]
    if eq:
        return ["run", f"--workload-configuration={workload}", f"--system-configuration={files['system']}",
                f"--network-configuration={files['net']}"]
    return ["run", "--workload-configuration", workload, "--system-configuration", files["system"],
            "--network-configuration", files["net"]]


def report_of(capsys, files, *args, workload=None, eq=True, name="report.json", raw=False):
    """The run's report file in the per-rank layout (``read_report``), or as written with ``raw``."""
    path = files["dir"] / name
    rc, out, err = run_cli(capsys, *base_args(files, workload, eq), "-q", "--report-json", str(path), *args)
    assert rc == 0, err
    return json.loads(path.read_text()) if raw else read_report(path)


# ---------------------------------------------------------------- flag forms


def test_equals_and_space_forms_give_the_same_run(capsys, files):
    a = report_of(capsys, files, eq=True, name="a.json")
    b = report_of(capsys, files, eq=False, name="b.json")
    assert a["ranks"] == b["ranks"]
    assert [r["finish_ns"] for r in a["ranks"]] == [ar_ns()] * 4


@pytest.mark.parametrize("form", [["--injection-scale=2"], ["--injection-scale", "2"]], ids=["eq", "space"])
def test_injection_scale_forms(capsys, files, form):
    report = report_of(capsys, files, *form)
    assert report["settings"]["injection_scale"] == 2.0
    assert [r["finish_ns"] for r in report["ranks"]] == [ar_ns(e=20)] * 4


@pytest.mark.parametrize("form", [["--num-queues-per-dim=2"], ["--num-queues-per-dim", "2"]], ids=["eq", "space"])
def test_num_queues_forms(capsys, files, form):
    report = report_of(capsys, files, *form, workload=files["rs"])
    assert report["settings"]["num_queues_per_dim"] == 2
    assert [r["finish_ns"] for r in report["ranks"]] == [2 * rs_chunk_ns()] * 4


@pytest.mark.parametrize("form,expected", [
    ([], False),
    (["--rendezvous-protocol"], True),
    (["--rendezvous-protocol=true"], True),
    (["--rendezvous-protocol", "true"], True),
    (["--rendezvous-protocol=false"], False),
    (["--rendezvous-protocol", "false"], False),
    (["--rendezvous-protocol=1"], True),
], ids=["absent", "bare", "eq-true", "space-true", "eq-false", "space-false", "eq-1"])
def test_rendezvous_forms(capsys, files, form, expected):
    report = report_of(capsys, files, *form)
    assert report["settings"]["rendezvous_protocol"] is expected
    handshake = t_msg(8192) if expected else 0
    assert [r["finish_ns"] for r in report["ranks"]] == [ar_ns(handshake=handshake)] * 4


def test_bad_flag_values_are_usage_errors(capsys, files):
    for bad in (["--num-queues-per-dim", "0"], ["--injection-scale=-1"], ["--rendezvous-protocol=maybe"],
                ["--num-queues-per-dim=two"]):
        with pytest.raises(SystemExit) as info:
            main(base_args(files) + ["-q", *bad])
        assert info.value.code == 2
        assert "error" in capsys.readouterr().err


def test_required_flags(capsys, files):
    # Required unless a platform provides them (--platform); none is given here.
    rc = main(["-p", "network_analytical", "run", "--workload-configuration", files["ar"]])
    assert rc == 2
    assert "--system-configuration is required" in capsys.readouterr().err


def test_reference_ignored_flags_are_accepted(capsys, files):
    rc, out, err = run_cli(
        capsys, *base_args(files), "-q", "--logging-folder", str(files["dir"] / "logs"), "--comm-scale", "2",
        "--compute-scale=3", "--logging-configuration", "empty", "--astra-sim-log",
    )
    assert rc == 0, err
    assert f"sys[0] finished, {ar_ns()} cycles" in out
    assert not (files["dir"] / "logs").exists()


def test_remote_memory_and_comm_group_flags(capsys, files):
    mem = files["dir"] / "mem.json"
    mem.write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}))
    groups = files["dir"] / "groups.json"
    groups.write_text(json.dumps({"1": [0, 1]}))
    report = report_of(capsys, files, f"--remote-memory-configuration={mem}",
                       "--comm-group-configuration", str(groups))
    assert report["settings"]["remote_memory_configuration"] == str(mem)
    assert report["settings"]["comm_group_configuration"] == str(groups)


# ---------------------------------------------------------------- outputs


def check_rank_record(r):
    assert set(r) >= {"finish_ns", "compute_ns", "exposed_comm_ns", "cpu_ns", "comm_ns", "nodes"}
    assert r["finish_ns"] == ar_ns()
    assert r["compute_ns"] == 0
    assert r["exposed_comm_ns"] == ar_ns()
    assert r["comm_ns"] == ar_ns()
    assert r["nodes"] == 1


def test_report_json_contents(capsys, files):
    # the default file is compact: the four identical ranks are one rank_classes entry
    report = report_of(capsys, files, raw=True)
    assert report["layout"] == "rank-classes" and "ranks" not in report
    [only] = report["rank_classes"]
    assert only["ranks"] == "0-3" and only["count"] == 4 and "rank" not in only
    check_rank_record(only)
    assert "groups" not in json.dumps(only.get("breakdown", {}))
    # --per-rank: one entry per rank, the communicators' group ids kept; read_report gives the same ranks from both
    full = report_of(capsys, files, "--per-rank", name="full.json", raw=True)
    assert full["layout"] == "per-rank" and "rank_classes" not in full
    assert [r["rank"] for r in full["ranks"]] == [0, 1, 2, 3]
    for r in full["ranks"]:
        check_rank_record(r)
    assert all(r["breakdown"]["communicators"] and all("groups" in c for c in r["breakdown"]["communicators"])
               for r in full["ranks"])
    no_groups = [{**r, "breakdown": {**r["breakdown"], "communicators": [
        {k: v for k, v in c.items() if k != "groups"} for c in r["breakdown"]["communicators"]]}} for r in full["ranks"]]
    assert read_report(report)["ranks"] == no_groups
    assert full["summary"] == report["summary"]
    assert report["summary"] == {"npus": 4, "max_finish_ns": ar_ns(), "min_finish_ns": ar_ns(),
                                 "max_exposed_comm_ns": ar_ns()}
    settings = report["settings"]
    assert settings["workload"] == files["ar"]
    assert settings["system_configuration"] == files["system"]
    assert settings["network_configuration"] == files["net"]
    assert settings["network_backend"] == "analytical"
    assert settings["memory_backend"] == "analytical"
    assert settings["compute_model"] == "replay"
    assert settings["workload_format"] == "chakra"
    assert settings["num_queues_per_dim"] == 1
    assert settings["injection_scale"] == 1.0
    assert settings["rendezvous_protocol"] is False
    assert settings["npus_per_dim"] == [4]
    assert settings["astra_sim_version"] == __version__
    assert settings["network"]["topology"] == ["Ring"]
    assert settings["network"]["bandwidth_gib_per_s"] == [BW]
    assert {"builtin", "network_analytical", "memory_analytical"} <= set(settings["plugins"])
    assert report["stats"]["messages"] > 0


def test_report_json_unwritable_path(capsys, files):
    rc, out, err = run_cli(capsys, *base_args(files), "-q", "--report-json",
                           str(files["dir"] / "net.yml" / "r.json"))  # a file where a folder should be
    assert rc == 2
    assert "cannot create the output folder" in err and "Traceback" not in err


def test_report_json_makes_its_folder_and_replaces_atomically(capsys, files):
    path = files["dir"] / "new" / "r.json"
    rc, out, err = run_cli(capsys, *base_args(files), "-q", "--report-json", str(path))
    assert rc == 0, err
    assert json.loads(path.read_text())["summary"]["npus"] == 4
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temporary file left behind


def test_help_texts_say_what_the_options_do(capsys):
    def help_of(*args):  # argparse wraps lines anywhere, hyphens included: compare without whitespace
        with pytest.raises(SystemExit):
            main([*args, "--help"])
        return "".join(capsys.readouterr().out.split())

    def squeeze(text):
        return "".join(text.split())

    text = help_of("workload", "llm")
    assert squeeze("one training step of a dense transformer") not in text
    assert squeeze("dense or mixture-of-experts") in text and "inference" in text
    assert squeeze("the matching Kineto device trace; with --ranks N a path containing {rank}") in \
        help_of("workload", "convert-pytorch")
    assert squeeze("compute is timed on its GPU by the gpu compute model and collectives by NCCL's model, unless "
                   "--compute-model, --gpu or --platform-collective say otherwise") in help_of("run")


def test_astra_sim_log_lines_exact_and_in_finish_order(capsys, files):
    # Rank r computes (4 - r) us, then all-reduces: no wait, ranks finish in reverse order.
    prefix = files["trace"]("log", lambda r: [
        make_node(1, "c", T.COMP_NODE, duration_micros=4 - r, attrs={"is_cpu_op": r == 3}),
        make_node(2, "s", T.COMM_SEND_NODE, data_deps=[1],
                  attrs={"comm_dst": (r + 1) % 4, "comm_size": 1024, "comm_tag": 0}),
    ])
    # (the sends are never received: allowed, the lines are the reference's)
    rc, out, err = run_cli(capsys, *base_args(files, prefix), "-q", "--astra-sim-log", "--allow-unmatched")
    assert rc == 0, err
    lines = [line for line in unprefixed(out) if " finished, " in line]
    t = t_msg(1024)
    assert lines == [
        f"sys[3] finished, {1000 + t} cycles, exposed communication {1000 + t} cycles.",  # CPU op: not subtracted
        f"sys[2] finished, {2000 + t} cycles, exposed communication {t} cycles.",
        f"sys[1] finished, {3000 + t} cycles, exposed communication {t} cycles.",
        f"sys[0] finished, {4000 + t} cycles, exposed communication {t} cycles.",
    ]


def test_quiet_prints_nothing_but_the_log(capsys, files):
    rc, out, err = run_cli(capsys, *base_args(files), "-q")
    assert rc == 0
    assert out == "" and err == ""
    rc, out, err = run_cli(capsys, *base_args(files))
    assert rc == 0
    from astra_sim.humanize import format_ns

    assert "finish" in out and format_ns(ar_ns()) in out  # human units on the terminal
    assert "0-3 x4" in out  # ranks with identical numbers share a row


def test_no_command_prints_help(capsys):
    rc, out, err = run_cli(capsys)
    assert rc == 2
    assert "run" in out and "plugins" in out


def test_version(capsys):
    assert main(["--version"]) == 0
    assert __version__ in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:  # with other words, argparse answers it
        main(["-p", "network_analytical", "--version"])
    assert info.value.code == 0
    assert __version__ in capsys.readouterr().out


# ---------------------------------------------------------------- plugins


def _plugins_json(capsys, *args):
    rc, out, err = run_cli(capsys, "plugins", "--json", *args)
    assert rc == 0, err
    return {row["name"]: row for row in json.loads(out)}


def test_plugins_json_lists_installed_plugins(capsys):
    rows = _plugins_json(capsys)
    assert {"builtin", "network_analytical", "memory_analytical"} <= set(rows)
    assert "network_backend:analytical" in rows["network_analytical"]["provides"]
    assert "memory_backend:analytical" in rows["memory_analytical"]["provides"]
    builtin = rows["builtin"]["provides"]
    for item in ("workload_format:chakra", "compute_model:replay", "compute_model:roofline", "memory_backend:none"):
        assert item in builtin
    native = rows["collectives_native"]["provides"]
    for item in ("collective_algorithm:ring", "collective_algorithm:direct", "collective_algorithm:halvingDoubling",
                 "collective_algorithm:doubleBinaryTree"):
        assert item in native and item not in builtin
    assert rows["collectives_native"]["distribution"] == "astra-collectives-native"
    for name in ("builtin", "collectives_native", "network_analytical", "memory_analytical"):
        assert rows[name]["status"] == "loaded"
    assert rows["network_analytical"]["distribution"] == "astra-network-analytical"


def test_plugins_table_output(capsys):
    rc, out, err = run_cli(capsys, "plugins")
    assert rc == 0
    # rich wraps long cells to the terminal width; the names appear, possibly split.
    assert "builtin" in out and "network_analyt" in out and "memory_analyti" in out


@pytest.mark.parametrize("where", ["before", "after", "attached"])
def test_select_only_network_plugin(capsys, files, where):
    path = files["dir"] / "r.json"
    args = base_args(files) + ["-q", "--report-json", str(path)]
    if where == "before":
        argv = ["-p", "network_analytical", *args]
    elif where == "after":
        argv = [*args, "-p", "network_analytical"]
    else:
        argv = [*args, "-pnetwork_analytical"]
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 0, err
    settings = json.loads(path.read_text())["settings"]
    assert settings["memory_backend"] == "none"
    assert "memory_analytical" not in settings["plugins"]
    assert "network_analytical" in settings["plugins"]
    rows = _plugins_json(capsys, "-p", "network_analytical")
    assert rows["network_analytical"]["status"] == "loaded"
    assert rows["memory_analytical"]["status"] == "not selected"
    assert rows["memory_analytical"]["provides"] == []


def test_block_network_plugin_makes_run_fail_clearly(capsys, files):
    rc, out, err = run_cli(capsys, *base_args(files), "-q", "-p", "no:network_analytical")
    assert rc == 2
    assert "Traceback" not in err
    assert "network backend" in err and "'analytical'" in err
    rows = _plugins_json(capsys, "-p", "no:network_analytical")
    assert rows["network_analytical"]["status"] == "blocked"
    assert rows["memory_analytical"]["status"] == "loaded"


def test_plugin_option_comma_list(capsys, files):
    rc, out, err = run_cli(capsys, *base_args(files), "-q", "--plugin=network_analytical,no:memory_analytical")
    assert rc == 0, err


def test_unknown_plugin_name(capsys, files):
    rc, out, err = run_cli(capsys, *base_args(files), "-q", "-p", "nonexistent_plugin")
    assert rc == 2
    assert "unknown plugin 'nonexistent_plugin'" in err
    assert "network_analytical" in err  # lists what is installed


def test_builtin_cannot_be_blocked(capsys, files):
    rc, out, err = run_cli(capsys, *base_args(files), "-q", "-p", "no:builtin")
    assert rc == 2
    assert "builtin" in err


def test_astra_plugins_env_var(capsys, files, monkeypatch):
    monkeypatch.setenv("ASTRA_PLUGINS", "network_analytical")
    path = files["dir"] / "env.json"
    rc, out, err = run_cli(capsys, *base_args(files), "-q", "--report-json", str(path))
    assert rc == 0, err
    assert json.loads(path.read_text())["settings"]["memory_backend"] == "none"


def test_unknown_network_backend_name(capsys, files):
    rc, out, err = run_cli(capsys, *base_args(files), "-q", "--network-backend", "garnet")
    assert rc == 2
    assert "no network backend named 'garnet'" in err and "analytical" in err


# ---------------------------------------------------------------- the installed script


def test_subprocess_run_and_plugins(files):
    proc = subprocess.run(
        [str(ASTRA), *base_args(files, eq=False), "-q", "--astra-sim-log"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in unprefixed(proc.stdout) if " finished, " in line]
    assert len(lines) == 4
    assert all(f"finished, {ar_ns()} cycles, exposed communication {ar_ns()} cycles." in line for line in lines)
    proc = subprocess.run([str(ASTRA), "plugins", "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    names = {row["name"] for row in json.loads(proc.stdout)}
    assert {"builtin", "network_analytical", "memory_analytical"} <= names
    proc = subprocess.run([str(ASTRA), *base_args(files), "-q", "-p", "no:network_analytical"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "astra: error:" in proc.stderr


# ---------------------------------------------------------------- a reader that goes away


@pytest.mark.parametrize("command", [["plugins"], ["plugins", "--json"], ["run", "--astra-sim-log"], ["run"]],
                         ids=["plugins", "plugins-json", "run-log", "run-table"])
def test_closed_stdout_exits_quietly(files, command):
    """``astra ... | head -1`` when head has gone: no traceback, no 'Exception ignored', exit 141."""
    import os

    args = [str(ASTRA), *command] if command[0] == "plugins" else [
        str(ASTRA), *base_args(files, eq=False), *command[1:]]
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to stdout now fails with EPIPE
    try:
        proc = subprocess.run(args, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert "BrokenPipe" not in proc.stderr


def test_broken_pipe_in_process(capsys, files, monkeypatch):
    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self):
            raise ValueError("no file")

    monkeypatch.setattr(sys, "stdout", Closed())
    assert main([*base_args(files), "--astra-sim-log", "-q"]) == 141


def test_version_answers_before_any_plugin_loads(monkeypatch, capsys):
    """`astra --version` probes an install: it must not pay for loading every plugin (issue: under 0.1 s)."""
    import astra_sim.plugins as plugins_module
    from astra_sim.cli import main

    def refuse(*_args, **_kwargs):
        raise AssertionError("plugins were loaded for --version")

    monkeypatch.setattr(plugins_module, "make_plugin_manager", refuse)
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("astra-sim-py ")


def test_astra_run_builds_no_plugin_command_parsers():
    """``astra run`` needs none of the plugins' commands; building their parsers imports their modules."""
    from astra_sim.cli import _command_word, build_parser
    from astra_sim.cliutil import subcommand_action
    from astra_sim.plugins import make_plugin_manager

    assert _command_word(["-p", "gpu_model", "run", "--platform", "hgx-h100"]) == "run"
    assert _command_word(["--plugin", "run", "serve"]) == "serve"
    assert _command_word(["-q"]) is None
    pm = make_plugin_manager()
    full = subcommand_action(build_parser(pm)).choices
    slim = subcommand_action(build_parser(pm, plugin_commands=False)).choices
    assert "serve" in full and "serve" not in slim
    assert {"run", "plugins", "completion"} <= set(slim)
