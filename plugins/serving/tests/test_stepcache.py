"""The persistent step cache (stepcache.py): its folder, entries that round-trip, bad entries ignored, the size
bound, and a second identical astra serve simulating no shape with identical per-request results."""

import csv
import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from astra_serving import steptime
from astra_serving.stepcache import FORMAT, StepCache, StepEnergy, cache_folder, max_entries, prune
from astra_serving.steptime import Layout, StepTimer
from astra_sim.cli import main
from astra_sim.errors import ConfigError


def test_folder_from_the_environment(tmp_path):
    home = os.path.join(os.path.expanduser("~"), ".cache", "astra-sim", "steps")
    assert cache_folder({}) == home
    assert cache_folder({"XDG_CACHE_HOME": "/x"}) == os.path.join("/x", "astra-sim", "steps")
    assert cache_folder({"XDG_CACHE_HOME": "/x", "ASTRA_CACHE_DIR": str(tmp_path)}) == str(tmp_path)
    for off in ("0", "off", "false", " No "):
        assert cache_folder({"ASTRA_CACHE": off, "ASTRA_CACHE_DIR": str(tmp_path)}) is None
    assert cache_folder({"ASTRA_CACHE": "1", "ASTRA_CACHE_DIR": str(tmp_path)}) == str(tmp_path)


def test_max_entries_is_a_positive_int():
    assert max_entries({"ASTRA_CACHE_MAX_ENTRIES": "7"}) == 7
    for bad in ("0", "-1", "many"):
        try:
            max_entries({"ASTRA_CACHE_MAX_ENTRIES": bad})
        except ConfigError as exc:
            assert "ASTRA_CACHE_MAX_ENTRIES" in str(exc)
        else:
            raise AssertionError(bad)


def test_a_bad_bound_is_an_error_before_any_step(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ASTRA_CACHE_MAX_ENTRIES", "lots")
    code = main(["serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "4", "--requests", "2"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1 and "ASTRA_CACHE_MAX_ENTRIES" in err and "'lots'" in err
    assert main(["serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "4", "--requests", "2",
                 "--no-cache", "-q"]) == 0  # no cache, no bound to read


def test_entries_round_trip_per_layout_and_shape(tmp_path):
    a = StepCache(str(tmp_path), "layout-a", {}, 2)
    assert a.get((8, 0, 0, 0, False)) is None
    a.put((8, 0, 0, 0, False), (100, 250), StepEnergy(5000, 8, 2_960_000))
    assert a.get((8, 0, 0, 0, False)) == ((100, 250), StepEnergy(5000, 8, 2_960_000))
    assert a.get((8, 0, 0, 0, True)) is None                        # another shape
    assert StepCache(str(tmp_path), "layout-b", {}, 2).get((8, 0, 0, 0, False)) is None  # another layout
    assert StepCache(str(tmp_path), "layout-a", {}, 2).get((8, 0, 0, 0, False))[0] == (100, 250)  # another process
    a.put((9, 0, 0, 0, False), (7, 8))                              # a step without stats.energy
    assert a.get((9, 0, 0, 0, False)) == ((7, 8), None)


def test_a_file_named_by_a_run_option_is_keyed_by_its_content(tmp_path):
    config = tmp_path / "net.yaml"
    config.write_text("bandwidth: 1\n")
    folder = str(tmp_path / "cache")
    StepCache(folder, "l", {"network": str(config)}, 1).put((1, 0, 0, 0, False), (5,))
    assert StepCache(folder, "l", {"network": str(config)}, 1).get((1, 0, 0, 0, False)) == ((5,), None)
    config.write_text("bandwidth: 2\n")
    assert StepCache(folder, "l", {"network": str(config)}, 1).get((1, 0, 0, 0, False)) is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=200),
                      st.builds(lambda v, e: json.dumps({"stages_ns": v, **e}).encode(),
                                st.one_of(st.none(), st.integers(), st.text(max_size=5),
                                          st.lists(st.one_of(st.integers(-5, 10 ** 12), st.floats(), st.booleans(),
                                                             st.none()), max_size=4)),
                                st.one_of(st.just({}), st.fixed_dictionaries({"energy": st.one_of(
                                    st.none(), st.integers(), st.lists(st.one_of(st.integers(-5, 10 ** 9),
                                                                                 st.floats(), st.none()),
                                                                       max_size=4))})))))
def test_a_bad_entry_is_ignored(tmp_path, data):
    """Whatever bytes an entry holds, get() returns None or (pp non-negative ints, a well-formed StepEnergy or
    None); never raises. An entry without ``energy`` (format 1's) is not read."""
    cache = StepCache(str(tmp_path), "layout", {}, 2)
    shape = (3, 4, 5, 0, False)
    path = cache._path(shape)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)
    value = cache.get(shape)
    if value is not None:
        times, energy = value
        assert len(times) == 2 and all(type(t) is int and t >= 0 for t in times)
        assert energy is None or (all(type(v) is int and v >= 0 for v in energy) and energy.gpus >= 1)
        assert b'"energy"' in data


def test_the_format_is_part_of_every_key(tmp_path):
    """Entries of another format (format 1 kept times only) live under other keys: never misread."""
    cache = StepCache(str(tmp_path), "layout", {}, 1)
    assert json.loads(cache.namespace)[0] == FORMAT >= 2


def test_prune_keeps_the_newest(tmp_path):
    cache = StepCache(str(tmp_path), "layout", {}, 1)
    for i in range(20):
        cache.put((i, 0, 0, 0, False), (i,))
        os.utime(cache._path((i, 0, 0, 0, False)), ns=(i * 10 ** 9, i * 10 ** 9))
    assert prune(str(tmp_path), 30) == 0
    assert prune(str(tmp_path), 10) == 11       # down to 90 % of 10
    kept = [i for i in range(20) if cache.get((i, 0, 0, 0, False)) is not None]
    assert kept == list(range(11, 20))


def test_the_first_write_over_the_bound_prunes(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_CACHE_MAX_ENTRIES", "5")
    for i in range(8):
        StepCache(str(tmp_path), "layout", {}, 1).put((i, 0, 0, 0, False), (i,))  # a new process each time
    files = [f for _, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".json")]
    assert len(files) <= 5


def test_a_timer_reads_what_another_wrote(tmp_path, monkeypatch):
    """A fresh process (the memo emptied) takes the corner from the cache: same stage times, nothing simulated;
    without the cache it simulates it again, to the same value."""
    layout = Layout({"model": "llama3-8b", "inference_elementwise": True}, "hgx-h100", tp=8)
    monkeypatch.setattr(steptime, "_SHARED_MEMO", {})
    first = StepTimer(layout, cache=str(tmp_path))
    value = first.stage_ns(4, 0, 0)
    assert first.simulated == 1 and first.from_cache == 0
    monkeypatch.setattr(steptime, "_SHARED_MEMO", {})
    second = StepTimer(layout, cache=str(tmp_path))
    assert second.stage_ns(4, 0, 0) == value and second.simulated == 0 and second.from_cache == 1
    monkeypatch.setattr(steptime, "_SHARED_MEMO", {})
    third = StepTimer(layout, cache=False)
    assert third.stage_ns(4, 0, 0) == value and third.simulated == 1 and third.cache is None


def test_second_serve_simulates_no_shape(tmp_path, monkeypatch):
    """astra serve twice (separate processes: the in-process memo emptied) with one cache folder: identical
    per-request times, the second simulating 0 shapes; --no-cache simulates them again and writes nothing."""
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path / "cache"))

    def run(name, *extra):
        monkeypatch.setattr(steptime, "_SHARED_MEMO", {})
        report, rows = tmp_path / f"{name}.json", tmp_path / f"{name}.csv"
        assert main(["serve", "--model", "llama3-8b", "--platform", "hgx-h100", "--qps", "4", "--requests", "12",
                     "--prompt-len", "64", "--output-len", "6", "--seed", "3", *extra, "-o", str(report),
                     "--requests-csv", str(rows), "-q"]) == 0
        with open(rows) as handle:
            return json.loads(report.read_text())["step_simulator"], list(csv.DictReader(handle))

    cold, cold_rows = run("cold")
    assert cold["shapes_simulated"] > 0 and cold["shapes_from_cache"] == 0
    warm, warm_rows = run("warm")
    assert warm["shapes_simulated"] == 0 and warm["shapes_from_cache"] == cold["shapes_simulated"]
    assert warm_rows == cold_rows
    entries = sorted(os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "cache") for f in fs)
    off, off_rows = run("off", "--no-cache")
    assert off["shapes_simulated"] == cold["shapes_simulated"] and off["shapes_from_cache"] == 0
    assert off_rows == cold_rows
    assert sorted(os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "cache") for f in fs) == entries
