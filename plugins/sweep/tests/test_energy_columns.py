"""Sweep rows keep the energy plugin's numbers (stats.energy), typed by their names."""

from __future__ import annotations

from astra_sweep.point import ENERGY_COLUMNS, fill_row
from astra_sweep.results import result_kind


def _report(energy):
    return {"ranks": [{"rank": 0, "finish_ns": 10, "compute_ns": 6, "exposed_comm_ns": 4}],
            "stats": {"energy": energy}, "settings": {}}


def test_energy_columns_from_stats_energy():
    energy = {"gpu_energy_mj": 7870, "it_energy_mj": 14740, "facility_energy_mj": 23289,
              "mean_power_w_per_gpu": 378.0, "peak_power_w_per_gpu": 700.0, "gpu_energy_per_token_mj": 1.5,
              "it_energy_per_token_mj": 2.8, "summary_line": "not a column", "by_part_mj": {"idle": 1}}
    row = {}
    fill_row(row, _report(energy))
    assert {k: row[k] for k in ENERGY_COLUMNS} == {k: energy[k] for k in ENERGY_COLUMNS}
    assert "summary_line" not in row and "by_part_mj" not in row
    assert row["step_ns"] == 10


def test_no_energy_plugin_no_columns():
    row = {}
    fill_row(row, {"ranks": [{"rank": 0, "finish_ns": 10, "compute_ns": 6, "exposed_comm_ns": 4}], "stats": {}})
    assert not set(ENERGY_COLUMNS) & set(row)


def test_energy_columns_are_typed_by_name():
    assert result_kind("gpu_energy_mj") == "int" and result_kind("facility_energy_mj") == "int"
    assert result_kind("mean_power_w_per_gpu") == "float" and result_kind("peak_power_w_per_gpu") == "float"
    assert result_kind("gpu_energy_per_token_mj") == "float"
    assert result_kind("step_ns") == "int" and result_kind("mfu") == "float"
