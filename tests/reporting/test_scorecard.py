"""The README's scorecard and findings: every claim has a row, each verdict by the one rule, cells that show an
interval only where the evidence suffices, findings sentences made from the rows, and the committed README's blocks
are the ones the committed JSON generates."""
import copy
import json
import shutil

import pytest

from dynatree_lib.harness.setup.paths import REPO
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.reporting import scorecard
from dynatree_lib.reporting.verdict import COUNTS, TIMING, VERDICTS, Interval, Measured


def test_a_cell_shows_its_interval_only_with_enough_evidence():
    iv = Interval(1.25, 1.1, 1.4)
    enough = Measured(iv, (iv, iv), 24)
    assert scorecard.cell(enough, TIMING) == "1.25 [1.10, 1.40]"
    few = Measured(iv, (iv, Interval(1.02, 0.95, 1.1)), 4)
    assert scorecard.cell(few, TIMING) == "1.25 / 1.02 (4 prompts of 20)"
    assert scorecard.cell(Measured(iv, (iv,), 12), COUNTS, scorecard.change_text) == "+25.0% [+10.0%, +40.0%]"


def test_a_row_names_its_draft_and_machine():
    import pandas as pd

    df = pd.DataFrame([{"method": "dynatree", "draft": "embedded:draft", "lookup": True, "machine": "amd-avx512bf16",
                        "impl": "ours"},
                       {"method": "talon", "draft": "eagle3:weights/smollm2-eagle3", "lookup": False,
                        "machine": "intel-amx", "impl": "ours"},
                       {"method": "vllm", "draft": "eagle3:weights/smollm2-eagle3", "lookup": True,
                        "machine": "intel-amx", "impl": "vllm"}])
    assert scorecard.rests_on(df) == ("EAGLE-3 head alone / draft model + lookup / vllm · amd-avx512bf16, "
                                      "intel-amx")  # another engine's row: named by its engine
    assert scorecard.rests_on(df, counts=True).endswith("· counts")


def test_no_records_while_the_tuning_the_cells_come_from_is_missing(tmp_path):
    """A main.json next to no tuning.json: the current cells are unknown, so the claim reads not measured (not an
    old run's number, not a traceback)."""
    root = tmp_path / "cpu"
    root.mkdir()
    shutil.copy(REPO / "results" / "cpu" / "costs.json", root / "costs.json")
    (root / "main.json").write_text(json.dumps({"schema": 2, "records": []}))
    assert scorecard.current(root / "main.json", get_profile("cpu")) is None
    assert scorecard.current(root / "missing.json", get_profile("cpu")) is None
    assert scorecard.versus(None, scorecard.VS_AR, "dynatree", "ar")["verdict"] == "not measured"


def test_readme_scorecard_is_generated_from_the_committed_json(tmp_path):
    readme = tmp_path / "README.md"
    shutil.copy(REPO / "README.md", readme)
    scorecard.write(get_profile("cpu"), readme)
    assert readme.read_text() == (REPO / "README.md").read_text(), \
        "README's scorecard is stale: run `python -m dynatree_lib.reporting.scorecard cpu`"


def test_memory_claims_compare_footprints_and_refuse_absolute_peaks(tmp_path):
    """Table 5's two claims come from footprints (DynaTree over AR, over linear) against their bounds, with the
    paper's ratio beside them; records that hold only absolute peaks (the earlier measurement) are not measured."""
    prof = get_profile("smoke")
    claims = {"ar": (scorecard.MEMORY_AR, 1.10), "linear": (scorecard.MEMORY_LINEAR, 1.02)}
    rows = scorecard.memory_rows(REPO / "results" / "smoke" / "memory.json", prof, claims)
    assert [r["paper"] for r in rows] == ["+3.3%", "-0.1%"] and all(r["verdict"] in VERDICTS for r in rows)
    data = json.loads((REPO / "results" / "smoke" / "memory.json").read_text())
    for rec in data["records"]:
        for row in rec["rows"]:
            row.pop("footprint_mb")
        rec["aggregate"].pop("footprint_mb")
    (tmp_path / "memory.json").write_text(json.dumps(data))
    assert {r["verdict"] for r in scorecard.memory_rows(tmp_path / "memory.json", prof, claims)} == {"not measured"}


def test_talon_claims_come_from_the_talon_records():
    rows = scorecard.talon_rows(REPO / "results" / "cpu" / "talon.json", get_profile("cpu"), scorecard.TALON_CLAIMS)
    assert [r["id"] for r in rows] == ["talon_t0", "talon_t1"] and all(r["verdict"] in VERDICTS for r in rows)
    assert rows[0]["paper"].endswith(f"({scorecard.tables.talon_reported()['reference_model']})")
    missing = scorecard.talon_rows(REPO / "results" / "cpu" / "nowhere.json", get_profile("cpu"),
                                   scorecard.TALON_CLAIMS)
    assert [r["verdict"] for r in missing] == ["not measured"] * 2


@pytest.fixture(scope="module")
def families():
    return scorecard.claims(get_profile("cpu"))


def test_every_claim_has_one_row_and_one_of_the_five_words(families):
    rows = [r for rs in families.values() for r in rs]
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) and all(r["verdict"] in VERDICTS for r in rows)
    assert {"dynatree_vs_fixed", "dynatree_vs_fixed_network", "dynatree_vs_fixed_tau"} <= set(ids)


def block(text: str, name: str) -> str:
    """What the README holds between its ``<!-- name -->`` markers."""
    return text.split(f"<!-- {name} -->\n", 1)[1].split(f"<!-- /{name} -->", 1)[0]


def test_readme_findings_are_the_generated_sentences(families):
    readme = (REPO / "README.md").read_text()
    assert block(readme, "findings") == scorecard.findings(families), \
        "README's findings are stale: run `python -m dynatree_lib.reporting.scorecard cpu`"
    assert readme.index("<!-- findings -->") < readme.index("<!-- scorecard -->")  # what it found comes first


def test_a_changed_verdict_changes_its_sentence_and_no_other(families):
    changed = copy.deepcopy(families)
    row = changed["Speedup over AR"][0]
    row["verdict"] = "refuted" if row["verdict"] != "refuted" else "partly"
    before = scorecard.findings(families).split("\n- ")
    after = scorecard.findings(changed).split("\n- ")
    differ = [(b, a) for b, a in zip(before, after) if b != a]
    assert len(differ) == 1 and differ[0][1].startswith("**Speedup over AR:**")
    assert f"**{row['verdict']}** <!-- verdict: {row['id']} -->" in differ[0][1].replace("\n  ", " ")


def test_a_finding_states_the_verdict_the_cells_and_what_they_rest_on():
    row = {"id": "dynatree_vs_ar", "claim": "DynaTree is faster than AR", "paper": "1.65 / 1.70",
           "WikiText-2": "1.84 [1.70, 1.99]", "PG-19": "–", "Spec-Bench": "1.21 [1.10, 1.33]",
           "rests on": "draft model + lookup · amd-avx512bf16", "verdict": "reproduces"}
    line = scorecard.finding("Speedup over AR", [row])
    assert line.replace("\n  ", " ") == (
        "- **Speedup over AR:** DynaTree is faster than AR: **reproduces** <!-- verdict: dynatree_vs_ar --> "
        "(WikiText-2: 1.84 [1.70, 1.99]; Spec-Bench: 1.21 [1.10, 1.33]; draft model + lookup · amd-avx512bf16).")
    history = {**row, "id": scorecard.ABLATION[1].id}
    assert scorecard.clause(history).startswith("history adaptation adds more on top")


def test_the_scorecard_keeps_every_claim_and_number(families):
    """Two tables (the paper's claims on its workloads, TALON's on its own) hold every row and every cell, and no
    column that no row of that table fills."""
    md = block((REPO / "README.md").read_text(), "scorecard")
    for rows in families.values():
        for row in rows:
            line = next(x for x in md.splitlines() if x.startswith(f"| {row['claim']} |"))
            shown = {k: v for k, v in row.items() if k not in ("claim", "id", "source") and v != "–"}
            assert all(f"| {v} |" in line for v in shown.values()), row["claim"]
    paper, talon = [t for t in md.split("\n\n") if t.startswith("| claim |")]
    assert "UltraChat eval" not in paper.splitlines()[0] and "PG-19" not in talon.splitlines()[0]
    assert scorecard.RULE in md
