"""Fuzzing every configuration reader: a parsed configuration, or a one-line error naming file and key.

Each reader gets valid documents with one key changed (wrong types, NaN, +-inf, negative, zero, huge
numbers, unicode, nested garbage), deleted or added, and raw garbage text. The readers: the system,
remote-memory and communicator-group JSON, the analytical network YAML, the GPU YAML, the InfraGraph
wrapper, MSCCL-IR XML and ASTRA-sim 1.0 text workloads. Inputs that once broke a reader are kept in
``tests/fuzz_corpus/configs`` (name: ``<reader>--<case>.<ext>``) and replayed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import example, given, strategies as st

from astra_sim.config import parse_comm_groups, parse_memory_config, parse_system_config
from astra_sim.errors import AstraError
from astra_sim_testing.fuzzing import check_error, fuzz_settings, hostile_values, mutated, to_json, to_yaml
from astra_sim_testing import repo_root, system_config

CORPUS = Path(__file__).parent / "fuzz_corpus" / "configs"
EXAMPLES = (repo_root() or Path(__file__).parents[1]) / "examples"


def write(tmp_path_factory, name, text):
    folder = tmp_path_factory.mktemp("cfg")
    path = folder / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return path


def expect(read, path, keys=()):
    """``read(path)`` parses or raises a clear error naming ``path`` (and one of ``keys``)."""
    try:
        return read(path)
    except AstraError as exc:
        check_error(exc, path, keys)
    return None


garbage_text = st.one_of(
    st.text(max_size=200),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    st.sampled_from(["[" * 5000, "{" * 300 + "}" * 300, "a: " + "[" * 1000, "\ufeff{}", "null", "1e999", "NaN",
                     "- - - -", "!!python/object/apply:os.system ['true']", "&a [*a]", "<algo/>", "a: *undefined",
                     "{\"a\": " * 100000]),
)


# ------------------------------------------------------------------------------------ kernel readers
SYSTEM = system_config(2, **{"comm-streams": "single", "replay-only": 0, "model-shared-bus": 0,
                            "all-reduce-implementation-custom": ["x.xml"]})


@fuzz_settings(250)
@given(mutated(SYSTEM))
def test_system_json(tmp_path_factory, case):
    doc, key = case
    path = write(tmp_path_factory, "sys.json", to_json(doc))
    expect(lambda p: parse_system_config(str(p), 1.0), path, keys=set(SYSTEM) | {key})


MEMORY = {"memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-latency": 500, "remote-mem-bw": 50,
          "num-nodes": 2, "num-npus-per-node": 4}


@fuzz_settings(150)
@given(mutated(MEMORY))
def test_memory_json(tmp_path_factory, case):
    from astra_memory_analytical.model import parse_memory_config as analytical

    doc, key = case
    path = write(tmp_path_factory, "mem.json", to_json(doc))

    def read(p):
        return analytical(parse_memory_config(str(p)), str(p), total_npus=8, warn=lambda m: None)

    expect(read, path, keys=set(MEMORY) | {key})


GROUPS = {"1": [0, 1, 2, 3], "2": [4, 5, 6, 7], "3": [0, 4]}


@fuzz_settings(150)
@given(mutated(GROUPS))
@example(({"1": [0, 1], "1.0": [2]}, "1.0"))
def test_groups_json(tmp_path_factory, case):
    doc, key = case
    path = write(tmp_path_factory, "groups.json", to_json(doc))
    expect(lambda p: parse_comm_groups(str(p)), path, keys=set(GROUPS) | {key})


@fuzz_settings(200)
@given(garbage_text, st.sampled_from(["sys.json", "groups.json", "mem.json", "net.yml", "gpu.yaml", "wrap.yaml"]))
def test_garbage_text_in_every_json_and_yaml_reader(tmp_path_factory, text, name):
    path = write(tmp_path_factory, name, text)
    readers = {
        "sys.json": lambda p: parse_system_config(str(p)),
        "groups.json": lambda p: parse_comm_groups(str(p)),
        "mem.json": lambda p: parse_memory_config(str(p)),
        "net.yml": _network_reader(),
        "gpu.yaml": _gpu_reader(),
        "wrap.yaml": _infragraph_reader(),
    }
    expect(readers[name], path)


# ------------------------------------------------------------------------------------ plugin readers
def _network_reader():
    from astra_network_analytical.model import parse_network_config

    return lambda p: parse_network_config(str(p), warn=lambda m: None)


NETWORK = {"topology": ["Ring", "Switch"], "npus_count": [4, 2], "bandwidth": [50.0, 25.0],
           "latency": [500.0, 1000.0], "cross_dimension_route": "dimension_order"}


@fuzz_settings(250)
@given(mutated(NETWORK))
@example(({**NETWORK, "npus_count": [10 ** 6, 10 ** 6]}, "npus_count"))  # 10^12 NPUs
def test_network_yaml(tmp_path_factory, case):
    doc, key = case
    path = write(tmp_path_factory, "net.yml", to_yaml(doc))
    expect(_network_reader(), path, keys=set(NETWORK) | {key})


def _gpu_reader():
    from astra_gpu_model.gpu import load_gpu_file

    return load_gpu_file


def _gpu_preset():
    import yaml

    from astra_gpu_model.gpu import preset_dir

    data = yaml.safe_load((preset_dir() / "H100-SXM5-80GB.yaml").read_text())
    data.pop("sources", None)
    return data


@fuzz_settings(150)
@given(data=st.data())
def test_gpu_yaml(tmp_path_factory, data):
    preset = _gpu_preset()
    doc, key = data.draw(mutated(preset))
    if data.draw(st.booleans()) and isinstance(doc.get("tensor_tflops"), dict):  # reach the nested keys too
        nested, inner = data.draw(mutated(doc["tensor_tflops"]))
        doc["tensor_tflops"], key = nested, f"tensor_tflops.{inner}"
    path = write(tmp_path_factory, "gpu.yaml", to_yaml(doc))
    keys = set(preset) | {key} | {f"{k}." for k in preset}
    expect(_gpu_reader(), path, keys=keys)


def _infragraph_reader():
    from astra_network_congestion.infragraph import load_infragraph

    return lambda p: load_infragraph(str(p))


WRAPPER = {"infrastructure": "infrastructure.yaml", "annotations": "infrastructure.rank-annotation.yaml",
           "logical_dims": [8], "switch_latency_ns": {"nvsw": 100}}


@fuzz_settings(80)
@given(mutated(WRAPPER))
@example(({**WRAPPER, "switch_latency_ns": {"\n": {}}}, "switch_latency_ns"))  # a key with a newline
def test_infragraph_wrapper(tmp_path_factory, case):
    pytest.importorskip("infragraph")
    doc, key = case
    folder = tmp_path_factory.mktemp("ig")
    for name in ("infrastructure.yaml", "infrastructure.rank-annotation.yaml"):
        shutil.copy(EXAMPLES / "infragraph" / "dgx_h100" / name, folder / name)
    path = folder / "network.yaml"
    path.write_text(to_yaml(doc), encoding="utf-8", errors="surrogatepass")
    try:
        _infragraph_reader()(path)
    except AstraError as exc:
        # an error in the infrastructure a key points at names that file instead
        named = str(path) if str(path) in str(exc) else str(folder)
        check_error(exc, named, keys=set(WRAPPER) | {key, "infrastructure", "devices", "annotation", "rank"})


MSCCL = (EXAMPLES / "msccl" / "allreduce_ring_8gpu.xml").read_bytes() if (EXAMPLES / "msccl").is_dir() else b""


@st.composite
def msccl_mutations(draw):
    """The 8-GPU ring with attribute values replaced, elements cut, or entities declared."""
    import re

    text = MSCCL.decode()
    attrs = list(re.finditer(r'(\w+)="([^"]*)"', text))
    key = None
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["value", "value", "value", "cut", "entity", "drop_attr"]))
        if op == "value":
            m = draw(st.sampled_from(attrs))
            value = draw(st.one_of(st.sampled_from(["-1", "0", "99999999999999999999", "1e9", "nan", "", "x", "١",
                                                     "1_0", " 3 ", "s", "rrcs", "o", "😀"]),
                                   st.integers(-5, 40).map(str)))
            key = m.group(1)
            text = text[:m.start(2)] + value.replace('"', "") + text[m.end(2):]
            attrs = list(re.finditer(r'(\w+)="([^"]*)"', text))
        elif op == "cut":
            at = draw(st.integers(0, len(text) - 1))
            text = text[:at] + text[at + draw(st.integers(1, 200)):]
            attrs = list(re.finditer(r'(\w+)="([^"]*)"', text)) or attrs
        elif op == "drop_attr":
            m = draw(st.sampled_from(attrs))
            key = m.group(1)
            text = text[:m.start()] + text[m.end():]
            attrs = list(re.finditer(r'(\w+)="([^"]*)"', text)) or attrs
        else:
            text = '<!DOCTYPE algo [<!ENTITY e "8">]>\n' + text
    return text.encode("utf-8"), key


@fuzz_settings(200)
@given(msccl_mutations())
def test_msccl_xml(tmp_path_factory, case):
    from astra_collectives_msccl.msccl_ir import check_matching, check_progress, parse_msccl

    if not MSCCL:
        pytest.skip("examples/msccl not shipped")
    data, key = case
    path = write(tmp_path_factory, "algo.xml", data)

    def read(p):
        algo = parse_msccl(p)
        check_matching(algo)
        check_progress(algo)
        return algo

    expect(read, path)


TEXT = ("HYBRID_DATA_MODEL model_parallel_NPU_group: 2\n3\n"
        "L0 -1 10 ALLREDUCE 1024 20 ALLGATHER 2048 30 REDUCESCATTER 4096 5\n"
        "L1 -1 10 NONE 0 20 ALLTOALL 2048 30 ALLREDUCE 4096 5\n"
        "L2 -1 10 ALLREDUCE 1024 20 NONE 0 30 NONE 0 5\n")
TOKENS = ["nan", "inf", "-1", "0", "1e999", "99999999999999999999999", "ALLREDUCE", "NONE", "😀", "", "-0",
          "0x10", "1.5", "model_parallel_NPU_group:", "DATA", "\t", "100000000"]


@st.composite
def text_mutations(draw):
    lines = [line.split(" ") for line in TEXT.strip("\n").split("\n")]
    for _ in range(draw(st.integers(1, 3))):
        row = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["replace", "replace", "delete", "insert", "drop_line", "dup_line"]))
        tokens = lines[row]
        if op == "replace" and tokens:
            tokens[draw(st.integers(0, len(tokens) - 1))] = draw(st.one_of(st.sampled_from(TOKENS),
                                                                           st.text(max_size=6)))
        elif op == "delete" and tokens:
            del tokens[draw(st.integers(0, len(tokens) - 1))]
        elif op == "insert":
            tokens.insert(draw(st.integers(0, len(tokens))), draw(st.sampled_from(TOKENS)))
        elif op == "drop_line" and len(lines) > 1:
            del lines[row]
        elif op == "dup_line":
            lines.insert(row, list(tokens))
    return "\n".join(" ".join(t) for t in lines) + "\n"


@fuzz_settings(200)
@given(text_mutations())
def test_text_workload(tmp_path_factory, text):
    from astra_workload_generators.text import convert_text, parse_text_file

    path = write(tmp_path_factory, "w.txt", text)

    def read(p):
        parsed = parse_text_file(p)
        convert_text(p, p.parent / "o", 4)
        return parsed

    expect(read, path)


# ------------------------------------------------------------------------------------ corpus
READERS = {
    "system": lambda p: parse_system_config(str(p)),
    "groups": lambda p: parse_comm_groups(str(p)),
    "memory": lambda p: parse_memory_config(str(p)),
    "network": lambda p: _network_reader()(p),
    "gpu": lambda p: _gpu_reader()(p),
    "msccl": lambda p: __import__("astra_collectives_msccl.msccl_ir", fromlist=["parse_msccl"]).parse_msccl(p),
    "text": lambda p: __import__("astra_workload_generators.text", fromlist=["parse_text_file"]).parse_text_file(p),
    "infragraph": lambda p: _infragraph_reader()(p),
}


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*--*")) or ["(empty)"])
def test_corpus_regressions(tmp_path, name):
    if name == "(empty)":
        pytest.skip("no corpus entries")
    reader = READERS[name.split("--")[0]]
    path = tmp_path / name.split("--", 1)[1]
    path.write_bytes((CORPUS / name).read_bytes())
    expect(reader, path)
