"""Recorded trees (issue: see the trees): recording changes no token, records are well formed, and the
text and figure views work from them."""
import pytest

from dynatree_lib import DynaTreeConfig, FixedTreeConfig, TalonConfig, generate
from dynatree_lib.cli import main
from dynatree_lib.reporting.treeviz import by_confidence, format_tree, layout, shape_summary, tree_table

from ..conftest import prompts


@pytest.mark.parametrize("cfg", [FixedTreeConfig(D=3, B=2, tau=0.0), DynaTreeConfig(), TalonConfig(mu=0.2, N=8, K=3)])
def test_recording_changes_no_token(target, draft, fast_pair, cfg):
    for t, d in ((target, draft), fast_pair):
        p = prompts(1, seed=4)[0]
        plain = generate(t, p, 30, draft=d, method=cfg)
        rec = generate(t, p, 30, draft=d, method=cfg, record_trees=5)
        assert rec.tokens == plain.tokens and not plain.trees
        assert len(rec.trees) == min(5, rec.iterations)
        for tr, acc in zip(rec.trees, rec.log.accepted):
            n = len(tr["parents"])
            assert tr["parents"][0] == -1 and all(0 <= q < i for i, q in enumerate(tr["parents"]) if i)
            assert all(tr["depth"][i] == tr["depth"][q] + 1 for i, q in enumerate(tr["parents"]) if i)
            assert tr["accepted"][0] == 0 and len(tr["accepted"]) == acc + 1
            assert all(tr["parents"][b] == a for a, b in zip(tr["accepted"], tr["accepted"][1:]))
            assert all(0 < x <= 1 for x in tr["prob"][1:]) and 0 < tr["root_conf"] <= 1 and n == len(tr["tokens"])


def test_text_and_tables(target, draft):
    p = prompts(1, seed=6)[0]
    res = generate(target, p, 30, draft=draft, method=DynaTreeConfig(), record_trees=4)
    text = format_tree(res.trees[0])
    assert text.count("✓") == len(res.trees[0]["accepted"]) - 1 and "draft conf" in text
    x, y = layout(res.trees[0])
    assert len(x) == len(res.trees[0]["parents"])
    recs = [{"method": "dynatree", "variant": "main", "config": {}, "label": "DynaTree", "dataset": "wikitext2",
             "rows": [{"prompt_id": "a", "trees": res.trees}]}]
    t = tree_table(recs)
    assert len(t) == 4 and (t.nodes >= t.accepted).all()
    assert shape_summary(t).loc[("DynaTree", "wikitext2"), "trees"] == 4
    assert by_confidence(t).trees.sum() == 4


def test_show_tree_command(capsys):
    assert main(["show-tree", "--profile", "smoke", "--method", "dynatree", "--text", "It was a dark night",
                 "-T", "8", "--iterations", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("draft conf") == 2 and "output:" in out


def test_informative_tree_skips_iterations_that_drafted_nothing():
    """An iteration with no drafted depth (empty ``per_depth``) is never picked as worth drawing, and is no error."""
    import pandas as pd

    from dynatree_lib.reporting import treeviz

    trees = pd.DataFrame({"method": ["dynatree"] * 3, "prompt_id": ["a", "a", "b"], "position": [0, 5, 0],
                          "nodes": [1, 6, 5], "root_breadth": [0, 2, 1], "per_depth": [[], [2, 2], [1, 1, 1]],
                          "accepted": [1, 3, 5]})
    assert treeviz.informative(trees) == ("a", 5)
