import math

import pytest
import torch

from dynatree_lib.core.drafter import DraftState, draft_tree
from dynatree_lib.core.policies.base import Outcome
from dynatree_lib.core.policies.dynatree import DynaTreeConfig
from dynatree_lib.core.policies.static import FixedTreeConfig, LinearConfig
from dynatree_lib.core.policies.talon import TalonConfig
from dynatree_lib.core.engines.hf import HFRunner
from dynatree_lib.core.tree import Tree

from ..conftest import add_level, prompts


def grow(draft, cfg, prompt, max_depth=100):
    runner, state = HFRunner(draft), DraftState()
    tree, n_fwd = draft_tree(runner, state, prompt, cfg.policy(), max_depth)
    if n_fwd:  # rolled back to the committed prefix
        assert runner.length == runner.cache.get_seq_length() == prompt.numel() == state.consumed
    else:      # nothing to draft: the draft model was not run at all
        assert runner.length == state.consumed == 0
    return tree, n_fwd


def last_logits(model, ids):
    return HFRunner(model).forward(ids, torch.arange(ids.numel()), last_only=True)[0]


def test_linear_chain(draft):
    p = prompts(1, seed=3)[0]
    t, n_fwd = grow(draft, LinearConfig(K=5), p)
    assert t.is_chain and t.n_drafted == 5 and n_fwd == 5 and t.levels == 5
    # the chain is the draft's own greedy continuation
    ref = draft.generate(p[None], max_new_tokens=5, do_sample=False, min_new_tokens=5)[0, p.numel():]
    assert t.tokens[1:].tolist() == ref.tolist()


def test_full_fixed_tree_shape_and_one_forward_per_level(draft):
    t, n_fwd = grow(draft, FixedTreeConfig(D=3, B=2, tau=0.0, n_max=256), prompts(1)[0])
    assert t.n_drafted == 2 + 4 + 8
    assert n_fwd == 3  # level-batched: prefix level + one per expanded level, never one per node
    assert torch.bincount(t.depth).tolist() == [1, 2, 4, 8]


def test_root_children_are_draft_topk(draft):
    p = prompts(1, seed=5)[0]
    t, _ = grow(draft, FixedTreeConfig(D=1, B=3, tau=0.0), p)
    logits = last_logits(draft, p)
    lp, tok = torch.log_softmax(logits, -1).topk(3)
    assert t.tokens[1:].tolist() == tok.tolist()
    assert torch.allclose(t.logp[1:], lp, atol=1e-5)


def test_tree_nodes_match_sequential_draft(draft):
    """Level-batched drafting with a tree mask gives each node the draft's distribution on its own path."""
    p = prompts(1, seed=9)[0]
    t, _ = grow(draft, FixedTreeConfig(D=3, B=2, tau=0.0), p)
    for i in range(1, t.size):
        path = t.anc[i].nonzero().squeeze(1)
        ctx = torch.cat([p, t.tokens[path[1:-1]]])
        logits = last_logits(draft, ctx)
        assert torch.allclose(torch.log_softmax(logits, -1)[t.tokens[i]], t.logp[i], atol=1e-4)


@pytest.mark.parametrize("n_max", [1, 2, 5, 13])
def test_budget_keeps_most_probable(draft, n_max):
    p = prompts(1, seed=11)[0]
    t, _ = grow(draft, FixedTreeConfig(D=4, B=3, tau=0.0, n_max=n_max), p)
    assert t.n_drafted == n_max
    full, _ = grow(draft, FixedTreeConfig(D=4, B=3, tau=0.0, n_max=1000), p)
    if n_max <= 3:  # budget hits inside the first level: the best root children survive
        assert t.tokens[1:].tolist() == full.tokens[1:1 + n_max].tolist()


@pytest.mark.parametrize("tau", [0.01, 0.1, 0.3])
def test_pruning_threshold(draft, tau):
    for p in prompts(4, seed=2):
        t, _ = grow(draft, FixedTreeConfig(D=5, B=3, tau=tau), p)
        assert (t.cum_logp[1:] >= math.log(tau) - 1e-6).all()
        assert (t.depth <= 5).all()


def test_max_depth_cap(draft):
    t, n_fwd = grow(draft, FixedTreeConfig(D=6, B=2, tau=0.0), prompts(1)[0], max_depth=2)
    assert t.levels == 2 and n_fwd == 2
    t, n_fwd = grow(draft, LinearConfig(4), prompts(1)[0], max_depth=0)
    assert t.n_drafted == 0 and n_fwd == 0


def test_siblings_distinct(draft):
    t, _ = grow(draft, DynaTreeConfig(), prompts(1, seed=4)[0])
    pairs = set(zip(t.parents.tolist(), t.tokens.tolist()))
    assert len(pairs) == t.size


def test_breadth_rule():
    pol = DynaTreeConfig(B_min=1, B_mid=2, B_max=4, tau_h=0.8, tau_l=0.3).policy()
    conf = [0.95, 0.8, 0.5, 0.3, 0.1]
    assert [pol.breadth(c) for c in conf] == [1, 1, 2, 2, 4]
    off = DynaTreeConfig(dynamic_breadth=False).policy()
    assert [off.breadth(c) for c in conf] == [2] * 5


def test_depth_gating_rule():
    pol = DynaTreeConfig(D0=2, D_max=4, rho_stop=0.1, rho_deep=0.5).policy()
    depth = [0, 1, 1, 2, 2, 3, 4]
    p = [1.0, 0.05, 0.3, 0.4, 0.6, 0.9, 0.99]
    # d<Dmax & p>=rho_stop & (d<D0 | p>rho_deep)
    assert [pol.grows(d, math.log(x)) for d, x in zip(depth, p)] == [True, False, True, False, True, True, False]
    off = DynaTreeConfig(D0=2, D_max=4, dynamic_depth=False).policy()
    assert [off.grows(d, math.log(x)) for d, x in zip(depth, p)] == [True, True, True, False, False, False, False]
    assert pol.expand([1, 2, 3, 4], depth, [math.log(x) for x in p]) == [2, 4]  # a level at once: the same rule


def test_history_adaptation_direction_and_clipping():
    pol = DynaTreeConfig(D0=5, D_max=8, tau_h=0.9, tau_l=0.4, W=2, a_star=0.5, eta_D=1.0, eta_h=0.1).policy()
    pol.observe(Outcome(accepted=4, tree_depth=4))  # a=1.0 > a*: deeper, lower tau_h
    assert pol.D0 == pytest.approx(5.5) and pol.tau_h == pytest.approx(0.85)
    for _ in range(50):
        pol.observe(Outcome(4, 4))
    # clipped to [1, D_max-1], [tau_l, 1)
    assert pol.D0 == pytest.approx(7.0) and pol.tau_h == pytest.approx(0.4, abs=1e-5)
    for _ in range(50):
        pol.observe(Outcome(0, 4))
    assert pol.D0 == pytest.approx(1.0) and pol.tau_h < 1.0
    frozen = DynaTreeConfig(history=False).policy()
    frozen.observe(Outcome(4, 4))
    assert frozen.D0 == 5 and frozen.tau_h == 0.9


def test_all_components_off_is_the_fixed_tree(draft):
    for p in prompts(3, seed=8):
        a, _ = grow(draft, DynaTreeConfig(D0=3, D_max=6, B_mid=2, tau=0.05, n_max=20, dynamic_breadth=False,
                                          dynamic_depth=False, history=False), p)
        b, _ = grow(draft, FixedTreeConfig(D=3, B=2, tau=0.05, n_max=20), p)
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.parents, b.parents)


def test_talon_topk_root_then_relative_gate(draft):
    for p in prompts(4, seed=13):
        t, n_fwd = grow(draft, TalonConfig(mu=0.1, N=30, K=4), p)
        assert t.n_drafted <= 30 and (t.depth == 1).sum() == 4  # top-K at the root, never gated
        for d in range(2, t.levels + 1):                         # every deeper level within mu of its best
            lvl = t.cum_logp[t.depth == d]
            assert (lvl >= lvl.max() + math.log(0.1) - 1e-5).all()
        assert n_fwd == t.levels  # every kept node is expanded at the next level, one forward per level


def test_talon_budget_is_strict(draft):
    t, _ = grow(draft, TalonConfig(mu=0.001, N=12, K=10), prompts(1)[0])
    assert t.n_drafted == 12


@pytest.mark.parametrize("make, msg", [
    (lambda: TalonConfig(mu=0.0), "mu must be in"),
    (lambda: TalonConfig(N=0), "budget N"),
    (lambda: TalonConfig(K=0), "root width K"),
    (lambda: LinearConfig(K=0), "K must be"),
    (lambda: FixedTreeConfig(D=0), "depth D"),
    (lambda: FixedTreeConfig(B=0), "branching B"),
    (lambda: FixedTreeConfig(tau=1.5), "tau must be in"),
    (lambda: FixedTreeConfig(n_max=0), "n_max must be >= 1"),
    (lambda: DynaTreeConfig(n_max=0), "n_max must be >= 1"),
    (lambda: DynaTreeConfig(tau_h=0.3, tau_l=0.4), "tau_l < tau_h"),
    (lambda: DynaTreeConfig(tau_h=1.2), "tau_l < tau_h < 1"),
    (lambda: DynaTreeConfig(tau_l=0.0), "0 < tau_l"),
    (lambda: DynaTreeConfig(B_min=3, B_mid=2), "B_min <= B_mid"),
    (lambda: DynaTreeConfig(D0=8, D_max=8), "D0 < D_max"),
    (lambda: DynaTreeConfig(rho_stop=0.6, rho_deep=0.5), "rho_stop < rho_deep"),
    (lambda: DynaTreeConfig(a_star=1.0), "a_star"),
    (lambda: DynaTreeConfig(W=0), "window W"),
])
def test_bad_configs(make, msg):
    with pytest.raises(ValueError, match=msg):
        make()


def test_root_confidence_is_recorded(draft):
    p = prompts(1, seed=5)[0]
    t, _ = grow(draft, FixedTreeConfig(D=2, B=2, tau=0.0), p)
    assert t.root_conf == pytest.approx(float(torch.softmax(last_logits(draft, p).detach(), -1).max()), abs=1e-5)


def test_tree_storage_grows_with_the_tree_not_the_budget(draft):
    """A 6-node tree under a budget of 16384 allocates for the tree (the old code took seconds per call)."""
    t = Tree.new(3)
    assert t.tokens.numel() <= 64
    for _ in range(10):
        t, _ = add_level(t, torch.tensor([t.size - 1]), torch.tensor([7]), torch.tensor([-0.1]))
    assert t.size == 11 and t.is_chain and t.anc[10, :11].all()
    big, _ = grow(draft, FixedTreeConfig(D=2, B=2, tau=0.0, n_max=16384), prompts(1)[0])
    small, _ = grow(draft, FixedTreeConfig(D=2, B=2, tau=0.0, n_max=256), prompts(1)[0])
    assert torch.equal(big.tokens, small.tokens)
    assert big.anc.shape[0] == 7  # the tensors hold exactly the tree
