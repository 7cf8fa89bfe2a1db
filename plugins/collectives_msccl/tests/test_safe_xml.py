"""astra_collectives_msccl.safe_xml: MSCCL-IR's XML parsed without entities, every failure naming the file (the
entity bombs themselves: tests/test_bombs.py)."""

from __future__ import annotations

import pytest

from astra_collectives_msccl.safe_xml import parse_xml
from astra_sim.errors import ConfigError


def test_xml_without_entities():
    root = parse_xml(b'<algo name="x"><gpu id="0"/></algo>', "a.xml")
    assert root.tag == "algo" and root[0].attrib == {"id": "0"}
    with pytest.raises(ConfigError, match=r"b.xml: not well-formed XML: mismatched tag: line 1"):
        parse_xml(b"<a><b></a>", "b.xml")
