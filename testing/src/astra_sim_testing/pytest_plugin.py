"""The pytest plugin of astra-sim-testing (``pytest11`` entry point): fixtures every suite can use, and
``make test``'s reproducible hypothesis profile. Registered through the entry point, the fixtures reach every suite
however pytest is invoked (no ``pytest_plugins`` in conftest files)."""

from __future__ import annotations

import os

import pytest

from astra_sim_testing import find_shared_dir


def _reproducible_hypothesis():
    """``make test`` (``ASTRA_FUZZ_SCALE`` unset or 1) runs every property-based test derandomized and without
    the example database, so that a clean clone gives the same examples every time (CI cannot flake on a new
    random draw); ``make fuzz`` (a larger scale) keeps hypothesis random. Tests that set their own ``@settings``
    inherit this (fields they do not set come from the loaded profile)."""
    try:
        from hypothesis import settings

        from astra_sim_testing.fuzzing import SCALE
    except (ImportError, ValueError):  # hypothesis is a test dependency; a malformed ASTRA_FUZZ_SCALE: as before
        return
    if SCALE == 1:
        settings.register_profile("astra-reproducible", derandomize=True, database=None)
        settings.load_profile("astra-reproducible")


_reproducible_hypothesis()

# Commands run by tests stay quiet about their progress (a test of stderr would otherwise depend on how busy the
# machine is); tests of the progress lines set ASTRA_PROGRESS themselves.
os.environ.setdefault("ASTRA_PROGRESS", "0")

# Persistent caches (astra serve's step times, astra search's bounds) go to a folder of this test session, removed at its end: tests
# never read a cache an earlier run of other code left, and never write into the user's ~/.cache.
_SESSION_CACHE = None
if "ASTRA_CACHE_DIR" not in os.environ:
    import tempfile

    from astra_sim.generated import owned

    # named by this process: a test run killed before its end leaves it, and the next astra command reclaims it
    _SESSION_CACHE = tempfile.mkdtemp(prefix=owned("astra-test-cache-"))
    os.environ["ASTRA_CACHE_DIR"] = _SESSION_CACHE
    os.environ.setdefault("ASTRA_SEARCH_CACHE", os.path.join(_SESSION_CACHE, "search"))  # astra search's bounds
    os.environ.setdefault("ASTRA_NS3_CACHE", os.path.join(_SESSION_CACHE, "ns3"))  # the ns3 backend's compiled glue
    # results a late write failure keeps (astra_sim.safeio.recover) stay out of ~/.cache too
    os.environ.setdefault("ASTRA_RECOVERED_DIR", os.path.join(_SESSION_CACHE, "recovered"))


def pytest_unconfigure(config):
    if _SESSION_CACHE is not None:
        import shutil

        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def shared_dir():
    """Path to ``../shared``; skips the test when the reference material is absent."""
    path = find_shared_dir()
    if path is None:
        pytest.skip("reference material (../shared or $ASTRA_SHARED_DIR) not found")
    return path


@pytest.fixture(scope="session")
def parity_dir(shared_dir):
    path = shared_dir / "parity"
    if not path.is_dir():
        pytest.skip("shared/parity not found")
    return path


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` run first (stable: each group keeps its order). ``make test`` spreads the suite over
    two workers that steal work from each other; a long test that starts last keeps one worker busy while the other
    idles, so the long ones go first and the short ones fill the end (CI runs the whole suite on two cores)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_collection_finish(session):
    """What collection made (every test module, hypothesis, numpy, pandas: about 330k objects) lives to the end of
    the session: moved out of the cyclic collector's reach (``gc.freeze``), so that its full passes walk only what
    the tests make."""
    import gc

    gc.collect()
    gc.freeze()
