"""Check the energy plugin's clock-power law and class powers on the H200's sustained phases.

Reads ``plugins/gpu_model/calibration/nvidia-h200-2026-11-30`` (one H200 SXM at its 700 W limit, made by
``plugins/gpu_model/fit/measure_gpu_sustained.py``; both runs' ``sustained_chunks*.csv`` and
``sustained_samples*.csv``) and prints:

1. per phase, the settled power and SM clock re-derived from the CSVs (the phase's last 20 s, or its last third, as
   the measuring script summarises them) beside ``device*.json``'s, the boost power the law gives that point, and
   the clock the law predicts for the class powers of ``data/power.json`` at the 700 W limit;
2. the mix phase (24 bf16 8192^3 GEMMs then one FlashAttention-2 ring block, repeated): the measured pair against
   each kernel at its own settled rate (what the simulator does: one clock per class), against every kernel at the
   boost clock (the view of a controller acting on the step's average power), and the mix's mean clock, power and
   energy against the class powers';
3. the energy per unit of work: measured (the board's energy counter over the settled window, per TFLOP or TB)
   against the class power at the settled clock over the measured rate, and against ``astra run`` with the energy
   plugin on a trace of one op repeated (bf16 GEMM 8192^3; the FA2 ring block's forward);
4. the GEMM: the settled 8192^3 bf16 rate against the gpu model's H200 rate there, with its sustained cap
   (``astra_gpu_model.power_clock``), and MSMF's published sustained point;
5. run 4's memory-bound kernels (``device-run4.json``'s summaries: the last 2.7 s of 8 s phases): decode-sized bf16
   GEMMs (M x 8192 x 8192) and flash decode attention, measured power against the rule of
   ``astra_energy.utilisation`` at the measured rates (bandwidth share + tensor share, at most the class; beside the
   bandwidth share alone), and against ``astra run`` on the kernel (its time and its power).

Nothing is fitted here: the class powers come from the same phases' settled points (so table 1's "law at the
measured power" reproduces them by construction; the clock at the 700 W limit and the mix are the checks).
Run: ``python plugins/energy/fit/check_h200_sustained.py [CALIBRATION_DIR]``.
"""

from __future__ import annotations

import csv
import json
import sys
import tempfile
from pathlib import Path

from astra_energy.power import boost_power_w, gpu_power, power_data

ROOT = Path(__file__).resolve().parents[3]
CAL = ROOT / "plugins" / "gpu_model" / "calibration" / "nvidia-h200-2026-11-30"
MEASUREMENT = "H200-SXM-2026-11-30"
N = 8192
#: the ring block: 32k queries x 16k keys, 32 heads of 128, not causal; forward FLOPs 4 h sq skv d, forward +
#: backward 3.5 x that (measure_gpu_sustained.py)
RING = {"heads": 32, "sq": 32768, "skv": 16384, "d": 128}
RING_FWD_FLOPS = 4 * RING["heads"] * RING["sq"] * RING["skv"] * RING["d"]
GEMMS_PER_PAIR = 24
REPEAT4 = 40  # run 4's kernels in astra run: copies in a chain (the energy's whole mJ a small share of it)


def _rows(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def settled(cal: Path = CAL) -> dict:
    """``{phase: {rate, unit, power_w, sm_mhz, energy_w, joules_per_unit, window_s}}`` over each phase's last 20 s
    (or last third), re-derived from both runs' CSVs."""
    out = {}
    for suffix in ("", "-run2"):
        chunks, samples = _rows(cal / f"sustained_chunks{suffix}.csv"), _rows(cal / f"sustained_samples{suffix}.csv")
        for phase in dict.fromkeys(c["phase"] for c in chunks):
            mine = [c for c in chunks if c["phase"] == phase]
            start = float(mine[0]["t_end_s"]) - float(mine[0]["chunk_s"])
            span = float(mine[-1]["t_end_s"]) - start
            tail_from = start + max(span - 20.0, span * 2 / 3)
            tail = [c for c in mine if float(c["t_end_s"]) >= tail_from]
            seconds = sum(float(c["chunk_s"]) for c in tail)
            rate = sum(float(c["rate"]) * float(c["chunk_s"]) for c in tail) / seconds
            tail_s = [s for s in samples if s["phase"] == phase and float(s["t_s"]) >= tail_from]
            energy = [(float(s["t_s"]), float(s["energy_mj"])) for s in tail_s if s["energy_mj"]]
            energy_w = (energy[-1][1] - energy[0][1]) / 1000 / (energy[-1][0] - energy[0][0])
            out[phase] = {"rate": rate, "unit": mine[0]["unit"], "window_s": float(mine[-1]["t_end_s"]) - tail_from,
                          "power_w": sum(float(s["power_w"]) for s in tail_s) / len(tail_s),
                          "sm_mhz": sum(float(s["sm_mhz"]) for s in tail_s) / len(tail_s),
                          "energy_w": energy_w, "joules_per_unit": energy_w / rate}
    return out


def device_summaries(cal: Path = CAL) -> dict:
    """``device*.json``'s ``sustained`` entries by phase (the measuring script's own summaries)."""
    out = {}
    for name in ("device.json", "device-run2.json"):
        for entry in json.loads((cal / name).read_text())["sustained"]:
            out[entry["phase"]] = entry
    return out


def law_clock_mhz(boost_w, idle_w, limit_w, max_mhz, alpha):
    """The clock the law settles a phase drawing ``boost_w`` at ``max_mhz`` at under ``limit_w``."""
    if boost_w <= limit_w:
        return max_mhz
    return max_mhz * ((limit_w - idle_w) / (boost_w - idle_w)) ** (1 / alpha)


def simulate_chain(ops, gpu="H200-SXM", repeat=4):
    """``(seconds, joules per GPU)`` of ``astra run`` with the energy plugin on a trace of ``repeat`` copies of the
    ops ``ops`` (node attributes, each with its ``name``; one chain) on ``gpu`` at its TDP."""
    from astra_sim.chakra import make_node, types as T
    from astra_sim.simulation import simulate
    from astra_sim_testing import write_case

    attrs = [op for _ in range(repeat) for op in ops]
    nodes = [make_node(i, a["name"], T.COMP_NODE, duration_micros=1, data_deps=(i - 1,) if i else (),
                       attrs={k: v for k, v in a.items() if k != "name"}) for i, a in enumerate(attrs)]
    with tempfile.TemporaryDirectory() as tmp:
        prefix, system, network = write_case(tmp, nodes)
        report = simulate(prefix, system, network, plugins=["network_analytical", "gpu_model", "energy"],
                          compute_model="gpu", options={"gpu": gpu})
    energy = report.stats["energy"]
    return report.max_finish_ns / 1e9, energy["gpu_energy_mj"] / 1000 / energy["gpus"]


def _ops():
    """The measured phases' ops as trace nodes: the bf16 GEMM, and the FA2 ring block's forward and backward."""
    bf16 = "'Tensor(c10::BFloat16)'"
    q, kv = "[1, {heads}, {sq}, {d}]".format(**RING), "[1, {heads}, {skv}, {d}]".format(**RING)
    gemm = {"name": "aten::mm", "is_cpu_op": False, "inputs_shapes": f"[[{N}, {N}], [{N}, {N}]]",
            "inputs_types": f"[{bf16}, {bf16}]"}
    fwd = {"name": "aten::_scaled_dot_product_flash_attention", "is_cpu_op": False, "attention_kernel": "fa2",
           "inputs_shapes": f"[{q}, {kv}, {kv}]", "inputs_types": f"[{bf16}, {bf16}, {bf16}]",
           "inputs_values": "[[], [], [], 0.0, False, False]"}
    bwd = {"name": "aten::_scaled_dot_product_flash_attention_backward", "is_cpu_op": False, "attention_kernel": "fa2",
           "inputs_shapes": f"[{q}, {q}, {kv}, {kv}, {q}]", "inputs_types": f"[{bf16}, {bf16}, {bf16}, {bf16}, {bf16}]",
           "inputs_values": "[[], [], [], [], [], [], [], [], 0, 0, 0.0, False, False]"}
    return gemm, [fwd, bwd]


def main(argv=None):
    cal = Path((argv or sys.argv[1:] or [CAL])[0])
    data = power_data()
    meas = data["measured_class_power"][MEASUREMENT]
    alpha, idle, fmax, limit = data["clock_power"]["alpha"], meas["idle_w"], meas["max_clock_mhz"], meas["limit_w"]
    power = gpu_power("H200-SXM")
    phases, summaries = settled(cal), device_summaries(cal)
    class_of = {point: cls for cls, point in meas["classes"].items()}

    print(f"1. settled points (last window; CSV re-derived / device*.json), the boost power by the law (idle {idle} W, "
          f"alpha {alpha}, {fmax} MHz), the law's clock at the {limit} W limit")
    print(f"{'phase':16s} {'W csv/json':>15s} {'MHz csv/json':>15s} {'P_boost W':>9s} {'x TDP':>6s} "
          f"{'law MHz @700':>12s} {'meas MHz':>8s} {'error':>7s}  class")
    for phase in meas["points"]:
        got, dev = phases[phase], summaries[phase]
        boost = boost_power_w(got["power_w"], got["sm_mhz"], fmax, idle, alpha)
        law = law_clock_mhz(boost, idle, limit, fmax, alpha)
        cls = class_of.get(phase, "(recorded, no class)")
        print(f"{phase:16s} {got['power_w']:6.1f}/{dev['power_w_last']:6.1f}  {got['sm_mhz']:6.1f}/"
              f"{dev['sm_mhz_last']:6.1f}  {boost:9.1f} {boost / limit:6.3f} {law:12.1f} {got['sm_mhz']:8.1f} "
              f"{100 * (law / got['sm_mhz'] - 1):+6.1f}%  {cls}")
    print("   (the law's clock at 700 W is above the measured one: the controller holds the board at 677.9-692.3 W, "
          "1-3 % under its limit; FA2 reads 0x4 at 678 W)")

    gemm, fa2, mix = phases["gemm_bf16"], phases["attn_ring_flash"], phases["mix_gemm_attn"]
    gemm_ms = 2 * N ** 3 / (gemm["rate"] * 1e12) * 1e3
    fa2_ms = 3.5 * RING_FWD_FLOPS / (fa2["rate"] * 1e12) * 1e3
    g_ms = GEMMS_PER_PAIR * gemm_ms
    per_class = g_ms + fa2_ms
    pair_ms = 1e3 / mix["rate"]
    boost_view = g_ms * gemm["sm_mhz"] / fmax + fa2_ms * fa2["sm_mhz"] / fmax
    law_gemm = law_clock_mhz(power.class_w["gemm"], idle, limit, fmax, alpha)
    law_fa2 = law_clock_mhz(power.class_w["attention"], idle, limit, fmax, alpha)
    law_view = g_ms * gemm["sm_mhz"] / law_gemm + fa2_ms * fa2["sm_mhz"] / law_fa2
    mean_mhz = (g_ms * gemm["sm_mhz"] + fa2_ms * fa2["sm_mhz"]) / per_class
    mean_w = (g_ms * gemm["power_w"] + fa2_ms * fa2["power_w"]) / per_class
    model_j = (g_ms * power.watts("gemm", power.settled_clock_ratio("gemm"))
               + fa2_ms * power.watts("attention", power.settled_clock_ratio("attention"))) / 1e3

    def pct(x, ref):
        return f"{100 * (x / ref - 1):+5.1f}%"
    print(f"\n2. mix: {GEMMS_PER_PAIR} bf16 {N}^3 GEMMs ({gemm_ms:.3f} ms each alone) then one FA2 ring block fwd+bwd "
          f"({fa2_ms:.1f} ms alone)")
    print(f"   measured pair                                       {pair_ms:6.1f} ms")
    print(f"   each kernel at its own settled rate (the simulator)  {per_class:6.1f} ms {pct(per_class, pair_ms)}")
    print(f"   each at the law's clock at 700 W (time ~ 1/clock)    {law_view:6.1f} ms {pct(law_view, pair_ms)}  "
          f"(GEMM {law_gemm:.0f}, FA2 {law_fa2:.0f} MHz)")
    print(f"   all at the boost clock (the average-power view)      {boost_view:6.1f} ms {pct(boost_view, pair_ms)}")
    print(f"   mean SM clock: measured {mix['sm_mhz']:.1f} MHz, time-weighted per class {mean_mhz:.1f} "
          f"({pct(mean_mhz, mix['sm_mhz'])})")
    print(f"   mean power: measured {mix['power_w']:.1f} W (energy counter {mix['energy_w']:.1f}), time-weighted per "
          f"class {mean_w:.1f} W ({pct(mean_w, mix['energy_w'])})")
    print(f"   energy per pair: measured {mix['joules_per_unit']:.1f} J; the class powers x the per-class times "
          f"{model_j:.1f} J ({pct(model_j, mix['joules_per_unit'])})")
    gemm_op, attention_ops = _ops()
    seconds, joules = simulate_chain([gemm_op] * GEMMS_PER_PAIR + attention_ops, repeat=2)
    print(f"   astra run (the pair as a trace, H200-SXM at 700 W): {seconds / 2 * 1e3:.1f} ms "
          f"({pct(seconds / 2 * 1e3, pair_ms)}), {joules / 2:.1f} J ({pct(joules / 2, mix['joules_per_unit'])}) a pair")

    print("\n3. energy per unit of work: measured (the energy counter) / the class power at its settled clock over the "
          "measured rate / astra run on H200-SXM (4 copies in a chain)")
    # the copy: measure_gpu_sustained's dst.copy_(src) of 2^30 bf16 elements, bytes read + written (its TB/s);
    # astra run charges it by the bandwidth it reaches (astra_energy.utilisation)
    copy = {"name": "aten::copy_", "is_cpu_op": False, "inputs_shapes": f"[[{1 << 30}], [{1 << 30}]]",
            "inputs_types": "['Tensor(c10::BFloat16)', 'Tensor(c10::BFloat16)']"}
    runs = {"gemm_bf16": ([gemm_op], 2 * N ** 3), "attn_ring_flash": (attention_ops, 3.5 * RING_FWD_FLOPS),
            "hbm_copy": ([copy], 2 * 2 * (1 << 30))}
    for phase in ("gemm_bf16", "gemm_fp8", "attn_ring_flash", "attn_ring_cudnn", "hbm_copy"):
        got = phases[phase]
        cls = class_of.get(phase)
        line = f"   {phase:16s} {got['joules_per_unit']:8.3f} J/{got['unit'].split('/')[0]}"
        if cls:
            model = power.watts(cls, power.settled_clock_ratio(cls)) / got["rate"]
            line += f"   class {model:8.3f} ({pct(model, got['joules_per_unit'])})"
        else:
            line += "   class      n/a"
        if phase in runs:
            ops, flops = runs[phase]
            seconds, joules = simulate_chain(ops)
            tera = 4 * flops / 1e12  # TFLOP, or TB for the copy
            line += (f"   astra run {joules / tera:6.3f} at {tera / seconds:6.{2 if phase == 'hbm_copy' else 1}f} "
                     f"{got['unit']} ({pct(joules / tera, got['joules_per_unit'])})")
        print(line)

    from astra_gpu_model.gpu import load_gpu
    from astra_gpu_model.power_clock import SUSTAINED_GEMM, model_tflops_at_shape, sustained_gemm_factor

    spec = load_gpu("H200-SXM")
    raw = model_tflops_at_shape(spec, "bf16", (N, N, N))
    factor = sustained_gemm_factor(spec, "bf16", 700)
    msmf = SUSTAINED_GEMM[("H200-SXM", "bf16")]
    print(f"\n4. bf16 GEMM {N}^3 on the H200: measured settled {gemm['rate']:.1f} TFLOP/s at {gemm['sm_mhz']:.0f} MHz, "
          f"{gemm['power_w']:.1f} W")
    print(f"   gpu model: {raw:.1f} TFLOP/s fitted x sustained factor {factor:.4f} at 700 W = {raw * factor:.1f} "
          f"({pct(raw * factor, gemm['rate'])})")
    print(f"   MSMF (power_clock.SUSTAINED_GEMM): {msmf.sustained_tflops} at {msmf.shape}, "
          f"{msmf.sustained_clock_mhz:.0f} MHz, {msmf.sustained_w:.0f} W; moved to 700 W: "
          f"{msmf.sustained_tflops_at(700):.1f}")
    run4(cal)
    return 0


def _decode_op(batch, skv, hq=32, hkv=8, d=128):
    """run 4's flash decode as a trace node: one query a sequence, ``hq`` query heads over ``hkv`` KV heads."""
    bf16 = "'Tensor(c10::BFloat16)'"
    q, kv = f"[{batch}, {hq}, 1, {d}]", f"[{batch}, {hkv}, {skv}, {d}]"
    return {"name": "aten::_scaled_dot_product_flash_attention", "is_cpu_op": False,
            "inputs_shapes": f"[{q}, {kv}, {kv}]", "inputs_types": f"[{bf16}, {bf16}, {bf16}]",
            "inputs_values": "[[], [], [], 0.0, False, False]"}


def run4(cal: Path = CAL):
    """Table 5: run 4's rows, measured against the rule and against ``astra run``."""
    power = gpu_power("H200-SXM")
    idle, copy = power.idle_w, power.copy_fraction_of_peak * 4.8e12
    gemm_w, memory_w = power.watts("gemm", power.settled_clock_ratio("gemm")), power.class_w["memory"]
    attention_w = power.watts("attention", power.settled_clock_ratio("attention"))
    class_rate = power.gemm_rate_fraction_of_peak["bf16"] * 989.4e12
    rows = {e["phase"]: e for e in json.loads((cal / "device-run4.json").read_text())["sustained"]}
    from astra_gpu_model.model import GpuComputeModel
    from astra_gpu_model.ops import Op

    gpu_model = GpuComputeModel(gpu="H200-SXM")  # which GEMMs it times by their HBM traffic (op_bound)
    bf16 = "'Tensor(c10::BFloat16)'"
    print(f"\n5. run 4 (device-run4.json, last 2.7 s of 8 s): measured W; the rule at the measured rates: idle {idle} + "
          f"min({gemm_w - idle:.1f}, {memory_w - idle:.1f} x bytes/s over the copy's {copy / 1e12:.3f} TB/s + "
          f"{gemm_w - idle:.1f} x FLOP/s over the class's {class_rate / 1e12:.1f} TFLOP/s); astra run (H200-SXM, "
          f"{REPEAT4} copies in a chain): its time a call and its power")
    print(f"   {'kernel':28s} {'TB/s':>5s} {'meas W':>7s} {'MHz':>5s} {'reason':>6s} {'bandwidth':>16s} "
          f"{'rule':>16s} {'astra us':>9s} {'meas us':>8s} {'astra W':>16s}")
    for phase, row in rows.items():
        measured = row["power_w_last"]
        if phase.startswith("gemm:"):
            _, _, m, n, k = phase.split(":")
            m, n, k = int(m), int(n), int(k)
            flops, nbytes = 2.0 * m * n * k, 2.0 * (m * k + n * k + m * n)
            seconds = flops / (row["rate_last"] * 1e12)
            bandwidth = idle + (memory_w - idle) * min(1.0, nbytes / seconds / copy)
            rule = idle + min(gemm_w - idle, (bandwidth - idle) + (gemm_w - idle) * flops / seconds / class_rate)
            if gpu_model.op_bound(Op("gemm", "aten::mm", "bf16", m=m, n=n, k=k)).bound != "memory":
                rule = bandwidth = gemm_w
            op = {"name": "aten::mm", "is_cpu_op": False, "inputs_shapes": f"[[{m}, {k}], [{k}, {n}]]",
                  "inputs_types": f"[{bf16}, {bf16}]"}
            name = f"bf16 GEMM {m} x {n} x {k}"
        else:
            _, b, hq, hkv, skv = phase.split(":")
            b, hq, hkv, skv = int(b), int(hq), int(hkv), int(skv)
            nbytes = 2.0 * 2 * b * hkv * skv * 128  # the KV cache read once (the phase's TB/s)
            seconds = nbytes / (row["rate_last"] * 1e12)
            bandwidth = idle + (memory_w - idle) * min(1.0, nbytes / seconds / copy)
            rule = attention_w  # decode attention: the attention class
            op = _decode_op(b, skv, hq, hkv)
            name = f"flash decode b{b} {hq}/{hkv} {skv // 1024}k"
        sim_s, sim_j = simulate_chain([op], repeat=REPEAT4)
        sim_w = sim_j / sim_s
        rate = nbytes / seconds / 1e12

        def pct(x):
            return f"{100 * (x / measured - 1):+5.1f}%"
        print(f"   {name:28s} {rate:5.2f} {measured:7.1f} {row['sm_mhz_last']:5.0f} {row['event_reasons_last'][0]:>6s} "
              f"{bandwidth:7.1f} {pct(bandwidth)} {rule:7.1f} {pct(rule)} {sim_s / REPEAT4 * 1e6:9.1f} "
              f"{seconds * 1e6:8.1f} {sim_w:7.1f} {pct(sim_w)}")
    print("   (a GEMM the gpu model times as compute-bound (M 512) and decode attention: their class; astra run's time is "
          "the gpu model's, its power holds the kernel's fixed time)")


if __name__ == "__main__":
    raise SystemExit(main())
