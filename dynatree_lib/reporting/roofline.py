"""Notebook 00's roofline (``harness.experiments.roofline``): the target's measured k-row forwards and c(k) against
the floors the machine's bandwidth and peak multiply throughput set, from the committed record alone."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from ..harness.experiments.roofline import floors


def roofs_table(doc: dict) -> pd.DataFrame:
    """The roofs: read bandwidth (best probe), and the peak bf16 GFLOP/s of each instruction set at each thread
    count; which of them the floors use."""
    stream = doc.get("kernel_stream_gbs")
    rows = [{"roof": "read bandwidth", "value": f"{doc['bandwidth_gbs']:.1f} GB/s", "used": "yes",
             "note": f"best of {len(doc['bandwidth_probes_gbs'])} probes ({max(doc['bandwidth_probes_gbs']):.1f} GB/s)"
                     + (f" and our kernel streaming a weight ({stream:.1f} GB/s)" if stream else "")}]
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
    out.index.name = f"k ({doc['isa']}, {doc['threads']} threads, context {doc['context']})"
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
