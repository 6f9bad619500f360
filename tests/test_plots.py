"""The main figure shows the paper's comparison only; controls and variants get a figure of their own."""
import pandas as pd

from dynatree_lib.harness.experiments import ALONE, PAPER_DYNATREE
from dynatree_lib.reporting import plots

EXT = "DynaTree + cost budget (ext.)"
# (method, label, tags) of a main run's rows, as experiments.main_cells tags them
ROWS = [("ar", "AR", {}), ("linear", "Linear Spec", {}), ("linear", "Linear Spec" + ALONE, {"control": True}),
        ("dynatree", "DynaTree", {}), ("dynatree", PAPER_DYNATREE, {"paper_settings": True}),
        ("dynatree_cost", EXT, {"extension": True}),
        ("dynatree_cost", "DynaTree + cost budget, every level drafted (ext.)", {"extension": True, "lookup_skip": False}),
        ("dynatree_cost", "DynaTree + cost budget, no copy record (ext.)", {"extension": True, "skip_window": 0}),
        ("talon", "TALON", {}), ("hf_ar", "HF AR", {})]


def main_run() -> pd.DataFrame:
    """Two replicates of every row on two workloads, speedups with intervals."""
    return pd.DataFrame([{"dataset": ds, "method": m, "label": lab, "replicate": r, "speedup": s,
                          "speedup_lo": s - 0.1, "speedup_hi": s + 0.1, **{f"tag_{k}": v for k, v in tags.items()}}
                         for ds in ("wikitext2", "spec_bench") for r in (0, 1)
                         for s, (m, lab, tags) in zip([1.0, *[1.1 + 0.05 * i for i in range(len(ROWS) - 1)]], ROWS)])


def ytick_labels(fig) -> list[str]:
    return [t.get_text().replace("\n", " ") for t in fig.axes[0].get_yticklabels()]


def test_main_figure_selects_by_method_and_tags():
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
