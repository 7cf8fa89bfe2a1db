"""A GPU preset's compute capability, read from its stated architecture, and the platform that shows it."""

from astra_sim.platforms import get_platform

from astra_gpu_model.gpu import load_gpu


def test_compute_capability_from_the_presets_architecture():
    # the presets' architecture lines: "Hopper (GH100, compute capability 9.0)", "Blackwell (2 x GB100 dies, compute
    # capability 10.0)", "Blackwell Ultra (2 dies, compute capability 10.3)"; AMD's "CDNA 4 (gfx950)" states none
    assert load_gpu("H200-SXM").compute_capability == (9, 0)
    assert load_gpu("B200").compute_capability == (10, 0)
    assert load_gpu("B300").compute_capability == (10, 3)
    assert load_gpu("MI355X").compute_capability is None


def test_a_platform_describes_its_gpus_compute_capability():
    assert get_platform("hgx-h200").describe()["compute_capability"] == [9, 0]
    assert get_platform("gb200-nvl72").describe()["compute_capability"] == [10, 0]
    assert get_platform("mi355x").describe()["compute_capability"] is None
