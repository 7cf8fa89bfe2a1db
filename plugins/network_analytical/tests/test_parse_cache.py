"""The network YAML's parse kept by text (model._load_network_yaml, issue 37): the same config as a first parse, an
edited file parsed again, each caller its own copy, the kept texts bounded."""

from __future__ import annotations

from astra_network_analytical import model
from astra_network_analytical.model import parse_network_config

TEXT = "topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 419.095159 ]\nlatency: [ 250.0 ]\n"


def test_a_text_parsed_again_gives_the_same_config_and_an_edit_is_seen(tmp_path):
    path = tmp_path / "network.yml"
    path.write_text(TEXT)
    model._PARSED.clear()
    first = parse_network_config(path)
    assert TEXT in model._PARSED
    assert parse_network_config(path) == first
    path.write_text(TEXT.replace("[ 8 ]", "[ 4 ]"))  # the same size: the file is read again, not stamped
    edited = parse_network_config(path)
    assert tuple(edited.npus_count) == (4,) and tuple(first.npus_count) == (8,)


def test_each_caller_gets_its_own_copy_and_the_texts_kept_are_bounded(tmp_path):
    path = tmp_path / "network.yml"
    path.write_text(TEXT)
    model._PARSED.clear()
    first = model._load_network_yaml(path)
    first["npus_count"].append(2)
    assert model._load_network_yaml(path)["npus_count"] == [8]
    for i in range(model._PARSED_MAX + 1):
        path.write_text(TEXT + f"# {i}\n")
        model._load_network_yaml(path)
    assert len(model._PARSED) <= model._PARSED_MAX
