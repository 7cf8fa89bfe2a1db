"""Error type of the Chakra ET reader/writer."""

from __future__ import annotations

from astra_sim.errors import AstraError

__all__ = ["ChakraError", "where"]


class ChakraError(AstraError):
    """A problem with a Chakra execution-trace file or node.

    The message is meant for users as is: it always starts with the file (``<memory>`` for nodes that were
    built in memory), then, where relevant, the node id and name and what was expected, e.g.
    ``t.3.et: node 17 ('allreduce'): attribute 'comm_size' missing (expected an integer)``.

    The pieces are also available as attributes: ``path``, ``node_id``, ``node_name``, ``offset`` (byte
    offset in the file, or None).

    It is an :class:`astra_sim.errors.AstraError` (the CLI prints it without a traceback).
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
