"""astra_sim.safeio: the bounded readers; and the one atomic writer every output goes through (cliutil)."""

from __future__ import annotations

import gzip
import os
import stat

import pytest

from astra_sim import safeio
from astra_sim.errors import ConfigError
from astra_sim.safeio import write_bytes_atomic, write_text_atomic
from astra_sim.safeio import gunzip, load_json, parse_json, parse_yaml, read_bytes


def test_gunzip_members_padding_and_limits():
    data = b"hello" * 1000
    assert gunzip(gzip.compress(data), "x") == data
    assert gunzip(gzip.compress(data) + gzip.compress(b"ab"), "x") == data + b"ab"  # concatenated members
    assert gunzip(gzip.compress(data) + bytes(7), "x") == data  # zero padding, as gzip(1) accepts
    with pytest.raises(ConfigError, match=r"x: byte offset \d+: gzip-compressed file is truncated"):
        gunzip(gzip.compress(data)[:-5], "x")
    with pytest.raises(ConfigError, match=r"x: byte offset \d+: gzip-compressed file is corrupt: not the start of a gzip member"):
        gunzip(gzip.compress(data) + b"junk", "x")
    with pytest.raises(ConfigError, match="expands to more than 1,000 bytes"):
        gunzip(gzip.compress(data), "x", limit=1000)


def test_json_reader_names_file_line_and_depth(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"a": [1,\n 2,]}')
    with pytest.raises(ConfigError, match=r"a.json: invalid JSON at line 2, column 4"):
        load_json(path, "system configuration")
    with pytest.raises(ConfigError, match="d.json: nested more than 200 levels deep"):
        parse_json("[" * 300 + "]" * 300, "d.json")
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ConfigError, match=r"a.json: not UTF-8 text \(byte offset 7"):
        load_json(path)
    assert parse_json("[NaN, 1e999]", "n.json")[1] == float("inf")  # range checks name the key later


def test_read_bytes_refuses_large_files_and_odd_names(tmp_path):
    path = tmp_path / "big.yml"
    path.write_bytes(bytes(2000))
    with pytest.raises(ConfigError, match=r"big.yml: 2,000 bytes, more than the 1,000 accepted"):
        read_bytes(path, limit=1000)
    with pytest.raises(ConfigError, match="is a directory"):
        read_bytes(tmp_path)
    with pytest.raises(ConfigError, match="is not a valid file name"):
        read_bytes(str(tmp_path / "a\0b"))


def test_yaml_is_safe_and_bounded():
    assert parse_yaml("a: &x [1, 2]\nb: *x\n", "ok.yml") == {"a": [1, 2], "b": [1, 2]}  # aliases are fine
    with pytest.raises(ConfigError, match=r"p.yml: not valid YAML \(line 1, column 1\): could not determine a "
                                          "constructor"):
        parse_yaml("!!python/object/apply:os.system ['true']", "p.yml")
    with pytest.raises(ConfigError, match=r"t.yml: unreadable value"):
        parse_yaml("a: 2001-13-45", "t.yml")


def test_write_bytes_atomic_makes_folders_and_keeps_the_usual_permissions(tmp_path):
    target = tmp_path / "new" / "dir" / "r.json"
    write_text_atomic(target, "whole\n")
    write_bytes_atomic(target, b"bytes too\n")
    assert target.read_bytes() == b"bytes too\n"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    assert os.listdir(target.parent) == ["r.json"]


def test_parse_yaml_once_parses_a_text_once_gives_copies_and_keeps_a_bounded_number(monkeypatch):
    """safeio.parse_yaml_once (the GPU and network readers' parse): each caller its own copy, errors not kept and
    naming the file, at most _PARSED_YAML_MAX texts."""
    monkeypatch.setattr(safeio, "_PARSED_YAML", {})
    calls = []
    real = safeio.parse_yaml
    monkeypatch.setattr(safeio, "parse_yaml", lambda text, path, what="": calls.append(path) or real(text, path, what))
    first = safeio.parse_yaml_once("a: [1, 2]\n", "x.yaml")
    first["a"].append(3)
    assert safeio.parse_yaml_once("a: [1, 2]\n", "y.yaml") == {"a": [1, 2]} and calls == ["x.yaml"]
    for _ in range(2):
        with pytest.raises(ConfigError, match="bad.yaml"):
            safeio.parse_yaml_once("a: [1,\n", "bad.yaml")
    assert calls == ["x.yaml", "bad.yaml", "bad.yaml"]
    monkeypatch.setattr(safeio, "_PARSED_YAML_MAX", 3)
    for i in range(7):
        assert safeio.parse_yaml_once(f"n: {i}\n", f"{i}.yaml") == {"n": i}
        assert len(safeio._PARSED_YAML) <= 3
