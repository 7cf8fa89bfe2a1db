"""Error type of the Chakra ET reader/writer."""

from __future__ import annotations

from astra_sim.errors import AstraError


class ChakraError(AstraError):
    """A problem with a Chakra trace file or node; the message names the file (``<memory>`` for built nodes), then the
    node and what was expected (``t.3.et: node 17 ('allreduce'): attribute 'comm_size' missing (expected an
    integer)``). Its pieces are attributes too: ``path``, ``node_id``, ``node_name``, ``offset`` (bytes, or None).
    """

    def __init__(self, message: str, *, path=None, node_id=None, node_name=None, offset=None):
        super().__init__(message)
        self.path = path
        self.node_id = node_id
        self.node_name = node_name
        self.offset = offset


def where(path, node_id=None, node_name=None) -> str:
    """Prefix for error messages: ``"<path>: node <id> ('<name>')"``."""
    text = str(path) if path is not None else "<memory>"
    if node_id is not None:
        text += f": node {node_id}"
        if node_name:
            text += f" ({node_name!r})"
    return text
