"""The network YAML's parse kept by text (parse_network_config on astra_sim.safeio.parse_yaml_once, issue 37): the
same config as a first parse, an edited file parsed again. The copies and the bound: tests/test_safeio.py."""

from __future__ import annotations

from astra_network_analytical.model import parse_network_config
from astra_sim import safeio

TEXT = "topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 419.095159 ]\nlatency: [ 250.0 ]\n"


def test_a_text_parsed_again_gives_the_same_config_and_an_edit_is_seen(tmp_path, monkeypatch):
    path = tmp_path / "network.yml"
    path.write_text(TEXT)
    monkeypatch.setattr(safeio, "_PARSED_YAML", {})
    first = parse_network_config(path)
    assert TEXT in safeio._PARSED_YAML
    assert parse_network_config(path) == first
    path.write_text(TEXT.replace("[ 8 ]", "[ 4 ]"))  # the same size: the file is read again, not stamped
    edited = parse_network_config(path)
    assert tuple(edited.npus_count) == (4,) and tuple(first.npus_count) == (8,)
