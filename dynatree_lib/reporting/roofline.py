"""Notebook 00's roofline (``harness.experiments.roofline``): the target's measured k-row forwards and c(k) against
the floors the machine's bandwidth and peak multiply throughput set, from the committed record alone."""
from __future__ import annotations

from statistics import median

import matplotlib.pyplot as plt
import pandas as pd

from ..harness.experiments.roofline import curve_bandwidth, floors
from .records import probes_agree


def roofs_table(doc: dict) -> pd.DataFrame:
    """The roofs: read bandwidth (the best probe or kernel stream), and the peak bf16 GFLOP/s of each instruction set
    at each thread count; which of them the floors use."""
    stream = doc.get("kernel_stream_gbs")
    phases = [g for r in doc.get("phase_profile") or [] for g in (r["before_gbs"], r["after_gbs"])]
    curve = doc.get("curve_probes_gbs")
    rows = [{"roof": "read bandwidth", "value": f"{doc['bandwidth_gbs']:.1f} GB/s", "used": "" if curve else "yes",
             "note": f"best of {len(doc['bandwidth_probes_gbs'])} probes ({max(doc['bandwidth_probes_gbs']):.1f} GB/s)"
                     + (f", of the phase profiles' ({max(phases):.1f} GB/s)" if phases else "")
                     + (f" and our kernel streaming a weight ({stream:.1f} GB/s)" if stream else "")}]
    if curve:
        rows.append({"roof": "read bandwidth around the curve", "value": f"{curve_bandwidth(doc):.1f} GB/s",
                     "used": "yes", "note": "the floors' bandwidth: the mean of the probes right before and after "
                                            f"the measured curve ({curve[0]:.1f}, {curve[1]:.1f} GB/s)"
                                            + ("" if probes_agree(*curve) else "; they disagree: the phase changed")})
    for isa, by_threads in doc["peak_gflops"].items():
        for threads, gflops in by_threads.items():
            used = isa == doc["isa"] and int(threads) == doc["threads"]
            rows.append({"roof": f"peak {isa}, {threads} thread(s)", "value": f"{gflops:.0f} GFLOP/s",
                         "used": "yes" if used else "", "note": ""})
    if not doc["peak_gflops"]:
        rows.append({"roof": "peak bf16", "value": "not measured", "used": "",
                     "note": doc.get("peak_unavailable") or ""})
    return pd.DataFrame(rows).set_index("roof")


def roofline_table(doc: dict) -> pd.DataFrame:
    """Per k: the measured forward and its floor in ms, the roof that sets the floor, measured over floor; c(k)
    measured and its floor."""
    t = pd.DataFrame(floors(doc)).set_index("k")
    out = pd.DataFrame({"measured ms": t.measured_ms.map("{:.2f}".format), "floor ms": t.floor_ms.map("{:.2f}".format),
                        "roof": t.roof, "measured / floor": t.measured_over_floor.map("{:.2f}".format),
                        "c(k)": t.c.map("{:.2f}".format), "floor of c(k)": t.c_floor.map("{:.2f}".format),
                        "c / floor": t.c_over_floor.map("{:.2f}".format)})
    out.index.name = (f"k ({doc['isa']}, {doc['threads']} threads, context {doc['context']}, floors at "
                      f"{curve_bandwidth(doc):.1f} GB/s)")
    return out


def roofline_figure(doc: dict):
    """Measured ms of a k-row forward and its floor (left); c(k) and its floor (right); log-log."""
    t = pd.DataFrame(floors(doc))
    fig, (a, b) = plt.subplots(1, 2, figsize=(8.4, 3.4))
    a.plot(t.k, t.measured_ms, "o-", color="#d62728", ms=3, label="measured")
    a.plot(t.k, t.floor_ms, "k--", lw=1, label="floor")
    a.set_ylabel("ms per forward")
    b.plot(t.k, t.c, "o-", color="#d62728", ms=3, label="c(k) measured")
    b.plot(t.k, t.c_floor, "k--", lw=1, label="floor of c(k)")
    b.set_ylabel("c(k) = fwd(k) / fwd(1)")
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("rows per forward (k)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def step_table(doc: dict) -> pd.DataFrame | None:
    """Where a k-row forward's time goes (``roofline.step_profile``): ms per forward per step of the fused forward,
    the threads' mean, with each step's share; None where the record has no profile."""
    prof = doc.get("step_profile")
    if not prof:
        return None
    cols = {}
    for k, p in prof.items():
        total = sum(p["steps_ms"].values())
        cols[f"k = {k}: ms"] = {s: f"{ms:.3f}" for s, ms in p["steps_ms"].items()}
        cols[f"k = {k}: share"] = {s: f"{ms / total:.0%}" for s, ms in p["steps_ms"].items()}
        cols[f"k = {k}: ms"]["sum of steps"] = f"{total:.3f}"
        cols[f"k = {k}: ms"]["wall (argmax, sync)"] = f"{p['wall_ms']:.3f}"
    t = pd.DataFrame(cols).fillna("")
    t.index.name = "step (threads' mean)"
    return t


MATMUL_STEPS = ("q, k, v + RoPE", "o", "gate, up + silu", "down", "final norm + head")  # the steps that stream weights
TWO_PHASES = 1.25  # the steady rounds' fastest probe at least this over their slowest: two phases, split between


def phase_table(doc: dict) -> pd.DataFrame | None:
    """Where a one-row forward's time goes in each bandwidth phase (``roofline.phase_profile``), the medians over the
    rounds whose probes before and after agree (``records.probes_agree``): split at the midpoint of their probes where
    the fastest reads ``TWO_PHASES`` x the slowest or more. Per phase: the probe, the bound (weight bytes over it), the
    wall time over it, the weight-streaming steps (their ms and the bandwidth they read at), attention, the barriers'
    waits, the other steps and the call's time outside the steps. None where the record has no such rounds."""
    rounds = [(r, (r["before_gbs"] + r["after_gbs"]) / 2) for r in doc.get("phase_profile") or []
              if probes_agree(r["before_gbs"], r["after_gbs"])]  # (round, its mean probe)
    if not rounds:
        return None
    gbs = [g for _, g in rounds]
    cut = (min(gbs) + max(gbs)) / 2 if max(gbs) >= TWO_PHASES * min(gbs) else 0.0
    phases = {"fast phase": [(r, g) for r, g in rounds if g >= cut],
              "slow phase": [(r, g) for r, g in rounds if g < cut]} if cut else {"one phase": rounds}
    wb, n = doc["weight_bytes"], len(doc["phase_profile"])
    cols = {}
    for name, pairs in phases.items():
        if not pairs:
            continue
        rs, probe = [r for r, _ in pairs], median(g for _, g in pairs)
        steps = {s: median([r["steps_ms"][s] for r in rs]) for s in rs[0]["steps_ms"]}
        mm, wall = sum(steps[s] for s in MATMUL_STEPS), median([r["wall_ms"] for r in rs])
        waits = sum(v for s, v in steps.items() if s.startswith("wait"))
        cols[f"{name} ({len(rs)} of {n} rounds)"] = {
            "read bandwidth, probes (GB/s)": f"{probe:.1f}", "bound: weights / probe (ms)": f"{wb / probe / 1e6:.2f}",
            "wall (ms)": f"{wall:.2f}", "wall / bound": f"{wall / (wb / probe / 1e6):.2f}",
            "weight-streaming steps (ms)": f"{mm:.2f}", "their read rate (GB/s)": f"{wb / mm / 1e6:.1f}",
            "attention (ms)": f"{steps['attention']:.2f}", "barrier waits (ms)": f"{waits:.2f}",
            "other steps (ms)": f"{sum(steps.values()) - mm - waits - steps['attention']:.2f}",
            "outside the steps (ms)": f"{wall - sum(steps.values()):.2f}"}
    t = pd.DataFrame(cols)
    t.index.name = f"one-row forward, context {doc['context']} (medians)"
    return t
