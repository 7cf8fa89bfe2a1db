"""A write that fails late keeps the computed result in a recovered file and says where (issue 39): astra serve's
secondary outputs (--timeline, --save-trace, --requests-csv), and the kernel's helper behind them
(:func:`astra_sim.safeio.write_or_recover`): fresh names, the temp dir when the cache fails, and a clear "lost"
when every place fails. A late failure is simulated by the final rename into the output folder failing with
ENOSPC (a full disk) or EROFS (a folder turned read-only)."""

from __future__ import annotations

import errno
import gzip
import json
import os
import re

import pytest

import astra_sim.safeio as safeio
from astra_sim.cli import main
from astra_sim.errors import ConfigError
from astra_sim_testing import fail_renames_into

SERVE = ["serve", "--preset", "llama3-8b", "--platform", "hgx-h100", "--qps", "4", "--requests", "3", "-q"]


@pytest.fixture
def kept(tmp_path, monkeypatch):
    folder = tmp_path / "kept"
    monkeypatch.setenv("ASTRA_RECOVERED_DIR", str(folder))
    return folder


def content(path):
    """The bytes of ``path``, decompressed when gzip (whose header holds the time it was written)."""
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.endswith(".gz") else data


def the_error(capsys):
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("astra: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("flag,name", [("--timeline", "t.json"), ("--timeline", "t.json.gz"),
                                       ("--save-trace", "t.jsonl"), ("--requests-csv", "r.csv")])
def test_a_late_serve_write_failure_keeps_the_output_whole(flag, name, tmp_path, kept, capsys, monkeypatch):
    reference = tmp_path / "ref" / name
    assert main([*SERVE, flag, str(reference)]) == 0
    out = tmp_path / "out"
    out.mkdir()
    fail_renames_into(monkeypatch, out)
    assert main([*SERVE, flag, str(out / name)]) == 2
    line = the_error(capsys)
    [recovered] = kept.iterdir()
    assert line.endswith(f"astra serve: could not write {flag} {out / name} (No space left on device); kept it as "
                         f"{recovered}"), line
    slug = f"serve-{flag.lstrip('-')}"
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-{slug}-\w+-{re.escape(name)}", recovered.name), recovered.name
    assert content(recovered) == content(reference)  # the whole output, byte for byte
    assert list(out.iterdir()) == []  # no partial file where the output was meant to go


def test_the_report_is_printed_before_the_requests_csv_fails(tmp_path, kept, capsys, monkeypatch):
    """--json's report is on stdout even when the requests' CSV cannot be written."""
    out = tmp_path / "out"
    out.mkdir()
    fail_renames_into(monkeypatch, out, errno.EROFS)
    assert main([*SERVE, "--json", "--requests-csv", str(out / "r.csv")]) == 2
    captured = capsys.readouterr()
    assert '"deployment"' in captured.out
    assert "(Read-only file system); kept it as" in captured.err
    assert len(list(kept.iterdir())) == 1


def comparable(report):
    """The report without what differs between two runs of one spec (times of this process, the step cache's hits)."""
    return {k: v for k, v in report.items() if k not in ("wall_s", "cpu_s", "step_simulator")}


def test_a_late_timeline_failure_keeps_the_report_too(tmp_path, kept, capsys, monkeypatch):
    """The timeline is written after the report is built: when it fails, -o still gets the whole report, --json
    prints it, and the one error line says where the timeline was kept."""
    reference = tmp_path / "ref.json"
    assert main([*SERVE, "-o", str(reference)]) == 0
    full, good = tmp_path / "full", tmp_path / "good"
    full.mkdir()
    fail_renames_into(monkeypatch, full)
    capsys.readouterr()
    assert main([*SERVE, "--timeline", str(full / "t.json"), "-o", str(good / "r.json"), "--json"]) == 2
    captured = capsys.readouterr()
    [recovered] = kept.iterdir()
    lines = [line for line in captured.err.splitlines() if line.startswith("astra: error:")]
    assert lines == [f"astra: error: astra serve: could not write --timeline {full / 't.json'} (No space left on "
                     f"device); kept it as {recovered}"], captured.err
    expected = comparable(json.loads(reference.read_text()))
    assert comparable(json.loads((good / "r.json").read_text())) == expected
    assert comparable(json.loads(captured.out)) == expected
    assert json.loads(recovered.read_text())["traceEvents"]
    assert list(full.iterdir()) == []


def test_a_late_timeline_and_report_failure_prints_the_report_and_names_both(tmp_path, kept, capsys, monkeypatch):
    """The whole disk fills: the timeline goes to a recovered file, the report to stdout, one line says both."""
    reference = tmp_path / "ref.json"
    assert main([*SERVE, "-o", str(reference)]) == 0
    full = tmp_path / "full"
    full.mkdir()
    fail_renames_into(monkeypatch, full)
    capsys.readouterr()
    assert main([*SERVE, "--timeline", str(full / "t.json"), "-o", str(full / "r.json")]) == 2
    captured = capsys.readouterr()
    [recovered] = kept.iterdir()
    lines = [line for line in captured.err.splitlines() if line.startswith("astra: error:")]
    assert lines == [f"astra: error: astra serve: could not write --timeline {full / 't.json'} (No space left on "
                     f"device); kept it as {recovered}; then --output {full / 'r.json'}: cannot write: No space left "
                     "on device; the report is on stdout instead"], captured.err
    assert comparable(json.loads(captured.out)) == comparable(json.loads(reference.read_text()))
    assert list(full.iterdir()) == []


def test_a_late_serve_search_output_failure_keeps_the_answer(tmp_path, kept, capsys, monkeypatch):
    """astra search --serve -o: --json prints the answer first, -o's late failure keeps it in a recovered file."""
    argv = ["search", "--serve", "--preset", "llama3-8b", "--platform", "hgx-h100", "--qps", "4", "--requests", "20",
            "--slo-ttft", "1000", "--tp", "1", "--gpus", "1", "-o"]
    reference = tmp_path / "ref.json"
    assert main([*argv, str(reference)]) == 0
    out = tmp_path / "out"
    out.mkdir()
    fail_renames_into(monkeypatch, out, errno.EROFS)
    capsys.readouterr()
    assert main([*argv, str(out / "a.json"), "--json"]) == 2
    captured = capsys.readouterr()
    [recovered] = kept.iterdir()
    assert the_error_in(captured.err) == (f"astra: error: astra search: could not write --output {out / 'a.json'} "
                                          f"(Read-only file system); kept it as {recovered}")
    assert re.fullmatch(r"\d{8}-\d{6}-search-output-\w+-a\.json", recovered.name), recovered.name
    assert recovered.read_bytes() == reference.read_bytes()
    assert json.loads(captured.out) == json.loads(reference.read_text())
    assert list(out.iterdir()) == []


def the_error_in(err):
    lines = [line for line in err.splitlines() if line.startswith("astra: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------------- the kernel's helper
def test_two_failures_in_one_second_get_two_files(tmp_path, kept, monkeypatch):
    monkeypatch.setattr(safeio.time, "strftime", lambda fmt: "20261129-141200")  # the same second, surely
    out = tmp_path / "out"
    out.mkdir()
    fail_renames_into(monkeypatch, out)
    results = (b"first", b"second", b"third")
    for data in results:
        with pytest.raises(ConfigError) as caught:
            safeio.write_or_recover(out / "t.json", data, "astra serve", "--timeline")
        path = str(caught.value).rsplit("kept it as ", 1)[1]
        assert re.fullmatch(r"20261129-141200-serve-timeline-\w+-t\.json", os.path.basename(path)), path
        assert open(path, "rb").read() == data
    assert sorted(p.read_bytes() for p in kept.iterdir()) == sorted(results)  # three files, none overwritten


def test_a_real_failure_falls_back_to_the_temp_dir_then_says_it_is_lost(tmp_path, monkeypatch):
    """No monkeypatched call: the output folder and the cache are under a regular file (ENOTDIR, which stops
    root too); the result goes to the temp dir; when that fails too, the error says what was lost."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    monkeypatch.setenv("ASTRA_RECOVERED_DIR", str(blocker / "kept"))
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(safeio.tempfile, "gettempdir", lambda: str(temp))

    def produce(handle):
        handle.write(b"the result")
    expected = (r"^astra validate: could not write --save-residuals .*blocker/sub/r.json \(Not a directory\); "
                r"kept it as .*temp/.*-validate-save-residuals-\w+-r\.json$")
    with pytest.raises(ConfigError, match=expected):
        safeio.write_or_recover(blocker / "sub" / "r.json", produce, "astra validate", "--save-residuals")
    [recovered] = temp.iterdir()
    assert recovered.read_bytes() == b"the result"

    monkeypatch.setattr(safeio.tempfile, "gettempdir", lambda: str(blocker / "tmp"))
    with pytest.raises(ConfigError) as caught:
        safeio.write_or_recover(blocker / "sub" / "r.json", b"the result", "astra validate", "--save-residuals")
    message = str(caught.value)
    assert message.startswith(f"astra validate: could not write --save-residuals {blocker / 'sub' / 'r.json'} "
                              "(Not a directory); could not keep it anywhere either (")
    assert message.endswith("), so it is lost"), message
    assert f"{blocker / 'kept'}: Not a directory" in message and f"{blocker / 'tmp'}: Not a directory" in message


def test_a_recovered_result_that_fails_halfway_leaves_no_part(tmp_path, monkeypatch):
    """The first recovery place fills up while the result is written again: its part is removed, the next place
    gets the whole result."""
    first, second = tmp_path / "cache", tmp_path / "temp"
    monkeypatch.setenv("ASTRA_RECOVERED_DIR", str(first))
    second.mkdir()
    monkeypatch.setattr(safeio.tempfile, "gettempdir", lambda: str(second))
    calls = []

    def produce(handle):  # the output (its rename fails), the cache (full halfway), the temp dir
        calls.append(handle)
        handle.write(b"part")
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        handle.write(b" and the rest")

    out = tmp_path / "out"
    out.mkdir()
    fail_renames_into(monkeypatch, out)
    with pytest.raises(ConfigError, match="kept it as"):
        safeio.write_or_recover(out / "x.csv", produce, "astra serve", "--requests-csv")
    assert len(calls) == 3
    assert list(first.iterdir()) == []
    [recovered] = second.iterdir()
    assert recovered.read_bytes() == b"part and the rest"


def test_a_write_that_works_is_atomic_and_keeps_nothing(tmp_path, kept):
    assert safeio.write_or_recover(tmp_path / "a" / "x.json", b"{}", "astra serve", "--timeline") == 2
    assert (tmp_path / "a" / "x.json").read_bytes() == b"{}"
    assert not kept.exists()
