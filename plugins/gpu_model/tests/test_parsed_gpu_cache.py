"""A GPU description parsed once per text (astra_gpu_model.gpu._read_yaml, on astra_sim.safeio.parse_yaml_once): a serving run resolves its
platform's GPU about ten times per batch shape it simulates, and parsing the preset's YAML was half of its CPU."""

import astra_sim.safeio as safeio
from astra_gpu_model import gpu


def _counting(monkeypatch):
    calls = []
    real = safeio.parse_yaml

    def parse(text, path, what=""):
        calls.append(path)
        return real(text, path, what)

    monkeypatch.setattr(safeio, "parse_yaml", parse)
    return calls


def test_an_unchanged_preset_is_parsed_once_and_each_caller_gets_its_own_copy(monkeypatch):
    monkeypatch.setattr(safeio, "_PARSED_YAML", {})
    calls = _counting(monkeypatch)
    first, second = gpu.load_gpu("H100-SXM5-80GB"), gpu.load_gpu("h100")
    assert len(calls) == 1 and first == second
    path = gpu.preset_dir() / "H100-SXM5-80GB.yaml"
    data = gpu._read_yaml(path, "preset H100-SXM5-80GB")
    data["name"] = "changed by a caller"
    assert gpu._read_yaml(path, "preset H100-SXM5-80GB")["name"] != "changed by a caller" and len(calls) == 1


def test_an_edited_file_is_parsed_again(tmp_path, monkeypatch):
    monkeypatch.setattr(safeio, "_PARSED_YAML", {})
    calls = _counting(monkeypatch)
    text = (gpu.preset_dir() / "H100-SXM5-80GB.yaml").read_text(encoding="utf-8")
    mine = tmp_path / "my-gpu.yaml"
    mine.write_text(text, encoding="utf-8")
    before = gpu.load_gpu(str(mine)).sm_count
    # at once, the same size: a modification time may not have moved, the text has
    mine.write_text(text.replace(f"sm_count: {before}", f"sm_count: {before - 2}"), encoding="utf-8")
    assert gpu.load_gpu(str(mine)).sm_count == before - 2 and len(calls) == 2


def test_a_preset_is_built_once_and_each_caller_gets_its_own_copy(monkeypatch):
    """load_gpu's presets (gpu._built_preset): built again only when a file they are built from reads differently;
    a ``fit`` (the fit script's) always builds."""
    monkeypatch.setattr(gpu, "_BUILT", {})
    built = []
    real = gpu._build

    def build(data, where, path=None, fit=None):
        built.append(where)
        return real(data, where, path=path, fit=fit)

    monkeypatch.setattr(gpu, "_build", build)
    first = gpu.load_gpu("h100")
    first.tensor_tflops["bf16"] = 1.0  # a caller's change stays its own
    second = gpu.load_gpu("H100-SXM5-80GB")
    assert len(built) == 1 and second.tensor_tflops["bf16"] == 989.4 and second is not first
    gpu.load_gpu("h100", fit=gpu.fitted_parameters()["families"])
    assert len(built) == 2
    gpu.load_gpu("A100-SXM4-80GB")
    assert len(built) == 3

