"""The SCALE-sim .cfg reader: real files, every error, and a property test."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from astra_sim.errors import ConfigError

from astra_compute_systolic.config import SystolicConfig, load_config, write_config

GOLDENS = Path(__file__).resolve().parents[1] / "goldens"


def test_reads_every_golden_config():
    configs = {p.stem: load_config(p) for p in sorted((GOLDENS / "configs").glob("*.cfg"))}
    assert len(configs) == 8
    c = configs["ws16x16_user_small"]
    assert (c.rows, c.cols, c.ifmap_sram_kb, c.filter_sram_kb, c.ofmap_sram_kb) == (16, 16, 4, 4, 2)
    assert c.dataflow == "ws" and c.bandwidth_mode == "USER"
    # SCALE-sim 3: IFMAP/filter interfaces from [layout], OFMAP from Bandwidth
    assert (c.ifmap_read_bw, c.filter_read_bw, c.ofmap_write_bw) == (8, 16, 16)
    g = configs["os128x128_calc_google"]
    assert g.bandwidth_mode == "CALC" and (g.ifmap_read_bw, g.filter_read_bw, g.ofmap_write_bw) == (10, 10, 128)


SCALESIM2_GOOGLE = """[general]
run_name = GoogleTPU_v1_ws

[architecture_presets]
ArrayHeight:    256
ArrayWidth:     256
IfmapSramSzkB:    6144
FilterSramSzkB:   6144
OfmapSramSzkB:    2048
IfmapOffset:    0
FilterOffset:   10000000
OfmapOffset:    20000000
Dataflow : ws
Bandwidth : 10
MemoryBanks: 1

[run_presets]
InterfaceBandwidth: CALC
"""


def test_reads_scalesim2_files(tmp_path):
    path = tmp_path / "google.cfg"
    path.write_text(SCALESIM2_GOOGLE)
    c = load_config(path)
    assert (c.rows, c.cols, c.dataflow, c.bandwidth_mode, c.run_name) == (256, 256, "ws", "CALC", "GoogleTPU_v1_ws")
    path.write_text(SCALESIM2_GOOGLE.replace("CALC", "USER").replace("Bandwidth : 10", "Bandwidth : 24"))
    c = load_config(path)
    assert (c.ifmap_read_bw, c.filter_read_bw, c.ofmap_write_bw) == (24, 24, 24)  # SCALE-sim 2: one bandwidth


BAD = [
    # (what to replace, with what, expected words in the error)
    ("ArrayHeight:    256\n", "", "'ArrayHeight' is missing"),
    ("ArrayWidth:     256", "ArrayWidth: 0", "'ArrayWidth' must be >= 1"),
    ("ArrayHeight:    256", "ArrayHeight: -4", "'ArrayHeight' must be >= 1"),
    ("ArrayHeight:    256", "ArrayHeight: 12.5", "'ArrayHeight' must be an integer"),
    ("Dataflow : ws", "Dataflow : rs", "'Dataflow' must be one of os, ws, is"),
    ("Dataflow : ws\n", "", "'Dataflow' is missing"),
    ("OfmapSramSzkB:    2048\n", "", "'OfmapSramSzkB' is missing"),
    ("IfmapSramSzkB:    6144", "IfmapSramSzkB: lots", "'IfmapSramSzkB' must be an integer"),
    ("InterfaceBandwidth: CALC", "InterfaceBandwidth: FAST", "'InterfaceBandwidth' must be USER or CALC"),
    ("[run_presets]\nInterfaceBandwidth: CALC\n", "", "section [run_presets] is missing"),
    ("InterfaceBandwidth: CALC", "InterfaceBandwidth: USER\nUseRamulatorTrace: True", "'UseRamulatorTrace'"),
    ("Bandwidth : 10", "Bandwidth : 0", None),  # CALC ignores Bandwidth: accepted
    ("[general]", "[general]\n[general]", "not a SCALE-sim .cfg file"),
]


@pytest.mark.parametrize("old,new,words", BAD)
def test_bad_configs_name_file_and_key(tmp_path, old, new, words):
    path = tmp_path / "bad.cfg"
    assert old in SCALESIM2_GOOGLE
    path.write_text(SCALESIM2_GOOGLE.replace(old, new))
    if words is None:
        load_config(path)
        return
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message and words in message and "\n" not in message


def test_user_mode_errors(tmp_path):
    path = tmp_path / "user.cfg"
    base = write_config(SystolicConfig(8, 8, 4, 4, 2, "os", "USER", (10,), 10, 10))
    for old, new, words in [
        ("Bandwidth : 10", "Bandwidth : 0", "'Bandwidth' must be >= 1"),
        ("Bandwidth : 10\n", "", "'Bandwidth' is missing"),
        ("IfmapSRAMBankNum: 1", "IfmapSRAMBankNum: 3", "'IfmapSRAMBankNum' (3) must divide"),
        ("FilterSRAMBankBandwidth: 10\n", "", "'FilterSRAMBankBandwidth' is missing"),
        ("IfmapCustomLayout: False", "IfmapCustomLayout: True", "custom SRAM layouts are not modelled"),
        ("SparsitySupport : false", "SparsitySupport : true", "'SparsitySupport'"),
    ]:
        assert old in base, old
        path.write_text(base.replace(old, new))
        with pytest.raises(ConfigError, match="user.cfg") as info:
            load_config(path)
        assert words in str(info.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.cfg")
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_cli_error_is_one_line(tmp_path, capsys):
    from astra_sim.cli import main

    cfg = tmp_path / "zero.cfg"
    cfg.write_text(SCALESIM2_GOOGLE.replace("ArrayWidth:     256", "ArrayWidth: 0"))
    topo = tmp_path / "t.csv"
    topo.write_text("name,M,N,K,\ng,4,4,4,\n")
    assert main(["compute", "systolic", str(topo), "--gemm", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(cfg) in err and "ArrayWidth" in err


def test_top_level_systolic_is_a_deprecated_alias_of_compute_systolic(tmp_path, capsys):
    """``astra systolic`` still prints the same report for this release, after a one-line deprecation warning on
    stderr; ``astra compute systolic`` prints no warning."""
    from astra_sim.cli import main

    cfg = tmp_path / "google.cfg"
    cfg.write_text(SCALESIM2_GOOGLE)
    topo = tmp_path / "t.csv"
    topo.write_text("name,M,N,K,\ng,64,32,128,\n")
    assert main(["compute", "systolic", str(topo), "--gemm", "--config", str(cfg)]) == 0
    canonical = capsys.readouterr()
    assert canonical.err == "" and canonical.out.count("\n") >= 2
    assert main(["systolic", str(topo), "--gemm", "--config", str(cfg)]) == 0
    alias = capsys.readouterr()
    assert alias.out == canonical.out
    assert alias.err == ("astra: warning: 'astra systolic' is deprecated; use 'astra compute systolic' (it will be "
                         "removed in the next release)\n")


# ------------------------------------------------------------------------------------------- property test
KEYS = {"rows": "ArrayHeight", "cols": "ArrayWidth", "ifmap": "IfmapSramSzkB", "filter": "FilterSramSzkB",
        "ofmap": "OfmapSramSzkB"}


@st.composite
def configs(draw):
    mode = draw(st.sampled_from(["USER", "CALC"]))
    values = {k: draw(st.integers(1, 1 << 20)) for k in KEYS}
    return SystolicConfig(values["rows"], values["cols"], values["ifmap"], values["filter"], values["ofmap"],
                          draw(st.sampled_from(["os", "ws", "is"])), mode,
                          (draw(st.integers(1, 10000)),) if mode == "USER" else (10,),
                          draw(st.integers(1, 5000)) if mode == "USER" else None,
                          draw(st.integers(1, 5000)) if mode == "USER" else None)


def _restyle(text, sep, pad, upper):
    """The same file as SCALE-sim users write it: ':' or '=', padded or not, keys in any case."""
    out = []
    for line in text.splitlines():
        if line.startswith("[") or not line.strip():
            out.append(line)
            continue
        key, _, value = line.replace(" = ", ":").partition(":")
        key = key.strip()
        out.append(f"{key.upper() if upper else key}{pad}{sep}{pad}{value.strip()}{pad}")
    return "\n".join(out) + "\n"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=configs(), style=st.sampled_from([2, 3]), sep=st.sampled_from([":", "="]),
       pad=st.sampled_from(["", " ", "   "]), upper=st.booleans())
def test_property_written_configs_read_back(tmp_path, config, style, sep, pad, upper):
    if style == 2 and config.bandwidth_mode == "USER":   # SCALE-sim 2 files have one bandwidth for all
        config = config.with_(ifmap_bandwidth=None, filter_bandwidth=None)
    path = tmp_path / "p.cfg"
    path.write_text(_restyle(write_config(config, style=style), sep, pad, upper))
    back = load_config(path)
    assert back.key() == config.key()
    assert (back.ifmap_read_bw, back.filter_read_bw, back.ofmap_write_bw) == \
           (config.ifmap_read_bw, config.filter_read_bw, config.ofmap_write_bw)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=configs(), drop=st.sampled_from(sorted(KEYS.values()) + ["Dataflow", "InterfaceBandwidth"]),
       bad=st.sampled_from(["", "0", "-3", "x", "1.5"]))
def test_property_a_broken_key_is_named(tmp_path, config, drop, bad):
    path = tmp_path / "broken.cfg"
    lines = write_config(config).splitlines()
    index = next(i for i, line in enumerate(lines) if line.split(":")[0].strip() == drop)
    if bad == "":
        del lines[index]        # missing key
    else:
        lines[index] = f"{drop}: {bad}"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert str(path) in message and drop in message and "\n" not in message


def test_topology_and_mnk_files_are_read_safely(tmp_path):
    from astra_compute_systolic.topology import read_topology
    from astra_compute_systolic.workload import read_mnk

    binary = tmp_path / "t.csv"
    binary.write_bytes(b"name,M,N,K,\n\xff\xfe,4,4,4,\n")
    with pytest.raises(ConfigError, match="t.csv.*not UTF-8"):
        read_topology(binary, gemm=True)
    with pytest.raises(ConfigError, match="does not exist"):
        read_mnk(tmp_path / "none.csv", "DATA")
    crlf = tmp_path / "m.csv"
    crlf.write_bytes(b"Layer,m,n,k\r\ng,4,8,16\r\n")
    assert [(layer.m, layer.n, layer.k) for layer in read_mnk(crlf, "DATA")] == [(4, 8, 16)]
