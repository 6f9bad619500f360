"""Notebook 12's serving tables and figure (issues 79 and 90), from ``vllm_throughput.json`` alone: vLLM's aggregate
tokens/s per mode and load, the schedule against the best fixed mode, the cost model's predicted k against the
measured best, each request's time per output token, and throughput against concurrency with the crossings marked.
Records from before the schedule (one EAGLE-3 mode, no calibration) render their throughput table only."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.validate import require
from ..harness.experiments.vllm_throughput import AR_TWIN, SCHEDULE, SCHEDULE_VLLM
from ..harness.peers.vllm import AR_MODE as AR
from ..harness.peers.vllm_serving import k_by_batch
from .formatting import dash


def read(path: str | Path) -> tuple[dict, pd.DataFrame]:
    doc = json.loads(Path(path).read_text())
    return doc, pd.DataFrame(doc["rows"])


def mode_label(name: str, config: dict) -> str:
    if name == AR:
        return "vLLM AR"
    if name == AR_TWIN:
        return "vLLM AR, a second engine"
    if config.get("schedule"):
        return "EAGLE-3, k by batch size" + (" + our plugin (serve-plan)" if config.get("skip_idle_head")
                                             else ", vLLM as released")
    return f"EAGLE-3, our head, k = {config['k']}"


def medians(rows: pd.DataFrame) -> pd.DataFrame:
    """Median aggregate tokens/s over the rounds: one row per mode, one column per load."""
    return rows.groupby(["mode", "concurrency"]).tps.median().unstack()


def fixed_modes(doc: dict) -> list[str]:
    return [m for m in doc["modes"] if m != SCHEDULE]


def at(rows: pd.DataFrame, mode: str, c: int) -> pd.DataFrame:
    """One mode's rows at ``c`` concurrent requests, one per round."""
    return rows[(rows["mode"] == mode) & (rows.concurrency == c)]


def spread(tps: pd.Series) -> str:
    """Tokens/s over the rounds: the median with the range."""
    return f"{tps.median():.1f} ({tps.min():.1f}-{tps.max():.1f})"


def paired_ratio(rows: pd.DataFrame, mode: str, c: int, base: str = AR) -> float:
    """The median over the rounds of ``mode``'s tokens/s over ``base``'s in the same round at ``c`` requests: the
    modes run interleaved within a round, so this ratio leaves out the drift between rounds (NaN where no round has
    both)."""
    ref, other = (at(rows, m, c).set_index("repeat").tps for m in (base, mode))
    require(ref.index.is_unique and other.index.is_unique,
            f"vllm_throughput rows: a round appears twice for {base} or {mode} at {c} concurrent requests")
    ratios = (other / ref).dropna()
    return float(statistics.median(ratios)) if len(ratios) else float("nan")


def schedule_ratios(doc: dict, rows: pd.DataFrame) -> dict:
    """Per load, from the rounds: the best of AR and the fixed k (by median), and the schedule's median over AR's
    and over the best, and the same two round by round (``paired_ratio``), with whether its range lies wholly below
    AR's; empty where no schedule was measured."""
    med, fixed = medians(rows), fixed_modes(doc)
    if SCHEDULE not in med.index:
        return {}
    out = {}
    for c in doc["settings"]["concurrency"]:
        best = max(fixed, key=lambda m: med.loc[m, c])
        out[c] = {"best": best, "over_ar": med.loc[SCHEDULE, c] / med.loc[AR, c],
                  "over_best": med.loc[SCHEDULE, c] / med.loc[best, c],
                  "best_over_ar": med.loc[best, c] / med.loc[AR, c],
                  "paired_over_ar": paired_ratio(rows, SCHEDULE, c),
                  "paired_over_best": paired_ratio(rows, SCHEDULE, c, base=best),
                  "wholly_below_ar": bool(at(rows, SCHEDULE, c).tps.max() < at(rows, AR, c).tps.min())}
    return out


def equal_to_ar(rows: pd.DataFrame, mode: str) -> str:
    """Requests whose greedy tokens equal vLLM's AR on the same prompt, load and round, over every load and round."""
    if "outputs_sha" not in rows or mode == AR:
        return "–"
    ar = {(r.concurrency, r.repeat): r.outputs_sha for r in rows[rows["mode"] == AR].itertuples()}
    same = [a == b for r in rows[rows["mode"] == mode].itertuples() for a, b in zip(r.outputs_sha,
                                                                                  ar[r.concurrency, r.repeat])]
    return f"{sum(same)}/{len(same)}"


def tps_table(rows: pd.DataFrame, modes: dict, loads: list, by_round: bool = False) -> pd.DataFrame:
    """Tokens/s of ``modes`` (name -> its record entry, in row order) at each load: the median over the rounds with
    their range and, for a mode other than AR, its median over AR's (``by_round``: then also ``paired_ratio``);
    and how many requests' tokens equal vLLM's AR."""
    med, out = medians(rows), {}
    for mode, spec in modes.items():
        name = mode_label(mode, spec["config"])
        for c in loads:
            tps = at(rows, mode, c).tps
            ratio = "" if mode == AR else f" · {tps.median() / med.loc[AR, c]:.2f}×"
            if by_round and mode != AR:
                ratio += f" (by round {paired_ratio(rows, mode, c):.2f}×)"
            out.setdefault(name, {})[f"{c} concurrent"] = spread(tps) + ratio
        out[name]["= vLLM AR"] = equal_to_ar(rows, mode)
    return pd.DataFrame(out).T


def vllm_throughput_table(path: str | Path) -> pd.DataFrame:
    """Aggregate tokens/s per mode and number of concurrent requests (``tps_table``), from the main rounds."""
    doc, rows = read(path)
    return tps_table(rows, doc["modes"], doc["settings"]["concurrency"])


def vllm_accepted_table(path: str | Path) -> pd.DataFrame:
    """Per speculative mode and load: accepted draft tokens per draft step and sequence, over every round (vLLM's
    counters; "–" where the mode drafted nothing there)."""
    doc, rows = read(path)
    out = {}
    for mode, spec in doc["modes"].items():
        if mode == AR:
            continue
        for c in doc["settings"]["concurrency"]:
            counts = at(rows, mode, c).spec
            drafts, accepted = (sum(x.get(key, 0) for x in counts) for key in ("drafts", "accepted"))
            ok = drafts > len(counts)  # more than the prefill step's one draft per generation
            out.setdefault(mode_label(mode, spec["config"]), {})[f"{c} concurrent"] = \
                dash(accepted / drafts if ok else float("nan"), "{:.2f}")
    return pd.DataFrame(out).T


def model_best_k(predicted_tps: dict) -> int:
    """The k of the highest predicted throughput (``predicted_tps``: k, as JSON's string, -> tokens/s)."""
    return int(max(predicted_tps, key=predicted_tps.get))


def vllm_schedule_table(path: str | Path) -> pd.DataFrame:
    """Per load: the schedule's k and its median tokens/s against AR's and the best fixed mode's (its range over
    the rounds beside AR's; the median of its per-round ratio over each), and the cost model's best k (the k of its
    highest predicted throughput; the schedule drafts the best k >= 1 only where it beats k = 0 by the calibration's
    noise) against the measured best, with the tokens/s it predicted for its k; empty for a record without a
    schedule."""
    doc, rows = read(path)
    if "model" not in doc or not (ratios := schedule_ratios(doc, rows)):
        return pd.DataFrame()
    med = medians(rows)
    k_of = {m: 0 if m == AR else doc["modes"][m]["config"]["k"] for m in fixed_modes(doc)}
    k_at = k_by_batch(doc["model"]["schedule"])
    out = {}
    for c, r in ratios.items():
        best, predicted = r["best"], model_best_k(doc["model"]["predicted_tps"][str(c)])
        out[c] = {"schedule's k": k_at.get(c, "–"), "vLLM AR tok/s": spread(at(rows, AR, c).tps),
                  "best fixed": f"k = {k_of[best]}" if best != AR else "AR",
                  "best fixed tok/s": f"{med.loc[best, c]:.1f}",
                  "schedule tok/s": spread(at(rows, SCHEDULE, c).tps),
                  "schedule / best": f"{r['over_best']:.2f}×",
                  "schedule / best, round by round": f"{r['paired_over_best']:.2f}×",
                  "schedule / AR": f"{r['over_ar']:.2f}×",
                  "schedule / AR, round by round": f"{r['paired_over_ar']:.2f}×",
                  "predicted best k": predicted, "measured best k": k_of[best],
                  "predicted tok/s": f"{doc['model']['predicted_tps'][str(c)][str(predicted)]:.1f}",
                  "match": "yes" if predicted == k_of[best] else "no"}
    t = pd.DataFrame(out).T
    t.index = [f"{c} concurrent" for c in t.index]
    return t


def schedule_targets(path: str | Path) -> dict:
    """Issue 90's targets on a record: per load, the schedule's median over the best fixed mode's, whether its
    range lies wholly below AR's, its ratio over AR at one request, and the predicted best k's matches."""
    t = vllm_schedule_table(path)
    per_load = schedule_ratios(*read(path))
    return {"per_load": per_load, "at_one_over_ar": per_load[1]["over_ar"],
            "matches": int((t["match"] == "yes").sum()), "loads": len(t)}


def vllm_tpot_table(path: str | Path) -> pd.DataFrame:
    """Each request's time per output token after its first (vLLM's own timestamps), median and p90 over the
    requests of every round, in ms; empty for a record without it."""
    doc, rows = read(path)
    if "tpot_s" not in rows:
        return pd.DataFrame()
    out = {}
    for mode, spec in doc["modes"].items():
        for c in doc["settings"]["concurrency"]:
            xs = [x * 1000 for r in at(rows, mode, c).tpot_s for x in r if x is not None]
            cell = f"{statistics.median(xs):.1f} / {np.percentile(xs, 90):.1f}" if xs else "–"
            out.setdefault(mode_label(mode, spec["config"]), {})[f"{c} concurrent"] = cell
    return pd.DataFrame(out).T


def plugin_part(path: str | Path) -> tuple[dict, dict] | None:
    """A record's plugin rounds and load drop (``doc["plugin"]``) with every mode's entry, the main rounds' and the
    schedule in vLLM as released; None for a record without them."""
    doc = json.loads(Path(path).read_text())
    return (doc, doc["modes"] | doc["plugin"]["modes"]) if doc.get("plugin") else None


def vllm_plugin_table(path: str | Path) -> pd.DataFrame:
    """Per load, from the plugin's own interleaved rounds (the fixed k released): vLLM's AR, the schedule with our
    plugin, the same schedule in vLLM as released and, where the record has it, a second AR engine (``tps_table``
    with the ratios round by round; empty for a record without them)."""
    if (part := plugin_part(path)) is None:
        return pd.DataFrame()
    doc, modes = part
    shown = [m for m in (AR, SCHEDULE, SCHEDULE_VLLM, AR_TWIN) if m in modes]
    return tps_table(pd.DataFrame(doc["plugin"]["rows"]), {m: modes[m] for m in shown},
                     doc["settings"]["concurrency"], by_round=True)


def vllm_load_drop_table(path: str | Path) -> pd.DataFrame:
    """The load drop, per schedule: the drafts after the drop, accepted tokens per draft token and per draft, and
    whether every output equals the other schedule's (empty for a record without it)."""
    if (part := plugin_part(path)) is None:
        return pd.DataFrame()
    doc, modes = part
    drop, out = doc["plugin"]["load_drop"], {}
    same = len({tuple(d["outputs_sha"]) for d in drop["modes"].values()}) == 1
    for mode, d in drop["modes"].items():
        spec = d["spec"]
        out[mode_label(mode, modes[mode]["config"])] = {
            "drafts": spec["drafts"], "draft tokens": spec["draft_tokens"],
            "accepted / draft token": dash(spec["accepted"] / spec["draft_tokens"] if spec["draft_tokens"] else
                                           float("nan"), "{:.2f}"),
            "accepted / draft": dash(spec["accepted"] / spec["drafts"] if spec["drafts"] else float("nan"), "{:.2f}"),
            "outputs equal": "yes" if same else "no"}
    t = pd.DataFrame(out).T
    t.index.name = (f"{drop['from']} requests, {drop['from'] - drop['to']} stop at {drop['short_tokens']} tokens, "
                    f"{drop['to']} go on to {drop['long_tokens']}")
    return t


def crossings(doc: dict, rows: pd.DataFrame) -> dict:
    """Per fixed k: the first load (interpolated in log2 of the load) where its median falls below AR's; absent
    where it never does."""
    med, out = medians(rows), {}
    loads = doc["settings"]["concurrency"]
    for m in fixed_modes(doc):
        if m == AR:
            continue
        ratio = [med.loc[m, c] / med.loc[AR, c] for c in loads]
        for i in range(1, len(loads)):
            if ratio[i - 1] >= 1 > ratio[i]:
                x0, x1 = np.log2(loads[i - 1]), np.log2(loads[i])
                out[m] = float(2 ** (x0 + (x1 - x0) * (ratio[i - 1] - 1) / (ratio[i - 1] - ratio[i])))
                break
    return out


def serving_figure(path: str | Path):
    """Aggregate tokens/s against concurrent requests, one line per mode (median, bars: the rounds' range), and
    each mode over AR with the crossings marked (where a fixed k falls below AR)."""
    import matplotlib.pyplot as plt

    doc, rows = read(path)
    loads, med = doc["settings"]["concurrency"], medians(rows)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.8))
    shades = plt.cm.viridis(np.linspace(0.15, 0.85, len(doc["modes"])))
    styles = {}
    for colour, (mode, spec) in zip(shades, doc["modes"].items()):
        style = styles[mode] = {AR: dict(color="black", ls="--"),
                                SCHEDULE: dict(color="#d62728", lw=2.5)}.get(mode, dict(color=colour))
        at = rows[rows["mode"] == mode].groupby("concurrency").tps
        y = med.loc[mode, loads].to_numpy()
        err = [y - at.min()[loads].to_numpy(), at.max()[loads].to_numpy() - y]
        left.errorbar(loads, y, yerr=err, marker="o", ms=4, capsize=3, label=mode_label(mode, spec["config"]), **style)
        right.plot(loads, y / med.loc[AR, loads].to_numpy(), marker="o", ms=4, **style)
    for mode, x in crossings(doc, rows).items():
        right.plot([x], [1], marker="X", ms=9, mec="white", color=styles[mode]["color"], zorder=5)
    right.axhline(1, color="black", lw=1)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(loads, [str(c) for c in loads])
        ax.set_xlabel("concurrent requests")
    left.set_ylabel("aggregate tokens/s")
    right.set_ylabel("over vLLM AR (median of the rounds)")
    right.set_title("X: where each fixed k falls below AR", fontsize=9)
    fig.legend(*left.get_legend_handles_labels(), loc="lower center", bbox_to_anchor=(0.5, 0.01), ncol=3, fontsize=8,
               frameon=False)
    fig.subplots_adjust(bottom=0.25, top=0.9, wspace=0.25)  # the legend below both panels, off every line
    fig.suptitle(f"vLLM on {doc['environment'].get('machine', {}).get('kind', 'this machine')}: our EAGLE-3 head "
                 "under load")
    return fig
