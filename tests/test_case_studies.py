"""The case studies (examples/case-studies/<name>/, docs/case-studies.md): each one's ``--small`` form runs in
under 2 minutes and gives its headline ratio within the tolerance its ``expected.json`` states; every study has
the files the index promises."""

from __future__ import annotations

import importlib.util
import json
import re
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "examples" / "case-studies"
NAMES = sorted(p.name for p in STUDIES.iterdir() if (p / "run.py").is_file())


def _load(name):
    spec = importlib.util.spec_from_file_location(f"case_study_{name.replace('-', '_')}", STUDIES / name / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_studies_and_the_index_names_each():
    assert NAMES
    index = (ROOT / "docs" / "case-studies.md").read_text()
    for name in NAMES:
        assert f"examples/case-studies/{name}/" in index, name
    assert "docs/case-studies.md" in "\n".join((ROOT / "README.md").read_text().splitlines()[:12])


@pytest.mark.parametrize("name", NAMES)
def test_each_study_has_its_readme_figure_and_expected_ratio(name):
    folder = STUDIES / name
    expected = json.loads((folder / "expected.json").read_text())
    assert expected["headline"] and 0 < expected["tolerance"] < 0.5
    assert expected["small"]["ratio"] > 0 and expected["full"]["ratio"] > 0
    readme = (folder / "README.md").read_text()
    assert "(figure.png)" in readme and (folder / "figure.png").stat().st_size > 0
    assert "**The claim.**" in readme and "**Why ours" in readme
    prose = re.sub(r"^```.*?^```", "", readme, flags=re.M | re.S)
    for target in re.findall(r"\]\(([^)\s#]+)[^)]*\)", prose):
        if not re.match(r"[a-z]+:", target):
            assert (folder / target).exists(), f"{name}/README.md: broken link {target}"


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_the_small_form_gives_the_expected_ratio_in_under_two_minutes(name, tmp_path, capsys):
    start = time.monotonic()
    assert _load(name).main_(["--small", "--out", str(tmp_path)]) == 0, capsys.readouterr().out
    assert time.monotonic() - start < 120
    ours = json.loads((tmp_path / "ours.json").read_text())
    assert ours["form"] == "small" and ours["ok"]
    assert list(tmp_path.glob("figure*.png"))


def test_a_ratio_outside_the_tolerance_fails_the_check(tmp_path, capsys):
    import sys

    sys.path.insert(0, str(STUDIES))
    try:
        from casestudy import check
    finally:
        sys.path.remove(str(STUDIES))
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "expected.json").write_text(json.dumps({"headline": "h", "tolerance": 0.05, "full": {"ratio": 2.0},
                                                      "small": {"ratio": 1.0}}))
    assert check(folder, True, 1.04, tmp_path) == 0
    assert check(folder, True, 1.06, tmp_path) == 1
    assert "OUTSIDE THE TOLERANCE" in capsys.readouterr().out
    assert check(folder, False, 2.0, tmp_path) == 0


def _module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("n", [2, 3, 8, 72])
def test_the_allpairs_program_passes_the_msccl_checks_and_sends_two_rounds(n, tmp_path):
    """The MSCCL-vs-NCCL study's all-pairs all-reduce: every send has its receive, nothing deadlocks (the
    reader's static checks), and each GPU sends 2 (n - 1) messages of one chunk."""
    from astra_collectives_msccl.msccl_ir import parse_msccl

    algorithms = _module(STUDIES / "msccl-vs-nccl" / "algorithms.py", "case_study_msccl_algorithms")
    path = tmp_path / "allpairs.xml"
    path.write_text(algorithms.allpairs_allreduce_xml(n))
    parse_msccl(str(path))
    sends = re.findall(r'type="s" srcbuf="i" srcoff="\d+" dstbuf="\w" dstoff="\d+" cnt="1"', path.read_text())
    assert len(sends) == 2 * (n - 1) * n
    with pytest.raises(ValueError, match="at least 2 GPUs"):
        algorithms.allpairs_allreduce_xml(1)
