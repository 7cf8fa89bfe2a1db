"""MSCCL-IR's XML, read safely: bounded (:func:`astra_sim.safeio.read_bytes`), parsed by expat with every DTD
entity declaration refused, so neither entity expansion bombs nor external entities are possible (what defusedxml
does, without the dependency). Every failure is a ConfigError naming the file."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from xml.parsers import expat

from astra_sim.errors import ConfigError
from astra_sim.safeio import read_bytes


def parse_xml(data: bytes, path, what=""):
    """The root element of XML ``data``, parsed by expat with every DTD entity declaration refused
    (no entity expansion, no external entities); ConfigError naming ``path`` otherwise."""
    where = f"{what} file {os.fspath(path)}" if what else os.fspath(path)

    class _Forbidden(Exception):
        pass

    def refuse(*_args):
        raise _Forbidden

    builder = ET.TreeBuilder()
    parser = expat.ParserCreate()
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    parser.EntityDeclHandler = refuse
    parser.UnparsedEntityDeclHandler = refuse
    parser.ExternalEntityRefHandler = refuse
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    try:
        parser.Parse(data, True)
        return builder.close()
    except _Forbidden:
        raise ConfigError(f"{where}: declares a DTD entity (line {parser.CurrentLineNumber}); "
                          "entities are not expanded, for safety: remove the <!ENTITY> declarations") from None
    except expat.ExpatError as exc:
        raise ConfigError(f"{where}: not well-formed XML: {expat.ErrorString(exc.code)}: "
                          f"line {exc.lineno}, column {exc.offset + 1}") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply") from None
    except AssertionError as exc:  # TreeBuilder: mismatched end tag (expat reports these first)
        raise ConfigError(f"{where}: not well-formed XML: {exc}") from None


def load_xml(path, what="", limit=None):
    """Read ``path`` (bounded) and parse it with :func:`parse_xml`."""
    return parse_xml(read_bytes(path, what, limit), os.fspath(path), what)
