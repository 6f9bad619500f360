"""Tables and the scorecard rendered from records with known numbers: every row that should be there is, with
the value its records imply; the committed peers records render on a machine without llama.cpp; and rendered
files link relative to the repository."""
import json

import pandas as pd
import pytest

from dynatree_lib.harness.peers import llamacpp as peers
from dynatree_lib.harness.setup import workloads
from dynatree_lib.harness.measure.metrics import aggregate
from dynatree_lib.harness.setup.paths import REPO
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.reporting import scorecard, tables

N = 24  # prompts per synthetic record: enough for a verdict in wall time


def ar_tps(ds: str) -> list[float]:
    """AR's throughput per prompt: prompts differ (a paired interval must see past that) and workloads differ."""
    return [100.0 + 10 * i + 5 * len(ds) for i in range(N)]


def record(ds: str, method: str, label: str, ratio: float, *, replicate: int = 0, lookup: bool = True,
           engine_tags: dict | None = None, categories: bool = False, jitter: float = 0.01) -> dict:
    """A main-table record whose throughput is ``ratio`` times AR's on every prompt, up to +-``jitter``."""
    rows = []
    for i, base in enumerate(ar_tps(ds)):
        tps = base * ratio * (1 + jitter * (-1) ** i)
        row = {"prompt_id": f"{ds}:{i}", "tps": tps, "tokens": 64, "iterations": 64 if method == "ar" else 16,
               "L_bar": 1.0 if method == "ar" else 4.0, "equals_ar": True}
        if categories:
            row["category"] = ("qa", "math_reasoning")[i % 2]
        rows.append(row)
    tags = {"role": "timed", "replicate": replicate, **({} if lookup else {"control": True}), **(engine_tags or {})}
    variant = next((p.variant for p in peers.PEERS if p.label == label), "main" if lookup else "network_alone")
    return {"key": f"{ds}-{method}-{label}-{replicate}", "dataset": ds, "method": method, "variant": variant,
            "label": label,
            "config": {}, "T": 64, "L_max": 100, "dtype": "bfloat16", "tags": tags, "temperature": 0.0,
            "lookup": lookup, "rows": rows, "aggregate": aggregate(rows)}


def load(tmp_path, recs: list[dict]) -> pd.DataFrame:
    peers.register()  # llama.cpp's records name its modes
    path = tmp_path / "main.json"
    path.write_text(json.dumps({"schema": 2, "records": recs}))
    return tables.load(path)


def main_records(ratios: dict[str, dict[str, float]], replicates: int = 2) -> list[dict]:
    """AR plus each ``label: {workload: ratio}``, in every replicate."""
    methods = {"Linear Spec": "linear", "Fixed Tree": "fixed_tree", "DynaTree": "dynatree"}
    recs = []
    for rep in range(replicates):
        for ds in ("wikitext2", "pg19", "spec_bench"):
            recs.append(record(ds, "ar", "AR", 1.0, replicate=rep, categories=ds == "spec_bench"))
            recs += [record(ds, methods[lab], lab, r[ds], replicate=rep, categories=ds == "spec_bench")
                     for lab, r in ratios.items() if ds in r]
    return recs


EVERYWHERE = {"wikitext2": 1.5, "pg19": 1.4, "spec_bench": 1.2}


def test_table1_shows_every_method_with_the_speedup_its_records_imply(tmp_path):
    df = load(tmp_path, main_records({"Linear Spec": {"wikitext2": 1.2, "pg19": 1.1, "spec_bench": 1.05},
                                      "DynaTree": EVERYWHERE}))
    t = tables.table1(df)
    assert list(t.index) == ["AR", "Linear Spec", "DynaTree"]
    for ds in EVERYWHERE:  # the workloads the records hold
        name = workloads.label(ds)
        assert t.loc["DynaTree", (name, "speedup r1 [95% CI]")].startswith(f"{EVERYWHERE[ds]:.2f}×")
        assert t.loc["DynaTree", (name, "speedup r2 [95% CI]")].startswith(f"{EVERYWHERE[ds]:.2f}×")
        assert t.loc["DynaTree", (name, "replicates agree")] == "yes"
        assert t.loc["DynaTree", (name, "= AR")] == f"{N}/{N}"
        assert t.loc["AR", (name, "speedup r1 [95% CI]")] == "–"
    assert t.loc["Linear Spec", ("PG-19", "speedup r1 [95% CI]")].startswith("1.10×")


def test_spec_bench_table_reports_each_category(tmp_path):
    df = load(tmp_path, main_records({"DynaTree": EVERYWHERE}, replicates=1))
    t = tables.spec_bench_table(df)
    assert list(t.index) == ["AR", "DynaTree"]
    for cat in ("QA", "Math reasoning"):
        assert t.loc["DynaTree", (cat, "speedup")] == "1.20×" and t.loc["DynaTree", (cat, "τ")] == "4.00"
    assert t.loc["DynaTree", ("Overall", "speedup")] == "1.20×"


def test_controls_table_pairs_each_method_with_its_network_alone(tmp_path):
    recs = main_records({"DynaTree": EVERYWHERE}, replicates=1)
    recs.append(record("wikitext2", "dynatree", "DynaTree · network alone", 1.25, lookup=False))
    t = tables.controls_table(load(tmp_path, recs))
    row = t.loc[("WikiText-2", "DynaTree")]
    assert (row["network alone"], row["network + lookup"]) == ("1.25×", "1.50×")
    assert row["lookup's share of the gain"] == "50%"  # (1.5 - 1.25) / (1.5 - 1)
    assert len(t) == 1


def peer_records() -> list[dict]:
    recs = []
    for rep in range(2):
        for ds in ("wikitext2", "spec_bench"):
            recs.append(record(ds, "ar", "AR", 1.0, replicate=rep))
            recs.append(record(ds, "dynatree", "DynaTree", 1.8, replicate=rep))
            recs.append(record(ds, "llamacpp", "llama.cpp AR (BF16)", 0.7, replicate=rep, engine_tags={"own_ar": True}))
            recs.append(record(ds, "llamacpp", "llama.cpp ngram-mod (n=8)", 1.2, replicate=rep,
                               engine_tags={"own_ar": False}))
    return recs


def test_peers_tables_show_every_mode_over_both_ars(tmp_path):
    df = load(tmp_path, peer_records())
    t = tables.peers_table(df)
    assert list(t.index) == ["AR", "DynaTree", "llama.cpp AR (BF16)", "llama.cpp ngram-mod (n=8)"]
    assert t.loc["llama.cpp ngram-mod (n=8)", ("WikiText-2", "over our AR [95% CI]")].startswith("1.20×")
    assert t.loc["llama.cpp ngram-mod (n=8)", ("WikiText-2", "over llama.cpp AR")] == f"{1.2 / 0.7:.2f}×"
    best = tables.best_vs_peer(df)
    assert len(best) == 4 and set(best["llama.cpp"]) == {"llama.cpp ngram-mod (n=8)"}
    assert set(best["throughput ratio"]) == {f"{1.8 / 1.2:.2f}"}


def test_the_committed_peers_records_render_without_llamacpp(monkeypatch):
    """What a fresh machine renders: every committed peers record, whether llama.cpp is built or not."""
    monkeypatch.setattr(peers, "available", lambda: False)
    prof = get_profile("cpu")
    path = REPO / "results" / "cpu" / "peers.json"
    df = tables.load(path, prof)
    assert len(df) == len(json.loads(path.read_text())["records"])
    assert sum(df.method == "llamacpp") and set(tables.peers_table(df).index) >= {peer.label for peer in peers.PEERS}
    row = scorecard.peers_rows(REPO / "results" / "cpu", prof, scorecard.PEERS)[0]
    assert row["id"] == "peers_llamacpp" and row["verdict"] in scorecard.VERDICTS


@pytest.mark.parametrize("ratios, expected", [
    (EVERYWHERE, "reproduces"),
    ({"wikitext2": 1.5, "pg19": 1.0, "spec_bench": 1.0}, "partly"),
    ({"wikitext2": 0.9, "pg19": 0.95, "spec_bench": 0.8}, "refuted"),
    ({"wikitext2": 1.5, "pg19": 0.9, "spec_bench": 1.0}, "inconclusive"),
])
def test_scorecard_rows_follow_their_numbers(tmp_path, ratios, expected):
    df = load(tmp_path, main_records({"DynaTree": ratios}))
    row = scorecard.versus(df, scorecard.VS_AR, "dynatree", "ar")
    assert row["verdict"] == expected
    assert row["WikiText-2"].startswith(f"{ratios['wikitext2']:.2f} [")


def test_noise_everywhere_reads_inconclusive(tmp_path):
    df = load(tmp_path, [record(ds, m, lab, 1.0, replicate=rep, jitter=0.2)
                         for rep in range(2) for ds in ("wikitext2", "pg19")
                         for m, lab in (("ar", "AR"), ("dynatree", "DynaTree"))])
    row = scorecard.versus(df, scorecard.VS_AR, "dynatree", "ar")
    assert row["verdict"] == "inconclusive" and row["WikiText-2"].startswith("1.00 [")


def test_one_replicate_is_not_measured_and_shows_no_interval(tmp_path):
    df = load(tmp_path, main_records({"DynaTree": EVERYWHERE}, replicates=1))
    row = scorecard.versus(df, scorecard.VS_AR, "dynatree", "ar")
    assert row["verdict"] == "not measured" and row["WikiText-2"].endswith("(1 replicate of 2)")
    assert "[" not in row["WikiText-2"]


def test_the_sampling_row_is_refuted_when_every_workload_is_slower(tmp_path, monkeypatch):
    recs = []
    for rep in range(2):
        for ds, r in (("wikitext2", 0.88), ("pg19", 0.92), ("spec_bench", 0.95)):
            for m, lab, ratio in (("ar", "AR", 1.0), ("dynatree", "DynaTree", r)):
                rec = record(ds, m, lab, ratio, jitter=0.05, replicate=rep)
                recs.append({**rec, "temperature": 1.0, "tags": {**rec["tags"], "temperature": 1.0}})
    path = tmp_path / "sampling.json"
    path.write_text(json.dumps({"schema": 2, "records": recs}))
    monkeypatch.setattr(scorecard, "current", lambda p, prof: tables.load(p))
    row = scorecard.sampling_row(path, None, scorecard.SAMPLING)
    assert row["verdict"] == "refuted" and row["WikiText-2"].startswith("0.88 [")


@pytest.mark.parametrize("profile", ["cpu", "smoke"])
def test_results_pages_link_relative_to_the_repository(profile):
    text = (REPO / ("RESULTS.md" if profile == "cpu" else f"figures/{profile}/RESULTS.md")).read_text()
    assert str(REPO) not in text and "/work/" not in text and "](/" not in text
