"""``astra workload llm``: FLOPs and communication volumes checked against formulas derived here, independently of
the generator (which shares none of this file's arithmetic), and end-to-end simulation."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from astra_workload_compact import read_rank_nodes
from astra_sim.chakra import read_et, types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

PLUGINS = ["network_analytical", "workload_generators"]

# Published dimensions, written out again here: (L, h, heads, kv, ffn, vocab, seq, gated)
GPT3_13B = (40, 5120, 40, 40, 20480, 50257, 2048, False)
LLAMA3_8B = (32, 4096, 32, 8, 14336, 128256, 8192, True)
SMALL = dict(layers=4, hidden=256, heads=8, kv_heads=4, ffn_hidden=512, vocab=1000, seq_len=128, gated=True)


def _params(L, h, heads, kv, ffn, vocab, gated):
    """Matmul parameters: per layer Wq (h*h), Wk and Wv (h * kv*h/heads each), Wo (h*h), FFN (2 or 3 h*ffn);
    plus the LM head (vocab*h). Biases, norms and the embedding lookup cost no matmul FLOPs."""
    d = h // heads
    per_layer = h * h + 2 * h * kv * d + h * h + (3 if gated else 2) * h * ffn
    return L, per_layer, L * per_layer + vocab * h


def _expected_flops(spec, sequences):
    """6 * P * tokens + attention: per layer and sequence, QK^T and AV are 2*s^2*h FLOPs each forward (4 s^2 h),
    twice that backward (8 s^2 h): 12 * L * s^2 * h per sequence."""
    L, h, heads, kv, ffn, vocab, s, gated = spec
    _, _, P = _params(L, h, heads, kv, ffn, vocab, gated)
    return 6 * P * sequences * s + 12 * L * s * s * h * sequences


def _read_all(prefix, npus):
    return [read_rank_nodes(prefix, r) for r in range(npus)]


def _comp_ops(ranks):
    return sum(n.attrs["num_ops"] for nodes in ranks for n in nodes if n.type == T.COMP_NODE)


def _spec_dims(spec, rotary=False, rms_norm=False, tied=False):
    L, h, heads, kv, ffn, vocab, s, gated = spec
    return model_dims(layers=L, hidden=h, heads=heads, kv_heads=kv, ffn_hidden=ffn, vocab=vocab, seq_len=s,
                      gated=gated, rotary=rotary, rms_norm=rms_norm, tied_embeddings=tied)


@pytest.mark.parametrize("preset,spec,cfg", [
    ("gpt3-13b", GPT3_13B, LlmConfig(tp=2, pp=2, dp=2, micro_batches=4, micro_batch_size=1)),
    ("llama3-8b", LLAMA3_8B, LlmConfig(tp=4, pp=2, dp=1, micro_batches=2, micro_batch_size=2,
                                       sequence_parallel=True)),
])
def test_flops_per_step(tmp_path, preset, spec, cfg):
    generate_llm(model_dims(preset), cfg, tmp_path / "t")
    total = _comp_ops(_read_all(tmp_path / "t", cfg.npus))
    expected = _expected_flops(spec, cfg.dp * cfg.micro_batches * cfg.micro_batch_size)
    assert abs(total - expected) / expected < 0.01
    # Presets match the published numbers (Llama's positions are rotary and its norms RMSNorm, GPT-3's learned and
    # LayerNorm; GPT-3's LM head is its embedding, Llama's its own)
    llama = preset.startswith("llama")
    assert _spec_dims(spec, rotary=llama, rms_norm=llama, tied=not llama) == model_dims(preset)


def test_gpt3_175b_parameters():
    L, per_layer, P = _params(96, 12288, 96, 96, 49152, 50257, False)
    assert per_layer == 12 * 12288 ** 2
    assert abs(P - 175e9) / 175e9 < 0.01


def test_recompute_adds_forward_flops(tmp_path):
    dims = model_dims(**SMALL)
    base = LlmConfig(tp=2, pp=2, dp=1, micro_batches=3)
    generate_llm(dims, base, tmp_path / "a")
    generate_llm(dims, LlmConfig(tp=2, pp=2, dp=1, micro_batches=3, recompute=True), tmp_path / "b")
    a, b = _comp_ops(_read_all(tmp_path / "a", 4)), _comp_ops(_read_all(tmp_path / "b", 4))
    L, per_layer, _ = _params(4, 256, 8, 4, 512, 1000, True)
    seqs, s, h = 3, 128, 256
    assert b - a == 2 * L * per_layer * seqs * s + 4 * L * s * s * h * seqs
    assert a == _expected_flops((4, 256, 8, 4, 512, 1024, 128, True), seqs)  # (Megatron pads 1000 to 128 x TP 2)


def _by_group(nodes, groups, rank):
    """Buffer bytes per kind of group ('tp', 'dp') and collective type, checking the rank is in the group: the
    comm_size of all-reduces and reduce-scatters (their input), the gathered output of all-gathers, whose comm_size
    is each rank's contribution (the reference's and Chakra's meaning), so group size x comm_size."""
    out = defaultdict(int)
    for n in nodes:
        if n.type == T.COMM_COLL_NODE:
            members = groups[n.attrs["pg_name"]]
            assert rank in members
            gathered = len(members) if n.attrs["comm_type"] == T.ALL_GATHER else 1
            out[(n.name.split("_")[0], n.attrs["comm_type"])] += n.attrs["comm_size"] * gathered
    return out


@pytest.mark.parametrize("sp", [False, True])
def test_tp_volume(tmp_path, sp):
    tp, pp, dp, M, b = 4, 2, 2, 3, 2
    dims = model_dims(**SMALL)
    generate_llm(dims, LlmConfig(tp=tp, pp=pp, dp=dp, micro_batches=M, micro_batch_size=b, sequence_parallel=sp),
                 tmp_path / "t")
    groups = json.loads((tmp_path / "t.groups.json").read_text())
    act = b * 128 * 256 * 2  # b*s*h bf16 bytes
    layers_per_stage = 4 // pp
    for rank, nodes in enumerate(_read_all(tmp_path / "t", tp * pp * dp)):
        vol = _by_group(nodes, groups, rank)
        if not sp:
            # Megatron: 2 all-reduces forward + 2 backward per layer per micro-batch, and on the last stage the LM
            # head's input gradient (Megatron's output layer, allreduce_dgrad: test_async_tp_allreduce.py)
            head = 1 if rank >= tp * dp * (pp - 1) else 0
            # and on the first stage the vocabulary-parallel embedding's output (test_embedding_tp.py)
            emb = 1 if rank < tp * dp else 0
            assert vol[("tp", T.ALL_REDUCE)] == (4 * layers_per_stage + head + emb) * M * act
            assert ("tp", T.ALL_GATHER) not in vol
        else:
            # sequence parallel: each all-reduce becomes reduce-scatter + all-gather of the same tensor; Megatron
            # (and Transformer Engine) also all-gather the QKV and FC1 inputs again in backward for the weight
            # gradients (only the local shard is saved): 2 more all-gathers per layer and micro-batch
            # the last stage's LM head (a column-parallel linear): its input gathered in forward, again in backward
            # for its wgrad, and its input gradient reduce-scattered (test_llm_head_sp.py)
            head = 1 if rank >= tp * dp * (pp - 1) else 0
            # the first stage's embedding (learned positions: Megatron all-reduces its output, splits it along the
            # sequence, and all-gathers the gradient in backward; test_embedding_tp.py)
            emb = 1 if rank < tp * dp else 0
            assert vol[("tp", T.REDUCE_SCATTER)] == (4 * layers_per_stage + head) * M * act
            assert vol[("tp", T.ALL_GATHER)] == ((4 + 2) * layers_per_stage + 2 * head + emb) * M * act
            # and once a step the norms' gradients are all-reduced over TP before the optimizer (Megatron's
            # finalize_model_grads; LayerNorm weight and bias, 2 x 256 each, two a layer, the final one with the head):
            # fp32 main gradients (test_llm_norm_params.py)
            assert vol[("tp", T.ALL_REDUCE)] == (2 * 512 * layers_per_stage + 512 * head) * 4 + emb * M * act
            by_id = {n.id: n for n in nodes}
            wgrads = [n for n in nodes if str(n.attrs.get("label", "")).endswith((".qkv.wgrad", ".fc1.wgrad"))]
            assert len(wgrads) == 2 * layers_per_stage * M
            for w in wgrads:
                regather = [by_id[i].name for i in w.data_deps if by_id[i].name.endswith(".regather")]
                assert len(regather) == 1 and regather[0].startswith("tp_ag.")
        sizes = {(n.attrs["comm_type"], n.attrs["comm_size"]) for n in nodes
                 if n.type == T.COMM_COLL_NODE and n.name.startswith("tp") and n.name != "tp_ar.norm_grads"}
        # an all-gather's comm_size is this rank's shard of the activation, b*s*h/TP
        embedding = {(T.ALL_REDUCE, act)} if sp and rank < tp * dp else set()
        assert sizes == ({(T.REDUCE_SCATTER, act), (T.ALL_GATHER, act // tp)} | embedding if sp
                         else {(T.ALL_REDUCE, act)})


def test_pp_sends_and_receives(tmp_path):
    tp, pp, dp, M, b = 2, 4, 2, 5, 1
    dims = model_dims(**SMALL)
    generate_llm(dims, LlmConfig(tp=tp, pp=pp, dp=dp, micro_batches=M, micro_batch_size=b), tmp_path / "t")
    ranks = _read_all(tmp_path / "t", tp * pp * dp)
    act = b * 128 * 256 * 2
    sends, recvs = [], []
    for rank, nodes in enumerate(ranks):
        stage = rank // (tp * dp)
        s = [n for n in nodes if n.type == T.COMM_SEND_NODE]
        r = [n for n in nodes if n.type == T.COMM_RECV_NODE]
        # activations forward to the next stage, gradients back to the previous one: M of each per boundary
        assert len(s) == M * ((stage < pp - 1) + (stage > 0))
        assert len(r) == len(s)
        assert sum(n.attrs["comm_size"] for n in s) == len(s) * act
        for n in s:
            assert n.attrs["comm_src"] == rank and abs(n.attrs["comm_dst"] - rank) == tp * dp
            sends.append((n.attrs["comm_src"], n.attrs["comm_dst"], n.attrs["comm_tag"], n.attrs["comm_size"]))
        for n in r:
            assert n.attrs["comm_dst"] == rank
            recvs.append((n.attrs["comm_src"], n.attrs["comm_dst"], n.attrs["comm_tag"], n.attrs["comm_size"]))
    assert sorted(sends) == sorted(recvs) and len(set(sends)) == len(sends)


def test_pp_scatter_gather(tmp_path):
    """--pp-scatter-gather (Megatron-LM 2021, TP without SP): each TP rank sends 1/TP of the boundary tensor, and
    the receiving stage all-gathers the whole b*s*h over TP before its first node."""
    tp, pp, dp, M, b = 2, 2, 1, 3, 1
    dims = model_dims(**SMALL)
    generate_llm(dims, LlmConfig(tp=tp, pp=pp, dp=dp, micro_batches=M, micro_batch_size=b, pp_scatter_gather=True),
                 tmp_path / "t")
    act = b * 128 * 256 * 2
    groups = json.loads((tmp_path / "t.groups.json").read_text())
    for rank, nodes in enumerate(_read_all(tmp_path / "t", tp * pp * dp)):
        by_id = {n.id: n for n in nodes}
        sends = [n for n in nodes if n.type == T.COMM_SEND_NODE]
        recvs = [n for n in nodes if n.type == T.COMM_RECV_NODE]
        assert len(sends) == len(recvs) == M and {n.attrs["comm_size"] for n in sends + recvs} == {act // tp}
        gathers = [n for n in nodes if n.name.startswith("tp_ag.recv_")]
        assert len(gathers) == M
        for g in gathers:  # after its receive; the whole tensor gathered over the rank's TP group
            (recv,) = [by_id[i] for i in g.data_deps]
            assert recv.type == T.COMM_RECV_NODE and g.name == f"tp_ag.{recv.name}"
            assert g.attrs["comm_size"] * tp == act and len(groups[g.attrs["pg_name"]]) == tp
            # the stage's first compute waits for the gather, not the bare receive
            first = next(n for n in nodes if g.id in n.data_deps)
            assert first.type == T.COMP_NODE and recv.id not in first.data_deps
    sys_cfg = write_system_config(tmp_path / "sys.json", dims=1)
    net = write_network_config(tmp_path / "net.yml", npus=(4,))
    report = simulate(tmp_path / "t", sys_cfg, net, None, tmp_path / "t.groups.json", plugins=PLUGINS)
    assert report.warnings == [] and report.max_finish_ns > 0  # every piece met its receive: no deadlock
    for kw in (dict(tp=1, pp=2), dict(tp=2, pp=1), dict(tp=2, pp=2, sequence_parallel=True)):
        with pytest.raises(ConfigError, match="--pp-scatter-gather needs"):
            generate_llm(dims, LlmConfig(pp_scatter_gather=True, **kw), tmp_path / "x", write=False)


def test_1f1b_order(tmp_path):
    """Stage p runs pp-p-1 warm-up forwards, then alternates, then drains backwards."""
    dims = model_dims(**SMALL)
    generate_llm(dims, LlmConfig(pp=4, micro_batches=6), tmp_path / "t")
    for stage in range(4):
        nodes = read_rank_nodes(tmp_path / 't', stage)
        seq = []
        for n in nodes:
            label = n.attrs.get("label", "")
            if n.type == T.COMP_NODE and ".qkv" in label and not label.endswith("wgrad"):
                kind = "F" if label.startswith("fwd") else "B"
                mb = int(label.split(".mb")[1].split(".")[0])
                if not seq or seq[-1] != (kind, mb):
                    seq.append((kind, mb))
        w = 4 - stage - 1
        expect = [("F", i) for i in range(w)]
        for i in range(6 - w):
            expect += [("F", w + i), ("B", i)]
        expect += [("B", i) for i in range(6 - w, 6)]
        assert seq == expect


@pytest.mark.parametrize("zero", [0, 1, 2])
def test_dp_and_zero_volume(tmp_path, zero):
    tp, pp, dp = 2, 2, 4
    spec = (4, 256, 8, 4, 512, 1000, 128, True)
    dims = _spec_dims(spec)
    generate_llm(dims, LlmConfig(tp=tp, pp=pp, dp=dp, micro_batches=2, zero=zero), tmp_path / "t")
    groups = json.loads((tmp_path / "t.groups.json").read_text())
    L, per_layer, _ = _params(4, 256, 8, 4, 512, 1000, True)
    vocab_h = (1024 if zero < 2 else 1000) * 256  # (Megatron pads 1000 to a multiple of 128 x TP 2; DeepSpeed not)
    for rank, nodes in enumerate(_read_all(tmp_path / "t", tp * pp * dp)):
        stage = rank // (tp * dp)
        # stage parameters: its layers, plus the embedding (first) or LM head (last); this rank's TP shard of
        # them, and the norms' weights whole (LayerNorm: weight and bias, 2 x 256, two a layer; the final one with
        # the head), and on the first stage the learned position table whole (128 x 256: no rotary flag, Megatron's
        # default learned_absolute), bf16 gradients
        norms = (L // pp) * 2 * 512 + (512 if stage == pp - 1 else 0)
        positions = 128 * 256 if stage == 0 else 0
        expected = (((L // pp) * per_layer + vocab_h) // tp + norms + positions) * 2
        vol = _by_group(nodes, groups, rank)
        if zero:
            assert vol[("dp", T.REDUCE_SCATTER)] == vol[("dp", T.ALL_GATHER)] == expected
            assert ("dp", T.ALL_REDUCE) not in vol
            # each bucket's all-gather contributes this rank's 1/DP of what its reduce-scatter reduced
            sizes = {(n.name.split(".", 1)[1], n.attrs["comm_type"]): n.attrs["comm_size"] for n in nodes
                     if n.type == T.COMM_COLL_NODE and n.name.startswith("dp")}
            buckets = {label for label, _ in sizes}
            assert buckets and all(sizes[(b, T.ALL_GATHER)] == -(-sizes[(b, T.REDUCE_SCATTER)] // dp)
                                   for b in buckets)
        else:
            assert vol[("dp", T.ALL_REDUCE)] == expected
        for n in nodes:
            if n.type == T.COMM_COLL_NODE and n.name.startswith("dp"):
                assert sorted(groups[n.attrs["pg_name"]]) == [rank % tp + tp * d + tp * dp * stage for d in range(dp)]


def test_groups_layout(tmp_path):
    generate_llm(model_dims(**SMALL), LlmConfig(tp=2, pp=2, dp=2, micro_batches=2), tmp_path / "t")
    groups = json.loads((tmp_path / "t.groups.json").read_text())
    assert groups == {"1": [0, 1], "2": [2, 3], "3": [4, 5], "4": [6, 7],          # TP (fastest)
                      "5": [0, 2], "6": [1, 3], "7": [4, 6], "8": [5, 7],          # DP
                      "9": [0, 4], "10": [1, 5], "11": [2, 6], "12": [3, 7]}       # PP


def test_compute_node_fields(tmp_path):
    generate_llm(model_dims(**SMALL), LlmConfig(tp=2, micro_batches=1, tflops=100), tmp_path / "t")
    nodes = read_rank_nodes(tmp_path / 't', 0)
    mm = next(n for n in nodes if n.name == "aten::mm")
    assert mm.inputs_shapes == "[[128, 256], [256, 256]]"  # qkv: h + 2*kv*d = 512, / tp 2
    assert mm.inputs_types == "['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)']"
    assert mm.attrs["num_ops"] == 2 * 128 * 256 * 256
    assert mm.attrs["tensor_size"] == (128 * 256 + 256 * 256 + 128 * 256) * 2
    assert mm.duration_micros == max(1, round(mm.attrs["num_ops"] / 100e12 * 1e6))
    assert any(n.name == "aten::_scaled_dot_product_flash_attention" for n in nodes)


def test_cli_and_simulation(tmp_path):
    prefix = tmp_path / "out" / "g"
    args = ["workload", "llm", "--layers", "4", "--hidden", "256", "--heads", "8", "--kv-heads", "4",
            "--ffn-hidden", "512", "--vocab", "1000", "--seq-len", "128", "--gated", "--tp", "2", "--pp", "2",
            "--dp", "2", "--micro-batches", "4", "--micro-batch-size", "1", "--sequence-parallel", "--zero", "1",
            "--recompute", "-o", str(prefix)]
    assert main(args) == 0
    sys_cfg = write_system_config(tmp_path / "sys.json", dims=1)
    net = write_network_config(tmp_path / "net.yml", npus=(8,))
    report = simulate(prefix, sys_cfg, net, None, f"{prefix}.groups.json", plugins=PLUGINS)
    assert len(report.ranks) == 8 and report.max_finish_ns > 0
    rc = main(["run", "-p", "network_analytical", "-p", "workload_generators", "--workload-configuration",
               str(prefix), "--system-configuration", sys_cfg, "--network-configuration", net,
               "--comm-group-configuration", f"{prefix}.groups.json", "-q"])
    assert rc == 0


def test_preset_simulates(tmp_path):
    assert main(["workload", "llm", "--preset", "gpt3-13b", "--tp", "2", "--pp", "2", "--dp", "2",
                 "--micro-batches", "4", "--micro-batch-size", "1", "-o", str(tmp_path / "g")]) == 0
    sys_cfg = write_system_config(tmp_path / "sys.json", dims=1)
    net = write_network_config(tmp_path / "net.yml", npus=(8,))
    report = simulate(tmp_path / "g", sys_cfg, net, None, str(tmp_path / "g.groups.json"), plugins=PLUGINS)
    assert report.max_finish_ns > 0


def test_errors(tmp_path, capsys):
    with pytest.raises(ConfigError, match="not divisible by --pp"):
        generate_llm(model_dims(**SMALL), LlmConfig(pp=3), tmp_path / "t")
    with pytest.raises(ConfigError, match="--tp"):
        generate_llm(model_dims(**SMALL), LlmConfig(tp=8), tmp_path / "t")
    with pytest.raises(ConfigError, match="unknown preset"):
        model_dims("gpt5")
    assert main(["workload", "llm", "--hidden", "64", "-o", str(tmp_path / "x")]) == 2
    assert "missing" in capsys.readouterr().err


def test_groups_roles_file_names_every_group(tmp_path):
    """PREFIX.groups.roles.json gives each group of PREFIX.groups.json its role (the breakdown's names)."""
    from astra_workload_generators.llm import comm_groups

    cfg = LlmConfig(tp=2, pp=2, dp=2, micro_batches=2)
    generate_llm(model_dims(layers=2, hidden=256, heads=4, kv_heads=4, ffn_hidden=1024, vocab=1000, seq_len=128),
                 cfg, tmp_path / "t")
    groups = json.loads((tmp_path / "t.groups.json").read_text())
    roles = json.loads((tmp_path / "t.groups.roles.json").read_text())
    assert set(roles) == set(groups)
    ids, _ = comm_groups(cfg)
    for role, by_key in ids.items():
        for gid in by_key.values():
            assert roles[str(gid)] == role
    assert sorted(set(roles.values())) == ["dp", "pp", "tp"]
