"""The cost-aware extension (``dynatree_cost``): the tree it verifies is the best-rate subtree of
DynaTree's, chosen from the forward-cost curve; its exactness is in tests/core/test_exactness.py."""

import pytest
import torch

from dynatree_lib import CostAwareConfig, DynaTreeConfig, generate
from dynatree_lib.harness.experiments.costs import interp
from dynatree_lib.core.tree import Tree, select_path

from ..conftest import add_level, prompts


def test_subset_keeps_a_valid_tree():
    #        0
    #      1   2
    #     3 4   5
    t = Tree.new(7)
    t, _ = add_level(t, torch.tensor([0, 0]), torch.tensor([11, 12]), torch.log(torch.tensor([0.6, 0.3])))
    t, _ = add_level(t, torch.tensor([1, 1, 2]), torch.tensor([13, 14, 15]), torch.log(torch.tensor([0.5, 0.4, 0.9])))
    s = t.subset(torch.tensor([0, 1, 2, 5]))
    assert s.tokens.tolist() == [7, 11, 12, 15] and s.parents.tolist() == [-1, 0, 0, 2]
    assert s.depth.tolist() == [0, 1, 1, 2] and s.levels == 2 and not s.is_chain
    assert s.anc.tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]]
    assert torch.allclose(s.cum_logp, t.cum_logp[[0, 1, 2, 5]])
    chain = t.subset(torch.tensor([0, 1, 3]))
    assert chain.is_chain and chain.levels == 2
    # the target agrees with 11 then 13: the path is found in the cut tree as in the full one
    assert select_path(chain, torch.tensor([11, 13, 0])).tolist() == [0, 1, 2]


def _best_j(p, verify, draft_total):
    rates = [(1 + sum(sorted(p, reverse=True)[:j])) / (draft_total + verify(j + 1)) for j in range(len(p) + 1)]
    return max(range(len(rates)), key=rates.__getitem__)


@pytest.mark.parametrize("curve,draft_ms,fixed_ms", [(((1, 1.0), (2, 1.1), (64, 4.0)), 0.1, 0.25),
                                                     (((1, 1.0), (2, 3.0)), 0.5, 0.0),
                                                     (((1, 1.0), (2, 1.1), (64, 4.0)), 0.0, 2.0),
                                                     (((1, 1.0), (64, 1.0)), 0.0, 0.0)])
def test_trim_keeps_the_best_rate_prefix(curve, draft_ms, fixed_ms):
    torch.manual_seed(0)
    t = Tree.new(0)
    frontier = torch.tensor([0])
    for _ in range(3):  # three levels, two children each, random probabilities
        lp = torch.log(torch.rand(frontier.numel(), 2) * 0.5 + 0.45)
        t, frontier = add_level(t, frontier.repeat_interleave(2), torch.arange(frontier.numel() * 2) + t.size, lp.flatten())
    pol = CostAwareConfig(DynaTreeConfig(n_max=64), curve, draft_ms, fixed_ms).policy()
    verify = lambda k: interp({str(k): ms for k, ms in curve}, k)
    p = t.cum_logp[1:t.size].exp().tolist()
    cut = pol.trim(t, 3)
    assert cut.n_drafted == _best_j(p, verify, fixed_ms + 2 * draft_ms)  # drafted in 3 forwards
    kept = cut.cum_logp[1:].exp()
    dropped = sorted(set(round(x, 6) for x in p) - set(round(x, 6) for x in kept.tolist()))
    assert not dropped or not kept.numel() or max(dropped) <= float(kept.min()) + 1e-6  # the most probable kept
    assert bool((cut.parents[1:] < torch.arange(1, cut.size)).all())  # still BFS with parents first


def test_a_flat_curve_keeps_the_whole_tree_and_a_steep_one_cuts_it(target, draft):
    p, T = prompts(1, seed=3)[0], 40
    dyn = generate(target, p, T, draft=draft, method=DynaTreeConfig())
    flat = generate(target, p, T, draft=draft, method=CostAwareConfig(DynaTreeConfig(), ((1, 1.0), (2, 1.0)), 0.0))
    assert flat.tokens == dyn.tokens and flat.drafted_nodes == dyn.drafted_nodes
    steep = generate(target, p, T, draft=draft, method=CostAwareConfig(DynaTreeConfig(), ((1, 1.0), (2, 50.0)), 0.0))
    assert steep.tokens == dyn.tokens and steep.drafted_nodes <= steep.iterations  # at most one node a tree


@pytest.mark.parametrize("curve", [((1, 1.0), (2, 1.08), (8, 1.4), (64, 6.0)),
                                   ((1, 1.0), (2, 3.6), (4, 2.9), (8, 2.7), (64, 7.3))])  # fp32 MKL's: 2 > 8
def test_level_stop_stops_only_when_no_next_level_could_pay(curve):
    """When ``more`` says stop, no next level (children at most as probable as their parents, at least one
    node) raises the best expected rate of the tree, also where the curve does not rise; and it does not
    always say stop."""
    import math
    import random

    rng = random.Random(0)
    pol = CostAwareConfig(DynaTreeConfig(n_max=64), curve, 0.3, 0.5).policy()
    v = pol.verify_list
    rate = lambda probs, spent: max((1 + sum(sorted(probs, reverse=True)[:j])) / (spent + v[j])
                                    for j in range(len(probs) + 1))
    answers = set()
    for _ in range(300):
        probs = sorted((rng.random() ** 3 for _ in range(rng.randint(1, 12))), reverse=True)
        frontier = rng.sample(range(1, len(probs) + 1), rng.randint(1, len(probs)))
        f = rng.randint(1, 4)
        go = pol.more([0.0] + [math.log(x) for x in probs], frontier, f)
        answers.add(go)
        if go:
            continue
        spent = pol.fixed_ms + (f - 1) * pol.draft_ms
        now = rate(probs, spent)
        for _ in range(20):  # random next levels: each frontier node's children share at most its mass
            kids = []
            for u in frontier:
                cut = sorted(rng.random() for _ in range(rng.randint(0, 3)))  # shares summing to at most 1
                kids += [probs[u - 1] * (b - a) for a, b in zip([0.0] + cut, cut)]
            if kids:
                assert rate(probs + kids, spent + pol.draft_ms) <= now + 1e-9
    assert answers == {True, False}


def test_level_stop_drafts_fewer_levels_when_they_are_dear(target, draft):
    p, T = prompts(1, seed=3)[0], 40
    dyn = generate(target, p, T, draft=draft, method=DynaTreeConfig())
    curve = ((1, 1.0), (2, 1.1), (64, 4.0))
    dear = generate(target, p, T, draft=draft, method=CostAwareConfig(DynaTreeConfig(), curve, 5.0, 1.0))
    free = generate(target, p, T, draft=draft, method=CostAwareConfig(DynaTreeConfig(), curve, 5.0, 1.0, level_stop=False))
    assert dear.tokens == free.tokens == dyn.tokens
    assert dear.draft_forwards <= dear.iterations < free.draft_forwards  # at most one level a tree when one costs 5x


@pytest.mark.parametrize("bad", [dict(verify_ms=((2, 1.0), (4, 2.0))), dict(verify_ms=((1, 1.0),)),
                                 dict(verify_ms=((1, 1.0), (1, 2.0))), dict(verify_ms=((1, -1.0), (2, 1.0))),
                                 dict(draft_ms=-0.1), dict(fixed_ms=-1.0), dict(base="dynatree"), dict(verify_ms=[(1, 1.0), (2, 1.0)]),
                                 dict(level_stop="yes")])
def test_bad_cost_settings_are_refused(bad):
    with pytest.raises(ValueError):
        CostAwareConfig(**bad)


def test_by_name():
    assert generate.__module__ == "dynatree_lib.methods"
    from dynatree_lib.methods import method_config, method_names

    assert "dynatree_cost" in method_names() and isinstance(method_config("dynatree_cost"), CostAwareConfig)
