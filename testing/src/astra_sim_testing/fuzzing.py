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
