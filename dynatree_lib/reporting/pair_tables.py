"""Tables of the model pair and its costs: the pair report (size, bits per byte, agreement, calibration, overlap),
the forward-cost curves and what they predict, from ``pair.json`` and ``costs.json``, and the main run's rows against
the cost model and the bandwidth bound."""
from __future__ import annotations

import statistics

import pandas as pd

from .. import methods as registry
from ..harness.setup.workloads import label as workload_label, labels as workload_labels
from .formatting import scope_label
from .records import order


def pair_table(pair: dict) -> pd.DataFrame:
    """The model pair on held-out text: size, bits/byte, agreement and calibration (pair.json)."""
    rows = {}
    for role in ("target", "draft"):
        m = pair["models"][role]
        bits = pair["bits_per_byte"].get(role, {})  # none for an EAGLE-3 head (it scores a subset, on features)
        rows[role] = {"params (M)": f"{m['params'] / 1e6:.1f}", "layers × width": f"{m['layers']} × {m['hidden']}",
                      **{f"bits/byte {workload_labels().get(ds, ds)}": f"{v:.3f}" for ds, v in bits.items()}}
    t = pd.DataFrame(rows).T.fillna("–")
    t.index.name = "model"
    return t


def agreement_table(pair: dict) -> pd.DataFrame:
    """Teacher-forced draft/target agreement, mean confidence, ECE and the overlap of the two laws at T = 1
    (``harness.experiments.pair``: what a drawn token's acceptance reads), on the target's greedy continuations
    and on the human-written prompts; with a draft head over a token subset, also with the full head; with a
    context lookup, also the network alone."""
    rows = {}
    heads = [("agreement", "")] + ([("agreement_full_vocab", ", full-vocabulary head")]
                                   if "agreement_full_vocab" in pair else []) + \
        ([("agreement_no_lookup", ", network alone (no lookup)")] if "agreement_no_lookup" in pair else [])
    for field_, head in heads:
        for key, a in pair[field_].items():
            text = ("human text (prompts)" if key.endswith("_human") else "target's greedy output") + head
            rows[(scope_label(key.replace("_human", "")), text)] = {
                "positions": a["positions"], "agreement": f"{a['agreement']:.3f}",
                "mean top-1 prob": f"{a['mean_confidence']:.3f}", "ECE": f"{a['ece']:.3f}",
                "Σ min(p, q) at T = 1": f"{a['overlap']:.3f}" if "overlap" in a else "–"}
    t = pd.DataFrame(rows).T
    t.index.names = ["scope", "text"]
    return t


def overlap_table(pair: dict) -> pd.DataFrame:
    """Σ min(p, q) per workload and category, the probability that speculative sampling accepts a token drawn from
    the draft at temperature 1, teacher-forced on the target's greedy output and on its output sampled at
    temperature 1 (``pair["sampled"]``), for each head the report measured; empty for a report without it."""
    sampled = pair.get("sampled")
    if not sampled:
        return pd.DataFrame()
    heads = {"agreement": "as drafting uses it", "agreement_no_lookup": "network alone",
             "agreement_full_vocab": "full head"}
    rows = {}
    for field_, head in heads.items():
        for text, rep in (("greedy output", pair), ("sampled output", sampled)):
            for key, a in rep.get(field_, {}).items():
                if not key.endswith("_human") and "overlap" in a:
                    rows.setdefault(scope_label(key), {})[(head, text)] = f"{a['overlap']:.3f}"
    t = pd.DataFrame(rows).T
    t.columns = pd.MultiIndex.from_tuples(t.columns)
    t.index.name = "text"
    return t


def draft_versions_table(pair: dict, earlier: dict[str, dict], now: str = "now", *,
                         overlap: bool = False) -> pd.DataFrame:
    """The draft against other drafts (``earlier``: name -> its pair report: earlier versions, or an EAGLE-3 head's
    ``pair_eagle3.json``) on the same dev prompts, teacher-forced on the target's greedy output: agreement of the
    network alone and with its lookup, and the calibration error, per workload and category; with ``overlap``
    also Σ min(p, q) on the target's T = 1 samples (``harness.experiments.pair.versions``)."""
    from ..harness.experiments.pair import versions

    metrics = {"network alone": "alone", "with lookup": "served", "ECE (network alone)": "ece"}
    if overlap:
        metrics |= {"Σ min(p, q), T = 1 samples (network alone)": "overlap",
                    "Σ min(p, q), T = 1 samples (with lookup)": "overlap_served"}
    cell = lambda x: "–" if x != x else f"{x:.3f}"  # NaN: a report without that measurement
    rows = {}
    for name, before in earlier.items():
        for key, v in versions(pair, before).items():
            row = rows.setdefault(scope_label(key), {("positions", ""): v["positions"]})
            for label, field in metrics.items():
                row[(label, name)] = cell(v["before"][field])
                row[(label, now)] = cell(v["now"][field])
    order = [(label, ver) for label in metrics for ver in (*earlier, now)] + [("positions", "")]
    t = pd.DataFrame(rows).T
    t = t[[c for c in order if c in t.columns]]
    t.columns = pd.MultiIndex.from_tuples(t.columns)
    t.index.name = "text"
    return t


def forward_cost_table(costs: dict) -> pd.DataFrame:
    """fwd(k) in ms for target and draft (back to back, and the draft right after a target forward; with a
    draft head over a token subset also the same draft scoring every token) in each precision, with the
    bandwidth bound of one token."""
    from ..harness.experiments.costs import COLD

    cols = {}
    for dtype, c in costs["curves"].items():
        for role in ("target", "draft", "draft_full_vocab", COLD):
            if role in c:
                cols[(dtype, role.replace("_", " "))] = {int(k): f"{v:.2f}" for k, v in c[role].items()}
        cols[(dtype, "draft / target")] = {int(k): f"{c['draft'][k] / c['target'][k]:.3f}" for k in c["target"]}
    t = pd.DataFrame(cols)
    t.index.name = "k tokens"
    bounds = {d: c["bound"]["ms_per_token"] for d, c in costs["curves"].items()}
    t.attrs["bound"] = bounds
    return t


def one_token_table(costs: dict, earlier: dict[str, dict] | None = None, now: str = "now") -> pd.DataFrame:
    """The draft's one-token forward over the target's in paired rounds (``costs.one_token_ratio``): the
    median ratio with its quartiles, each model's range and the read bandwidth's over the rounds (the phases
    they met); a file measured before the paired rounds existed shows a row saying so. Below, the same ratio on
    the forward-cost curves (k = 1) of this draft and of ``earlier`` versions (version name -> its costs file),
    the one measurement every version has."""
    rows = {}
    for dtype, o in costs.get("one_token", {}).get("by_dtype", {}).items():
        gbs = [g for g in o.get("read_gbs", []) if g == g]  # NaN: no probe
        rows[f"{now}, paired rounds, {dtype}"] = {
            "draft / target (median)": f"{o['median']:.3f}",
            "quartiles": f"[{o['quartiles'][0]:.3f}, {o['quartiles'][1]:.3f}]",
            "target ms (min-max)": f"{min(o['target_ms']):.2f}-{max(o['target_ms']):.2f}",
            "draft ms (min-max)": f"{min(o['draft_ms']):.2f}-{max(o['draft_ms']):.2f}",
            "read GB/s (min-max)": f"{min(gbs):.1f}-{max(gbs):.1f}" if gbs else "–",
            "rounds over s": f"{o['rounds']} over {o.get('span_s', 0):.0f}"}
    if not rows:
        rows[f"{now}, paired rounds"] = {"draft / target (median)": "not measured"}
    for name, c in {**(earlier or {}), now: costs}.items():
        for dtype, curve in c.get("curves", {}).items():
            target, draft = curve["target"]["1"], curve["draft"]["1"]
            rows[f"{name}, curves (k = 1), {dtype}"] = {
                "draft / target (median)": f"{draft / target:.3f}", "target ms (min-max)": f"{target:.2f}",
                "draft ms (min-max)": f"{draft:.2f}"}
    t = pd.DataFrame.from_dict(rows, orient="index").fillna("–")
    t.index.name = "draft, measurement, precision"
    return t


def steady_ratios(ratios: list[float] | None, rows: list[dict]) -> str:
    """Median [min, max] of the steady generations' ratios to their bounds, and how many of the rows were steady."""
    if not ratios:
        return "–" if ratios is None else f"none of {len(rows)} steady"
    return (f"{statistics.median(ratios):.2f}× [{min(ratios):.2f}, {max(ratios):.2f}]"
            + ("" if len(ratios) == len(rows) else f" ({len(ratios)} of {len(rows)} steady)"))


def ar_vs_bound(df: pd.DataFrame) -> pd.DataFrame:
    """AR's time per token (TPOT) beside the bandwidth bound of the same record (``bound_ms``: record means),
    and each generation against its own probes (``bound_ratios``: median [min, max] over the generations whose
    probes before and after agree, ``records.steady``), per replicate."""
    ar = df[df.method == registry.AR]
    bw = ar.read_bandwidth_gbs if "read_bandwidth_gbs" in ar else pd.Series(float("nan"), index=ar.index)
    per = ar.bound_ratios if "bound_ratios" in ar else pd.Series(None, index=ar.index, dtype=object)
    out = pd.DataFrame({"dataset": ar.dataset.map(workload_labels()), "precision": ar.dtype,
                        "replicate": ar.replicate.map(lambda r: int(r) + 1),
                        "AR TPOT (ms)": ar.tpot_ms.map(lambda x: f"{x:.2f}"),
                        "read bandwidth (GB/s)": bw.map(lambda x: "–" if pd.isna(x) else f"{x:.1f}"),
                        "bound (ms)": ar.bound_ms.map(lambda x: f"{x:.2f}"),
                        "TPOT / bound": (ar.tpot_ms / ar.bound_ms).map(lambda x: f"{x:.2f}×"),
                        "each generation / its probes": [steady_ratios(xs, rows) for xs, rows in zip(per, ar.rows)]})
    return out.set_index(["dataset", "precision", "replicate"])


def cost_model_table(df: pd.DataFrame, costs: dict) -> pd.DataFrame:
    """Predicted (cost model) vs measured milliseconds per generated token, prefill excluded; for the
    speculative rows also one iteration's drafting and verification, predicted and measured (ms).

    ``gap``: measured / predicted - 1. ``gap, AR-scaled``: the same with the prediction multiplied by AR's
    measured / predicted on the same dataset, precision and replicate (0 for AR by construction): the curves are
    timed in notebook 00, minutes before or after the main run, and a shared VM's overall speed can drift between
    the two; this gap is what remains once that common factor is taken out."""
    from ..harness.experiments.costs import predict_iteration, predict_ms_per_token

    rows, ar_scale = [], {}  # (dataset, precision, replicate) -> AR's measured / predicted
    for _, r in order(df).iterrows():
        prec = r["dtype"]  # not r.dtype: that is the Series' own dtype
        if prec not in costs["curves"] or r.impl != "ours":
            continue
        c = costs["curves"][prec]
        stats = (r.draft_nodes_per_iter, r.depth_per_iter, r.draft_forwards_per_iter, r.L_bar)
        pred = predict_ms_per_token(c, r.method, *stats[:3], L_bar=stats[3])
        row = {"Dataset": workload_label(r.dataset), "Method": r.label, "precision": prec,
               "replicate": int(r.get("replicate",
                                0)) + 1, "predicted": pred, "measured": r.ms_per_token, "gap": r.ms_per_token / pred - 1}
        if r.method != registry.AR:
            d, v, cm = predict_iteration(c, *stats)
            row |= {"draft/iter pred.": d, "draft/iter meas.": 1e3 * r.draft_s / r.iterations,
                    "verify/iter pred.": v, "verify/iter meas.": 1e3 * r.verify_s / r.iterations,
                    "commit/iter pred.": cm, "commit/iter meas.": 1e3 * r.commit_s / r.iterations}
        if r.method == registry.AR:
            ar_scale[(row["Dataset"], prec, row["replicate"])] = r.ms_per_token / pred
        rows.append(row)
    t = pd.DataFrame(rows)
    if t.empty:
        return t
    scale = pd.Series([ar_scale.get(k, float("nan")) for k in zip(t.Dataset, t.precision, t.replicate)], index=t.index)
    t.insert(t.columns.get_loc("gap") + 1, "gap, AR-scaled", t.measured / (t.predicted * scale) - 1)
    return t


def ceiling_table(costs: dict, alphas=(0.5, 0.6, 0.7, 0.8, 0.9, 0.95), Ks=range(1, 9)) -> pd.DataFrame:
    """Per per-token acceptance and precision: the best chain length K and its predicted speedup over AR
    from that precision's forward-cost curves (``costmodel.chain_speedup``): what acceptance a drafter
    needs on this hardware."""
    from ..harness.experiments.costs import chain_speedup

    cols = {}
    for prec, curves in costs["curves"].items():
        best = {a: max(Ks, key=lambda K: chain_speedup(curves, a, K)) for a in alphas}
        cols[(prec, "best K")] = {a: str(best[a]) for a in alphas}
        cols[(prec, "predicted speedup")] = {a: f"{chain_speedup(curves, a, best[a]):.2f}x" for a in alphas}
    t = pd.DataFrame(cols)
    t.index.name = "acceptance per token"
    return t


def head_cost_table(cost: dict) -> pd.DataFrame:
    """the ``head_cost`` experiment's paired rounds: each draft's one step over the target's one-token forward."""
    rows = {name: {"draft": d["ref"], "engine": d.get("engine", cost["engine"]), "median": f"{d['median']:.3f}",
                   "quartiles": "–".join(f"{q:.3f}" for q in d["quartiles"]), "rounds": d["rounds"]}
            for name, d in cost["drafts"].items()}
    t = pd.DataFrame(rows).T
    t.index.name = "draft step / target one-token forward"
    return t


def head_vocab_table(vocab: dict) -> pd.DataFrame:
    """the ``head_vocab`` experiment: per reduced-vocabulary size, the held-out coverage (a ceiling on agreement) and
    the
    weights one head step reads against the target's one-token forward."""
    rows = {f"{r['draft_vocab']:,}": {**{f"coverage: {k}": f"{v:.3f}" for k, v in r["coverage"].items()},
                                     "weights read (M)": f"{r['head_params'] / 1e6:.1f}",
                                     "of the target's": f"{r['bytes_ratio']:.3f}"} for r in vocab["sizes"]}
    t = pd.DataFrame(rows).T
    t.index.name = "draft vocabulary"
    return t


def head_memory_table(memory: dict) -> pd.DataFrame:
    """the ``memory_head`` experiment: each cell's footprint (notebook 08's measure, the mean of its fresh processes,
    each process's value beside it), its excess over AR's, and the tensors the loaded target and draft hold (the
    draft's:
    beyond the target's; records measured before these were logged show none)."""
    records = memory["records"]
    mean = lambda r: r["aggregate"]["footprint_mb"]["mean"]  # noqa: E731
    ar = mean(next(r for r in records if r["method"] == registry.AR))
    rows = {r["label"] if r["method"] == registry.AR else f"{r['label']} · {r['draft']}": {
        "footprint (MB)": f"{mean(r):.1f}", "processes (MB)": ", ".join(f"{x['footprint_mb']:.1f}" for x in r["rows"]),
        "over AR": "–" if r["method"] == registry.AR else f"{100 * (mean(r) / ar - 1):+.1f}%",
        **held_columns(r)} for r in records}
    t = pd.DataFrame(rows).T
    t.index.name = "WikiText-2, first test prompt"
    return t


def held_columns(record: dict) -> dict:
    """The target's and the draft's tensors (MB, their processes' mean) of a memory record that logged them."""
    agg = record["aggregate"]
    return {f"{who} tensors (MB)": f"{agg[f'{who}_tensors_mb']['mean']:.1f}" if f"{who}_tensors_mb" in agg else "–"
            for who in ("target", "draft")}


def head_lookup_table(report: dict) -> pd.DataFrame:
    """the ``head_lookup`` experiment: on each held-out half, the head's first drafted token alone, with the committed
    lookup and with one fitted on the other half: agreement with the target's greedy token and the mean
    log-likelihood of that token."""
    rows = {}
    for half, scores in sorted(report["scores"].items()):
        for what, s in scores.items():
            rows.setdefault(what, {})[f"agreement, half {half}"] = f"{s['agreement']:.4f}"
            rows[what][f"log-likelihood, half {half}"] = f"{s['log_likelihood']:.4f}"
    t = pd.DataFrame(rows).T
    t.index.name = "the head's first draft"
    return t


def head_lookup_weights_table(report: dict) -> pd.DataFrame:
    """the ``head_lookup`` experiment: the committed lookup's weight for each match length n beside those fitted on each
    held-out half."""
    rows = {"committed": report["committed_weights"]} | {f"fitted on half {h}": f["weights"]
                                                         for h, f in sorted(report["fitted"].items())}
    t = pd.DataFrame({k: {f"n={i + 1}": f"{w:.2f}" for i, w in enumerate(ws)} for k, ws in rows.items()}).T
    t.index.name = "w[n]"
    return t


def verification_table(costs_by_machine: dict[str, dict], dtype: str = "bfloat16") -> pd.DataFrame:
    """Per machine kind (its ``costs.json``): the target's forward of k tokens over its one-token forward, c(k), in
    ``dtype``, beside the one-token ms and the kernels' instruction set that timed it. What a verification of k
    nodes costs on each machine: the price a tree pays, which the method does not decide."""
    rows = {}
    for kind, costs in costs_by_machine.items():
        c, env = costs["curves"][dtype], costs["environment"]
        one = c["target"]["1"]
        rows[kind] = {"CPU": env.get("machine", {}).get("model", env.get("device_name")),
                      "kernels": env.get("kernels") or "avx512-bf16", "1 token (ms)": f"{one:.2f}",
                      **{f"c({k})": f"{v / one:.2f}" for k, v in c["target"].items() if k != "1"}}
    t = pd.DataFrame(rows).T
    t.index.name = "machine"
    return t


def matmul_table(doc: dict) -> pd.DataFrame:
    """The ``matmuls`` report: per path (each of our kernels' instruction sets, torch's oneDNN matmul) and rows k,
    the median ms of one pass over the target's matmul weights, and over the same path's one-row pass."""
    med = doc["median_ms"]
    rows = {}
    for path, per in med.items():
        one = per["1"]
        rows[path] = {**{f"k={k} ms": f"{v:.1f}" for k, v in per.items()},
                      **{f"k={k} / k=1": f"{v / one:.2f}" for k, v in per.items() if k != "1"}}
    t = pd.DataFrame(rows).T
    t.index.name = "matmuls"
    return t
