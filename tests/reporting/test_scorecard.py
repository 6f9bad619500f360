"""The README's scorecard and findings: verdicts by their stated rule, no row for a claim whose cells are not known,
findings sentences made from the verdicts and cells, and the committed README's blocks are the ones the committed
JSON generates."""
import copy
import json
import shutil

import pytest

from dynatree_lib import methods as registry
from dynatree_lib.harness.setup.paths import REPO
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.reporting import scorecard
from dynatree_lib.reporting.verdict import VERDICTS, verdict


@pytest.mark.parametrize("per_ws, expected", [
    ({"a": [(1.3, 1.1, 1.5), (1.2, 1.05, 1.4)], "b": [(1.1, 1.01, 1.2)]}, "reproduces"),
    ({"a": [(1.3, 1.1, 1.5), (1.25, 1.1, 1.4)], "b": [(1.2, 0.9, 1.4)]}, "partly"),  # b: one replicate ties
    ({"a": [(1.3, 1.1, 1.5)], "b": [(0.8, 0.7, 0.9)]}, "partly"),                 # b the other way
    ({"a": [(0.88, 0.81, 0.98)], "b": [(0.92, 0.84, 1.04)], "c": [(0.95, 0.87, 1.06)]}, "no"),  # all below 1
    ({"a": [(0.97, 0.9, 1.05)], "b": [(0.98, 0.9, 1.06)]}, "no"),                  # all below 1, all tie
    ({"a": [(1.02, 0.95, 1.1), (0.99, 0.9, 1.05)], "b": [(1.01, 0.97, 1.06)]}, "tie"),
    ({"a": [(1.3, 1.1, 1.5), (1.02, 0.95, 1.1)], "b": [(0.99, 0.95, 1.04)]}, "no"),  # no workload agrees
    ({"a": [(1.3, 1.1, 1.5), (1.2, 1.05, 1.4)], "b": []}, "reproduces"),          # b not measured
    ({"a": []}, "no"),
    ({}, "no"),
])
def test_verdict_follows_the_documented_rule(per_ws, expected):
    assert verdict(per_ws) == expected and expected in VERDICTS


def test_cell_marks_intervals_that_include_one():
    assert scorecard._cell([(1.25, 1.1, 1.4), (1.02, 0.95, 1.1)]) == "1.25 / 1.02~"


def test_no_row_while_the_tuning_the_cells_come_from_is_missing(tmp_path):
    """A main.json next to no tuning.json: the current cells are unknown, so the claim gets no row (not an old
    run's number, not a traceback)."""
    root = tmp_path / "cpu"
    root.mkdir()
    shutil.copy(REPO / "results" / "cpu" / "costs.json", root / "costs.json")
    (root / "main.json").write_text(json.dumps({"schema": 2, "records": []}))
    assert scorecard.current(root / "main.json", get_profile("cpu")) is None
    assert scorecard.current(root / "missing.json", get_profile("cpu")) is None


def test_no_row_while_the_costs_the_extension_is_made_from_are_missing(tmp_path):
    root = tmp_path / "cpu"
    root.mkdir()
    shutil.copy(REPO / "results" / "cpu" / "tuning.json", root / "tuning.json")
    (root / "main.json").write_text(json.dumps({"schema": 2, "records": []}))
    assert scorecard.current(root / "main.json", get_profile("cpu")) is None


def test_readme_scorecard_is_generated_from_the_committed_json(tmp_path):
    readme = tmp_path / "README.md"
    shutil.copy(REPO / "README.md", readme)
    scorecard.write(get_profile("cpu"), readme)
    assert readme.read_text() == (REPO / "README.md").read_text(), \
        "README's scorecard is stale: run `python -m dynatree_lib.reporting.scorecard cpu`"


def test_memory_claims_compare_footprints_and_skip_absolute_peaks(tmp_path):
    """Table 5's two claims come from footprints (DynaTree over AR, over linear), with the paper's ratio beside
    them; records that hold only absolute peaks (the earlier measurement) give no row."""
    prof = get_profile("smoke")
    rows = scorecard.memory_row(REPO / "results" / "smoke" / "memory.json", prof)
    assert [r["paper"] for r in rows] == ["+3.3%", "-0.1%"] and all(r["verdict"] for r in rows)
    data = json.loads((REPO / "results" / "smoke" / "memory.json").read_text())
    for rec in data["records"]:
        for row in rec["rows"]:
            row.pop("footprint_mb")
        rec["aggregate"].pop("footprint_mb")
    (tmp_path / "memory.json").write_text(json.dumps(data))
    assert scorecard.memory_row(tmp_path / "memory.json", prof) == []


def test_talon_claims_come_from_the_talon_records():
    """TALON's three claims (notebook 14's records on the head alone): both speedup claims by the one verdict rule,
    the paper column from TALON's transcribed tables, Figure 6 read from the draft forwards per committed token."""
    rows = scorecard.talon_rows(REPO / "results" / "cpu" / "talon.json", get_profile("cpu"))
    assert [r["claim"][:5] for r in rows] == ["TALON", "... a", "TALON"] and all(r["verdict"] in VERDICTS for r in rows)
    assert rows[0]["paper"].endswith(f"({scorecard.tables.talon_reported()['reference_model']})")
    assert scorecard.talon_rows(REPO / "results" / "cpu" / "nowhere.json", get_profile("cpu")) == []


def test_the_figure_6_claim_needs_fewer_forwards_per_token_on_every_workload():
    import pandas as pd

    def rec(ws, m, delta, tau):
        return {"dataset": ws, "method": m, "replicate": 0, "draft_forwards_per_iter": delta, "L_bar": tau}

    both = [rec("spec_bench", registry.TALON, 2.0, 2.0), rec("spec_bench", registry.EAGLE3_TREE, 8.0, 2.0)]
    assert scorecard.delta_tau_row(pd.DataFrame(both))["verdict"] == "reproduces"
    worse = [rec("humaneval", registry.TALON, 8.0, 1.0), rec("humaneval", registry.EAGLE3_TREE, 8.0, 2.0)]
    row = scorecard.delta_tau_row(pd.DataFrame(both + worse))
    assert row["verdict"] == "partly" and row["HumanEval"] == "8.00 vs 4.00"


@pytest.fixture(scope="module")
def families():
    return scorecard.claims(get_profile("cpu"))


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
    row["verdict"] = "tie" if row["verdict"] != "tie" else "no"
    before = scorecard.findings(families).split("\n- ")
    after = scorecard.findings(changed).split("\n- ")
    differ = [(b, a) for b, a in zip(before, after) if b != a]
    assert len(differ) == 1 and differ[0][1].startswith("**Speedup over AR:**")
    assert f"**{row['verdict']}**" in differ[0][1]


def test_a_finding_states_the_verdict_and_the_cells_it_rests_on():
    row = {"claim": "DynaTree is faster than AR", "paper": "1.65 / 1.70", "WikiText-2": "1.84 / 1.80~",
           "PG-19": "–", "Spec-Bench": "1.21 / 1.22", "verdict": "partly", "own numbers": "–"}
    line = scorecard.finding("Speedup over AR", [row])
    assert line == ("- **Speedup over AR:** DynaTree is faster than AR: **partly** (WikiText-2: 1.84 / 1.80~; "
                    "Spec-Bench: 1.21 / 1.22).")  # no paper number, no unmeasured workload
    tree = {**row, "claim": scorecard.DT_FIXED, "own numbers": "no (Spec-Bench 0.95; WikiText-2 0.97)"}
    assert "counted instead of timed, **no** (Spec-Bench 0.95; WikiText-2 0.97)" in scorecard.clause(tree)
    assert scorecard.clause({**row, "claim": scorecard.HISTORY}).startswith("history adaptation adds more on top")
    assert scorecard.findings({}).startswith("No claim's run is logged")


def test_the_scorecard_keeps_every_claim_and_number(families):
    """Two tables (the paper's claims on its workloads, TALON's on its own) hold every row and every cell, and no
    column that no row of that table fills."""
    md = block((REPO / "README.md").read_text(), "scorecard")
    for name, rows in families.items():
        for row in rows:
            line = next(x for x in md.splitlines() if x.startswith(f"| {row['claim']} |"))
            assert all(f"| {v} |" in line for k, v in row.items() if k != "claim" and v != "–"), row["claim"]
    paper, talon = [t for t in md.split("\n\n") if t.startswith("| claim |")]
    assert "HumanEval" not in paper.splitlines()[0] and "PG-19" not in talon.splitlines()[0]
    assert "docs/scorecard.md#verdicts" in md
