import os
import shutil

import pytest


@pytest.fixture
def astra_exe():
    """The astra command of this environment (for subprocess tests)."""
    import sys

    path = os.path.join(os.path.dirname(sys.executable), "astra")
    return path if os.path.exists(path) else shutil.which("astra")


SMALL_SPEC = """
workload:
  llm: {preset: gpt3-13b, layers: 4, hidden: 512, heads: 8, kv-heads: 8, ffn-hidden: 2048, seq-len: 256, tp: 2, pp: 2, dp: 2, micro-batches: 2}
run: {platform: hgx-h100, compute-model: gpu}
axes:
  grid: {run.platform-collective: [ring, nccl], workload.llm.tp: [2, 4], workload.llm.micro-batches: [2, 4, 8]}
"""


@pytest.fixture
def small_spec(tmp_path):
    """A 12-point sweep of small GPT layouts (each point well under a second)."""
    path = tmp_path / "spec.yaml"
    path.write_text(SMALL_SPEC)
    return str(path)


@pytest.fixture
def simulated_step_on():
    """The bound tests' reference: ``step(platform, source, cfg, folder)``, a layout's simulated step as the search
    runs it (NCCL); a layout that does not fit the GPU's memory is not drawn (hypothesis ``assume``)."""

    def step(platform, source, cfg, folder):
        from hypothesis import assume

        from astra_sim import simulate
        from astra_sim.errors import InfeasibleError
        from astra_sweep.search import _options
        from astra_workload_generators.llm import LlmSpec, generate_llm_workload

        prefix = str(folder / "w")
        generate_llm_workload(LlmSpec.from_mapping({**source, **_options(cfg)}, "workload.llm"), prefix,
                              on_warning=lambda _: None)
        try:
            return simulate(workload=prefix, platform=platform, platform_collective="nccl",
                            comm_groups=f"{prefix}.groups.json", breakdown=False).max_finish_ns
        except InfeasibleError:
            assume(False)

    return step


@pytest.fixture
def simulated_step(simulated_step_on):
    """:func:`simulated_step_on` on hgx-h100: ``step(source, cfg, folder)``."""
    return lambda source, cfg, folder: simulated_step_on("hgx-h100", source, cfg, folder)


# ---- the bound's NCCL-option tests (test_bound_nccl_version.py, test_bound_nccl_nvls.py): one case, by hand there
#: a 2-layer Llama (hidden 512, MLP 1376) as a Hugging Face config; on two hgx-h100 nodes, TP 2 x DP 8, ZeRO 0
TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
              "intermediate_size": 1376, "num_attention_heads": 8, "num_key_value_heads": 8, "num_hidden_layers": 2,
              "vocab_size": 32000, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
TINY_LAYOUT = dict(tp=2, pp=1, dp=8, micro_batches=1, micro_batch_size=1, zero=0, sequence_parallel=True)
#: the search's words for that one layout (the caller adds its NCCL options)
TINY_SEARCH = ["search", "--seq-len", "256", "--gpus", "16", "--platform", "hgx-h100", "--global-batch", "8", "--tp",
               "2", "--pp", "1", "--vp", "1", "--mbs", "1", "--zero", "0", "--recompute", "none", "--no-progress",
               "--json"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The path of :data:`TINY_LLAMA`'s config.json."""
    import json

    path = tmp_path_factory.mktemp("model") / "config.json"
    path.write_text(json.dumps(TINY_LLAMA))
    return str(path)


@pytest.fixture
def dp_all_reduce_bytes(tiny, tmp_path):
    """The sizes of rank 0's all-reduces on its data-parallel group (ranks 0, 2, ..., 14) of the tiny layout, from
    the generator."""
    import json

    from astra_sim.chakra import types as T
    from astra_workload_compact import read_compact_workload, trace_nodes
    from astra_workload_generators.llm import LlmConfig, LlmSpec, generate_llm_workload

    from astra_sweep.search import _options

    prefix = str(tmp_path / "w")
    generate_llm_workload(LlmSpec.from_mapping({"model": tiny, "seq-len": 256,
                                                **_options(LlmConfig(**TINY_LAYOUT))}, "workload.llm"),
                          prefix, on_warning=lambda _: None)
    groups = json.loads((tmp_path / "w.groups.json").read_text())
    dp = [g for g, members in groups.items() if members == list(range(0, 16, 2))]
    return [node.attrs["comm_size"] for node in trace_nodes(read_compact_workload(prefix).traces[0])
            if node.type == T.COMM_COLL_NODE and node.attrs.get("comm_type") == T.ALL_REDUCE
            and str(node.attrs.get("pg_name")) in dp]


@pytest.fixture
def search_in_process(tiny, capsys, monkeypatch):
    """``search(*nccl_words)``: the tiny layout's search end to end with its points run in this process (no worker to
    start), returning (its --json answer, the run options of each sweep it ran)."""

    def search(*words):
        import json

        import yaml

        from astra_sim import executors
        from astra_sim.cli import main
        from astra_sweep import sweep

        class InProcess(executors.Executor):
            def run(self, fn, tasks, timeout=None):
                for task, payload in tasks:
                    yield task, fn(task, payload)

        runs, run_sweep = [], sweep.run_sweep

        def spy(spec_path, *args, **kw):
            with open(spec_path) as handle:
                runs.append(yaml.safe_load(handle)["run"])
            return run_sweep(spec_path, *args, **kw)

        monkeypatch.setattr(sweep, "run_sweep", spy)
        monkeypatch.setattr(executors, "make_executor", lambda *args: InProcess())
        capsys.readouterr()
        assert main([*TINY_SEARCH, "--model", tiny, *words]) == 0
        return json.loads(capsys.readouterr().out), runs

    return search
