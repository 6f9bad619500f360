import torch

from dynatree_lib.core.engines.runner import additive_mask
from dynatree_lib.core.tree import Tree, select_path

from ..conftest import add_level

MIN = torch.finfo(torch.float32).min


def example_tree() -> Tree:
    """root(5) -> a(7), b(8);  a -> c(9), d(10);  c -> e(11)"""
    t = Tree.new(5)
    t, idx = add_level(t, torch.tensor([0, 0]), torch.tensor([7, 8]), torch.log(torch.tensor([0.6, 0.3])))
    a, b = idx.tolist()
    t, idx = add_level(t, torch.tensor([a, a]), torch.tensor([9, 10]), torch.log(torch.tensor([0.5, 0.4])))
    c, d = idx.tolist()
    t, _ = add_level(t, torch.tensor([c]), torch.tensor([11]), torch.log(torch.tensor([0.9])))
    return t


def test_bfs_layout_and_ancestors():
    t = example_tree()
    assert t.tokens.tolist() == [5, 7, 8, 9, 10, 11]
    assert t.parents.tolist() == [-1, 0, 0, 1, 1, 3]
    assert t.depth.tolist() == [0, 1, 1, 2, 2, 3]
    assert (t.parents[1:] < torch.arange(1, 6)).all()
    assert t.anc[5].nonzero().squeeze(1).tolist() == [0, 1, 3, 5]
    assert t.anc[2].nonzero().squeeze(1).tolist() == [0, 2]
    assert torch.allclose(t.cum_logp[5].exp(), torch.tensor(0.6 * 0.5 * 0.9))
    assert t.levels == 3 and not t.is_chain and t.n_drafted == 5


def test_chain_flag():
    t = Tree.new(1)
    for i in range(3):
        t, _ = add_level(t, torch.tensor([i]), torch.tensor([i + 2]), torch.zeros(1))
    assert t.is_chain
    t2 = Tree.new(1)
    t2, _ = add_level(t2, torch.tensor([0, 0]), torch.tensor([2, 3]), torch.zeros(2))
    assert not t2.is_chain


def test_attention_mask_prefix_and_ancestors():
    t = example_tree()
    m = additive_mask(t.anc, tree_start=3, total=9, dtype=torch.float32)
    assert m.shape == (6, 9) and m.dtype == torch.float32
    assert (m[:, :3] == 0).all()                      # everyone sees the prefix
    allowed = m[:, 3:] == 0
    assert torch.equal(allowed, t.anc)
    assert (m[:, 3:][~t.anc] == MIN).all()
    # e (node 5) sees root, a, c, itself; not b or d
    assert allowed[5].nonzero().squeeze(1).tolist() == [0, 1, 3, 5]
    assert additive_mask(t.anc, 2, 8, torch.float16).dtype == torch.float16


def test_select_path_longest_accepted():
    t = example_tree()
    nxt = torch.zeros(6, dtype=torch.long)
    nxt[0], nxt[1], nxt[3], nxt[5] = 7, 9, 11, 42   # root->a->c->e accepted, bonus 42
    path = select_path(t, nxt)
    assert path.tolist() == [0, 1, 3, 5]
    assert nxt[path[-1]].item() == 42


def test_select_path_branch_and_rejection():
    t = example_tree()
    nxt = torch.full((6,), 99, dtype=torch.long)
    nxt[0], nxt[1] = 7, 10                            # root->a->d
    assert select_path(t, nxt).tolist() == [0, 1, 4]
    nxt[0] = 8                                        # only b matches
    assert select_path(t, nxt).tolist() == [0, 2]
    nxt[0] = 50                                       # nothing matches: root only, bonus = nxt[0]
    assert select_path(t, nxt).tolist() == [0]


def test_descendant_of_rejected_node_is_not_accepted():
    t = example_tree()
    nxt = torch.full((6,), 99, dtype=torch.long)
    nxt[0], nxt[3] = 8, 11  # e's parent chain a->c is wrong at a, even though e matches c's prediction
    assert select_path(t, nxt).tolist() == [0, 2]


def test_build_equals_growing_level_by_level():
    """``Tree.build`` (the drafter's one-shot constructor) gives the tree ``add`` grows, and its ancestor
    bits stay right past one 62-bit word."""
    t = Tree.new(5)
    t, idx = add_level(t, torch.tensor([0, 0]), torch.tensor([7, 8]), torch.log(torch.tensor([0.6, 0.3])))
    a, b = idx.tolist()
    t, _ = add_level(t, torch.tensor([a, a, b]), torch.tensor([9, 10, 11]), torch.log(torch.tensor([0.5, 0.4, 0.9])))
    u = Tree.build(t.tokens.tolist(), t.parents.tolist(), t.logp.tolist(), t.cum_logp.tolist())
    for f in ("tokens", "parents", "depth", "logp", "cum_logp", "anc"):
        assert torch.equal(getattr(u, f), getattr(t, f)), f
    assert (u.size, u.is_chain, u.levels) == (t.size, t.is_chain, t.levels)
    n = 130
    chain = Tree.build(list(range(n)), list(range(-1, n - 1)), [0.0] * n, [0.0] * n)
    assert chain.is_chain and chain.levels == n - 1 and torch.equal(chain.anc, torch.ones(n, n,
                                                                    dtype=torch.bool).tril())
