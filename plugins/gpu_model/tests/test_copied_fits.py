"""A preset that assumes another preset's fitted GEMM scale (B300 and GB200 take B200's MXFP8 and NVFP4 fits) holds
that preset's current value: the copy is marked and rewritten by fit/fit_peak_gemm.py --write. Session 54 found both
copies left at B200's values from before its CUTLASS-tile refit (b5f86865): 0.8485 and 0.7544 against 0.8945 and
0.788, so B300's MXFP8 GEMMs ran 5 % below the stated assumption (docs/validation-dense-steps.md)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from astra_gpu_model.gpu import load_gpu, preset_dir

FIT_SCRIPT = Path(__file__).resolve().parents[1] / "fit" / "fit_peak_gemm.py"
COPY = re.compile(r"^  (\w+): ([0-9.]+)\s+# copied: calibration\.fit_peak_efficiency\('(\w+)'\)", re.MULTILINE)


def _copies():
    return [(path.stem, *m.groups()) for path in sorted(Path(preset_dir()).glob("*.yaml"))
            for m in COPY.finditer(path.read_text())]


def test_every_copied_scale_is_the_named_presets_current_value():
    copies = _copies()
    assert {(name, key) for name, key, _, _ in copies} >= {
        ("B300", "mxfp8_gemm_scale"), ("B300", "fp4_gemm_scale"),
        ("GB200", "mxfp8_gemm_scale"), ("GB200", "fp4_gemm_scale")}
    for name, key, value, source in copies:
        assert float(value) == getattr(load_gpu(source), key), (name, key, source)


def test_b300_block_scaled_efficiency_by_hand():
    # B300's own BF16 fit times B200's scales: 0.7315 x 0.8945 = 0.65432675 of the FP8 peak for MXFP8, 0.7315 x
    # 0.788 = 0.576422 of the FP4 peak for NVFP4 (the stale copies gave 0.62067775 and 0.5518436)
    b300 = load_gpu("B300")
    assert abs(b300.gemm_params("mxfp8").compute_efficiency - 0.65432675) < 1e-9
    assert abs(b300.gemm_params("nvfp4").compute_efficiency - 0.576422) < 1e-9
    assert b300.peak_flops("mxfp8") == 4500e12 and b300.peak_flops("nvfp4") == 13125e12


def test_the_fit_script_rewrites_a_stale_copy(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("fit_peak_gemm_under_test", FIT_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stale = ("efficiency:\n  compute_efficiency: 0.7      # fitted: calibration.fit_peak_efficiency('X')\n"
             "  mxfp8_gemm_scale: 0.8485    # copied: calibration.fit_peak_efficiency('B200') (ASSUMPTION)\n"
             "  fp4_gemm_scale: 0.7544      # ASSUMPTION: someone else's\n")
    (tmp_path / "X.yaml").write_text(stale)
    (tmp_path / "Y.yaml").write_text("efficiency:\n  mxfp8_gemm_scale: 0.5\n")
    monkeypatch.setattr(module, "PRESETS", tmp_path)
    out = module.rewrite_copies("B200", {"compute_efficiency": 0.7216, "mxfp8_gemm_scale": 0.8945,
                                         "fp4_gemm_scale": 0.788})
    assert list(out) == [tmp_path / "X.yaml"]  # Y has no copied line: untouched
    text = out[tmp_path / "X.yaml"]
    assert "  mxfp8_gemm_scale: 0.8945    # copied: calibration.fit_peak_efficiency('B200') (ASSUMPTION)\n" in text
    assert "  compute_efficiency: 0.7      #" in text and "  fp4_gemm_scale: 0.7544      #" in text
    assert module.rewrite_copies("GB200", {"mxfp8_gemm_scale": 0.1}) == {}  # another preset's copy: not this one
