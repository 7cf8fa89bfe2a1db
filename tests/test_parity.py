"""Every case in ../shared/parity: per-rank finish times equal the reference's, to the nanosecond.

Cases for a backend that is not installed (e.g. ``congestion`` before its
plugin exists) are skipped with that reason, never silently dropped.
"""

import pytest

from astra_sim.plugins import build_registry, make_plugin_manager
from astra_sim.simulation import simulate
from astra_sim_testing import find_shared_dir, parity_cases, parity_kwargs

SHARED = find_shared_dir()
CASES = parity_cases(SHARED)

_BACKENDS = set(build_registry(make_plugin_manager()).names("network_backend"))


@pytest.mark.skipif(not CASES, reason="shared/parity/cases.csv not found")
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_parity_case(case):
    if case["backend"] not in _BACKENDS:
        pytest.skip(f"network backend {case['backend']!r} is not installed")
    parity = SHARED / "parity"
    configs = parity / "configs"
    args = (
        str(parity / case["trace"]),
        str(configs / f"{case['system']}.json"),
        str(configs / f"{case['network']}.yml"),
        str(configs / f"{case['memory']}.json"),
    )
    kwargs = dict(network_backend=case["backend"], **parity_kwargs(case["extra"]))
    if case["finishes"] != "1":
        with pytest.raises(Exception) as info:
            simulate(*args, **kwargs)
        assert "Traceback" not in str(info.value)
        return
    report = simulate(*args, **kwargs)
    assert report.max_finish_ns == int(case["max_ns"])
    for rank in report.ranks:  # the breakdown's parts add up exactly to every rank's finish time
        parts = rank.breakdown["parts"]
        assert sum(parts.values()) == rank.finish_ns, (rank.rank, parts)
        compute = sum(ns for name, ns in parts.items() if name.startswith("compute:"))
        assert compute == rank.compute_ns, (rank.rank, parts)  # one compute stream: its busy time
    assert report.min_finish_ns == int(case["min_ns"])
    if case["exposed_ns"]:
        assert report.max_exposed_comm_ns == int(case["exposed_ns"])


def test_parity_corpus_is_present():
    """Guard: the parity corpus must be found in CI (a silent skip would hide regressions)."""
    if SHARED is None:
        pytest.skip("reference material not available")
    assert len(CASES) > 100
    assert sum(c["backend"] == "analytical" for c in CASES) >= 140
