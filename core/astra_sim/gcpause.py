"""Python's cyclic garbage collector paused while a run makes millions of acyclic objects (trace nodes, their graph,
events): each collection re-scans the whole live heap (a quarter of a 64-GPU MoE step's `astra validate` CPU)."""
import gc
from contextlib import contextmanager


@contextmanager
def gc_paused():
    """The cyclic collector off inside (nesting is fine), as it was after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
