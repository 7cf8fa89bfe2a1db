"""Shared oracles of the serving tests."""

import pytest

from astra_serving.steptime import CONTEXT_RATIO, neighbours


def _trilinear(prefill, decode, context, value_of, graph=False):
    """A step's interpolation written out independently of the StepTimer: prefill outermost, then decode, then
    context, corners of weight 0 left out; ``value_of(corner key)`` gives a corner's value."""
    (p_lo, p_hi, wp), (d_lo, d_hi, wd) = neighbours(prefill), neighbours(decode)
    c_lo, c_hi, wc = neighbours(max(2, context), CONTEXT_RATIO) if decode else (0, 0, 0.0)
    total = 0.0
    for p, a in ((p_lo, 1.0 - wp), (p_hi, wp)):
        for d, b in ((d_lo, 1.0 - wd), (d_hi, wd)):
            for c, w in ((c_lo, 1.0 - wc), (c_hi, wc)):
                if a * b * w > 0:
                    total += a * b * w * value_of((p, d, c if d else 0, 0, graph))
    return total


@pytest.fixture(scope="session")
def trilinear():
    return _trilinear


class FixedTimer:
    """10 ms for a step with any prefill, 2 ms for a decode-only one; energy 1 mJ per us of step, idle 1 W."""

    def step_ns(self, prefill, decode, context, prefill_done=0, graph=False):
        return 10 * 1_000_000 if prefill else 2 * 1_000_000

    def energy_mj(self, *shape):
        return self.step_ns(*shape) / 1000

    def idle_mw(self):
        return 1000


@pytest.fixture(scope="session")
def fixed_timer():
    """The class of a step timer with fixed times (:class:`FixedTimer`), for engine tests computed by hand."""
    return FixedTimer
