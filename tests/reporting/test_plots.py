"""The main figure shows the paper's comparison only; controls and variants get a figure of their own."""
import pandas as pd

from dynatree_lib.harness.setup import variants as v
from dynatree_lib.reporting import plots, tables

EXT = "DynaTree + cost budget (ext.)"
ALONE, PAPER_DYNATREE = " · network alone", "DynaTree (paper settings)"
# (method, variant, tags) of a main run's rows, as experiments.main_cells makes them
ROWS = [("ar", v.MAIN, {}), ("linear", v.MAIN, {}), ("linear", v.NETWORK_ALONE, {"control": True}),
        ("dynatree", v.MAIN, {}), ("dynatree", v.PAPER_SETTINGS, {"paper_settings": True}),
        ("dynatree_cost", v.MAIN, {"extension": True}),
        ("dynatree_cost", v.EVERY_LEVEL_DRAFTED, {"extension": True, "lookup_skip": False}),
        ("dynatree_cost", v.NO_COPY_RECORD, {"extension": True, "skip_window": 0}),
        ("talon", v.MAIN, {}), ("hf_ar", v.MAIN, {})]


def main_run() -> pd.DataFrame:
    """Two replicates of every row on two workloads, speedups with intervals."""
    return pd.DataFrame([{"dataset": ds, "method": m, "variant": var, "row": tables.row_id(m, var),
                          "label": v.label(m, var, {}, tags), "replicate": r, "speedup": s,
                          "speedup_lo": s - 0.1, "speedup_hi": s + 0.1, **{f"tag_{k}": x for k, x in tags.items()}}
                         for ds in ("wikitext2", "spec_bench") for r in (0, 1)
                         for s, (m, var, tags) in zip([1.0, *[1.1 + 0.05 * i for i in range(len(ROWS) - 1)]], ROWS)])


def ytick_labels(fig) -> list[str]:
    return [t.get_text().replace("\n", " ") for t in fig.axes[0].get_yticklabels()]


def test_main_figure_selects_by_method_and_variant():
    df = main_run()
    assert sorted(df[plots.paper_comparison(df)].label.unique()) == sorted(["AR", "Linear Spec", "DynaTree", EXT])
    fig = plots.main_speedup(df)
    assert ytick_labels(fig) == ["AR", "Linear Spec", "DynaTree", EXT]
    assert [ax.get_title() for ax in fig.axes] == ["WikiText-2", "Spec-Bench"]


def test_legend_covers_no_panel():
    for fig in (plots.main_speedup(main_run()), plots.controls_and_variants(main_run())):
        assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1


def test_controls_and_variants_sit_below_their_methods_main_row():
    fig = plots.controls_and_variants(main_run())
    labels = ytick_labels(fig)
    assert "AR" not in labels
    assert labels.index("Linear Spec") + 1 == labels.index("Linear Spec" + ALONE)
    assert labels.index("DynaTree") + 1 == labels.index(PAPER_DYNATREE)
    assert {"TALON", "HF AR", "DynaTree + cost budget, no copy record (ext.)"} <= set(labels)
    greyed = {t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_color() != "black"}
    assert greyed == {"Linear Spec", "DynaTree", plots.tick(EXT, 30)}


def test_one_distinct_colour_per_method_across_every_figure():
    """The registry's colours: no two methods share one, and a head kind drawn beside them (Medusa, Hydra) has its
    own; the EAGLE-3 head is drawn as EAGLE-3's tree, its method."""
    import dynatree_lib.harness.peers  # noqa: F401 (registers llama.cpp and vLLM)
    from dynatree_lib import methods as registry
    from dynatree_lib.core.drafts.heads.kinds import HEAD_KINDS

    colours = [m.display.color.lower() for m in registry.REGISTRY.values()]
    heads = [k.color.lower() for name, k in HEAD_KINDS.items() if name != "eagle3"]
    assert len(set(colours)) == len(colours) and not set(heads) & set(colours) and len(set(heads)) == len(heads)


def test_the_main_comparison_figure_draws_dynatree_over_each_baseline():
    df = main_run()
    df["tps_by_prompt"] = [{f"p{i}": 10.0 * s + i for i in range(4)} for s in df.speedup]
    df["lookup"], df["mark"], df["T"], df["L_max"], df["dtype"], df["temperature"] = True, "", 64, 0, "bf16", 0.0
    fig = plots.dynatree_vs_baselines(df)
    assert ytick_labels(fig)[:2] == ["over Linear Spec", "over Fixed Tree"]
