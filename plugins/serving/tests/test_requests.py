"""The request trace reader and generator."""

import json

import pytest
from hypothesis import example, given, settings, strategies as st

from astra_serving.requests import (NS, generate_requests, parse_azure_timestamp, parse_length, parse_prune,
                                    read_trace, write_trace)
from astra_sim.errors import ConfigError
from astra_sim_testing.fuzzing import fuzz_settings


def test_jsonl_round_trip(tmp_path):
    reqs = generate_requests(50, 5.0, parse_length("uniform:10:100", "p"), parse_length("exp:20", "o"), seed=3)
    path = tmp_path / "t.jsonl"
    write_trace(reqs, path)
    back = read_trace(path)
    assert [(r.prompt_tokens, r.output_tokens) for r in back] == [(r.prompt_tokens, r.output_tokens) for r in reqs]
    assert all(abs(a.arrival_ns - b.arrival_ns) <= 1000 for a, b in zip(back, reqs))


def test_azure_csv(tmp_path):
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:15:46.6805900,374,44\n"
                    "2023-11-16 18:15:50.9951690,396,109\n")
    reqs = read_trace(path)
    assert [r.prompt_tokens for r in reqs] == [374, 396] and [r.output_tokens for r in reqs] == [44, 109]
    assert reqs[0].arrival_ns == 0 and reqs[1].arrival_ns == 4_314_579_000


def test_burstgpt_and_native_csv(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "5,ChatGPT,472,18,490,Conversation log\n7.5,GPT-4,1087,230,1317,Conversation log\n")
    assert [r.arrival_ns for r in read_trace(path)] == [0, int(2.5 * NS)]
    path = tmp_path / "n.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,priority\n0.5,10,3,1\n0.25,20,4,0\n")
    reqs = read_trace(path)
    assert [r.prompt_tokens for r in reqs] == [20, 10] and reqs[1].priority == 1


def test_negative_arrival_names_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2}\n'
                    '{"arrival_s": -1, "prompt_tokens": 5, "output_tokens": 2}\n')
    with pytest.raises(ConfigError, match=r"t\.jsonl:2: negative arrival"):
        read_trace(path)
    csv_path = tmp_path / "a.csv"
    csv_path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,3,4\n"
                        "2023-11-16 18:15:45.1,3,4\n")
    with pytest.raises(ConfigError, match=r"a\.csv:3: negative arrival"):
        read_trace(csv_path)


def test_request_longer_than_context(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n1,8000,200\n")
    with pytest.raises(ConfigError, match=r"t\.csv:3: request of 8000 prompt \+ 200 output tokens is longer than "
                                          r"the model's context of 8192"):
        read_trace(path, max_context=8192)


def test_generator_is_seeded_and_at_rate():
    a = generate_requests(4000, 10.0, ("fixed", 100), ("fixed", 10), seed=1)
    b = generate_requests(4000, 10.0, ("fixed", 100), ("fixed", 10), seed=1)
    c = generate_requests(4000, 10.0, ("fixed", 100), ("fixed", 10), seed=2)
    assert [r.arrival_ns for r in a] == [r.arrival_ns for r in b] != [r.arrival_ns for r in c]
    rate = (len(a) - 1) / (a[-1].arrival_ns / NS)
    assert 9.5 < rate < 10.5
    g = generate_requests(4000, 10.0, ("fixed", 100), ("fixed", 10), seed=1, arrival="gamma", burstiness=3.0)
    gaps = [y.arrival_ns - x.arrival_ns for x, y in zip(g, g[1:])]
    mean = sum(gaps) / len(gaps)
    cv = (sum((x - mean) ** 2 for x in gaps) / len(gaps)) ** 0.5 / mean
    assert 9.0 < NS / mean < 11.0 and cv > 2.0


def test_lengths_capped_by_context():
    reqs = generate_requests(200, 1.0, parse_length("lognormal:3000:1.0", "p"), parse_length("exp:500", "o"),
                             seed=0, max_context=4096)
    assert all(r.prompt_tokens + r.output_tokens <= 4096 and r.output_tokens >= 1 for r in reqs)


@pytest.mark.parametrize("text", ["0", "-3", "uniform:5", "uniform:9:3", "exp:-1", "gauss:3", "lognormal:1:nan", "",
                                  "uniform:1:1e300", "99999999999"])
def test_bad_length(text):
    with pytest.raises(ConfigError, match="--prompt-len"):
        parse_length(text, "--prompt-len")


def test_azure_timestamp():
    assert parse_azure_timestamp("1970-01-01 00:00:01.5") == 1_500_000_000
    with pytest.raises(ValueError):
        parse_azure_timestamp("yesterday")


_value = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=True), st.text(max_size=8), st.none(), st.booleans())


@fuzz_settings(150)
@given(rows=st.lists(st.dictionaries(st.sampled_from(["arrival_s", "arrival_ns", "prompt_tokens", "output_tokens",
                                                       "priority", "prefix_group", "prefix_tokens", "x"]),
                                     _value, max_size=6), min_size=1, max_size=6))
@example(rows=[{"arrival_s": 1.797693134862316e+299}])  # once overflowed to inf ns (OverflowError, not an error)
@example(rows=[{"arrival_ns": 10 ** 30, "prompt_tokens": 4, "output_tokens": 4}])
def test_jsonl_reader_never_crashes(tmp_path, rows):
    """Any JSONL trace either reads (and then every request is valid) or is a ConfigError naming the file."""
    path = tmp_path / "fuzz.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    try:
        reqs = read_trace(path, max_context=4096)
    except ConfigError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)
        return
    assert all(r.arrival_ns >= 0 and r.prompt_tokens >= 1 and r.output_tokens >= 1
               and r.prompt_tokens + r.output_tokens <= 4096 for r in reqs)
    assert [r.arrival_ns for r in reqs] == sorted(r.arrival_ns for r in reqs)


@fuzz_settings(150)
@given(text=st.text(alphabet=st.sampled_from(list("0123456789.,-:e \n\"TIMESTAMPContextTokensGenerated")),
                    max_size=200))
def test_csv_reader_never_crashes(tmp_path, text):
    path = tmp_path / "fuzz.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + text)
    try:
        reqs = read_trace(path)
    except ConfigError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)
        return
    assert reqs and all(r.arrival_ns >= 0 for r in reqs)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), qps=st.floats(0.1, 1000), seed=st.integers(0, 2**32 - 1),
       arrival=st.sampled_from(["poisson", "gamma"]))
def test_generator_properties(n, qps, seed, arrival):
    reqs = generate_requests(n, qps, ("uniform", 1, 50), ("exp", 30.0), seed=seed, arrival=arrival,
                             burstiness=2.0, max_context=64)
    assert len(reqs) == n and reqs[0].arrival_ns == 0
    assert all(b.arrival_ns >= a.arrival_ns for a, b in zip(reqs, reqs[1:]))
    assert all(1 <= r.prompt_tokens and 1 <= r.output_tokens and r.prompt_tokens + r.output_tokens <= 64
               for r in reqs)


@settings(max_examples=200, deadline=None)
@given(text=st.lists(st.sampled_from(list("0123456789.:-eE+ ") + ["uniform", "exp", "lognormal", "nan", "inf"]),
                    max_size=12).map("".join))
def test_length_spec_parses_or_is_a_config_error(text):
    try:
        dist = parse_length(text, "--output-len")
    except ConfigError as exc:
        assert str(exc).startswith("--output-len: ")
        return
    import numpy as np

    values = __import__("astra_serving.requests", fromlist=["x"]).sample_lengths(dist, 20, np.random.default_rng(0))
    assert all(isinstance(v, int) and v >= 1 for v in values)


@settings(max_examples=100, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("0123456789.,-e ")), max_size=15))
def test_qps_list_parses_or_is_a_config_error(text):
    from astra_serving.spec import qps_list_or_error

    try:
        values = qps_list_or_error(text)
    except ConfigError as exc:
        assert "--qps" in str(exc)
        return
    assert values and all(v > 0 for v in values)


def test_prune_draws_again_like_benchmark_serving():
    prune = parse_prune("4:1024:2048")
    assert prune == (4, 1024, 2048)
    reqs = generate_requests(3000, 10, parse_length("lognormal:400:1.5", "p"),
                             parse_length("lognormal:400:1.5", "o"), seed=3, prune=prune)
    assert len(reqs) == 3000
    assert all(4 <= r.prompt_tokens <= 1024 and r.output_tokens >= 4 and r.prompt_tokens + r.output_tokens <= 2048
               for r in reqs)
    capped = generate_requests(3000, 10, parse_length("lognormal:400:1.5", "p"),
                               parse_length("lognormal:400:1.5", "o"), seed=3)
    assert max(r.prompt_tokens for r in capped) > 1024  # without --prune the tail stays
    again = generate_requests(3000, 10, parse_length("lognormal:400:1.5", "p"),
                              parse_length("lognormal:400:1.5", "o"), seed=3, prune=prune)
    assert [(r.prompt_tokens, r.output_tokens) for r in again] == [(r.prompt_tokens, r.output_tokens) for r in reqs]
    with pytest.raises(ConfigError, match="almost never"):
        generate_requests(10, 1, ("fixed", 3000), ("fixed", 10), prune=prune)


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("0123456789:-. ")), max_size=14))
def test_prune_spec_parses_or_is_a_config_error(text):
    try:
        low, prompt, total = parse_prune(text)
    except ConfigError as exc:
        assert str(exc).startswith("--prune: ")
        return
    assert 1 <= low <= prompt and 2 * low <= total
