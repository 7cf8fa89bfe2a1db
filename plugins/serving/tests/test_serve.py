"""astra serve end to end, with iteration times from the step simulator: consistency with astra workload llm +
astra run, bucketing error, Little's law, throughput against QPS, disaggregation's KV transfer, bad input."""

import csv
import json
import random

import pytest

from astra_serving.engine import HOST_US_PER_SEQ_VLLM060
from astra_serving.sampler import SamplerTimer
from astra_gpu_model.model import GRAPH_KERNEL_GAP_NS
from astra_serving.steptime import Layout, StepTimer
from astra_sim.cli import main

MODEL = ["--model", "llama3-8b"]
#: a step replayed as a CUDA graph, as astra run takes it: one launch, and the GPU's gap between the graph's kernels
GRAPH = ["--host-launch-us", "0", "--gpu-kernel-gap-ns", str(GRAPH_KERNEL_GAP_NS)]


def astra(argv):
    """``astra ARGV`` as a user runs it: the reference the step simulator's in-process calls must equal."""
    assert main(list(argv)) == 0


def serve(tmp_path, *argv, name="r"):
    report = tmp_path / f"{name}.json"
    rows = tmp_path / f"{name}.csv"
    assert main(["serve", *MODEL, "--platform", "hgx-h100", *argv, "-o", str(report),
                 "--requests-csv", str(rows), "-q"]) == 0
    with open(rows) as handle:
        return json.loads(report.read_text()), list(csv.DictReader(handle))


def step_ns(tmp_path, *argv, run=(), tp=8):
    """One step as a user gets it: astra workload llm ... then astra run --platform hgx-h100 [run flags] (TP 1:
    eight copies fill the node, as astra serve lays them out)."""
    prefix, report = str(tmp_path / "ref"), str(tmp_path / "ref.json")
    astra(["workload", "llm", *MODEL, "--tp", str(tp), "--dp", str(8 // tp), "--logits", "last",
           "--inference-elementwise", *argv, "-o", prefix])
    astra(["run", "--workload-configuration", prefix, "--platform", "hgx-h100", "--allow-oom", *run,
           "--report-json", report, "-q"])
    with open(report) as handle:
        return json.load(handle)["summary"]["max_finish_ns"]


@pytest.mark.parametrize("host_us,graphs", [(None, "vllm"), (0.0, "off"), (120.0, "vllm")])
def test_low_qps_matches_single_steps(tmp_path, host_us, graphs):
    """At very low QPS every request is alone: TTFT is one prefill step and each inter-token gap one decode step
    at batch 1, to the nanosecond, as astra workload llm + astra run give them, each plus the engine's host time
    of its scheduler pass for one sequence (--host-us-per-seq; default vLLM v0.6.0's 42 us) and the sampler's
    kernels on its one row (--sampler vllm-v0, the default: sampler.py; test_sampler.py times them by hand), without
    the request's path outside the engine (--frontend none; test_frontend.py adds it). With CUDA graphs
    (the default) the decode step is one graph launch: astra run --host-launch-us 0 --gpu-kernel-gap-ns 376 (the
    GPU's idle time between the graph's kernels, GRAPH_KERNEL_GAP_NS), and asynchronous output
    processing is on (off without graphs, as in vLLM): each token arrives when the next step ends, the last one
    with the extra decode step of the finished sequence."""
    extra = ([] if host_us is None else ["--host-us-per-seq", str(host_us)]) + ["--cuda-graphs", graphs, "--frontend",
                                                                               "none"]
    report, rows = serve(tmp_path, "--tp", "8", "--qps", "0.01", "--requests", "3", "--prompt-len", "256",
                         "--output-len", "4", "--exact-shapes", *extra)
    host_ns = round((HOST_US_PER_SEQ_VLLM060 if host_us is None else host_us) * 1000)
    assert report["deployment"]["engine"]["host_ns_per_seq"] == host_ns
    host_ns += SamplerTimer("H100-SXM5-80GB", 128256)(1)  # after each step, one row of Llama 3's logits
    prefill = step_ns(tmp_path, "--mode", "prefill", "--batch-size", "1", "--prompt-len", "256") + host_ns
    graph = GRAPH if graphs == "vllm" else []
    decodes = [step_ns(tmp_path, "--mode", "decode", "--batch-size", "1", "--prompt-len", "256", "--decode-len",
                       str(k), run=graph) + host_ns for k in (1, 2, 3, 4)]
    async_output = graphs == "vllm"
    assert report["deployment"]["engine"]["async_output"] is async_output
    ttft = prefill + (decodes[0] if async_output else 0)
    gaps = decodes[1:] if async_output else decodes[:3]
    for row in rows:
        assert int(row["first_token_ns"]) - int(row["arrival_ns"]) == ttft
        assert int(row["finish_ns"]) - int(row["first_token_ns"]) == sum(gaps)
    assert report["units"] == {"time": "ns", "size": "bytes"}
    assert report["ttft_ns"]["p50"] == report["ttft_ns"]["max"] == ttft  # integer ns, to the ns
    assert report["tpot_ns"]["p50"] == round(sum(gaps) / 3)
    assert report["queueing_delay_ns"]["max"] == 0


def test_no_step_elementwise_is_given_to_the_generator(tmp_path):
    """--no-step-elementwise reaches the generator explicitly, whatever astra workload llm's default: a lone
    request's TTFT is the prefill step of astra workload llm --no-inference-elementwise, to the ns."""
    report, rows = serve(tmp_path, "--qps", "0.01", "--requests", "1", "--prompt-len", "200", "--output-len", "2",
                         "--exact-shapes", "--host-us-per-seq", "0", "--no-step-elementwise", "--no-async-output",
                         "--frontend", "none", "--sampler", "none")
    off = step_ns(tmp_path, "--mode", "prefill", "--batch-size", "1", "--prompt-len", "200",
                  "--no-inference-elementwise", tp=1)
    on = step_ns(tmp_path, "--mode", "prefill", "--batch-size", "1", "--prompt-len", "200", tp=1)
    assert int(rows[0]["first_token_ns"]) - int(rows[0]["arrival_ns"]) == off < on


def test_bucketing_error_is_small():
    """Bucketed shapes against exact ones over random iteration shapes: the grid's error on the step time."""
    rng = random.Random(7)
    layout = Layout({"model": "llama3-8b", "inference_elementwise": True}, "hgx-h100", tp=8)
    exact, bucketed = StepTimer(layout, exact=True), StepTimer(layout)
    errors = []
    for _ in range(14):
        prefill = rng.choice([0, 0, rng.randint(17, 2048)])
        decode = rng.randint(17, 200) if prefill == 0 else rng.choice([0, rng.randint(1, 200)])
        context = rng.randint(100, 4000)
        a, b = exact.step_ns(prefill, decode, context), bucketed.step_ns(prefill, decode, context)
        errors.append(abs(b - a) / a)
    print("bucketing errors", sorted(errors))
    assert max(errors) < 0.05, errors
    assert sum(errors) / len(errors) < 0.015, errors


def test_littles_law_on_the_queue(tmp_path):
    report, _ = serve(tmp_path, "--qps", "40", "--requests", "300", "--prompt-len", "uniform:100:800",
                      "--output-len", "exp:100", "--max-num-seqs", "16")
    q = report["queue"]
    assert q["mean_length"] > 1.0  # requests did queue
    assert q["mean_length"] == pytest.approx(q["lambda_times_w"], rel=1e-9)


def test_throughput_rises_with_qps_and_flattens(tmp_path):
    tput = {}
    for qps in (2, 8, 200, 800):
        report, _ = serve(tmp_path, "--qps", str(qps), "--requests", "400", "--prompt-len", "512",
                          "--output-len", "64", "--max-num-seqs", "32", name=f"q{qps}")
        tput[qps] = report["throughput_tokens_per_s"]
        limits = report["limits"]
    assert limits["max_num_seqs"] > 0.5  # the flat part is the batch limit's
    assert tput[8] > 3 * tput[2]
    assert tput[800] < 1.15 * tput[200]
    assert tput[200] > 1.5 * tput[8]


def test_disaggregation_transfer_reacts_to_bandwidth(tmp_path):
    common = ["--tp", "8", "--disaggregate", "1:1", "--qps", "2", "--requests", "40", "--prompt-len", "2048",
              "--output-len", "16"]
    full, _ = serve(tmp_path, *common, name="full")
    half, _ = serve(tmp_path, *common, "--nic-gbit", "200", name="half")
    assert full["kv_transfer"]["transfers"] == 40 and full["kv_transfer"]["bytes"] == 40 * 2048 * 131072
    assert half["kv_transfer"]["time_ns"]["p50"] == pytest.approx(2 * full["kv_transfer"]["time_ns"]["p50"], rel=0.1)
    assert half["ttft_ns"]["p50"] > full["ttft_ns"]["p50"] + 0.5 * full["kv_transfer"]["time_ns"]["p50"]
    assert half["tpot_ns"]["p50"] == pytest.approx(full["tpot_ns"]["p50"], rel=0.05)


def test_replicas_share_the_load(tmp_path):
    one, _ = serve(tmp_path, "--qps", "60", "--requests", "300", "--max-num-seqs", "16", name="one")
    two, rows = serve(tmp_path, "--qps", "60", "--requests", "300", "--max-num-seqs", "16", "--replicas", "2",
                      "--router", "least-loaded", name="two")
    assert {r["replica"] for r in rows} == {"0", "1"}
    assert two["e2e_ns"]["p50"] < one["e2e_ns"]["p50"]
    assert two["deployment"]["gpus"] == 2 and two["deployment"]["gpus_per_replica"] == 1


def _ints(value):
    """Every number of ``value`` (nested) that is not an int (None allowed)."""
    if isinstance(value, dict):
        return [bad for v in value.values() for bad in _ints(v)]
    if isinstance(value, list):
        return [bad for v in value for bad in _ints(v)]
    return [] if value is None or (isinstance(value, int) and not isinstance(value, bool)) else [value]


def test_report_keys(tmp_path):
    """Every time in the report is an integer of ns (its ``units`` say so), SLOs included; throughputs are per
    second, as their names say."""
    report, _ = serve(tmp_path, "--qps", "5", "--requests", "20", "--slo-ttft", "200", "--slo-tpot", "30")
    assert report["units"] == {"time": "ns", "size": "bytes"}
    for key in ("ttft_ns", "tpot_ns", "e2e_ns", "queueing_delay_ns"):
        assert set(report[key]) >= {"p50", "p90", "p99", "mean", "max"} and not _ints(report[key])
    assert not _ints(report["cdf_ns"]) and len(report["cdf_ns"]["ttft"]) == 101
    assert report["cdf_ns"]["ttft"][50] == report["ttft_ns"]["p50"]
    assert report["goodput"]["slo_ttft_ns"] == 200_000_000 and report["goodput"]["slo_tpot_ns"] == 30_000_000
    assert isinstance(report["duration_ns"], int) and isinstance(report["queue"]["mean_wait_ns"], int)
    assert not _ints([t for t, _ in report["kv_cache_utilisation"]["over_time"]])
    # no time in another unit (wall-clock and CPU seconds of the tool itself aside; rates are per second)
    assert not [k for k in _keys(report) if k.endswith(("_ms", "_us", "_s"))
                and not k.endswith(("_per_s", "wall_s", "cpu_s"))]
    assert 0 < report["cpu_s"] and 0 < report["wall_s"]
    for key in ("throughput_tokens_per_s", "throughput_requests_per_s", "requests", "goodput",
                "kv_cache_utilisation", "kv_cache"):
        assert key in report
    assert report["requests"] == 20 and 0 <= report["goodput"]["fraction"] <= 1
    assert report["kv_cache"]["blocks"] > 0 and report["kv_cache_utilisation"]["over_time"]


def _keys(value):
    if isinstance(value, dict):
        return [k for key, v in value.items() for k in [key, *_keys(v)]]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v)]
    return []


def test_json_prints_the_report_and_the_summary_goes_to_stderr(tmp_path, capsys):
    """--json: the report on stdout (what -o writes), the terminal summary (ms) on stderr; --report-json is -o's
    earlier name."""
    argv = ["serve", *MODEL, "--platform", "hgx-h100", "--qps", "5", "--requests", "6", "--prompt-len", "64",
            "--output-len", "4"]
    capsys.readouterr()
    assert main(argv + ["--json", "--report-json", str(tmp_path / "r.json")]) == 0
    out, err = capsys.readouterr()
    printed = json.loads(out)
    written = json.loads((tmp_path / "r.json").read_text())
    for report in (printed, written):
        report.pop("wall_s")
        report.pop("cpu_s")
        report["step_simulator"].pop("simulation_wall_s")
    assert printed == written and printed["units"]["time"] == "ns"
    assert "TTFT: p50 " in err and " ms" in err


def test_bad_trace_is_one_line_error(tmp_path, capsys):
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5}\n'
                     '{"arrival_s": 1, "prompt_tokens": 9000, "output_tokens": 5}\n')
    code = main(["serve", *MODEL, "--platform", "hgx-h100", "--trace", str(trace)])
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1
    assert f"{trace}:2: request of 9000 prompt + 5 output tokens is longer than the model's context of 8192" in err
    trace.write_text('{"arrival_s": -0.5, "prompt_tokens": 10, "output_tokens": 5}\n')
    assert main(["serve", *MODEL, "--platform", "hgx-h100", "--trace", str(trace)]) != 0
    assert f"{trace}:1: negative arrival time" in capsys.readouterr().err


def test_trace_drives_the_run(tmp_path):
    trace = tmp_path / "azure.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,300,10\n"
                     "2023-11-16 18:15:46.5,500,20\n2023-11-16 18:15:47.0,100,5\n")
    report, rows = serve(tmp_path, "--trace", str(trace))
    assert report["requests"] == 3 and [int(r["arrival_ns"]) for r in rows] == [0, 500_000_000, 1_000_000_000]
    assert report["output_tokens"] == 35


def test_a_small_kv_cache_bounds_the_batch_and_preempts(tmp_path):
    """With little memory left for the KV cache the cache, not the sequence limit, holds requests back."""
    report, rows = serve(tmp_path, "--qps", "200", "--requests", "200", "--prompt-len", "2000", "--output-len",
                         "200", "--gpu-memory-utilization", "0.25", "--max-model-len", "4096")
    assert report["kv_cache"]["tokens"] < 40_000
    assert report["limits"]["kv_cache"] > report["limits"]["max_num_seqs"]
    assert report["preemptions"] > 0 and report["kv_cache_utilisation"]["max"] > 0.8
    assert len(rows) == 200


def test_stage_times_split_a_pipelined_step_at_its_stages_ends():
    from astra_serving.steptime import stage_times

    report = {"summary": {"max_finish_ns": 300}, "ranks": [{"finish_ns": f} for f in (120, 120, 300, 300)]}
    assert stage_times(report, 2) == (120, 180)
    assert stage_times(report, 1) == (300,)
    odd = {"summary": {"max_finish_ns": 301}, "ranks": [{"finish_ns": 301}] * 3}
    assert stage_times(odd, 2) == (150, 151)  # ranks that do not split into stages: an equal split


def test_pipeline_parallel_low_qps_matches_single_steps_and_virtual_engines_raise_throughput(tmp_path):
    """PP 2: alone, a request's TTFT is one prefill step of the whole pipeline and its token gaps decode steps,
    to the ns, as astra workload llm --pp 2 + astra run give them (the virtual engines' stage times sum to the
    step), each plus the sampler's kernels on its one row (on the last stage; sampler.py); saturated, vLLM V0's
    two virtual engines overlap on the stages and serve more than one batch at a time through the pipeline
    (--virtual-engines 1)."""
    prefix, out = str(tmp_path / "pp"), str(tmp_path / "pp.json")

    def step(*argv, graph=False):
        astra(["workload", "llm", *MODEL, "--tp", "4", "--pp", "2", "--logits", "last", "--inference-elementwise",
               *argv, "-o", prefix])
        astra(["run", "--workload-configuration", prefix, "--platform", "hgx-h100", *(GRAPH if graph else []),
               "--report-json", out, "-q"])
        with open(out) as handle:
            return json.load(handle)["summary"]["max_finish_ns"]

    report, rows = serve(tmp_path, "--tp", "4", "--pp", "2", "--qps", "0.01", "--requests", "2", "--prompt-len", "128",
                         "--output-len", "3", "--exact-shapes", "--host-us-per-seq", "0", "--frontend", "none")
    assert report["deployment"]["virtual_engines"] == 2 and len(report["replicas"]) == 2
    sample = SamplerTimer("H100-SXM5-80GB", 128256)(1)
    prefill = step("--mode", "prefill", "--batch-size", "1", "--prompt-len", "128") + sample
    decodes = [step("--mode", "decode", "--batch-size", "1", "--prompt-len", "128", "--decode-len", str(k), graph=True)
               + sample for k in (1, 2)]
    for row in rows:
        assert int(row["first_token_ns"]) - int(row["arrival_ns"]) == prefill
        assert int(row["finish_ns"]) - int(row["first_token_ns"]) == sum(decodes)
    common = ["--tp", "4", "--pp", "2", "--qps", "1000", "--requests", "120", "--prompt-len", "256", "--output-len",
              "64", "--max-num-seqs", "16"]
    two, _ = serve(tmp_path, *common, name="two")
    one, _ = serve(tmp_path, *common, "--virtual-engines", "1", name="one")
    assert two["throughput_tokens_per_s"] > 1.3 * one["throughput_tokens_per_s"]
    # energy: the virtual engines' steps overlap on the stages (no energy); one engine's add up
    assert "energy" not in two and all(r["energy_mj"] == "" for r in rows)
    assert one["energy"]["it_energy_mj"] > 0


def test_requests_as_a_dataframe_are_the_csv_rows(tmp_path):
    from astra_serving import ServeSpec, requests_frame, serve as serve_spec

    report, rows = serve(tmp_path, "--tp", "8", "--qps", "2", "--requests", "6", "--prompt-len", "128",
                         "--output-len", "8")
    spec = ServeSpec.from_mapping({"model": MODEL[1], "platform": "hgx-h100", "tp": 8, "qps": 2, "requests": 6,
                                   "prompt_len": "128", "output_len": "8"})
    _, requests = serve_spec(spec)
    frame = requests_frame(requests)
    assert [int(v) for v in frame["first_token_ns"]] == [int(r["first_token_ns"]) for r in rows]
    assert list(frame["ttft_ns"]) == [int(r["first_token_ns"]) - int(r["arrival_ns"]) for r in rows]


def test_goodput_names_only_the_targets_given():
    from astra_serving.metrics import describe

    base = {"requests": 1, "duration_ns": 10**9, "throughput_requests_per_s": 1.0, "throughput_tokens_per_s": 1.0,
            "throughput_input_tokens_per_s": 1.0, "preemptions": 0,
            **{k: {"p50": 1, "p90": 1, "p99": 1} for k in ("ttft_ns", "tpot_ns", "e2e_ns", "queueing_delay_ns")}}
    one = describe({**base, "goodput": {"requests_per_s": 1.0, "fraction": 1.0, "slo_ttft_ns": 200_000_000,
                                        "slo_tpot_ns": None}})
    assert "TTFT <= 200 ms)" in one and "TPOT" not in one.split("goodput")[1] and "None" not in one


def test_a_p99_resting_on_a_few_requests_is_said(tmp_path, capsys):
    from astra_serving.cli import small_sample_warning

    assert "slowest 3 of them" in small_sample_warning(300) and small_sample_warning(1000) is None
    assert main(["serve", *MODEL, "--platform", "hgx-h100", "--tp", "8", "--qps", "2", "--requests", "20",
                 "--prompt-len", "128", "--output-len", "8"]) == 0
    assert "astra: warning: the p99 latencies of 20 requests rest on the slowest 1" in capsys.readouterr().err
