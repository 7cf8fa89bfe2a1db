"""A workload generated in memory (issue 37: ``generate_llm_workload(..., in_memory=True)``) is the workload its files
are: the nodes a run reads are those the parse of the files gives, node for node (every field, every attribute with
its value's type and its Chakra member); its files say the same where they are read (manifest, groups, GlobalMetadata)
and are written out byte for byte when something needs them; a run, a validation case and a sweep point give the
same ns both ways; a held trace outside its process fails loudly."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from astra_sim.chakra import ChakraError, parse_et, read_et, read_metadata
from astra_sim.errors import ConfigError, WorkloadError
from astra_workload_compact import ensure_written, memory, read_compact_workload, trace_nodes
from astra_workload_compact.plugin import CompactFormat
from astra_workload_generators.llm import LlmSpec, generate_llm_workload

from astra_sim_testing.llm_layouts import MOE, SHARED_LAYOUTS, SMALL

#: name -> astra workload llm arguments: TP, PP, VP, CP, EP, FP8 and block-scaled, MoE, ZeRO and FSDP2, DeepSpeed,
#: LoRA, CUDA graphs, and the serving modes (prefill, decode, mixed)
LAYOUTS = {
    **SHARED_LAYOUTS,
    "vp_sp_overlap_fp8_zero1": SMALL + ["--tp", "2", "--pp", "2", "--dp", "2", "--micro-batches", "4",
                                        "--sequence-parallel", "--tp-comm-overlap", "--gemm-dtype", "fp8",
                                        "--virtual-stages", "2", "--zero", "1", "--overlap-param-gather",
                                        "--comm-sms", "tp=8,dp=8,pp=2,amax=1"],
    "gqa_recompute_zero3": SMALL + ["--kv-heads", "4", "--gated", "--tp", "2", "--dp", "2", "--micro-batches", "2",
                                    "--recompute", "--zero", "3", "--reshard-after-forward"],
    "moe_expert_load": MOE + ["--dp", "4", "--ep", "4", "--micro-batches", "2", "--moe-expert-load", "zipf:1.2:3"],
    "moe_capacity_pp_zero2": MOE + ["--pp", "2", "--dp", "4", "--ep", "2", "--micro-batches", "2",
                                    "--moe-capacity-factor", "1.25", "--moe-pad-to-capacity", "--zero", "2"],
    "lora": SMALL + ["--gated", "--dp", "2", "--lora-rank", "8", "--micro-batches", "2"],
}


def _both(folder, spec):
    """The workload written as files (``file/w``) and held in memory (``mem/w``): the same base name, so that the
    manifests, which name their traces, compare byte for byte."""
    prefixes = []
    for which, in_memory in (("file", False), ("mem", True)):
        os.makedirs(os.path.join(folder, which), exist_ok=True)
        prefix = os.path.join(folder, which, "w")
        generate_llm_workload(spec, prefix, in_memory=in_memory, on_warning=lambda _line: None)
        prefixes.append(prefix)
    return prefixes


def _parsed(prefix):
    """Each class trace's nodes as a run gets them from the files: parse_et as the compact format calls it."""
    shared = {}
    out = {}
    for rep, path in read_compact_workload(prefix).traces.items():
        with open(path, "rb") as handle:
            out[rep] = parse_et(handle.read(), path, keep_raw=False, shared=shared).nodes
    return out


def _held(prefix):
    fmt = CompactFormat()
    return {rep: fmt.load_trace(path) for rep, path in read_compact_workload(prefix).traces.items()}


def _assert_same_nodes(parsed, held, mem_prefix):
    assert sorted(parsed) == sorted(held)
    mem_paths = set(read_compact_workload(mem_prefix).traces.values())
    for rep in parsed:
        a_nodes, b_nodes = parsed[rep], held[rep]
        assert len(a_nodes) == len(b_nodes), rep
        for a, b in zip(a_nodes, b_nodes):
            # every field the workload layer, the engine and the compute models read (EtNode equality: id, name,
            # type, deps, duration, inputs values/shapes/types, attributes in order) ...
            assert a == b, (rep, a, b)
            # ... each attribute's Chakra member (get_bool_list, get_str_list and set_attr read it) and its
            # value's type (1 and True and 1.0 are equal but not the same value)
            assert a._kinds == b._kinds, (rep, a, b)
            assert [type(v) for v in a.attrs.values()] == [type(v) for v in b.attrs.values()], (rep, a, b)
            assert b._raw is None and a._raw is None
            # the file named in messages: a class trace of the workload (the parse names the first file holding
            # the same bytes, which may be another class's: only messages differ)
            assert b.path in mem_paths


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_held_nodes_are_the_parsed_nodes_and_the_files_come_back_byte_for_byte(tmp_path, name):
    spec = LlmSpec.from_argv(LAYOUTS[name])
    file_prefix, mem_prefix = _both(str(tmp_path), spec)
    _assert_same_nodes(_parsed(file_prefix), _held(mem_prefix), mem_prefix)
    file_traces = read_compact_workload(file_prefix).traces
    mem_traces = read_compact_workload(mem_prefix).traces
    for suffix in (".workload.json", ".groups.json", ".groups.roles.json"):  # the small files: as they are
        with open(file_prefix + suffix, "rb") as a, open(mem_prefix + suffix, "rb") as b:
            assert a.read() == b.read(), suffix
    for rep, path in mem_traces.items():
        assert read_metadata(path) == read_metadata(file_traces[rep])  # what memory and throughput checks read
        with open(path, "rb") as handle:
            held_size = len(handle.read())
        ensure_written(path)
        with open(path, "rb") as a, open(file_traces[rep], "rb") as b:
            whole = a.read()
            assert whole == b.read(), rep
        assert len(whole) > held_size
    # once written out, the files read as any files
    _assert_same_nodes(_parsed(file_prefix), _parsed(mem_prefix), mem_prefix)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tp=st.sampled_from([1, 2]), pp=st.sampled_from([1, 2, 3]), dp=st.sampled_from([1, 2, 4]),
       cp=st.sampled_from([1, 2]), vp=st.sampled_from([1, 2]), experts=st.sampled_from([0, 4]),
       ep=st.sampled_from([1, 2]), zero=st.sampled_from([0, 1, 3]), mb=st.sampled_from([1, 2, 4]),
       sp=st.booleans(), fp8=st.booleans(), recompute=st.booleans(),
       mode=st.sampled_from(["train", "train", "prefill", "decode"]))
def test_random_small_layouts(tmp_path_factory, tp, pp, dp, cp, vp, experts, ep, zero, mb, sp, fp8, recompute, mode):
    argv = SMALL + ["--tp", tp, "--pp", pp, "--dp", dp, "--cp", cp, "--micro-batches", mb]
    if vp > 1:
        argv += ["--virtual-stages", vp]
    if experts:
        argv += ["--experts", experts, "--top-k", 2, "--moe-ffn", 256, "--ep", ep]
    if sp:
        argv += ["--sequence-parallel"]
    if fp8:
        argv += ["--gemm-dtype", "fp8"]
    if mode == "train":
        argv += ["--zero", zero] + (["--recompute"] if recompute else [])
    else:
        argv += ["--mode", mode, "--batch-size", 2 * mb] + (["--decode-steps", 2] if mode == "decode" else [])
    try:
        spec = LlmSpec.from_argv(argv)
        spec.resolve(lambda _line: None)
    except ConfigError:
        assume(False)
    folder = str(tmp_path_factory.mktemp("layout"))
    try:
        file_prefix, mem_prefix = _both(folder, spec)
    except ConfigError:
        assume(False)
    _assert_same_nodes(_parsed(file_prefix), _held(mem_prefix), mem_prefix)


#: the report's stats measured on the wall clock (astra_sim/run/report.py)
WALL_CLOCK_STATS = ("build_s", "run_s", "events_per_s", "analysis_s")


def _report(prefix, **options):
    from astra_sim import simulate

    report = simulate(workload=prefix, platform="hgx-h100", **options).to_dict()
    for key in WALL_CLOCK_STATS:  # (how long this process took, not what it simulated)
        report["stats"].pop(key)
    return report


def _strip_paths(value, prefixes):
    if isinstance(value, dict):
        return {k: _strip_paths(v, prefixes) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_paths(v, prefixes) for v in value]
    if isinstance(value, str):
        for prefix in prefixes:
            value = value.replace(os.path.dirname(prefix), "<folder>")
    return value


@pytest.mark.parametrize("name,options", [("vp_sp_overlap_fp8_zero1", {}), ("moe_ep_alltoall", {}),
                                          ("cp_pp", {"fold": False}), ("decode_moe", {})])
def test_a_run_gives_the_same_report_both_ways(tmp_path, name, options):
    spec = LlmSpec.from_argv(LAYOUTS[name])
    file_prefix, mem_prefix = _both(str(tmp_path), spec)
    held_before = memory.held_count()
    a = _strip_paths(_report(file_prefix, **options), [file_prefix, mem_prefix])
    b = _strip_paths(_report(mem_prefix, **options), [file_prefix, mem_prefix])
    assert memory.held_count() == held_before  # (the run took the held nodes: nothing was written out)
    assert a["ranks"] and a["ranks"] == b["ranks"]
    assert a == b


def test_a_validation_case_gives_the_same_ns_both_ways(tmp_path, monkeypatch):
    from astra_sim.runner import run_spec
    from astra_validation import runner
    from astra_validation.registry import load_cases

    from astra_workload_generators.llm import generate as generate_module

    case = next(c for c in load_cases() if c.name == "megatron-sc21-gpt-1.7b")
    calls = []
    hold = generate_module.hold_compact_workload
    monkeypatch.setattr(generate_module, "hold_compact_workload", lambda *a, **k: calls.append(1) or hold(*a, **k))
    held = runner.run_case(case)["simulated_ns"]
    assert calls  # (the case's workload was held, not written)
    prefix = str(tmp_path / "w")
    spec = LlmSpec.from_argv(case.workload, where="test").for_platform(case.platform)
    generate_llm_workload(spec, prefix, on_warning=lambda _line: None)  # the files, parsed by the run
    assert held == run_spec(runner.case_run_spec(case, prefix)).max_finish_ns > 0


def test_a_sweep_point_gives_the_same_ns_both_ways(tmp_path):
    """The sweep's point runs the workload its worker generated; the same point on the held workload gives the
    same step, compute and exposed communication."""
    from astra_sweep.point import fill_row

    spec = LlmSpec.from_argv(LAYOUTS["vp_sp_overlap_fp8_zero1"])
    file_prefix, mem_prefix = _both(str(tmp_path), spec)
    rows = []
    for prefix in (file_prefix, mem_prefix):
        row = {}
        fill_row(row, _report(prefix))
        rows.append(row)
    assert rows[0]["step_ns"] > 0 and rows[0] == rows[1]


def test_a_held_trace_fails_loudly_outside_its_process(tmp_path, monkeypatch):
    spec = LlmSpec.from_argv(LAYOUTS["dense_tp_pp_dp"])
    prefix = str(tmp_path / "w")
    generate_llm_workload(spec, prefix, in_memory=True)
    path = next(iter(read_compact_workload(prefix).traces.values()))
    assert read_metadata(path)["generator"] == "astra workload llm"
    with pytest.raises(ChakraError, match="not a valid Node"):  # any other reader: not a trace of no nodes
        read_et(path)
    assert trace_nodes(path) is CompactFormat().load_trace(path)  # (held here: the same nodes, not parsed)
    monkeypatch.setattr(memory, "_HELD", {})  # as another process sees it
    with pytest.raises(WorkloadError, match="generated in memory"):
        CompactFormat().load_trace(path)
    with pytest.raises(WorkloadError, match="generated in memory"):
        trace_nodes(path)


def test_held_traces_are_forgotten_with_their_files_and_written_out_beyond_the_budget(tmp_path, monkeypatch):
    import shutil

    spec = LlmSpec.from_argv(LAYOUTS["dense_tp_pp_dp"])
    monkeypatch.setattr(memory, "_HELD", {})
    os.makedirs(tmp_path / "a")
    generate_llm_workload(spec, str(tmp_path / "a" / "w"), in_memory=True)
    classes = memory.held_count()
    assert classes > 0
    shutil.rmtree(tmp_path / "a")  # (a validation case's private folder, removed after its run)
    generate_llm_workload(spec, str(tmp_path / "b"), in_memory=True)
    assert memory.held_count() == classes  # the removed workload's traces were dropped
    file_prefix = str(tmp_path / "f")
    generate_llm_workload(spec, file_prefix)
    monkeypatch.setattr(memory, "MAX_HELD_NODES", 0)
    generate_llm_workload(spec, str(tmp_path / "c"), in_memory=True)
    assert memory.held_count() == classes  # over the budget: the older ones written out, the new one kept for its run
    generate_llm_workload(spec, str(tmp_path / "d"), in_memory=True)
    assert memory.held_count() == classes
    for prefix in (str(tmp_path / "b"), str(tmp_path / "c")):  # written out byte for byte
        for rep, path in read_compact_workload(prefix).traces.items():
            with open(path, "rb") as a, open(read_compact_workload(file_prefix).traces[rep], "rb") as b:
                assert a.read() == b.read()


def test_in_memory_is_for_the_compact_workload(tmp_path):
    spec = LlmSpec.from_argv(LAYOUTS["dense_tp_pp_dp"])
    with pytest.raises(ConfigError, match="in_memory"):
        generate_llm_workload(spec, str(tmp_path / "w"), per_rank_files=True, in_memory=True)


def test_expansion_and_one_ranks_nodes_write_a_held_trace_out_first(tmp_path):
    from astra_workload_compact import expand_workload, read_rank_nodes

    spec = LlmSpec.from_argv(LAYOUTS["dense_tp_pp_dp"])
    file_prefix, mem_prefix = _both(str(tmp_path), spec)
    assert read_rank_nodes(mem_prefix, 3) == read_rank_nodes(file_prefix, 3)
    assert expand_workload(mem_prefix, str(tmp_path / "x" / "m")) == expand_workload(file_prefix,
                                                                                     str(tmp_path / "x" / "f"))
    for rank in range(8):
        with open(tmp_path / "x" / f"m.{rank}.et", "rb") as a, open(tmp_path / "x" / f"f.{rank}.et", "rb") as b:
            assert a.read() == b.read()


def test_the_search_bound_is_the_same_from_held_traces(monkeypatch, tmp_path):
    """A layout search's lower bound generates each layout in memory and reads its class traces back
    (astra_workload_compact.trace_nodes): the same terms as from the files."""
    import astra_workload_generators.llm as llm
    from astra_sweep.bound import BoundCache
    from astra_sweep.search import _options
    from astra_workload_generators.llm import LlmConfig

    monkeypatch.setenv("ASTRA_SEARCH_CACHE", str(tmp_path / "bounds"))
    cfg = LlmConfig(tp=2, pp=2, dp=2, micro_batches=4, micro_batch_size=1, virtual_stages=2, zero=1,
                    sequence_parallel=True)
    cache = BoundCache({"preset": "llama2-7b", "seq-len": 256}, "h100-sxm", 8, disk=False)
    held = cache._compute(_options(cfg), 4)
    calls = []
    generate = llm.generate_llm_workload

    def from_files(*args, **kwargs):
        calls.append(kwargs.pop("in_memory", False))
        return generate(*args, **kwargs)
    monkeypatch.setattr(llm, "generate_llm_workload", from_files)
    assert cache._compute(_options(cfg), 4) == held and held
    assert calls == [True]  # (the bound asked for the held workload; this run got the files)


def test_the_collector_is_as_it_was_after_holding(tmp_path):
    """Holding pauses the cyclic garbage collector while the nodes are made, and leaves it as it found it."""
    import gc

    spec = LlmSpec.from_argv(LAYOUTS["dense_tp_pp_dp"])
    assert gc.isenabled()
    generate_llm_workload(spec, str(tmp_path / "a"), in_memory=True)
    assert gc.isenabled()
    gc.disable()
    try:
        generate_llm_workload(spec, str(tmp_path / "b"), in_memory=True)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_serving_step_shape_times_the_same_both_ways(monkeypatch):
    """astra serve times a new batch shape by generating and running it in its process (held in memory): the same
    stage times and energy as from the files."""
    import astra_workload_generators.llm.spec as spec_module
    from astra_serving.steptime import Layout, StepTimer

    timer = StepTimer(Layout({"model": "llama3-8b", "inference_elementwise": True}, "hgx-h100", tp=8), cache=False)
    held = timer.simulate(96, 8, 512, with_energy=True)
    calls = []
    generate = spec_module.generate_llm_workload

    def from_files(*args, **kwargs):
        calls.append(kwargs.pop("in_memory", False))
        return generate(*args, **kwargs)
    monkeypatch.setattr(spec_module, "generate_llm_workload", from_files)
    assert timer.simulate(96, 8, 512, with_energy=True) == held and held[0]
    assert calls == [True]
