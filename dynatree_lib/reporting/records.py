"""Records and their statistics: an experiment's JSON records as a DataFrame (one row per record, labels from the
registry), speedups over AR recomputed from the per-prompt rows with paired bootstrap intervals, the rows of one role
or replicate in table order, and the paper's own numbers (``data/paper_reported.json``).

A row is identified by its method and variant (``row``: ``<method>:<variant>``); ``label`` is what tables show,
computed from the registry (``harness.setup.variants.label``), never read back to select a row.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import torch

from .. import methods as registry
from ..harness.setup import variants
from ..harness.setup.data import REPO_DATA
from ..harness.experiments.catalog import cell_key, get
from ..harness.measure.load import is_busy
from ..harness.setup.machine import kind_of_record
from .formatting import BUSY_MARK, DIRTY_MARK
from ..harness.setup.weights import weights_info


def records(path: str | Path, profile=None, verbose: bool = True) -> list[dict]:
    """The records of an experiment file that belong to ``profile``'s current cells (all if None).

    A file can hold runs of other settings (fewer prompts, another precision); those are skipped, and
    said so, so a table never mixes two runs of one cell."""
    recs = json.loads(Path(path).read_text())["records"]
    if profile is None:
        return recs
    name = Path(path).stem
    profile = get(name).profile(profile)
    want = {cell_key(name, profile, c) for c in get(name).cells(profile, Path(path).parents[1])}
    keep = [r for r in recs if r["key"] in want]
    if verbose and len(keep) < len(recs):
        print(f"{Path(path).name}: skipped {len(recs) - len(keep)} record(s) of other settings "
              f"(kept the {len(keep)} of profile {profile.name!r})")
    if verbose:
        say_other_drafts(Path(path).name, keep, profile.models.draft)
    return keep


def say_other_drafts(name: str, recs: list[dict], default: str | None) -> None:
    """Say which records were measured with another draft than the one their reference (a record's ``draft``, else
    ``default``: the profile's) loads now (a rebuilt draft): the cell is the same, the numbers are the earlier
    draft's until the experiment is rerun."""
    other, now = {}, {}
    for r in recs:
        ref = r.get("draft") or default
        if ref not in now:
            now[ref] = weights_info(ref)
        w = r.get("weights", {}).get("draft")
        if w is not None and w != now[ref]:
            other.setdefault((w.get("sha256", str(w))[:12], ref), []).append(r)
    for (sha, ref), rs in other.items():
        print(f"{name}: {len(rs)} record(s) were measured with an earlier draft (sha256 {sha}...), not the one "
              f"{ref} loads now ({str(now[ref].get('sha256', now[ref]))[:12]}...); `--rerun` measures them again")


def row_id(method: str, variant: str, own_draft: str | None = None) -> str:
    """A table row's identity: its method and variant, and the draft of its own (``Cell.draft``: a Medusa or a
    Hydra head's kind, a draft model's reference; never its label)."""
    return f"{method}:{variant}" + (f":{own_draft}" if own_draft else "")


def load(path: str | Path, profile=None) -> pd.DataFrame:
    """One row per record: identifiers (``row``: method and variant; ``label``: what tables call it), tags,
    ``<metric>`` / ``<metric>_std`` means, equality counts, the per-prompt rows (``rows``), and the speedups
    (``add_speedup``)."""
    rows = []
    for r in records(path, profile):
        m = registry.REGISTRY.get(r["method"])
        tags = r.get("tags", {})
        row = {"dataset": r["dataset"], "method": r["method"], "variant": r["variant"],
               "row": row_id(r["method"], r["variant"], tags.get("heads") or tags.get("draft_model")),
               "label": variants.label(r["method"], r["variant"], r["config"], tags), "T": r["T"],
               "L_max": r["L_max"], "dtype": r.get("dtype"), "n": r["aggregate"]["n"],
               "equals_ar": r["aggregate"]["equals_ar"], "config": r["config"],
               "temperature": r.get("temperature", 0.0), "lookup": r.get("lookup", True),
               "replicate": tags.get("replicate", 0), "impl": m.impl if m else "ours",
               "max_divergence_gap": r["aggregate"].get("max_divergence_gap"),
               "bound_ms": bound_ms(r), "bound_ratios": bound_ratios(r), "rows": r["rows"],
               "tps_by_prompt": {row["prompt_id"]: row["tps"] for row in r["rows"] if "tps" in row},
               "mark": provenance_mark(r), "draft": r.get("draft"),
               "machine": kind_of_record(r.get("environment") or {}),
               "commit": (r.get("environment") or {}).get("git_commit"),
               **{f"tag_{k}": (tuple(v) if isinstance(v, list) else v) for k, v in tags.items()}}
        for k, v in r["aggregate"].items():
            if isinstance(v, dict):
                row[k], row[f"{k}_std"] = v["mean"], v["std"]
        rows.append(row)
    return add_speedup(pd.DataFrame(rows))


def provenance_mark(record: dict) -> str:
    """``DIRTY_MARK`` and/or ``BUSY_MARK`` where the record was measured on a dirty tree or a busy machine."""
    env = record.get("environment") or {}
    return (DIRTY_MARK if env.get("git_dirty") else "") + (BUSY_MARK if is_busy(record) else "")


def bound_ms(record: dict) -> float | None:
    """A record's bandwidth bound (ms per token): weight bytes over the read bandwidth probed after each of
    its generations (AR records), else over the probe taken when the models were loaded."""
    b = record.get("bound") or {}
    bw = record["aggregate"].get("read_bandwidth_gbs", {}).get("mean")
    if bw is None or "weight_bytes" not in b:
        return b.get("ms_per_token")
    return b["weight_bytes"] / bw / 1e6


STEADY = 0.10  # a generation's probes before and after it within 10% of each other: the bandwidth's phase held


def probes_agree(before: float, after: float) -> bool:
    """Whether two bandwidth probes around one measurement agree within ``STEADY``: the phase held through it."""
    return abs(before - after) <= STEADY * max(before, after)


def steady(row: dict) -> bool:
    """Whether an AR generation ran in one bandwidth phase (``probes_agree``; a row probed only after it counts as
    steady: nothing says otherwise)."""
    before = row.get("read_bandwidth_before_gbs")
    return before is None or probes_agree(before, row["read_bandwidth_gbs"])


def bound_ratios(record: dict) -> list[float] | None:
    """Each steady AR generation's TPOT over the bound from its own probes (``steady``: their mean; a row probed only
    after it: that probe), None where the rows carry no probes. A VM's read bandwidth can flip between phases within
    seconds, so a record's mean probe can describe no moment of the run, and a probe after a generation describes it
    only where the phase held through it: a generation and its own probes are the closer pair."""
    wb = (record.get("bound") or {}).get("weight_bytes")
    rows = record["rows"]
    if not wb or not rows or any(not r.get("read_bandwidth_gbs") for r in rows):
        return None
    gbs = [statistics.fmean([r["read_bandwidth_gbs"], r.get("read_bandwidth_before_gbs", r["read_bandwidth_gbs"])])
           for r in rows]
    return [r["tpot_ms"] / (wb / bw / 1e6) for r, bw in zip(rows, gbs) if steady(r)]


BOOTSTRAP = 2000  # resamples of the prompts for a confidence interval (seeded: tables are deterministic)


def ratio_ci(a: dict, b: dict, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(a) / mean(b) over the prompts both measured (``{prompt id:
    tps}``), resampling prompts in pairs: a prompt that is slow for one method is slow for the other, so the
    pairing keeps the prompts' spread out of the ratio. (nan, nan) with fewer than 2 common prompts."""
    ids = sorted(set(a) & set(b))
    if len(ids) < 2:
        return float("nan"), float("nan")
    x, y = torch.tensor([a[i] for i in ids]), torch.tensor([b[i] for i in ids])
    pick = torch.randint(len(ids), (BOOTSTRAP, len(ids)), generator=torch.Generator().manual_seed(seed))
    r = x[pick].mean(1) / y[pick].mean(1)
    lo, hi = r.quantile(torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=r.dtype)).tolist()
    return lo, hi


def paired_ratio(a: dict, b: dict) -> float:
    """mean(a) / mean(b) over the prompts both measured."""
    ids = set(a) & set(b)
    if not ids:
        return float("nan")
    return statistics.fmean(a[i] for i in ids) / statistics.fmean(b[i] for i in ids)


AR_KEY = ["dataset", "T", "L_max", "dtype", "temperature", "replicate"]


def paired(a: dict, b: dict) -> tuple[float, float, float, int]:
    """``paired_ratio`` of two ``{prompt id: tps}``, its ``ratio_ci`` and how many prompts both measured."""
    return (paired_ratio(a, b), *ratio_ci(a, b), len(set(a) & set(b)))


def main_ratio(df: pd.DataFrame, a: str, b: str, *, ws: str, rep: int,
               lookup: bool | None = None) -> tuple[float, float, float] | None:
    """(ratio, lo, hi) of method ``a``'s throughput over ``b``'s, their main rows, on one workload in one replicate
    (``paired``); ``lookup``: only the rows drafting with the lookup (True) or without it (False), None: either.
    None where either row is missing."""
    sub = df[(df.dataset == ws) & (df.replicate == rep)]
    if lookup is not None:
        sub = sub[sub.lookup == lookup]
    x, y = (sub[sub.row == row_id(m, variants.MAIN)] for m in (a, b))
    if x.empty or y.empty:
        return None
    return paired(x.iloc[0].tps_by_prompt, y.iloc[0].tps_by_prompt)[:3]


def add_speedup(df: pd.DataFrame) -> pd.DataFrame:
    """speedup = mean TPS / mean TPS of AR over the same prompts (same file, workload, T, L_max, precision,
    temperature and replicate; never taken from a log), with its 95% paired bootstrap interval over prompts
    (``speedup_lo``, ``speedup_hi``); rows of another engine also ``speedup_own`` over that engine's AR (a method
    registered as ``engine_ar``: HF's AR; or the row tagged ``own_ar``: llama.cpp's)."""
    df = df.copy()
    if df.empty:
        return df
    keys = list(df[AR_KEY].itertuples(index=False, name=None))
    ar = {k: t for k, t, m in zip(keys, df.tps_by_prompt, df.method) if m == registry.AR}
    own_ar = df.method.isin(registry.impl_ars()) | df.get("tag_own_ar", pd.Series(False, index=df.index)).fillna(False).astype(bool)
    own = {(e, k): t for k, t, e, o in zip(keys, df.tps_by_prompt, df.impl, own_ar) if o}
    df["speedup"] = [paired_ratio(t, ar[k]) if k in ar else float("nan") for t, k in zip(df.tps_by_prompt, keys)]
    ci = [ratio_ci(t, ar[k]) if k in ar else (float("nan"),) * 2 for t, k in zip(df.tps_by_prompt, keys)]
    df["speedup_lo"], df["speedup_hi"] = [c[0] for c in ci], [c[1] for c in ci]
    df["speedup_own"] = [paired_ratio(t, own[(e, k)]) if e != "ours" and (e, k) in own else float("nan")
                         for t, k, e in zip(df.tps_by_prompt, keys, df.impl)]
    if "mark" in df:  # a ratio carries its AR record's mark too
        ar_mark = {k: mk for k, mk, m in zip(keys, df["mark"], df.method) if m == registry.AR}
        df["speedup_mark"] = ["".join(sorted(set(mk + ar_mark.get(k, "")))) for mk, k in zip(df["mark"], keys)]
    return df


def order(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in the registry's method order, each method's variants after its main row by their declared rank
    (DynaTree with the paper's settings right after DynaTree, a control row right after its method)."""
    r = [variants.rank(m, v) for m, v in zip(df.method, df.variant)]
    return df.assign(_r=r).sort_values(["_r"], kind="stable").drop(columns="_r")


def shown(t: pd.DataFrame, df: pd.DataFrame, name: str = "Method") -> pd.DataFrame:
    """``t``, indexed by row identity (``row``), indexed instead by what tables call each row of ``df``."""
    labels = dict(zip(df.row, df.label))
    t.index = pd.Index([labels[i] for i in t.index], name=name)
    return t


def role(df: pd.DataFrame, name: str = "timed") -> pd.DataFrame:
    """The records of one role of the main run: "timed" (the timed precision) or "exact" (fp32)."""
    return df[df.get("tag_role", pd.Series("timed", index=df.index)).fillna("timed") == name]


def replicate(df: pd.DataFrame, r: int = 0) -> pd.DataFrame:
    return df[df.replicate == r]


def reported() -> dict:
    """The paper's numbers as transcribed in data/paper_reported.json (not our measurements). Always the
    repository's copy: ``$DYNATREE_DATA`` moves the evaluation text, never the reference numbers."""
    return json.loads((REPO_DATA / "paper_reported.json").read_text(encoding="utf-8"))
