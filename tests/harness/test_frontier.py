"""Notebook 15's budget frontier (issue 77): each method's budget knob (``Study.budget``) turns its own setting and
keeps it exact at every budget, the experiment's cells cover the methods, budgets, workloads and temperatures on the
head alone, and its tables (the frontier, the checked cost model, the projection, the two verdicts) build from
records; figures give rows drafted with other heads colours of their own."""
import dataclasses
import math

import pandas as pd
import pytest

from dynatree_lib import generate, methods as registry
from dynatree_lib.core.engines.static import StaticRunner
from dynatree_lib.harness.experiments import catalog as experiments
from dynatree_lib.harness.setup import variants
from dynatree_lib.harness.experiments.costs import head_curves, predict_ms_per_token
from dynatree_lib.harness.experiments.frontier import BUDGETS, FRONTIER, FRONTIER_WORKLOADS, frontier_methods
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.harness.setup.workloads import SPEC_BENCH
from dynatree_lib.reporting import frontier_tables as ft, plots

from ..conftest import prompts, reference

KNOBS = {registry.LINEAR: "K", registry.FIXED_TREE: "n_max", registry.DYNATREE: "n_max",
         registry.EAGLE3_TREE: "total_tokens", registry.OPT_TREE: "n", registry.TALON: "N"}


def test_the_frontier_covers_six_methods_of_their_own_and_not_the_extension():
    assert set(frontier_methods()) == set(KNOBS)
    assert registry.DYNATREE_COST not in frontier_methods()  # its cut prices trees on the machine's curves
    assert len(BUDGETS) >= 5 and min(BUDGETS) <= 4 and max(BUDGETS) >= 60


@pytest.mark.parametrize("method", sorted(KNOBS))
def test_a_budget_turns_only_the_methods_own_knob(method):
    p = get_profile("cpu")
    published = p.method(method, SPEC_BENCH)
    at = registry.REGISTRY[method].study.budget(published, 16)
    changed = {f.name for f in dataclasses.fields(published) if getattr(at, f.name) != getattr(published, f.name)}
    assert KNOBS[method] in changed and changed <= {KNOBS[method], "tau"}  # the fixed tree also stops pruning
    offset = 1 if method == registry.EAGLE3_TREE else 0  # EAGLE-3 counts the root among its tokens
    assert getattr(at, KNOBS[method]) == 16 + offset


CASES = [(p, T) for p, T in zip(prompts(3, seed=5), [1, 9, 24])]


@pytest.mark.parametrize("budget", [1, 4, 60])
@pytest.mark.parametrize("method", sorted(KNOBS))
def test_every_method_at_a_frontier_budget_equals_ar_on_the_head(llama_target, eagle3_head, method, budget):
    """Greedy, at one node, a small and the largest budget, on the fast path's EAGLE-3 head: AR's tokens."""
    from dynatree_lib.core.drafts.heads.eagle3_runner import Eagle3Runner

    tgt, drf = StaticRunner(llama_target), Eagle3Runner(eagle3_head)
    cfg = registry.REGISTRY[method].study.budget(get_profile("smoke").method(method, SPEC_BENCH), budget)
    for i, (p, T) in enumerate(CASES):
        assert generate(tgt, p, T, draft=drf, method=cfg).tokens == reference(llama_target, p, T), (method, budget, i)


@pytest.mark.parametrize("name", ["smoke", "paper-dryrun", "authors-dryrun", "paper", "authors"])
def test_a_profile_without_a_head_has_no_frontier(name):
    p = get_profile(name)
    assert experiments.cells("frontier", p) == [] and experiments.measuring_profile(FRONTIER, p) == p


def test_the_cpu_frontier_cells():
    p = experiments.measuring_profile(FRONTIER, get_profile("cpu"))
    cells = experiments.cells("frontier", p)
    drafting = [c for c in cells if c.method != registry.AR]
    assert {c.dataset for c in cells} == set(FRONTIER_WORKLOADS)
    assert {c.sampling.temperature for c in cells} == {0.0, 1.0}
    assert {(c.method, c.tags["budget"]) for c in drafting} == {(m, n) for m in KNOBS for n in BUDGETS}
    assert all(c.variant == variants.BUDGET and not c.lookup and c.T == experiments.get("frontier").settings_of(p).T for c in drafting)
    assert sum(c.method == registry.AR for c in cells) == len(FRONTIER_WORKLOADS) * 2
    assert p.models.draft == p.extras.head and p.protocol.warmup == 0
    assert {experiments.prompts(FRONTIER, p, c) * (6 if c.dataset == SPEC_BENCH else 1) for c in cells} == {12}
    keys = {experiments.cell_key(FRONTIER, p, c) for c in cells}
    assert len(keys) == len(cells)


def test_the_cpu_frontier_draws_dynatree_on_its_draft_model():
    """The reference line: DynaTree on the profile's draft model (v4, its 8,192 most frequent tokens, no lookup) at
    every budget, workload and temperature; its records name that draft and vocabulary."""
    p = experiments.measuring_profile(FRONTIER, get_profile("cpu"))
    ref = [c for c in experiments.cells("frontier", p) if c.draft == p.settings_for("frontier")["draft"]]
    assert p.settings_for("frontier")["draft"] == "embedded:draft" and len(ref) == len(BUDGETS) * len(FRONTIER_WORKLOADS) * 2
    assert all(c.method == registry.DYNATREE and not c.lookup and c.tags["draft_vocab"] == 8192 for c in ref)
    assert {c.config.n_max for c in ref} == set(BUDGETS)
    assert "on the draft model embedded:draft @ 4 nodes" in min(ref, key=lambda c: c.tags["budget"]).label


@pytest.mark.parametrize("budget", [1, 4, 60])
def test_dynatree_on_a_draft_model_at_a_frontier_budget_equals_ar(fast_pair, llama_target, budget):
    tgt, drf = fast_pair
    cfg = registry.REGISTRY[registry.DYNATREE].study.budget(
        get_profile("smoke").method(registry.DYNATREE, SPEC_BENCH), budget)
    for i, (p, T) in enumerate(CASES):
        assert generate(tgt, p, T, draft=drf, method=cfg).tokens == reference(llama_target, p, T), (budget, i)


def test_a_cell_of_its_own_loads_a_draft_model_beside_the_profiles_head():
    """``runner.own_drafts``: a head reference over the running target, a draft model reference as its pair loads
    it (here the smoke profile's tiny draft), each once."""
    from dynatree_lib.harness.measure import bench as runner
    from dynatree_lib.harness.measure.cell import Cell

    p = get_profile("smoke")
    target, draft, _ = p.load_pair()
    cells = [(Cell(dataset=SPEC_BENCH, method=registry.DYNATREE, config=None, T=4, L_max=0, dtype="float32",
                   draft="tiny:draft", tags={"budget": n}), str(n)) for n in (4, 8)]
    loaded = runner.own_drafts(p, target, cells, "float32")
    assert list(loaded) == ["tiny:draft"] and type(loaded["tiny:draft"]) is type(draft)


def record(method, budget, ws, t, taus, nodes, delta=2.0, heads=None, draft_model=None):
    rows = [{"prompt_id": f"{ws}:{i}", "L_bar": x, "draft_nodes_per_iter": nodes, "draft_forwards_per_iter": delta}
            for i, x in enumerate(taus)]
    own = heads or draft_model
    return {"dataset": ws, "temperature": t, "method": method, "variant": variants.BUDGET,
            "row": f"{method}:budget" + (f":{own}" if own else ""), "label": f"{method} @ {budget} nodes",
            "tag_budget": budget, "tag_heads": heads, "tag_draft_model": draft_model, "rows": rows,
            "draft_forwards_per_iter": delta,
            "draft_nodes_per_iter": nodes, "depth_per_iter": 3.0, "equals_ar": len(taus), "n": len(taus), "mark": ""}


def frontier_frame():
    recs = []
    for ws in ("spec_bench", "humaneval"):
        for n in (4, 16):
            recs.append(record(registry.DYNATREE, n, ws, 0.0, [2.0 + n / 8, 2.2 + n / 8], nodes=n * 0.5))
            recs.append(record(registry.FIXED_TREE, n, ws, 0.0, [1.8 + n / 8, 2.0 + n / 8], nodes=n))
            recs.append(record(registry.TALON, n, ws, 0.0, [2.0, 2.1], nodes=n, delta=3.0))
            recs.append(record(registry.EAGLE3_TREE, n, ws, 0.0, [2.0, 2.1], nodes=n, delta=4.0))
    return pd.DataFrame(recs)


def test_frontier_points_table_and_interpolation():
    points = ft.frontier_points(frontier_frame())
    assert set(points.budget) == {4, 16} and (points.tau_lo <= points.tau).all() and (points.tau <= points.tau_hi).all()
    table = ft.frontier_table(points)
    assert list(table.columns) == ["budget 4: τ · nodes · δ", "budget 16: τ · nodes · δ"]
    dyna = points[(points.row == "dynatree:budget") & (points.dataset == "spec_bench")]
    assert ft.tau_at(dyna, 2.0) == pytest.approx(2.6) and ft.tau_at(dyna, 8.0) == pytest.approx(4.1)
    assert ft.tau_at(dyna, 100.0) != ft.tau_at(dyna, 100.0)  # nan: no extrapolation


def own_ratio(points, a, b, ws):
    return ft.own_measured(points, a, b, 0.0)[ws].interval.value


def test_own_numbers_compare_at_the_nodes_both_reach():
    points = ft.frontier_points(frontier_frame())
    pa = ft.frontier_of(points, registry.DYNATREE, "spec_bench", 0.0)
    pb = ft.frontier_of(points, registry.FIXED_TREE, "spec_bench", 0.0)
    assert ft.equal_nodes(pa, pb) == 8.0  # DynaTree reaches 8 nodes at most, the fixed tree 16
    fixed_at_8 = 2.4 + (3.9 - 2.4) * (8 - 4) / (16 - 4)  # the fixed tree's mean τ between its points
    assert own_ratio(points, registry.DYNATREE, registry.FIXED_TREE, "spec_bench") == pytest.approx(4.1 / fixed_at_8)
    card = ft.two_verdicts(points, {})  # two prompts: too few for a verdict in counts
    assert card.loc["DynaTree over a fixed tree, T = 0", "own verdict"] == "not measured"
    assert "2 prompts of 12" in card.loc["DynaTree over a fixed tree, T = 0", "own numbers"]


def test_frontiers_compare_at_fractional_nodes_and_not_outside_their_overlap():
    recs = [record(registry.DYNATREE, n, "humaneval", 0.0, [tau, tau], nodes=nodes)
            for n, nodes, tau in ((4, 3.7, 2.0), (8, 12.4, 3.0))]
    recs += [record(registry.FIXED_TREE, n, "humaneval", 0.0, [tau, tau], nodes=nodes)
             for n, nodes, tau in ((4, 4.2, 1.9), (8, 7.9, 2.4))]
    recs += [record(registry.LINEAR, n, "humaneval", 0.0, [2.0, 2.0], nodes=nodes)
             for n, nodes in ((16, 14.0), (32, 30.0))]
    points = ft.frontier_points(pd.DataFrame(recs))
    ratio = own_ratio(points, registry.DYNATREE, registry.FIXED_TREE, "humaneval")
    assert ratio == pytest.approx((2.0 + (7.9 - 3.7) / (12.4 - 3.7)) / 2.4)
    assert ft.own_measured(points, registry.FIXED_TREE, registry.LINEAR, 0.0) == {}  # apart


def test_own_numbers_take_intervals_over_prompts_and_the_rule():
    """Twelve prompts on which DynaTree commits more than the fixed tree at equal nodes on every one: an interval
    over prompts above 1 on both workloads, so the count reproduces the claim."""
    recs = []
    for ws in ("spec_bench", "humaneval"):
        for n in (4, 16):
            recs.append(record(registry.DYNATREE, n, ws, 0.0, [2.5 + i / 20 for i in range(12)], nodes=n))
            recs.append(record(registry.FIXED_TREE, n, ws, 0.0, [2.0 + i / 20 for i in range(12)], nodes=n))
    own = ft.own_measured(ft.frontier_points(pd.DataFrame(recs)), registry.DYNATREE, registry.FIXED_TREE, 0.0)
    assert all(m.prompts == 12 and m.interval.lo > 1 for m in own.values())
    assert ft.verdict(own, ft.COUNTS) == "reproduces"


def test_figure_6_counts_draft_forwards_per_committed_token():
    recs = [record(registry.TALON, ft.TALON_NODES, "spec_bench", 0.0, [2.0] * 12, nodes=60, delta=2.0),
            record(registry.EAGLE3_TREE, ft.TALON_NODES, "spec_bench", 0.0, [2.0] * 12, nodes=60, delta=8.0)]
    fig6 = ft.figure6_measured(ft.frontier_points(pd.DataFrame(recs)))
    assert fig6["spec_bench"].interval.value == pytest.approx(4.0)  # EAGLE-3's δ / τ over TALON's


COSTS = {"target": {"1": 10.0, "2": 10.5, "4": 11.0, "8": 12.0, "16": 14.0, "32": 18.0, "64": 30.0},
         "draft": {"1": 1.0, "2": 1.1, "4": 1.2, "8": 1.4, "16": 1.8, "32": 2.6, "64": 4.6},
         "draft_after_target": {"1": 1.5, "2": 1.6, "4": 1.7, "8": 1.9}, "loop": {"level": 0.2, "commit": 0.5}}


def test_head_curves_price_the_draft_as_the_heads_step():
    c = head_curves(COSTS, 0.05)
    assert c["draft"]["1"] == pytest.approx(0.5) and c["draft"]["64"] == pytest.approx(2.3)
    assert c["draft_after_target"]["8"] == pytest.approx(0.95) and c["target"] == COSTS["target"]


def test_the_cost_check_predicts_each_row_and_scales_by_ar():
    curves = head_curves(COSTS, 0.05)
    spec = dict(draft_nodes_per_iter=8.0, depth_per_iter=4.0, draft_forwards_per_iter=4.0, L_bar=3.0)
    pred = predict_ms_per_token(curves, registry.DYNATREE, 8.0, 4.0, 4.0, L_bar=3.0)
    rows = [dict(method=registry.AR, label="AR", dataset="spec_bench", temperature=0.0, replicate=0, impl="ours",
                 ms_per_token=11.0, draft_nodes_per_iter=0.0, depth_per_iter=0.0, draft_forwards_per_iter=0.0,
                 L_bar=1.0, variant="main"),
            dict(method=registry.DYNATREE, label="DynaTree", dataset="spec_bench", temperature=0.0, replicate=0,
                 impl="ours", ms_per_token=pred * 1.2, variant="main", **spec)]
    t = ft.cost_check_table({"heads": pd.DataFrame(rows)}, curves)
    assert len(t) == 1 and t.error.iloc[0] == pytest.approx(0.2)
    assert t["AR-scaled"].iloc[0] == pytest.approx(1.2 / 1.1 - 1)  # AR measured 10% over its prediction
    summary = ft.cost_check_summary(t)
    assert summary.loc["all rows", "median abs. error"] == "20.0%"
    assert summary.loc["all rows", "median abs. AR-scaled, fitted terms"] == "–"  # no frontier terms given
    assert "DynaTree" in summary.loc["all rows", "worst row (curves alone)"]


def test_fitted_terms_recover_what_the_curves_leave_out_of_an_iteration():
    """Rows of a run 20% slower than its curves (AR too) whose iterations take 1 ms + 0.1 ms a node + 0.5 ms a draft
    forward more than the curves price: the fit recovers those terms, and a check with them predicts a row of
    another run exactly."""
    curves = head_curves(COSTS, 0.05)
    ar = dict(method=registry.AR, draft_nodes_per_iter=0.0, depth_per_iter=0.0, draft_forwards_per_iter=0.0, L_bar=1.0,
              temperature=1.0, dataset="humaneval", replicate=0, impl="ours", variant="main", label="AR")
    rows = [ar | {"ms_per_token": 1.2 * COSTS["target"]["1"]}]
    for nodes, delta, tau in ((4.0, 2.0, 2.0), (8.0, 3.0, 2.5), (16.0, 4.0, 3.0), (32.0, 6.0, 3.2)):
        r = pd.Series(ar | dict(method=registry.DYNATREE, draft_nodes_per_iter=nodes, depth_per_iter=delta,
                                draft_forwards_per_iter=delta, L_bar=tau, label="DynaTree"))
        extra = (1.0 + 0.1 * nodes + 0.5 * delta) / tau
        rows.append(r.to_dict() | {"ms_per_token": 1.2 * (ft.predict_row(curves, r) + extra)})
    terms = ft.fitted_terms(pd.DataFrame(rows), curves)
    assert terms[1.0] == pytest.approx([1.0, 0.1, 0.5])
    check = ft.cost_check_table({"heads": pd.DataFrame(rows)}, curves, terms)
    assert check["AR-scaled, fitted terms"].abs().max() == pytest.approx(0.0, abs=1e-9)
    assert math.isnan(ft.predict_with_terms(curves, pd.Series(rows[1]), {0.0: terms[1.0]}))  # none at this temperature


def test_rows_on_a_draft_of_their_own_are_their_own_line_and_priced_by_no_head_curve():
    recs = [record(registry.DYNATREE, 4, "spec_bench", 0.0, [2.0, 2.2], nodes=2.0, draft_model="embedded:draft"),
            record(registry.EAGLE3_TREE, 4, "spec_bench", 0.0, [1.5, 1.6], nodes=4.0, heads="medusa")]
    frame = pd.concat([frontier_frame(), pd.DataFrame(recs)], ignore_index=True)
    points = ft.frontier_points(frame)
    model = points[points.draft_model == "embedded:draft"]
    assert len(model) == 1 and model.row.iloc[0] == "dynatree:budget:embedded:draft"
    assert model.label.iloc[0] == "DynaTree on the draft model"  # the profile's own draft: no internal id
    assert ft.own_drafts(frame).tolist() == [False] * len(frontier_frame()) + [True, True]
    pa = ft.frontier_of(points, registry.DYNATREE, "spec_bench", 0.0)  # the head's line, not the draft model's
    assert ft.equal_nodes(pa, ft.frontier_of(points, registry.FIXED_TREE, "spec_bench", 0.0)) == 8.0
    t = ft.projection_table(points, {"flat": head_curves(COSTS, 0.05)})
    assert not any("draft model" in m or "Medusa" in m for m in t.index.get_level_values("Method"))
    assert plots.frontier(points) is not None


def test_counts_of_two_machine_kinds_are_compared_point_by_point():
    ar = lambda outs: dict(method=registry.AR, dataset="spec_bench", temperature=0.0,
                           rows=[{"prompt_id": i, "output_ids": o} for i, o in enumerate(outs)])
    ra = pd.concat([frontier_frame(), pd.DataFrame([ar([[1, 2], [3, 4]])])], ignore_index=True)
    rb = pd.concat([frontier_frame(), pd.DataFrame([ar([[1, 2], [3, 5]])])], ignore_index=True)
    a = ft.frontier_points(frontier_frame())
    b = a.copy()
    b.loc[b.index[0], "tau"] += 0.25  # one near-tie fell the other way on the other kernels
    t = ft.across_kinds({"amd": (ra, a), "intel": (rb, b)})
    first = t.loc[("Spec-Bench", "0")]
    assert first["AR's tokens equal"] == "1 of 2" and t.loc[("HumanEval", "0"), "AR's tokens equal"] == "–"
    assert first["points"] == 8 and first["same τ"] == 7 and first["largest |Δτ|"].startswith("0.250")
    assert t.loc[("HumanEval", "0"), "same τ"] == 8
    assert first["intel's τ inside amd's 95% interval"] == "7 of 8"


def test_the_projection_picks_each_machines_best_budget():
    points = ft.frontier_points(frontier_frame())
    cheap_wide = head_curves(COSTS | {"target": {k: 10.0 for k in COSTS["target"]}}, 0.05)
    steep = head_curves(COSTS | {"target": {k: 10.0 * int(k) for k in COSTS["target"]}}, 0.05)
    t = ft.projection_table(points, {"flat": cheap_wide, "steep": steep})
    row = ("Spec-Bench", "0", "Fixed Tree")
    assert t.loc[row, "flat: best budget: predicted speedup"].startswith("16:")  # wide trees verify for free
    assert t.loc[row, "steep: best budget: predicted speedup"].startswith("4:")  # each node costs a forward


def test_rows_over_other_heads_have_colours_of_their_own():
    colours = {plots.row_color(registry.EAGLE3_TREE, h) for h in (None, "medusa", "hydra")}
    assert len(colours) == 3
    assert plots.row_color(registry.TALON, float("nan")) == registry.REGISTRY[registry.TALON].display.color


def test_the_frontier_figure_draws_the_papers_points():
    points = ft.frontier_points(frontier_frame())
    fig = plots.frontier(points, ft.frontier_reported())
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert any("TALON's paper" in x for x in labels)


def test_the_scorecard_reads_each_tree_claim_in_own_numbers():
    """The tree claims' rows in counts come from the committed frontier, by the rule, each naming its draft."""
    from dynatree_lib.reporting import scorecard

    rows = scorecard.counted_rows(get_profile("cpu"), {scorecard.TAU_FIXED: (registry.DYNATREE, registry.FIXED_TREE,
                                                                             0.0)})
    assert rows[0]["id"] == "dynatree_vs_fixed_tau" and rows[0]["verdict"] in scorecard.VERDICTS
    assert rows[0]["rests on"] == "EAGLE-3 head alone · counts" and "Spec-Bench" in rows[0]


