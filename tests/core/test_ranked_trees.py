"""The trees of EAGLE-3 (EAGLE-2's algorithm) and OPT-Tree, drafted by our level-batched drafter from hand-made draft
distributions, against independent plain-Python versions of the authors' procedures and, for OPT-Tree, against the
best tree found by brute force."""
import math

import pytest
import torch

from dynatree_lib import Eagle3TreeConfig, OptTreeConfig
from dynatree_lib.core.drafter import DraftState, draft_tree
from dynatree_lib.core.policies.base import DraftPolicy
from dynatree_lib.core.engines.runner import Draft
from dynatree_lib.core.tree import Tree

ROOT = 0


class MarkovDraft(Draft):
    """A draft whose law after a token depends on that token alone: row x of ``logp`` [V, V] (hand-made)."""

    def __init__(self, logp: torch.Tensor):
        self.table, self.length = logp, 0

    def reset(self) -> None:
        self.length = 0

    def forward(self, tokens, positions, visible=None, tree_start=None, last_only=False):
        self.length += tokens.numel()
        rows = self.table[tokens]
        return rows[-1:] if last_only else rows

    def truncate(self, length: int) -> None:
        self.length = length


def markov_law(V: int, seed: int, sharp: float = 1.5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(V, V, generator=g) * sharp, -1)


def drafted(cfg, law: torch.Tensor) -> tuple[Tree, int]:
    """The tree ``cfg``'s policy drafts after the prompt [1, ROOT] (before ``trim``), and its draft forwards."""
    return draft_tree(MarkovDraft(law), DraftState(), torch.tensor([1, ROOT]), cfg.policy(), 100)


def paths(tree: Tree) -> dict[tuple, float]:
    """{token path below the root: path log-prob} of every drafted node."""
    out, tokens, parents = {}, tree.tokens.tolist(), tree.parents.tolist()
    for i in range(1, tree.size):
        path, u = [], i
        while u > 0:
            path.append(tokens[u])
            u = parents[u]
        out[tuple(path[::-1])] = float(tree.cum_logp[i])
    return out


def children(law: torch.Tensor, path: tuple, score: torch.Tensor, k: int) -> list[tuple[tuple, torch.Tensor]]:
    """A node's top-k children (sorted), each with its path log-prob summed in fp32 as the drafter sums it."""
    lp, tok = law[path[-1] if path else ROOT].topk(min(k, law.shape[1]))
    return [(path + (int(t),), score + v) for v, t in zip(lp, tok)]


def best(nodes: list[tuple[tuple, torch.Tensor]], n: int) -> list[tuple[tuple, torch.Tensor]]:
    return sorted(nodes, key=lambda x: -float(x[1]))[:n]


# ---- EAGLE-3 (EAGLE-2's algorithm) ---------------------------------------------------------------------------------

def eagle_reference(law: torch.Tensor, depth: int, k: int, total_tokens: int) -> tuple[set, int]:
    """SafeAILab/EAGLE's ``topK_genrate`` over paths: the root's top-k children grow; ``depth`` times every grown node
    gets its top-k children and the level's top-k grow; the ``total_tokens - 1`` best of all are kept. Returns the
    kept paths and the draft forwards."""
    grown = children(law, (), torch.tensor(0.0), k)
    every = list(grown)
    for _ in range(depth):
        level = [c for path, s in grown for c in children(law, path, s, k)]
        every += level
        grown = best(level, k)
    return {path for path, _ in best(every, total_tokens - 1)}, depth + 1


@pytest.mark.parametrize("depth,k,total", [(3, 3, 10), (2, 4, 7), (4, 2, 6), (0, 3, 3), (3, 1, 2)])
def test_eagle_keeps_the_top_k_of_each_level_and_the_best_total(depth, k, total):
    law = markov_law(6, seed=depth * 10 + k)
    cfg = Eagle3TreeConfig(depth=depth, top_k=k, total_tokens=total)
    tree, forwards = drafted(cfg, law)
    assert forwards == depth + 1 and tree.levels == depth + 1 and tree.n_drafted == k + depth * k * k
    for d in range(1, depth + 1):  # the level's top-k by path probability have children, k each, the rest none
        level = (tree.depth == d).nonzero().squeeze(1)
        top = level[tree.cum_logp[level].sort(descending=True, stable=True).indices[:k]]
        with_children = tree.parents[tree.depth == d + 1].unique()
        assert set(with_children.tolist()) == set(top.tolist())
        assert all(int((tree.parents == u).sum()) == k for u in with_children)
    cut = cfg.policy().trim(tree, forwards)
    assert cut.n_drafted == total - 1
    kept = set(paths(cut))
    assert kept == eagle_reference(law, depth, k, total)[0]
    assert all(p[:-1] in kept for p in kept if len(p) > 1)  # closed under ancestors
    dropped = [c for p, c in paths(tree).items() if p not in kept]
    assert not dropped or min(paths(cut).values()) >= max(dropped)


def test_eagle_defaults_are_eagle3s():
    cfg = Eagle3TreeConfig()
    assert (cfg.depth, cfg.top_k, cfg.total_tokens) == (7, 10, 60)  # EaModel.from_pretrained's
    policy = cfg.policy()
    assert policy.max_depth == 8 and policy.n_max == 710 and not policy.sampled


# ---- OPT-Tree ------------------------------------------------------------------------------------------------------

def opt_reference(law: torch.Tensor, n: int, delta: float, D: int) -> tuple[set, int]:
    """The authors' ``opt_classic/tree.py`` over paths: each layer is the top n of the children of every node of the
    layer before (all of them fed to the draft); a layer is expanded while the one before it raised the sum of the top
    n path probabilities by more than ``delta``, and never past depth D; the tree is the top n of every drafted node.
    Returns the tree's paths and the draft forwards."""
    layer = best(children(law, (), torch.tensor(0.0), n), n)
    every, forwards, gain_before = list(layer), 1, 0.0
    while True:
        e = sum(math.exp(float(s)) for _, s in best(every, n))
        if e - gain_before <= delta or len(layer[0][0]) >= D:
            return {path for path, _ in best(every, n)}, forwards
        gain_before, forwards = e, forwards + 1
        layer = best([c for path, s in layer for c in children(law, path, s, n)], n)
        every += layer


@pytest.mark.parametrize("n,delta,D", [(1, 0.0, 4), (4, 0.0, 4), (10, 0.0, 5), (10, 0.1, 6), (20, 0.5, 9),
                                       (6, 0.02, 3), (30, 0.0, 9)])
def test_opt_tree_is_the_authors_tree_from_fewer_fed_nodes(n, delta, D):
    """The same tree as the authors' procedure, which feeds every node of each layer; ours feeds only the current
    tree's, never more forwards."""
    for seed in range(4):
        law = markov_law(6, seed=seed, sharp=2.0)
        cfg = OptTreeConfig(n=n, delta=delta, D=D)
        tree, forwards = drafted(cfg, law)
        cut = cfg.policy().trim(tree, forwards)
        want, their_forwards = opt_reference(law, n, delta, D)
        assert set(paths(cut)) == want and cut.levels <= D
        assert forwards <= their_forwards and cut.n_drafted == min(n, len(paths(tree)))


def subtrees(law: torch.Tensor, n: int, D: int) -> list[frozenset]:
    """Every tree of n nodes (closed under ancestors, root excluded) of depth <= D over the draft's vocabulary."""
    V = law.shape[0]
    trees = {frozenset()}
    for _ in range(n):
        trees = {t | {c} for t in trees for c in [(x,) for x in range(V)] + [p + (x,) for p in t for x in range(V)]
                 if c not in t and len(c) <= D}
    return list(trees)


def expected_accepted(law: torch.Tensor, tree) -> float:
    """E[A]: the sum over the nodes of their path probabilities."""
    p = law.double().exp()
    return sum(math.prod(float(p[a, b]) for a, b in zip((ROOT,) + path[:-1], path)) for path in tree)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_opt_tree_maximizes_expected_acceptance(n):
    """With delta = 0 the tree is the best n-node tree of depth <= D, found by brute force over every such tree."""
    for seed in range(3):
        law = markov_law(3, seed=100 + seed, sharp=2.0)
        cfg = OptTreeConfig(n=n, delta=0.0, D=3)
        tree, forwards = drafted(cfg, law)
        ours = expected_accepted(law, paths(cfg.policy().trim(tree, forwards)))
        brute = max(expected_accepted(law, t) for t in subtrees(law, n, 3))
        assert ours == pytest.approx(brute, rel=1e-5)


def test_opt_tree_stops_when_a_layer_gains_delta_or_less():
    """A layer gains at most 1 (its path probabilities sum to 1 at most): delta = 1 keeps the root's top n."""
    law = markov_law(6, seed=3)
    tree, forwards = drafted(OptTreeConfig(n=4, delta=1.0, D=9), law)
    assert forwards == 1 and tree.levels == 1 and tree.n_drafted == 4
    assert tree.tokens[1:].tolist() == law[ROOT].topk(4).indices.tolist()


def test_opt_tree_defaults_are_the_authors():
    cfg = OptTreeConfig()
    assert (cfg.n, cfg.delta, cfg.D) == (50, 0.5, 9)  # --nodes 50 --threshold 0.5 --max_depth 10 keeps 9 levels
    assert not cfg.policy().sampled


# ---- the pieces they share -----------------------------------------------------------------------------------------

def test_most_probable_is_closed_under_ancestors():
    """Ties go to the node drafted first, and a child whose log-prob rounds above 0 still follows its parent."""
    tree = Tree.build([9, 1, 2, 3, 4, 5], [-1, 0, 0, 1, 2, 3], [0.0, -1.0, -1.0, 1e-7, -0.5, -0.1],
                      [0.0, -1.0, -1.0, -1.0 + 1e-7, -1.5, -1.1])
    assert tree.most_probable(1).tokens.tolist() == [9, 1]
    assert tree.most_probable(2).tokens.tolist() == [9, 1, 2]
    assert tree.most_probable(3).tokens.tolist() == [9, 1, 2, 3]
    assert tree.most_probable(4).parents.tolist() == [-1, 0, 0, 1, 3]
    assert tree.most_probable(5) is tree


def test_the_level_hooks_default_to_drafting_every_level():
    from dynatree_lib.core.policies.base import DRAFT, Level

    assert DraftPolicy().next_level(Level([0.0, -1.0], [1], 1, lambda: None)) == DRAFT


@pytest.mark.parametrize("make,msg", [
    (lambda: Eagle3TreeConfig(depth=-1), "depth must be"),
    (lambda: Eagle3TreeConfig(top_k=0), "top_k must be"),
    (lambda: Eagle3TreeConfig(total_tokens=1), "total_tokens"),
    (lambda: Eagle3TreeConfig(top_k=2.0), "must be an int"),
    (lambda: OptTreeConfig(n=0), "node budget n"),
    (lambda: OptTreeConfig(delta=-0.1), "delta must be"),
    (lambda: OptTreeConfig(D=0), "depth D"),
])
def test_bad_configs(make, msg):
    with pytest.raises(ValueError, match=msg):
        make()


def test_ties_go_to_the_node_drafted_first():
    """A flat draft (every token equally likely): which nodes grow and which are kept follows the drafting order."""
    flat = torch.full((4, 4), math.log(0.25))
    cfg = Eagle3TreeConfig(depth=2, top_k=2, total_tokens=6)
    tree, forwards = drafted(cfg, flat)  # level 2: two children under each of nodes 1, 2; the first two grow
    assert tree.parents[tree.depth == 3].unique().tolist() == [3, 4]
    assert cfg.policy().trim(tree, forwards).parents.tolist() == [-1, 0, 0, 1, 1, 2]
    cfg = OptTreeConfig(n=5, delta=0.0, D=3)
    tree, forwards = drafted(cfg, flat)  # layer 2: the first five of 16 equal children; node 5 alone joins the tree
    assert tree.parents[tree.depth == 2].tolist() == [1, 1, 1, 1, 2] and forwards == 3
    assert cfg.policy().trim(tree, forwards).parents.tolist() == [-1, 0, 0, 0, 0, 1]
