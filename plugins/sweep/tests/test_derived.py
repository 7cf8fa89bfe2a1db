"""The sweep's derived columns (astra_sweep.derived): the price table reader and the cost of a token."""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from astra_sim.errors import ConfigError
from astra_sweep.derived import add_cost, load_prices, parse_prices, price_warnings, tokens_per_s_per_gpu

KNOWN = ("hgx-h100", "mi300x")


def _table(prices, known=KNOWN):
    return parse_prices({"prices": prices}, "prices.yaml", known)


def test_cost_per_million_tokens_is_price_over_tokens_per_gpu_hour():
    table = _table({"hgx-h100": {"usd_per_gpu_hour": 3.6, "source": "a quote"}})
    row = add_cost({"status": "ok", "tokens_per_s_per_gpu": 500.0}, "hgx-h100", table)
    # $3.6 per GPU-hour = $0.001 per GPU-second; 500 tokens per GPU-second: $2e-6 a token, $2 per million
    assert row["usd_per_gpu_hour"] == 3.6
    assert row["usd_per_million_tokens"] == pytest.approx(2.0)
    assert row["price_assumed"] is False


def test_serving_rows_use_output_tokens_over_gpus():
    table = _table({"mi300x": {"usd_per_gpu_hour": 1.8, "assumption": "a guess"}})
    row = add_cost({"status": "ok", "throughput_tokens_per_s": 4000.0, "gpus": 8}, "mi300x", table)
    assert row["usd_per_million_tokens"] == pytest.approx(1.8 / 3600 / 500 * 1e6)
    assert row["price_assumed"] is True


def test_no_price_or_no_throughput_or_failed_point_gives_empty_cost():
    table = _table({"hgx-h100": {"usd_per_gpu_hour": 2.0, "source": "s"}})
    assert add_cost({"status": "ok", "tokens_per_s_per_gpu": 10.0}, "mi300x", table)["usd_per_million_tokens"] is None
    assert add_cost({"status": "ok"}, "hgx-h100", table)["usd_per_million_tokens"] is None
    failed = add_cost({"status": "infeasible: too big", "tokens_per_s_per_gpu": 10.0}, "hgx-h100", table)
    assert failed["usd_per_million_tokens"] is None and failed["usd_per_gpu_hour"] == 2.0
    assert tokens_per_s_per_gpu({"tokens_per_s_per_gpu": 0.0}) is None


def test_platform_names_are_case_insensitive():
    table = _table({"HGX-H100": {"usd_per_gpu_hour": 2.0, "source": "s"}})
    assert table.get("hgx-h100").usd_per_gpu_hour == 2.0 and table.get("Hgx-H100") is not None


@pytest.mark.parametrize("prices, expected", [
    ({"hgx-h100": {"usd_per_gpu_hour": 2.0}}, "exactly one of source"),
    ({"hgx-h100": {"usd_per_gpu_hour": 2.0, "source": "a", "assumption": "b"}}, "exactly one of source"),
    ({"hgx-h100": {"usd_per_gpu_hour": 2.0, "source": " "}}, "exactly one of source"),
    ({"hgx-h100": {"usd_per_gpu_hour": 0, "source": "s"}}, "prices.'hgx-h100'.usd_per_gpu_hour"),
    ({"hgx-h100": {"usd_per_gpu_hour": "2$", "source": "s"}}, "a number > 0"),
    ({"hgx-h100": {"usd_per_gpu_hour": float("nan"), "source": "s"}}, "a number > 0"),
    ({"hgx-h100": {"usd_per_gpu_hour": 2.0, "source": "s", "usd": 1}}, "unknown key 'usd'"),
    ({"hgx-h10": {"usd_per_gpu_hour": 2.0, "source": "s"}}, "did you mean 'hgx-h100'"),
    ({"hgx-h100": 2.0}, "expected {usd_per_gpu_hour"),
    ({"hgx-h100": {"usd_per_gpu_hour": 2, "source": "s"}, "HGX-H100": {"usd_per_gpu_hour": 2, "source": "s"}},
     "priced twice"),
])
def test_bad_price_tables_name_the_file_and_key(prices, expected):
    with pytest.raises(ConfigError, match="prices.yaml") as info:
        _table(prices)
    assert expected in str(info.value)


def test_the_table_needs_its_prices_key():
    with pytest.raises(ConfigError, match="one key, prices"):
        parse_prices({"hgx-h100": {"usd_per_gpu_hour": 2.0, "source": "s"}}, "prices.yaml")


def test_load_prices_reads_relative_to_the_spec(tmp_path):
    (tmp_path / "p.yaml").write_text("prices:\n  hgx-h100: {usd_per_gpu_hour: 2.5, source: my quote}\n")
    table = load_prices("p.yaml", str(tmp_path / "spec.yaml"), KNOWN)
    assert table.get("hgx-h100").basis == "my quote"
    with pytest.raises(ConfigError, match="no-such.yaml"):
        load_prices("no-such.yaml", str(tmp_path / "spec.yaml"), KNOWN)


def test_warnings_name_assumed_and_missing_prices():
    table = _table({"hgx-h100": {"usd_per_gpu_hour": 2.0, "source": "s"},
                    "mi300x": {"usd_per_gpu_hour": 1.0, "assumption": "guess"}})
    lines = price_warnings(table, ["hgx-h100", "mi300x", "mi300x", "hgx-b200"])
    assert len(lines) == 2
    assert "mi300x" in lines[0] and "assumption" in lines[0]
    assert "no price for hgx-b200" in lines[1]
    assert price_warnings(table, ["hgx-h100"]) == []


_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                   max_size=3), max_leaves=8)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_values, st.fixed_dictionaries({"prices": st.dictionaries(
    st.sampled_from(KNOWN) | st.text(max_size=8), st.dictionaries(
        st.sampled_from(("usd_per_gpu_hour", "source", "assumption", "x")), _values, max_size=3), max_size=3)})))
def test_any_price_table_is_read_or_refused_in_one_line(data):
    try:
        table = _table(data["prices"]) if isinstance(data, dict) and set(data) == {"prices"} and isinstance(
            data["prices"], dict) else parse_prices(data, "prices.yaml", KNOWN)
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("prices.yaml")
        return
    for price in table.prices.values():
        assert math.isfinite(price.usd_per_gpu_hour) and price.usd_per_gpu_hour > 0 and price.basis


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_any_yaml_text_is_read_or_refused(tmp_path_factory, text):
    folder = tmp_path_factory.mktemp("prices")
    (folder / "p.yaml").write_text(text, encoding="utf-8")
    try:
        load_prices("p.yaml", str(folder / "spec.yaml"), KNOWN)
    except ConfigError as exc:
        assert "\n" not in str(exc)


def test_the_example_price_table_is_valid_and_says_where_each_price_comes_from():
    from pathlib import Path

    from astra_sim.platforms import platforms

    root = Path(__file__).resolve().parents[3]
    path = root / "examples" / "sweeps" / "gpu_prices.yaml"
    table = load_prices(str(path), str(path), platforms())
    spec = yaml.safe_load((root / "examples" / "sweeps" / "which_machine.yaml").read_text())
    for name in spec["axes"]["grid"]["run.platform"]:
        assert table.get(name) is not None, name


def test_a_point_is_priced_by_its_platform():
    from astra_sweep.derived import point_platform
    from astra_sweep.spec import Point

    assert point_platform(Point({}, "llm", {"tp": 2}, {"platform": "mi300x"})) == "mi300x"
    assert point_platform(Point({}, "serve", {"platform": "hgx-h100", "qps": 4}, {})) == "hgx-h100"
    assert point_platform(Point({}, "trace", {"trace": "t"}, {})) is None


@pytest.mark.parametrize("value", [5, "", None, ["a.yaml"]])
def test_the_spec_key_names_a_file(tmp_path, value):
    from astra_sim.plugins import default_plugin_manager
    from astra_sweep.commands import command_parsers
    from astra_sweep.spec import parse_spec

    data = {"workload": {"micro": {"npus": 2}}, "prices": value}
    with pytest.raises(ConfigError, match=r"spec.yaml: prices must name a price table file"):
        parse_spec(data, str(tmp_path / "spec.yaml"), command_parsers(default_plugin_manager()))
