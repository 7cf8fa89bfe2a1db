"""Fuzzing the readers the other fuzz files do not reach: a result in its documented ranges, or a one-line
error naming the file; never another exception, and never longer than ``HANG_S`` seconds on one input.

Each reader kind gets real samples (shipped examples, the reference's files) mutated byte by byte (bits
flipped, cut short, slices duplicated or deleted, NULs, deep nesting, huge numbers and other tokens spliced
in or written over a number) and, for JSON/YAML, key by key (type swaps). The kinds: sweep specs, serve
traces, Hugging Face model configs, ns-3 input files (parsed only: ns-3 is never imported), SCALE-sim
.cfg and topology CSVs, MSCCL-IR XML, InfraGraph infrastructures and annotations, and compact workload
manifests. Each kind is worth 200 examples in ``make test`` (10,000 in ``make fuzz``). Inputs that once broke
a reader are kept in ``tests/fuzz_corpus/readers`` (name: ``<kind>--<case>.<ext>``) and replayed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from astra_sim.errors import AstraError
from astra_sim_testing import find_shared_dir, repo_root
from astra_sim_testing.fuzzing import (check_error, fuzz_settings, mutated, mutated_bytes, time_limit, to_json,
                                       to_yaml)

ROOT = repo_root() or Path(__file__).parents[1]
EXAMPLES = ROOT / "examples"
CORPUS = Path(__file__).parent / "fuzz_corpus" / "readers"


def expect(read, path, named=None, keys=()):
    """``read(path)`` within the time bound: its result, or None after a clear error naming ``named`` (default
    ``path``), or, for a Chakra trace another file points at (a compact manifest's class), that trace."""
    from astra_sim.chakra import ChakraError

    with time_limit():
        try:
            return read(path)
        except ChakraError as exc:
            check_error(exc, exc.path)
        except AstraError as exc:
            check_error(exc, named or path, keys)
    return None


def either(data, structured):
    """A strategy: byte mutations of ``data`` (bytes seeds), or one key of a parsed seed changed (``structured``:
    a strategy of documents already serialized)."""
    return st.one_of(mutated_bytes(data), structured)


def structured(docs, dump):
    """Strategy: one of ``docs`` with one key (at the top or one level down) changed, serialized by ``dump``."""
    @st.composite
    def build(draw):
        doc = json.loads(json.dumps(draw(st.sampled_from(docs))))
        inner = [k for k, v in doc.items() if isinstance(v, dict) and v] if isinstance(doc, dict) else []
        if inner and draw(st.booleans()):
            key = draw(st.sampled_from(inner))
            doc[key], _ = draw(mutated(doc[key]))
        else:
            doc, _ = draw(mutated(doc))
        return dump(doc).encode("utf-8", "surrogatepass")

    return build()


def write(path, data):
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------------------------ sweep specs
def _sweep_seeds():
    seeds = []
    for name in ("sweeps/collectives_topology.yaml", "sweeps/llm_network_gpu.yaml", "sweeps/parallelism.yaml",
                 "serving/qps_sweep.yaml"):
        text = (EXAMPLES / name).read_text()
        seeds.append(text.replace("examples/sweeps/", f"{EXAMPLES}/sweeps/").encode())
    return seeds


SWEEP = _sweep_seeds()


def _sweep_reader():
    from astra_sweep.commands import command_parsers
    from astra_sweep.spec import load_spec
    from astra_sweep.spec import MAX_SWEEP_POINTS

    parsers = command_parsers()["parsers"]

    def read(path):
        spec = load_spec(str(path), parsers)
        assert 1 <= len(spec.points) <= MAX_SWEEP_POINTS, len(spec.points)
        assert all(p.workload_kind in ("trace", "llm", "micro", "serve") for p in spec.points)
        return spec

    return read


@fuzz_settings(200)
@given(either(SWEEP, structured([__import__("yaml").safe_load(s) for s in SWEEP], to_yaml)))
def test_sweep_spec(tmp_path, capsys, data):
    expect(_sweep_reader(), write(tmp_path / "spec.yaml", data))
    capsys.readouterr()  # deprecation warnings of valid specs


# ------------------------------------------------------------------------------------ serve traces
SERVE = [
    b'{"arrival_s": 0.0, "prompt_tokens": 228, "output_tokens": 207}\n'
    b'{"arrival_s": 0.25, "prompt_tokens": 1024, "output_tokens": 3, "priority": 1}\n'
    b'{"arrival_s": 0.5, "prompt_tokens": 64, "output_tokens": 9, "prefix_group": "sys", "prefix_tokens": 32}\n',
    b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
    b"2023-11-16 18:15:50.9951690,396,109\n",
    b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n"
    b"7.5,GPT-4,1087,230,1317,Conversation log\n",
    b"arrival_s,prompt_tokens,output_tokens,priority\n0.5,10,3,1\n0.25,20,4,0\n",
]


def _read_trace(path):
    from astra_serving.requests import read_trace

    requests = read_trace(path, max_context=8192)
    assert requests
    for r in requests:
        assert isinstance(r.arrival_ns, int) and 0 <= r.arrival_ns < 2 ** 63
        assert isinstance(r.prompt_tokens, int) and isinstance(r.output_tokens, int)
        assert r.prompt_tokens >= 1 and r.output_tokens >= 1 and r.prompt_tokens + r.output_tokens <= 8192
        assert 0 <= r.prefix_tokens <= r.prompt_tokens
    assert [r.arrival_ns for r in requests] == sorted(r.arrival_ns for r in requests)
    return requests


@fuzz_settings(200)
@given(mutated_bytes(SERVE), st.sampled_from(["trace.jsonl", "trace.csv", "trace.txt"]))
def test_serve_trace(tmp_path, data, name):
    expect(_read_trace, write(tmp_path / name, data))


# ------------------------------------------------------------------------------------ Hugging Face configs
def _hf_seeds():
    from astra_workload_generators.llm.hf import CONFIG_DIR

    return [(CONFIG_DIR / f"{n}.json").read_bytes() for n in
            ("deepseek-v2-lite", "gemma3-4b", "gemma2-9b", "deepseek-moe-16b") + tuple(
                sorted(p.stem for p in CONFIG_DIR.glob("*.json") if p.stem.startswith(("llama", "qwen", "mixtral",
                                                                                        "gpt2", "mistral"))))[:6]]


HF = _hf_seeds()


def _read_hf(path):
    from astra_workload_generators.llm.hf import load_hf_config

    dims, warnings, _ = load_hf_config(str(path))
    for key in ("layers", "hidden", "heads", "vocab", "seq_len", "ffn_hidden", "kv_heads"):
        assert isinstance(dims[key], int) and not isinstance(dims[key], bool) and dims[key] >= 1, (key, dims[key])
    for key, value in dims.items():
        assert isinstance(value, (int, bool)) and value >= 0, (key, value)
    assert all(isinstance(w, str) and "\n" not in w for w in warnings)
    return dims


@fuzz_settings(200)
@given(either(HF, structured([json.loads(s) for s in HF], to_json)))
def test_hf_config(tmp_path, data):
    expect(_read_hf, write(tmp_path / "config.json", data))


# ------------------------------------------------------------------------------------ ns-3 input files
NS3_DATA = ROOT / "plugins" / "network_ns3" / "tests" / "data" / "scratch"
NS3_CFG = (NS3_DATA / "config" / "network_cfg.txt").read_bytes().replace(
    b"../../scratch/topology/8_nodes_1_switch_topology.txt", b"topology.txt")
NS3_TOPOLOGY = (NS3_DATA / "topology" / "8_nodes_1_switch_topology.txt").read_bytes()
NS3_LOGICAL = [b'{"logical-dims": ["8"]}\n', b'{"logical-dims": ["2", "4"]}\n']


def _read_ns3(folder):
    from astra_network_ns3.inputs import check_cc_mode, read_config_topology, read_logical_topology, \
        read_network_cfg

    def read(path):
        config = read_network_cfg(str(path))
        check_cc_mode(config)
        assert 1 <= config.payload_bytes <= 65000 and config.buffer_mb > 0
        assert config.ewma_gain is None or 0 <= config.ewma_gain <= 1
        assert all(0 <= p <= 1 for p in config.pmax.values())
        topology = read_config_topology(config)
        assert topology.nodes >= 1 and topology.hosts
        for link in topology.links:
            assert 0 <= link.src < topology.nodes and 0 <= link.dst < topology.nodes and link.src != link.dst
            assert link.rate_bps > 0 and link.delay_ns >= 0 and 0 <= link.error_rate <= 1
        dims = read_logical_topology(str(folder / "logical.json"), len(topology.hosts))
        assert math.prod(dims) == len(topology.hosts)
        return topology

    return read


@fuzz_settings(200)
@given(st.sampled_from(["cfg", "topology", "logical"]), st.data())
def test_ns3_inputs(tmp_path, which, data):
    files = {"cfg": NS3_CFG, "topology": NS3_TOPOLOGY, "logical": NS3_LOGICAL[0]}
    seeds = {"cfg": [NS3_CFG], "topology": [NS3_TOPOLOGY], "logical": NS3_LOGICAL}[which]
    files[which] = data.draw(mutated_bytes(seeds))
    for name, content in (("network_cfg.txt", files["cfg"]), ("topology.txt", files["topology"]),
                          ("logical.json", files["logical"])):
        write(tmp_path / name, content)
    expect(_read_ns3(tmp_path), tmp_path / "network_cfg.txt", named=tmp_path)


# ------------------------------------------------------------------------------------ SCALE-sim files
SYSTOLIC_CFG = [p.read_bytes() for p in sorted((ROOT / "plugins" / "compute_systolic" / "goldens" / "configs")
                                               .glob("*.cfg"))[:4]] + [(EXAMPLES / "systolic" / "google.cfg")
                                                                      .read_bytes()]
SYSTOLIC_CSV = [(EXAMPLES / "systolic" / n).read_bytes() for n in ("mlp.csv", "bert_base_layer.csv")]
SYSTOLIC_CONV = [b"Layer name,IFMAP height,IFMAP width,Filter height,Filter width,Channels,Num filter,Strides,\n"
                 b"Conv1,224,224,7,7,3,64,2,\nCB2a_DP,56,56,3,3,64,1,1,\nFC,1,1,1,1,2048,1000,1,\n"]


def _read_systolic(kind):
    from astra_compute_systolic.config import load_config
    from astra_compute_systolic.topology import read_topology

    def read(path):
        if kind == "cfg":
            config = load_config(str(path))
            assert config.rows >= 1 and config.cols >= 1 and config.dataflow in ("os", "ws", "is")
            assert min(config.ifmap_sram_kb, config.filter_sram_kb, config.ofmap_sram_kb) >= 1
            assert min(config.ifmap_read_bw, config.filter_read_bw, config.ofmap_write_bw) >= 1
            return config
        layers = read_topology(str(path), gemm=kind == "gemm")
        assert layers
        return layers

    return read


@fuzz_settings(200)
@given(st.sampled_from(["cfg", "gemm", "conv"]), st.data())
def test_systolic_files(tmp_path, kind, data):
    seeds = {"cfg": SYSTOLIC_CFG, "gemm": SYSTOLIC_CSV, "conv": SYSTOLIC_CONV}[kind]
    path = write(tmp_path / ("s.cfg" if kind == "cfg" else "t.csv"), data.draw(mutated_bytes(seeds)))
    expect(_read_systolic(kind), path)


# ------------------------------------------------------------------------------------ MSCCL-IR XML
MSCCL_DIR = (find_shared_dir() or ROOT) / "samples" / "msccl"  # the reference's MSCCL-IR files, when present
MSCCL = [(EXAMPLES / "msccl" / "allreduce_ring_8gpu.xml").read_bytes()] + (
    [p.read_bytes() for p in sorted(MSCCL_DIR.glob("*.xml")) if p.stat().st_size < 60_000][:4]
    if MSCCL_DIR.is_dir() else [])


def _read_msccl(path):
    from astra_collectives_msccl.msccl_ir import check_matching, check_progress, parse_msccl

    algo = parse_msccl(path)
    check_matching(algo)
    check_progress(algo)
    assert algo.ngpus >= 1 and algo.nchunksperloop >= 1
    return algo


@fuzz_settings(200)
@given(mutated_bytes(MSCCL))
def test_msccl_xml(tmp_path, data):
    expect(_read_msccl, write(tmp_path / "algo.xml", data))


# ------------------------------------------------------------------------------------ InfraGraph
IG = EXAMPLES / "infragraph" / "dgx_h100"
IG_FILES = {name: (IG / name).read_bytes() for name in
            ("network.yaml", "infrastructure.yaml", "infrastructure.rank-annotation.yaml")}


def _read_infragraph(path):
    from astra_network_congestion.infragraph import load_infragraph

    model = load_infragraph(str(path))
    assert model.network is not None and len(model.rank_node) >= 1 and math.prod(model.logical_dims) == len(
        model.rank_node)
    return model


@pytest.mark.slow  # about 11 s: the infragraph package takes 35 ms per read
@fuzz_settings(200)
@given(st.sampled_from(sorted(IG_FILES)), st.data())
def test_infragraph(tmp_path, which, data):
    pytest.importorskip("infragraph")
    doc = __import__("yaml").safe_load(IG_FILES[which])
    text = data.draw(either([IG_FILES[which]], structured([doc], to_yaml)))
    for name, content in IG_FILES.items():
        write(tmp_path / name, text if name == which else content)
    expect(_read_infragraph, tmp_path / "network.yaml", named=tmp_path)


# ------------------------------------------------------------------------------------ compact workloads
COMPACT = {"format": "astra-sim-compact-workload", "version": 1, "npus": 8,
           "symmetry": [{"stride": 1, "radix": 4, "block": 4}],
           "classes": [{"representative": 0, "trace": "w.class0.et"}, {"representative": 4, "trace": "w.class1.et"}]}
COMPACT_SEEDS = [to_json(COMPACT).encode(), json.dumps(COMPACT, indent=2).encode()]


def _compact_traces(folder):
    from astra_sim.chakra import encode_et, make_metadata, make_node, types as T

    for i in range(2):
        nodes = [make_node(1, "gemm", T.COMP_NODE, duration_micros=5, attrs={"num_ops": 1 << 20}),
                 make_node(2, "send", T.COMM_SEND_NODE, data_deps=[1],
                           attrs={"comm_dst": 1 + i, "comm_size": 64, "comm_tag": 0})]
        (folder / f"w.class{i}.et").write_bytes(encode_et(make_metadata(), nodes))


def _read_compact(prefix):
    from astra_sim.limits import MAX_TOTAL_NPUS
    from astra_workload_compact import read_compact_workload, read_rank_nodes

    compact = read_compact_workload(prefix)
    assert 1 <= compact.npus <= MAX_TOTAL_NPUS and len(compact.traces) == compact.npus // compact.symmetry.order
    nodes = read_rank_nodes(prefix, compact.npus - 1)
    assert all(0 <= n.attrs.get("comm_dst", 0) < compact.npus for n in nodes)
    return compact


@fuzz_settings(200)
@given(either(COMPACT_SEEDS, structured([COMPACT], to_json)))
def test_compact_manifest(tmp_path, data):
    if not (tmp_path / "w.class0.et").exists():
        _compact_traces(tmp_path)
    write(tmp_path / "w.workload.json", data)
    expect(_read_compact, tmp_path / "w", named=tmp_path / "w.workload.json")


# ------------------------------------------------------------------------------------ the valid samples read
def test_the_seeds_are_valid(tmp_path, capsys):
    """Mutations start from inputs that read: a seed that failed would leave the deep code unreached."""
    for i, seed in enumerate(SWEEP):
        assert _sweep_reader()(write(tmp_path / f"s{i}.yaml", seed))
    for i, seed in enumerate(SERVE):
        assert _read_trace(write(tmp_path / f"t{i}.{'jsonl' if i == 0 else 'csv'}", seed))
    for i, seed in enumerate(HF):
        assert _read_hf(write(tmp_path / f"h{i}.json", seed))
    for name, content in (("network_cfg.txt", NS3_CFG), ("topology.txt", NS3_TOPOLOGY),
                          ("logical.json", NS3_LOGICAL[0])):
        write(tmp_path / name, content)
    assert _read_ns3(tmp_path)(tmp_path / "network_cfg.txt")
    for i, seed in enumerate(SYSTOLIC_CFG):
        assert _read_systolic("cfg")(write(tmp_path / f"c{i}.cfg", seed))
    for i, seed in enumerate(SYSTOLIC_CSV):
        assert _read_systolic("gemm")(write(tmp_path / f"g{i}.csv", seed))
    assert _read_systolic("conv")(write(tmp_path / "conv.csv", SYSTOLIC_CONV[0]))
    for i, seed in enumerate(MSCCL):
        assert _read_msccl(write(tmp_path / f"m{i}.xml", seed))
    _compact_traces(tmp_path)
    for seed in COMPACT_SEEDS:
        assert _read_compact(write(tmp_path / "w.workload.json", seed).with_name("w"))
    if __import__("importlib").util.find_spec("infragraph"):
        for name, content in IG_FILES.items():
            write(tmp_path / name, content)
        assert _read_infragraph(tmp_path / "network.yaml")
    capsys.readouterr()


# ------------------------------------------------------------------------------------ corpus
CORPUS_READERS = {
    "sweep": lambda p: _sweep_reader()(p),
    "serve": _read_trace,
    "hf": _read_hf,
    "systolic_cfg": _read_systolic("cfg"),
    "systolic_gemm": _read_systolic("gemm"),
    "systolic_conv": _read_systolic("conv"),
    "msccl": _read_msccl,
}


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*--*")) or ["(empty)"])
def test_corpus_regressions(tmp_path, name, capsys):
    """Every kept input reads or fails cleanly. ns3/infragraph/compact entries are whole folders' worth of
    files (``<kind>--<case>--<file name>``), written together."""
    if name == "(empty)":
        pytest.skip("no corpus entries")
    kind, case = name.split("--")[:2]
    if kind in CORPUS_READERS:
        path = write(tmp_path / case, (CORPUS / name).read_bytes())
        expect(CORPUS_READERS[kind], path)
        return
    files = {"ns3": dict(zip(("network_cfg.txt", "topology.txt", "logical.json"),
                             (NS3_CFG, NS3_TOPOLOGY, NS3_LOGICAL[0]))),
             "infragraph": dict(IG_FILES), "compact": {"w.workload.json": COMPACT_SEEDS[0]}}[kind]
    for entry in CORPUS.glob(f"{kind}--{case}--*"):
        files[entry.name.split("--", 2)[2]] = entry.read_bytes()
    for file_name, content in files.items():
        write(tmp_path / file_name, content)
    if kind == "ns3":
        expect(_read_ns3(tmp_path), tmp_path / "network_cfg.txt", named=tmp_path)
    elif kind == "infragraph":
        pytest.importorskip("infragraph")
        expect(_read_infragraph, tmp_path / "network.yaml", named=tmp_path)
    else:
        _compact_traces(tmp_path)
        expect(_read_compact, tmp_path / "w", named=tmp_path / "w.workload.json")
    capsys.readouterr()
