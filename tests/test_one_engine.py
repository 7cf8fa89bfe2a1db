"""One engine behind every door: for every registered platform (TPUs included) the same step gets the same ns through
``astra workload llm`` + ``astra run``, the Python API, a sweep row, a search row, a serving step time and a
validation case."""

from __future__ import annotations

import json

import pytest

from astra_sim.cli import main
from astra_sim.platforms import get_platform, platforms
from astra_sim.runner import run_spec
from astra_sim.spec import RunSpec

#: a small dense Llama (a Hugging Face config.json, so that every door, serving and search included, can name it):
#: every door simulates it in well under a second
CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 512, "num_hidden_layers": 2,
          "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 1536, "vocab_size": 1024,
          "max_position_embeddings": 256, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def layout(platform):
    """TP within a node (at most 8), DP over the rest of one node."""
    gpus = platform.gpus_per_node
    tp = max(t for t in (1, 2, 4, 8) if gpus % t == 0)
    return {"tp": tp, "dp": gpus // tp}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "config.json"
    path.write_text(json.dumps(CONFIG))
    return str(path)


def training_step(platform, model):
    return {"model": model, **layout(platform), "micro_batches": 2}


def argv_of(mapping):
    words = []
    for key, value in mapping.items():
        words += [f"--{key.replace('_', '-')}", str(value)]
    return words


def api_step_ns(folder, llm, run):
    """One step through the Python API: generate_llm_workload + run_spec."""
    from astra_workload_generators.llm import LlmSpec, generate_llm_workload

    prefix = str(folder / "w")
    generate_llm_workload(LlmSpec.from_mapping(llm), prefix, on_warning=lambda line: None)
    return run_spec(RunSpec.from_mapping({"workload": prefix, **run})).max_finish_ns


@pytest.fixture(scope="module")
def reference(tmp_path_factory, model):
    """{platform: step ns} of the training step through the Python API."""
    return {name: api_step_ns(tmp_path_factory.mktemp(name), training_step(platform, model),
                              {"platform": name, "nodes": 1})
            for name, platform in platforms().items()}


@pytest.mark.parametrize("name", sorted(platforms()))
def test_the_command_line_gives_the_apis_step(tmp_path, reference, model, name):
    prefix, report = str(tmp_path / "w"), tmp_path / "r.json"
    assert main(["workload", "llm", *argv_of(training_step(get_platform(name), model)), "-o", prefix]) == 0
    assert main(["run", "--workload-configuration", prefix, "--platform", name, "-o", str(report), "-q"]) == 0
    assert json.loads(report.read_text())["summary"]["max_finish_ns"] == reference[name] > 0


@pytest.mark.parametrize("name", sorted(platforms()))
def test_a_sweep_row_gives_the_same_step(tmp_path, reference, model, name):
    from astra_sweep import Executor, run_sweep
    from astra_sweep.results import Results

    class InProcess(Executor):
        def run(self, fn, tasks, timeout=None):
            for task, payload in tasks:
                yield task, fn(task, payload)

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"workload": {"llm": training_step(get_platform(name), model)},
                                "run": {"platform": name}}))
    out = tmp_path / "rows.csv"
    run_sweep(str(spec), str(out), progress=False, executor_object=InProcess())
    (row,) = Results(str(out), [], {})._read_results()
    assert row["status"] == "ok" and row["step_ns"] == reference[name]


@pytest.mark.parametrize("name", sorted(platforms()))
def test_a_validation_case_gives_the_same_step(reference, model, name):
    from astra_validation.registry import Case
    from astra_validation.runner import run_case

    case = Case(name=f"one-engine-{name}", kind="llm_step", source="this test", hardware=name, platform=name,
                nodes=1, measured={"step_s": 1.0}, workload=tuple(argv_of(training_step(get_platform(name), model))))
    result = run_case(case)
    assert result["simulated_ns"] == reference[name]


@pytest.mark.parametrize("name", sorted(platforms()))
def test_a_search_row_gives_the_same_step(tmp_path, capsys, model, name):
    """`astra search` over the layouts of one node: each ranked row's step is the API's for its layout."""
    platform = get_platform(name)
    tp = layout(platform)["tp"]
    gpus = platform.gpus_per_node
    assert main(["search", "--model", model, "--platform", name, "--gpus", str(gpus), "--global-batch",
                 str(2 * gpus // tp), "--tp", str(tp), "--pp", "1", "--vp", "1", "--mbs", "1", "--zero", "0",
                 "--cp", "1", "--ep", "1", "--recompute", "none", "--jobs", "1", "--no-progress", "--json"]) == 0
    ranked = json.loads(capsys.readouterr().out)["ranked"]
    assert ranked
    for row in ranked:
        llm = {"model": model, **{k: v for k, v in row["layout"].items() if v is not False}}
        assert row["step_ns"] == api_step_ns(tmp_path / str(len(llm)), llm, {"platform": name, "nodes": 1}), row


@pytest.mark.parametrize("name", sorted(platforms()))
def test_a_serving_step_gives_the_same_step(tmp_path, model, name):
    """The step time `astra serve` uses for a prefill of 100 tokens (its deployment resolved from a ServeSpec, the
    shape simulated exactly) is the API's step of the same inference workload."""
    from astra_serving import ServeSpec
    from astra_serving.steptime import StepTimer

    platform = get_platform(name)
    tp = layout(platform)["tp"]
    resolved = ServeSpec.from_mapping({"model": model, "platform": name, "tp": tp, "qps": 1}).resolve()
    served = StepTimer(resolved.layout, exact=True).step_ns(prefill=100, decode=0, context=0)
    llm = {"model": model, "tp": tp, "dp": platform.gpus_per_node // tp, "logits": "last", "mode": "prefill",
           "batch_size": 1, "prompt_len": 100}
    assert served == api_step_ns(tmp_path, llm, {"platform": name, "nodes": 1}) > 0


@pytest.mark.parametrize("name", ["hgx-h100", "hgx-b200"])
def test_an_fp8_step_is_generated_for_its_platform_through_every_door(tmp_path, model, name):
    """Transformer Engine writes FP8 transposes on Hopper and not on Blackwell, so an FP8 step depends on the GPU it
    is generated for: a sweep row and a validation case generate it for their platform, as the API does when told
    (LlmSpec's ``platform``), and on Blackwell that differs from the step generated without a platform."""
    from astra_sweep import Executor, run_sweep
    from astra_sweep.results import Results
    from astra_validation.registry import Case
    from astra_validation.runner import run_case

    platform = get_platform(name)
    llm = {**training_step(platform, model), "gemm_dtype": "fp8"}
    run = {"platform": name, "nodes": 1}
    for_platform = api_step_ns(tmp_path / "api", {**llm, "platform": name}, run)
    without = api_step_ns(tmp_path / "plain", llm, run)
    assert (for_platform != without) == (name == "hgx-b200")

    class InProcess(Executor):
        def run(self, fn, tasks, timeout=None):
            for task, payload in tasks:
                yield task, fn(task, payload)

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"workload": {"llm": llm}, "run": {"platform": name}}))
    out = tmp_path / "rows.csv"
    run_sweep(str(spec), str(out), progress=False, executor_object=InProcess())
    (row,) = Results(str(out), [], {})._read_results()
    assert row["status"] == "ok" and row["step_ns"] == for_platform

    case = Case(name=f"one-engine-fp8-{name}", kind="llm_step", source="this test", hardware=name, platform=name,
                nodes=1, measured={"step_s": 1.0}, workload=tuple(argv_of(llm)))
    assert run_case(case)["simulated_ns"] == for_platform
