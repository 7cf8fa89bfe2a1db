"""The example plugin of docs/plugins/writing-plugins.md really installs and runs.

A throw-away virtual environment gets the example distribution
``examples/plugins/astra-network-constant`` installed the ordinary way
(``pip install``, a real wheel with real entry-point metadata); every check then
runs in a fresh interpreter of that environment, exactly as a user would.

The new environment must see the kernel and its dependencies. ``venv
--system-site-packages`` would expose the *base* interpreter's site-packages,
not the environment that runs these tests (here ``.venv``, itself a venv), so
the environment is created without them and a ``.pth`` file adds the current
environment's site directories (``site.addsitedir``, so the kernel's editable
install and pip/hatchling are visible too).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import site
import subprocess
import venv
from pathlib import Path

import pytest
from astra_sim_testing import system_config

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plugins" / "astra-network-constant"
CLI = ROOT / "core" / "astra_sim" / "cli.py"

# The system configuration (same values as shared/parity/configs/sys_ring_1d.json).
SYSTEM = system_config()

SIZE = 1 << 20  # bytes all-reduced by every rank


def expected_ring_all_reduce_ns():
    """Ring all-reduce, by hand (shared/reference/astra-sim-semantics.md §4.7).

    The example's network.yml: 8 NPUs, latency 1000 ns, 100 bytes/ns, so one
    message of m bytes takes T(m) = 1000 + ceil(m / 100).
    The system config: p = 4 chunks of S = 1 MiB / 4 = 262144 bytes, run one after
    the other; E = endpoint-delay = 10 ns; local-mem-bw 1600 GB/s, so reducing m
    bytes costs R(m) = 3 * trunc(m / 1600).
    Per chunk: T_chunk = 2(n-1) T(S/n) + (2n-1) E + (n-1) R(S/n), total = p T_chunk.
    """
    n, p, e = 8, 4, 10
    m = SIZE // p // n                       # 32768 bytes per message
    t = 1000 + -(-m // 100)                  # 1000 + 328 = 1328 ns
    r = 3 * (m // 1600)                      # 3 * 20 = 60 ns
    per_chunk = 2 * (n - 1) * t + (2 * n - 1) * e + (n - 1) * r
    assert per_chunk == 14 * 1328 + 15 * 10 + 7 * 60 == 19162
    return p * per_chunk                     # 76648 ns


def _clean_env():
    env = dict(os.environ)
    for name in ("ASTRA_PLUGINS", "ASTRA_NETWORK_CONSTANT_SUMMARY", "PYTEST_ADDOPTS", "PIP_TARGET"):
        env.pop(name, None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    env["ASTRA_CACHE"] = "0"  # the throw-away environment's plugin list is not kept in ~/.cache (a file per environment)
    return env


def _run(args, *, cwd=None, env=None, check=True):
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env or _clean_env(), capture_output=True, text=True, timeout=180
    )
    if check and result.returncode != 0:
        pytest.fail(
            f"command failed (exit {result.returncode}): {' '.join(map(str, args))}\n"
            f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
        )
    return result


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory):
    """A virtual environment with the kernel visible and the example plugin installed: its python."""
    if importlib.util.find_spec("hatchling") is None:
        pytest.skip("hatchling is not installed here; it is needed to build the example offline (--no-build-isolation)")
    base = tmp_path_factory.mktemp("example-plugin")
    env_dir = base / "venv"
    try:
        venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt", clear=True).create(env_dir)
        python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        probe = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, timeout=60,
        )
        if probe.returncode != 0:
            raise OSError(probe.stderr.strip() or "the new interpreter does not start")
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot create a virtual environment here (environmental): {exc}")
    purelib = Path(probe.stdout.strip())
    parents = [p for p in site.getsitepackages() if Path(p).is_dir()]
    if site.ENABLE_USER_SITE and Path(site.getusersitepackages()).is_dir():
        parents.append(site.getusersitepackages())
    (purelib / "_astra_parent_env.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in parents) + "\n"
    )
    # Install from a clean copy so nothing (build files, caches) lands in the repository.
    source = base / "astra-network-constant"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist"))
    _run([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q", source])
    return python


def test_installed_distribution_declares_the_entry_point(plugin_env):
    code = (
        "import importlib.metadata as m, json;"
        "eps = m.entry_points(group='astra_sim.plugins');"
        "print(json.dumps({ep.name: [ep.value, ep.dist.name if ep.dist else None] for ep in eps}))"
    )
    found = json.loads(_run([plugin_env, "-c", code]).stdout)
    assert found["network_constant"] == ["astra_network_constant.plugin", "astra-network-constant"]
    # Installed into the new environment, not the one running this test.
    location = _run([plugin_env, "-c", "import astra_network_constant as a; print(a.__file__)"]).stdout.strip()
    assert Path(location).is_relative_to(plugin_env.parent.parent)


def test_describe_plugins_shows_it_loaded(plugin_env):
    code = "import json; from astra_sim.plugins import describe_plugins; print(json.dumps(describe_plugins()))"
    rows = {row["name"]: row for row in json.loads(_run([plugin_env, "-c", code]).stdout)}
    row = rows["network_constant"]
    assert row["status"] == "loaded"
    assert row["distribution"] == "astra-network-constant" and row["version"] == "0.1.0"
    assert row["provides"] == ["network_backend:constant"]
    assert row["hooks"] == ["astra_add_run_options", "astra_register_network_backends", "astra_run_finish"]
    assert rows["builtin"]["status"] == "loaded"


def _write_inputs(folder):
    """An 8-rank trace (one ALL_REDUCE each, written like Chakra's generator) and the system JSON."""
    from astra_sim.chakra import make_metadata, make_node, types, write_et

    node = make_node(
        1, "ALL_REDUCE", types.COMM_COLL_NODE,
        attrs={"is_cpu_op": False, "comm_type": types.ALL_REDUCE, "comm_size": SIZE},
    )
    for rank in range(8):
        write_et(folder / f"allreduce.{rank}.et", make_metadata("1.0.0"), [node])
    (folder / "system.json").write_text(json.dumps(SYSTEM))
    return folder / "allreduce", folder / "system.json", EXAMPLE / "network.yml"


def test_simulate_on_the_constant_network(plugin_env, tmp_path):
    workload, system, network = _write_inputs(tmp_path)
    code = (
        "import json, sys; from astra_sim.simulation import simulate;"
        "r = simulate(sys.argv[1], sys.argv[2], sys.argv[3], network_backend='constant');"
        "print(json.dumps({'finish': [x.finish_ns for x in r.ranks], 'network': r.settings['network'],"
        " 'plugins': r.settings['plugins']}))"
    )
    result = _run([plugin_env, "-c", code, workload, system, network])
    out = json.loads(result.stdout)
    assert out["finish"] == [expected_ring_all_reduce_ns()] * 8 == [76648] * 8
    assert out["network"] == {"backend": "constant", "npus": 8, "latency_ns": 1000, "bandwidth_bytes_per_ns": 100}
    assert "network_constant" in out["plugins"]
    assert result.stderr == ""  # astra_run_finish stays quiet by default

    env = _clean_env()
    env["ASTRA_NETWORK_CONSTANT_SUMMARY"] = "1"
    loud = _run([plugin_env, "-c", code, workload, system, network], env=env)
    assert loud.stderr.strip().splitlines() == [
        "network_constant: 8 NPUs, 448 messages, latency 1000 ns, 100 bytes/ns; max finish 76648 ns"
    ]


def test_the_plugins_own_tests_pass_when_installed(plugin_env):
    """The example's test suite, run against the installed distribution (so its discovery test runs too)."""
    result = _run(
        [plugin_env, "-m", "pytest", EXAMPLE / "tests", "-q", "-rs", "-p", "no:cacheprovider"], cwd=ROOT, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "not installed" not in result.stdout, result.stdout


def _astra(python, *args, env=None, check=True):
    """Run the ``astra`` CLI in the new environment the way its console script does."""
    code = "import sys; sys.argv[0] = 'astra'; from astra_sim.cli import main; sys.exit(main())"
    return _run([python, "-c", code, *args], env=env, check=check)


@pytest.fixture
def cli_ready():
    if not CLI.exists():
        pytest.skip("core/astra_sim/cli.py does not exist yet")


def test_cli_lists_the_plugin(plugin_env, cli_ready):
    listing = _run([plugin_env, "-m", "astra_sim.cli", "plugins", "--json"]).stdout
    rows = {row["name"]: row for row in json.loads(listing)}
    assert rows["network_constant"]["status"] == "loaded"
    assert rows["network_constant"]["provides"] == ["network_backend:constant"]
    # Selection: -p loads only the named plugins (builtin and the default plugins always: collectives_native,
    # folding, analysis, workload_compact), -p no:NAME blocks one.
    only = {r["name"]: r["status"] for r in json.loads(_astra(plugin_env, "-p", "network_constant", "plugins", "--json").stdout)}
    assert only["network_constant"] == "loaded" and only["builtin"] == "loaded"
    always = ("builtin", "collectives_native", "folding", "analysis", "workload_compact", "network_constant")
    assert all(status != "loaded" for name, status in only.items() if name not in always)
    blocked = {r["name"]: r["status"] for r in json.loads(_astra(plugin_env, "-p", "no:network_constant", "plugins", "--json").stdout)}
    assert blocked["network_constant"] == "blocked"
    env = _clean_env()
    env["ASTRA_PLUGINS"] = "network_constant"
    from_env = {r["name"]: r["status"] for r in json.loads(_astra(plugin_env, "plugins", "--json", env=env).stdout)}
    assert from_env == only


def test_cli_runs_on_the_constant_network(plugin_env, cli_ready, tmp_path):
    workload, system, network = _write_inputs(tmp_path)
    report_path = tmp_path / "out.json"
    common = [
        "--workload-configuration", workload,
        "--system-configuration", system,
        "--network-configuration", network,
        "--network-backend", "constant",
        "--report-json", report_path,
    ]
    _astra(plugin_env, "run", *common, "--quiet")
    report = json.loads(report_path.read_text())
    assert report["summary"]["max_finish_ns"] == expected_ring_all_reduce_ns()
    assert report["settings"]["network"]["backend"] == "constant"
    # The option the plugin adds through astra_add_run_options reaches astra_run_finish.
    loud = _astra(plugin_env, "run", *common, "--quiet", "--constant-summary")
    assert "network_constant: 8 NPUs" in loud.stderr and "max finish 76648 ns" in loud.stderr
    # Blocking the plugin makes the backend unknown: a clear error, not a traceback.
    missing = _astra(plugin_env, "-p", "no:network_constant", "run", *common, check=False)
    assert missing.returncode != 0
    assert "constant" in missing.stderr and "Traceback" not in missing.stderr


def test_tutorial_run_block_runs_verbatim(plugin_env, cli_ready, tmp_path):
    """The shell block of the tutorial's section 7, as written (tests/test_docs_run.py leaves it out:
    it needs this plugin installed), in a folder holding a copy of examples/."""
    import re

    text = (ROOT / "docs" / "plugins" / "writing-plugins.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"^```bash\n(.*?)^```", text, flags=re.M | re.S)
                 if "--network-backend constant" in b)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "astra"  # the console script, for the environment that has the plugin
    shim.write_text(f'#!/bin/sh\nexec "{plugin_env}" -c "import sys; sys.argv[0] = \'astra\'; '
                    f'from astra_sim.cli import main; sys.exit(main())" "$@"\n')
    shim.chmod(0o755)
    shutil.copytree(ROOT / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    env = _clean_env()
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    result = _run(["bash", "-e", "-c", block], cwd=tmp_path, env=env)
    assert "network_constant: 8 NPUs, 448 messages" in result.stderr and "max finish 76648 ns" in result.stderr
