"""Time folding with a host ahead of its GPU (:mod:`astra_folding.time_ahead`): the host posts its held receives
early, its position and wake-up drift every period; it is left out of the compared state and run forward at the
jump. Every report field is the run's without ``--time-fold``."""

from __future__ import annotations

import os
import pathlib
import sys
import tempfile
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from astra_sim.chakra import make_node, types as T
from astra_sim.workload.host import Host

from astra_folding import time_ahead
from astra_folding.time_jump import wrap_tag

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (pytest imports test modules by path here)
from test_time_fold import _AlwaysFold, _as_aten_ops, check_exact, write_pipeline  # noqa: E402


@pytest.fixture
def landed(monkeypatch):
    """Counts the jumps that ran a host ahead forward (time_ahead.land)."""
    calls = []
    land = time_ahead.land

    def counting(folder, rank, found, t_l):
        calls.append(rank)
        return land(folder, rank, found, t_l)

    monkeypatch.setattr(time_ahead, "land", counting)
    return calls


def test_the_walk_as_a_function_of_the_trace_is_the_hosts_own():
    """Launches counted along the ops (a CUDA graph once) give each op the launch time the host's walk gives it."""
    graphs = [None, 1, 1, None, 2, 2, 2, None, None, 3, None]
    nodes = {i: make_node(i, f"k{i}", T.COMP_NODE, attrs={} if g is None else {"cuda_graph": g})
             for i, g in enumerate(graphs)}
    nodes[11] = make_node(11, "recv", T.COMM_RECV_NODE, attrs={"comm_src": 1, "comm_size": 8, "comm_tag": 3})
    gpu_ops = (T.COMP_NODE, T.COMM_RECV_NODE)
    host = Host((4_321, 0), nodes, gpu_ops)
    host.held = [11]
    host.walk(4)  # the host is somewhere along its walk
    walk = time_ahead.Walk(SimpleNamespace(host=host, nodes=nodes, rank=0))
    expected = dict(host.at)
    reference = Host((4_321, 0), nodes, gpu_ops)
    reference.walk(11)
    for i, op in enumerate(walk.ops):
        assert walk.launch(host, i) == reference.at[op], op
    assert all(walk.launch(host, walk.index(op)) == t for op, t in expected.items())
    assert walk.keys == {11: (wrap_tag(3), 1, 0, 8)}  # the matcher's key of the held receive


@pytest.mark.parametrize("stages,micro_batches,chunks,layers,launch_us", [
    (4, 64, 1, 4, 5), (4, 64, 2, 4, 6), (4, 16, 1, 2, 7), (4, 64, 1, 2, 3)])
def test_a_host_ahead_of_its_gpu_is_run_forward_at_the_jump_to_the_ns(tmp_path, landed, stages, micro_batches, chunks,
                                                                      layers, launch_us):
    """The host walks ahead, posting the receives issued at the start early (about 5 us an op against 10-20 us
    kernels): the jump now comes while it is ahead (before, only once it had posted them all, near the end)."""
    info = check_exact(write_pipeline(tmp_path, stages, micro_batches, chunks, layers), host_launch_us=launch_us)
    assert info["folded"] is True, info
    assert landed, info  # a jump ran a host ahead forward


def test_a_host_ahead_beside_ranks_folded_by_symmetry_folds_in_time_to_the_ns(tmp_path, landed):
    """TP 2 (a stage's two ranks folded into one) with all-reduces after every kernel and a host ahead: the folded
    engine's histories (the wake-up's reused at its shifted time) and the numbers are the unfolded run's."""
    args = write_pipeline(tmp_path, 4, 48, 1, 2, tp=2, tp_bytes=8 << 20)
    runs = {}
    info = check_exact(args, reports=runs, comm_groups=args[0] + ".groups.json", extra_plugins=(_AlwaysFold,),
                       host_launch_us=4.321)
    assert info["folded"] is True, info
    assert runs["folded"].stats["simulated_ranks"] == 4
    assert landed, info


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stages=st.integers(2, 5), groups=st.integers(3, 8), chunks=st.integers(1, 2), layers=st.integers(1, 4),
       forward_us=st.integers(3, 30), backward_us=st.integers(5, 40), launch_us=st.sampled_from([1.5, 2.5, 4.321, 6.7]),
       sync_us=st.sampled_from([0, 3]), model=st.sampled_from(["replay", "gpu-contention"]))
def test_random_pipelines_with_a_host_ahead_give_the_same_numbers_folded_in_time_or_not(stages, groups, chunks, layers,
                                                                                        forward_us, backward_us,
                                                                                        launch_us, sync_us, model):
    options = {"host_launch_us": launch_us, "host_sync_us": sync_us}
    if model != "replay":
        options.update(compute_model="gpu", gpu_contention=True, gpu_contention_model="measured")
    with tempfile.TemporaryDirectory() as folder:
        args = write_pipeline(pathlib.Path(folder), stages, stages * groups, chunks, layers, forward_us, backward_us)
        if model != "replay":
            _as_aten_ops(args[0], stages)
        check_exact(args, no_fold_run=False, **options)


def test_messages_take_time_asks_the_network_for_every_held_receive():
    """The guard of the landing's ordering argument: every held receive's message must take at least 1 ns."""
    walk = SimpleNamespace(keys={5: (7, 1, 0, 8), 9: (8, 2, 0, 0)})
    asked = []

    def delay(src, dst, size):
        asked.append((src, dst, size))
        return 0 if size == 0 else 40

    assert time_ahead.messages_take_time(walk, delay) is False
    assert sorted(asked) == [(1, 0, 8), (2, 0, 0)]
    assert time_ahead.messages_take_time(walk, lambda src, dst, size: 1) is True
    assert time_ahead.messages_take_time(SimpleNamespace(keys={}), delay) is True  # nothing held: nothing to order


def test_a_host_with_zero_ns_messages_is_not_run_ahead(tmp_path, landed):
    """1-byte messages on a network with no latency arrive in the nanosecond they are sent (50 bytes a ns): such
    a host is never run forward (messages_take_time), and the run folds in time as the run without --time-fold
    to the ns."""
    args = write_pipeline(tmp_path, 4, 64, 1, 4, size=1)
    (tmp_path / "net.yml").write_text("topology: [ Ring ]\nnpus_count: [4]\nbandwidth: [50]\nlatency: [0]\n")
    check_exact(args, host_launch_us=5)
    assert not landed
