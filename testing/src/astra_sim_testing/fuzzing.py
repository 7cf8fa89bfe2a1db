"""Shared pieces of the property-based fuzz tests (hypothesis): budgets, hostile values, mutations, checks.

Every reader of user input is fuzzed with the same rule: a parsed result, or an
:class:`~astra_sim.errors.AstraError` whose one-line message names the file (and the key or byte
offset); never another exception, a hang or a memory blow-up. ``make test`` runs a fixed, reproducible
number of examples per test (derandomized); ``make fuzz`` sets ``ASTRA_FUZZ_SCALE`` (50) for a long,
random run. Inputs that once failed are kept as regression tests (``tests/fuzz_corpus`` and
``@example``).
"""

from __future__ import annotations

import json
import math
import os
import signal
from contextlib import contextmanager

from hypothesis import HealthCheck, settings, strategies as st

from astra_sim.errors import AstraError

#: Examples per fuzz test = the test's budget x this (1 in ``make test``; ``make fuzz`` sets 50).
SCALE = max(1, int(os.environ.get("ASTRA_FUZZ_SCALE", "1")))


def fuzz_settings(examples, **overrides):
    """hypothesis settings for a fuzz test worth ``examples`` examples in ``make test``."""
    options = dict(max_examples=examples * SCALE, deadline=None, derandomize=SCALE == 1,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                          HealthCheck.data_too_large, HealthCheck.filter_too_much],
                   print_blob=True)
    if SCALE == 1:
        options["database"] = None
    options.update(overrides)
    return settings(**options)


#: Numbers no configuration can mean, and edge cases of the ones it can.
HOSTILE_NUMBERS = (math.nan, math.inf, -math.inf, 0, -1, -0.5, 0.5, 1e308, -1e308, 10 ** 30, -(10 ** 30),
                   2 ** 63, 2 ** 64 + 1, 1e-320, True, False)


def hostile_values():
    """Values of every JSON/YAML type, biased towards the nasty ones."""
    scalars = st.one_of(
        st.sampled_from(HOSTILE_NUMBERS),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=20),
        st.sampled_from(["", "Ring", "ring", "\u202eRing", "😀", "\x00", "None", "nan", "1e999", "-1", "0x10"]),
        st.none(),
        st.booleans(),
    )
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                        max_leaves=8)


@st.composite
def mutated(draw, valid: dict):
    """``(document, key)``: ``valid`` with one key's value (or one element of a list value) replaced by a
    hostile value, a key deleted, or an unknown key added; ``key`` names the key touched."""
    doc = json.loads(json.dumps(valid))
    keys = sorted(doc)
    action = draw(st.sampled_from(["replace", "replace", "element", "delete", "add"]))
    if action == "add" or not keys:
        key = draw(st.text(min_size=1, max_size=12))
        doc[key] = draw(hostile_values())
        return doc, key
    key = draw(st.sampled_from(keys))
    if action == "delete":
        del doc[key]
    elif action == "element" and isinstance(doc[key], list) and doc[key]:
        index = draw(st.integers(0, len(doc[key]) - 1))
        doc[key][index] = draw(hostile_values())
    else:
        doc[key] = draw(hostile_values())
    return doc, key


def to_json(doc) -> str:
    return json.dumps(doc, allow_nan=True)


def to_yaml(doc) -> str:
    import yaml

    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


def check_error(exc, path, keys=()):
    """``exc`` is a user error naming ``path`` on one line (and, when ``keys`` are given, one of them)."""
    assert isinstance(exc, AstraError), f"{type(exc).__name__} instead of a clear error: {exc!r}"
    message = str(exc)
    assert str(path) in message or os.path.basename(str(path)) in message, f"file not named: {message}"
    assert "\n" not in message, f"not one line: {message!r}"
    assert len(message) < 2000, f"message of {len(message)} characters"
    if keys:
        # a key may be named as itself or escaped (repr), as one-line messages show control characters
        assert any(str(k) in message or repr(str(k))[1:-1] in message for k in keys), \
            f"no key named ({sorted(map(str, keys))}): {message}"


# ------------------------------------------------------------------------------------ byte-level mutations
#: Pieces a byte-level mutation splices into a real sample: numbers no reader can mean, deep nesting, NUL
#: and control bytes, invalid UTF-8, YAML tags and aliases, XML entities.
HOSTILE_TOKENS = (b"\x00", b"\x00" * 8, b"-1", b"0", b"-0", b"nan", b"inf", b"-inf", b"1e999", b"1e-400",
                  b"99999999999999999999999999999", b"9" * 5000, b"0x10", b"1_0", b"\xff\xfe", b"\xc3", b"\n", b"\r",
                  b"\t", b",", b":", b"=", b'"', b"'", b"[" * 300, b"{" * 300, b"- " * 300, b"<" * 50, b"&e;",
                  "\u202e".encode(), "\U0001F600".encode(), b"&a [*a]", b"*a", b"!!python/object/apply:os.system",
                  b"%", b"#", b"true", b"null", b"[]", b"{}", b"DP")


@st.composite
def mutated_bytes(draw, seeds, tokens=HOSTILE_TOKENS):
    """One of ``seeds`` (bytes) after 1-4 mutations: a bit flipped, the end cut off, a slice duplicated or
    deleted, a hostile token inserted or written over a number (type swaps, huge numbers, deep nesting, NULs)."""
    import re

    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "truncate", "duplicate", "delete", "insert", "number", "number"]))
        at = draw(st.integers(0, len(data))) if data else 0
        if op == "flip" and data:
            at = min(at, len(data) - 1)
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del data[at:]
        elif op == "duplicate" and data:
            piece = data[at:at + draw(st.integers(1, 400))]
            data[at:at] = piece * draw(st.integers(1, 3))
        elif op == "delete":
            del data[at:at + draw(st.integers(1, 40))]
        elif op == "insert":
            data[at:at] = draw(st.sampled_from(tokens))
        else:  # a number's digits replaced by a hostile token or a random integer
            numbers = list(re.finditer(rb"-?\d+(\.\d+)?", bytes(data)))
            if numbers:
                m = draw(st.sampled_from(numbers))
                value = draw(st.one_of(st.sampled_from(tokens), st.integers(-2 ** 70, 2 ** 70).map(
                    lambda n: str(n).encode())))
                data[m.start():m.end()] = value
    return bytes(data)


class Hang(AssertionError):
    """A reader ran past :data:`HANG_S` on one input."""


#: Seconds one input may take before it counts as a hang (the issue's bound is 60 s; readers of small
#: files take milliseconds, so a tighter bound finds the same hangs sooner).
HANG_S = int(os.environ.get("ASTRA_FUZZ_HANG_S", "10"))


@contextmanager
def time_limit(seconds=None):
    """Raise :class:`Hang` (instead of hanging the suite) when the block runs longer than ``seconds``."""
    seconds = HANG_S if seconds is None else seconds
    fired = []

    def expired(_signum, _frame):
        fired.append(True)
        raise Hang(f"the reader took more than {seconds} s on one input")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if fired:  # raised where something swallowed it (a gc callback, a reader's broad except)
        raise Hang(f"the reader took more than {seconds} s on one input")
