"""The energy door holds its LLM step in memory (issue 37): every case gives the same ns and joules as the step
written to Chakra files and parsed back."""

from __future__ import annotations

import pytest

from astra_energy.cases import load_cases, step_report


@pytest.mark.parametrize("case", load_cases(), ids=lambda case: case.name)
def test_held_step_is_the_written_step_to_the_ns_and_joule(case):
    held, written = step_report(case), step_report(case, in_memory=False)
    assert [(r.rank, r.finish_ns, r.compute_ns) for r in held.ranks] == \
        [(r.rank, r.finish_ns, r.compute_ns) for r in written.ranks]
    assert held.stats["energy"] == written.stats["energy"]
    assert held.stats["energy"][case.quantity] > 0
