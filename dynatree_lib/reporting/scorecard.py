"""The README's first screen from the logged JSON alone: the findings (one sentence per claim family, its verdicts
and the numbers they rest on) and the scorecard (each of the paper's claims, the paper's number, ours per workload
and a verdict). ``python -m dynatree_lib.reporting.scorecard cpu`` rewrites both between the README's
``<!-- findings -->`` and ``<!-- scorecard -->`` markers; ``run_all.sh`` does. How to read them: docs/scorecard.md.

A comparison between two methods is the ratio of their mean throughputs over the prompts both measured, with
its 95% paired bootstrap interval, in each replicate. Every speedup claim gets its verdict from one rule
(``verdict.verdict``: reproduces, partly, tie or no); the memory claims, which bound a ratio instead, read
reproduces where every workload is within the bound, partly where some are, no where none is.
"""
from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pandas as pd

from .. import methods as registry
from ..harness.setup.paths import REPO
from ..harness.experiments.tuning import NotTuned
from ..harness.setup.variants import MAIN
from ..harness.setup.workloads import WORKLOADS, labels as workload_labels
from ..harness.experiments.frontier import FRONTIER
from ..harness.measure.store import results_path
from . import frontier_tables as ft, tables
from .records import main_ratio
from .notebook import machines, on_machine
from .verdict import verdict

MARK = re.compile(r"<!-- scorecard -->.*?<!-- /scorecard -->", re.S)
FINDINGS_MARK = re.compile(r"<!-- findings -->.*?<!-- /findings -->", re.S)
DOC = "docs/scorecard.md"  # how to read the scorecard and the verdict rule (the README links its sections)
# the claims about trees, which get a second verdict in the methods' own numbers (``own_numbers``)
TALON_T0 = "TALON is faster than EAGLE-3's tree, greedy (TALON; our head)"
TALON_T1 = "... and at T = 1 (TALON's Table 3)"
FIGURE6 = "TALON drafts fewer forwards per committed token than EAGLE-3's tree (TALON Figure 6)"
DT_LINEAR = "DynaTree is faster than linear speculative decoding"
DT_FIXED = "DynaTree is faster than a tuned fixed tree"
HISTORY = "... and history adaptation adds more"
SAYS = {  # a claim that continues the row above it, as a finding's sentence says it on its own
    HISTORY: "history adaptation adds more on top",
    TALON_T1: "TALON is faster than EAGLE-3's tree at T = 1 (TALON's Table 3)"}
TALON_FAMILY = "TALON"  # the family whose rows have a table of their own: TALON's paper, on TALON's workloads
OWN_NUMBERS = {  # a tree claim: (A, B, temperature), read in τ at equal verified nodes on the budget frontier
    DT_LINEAR: (registry.DYNATREE, registry.LINEAR, 0.0), DT_FIXED: (registry.DYNATREE, registry.FIXED_TREE, 0.0),
    TALON_T0: (registry.TALON, registry.EAGLE3_TREE, 0.0), TALON_T1: (registry.TALON, registry.EAGLE3_TREE, 1.0)}


def current(path: Path, profile) -> pd.DataFrame | None:
    """The records of ``path`` that belong to the profile's current cells; None when there are none (a claim whose
    run is not logged yet gets no row rather than an old run's number), also when the current cells are not known
    yet because the tuning they come from is not logged for this code and draft's costs."""
    if not path.exists():
        return None
    try:
        df = tables.load(path, profile)
    except NotTuned:
        return None
    return None if df.empty else df


def main_rows(df: pd.DataFrame, method: str) -> pd.DataFrame:
    """``method``'s rows in its main variant."""
    return df[df.row == tables.row_id(method, MAIN)]


def _cell(rs: list) -> str:
    """Ratios of the replicates as 'r1 / r2' with a mark where an interval includes 1."""
    return " / ".join(f"{r:.2f}{'' if lo > 1 or hi < 1 else '~'}" for r, lo, hi in rs)


def comparison(df: pd.DataFrame, a: str, b: str, claim: str, paper: str, *, lookup: bool = True) -> dict:
    reps = sorted(df.replicate.unique())
    per_ws = {ws: [x for r in reps if (x := main_ratio(df, a, b, ws=ws, rep=r, lookup=lookup)) is not None]
              for ws in workload_labels()}
    row = {"claim": claim, "paper": paper}
    row |= {workload_labels()[ws]: _cell(rs) if rs else "–" for ws, rs in per_ws.items()}
    row["verdict"] = verdict(per_ws)
    return row


def exactness(df: pd.DataFrame) -> dict:
    exact = tables.role(df, "exact")
    timed = tables.replicate(tables.role(df))
    row = {"claim": "Greedy DynaTree emits the target's own tokens (exact)", "paper": "exact (stated)"}
    for ws, name in workload_labels().items():
        e = main_rows(exact[exact.dataset == ws], registry.DYNATREE)
        t = main_rows(timed[timed.dataset == ws], registry.DYNATREE)
        row[name] = "–" if e.empty else \
            f"fp32 {e.iloc[0].equals_ar}/{e.iloc[0].n}, bf16 {t.iloc[0].equals_ar}/{t.iloc[0].n}"
    bad = tables.exactness_failures(exact)
    row["verdict"] = "reproduces" if bad.empty and len(exact) else "no"
    return row


def ablation_rows(path: Path, profile) -> list[dict]:
    """Table 4's two claims on the ablation's workload (``Sweeps.workload``), the paper's gains from
    ``paper_reported.json``."""
    if (df := current(path, profile)) is None:
        return []
    base = df[df.tag_step == 0].iloc[0].tps_by_prompt
    paper = tables.reported()["table4_ablation_wikitext2"]
    ws, rows = profile.sweeps.workload, []
    for step, claim, key in ((1, "Dynamic breadth & depth beat the fixed tree D=5, B=2 (ablation)",
                              "plus_dynamic_breadth_depth"),
                             (2, HISTORY, "plus_history_adaptation")):
        r = df[df.tag_step == step].iloc[0]
        ratio, lo, hi, _ = tables.paired(r.tps_by_prompt, base)
        measured = f"{ratio - 1:+.1%} [{lo - 1:+.1%}, {hi - 1:+.1%}]"
        rows.append({"claim": claim, "paper": f"{paper[key]['delta_vs_fixed']:+.1%}",
                     **{x.label: measured if w == ws else "–" for w, x in WORKLOADS.items()},
                     "verdict": verdict({ws: [(ratio, lo, hi)]})})
    return rows


def memory_row(path: Path, profile) -> list[dict]:
    """Table 5's claims from the footprints (one generation per cell, a fresh process each): DynaTree's memory
    against AR's (the draft's share of the weights sets it) and against linear drafting's (what the tree adds)."""
    if (df := current(path, profile)) is None or "footprint_mb" not in df:  # earlier records: absolute peaks only
        return []
    mem = {m: main_rows(df, m).groupby("dataset").footprint_mb.mean()
           for m in (registry.AR, registry.LINEAR, registry.DYNATREE)}
    t5 = tables.reported()["table5_peak_memory_mb"]
    paper = {m: t5[registry.REGISTRY[m].study.reported]["average"] for m in mem}
    rows = []
    for base, within in ((registry.AR, 0.10), (registry.LINEAR, 0.02)):
        dt, other = mem[registry.DYNATREE], mem[base]
        label = registry.REGISTRY[base].display.label
        row = {"claim": f"DynaTree's memory is within {within:.0%} of {label}'s (footprint of one generation)",
               "paper": f"{paper[registry.DYNATREE] / paper[base] - 1:+.1%}"}
        row |= {name: f"{dt[ws] / other[ws] - 1:+.1%}" if ws in dt and ws in other else "–"
                for ws, name in workload_labels().items()}
        close = [abs(dt[w] / other[w] - 1) < within for w in dt.index if w in other]
        row["verdict"] = "reproduces" if close and all(close) else "partly" if any(close) else "no"
        rows.append(row)
    return rows


def sampling_row(path: Path, profile) -> list[dict]:
    if (df := current(path, profile)) is None:
        return []
    t = max(df.temperature.unique())
    sub = df[df.temperature == t]
    row = {"claim": f"Sampling at T = {t:g} keeps the speedup (best DynaTree-family method over AR sampling)",
           "paper": "TALON Table 3 (T = 1)"}
    best = {}
    for ws, name in workload_labels().items():
        w = sub[(sub.dataset == ws) & sub.method.isin(registry.family(registry.DYNATREE))]
        if w.empty:
            row[name] = "–"
            continue
        b = w.loc[w.speedup.idxmax()]
        row[name] = f"{b.speedup:.2f}× [{b.speedup_lo:.2f}, {b.speedup_hi:.2f}]"
        best[ws] = [(b.speedup, b.speedup_lo, b.speedup_hi)]
    row["verdict"] = verdict(best)
    return [row]


def authors_code_row(path: Path) -> list[dict]:
    """The differential test (experiment ``authors_code``): the authors' tree decoders and ours against greedy AR."""
    if not path.exists():
        return []
    import json

    groups = json.loads(path.read_text())["summary"]["groups"]
    row = {"claim": "The authors' published tree decoders are exact (fp32, against greedy AR; docs/fidelity.md)",
           "paper": "exact (§3.6)"}
    trees = (registry.FIXED_TREE, registry.DYNATREE)
    for ws, name in workload_labels().items():
        def count(impl):
            gs = [g for g in groups if g["dataset"] == ws and g["impl"] == impl and g["method"] in trees]
            return f"{sum(g['equal_to_ar'] for g in gs)}/{sum(g['prompts'] for g in gs)}" if gs else None
        theirs, ours = count("authors"), count("ours")
        row[name] = "–" if theirs is None else f"theirs {theirs}, ours {ours}"
    exact = [g["equal_to_ar"] == g["prompts"] for g in groups
             if g["impl"] == "authors" and g["method"] != registry.LINEAR]
    row["verdict"] = "reproduces" if exact and all(exact) else "no: their missing position_ids"
    return [row]


def peers_row(path: Path, profile) -> list[dict]:
    """Not a paper claim: our fastest method against llama.cpp's fastest mode on the same weights and prompts."""
    if (df := current(path, profile)) is None or not (pairs := tables.best_pairs(df)):
        return []
    row = {"claim": "Our fastest method is faster than llama.cpp's fastest mode, same weights (not in the paper)",
           "paper": "–"}
    for ds, name in workload_labels().items():
        if mine := [p for p in pairs if p["dataset"] == ds]:
            peers = ", ".join(dict.fromkeys(p["peer"].label for p in mine))
            row[name] = f"{_cell([(p['ratio'], p['lo'], p['hi']) for p in mine])} vs {peers}"
    per_ws = {ds: [(p["ratio"], p["lo"], p["hi"]) for p in pairs if p["dataset"] == ds] for ds in workload_labels()}
    row["verdict"] = verdict(per_ws).replace("reproduces", "yes")  # not the paper's claim: nothing to reproduce
    return [row]


def vllm_row(path: Path, profile) -> list[dict]:
    """Not a paper claim: the serving path. vLLM with our EAGLE-3 head against vLLM's own AR, at batch 1 on the
    same prompts (notebook 12), per replicate."""
    if (df := current(path, profile)) is None:
        return []
    vllm = df[df.method == "vllm"]
    per_ws = {}
    for ws in workload_labels():
        for rep, w in vllm[vllm.dataset == ws].groupby("replicate"):
            own, head = w[w.tag_own_ar.fillna(False).astype(bool)], w[w.variant == "vllm_eagle3"]
            if not own.empty and not head.empty:
                ratio, lo, hi, _ = tables.paired(head.iloc[0].tps_by_prompt, own.iloc[0].tps_by_prompt)
                per_ws.setdefault(ws, []).append((ratio, lo, hi))
    if not per_ws:
        return []
    row = {"claim": "vLLM serving our EAGLE-3 head is faster than vLLM's AR, batch 1 (not in the paper)",
           "paper": "–"}
    row |= {workload_labels()[ws]: _cell(rs) for ws, rs in per_ws.items()}
    row["verdict"] = verdict(per_ws).replace("reproduces", "yes")
    return [row]


def talon_paper(table: str) -> str:
    """TALON's reported speedup of TALON over EAGLE-3 (range over its benchmarks) for its reference model."""
    rep = tables.talon_reported()
    model = rep["reference_model"]
    rows = rep[table][model]
    talon, eagle = (rows[registry.REGISTRY[m].study.reported_talon] for m in (registry.TALON, registry.EAGLE3_TREE))
    ratios = [talon[b]["speedup"] / eagle[b]["speedup"] for b in rep["benchmarks"]]
    return f"{min(ratios):.2f}-{max(ratios):.2f} ({model})"


def talon_rows(path: Path, profile) -> list[dict]:
    """TALON's three claims on our feature head (notebook 14, issue 57): TALON is faster than EAGLE-3's dynamic
    tree greedy (its Table 1) and at T = 1 (Table 3), ratios of mean throughputs on the same prompts, one verdict
    rule; and its draft work tracks the oracle line tau = delta of its Figure 6 more closely than EAGLE-3's
    (delta / tau, draft forwards per committed token, lower in every replicate of every workload)."""
    if (df := current(path, profile)) is None:
        return []
    rows = []
    for t, table, claim in ((0.0, "table1_T0", TALON_T0), (1.0, "table3_T1", TALON_T1)):
        rows.append(comparison(df[df.temperature == t], registry.TALON, registry.EAGLE3_TREE, claim, talon_paper(table),
                               lookup=False))  # the head drafts alone, as in TALON
    rows.append(delta_tau_row(df[df.temperature == 0.0]))
    return rows


def delta_tau_row(df: pd.DataFrame) -> dict:
    """TALON's Figure 6 read as a claim: its draft forwards per committed token (delta / tau) are fewer than
    EAGLE-3's tree's, greedy (counts, the same in every replicate: the first replicate's)."""
    row = {"claim": FIGURE6, "paper": "Figure 6 (qualitative)"}
    first, won = df[df.replicate == 0], {}
    for ws, name in workload_labels().items():
        per = [first[(first.dataset == ws) & (first.method == m)] for m in (registry.TALON, registry.EAGLE3_TREE)]
        if any(x.empty for x in per):
            continue
        talon, eagle = ((x.draft_forwards_per_iter / x.L_bar).iloc[0] for x in per)
        row[name], won[ws] = f"{talon:.2f} vs {eagle:.2f}", talon < eagle
    row["verdict"] = "reproduces" if won and all(won.values()) else "partly" if any(won.values()) else "no"
    return row


def committed_frontier(profile) -> pd.DataFrame | None:
    """The budget frontier's points (notebook 15) of the profile's own records or, where it has none, of the first
    machine kind's that has them (the counts are the methods', the same on every machine whose engine computes the
    same bits, and statistics of the same law elsewhere and at T = 1); None where none is committed."""
    for p in (profile, *(on_machine(profile, kind) for kind in machines(profile))):
        if (df := current(results_path(FRONTIER, p), p)) is not None:
            return ft.frontier_points(df)
    return None


def own_numbers(claim: str, points: pd.DataFrame) -> str:
    """A tree claim's verdict in the methods' own numbers, with τ_A / τ_B at equal nodes per frontier workload
    (Figure 6's: δ / τ at TALON's budget); "–" for a claim that is not about trees or has no frontier."""
    if claim == FIGURE6:
        row = ft.figure6_row(points)
        return "–" if row["own verdict"] == "–" else f"{row['own verdict']} ({row['own numbers']})"
    if claim not in OWN_NUMBERS:
        return "–"
    ratios = ft.own_ratios(points, *OWN_NUMBERS[claim])
    if not ratios:
        return "–"
    per = "; ".join(f"{workload_labels()[ws]} {r:.2f}" for ws, (r, _) in ratios.items())
    return f"{ft.own_verdict([r for r, _ in ratios.values()])} ({per})"


def paper_ratio(a: str, b: str) -> str:
    """The paper's Table 1 throughput of method ``a`` over ``b`` on each workload it reports (WikiText-2 / PG-19;
    data/paper_reported.json)."""
    t1 = tables.reported()["table1_throughput_tokens_per_s"]
    ka, kb = registry.REGISTRY[a].study.reported, registry.REGISTRY[b].study.reported
    return " / ".join(f"{t1[ds][ka]['mean'] / t1[ds][kb]['mean']:.2f}" for ds in t1)


def claims(profile) -> dict[str, list[dict]]:
    """The scorecard's rows by claim family, in the README's order; a family none of whose runs is logged for the
    current cells is left out."""
    root = REPO / "results" / profile.name
    main, dt = current(root / "main.json", profile), registry.DYNATREE

    def versus(b: str, claim: str) -> list[dict]:
        return [] if main is None else [comparison(main, dt, b, claim, paper_ratio(dt, b))]

    families = {
        "Exactness": ([] if main is None else [exactness(main)]) + authors_code_row(root / "authors_code.json"),
        "Speedup over AR": versus(registry.AR, "DynaTree is faster than AR"),
        "DynaTree against linear drafting and the fixed tree": versus(registry.LINEAR, DT_LINEAR)
                                                               + versus(registry.FIXED_TREE, DT_FIXED),
        "The ablation (the paper's Table 4)": ablation_rows(root / "ablation.json", profile),
        "Memory (the paper's Table 5)": memory_row(root / "memory.json", profile),
        "Sampling": sampling_row(root / "sampling.json", profile),
        "Peers": peers_row(root / "peers.json", profile) + vllm_row(root / "vllm.json", profile),
        TALON_FAMILY: talon_rows(root / "talon.json", profile)}
    families = {name: rows for name, rows in families.items() if rows}
    if families and (points := committed_frontier(profile)) is not None:
        for row in (r for rows in families.values() for r in rows):
            row["own numbers"] = own_numbers(row["claim"], points)
    return families


def table(rows: list[dict]) -> pd.DataFrame:
    """Rows as a table indexed by claim, without a column that no row fills."""
    card = pd.DataFrame(rows).set_index("claim").fillna("–")
    return card.loc[:, (card != "–").any()]


def scorecard(profile) -> pd.DataFrame:
    """Every claim's row in one table."""
    return table([row for rows in claims(profile).values() for row in rows])


def finding(family: str, rows: list[dict]) -> str:
    """One sentence for a claim family: each claim, its verdict and the measured cells that verdict rests on (and
    the verdict in the methods' own counts where a tree claim has one), as the scorecard shows them."""
    return wrap(f"- **{family}:** " + "; ".join(clause(row) for row in rows) + ".", indent="  ")


def clause(row: dict) -> str:
    """'claim: **verdict** (workload: cell; ...)', then the own counts' verdict where there is one."""
    said = SAYS.get(row["claim"], row["claim"])
    first = said.split(" ", 1)[0]
    if first[1:] == first[1:].lower():  # a sentence's capital, not a name's ("DynaTree", "TALON", "AR" keep theirs)
        said = said[0].lower() + said[1:]
    cells = "; ".join(f"{name}: {row[name]}" for name in workload_labels().values() if row.get(name, "–") != "–")
    text = f"{said}: **{row['verdict']}**" + (f" ({cells})" if cells else "")
    if (own := row.get("own numbers", "–")) != "–":
        word, _, numbers = own.partition(" ")
        text += f"; counted instead of timed, **{word}** {numbers}"
    return text


def findings(families: dict[str, list[dict]]) -> str:
    """The README's findings: a lead line, then one sentence per claim family (``finding``)."""
    if not families:
        return "No claim's run is logged for the current cells yet (`./run_all.sh --rerun` measures them).\n"
    lead = ("What the committed runs show, claim by claim: each verdict and the numbers it rests on, as in the "
            "scorecard below (ratios per replicate, r1 / r2; `~`: the 95% interval includes 1; "
            f"[how to read them]({DOC})).")
    return wrap(lead) + "\n\n" + "\n".join(finding(name, rows) for name, rows in families.items()) + "\n"


def wrap(text: str, indent: str = "") -> str:
    """A paragraph at the README's line width (Markdown joins the lines again), never broken inside `code`."""
    kept = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", "\0"), text)
    return textwrap.fill(kept, width=120, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False).replace("\0", " ")


def scorecard_markdown(profile, families: dict[str, list[dict]]) -> str:
    """The scorecard's block: the paper's claims, TALON's in a table of their own (its workloads), one line that
    links how to read them."""
    paper = [row for name, rows in families.items() if name != TALON_FAMILY for row in rows]
    md = tables.to_markdown(table(paper)) if paper else ""
    if talon := families.get(TALON_FAMILY):
        md += ("\nTALON's claims, on its workloads with our EAGLE-3 head drafting alone (notebook 14):\n\n"
               + tables.to_markdown(table(talon)))
    how = (f"Ratios of mean throughputs per replicate (r1 / r2; `~`: the 95% interval includes 1), from "
           f"`results/{profile.name}/` by `python -m dynatree_lib.reporting.scorecard {profile.name}`. How to read the "
           f"columns: [{DOC}]({DOC}); the verdict rule: [{DOC}#verdicts]({DOC}#verdicts).")
    md += "\n" + wrap(how) + "\n"
    if current(REPO / "results" / profile.name / "main.json", profile) is None:
        md += (f"\nThe main table's claims (exactness, DynaTree against AR, linear and the fixed tree) get their rows "
               f"once `results/{profile.name}/main.json` holds a run of the current cells (`./run_all.sh --rerun`).\n")
    return md


def replace(text: str, mark: re.Pattern, name: str, block: str) -> str:
    """``text`` with ``block`` between its ``<!-- name -->`` markers (refused where it has none)."""
    if not mark.search(text):
        raise ValueError(f"the README has no <!-- {name} --> ... <!-- /{name} --> markers")
    return mark.sub(lambda _: f"<!-- {name} -->\n{block}<!-- /{name} -->", text)


def write(profile, readme: Path = REPO / "README.md") -> str:
    """Rewrite the findings and the scorecard between the README's markers; returns the scorecard's Markdown."""
    families = claims(profile)
    md = scorecard_markdown(profile, families)
    text = replace(readme.read_text(), FINDINGS_MARK, "findings", findings(families))
    readme.write_text(replace(text, MARK, "scorecard", md))
    return md


if __name__ == "__main__":
    from ..harness.setup.profiles import get_profile

    print(write(get_profile(sys.argv[1] if len(sys.argv) > 1 else "cpu")))
