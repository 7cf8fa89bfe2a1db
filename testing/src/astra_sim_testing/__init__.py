"""astra-sim-testing: what the kernel's and every plugin's test suites share (never imported by production code).

Helpers (configurations, parity cases, the reference material's location) are here; the pytest plugin
(:mod:`astra_sim_testing.pytest_plugin`: fixtures, the reproducible hypothesis profile) is registered under the
``pytest11`` entry point, and :mod:`astra_sim_testing.fuzzing` holds the fuzz tests' shared pieces.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path


def system_config(dims=1, algorithm="ring", **overrides):
    """:func:`astra_sim.config.default_system_config` (the reference's usual system configuration)."""
    from astra_sim.config import default_system_config

    return default_system_config(dims, algorithm, **overrides)


def reduction_ns(size_bytes, local_mem_bw_gbps=1600):
    """The reference's reduction cost of one packet: write + two reads, truncated separately."""
    return 3 * int(size_bytes / (local_mem_bw_gbps * 1e9) * 1e9)


def write_system_config(path, dims=1, algorithm="ring", **overrides):
    """Write :func:`system_config` as JSON to ``path``; returns the path as a string."""
    Path(path).write_text(json.dumps(system_config(dims, algorithm, **overrides), indent=1))
    return str(path)


def write_network_config(path, topology=("Ring",), npus=(8,), bandwidth_gbps=(50.0,), latency_ns=(500.0,)):
    """Write an analytical-network YAML to ``path``; returns the path as a string."""
    Path(path).write_text(
        f"topology: [ {', '.join(topology)} ]\n"
        f"npus_count: [ {', '.join(str(n) for n in npus)} ]\n"
        f"bandwidth: [ {', '.join(str(float(b)) for b in bandwidth_gbps)} ]\n"
        f"latency: [ {', '.join(str(float(x)) for x in latency_ns)} ]\n"
    )
    return str(path)


def write_case(directory, nodes, npus=2, name="trace", **system_overrides):
    """The same ``nodes`` as every rank's trace ``directory/name/t.<rank>.et``, the usual system
    configuration (:func:`system_config` with ``system_overrides``) and an ``npus``-NPU Ring network in
    ``directory``; returns ``(trace prefix, system path, network path)``."""
    from astra_sim.chakra import make_metadata, write_et

    prefix = Path(directory) / name / "t"
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for rank in range(npus):
        write_et(f"{prefix}.{rank}.et", make_metadata(), nodes)
    system = write_system_config(Path(directory) / "system.json", **system_overrides)
    network = write_network_config(Path(directory) / "network.yml", npus=(npus,))
    return str(prefix), system, network


def small_congestion_run_argv(directory, *flags, algorithm="ring"):
    """``astra run``'s argv for a small case written into ``directory``: 8 ranks on a Ring, each a 1 MiB all-reduce
    then a GEMM, on the congestion backend, its report at ``directory/r.json`` (the start-up tests' case)."""
    from astra_sim.chakra import make_node, types

    all_reduce = make_node(0, "all_reduce", types.COMM_COLL_NODE,
                           attrs={"is_cpu_op": False, "comm_type": types.ALL_REDUCE, "comm_size": 1 << 20})
    gemm = make_node(1, "gemm", types.COMP_NODE, data_deps=[0],
                     attrs={"num_ops": 10**9, "tensor_size": 1 << 20, "duration_micros": 5})
    prefix, system, network = write_case(directory, [all_reduce, gemm], npus=8, algorithm=algorithm)
    return ["run", f"--output={Path(directory) / 'r.json'}", "-q", f"--workload-configuration={prefix}",
            f"--system-configuration={system}", f"--network-configuration={network}", "--network-backend=congestion",
            *flags]


def all_reduce_trace(directory, npus, size_bytes, name="ar"):
    """Every rank's trace ``directory/name/t.<rank>.et``: one all-reduce of ``size_bytes``; returns the prefix."""
    from astra_sim.chakra import make_metadata, make_node, types, write_et

    node = make_node(1, "ar", types.COMM_COLL_NODE,
                     attrs={"is_cpu_op": False, "comm_type": types.ALL_REDUCE, "comm_size": size_bytes})
    prefix = Path(directory) / name / "t"
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for rank in range(npus):
        write_et(f"{prefix}.{rank}.et", make_metadata(), [node])
    return str(prefix)


def find_shared_dir():
    """The reference material folder: $ASTRA_SHARED_DIR, else ``../shared`` beside the repo."""
    env = os.environ.get("ASTRA_SHARED_DIR")
    if env and Path(env).is_dir():
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent.parent / "shared"
        if (parent / "pyproject.toml").exists() and candidate.is_dir():
            return candidate
    return None


def parity_cases(shared=None):
    """The rows of ``shared/parity/cases.csv`` (dicts of its columns), or [] when it is not there."""
    import csv

    shared = find_shared_dir() if shared is None else shared
    if shared is None or not (shared / "parity" / "cases.csv").exists():
        return []
    with open(shared / "parity" / "cases.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def parity_kwargs(extra):
    """The reference flags a parity case adds (its ``extra`` column), as simulate() keyword arguments."""
    kwargs = {}
    for flag in extra.split():
        name, _, value = flag.lstrip("-").partition("=")
        if name == "num-queues-per-dim":
            kwargs["num_queues_per_dim"] = int(value)
        elif name == "injection-scale":
            kwargs["injection_scale"] = float(value)
        elif name == "rendezvous-protocol":
            kwargs["rendezvous"] = value.lower() in ("1", "true", "")
        else:
            raise AssertionError(f"parity case uses an unknown flag {flag!r}")
    return kwargs


def golden_trace(shared, case, name):
    """Prefix of a trace from astra-sim's examples in ``shared/samples/chakra/astra-sim-golden/<case>/<name>``,
    or None when ``shared`` is None or the trace is absent."""
    if shared is None:
        return None
    prefix = shared / "samples" / "chakra" / "astra-sim-golden" / case / name
    return prefix if os.path.exists(f"{prefix}.0.et") else None


def handwritten_infragraph(shared):
    """The handwritten InfraGraph sample (``shared/samples/infragraph/handwritten-2host-4xpu-tor.yaml``: 2 hosts x
    4 XPUs and a ToR) as a dict, with every link at 100 GB/s (decimal) and 100 ns and the ToR cables at 1000 ns,
    or None when the sample is absent."""
    import yaml

    source = shared / "samples" / "infragraph" / "handwritten-2host-4xpu-tor.yaml" if shared is not None else None
    if source is None or not source.exists():
        return None
    infra = yaml.safe_load(source.read_text())
    for device in infra["devices"]:
        for link in device["links"]:
            link["physical"] = {"bandwidth": {"choice": "gigabytes_per_second", "gigabytes_per_second": 100},
                                "latency": {"choice": "ns", "ns": 100}}
    for link in infra["links"]:
        link["physical"]["latency"] = {"choice": "ns", "ns": 1000}
    return infra


def reference_script():
    """The wrapper script that runs a locally built reference simulator, for live comparisons:
    ``$ASTRA_REFERENCE`` (default /work/refbuild/run_reference.sh; an empty value turns them off), or
    None when it is not an executable file."""
    path = os.environ.get("ASTRA_REFERENCE", "/work/refbuild/run_reference.sh")
    return path if path and os.access(path, os.X_OK) else None


def repo_root():
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").exists() and (parent / "core").is_dir():
            return parent
    return None


def load_script(path):
    """A script that is not part of any package (a plugin's ``fit/*.py``) imported as a module, named by its file."""
    import importlib.util

    path = Path(path)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fail_renames_into(monkeypatch, folder, code=errno.ENOSPC, after=0):
    """Every final rename of an atomic write into ``folder`` after the first ``after`` fails with ``code`` (ENOSPC:
    a full disk; EROFS: a folder turned read-only), as it does when a write fails after the work (the late-write
    tests of issue 39; ``after`` > 0: a set of files whose first ones are already in place)."""
    real = os.replace
    renamed = []

    def replace(src, dst, *args, **kwargs):
        if os.path.abspath(os.fspath(dst)).startswith(str(folder) + os.sep):
            if len(renamed) >= after:
                raise OSError(code, os.strerror(code))
            renamed.append(dst)
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


def flash_attention_node(b=2, h=32, s=8192, d=128, causal=True, kernel=None, backward=False,
                         element="'Tensor(c10::BFloat16)'"):
    """A SDPA flash-attention COMP node as the LLM generator writes it (BHSD shapes, ``is_causal`` in
    ``inputs_values``, every operand of type ``element``, the ``attention_kernel`` attribute when given)."""
    from astra_sim.chakra import make_node, types as T

    q = f"[{b}, {h}, {s}, {d}]"
    if backward:
        name, shapes = "aten::_scaled_dot_product_flash_attention_backward", f"[{q}, {q}, {q}, {q}]"
        values = f"[[], [], [], [], [], [], None, None, 0, 0, 0.0, {causal}, None, None]"
    else:
        name, shapes = "aten::_scaled_dot_product_flash_attention", f"[{q}, {q}, {q}]"
        values = f"[[], [], [], 0.0, {causal}, False]"
    attrs = {"is_cpu_op": False, "inputs_shapes": shapes, "inputs_types": "[" + ", ".join([element] * 4) + "]",
             "inputs_values": values}
    if kernel is not None:
        attrs["attention_kernel"] = kernel
    return make_node(0, name, T.COMP_NODE, attrs=attrs)


def arrival_times(network, engine, messages):
    """Send ``(src, dst, size)`` messages through a network backend at t=0, in order; each one's arrival time (ns)."""
    arrived = {}
    for index, (src, dst, size) in enumerate(messages):
        network.send(src, dst, size, lambda i: arrived.__setitem__(i, engine.now), index)
    engine.run()
    return [arrived[i] for i in range(len(messages))]
