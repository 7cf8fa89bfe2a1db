"""nccl.py's calibration lives in nccl_calibration.py (a split by concept: the choice and terms vs. the measured-time
correction); every name stays importable from astra_gpu_model.nccl, as fit/fit_nccl.py, validation's --cv and the
tests import it, and the algorithm/protocol names it spells itself are nccl's."""

from astra_gpu_model import nccl, nccl_calibration


def test_the_calibration_is_re_exported_as_one_object():
    for name in nccl_calibration.__all__:
        assert getattr(nccl, name) is getattr(nccl_calibration, name), name
    assert set(nccl_calibration.__all__) <= set(dir(nccl))


def test_its_names_are_the_models():
    assert (nccl_calibration.RING, nccl_calibration.NVLS, nccl_calibration.SIMPLE) == (nccl.RING, nccl.NVLS, nccl.SIMPLE)
    pairs = {(st.algo, st.proto) for st in nccl.PEAK_STATEMENTS}
    assert all(a in nccl.ALGORITHMS and p in nccl.PROTOCOLS for a, p in pairs)


def test_the_override_reaches_the_models_times():
    cfg = nccl.config_for_gpu("H100-SXM5-80GB")
    base = nccl.collective_time_us("all_reduce", 1 << 20, 8, cfg)[0]
    cal = {arch: nccl.NcclCalibration(c.overhead_us + 10.0, c.latency_scale, c.efficiency, c.fitted_max_bytes,
                                      c.beyond_fit) for arch, c in nccl.load_calibration().items()}
    with nccl.calibration_override(cal):
        assert nccl.collective_time_us("all_reduce", 1 << 20, 8, cfg)[0] == base + 10.0
    assert nccl.collective_time_us("all_reduce", 1 << 20, 8, cfg)[0] == base
