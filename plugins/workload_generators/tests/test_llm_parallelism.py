"""``astra workload llm``: ZeRO-3/FSDP, context parallelism and interleaved 1F1B. Volumes, counts and schedules are
derived here independently of the generator, and every feature is simulated end to end (a deadlock raises)."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from astra_workload_compact import read_rank_nodes
from astra_sim.chakra import encode_et, read_et, types as T
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim.simulation import simulate
from astra_sim_testing import write_network_config, write_system_config

from astra_workload_generators.llm import LlmConfig, generate_llm, model_dims

PLUGINS = ["network_analytical", "workload_generators"]
# L, h, heads, kv, ffn, vocab, seq; gated
# VOCAB: a multiple of 128 x TP (TP <= 8), which Megatron's padding of the vocabulary leaves as it is
L, H, HEADS, KV, FFN, VOCAB, S = 8, 256, 8, 4, 512, 1024, 128
SMALL = dict(layers=L, hidden=H, heads=HEADS, kv_heads=KV, ffn_hidden=FFN, vocab=VOCAB, seq_len=S, gated=True)
BYTES = 2  # bf16


def _layer_params():
    d = H // HEADS
    return 2 * H * H + 2 * H * KV * d + 3 * H * FFN  # Wq, Wo, Wk+Wv, gated FFN


def _norms(stage, pp):
    """The stage's parameters whole on every TP rank: each layer's two LayerNorms (weight and bias, 2 x H each),
    the final one on the last stage (test_llm_norm_params.py), and the learned position table (S x H: no rotary
    flag, Megatron's default learned_absolute) on the first (the gated model has no linear biases)."""
    return L // pp * 4 * H + (2 * H if stage == pp - 1 else 0) + (S * H if stage == 0 else 0)


def _flops(sequences):
    P = L * _layer_params() + VOCAB * H
    return 6 * P * sequences * S + 12 * L * S * S * H * sequences


def _gen(tmp_path, name="t", **cfg):
    cfg = LlmConfig(**cfg)
    generate_llm(model_dims(**SMALL), cfg, tmp_path / name)
    groups = json.loads((tmp_path / f"{name}.groups.json").read_text())
    return cfg, groups, [read_rank_nodes(tmp_path / name, r) for r in range(cfg.npus)]


def _vol(nodes, groups, rank):
    out = defaultdict(int)
    for n in nodes:
        if n.type == T.COMM_COLL_NODE:
            members = groups[n.attrs["pg_name"]]
            assert rank in members
            # an all-gather's comm_size is each rank's contribution: count the gathered output
            gathered = len(members) if n.attrs["comm_type"] == T.ALL_GATHER else 1
            out[(n.name.split("_")[0], n.attrs["comm_type"])] += n.attrs["comm_size"] * gathered
    return out


def _simulate(tmp_path, name, npus):
    sys_cfg = write_system_config(tmp_path / "sys.json", dims=1)
    net = write_network_config(tmp_path / "net.yml", npus=(npus,))
    report = simulate(tmp_path / name, sys_cfg, net, None, str(tmp_path / f"{name}.groups.json"), plugins=PLUGINS)
    assert len(report.ranks) == npus and report.max_finish_ns > 0
    return report


# ------------------------------------------------------------------------------------------------ ZeRO-3 / FSDP
def test_zero3_volume_and_reuse(tmp_path):
    tp, pp, dp, M = 2, 2, 4, 3
    cfg, groups, ranks = _gen(tmp_path, tp=tp, pp=pp, dp=dp, micro_batches=M, zero=3)
    per_stage = L // pp
    for rank, nodes in enumerate(ranks):
        stage = rank // (tp * dp)
        stage_params = per_stage * _layer_params() + VOCAB * H  # + embedding (first) or LM head (last)
        shard = (stage_params // tp + _norms(stage, pp)) * BYTES
        vol = _vol(nodes, groups, rank)
        # gathered once before forward and once before backward per step (reused by all M micro-batches),
        # gradients reduce-scattered once; no all-reduce, no post-step parameter all-gather
        assert vol[("dp", T.ALL_GATHER)] == 2 * shard
        assert vol[("dp", T.REDUCE_SCATTER)] == shard
        assert ("dp", T.ALL_REDUCE) not in vol
        ags = [n for n in nodes if n.type == T.COMM_COLL_NODE and n.attrs["comm_type"] == T.ALL_GATHER
               and n.name.startswith("dp")]
        assert len(ags) == 2 * (per_stage + 1)  # per unit (layer, embedding/head): forward + backward
        # every layer's first forward (mb 0) and first backward compute wait on that layer's gather
        by_id = {n.id: n for n in nodes}
        for layer in range(stage * per_stage, (stage + 1) * per_stage):
            for label in (f"fwd.l{layer}.mb0.qkv", f"bwd.l{layer}.mb0.fc2.dgrad"):
                node = next(n for n in nodes if n.attrs.get("label") == label)
                gathers = [by_id[i].name for i in node.data_deps if by_id[i].type == T.COMM_COLL_NODE]
                assert f"dp_ag.l{layer}.{label[:3]}" in gathers
        for n in nodes:
            if n.type == T.COMM_COLL_NODE and n.name.startswith("dp"):
                assert sorted(groups[n.attrs["pg_name"]]) == [rank % tp + tp * d + tp * dp * stage for d in range(dp)]


@pytest.mark.parametrize("every", [False, True])
def test_zero3_reshard_after_forward_gathers_every_micro_batch(tmp_path, every):
    # FSDP FULL_SHARD / DeepSpeed ZeRO-3: each unit gathered before every micro-batch's forward and backward;
    # with --grad-sync-every-micro-batch its gradients are reduce-scattered after every micro-batch too
    tp, pp, dp, M = 2, 2, 4, 3
    cfg, groups, ranks = _gen(tmp_path, tp=tp, pp=pp, dp=dp, micro_batches=M, zero=3, reshard_after_forward=True,
                              grad_sync_every_micro_batch=every)
    per_stage = L // pp
    for rank, nodes in enumerate(ranks):
        stage = rank // (tp * dp)
        shard = ((per_stage * _layer_params() + VOCAB * H) // tp + _norms(stage, pp)) * BYTES
        vol = _vol(nodes, groups, rank)
        assert vol[("dp", T.ALL_GATHER)] == 2 * M * shard
        assert vol[("dp", T.REDUCE_SCATTER)] == (M if every else 1) * shard
        ags = [n for n in nodes if n.type == T.COMM_COLL_NODE and n.attrs["comm_type"] == T.ALL_GATHER]
        assert len(ags) == 2 * M * (per_stage + 1)
        by_id = {n.id: n for n in nodes}
        for mb in range(M):
            for layer in range(stage * per_stage, (stage + 1) * per_stage):
                for label in (f"fwd.l{layer}.mb{mb}.qkv", f"bwd.l{layer}.mb{mb}.fc2.dgrad"):
                    node = next(n for n in nodes if n.attrs.get("label") == label)
                    gathers = [by_id[i].name for i in node.data_deps if by_id[i].type == T.COMM_COLL_NODE]
                    assert f"dp_ag.l{layer}.{label[:3]}.mb{mb}" in gathers
            rs = [n.name for n in nodes if n.type == T.COMM_COLL_NODE and n.name.endswith(f".mb{mb}")
                  and n.name.startswith("dp_rs")]
            assert len(rs) == ((per_stage + 1) if every else 0)
    _simulate(tmp_path, "t", cfg.npus)


@pytest.mark.parametrize("zero", [0, 1])
def test_grad_sync_every_micro_batch(tmp_path, zero):
    tp, pp, dp, M = 2, 2, 2, 3
    cfg, groups, ranks = _gen(tmp_path, tp=tp, pp=pp, dp=dp, micro_batches=M, zero=zero,
                              grad_sync_every_micro_batch=True)
    _, _, once = _gen(tmp_path, "o", tp=tp, pp=pp, dp=dp, micro_batches=M, zero=zero)
    for rank, nodes in enumerate(ranks):
        shard = ((L // pp * _layer_params() + VOCAB * H) // tp + _norms(rank // (tp * dp), pp)) * BYTES
        vol, base = _vol(nodes, groups, rank), _vol(once[rank], groups, rank)
        if zero:  # reduce-scattered M times, the updated parameters gathered once
            assert vol[("dp", T.REDUCE_SCATTER)] == M * shard == M * base[("dp", T.REDUCE_SCATTER)]
            assert vol[("dp", T.ALL_GATHER)] == shard == base[("dp", T.ALL_GATHER)]
        else:
            assert vol[("dp", T.ALL_REDUCE)] == M * shard == M * base[("dp", T.ALL_REDUCE)]
    t_every = _simulate(tmp_path, "t", cfg.npus).max_finish_ns
    assert t_every >= _simulate(tmp_path, "o", cfg.npus).max_finish_ns


def test_reshard_and_every_micro_batch_options_are_checked(tmp_path):
    for kw, match in [(dict(reshard_after_forward=True, zero=1), "--reshard-after-forward is for training with "
                                                                 "--zero 3"),
                      (dict(reshard_after_forward=True, zero=3, mode="prefill"), "--reshard-after-forward"),
                      (dict(grad_sync_every_micro_batch=True, mode="decode"), "--grad-sync-every-micro-batch")]:
        with pytest.raises(ConfigError, match=match):
            generate_llm(model_dims(**SMALL), LlmConfig(**kw), tmp_path / "x", write=False)
    prefix = tmp_path / "cli" / "g"
    assert main(["workload", "llm", "--layers", "2", "--hidden", "256", "--heads", "8", "--vocab", "1000",
                 "--seq-len", "128", "--dp", "2", "--micro-batches", "2", "--zero", "3", "--reshard-after-forward",
                 "--grad-sync-every-micro-batch", "-o", str(prefix)]) == 0
    names = [n.name for n in read_rank_nodes(prefix, 0)]
    assert "dp_ag.l1.bwd.mb1" in names and "dp_rs.l1.mb1" in names


def test_zero3_flops_unchanged_and_simulates(tmp_path):
    _, _, base = _gen(tmp_path, "a", tp=2, pp=2, dp=2, micro_batches=2)
    _, _, z3 = _gen(tmp_path, "z", tp=2, pp=2, dp=2, micro_batches=2, zero=3, recompute=True,
                    sequence_parallel=True)
    ops = lambda ranks, tag: sum(n.attrs["num_ops"] for r in ranks for n in r
                                 if n.type == T.COMP_NODE and not n.attrs["label"].startswith(tag))
    assert ops(base, "-") == ops(z3, "recompute") == _flops(2 * 2)
    _simulate(tmp_path, "z", 8)


# ------------------------------------------------------------------------------------------------ context parallel
def test_cp_groups_layout(tmp_path):
    tp, cp, dp = 2, 2, 2
    cfg, groups, _ = _gen(tmp_path, tp=tp, cp=cp, dp=dp, micro_batches=1)
    assert cfg.npus == 8
    members = sorted(groups.values())
    rank = lambda t, c, d: t + tp * (c + cp * d)  # rank = t + TP*(c + CP*(d + DP*p))
    for d in range(dp):
        for c in range(cp):
            assert [rank(t, c, d) for t in range(tp)] in members                 # TP
    for t in range(tp):
        for c in range(cp):
            assert [rank(t, c, d) for d in range(dp)] in members                 # DP
        for d in range(dp):
            assert [rank(t, c, d) for c in range(cp)] in members                 # CP
        assert sorted(rank(t, c, d) for c in range(cp) for d in range(dp)) in [sorted(m) for m in members]  # DPxCP
    assert len(groups) == 4 + 4 + 4 + 2


@pytest.mark.parametrize("recompute", [False, True])
def test_cp_ring_volume_and_grads(tmp_path, recompute):
    tp, pp, dp, cp, M, b = 2, 2, 2, 4, 2, 2
    cfg, groups, ranks = _gen(tmp_path, tp=tp, pp=pp, dp=dp, cp=cp, micro_batches=M, micro_batch_size=b,
                              recompute=recompute)
    d = H // HEADS
    kv_chunk = 2 * b * (S // cp) * (KV // tp) * d * BYTES  # this rank's K and V chunk (its kv/TP heads)
    per_stage = L // pp
    sends, recvs = [], []
    for rank, nodes in enumerate(ranks):
        t, c = rank % tp, (rank // tp) % cp
        dd, p = (rank // (tp * cp)) % dp, rank // (tp * cp * dp)
        ring = [n for n in nodes if n.type == T.COMM_SEND_NODE and n.name.startswith("cp_")]
        rring = [n for n in nodes if n.type == T.COMM_RECV_NODE and n.name.startswith("cp_")]
        # per layer per micro-batch: CP-1 ring steps forward (K,V), again in recomputation, CP-1 backward (dK,dV)
        assert len(ring) == len(rring) == (3 if recompute else 2) * per_stage * M * (cp - 1)
        assert {n.attrs["comm_size"] for n in ring + rring} == {kv_chunk}
        nxt = t + tp * ((c + 1) % cp + cp * (dd + dp * p))
        for n in ring:
            assert n.attrs["comm_src"] == rank and n.attrs["comm_dst"] == nxt
        for n in nodes:
            if n.type in (T.COMM_SEND_NODE, T.COMM_RECV_NODE):
                (sends if n.type == T.COMM_SEND_NODE else recvs).append(
                    (n.attrs["comm_src"], n.attrs["comm_dst"], n.attrs["comm_tag"], n.attrs["comm_size"]))
        vol = _vol(nodes, groups, rank)
        # TP collectives and PP activations carry the local sequence chunk s/CP
        tp_sizes = {n.attrs["comm_size"] for n in nodes if n.type == T.COMM_COLL_NODE and n.name.startswith("tp")}
        assert tp_sizes == {b * (S // cp) * H * BYTES}
        # gradients all-reduced over DP x CP (the stage's params / TP, and its norms')
        assert vol[("dpcp", T.ALL_REDUCE)] == ((per_stage * _layer_params() + VOCAB * H) // tp + _norms(p, pp)) * BYTES
        for n in nodes:
            if n.name.startswith("dpcp"):
                assert len(groups[n.attrs["pg_name"]]) == dp * cp
    assert sorted(sends) == sorted(recvs) and len(set(sends)) == len(sends)


@pytest.mark.parametrize("cp,tp,pp,dp", [(2, 2, 2, 1), (4, 1, 1, 2)])
def test_cp_flops_equal_and_simulates(tmp_path, cp, tp, pp, dp):
    _, _, base = _gen(tmp_path, "a", tp=tp, pp=pp, dp=dp, micro_batches=2)
    _, _, ctx = _gen(tmp_path, "c", tp=tp, pp=pp, dp=dp, cp=cp, micro_batches=2, zero=1)
    ops = lambda ranks: sum(n.attrs["num_ops"] for r in ranks for n in r if n.type == T.COMP_NODE)
    assert abs(ops(ctx) - ops(base)) / ops(base) < 0.01
    assert abs(ops(ctx) - _flops(dp * 2)) / _flops(dp * 2) < 0.01
    _simulate(tmp_path, "c", tp * pp * dp * cp)


# ------------------------------------------------------------------------------------------------ interleaved 1F1B
def _order(nodes, per_chunk, pp):
    """[(F/B, chunk, mb)] from the QKV (forward) / QKV dgrad (backward) labels of each chunk's first layer."""
    seq = []
    for n in nodes:
        label = n.attrs.get("label", "")
        if n.type == T.COMP_NODE and label.endswith(".qkv") or label.endswith(".qkv.dgrad"):
            kind, layer, mb = label.split(".")[:3]
            if kind == "recompute":
                continue
            layer, mb = int(layer[1:]), int(mb[2:])
            chunk = (layer // per_chunk) // pp
            item = ("F" if kind == "fwd" else "B", chunk, mb)
            if not seq or seq[-1] != item:
                seq.append(item)
    return seq


def test_interleaved_schedule(tmp_path):
    """P=2, V=2, M=4 written out by hand from Megatron's interleaved schedule: rank p warms up with
    (P-p-1)*2 + (V-1)*P forwards; forwards cycle chunk 0 for P micro-batches, then chunk 1, ...; backwards the
    same starting from the last chunk."""
    _, _, ranks = _gen(tmp_path, pp=2, virtual_stages=2, micro_batches=4)
    F = lambda c, m: ("F", c, m)
    B = lambda c, m: ("B", c, m)
    expect0 = [F(0, 0), F(0, 1), F(1, 0), F(1, 1),
               F(0, 2), B(1, 0), F(0, 3), B(1, 1), F(1, 2), B(0, 0), F(1, 3), B(0, 1),
               B(1, 2), B(1, 3), B(0, 2), B(0, 3)]
    expect1 = [F(0, 0), F(0, 1),
               F(1, 0), B(1, 0), F(1, 1), B(1, 1), F(0, 2), B(0, 0), F(0, 3), B(0, 1), F(1, 2), B(1, 2),
               F(1, 3), B(1, 3),
               B(0, 2), B(0, 3)]
    per_chunk = L // 4
    assert _order(ranks[0], per_chunk, 2) == expect0
    assert _order(ranks[1], per_chunk, 2) == expect1
    # rank p holds the layers of virtual stages p, p+P: layers {0,1,4,5} on rank 0, {2,3,6,7} on rank 1
    for p, nodes in enumerate(ranks):
        layers = {int(n.attrs["label"].split(".")[1][1:]) for n in nodes
                  if n.type == T.COMP_NODE and ".l" in n.attrs["label"]
                  and n.attrs["label"].split(".")[1][1:].isdigit()}  # (not the final norm's ".ln")
        assert layers == {l for l in range(L) if (l // per_chunk) % 2 == p}


@pytest.mark.parametrize("tp,dp,cp,zero", [(1, 1, 1, 0), (2, 1, 2, 3)])
def test_interleaved_p2p_count_flops_and_simulates(tmp_path, tp, dp, cp, zero):
    pp, V, M, b = 4, 2, 4, 1
    _, _, base = _gen(tmp_path, "a", tp=tp, pp=pp, dp=dp, cp=cp, micro_batches=M, zero=zero)
    cfg, groups, ranks = _gen(tmp_path, "i", tp=tp, pp=pp, dp=dp, cp=cp, micro_batches=M, zero=zero,
                              virtual_stages=V)
    act = b * (S // cp) * H * BYTES
    stride = tp * cp * dp
    sends, recvs = [], []
    for rank, nodes in enumerate(ranks):
        p = rank // stride
        s = [n for n in nodes if n.type == T.COMM_SEND_NODE and not n.name.startswith("cp_")]
        r = [n for n in nodes if n.type == T.COMM_RECV_NODE and not n.name.startswith("cp_")]
        # each of the V chunks sends M activations forward and M gradients back, except at the model's ends
        # (virtual stage 0 on rank 0 has no predecessor, virtual stage P*V-1 on rank P-1 no successor)
        assert len(s) == len(r) == 2 * V * M - M * (p == 0) - M * (p == pp - 1)
        assert {n.attrs["comm_size"] for n in s} == {act}
        for n in s:  # neighbours in the ring of pipeline ranks (rank P-1 forwards into rank 0's next chunk)
            peer = n.attrs["comm_dst"]
            assert (peer // stride - p) % pp in (1, pp - 1) and peer % stride == rank % stride
        for n in s + r:
            (sends if n in s else recvs).append(
                (n.attrs["comm_src"], n.attrs["comm_dst"], n.attrs["comm_tag"], n.attrs["comm_size"]))
    assert sorted(sends) == sorted(recvs) and len(set(sends)) == len(sends)
    ops = lambda rs: sum(n.attrs["num_ops"] for r in rs for n in r if n.type == T.COMP_NODE)
    assert ops(ranks) == ops(base)
    assert abs(ops(ranks) - _flops(dp * M * b)) / _flops(dp * M * b) < 0.01
    _simulate(tmp_path, "i", cfg.npus)


def test_cli_and_errors(tmp_path):
    prefix = tmp_path / "g"
    args = ["workload", "llm", "--layers", "8", "--hidden", "256", "--heads", "8", "--kv-heads", "4",
            "--ffn-hidden", "512", "--vocab", "1000", "--seq-len", "128", "--gated", "--pp", "2", "--cp", "2",
            "--virtual-stages", "2", "--micro-batches", "2", "--zero", "3", "-o", str(prefix)]
    assert main(args) == 0
    # the compact workload: one trace per class (CP positions are symmetric: one per pipeline stage)
    assert sorted(p.name for p in tmp_path.glob("g.*")) == ["g.class0.et", "g.class1.et", "g.groups.json",
                                                            "g.groups.roles.json", "g.workload.json"]
    assert main(args + ["--per-rank-files", "-o", str(tmp_path / "f")]) == 0
    assert len(list(tmp_path.glob("f.*.et"))) == 4
    for rank in range(4):
        assert encode_et(None, read_rank_nodes(prefix, rank)) == encode_et(None, read_et(f"{tmp_path}/f.{rank}.et").nodes)
    dims = model_dims(**SMALL)
    for cfg, match in [(LlmConfig(pp=2, virtual_stages=2, micro_batches=3), "multiple of --pp"),
                       (LlmConfig(pp=2, virtual_stages=3, micro_batches=2), "not divisible by --pp x"),
                       (LlmConfig(virtual_stages=2), "--pp >= 2"),
                       (LlmConfig(cp=3), "not divisible by --cp"),
                       (LlmConfig(cp=2, mode="decode"), "--mode train or prefill"),
                       (LlmConfig(cp=8, mode="prefill", prompt_len=100), "prompt len 100 is not divisible by --cp"),
                       (LlmConfig(zero=4), "--zero")]:
        with pytest.raises(ConfigError, match=match):
            generate_llm(dims, cfg, tmp_path / "x", write=False)


def test_interleaving_shrinks_the_bubble(tmp_path):
    """Megatron's point of interleaving: with P=4, M=4 the bubble (P-1)/V forward+backward slots shrinks."""
    dims = model_dims(layers=8, hidden=1024, heads=8, vocab=1000, seq_len=512)
    sys_cfg = write_system_config(tmp_path / "sys.json", dims=1)
    net = write_network_config(tmp_path / "net.yml", npus=(4,))
    finish = {}
    for V in (1, 2):
        generate_llm(dims, LlmConfig(pp=4, micro_batches=4, virtual_stages=V), tmp_path / f"v{V}")
        finish[V] = simulate(tmp_path / f"v{V}", sys_cfg, net, None, str(tmp_path / f"v{V}.groups.json"),
                             plugins=PLUGINS).max_finish_ns
    assert finish[2] < finish[1]


def test_sequence_parallel_p2p_sends_the_tp_shard(tmp_path):
    """With sequence parallelism the stage-boundary activation is split over TP: each TP rank sends b*s*h/TP."""
    tp, pp, M, b = 2, 2, 2, 2
    _, _, ranks = _gen(tmp_path, "sp", tp=tp, pp=pp, micro_batches=M, micro_batch_size=b, sequence_parallel=True)
    _, _, full = _gen(tmp_path, "nosp", tp=tp, pp=pp, micro_batches=M, micro_batch_size=b)
    for nodes, shard in ((ranks, tp), (full, 1)):
        sizes = {n.attrs["comm_size"] for r in nodes for n in r if n.type in (T.COMM_SEND_NODE, T.COMM_RECV_NODE)}
        assert sizes == {b * S * H * BYTES // shard}


@pytest.mark.parametrize("V", [1, 2])
def test_overlap_param_gather(tmp_path, V):
    """--overlap-param-gather: the same ZeRO-1 all-gathers (names, sizes, groups), issued at the step's start in
    forward order (each after the previous), no longer after the optimizer; each unit's first forward waits for
    its own gather; the step gets shorter."""
    kw = dict(tp=2, pp=2, dp=2, micro_batches=4, zero=1, virtual_stages=V)
    _, _, base = _gen(tmp_path, "base", **kw)
    _, _, ranks = _gen(tmp_path, "ovl", overlap_param_gather=True, **kw)
    for rank in range(8):
        ags = lambda nodes: sorted((n.name, n.attrs["comm_size"], n.attrs["pg_name"]) for n in nodes
                                   if n.name.startswith("dp_ag."))
        assert ags(ranks[rank]) == ags(base[rank]) and ags(base[rank])
        nodes = ranks[rank]
        adam = next(n for n in nodes if n.name == "aten::_fused_adam_")
        gathers = [n for n in nodes if n.name.startswith("dp_ag.")]
        assert all(adam.id not in g.data_deps for g in gathers)
        assert gathers[0].data_deps == [] and all(g.data_deps == [p.id] for p, g in zip(gathers, gathers[1:]))
        # forward order: embedding first on stage 0, then the layers in order, head last on the last stage
        units = [g.name[len("dp_ag."):] for g in gathers]
        layer_ids = [int(u[1:]) for u in units if u.startswith("l")]
        assert layer_ids == sorted(layer_ids)
        assert (units[0] == "embedding") == (rank < 4) and (units[-1] == "head") == (rank >= 4)
        for g in gathers:  # the unit's first forward node (mb 0) waits for it
            unit = g.name[len("dp_ag."):]
            waiting = [n for n in nodes if g.id in n.data_deps and n.type == T.COMP_NODE]
            assert waiting, unit
            lab = waiting[0].attrs["label"]
            assert ".mb0" in lab and lab.startswith("fwd."), lab
            if unit.startswith("l"):
                assert f".{unit}." in lab
    sys_cfg = write_system_config(tmp_path / "sys.json", dims=1)
    net = write_network_config(tmp_path / "net.yml", npus=(8,))
    t = {name: simulate(tmp_path / name, sys_cfg, net, None, tmp_path / f"{name}.groups.json",
                        plugins=PLUGINS).max_finish_ns for name in ("base", "ovl")}
    assert t["ovl"] < t["base"]


def test_overlap_param_gather_needs_zero_1_or_2(tmp_path):
    for kw in (dict(zero=0), dict(zero=3), dict(zero=1, mode="prefill")):
        with pytest.raises(ConfigError, match="overlap-param-gather"):
            generate_llm(model_dims(**SMALL), LlmConfig(dp=2, overlap_param_gather=True, **kw), tmp_path / "x")


@pytest.mark.parametrize("tp,recompute,cp", [(2, False, 1), (4, True, 1), (2, False, 2)])
def test_tp_comm_overlap(tmp_path, tp, recompute, cp):
    """--tp-comm-overlap: every sequence-parallel all-gather / reduce-scatter becomes a ring of TP-1 send/recv
    steps of one shard (b*s*h/TP) between TP neighbours, the GEMM runs in TP row chunks (same FLOPs), the RS ring
    accumulates with one add per step; it simulates without deadlock and faster than the blocking collectives."""
    M, b = 2, 2
    kw = dict(tp=tp, pp=2, dp=1, cp=cp, micro_batches=M, micro_batch_size=b, sequence_parallel=True,
              recompute=recompute)
    cfg, _, base = _gen(tmp_path, "base", **kw)
    _, _, ranks = _gen(tmp_path, "ovl", tp_comm_overlap=True, **kw)
    shard = b * (S // cp) * H * BYTES // tp
    layers_per_stage = L // 2
    passes = 3 if recompute else 2  # forward, (recomputed forward), backward
    for rank, nodes in enumerate(ranks):
        # the only TP collectives left are backward's re-gathers of the QKV / FC1 inputs for the weight
        # gradients (Transformer Engine's "bulk" overlap with the dgrad GEMM) and the reduce-scatters of their
        # input gradients (its "bulk" overlap with the wgrad GEMM), 4 per layer and micro-batch
        # (the LM head's, a Megatron ColumnParallelLinear outside Transformer Engine, stay NCCL collectives on the
        # last stage: gather, re-gather and reduce-scatter per micro-batch, test_llm_head_sp.py; and with SP the
        # norms' gradient all-reduce, test_llm_norm_params.py; and the first stage's embedding, not a Transformer
        # Engine module either: learned positions, its output all-reduced and its gradient all-gathered,
        # test_embedding_tp.py)
        colls = [n for n in nodes if n.name.startswith(("tp_ag.", "tp_rs.")) and ".head." not in n.name
                 and ".embedding." not in n.name]
        head = [n for n in nodes if n.name.startswith(("tp_ag.", "tp_rs.")) and ".head." in n.name]
        assert len(head) == (3 * M if rank >= tp * cp else 0)
        emb = [n.name for n in nodes if n.name.startswith(("tp_ag.", "tp_ar.")) and ".embedding." in n.name]
        assert sorted(emb) == (sorted(f"tp_{k}.mb{mb}" for k in ("ag.bwd.embedding", "ar.fwd.embedding")
                                      for mb in range(M)) if rank < tp * cp else [])
        assert len(colls) == 4 * layers_per_stage * M
        assert all(n.name.startswith("tp_ag.bwd.") and n.name.endswith(".regather")
                   or n.name.startswith("tp_rs.bwd.") and n.name.endswith((".attn_in", ".mlp_in")) for n in colls)
        assert any(n.name.startswith(("tp_ag.", "tp_rs.")) and not n.name.endswith(".regather") for n in base[rank])
        flops = lambda ns: sum(n.attrs.get("num_ops", 0) for n in ns if n.type == T.COMP_NODE)
        assert flops(nodes) == flops(base[rank])
        sends = [n for n in nodes if n.name.startswith("tp_send.")]
        recvs = [n for n in nodes if n.name.startswith("tp_recv.")]
        # 4 rings (2 AG + 2 RS) per layer, forward pass and micro-batch, 2 AG rings (FC2's and the projection's
        # dgrad) per layer in the backward, TP-1 steps each
        assert len(sends) == len(recvs) == (4 * (passes - 1) + 2) * (tp - 1) * layers_per_stage * M
        t = rank % tp
        for n in sends:
            assert n.attrs["comm_size"] == shard and n.attrs["comm_src"] == rank
            assert n.attrs["comm_dst"] == rank - t + (t + 1) % tp
        for n in recvs:
            assert n.attrs["comm_dst"] == rank and n.attrs["comm_src"] == rank - t + (t - 1) % tp
        adds = [n for n in nodes if ".rs_add" in n.attrs.get("label", "")]
        assert len(adds) == 2 * (tp - 1) * layers_per_stage * (passes - 1) * M
        qkv = [n for n in nodes if n.attrs.get("label", "").startswith("fwd.l") and ".qkv.c" in n.attrs["label"]]
        assert len(qkv) == tp * layers_per_stage * M
    # each send is matched by exactly one receive (same src, dst, tag, size)
    key = lambda n: (n.attrs["comm_src"], n.attrs["comm_dst"], n.attrs["comm_tag"], n.attrs["comm_size"])
    sends = sorted(key(n) for r in ranks for n in r if n.name.startswith("tp_send."))
    recvs = sorted(key(n) for r in ranks for n in r if n.name.startswith("tp_recv."))
    assert sends == recvs and len(set(sends)) == len(sends)
    sys_cfg = write_system_config(tmp_path / "sys.json", dims=1)
    net = write_network_config(tmp_path / "net.yml", npus=(cfg.npus,))
    t = {name: simulate(tmp_path / name, sys_cfg, net, None, tmp_path / f"{name}.groups.json",
                        plugins=PLUGINS).max_finish_ns for name in ("base", "ovl")}
    assert t["ovl"] < t["base"]


def test_tp_comm_overlap_fp8_gathers_move_fp8(tmp_path):
    """With FP8 GEMMs, Transformer Engine's userbuffers all-gather the FP8-cast GEMM inputs (1 byte per element):
    the forward QKV/FC1 and backward projection/FC2 dgrad rings, and backward's re-gathers for the weight
    gradients. The reduce-scatter rings carry the GEMMs' --dtype partial sums."""
    tp, b = 2, 2
    kw = dict(tp=tp, pp=1, dp=1, micro_batches=1, micro_batch_size=b, sequence_parallel=True, tp_comm_overlap=True)
    elems = b * S * H // tp  # one shard of the b*s*h activation
    for gemm_dtype, ag_bytes in (("same", BYTES), ("fp8", 1)):
        _, _, ranks = _gen(tmp_path, gemm_dtype, gemm_dtype=gemm_dtype, **kw)
        for nodes in ranks:
            ag = [n.attrs["comm_size"] for n in nodes if n.name.startswith("tp_send.ag.")]
            rs = [n.attrs["comm_size"] for n in nodes if n.name.startswith("tp_send.rs.")]
            # (the layers'; the LM head's re-gather stays in --dtype, test_llm_head_sp.py)
            regather = [n.attrs["comm_size"] for n in nodes if n.name.endswith(".regather") and ".head." not in n.name]
            # (the reduce-scatter rings are the forward's; the backward's are bulk reduce-scatters beside the wgrad)
            bulk = [n.attrs["comm_size"] for n in nodes if n.name.startswith("tp_rs.bwd.") and ".head." not in n.name]
            assert len(ag) == 4 * L * (tp - 1) and len(rs) == 2 * L * (tp - 1) and len(regather) == len(bulk) == 2 * L
            assert set(ag) == set(regather) == {elems * ag_bytes}  # (an all-gather's comm_size: one shard)
            assert set(rs) == {elems * BYTES} and set(bulk) == {tp * elems * BYTES}  # (the whole --dtype gradient)


def test_tp_comm_overlap_needs_sequence_parallel(tmp_path):
    for kw in (dict(tp=2), dict(tp=1, sequence_parallel=True)):
        with pytest.raises(ConfigError, match="tp-comm-overlap"):
            generate_llm(model_dims(**SMALL), LlmConfig(tp_comm_overlap=True, **kw), tmp_path / "x")
