"""Sampling is lossless: the verification rules keep the target's law, shown by the empirical laws of the
committed tokens, and the same tests reject deliberately broken samplers (their power).

Statistic: Pearson's chi-square over the cells of the exact law (cells expected to hold fewer than 5 draws
merged into one), its p-value from the chi-square survival function. Every draw comes from seeded generators, so
each test is deterministic. A correct sampler must give p > 1e-3; a broken one p < 1e-9.

Fast tier (``./test.sh``): the rule on chosen children, on a drawn chain and on drawn siblings and grandchildren,
20,000 draws each, and every method end to end at temperature 1 (the tree methods draw their children there).
Slow tier (``pytest -m slow``): the same with 100,000 draws on peaked and flat laws, and every method at
temperature 0.7 with top-k and with top-p.
"""
import copy
import itertools

import pytest
import torch

from dynatree_lib import generate
from dynatree_lib.core import sampling as smp
from dynatree_lib.core.sampling import Sampling, target_probs, verify_sampled
from dynatree_lib.core.tree import Tree
from dynatree_lib.harness.tiny import perturb, tiny_llama
from dynatree_lib.methods import REGISTRY

OK, BROKEN = 1e-3, 1e-9


def chi2_pvalue(counts: dict, law: dict, n: int) -> float:
    """Pearson's chi-square test of observed ``counts`` (cell -> draws) against ``law`` (cell -> probability)."""
    small = [c for c, p in law.items() if p * n < 5]
    cells = [c for c in law if c not in small]
    obs = [counts.get(c, 0) for c in cells] + [sum(counts.get(c, 0) for c in small)]
    exp = [law[c] * n for c in cells] + [sum(law[c] for c in small) * n]
    extra = sum(v for c, v in counts.items() if c not in law)  # draws outside the law's support
    if extra:
        return 0.0
    pairs = [(o, e) for o, e in zip(obs, exp) if e > 0]
    stat = sum((o - e) ** 2 / e for o, e in pairs)
    df = len(pairs) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64)))


def random_law(rows: int, V: int, peaked: bool, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, V, generator=g) * (3.0 if peaked else 0.5), -1)


# ---- the rules, on hand-built trees -----------------------------------------------------------------------------

V = 6
#   root -> 1, 3;   1 -> 0, 2;   3 -> 5   (chosen children: lookup copies, the cost-aware extension's top-k)
TREE = Tree.build([4, 1, 3, 0, 2, 5], [-1, 0, 0, 1, 1, 2], [0.0] * 6, [0.0] * 6)
CHILD_ROW = {1: 1, 3: 2}  # first token -> the node whose law gives the second


def committed(tree: Tree, rule, p: torch.Tensor, g: torch.Generator) -> list[int]:
    """The tokens one verification of ``tree`` commits: the accepted path's, then the bonus token."""
    path, bonus = rule(tree, p, g)
    return tree.tokens[path[1:]].tolist() + [bonus]


def first_two(outs: list[list[int]], joint: bool = True) -> tuple[dict, dict]:
    """Counts of the first committed token, and of the second where there is one (keyed with the first if
    ``joint``)."""
    first, second = {}, {}
    for out in outs:
        first[out[0]] = first.get(out[0], 0) + 1
        if len(out) > 1:
            key = (out[0], out[1]) if joint else out[1]
            second[key] = second.get(key, 0) + 1
    return first, second


def walk_draws(p: torch.Tensor, n: int, rule=verify_sampled, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return first_two([committed(TREE, rule, p, g) for _ in range(n)])


def walk_pvalues(p: torch.Tensor, n: int, rule=verify_sampled) -> tuple[float, float]:
    """Chosen children: p-values of the first committed token against p[0], and of the second given the first
    (when the first is a child, so the iteration goes on) against that child's law."""
    first, second = walk_draws(p, n, rule)
    law1 = {x: float(p[0, x]) for x in range(V)}
    n2 = sum(second.values())
    law2 = {(x, y): float(p[0, x] * p[CHILD_ROW[x], y]) / float(sum(p[0, c] for c in CHILD_ROW))
            for x in CHILD_ROW for y in range(V)}
    return chi2_pvalue(first, law1, n), chi2_pvalue(second, law2, n2)


def chain_draws(p: torch.Tensor, q: torch.Tensor, n: int, rule=verify_sampled, seed: int = 0):
    """A two-token chain drawn from q's rows (the second independent of the first, as is p's second row), verified."""
    g = torch.Generator().manual_seed(seed)
    outs = []
    for _ in range(n):
        x = [int(torch.multinomial(q[i], 1, generator=g)) for i in range(2)]
        outs.append(committed(Tree.build([0] + x, [-1, 0, 1], [0.0] * 3, [0.0] * 3, q=q.log(), q_row=[0, 1, -1]),
                              rule, p, g))
    return first_two(outs, joint=False)


def chain_pvalues(p, q, n, rule=verify_sampled) -> tuple[float, float]:
    first, second = chain_draws(p, q, n, rule)
    return (chi2_pvalue(first, {x: float(p[0, x]) for x in range(V)}, n),
            chi2_pvalue(second, {x: float(p[1, x]) for x in range(V)}, sum(second.values())))


SIBLINGS, GRANDCHILDREN = 3, 2


def sibling_draws(p1: torch.Tensor, p2: torch.Tensor, q1: torch.Tensor, q2: torch.Tensor, n: int,
                  rule=verify_sampled, seed: int = 0):
    """Drawn trees: the root's 3 children drawn without replacement from q1, each child x's 2 children from
    q2[x]; the target's law is p1 at the root and p2[x] after x."""
    g = torch.Generator().manual_seed(seed)
    outs = []
    for _ in range(n):
        kids = torch.multinomial(q1, SIBLINGS, replacement=False, generator=g).tolist()
        grand = [torch.multinomial(q2[x], GRANDCHILDREN, replacement=False, generator=g).tolist() for x in kids]
        tokens = [0] + kids + [y for ys in grand for y in ys]
        parents = [-1] + [0] * SIBLINGS + [1 + i for i in range(SIBLINGS) for _ in range(GRANDCHILDREN)]
        q = torch.cat([q1[None], q2[kids]]).log()
        q_row = [0] + [1 + i for i in range(SIBLINGS)] + [-1] * (SIBLINGS * GRANDCHILDREN)
        p = torch.cat([p1[None], p2[kids], p2[:SIBLINGS * GRANDCHILDREN]])  # rows after the grandchildren: unused
        tree = Tree.build(tokens, parents, [0.0] * len(tokens), [0.0] * len(tokens), q=q, q_row=q_row)
        outs.append(committed(tree, rule, p, g))
    return first_two(outs)


def sibling_pvalues(p1, p2, q1, q2, n, rule=verify_sampled) -> tuple[float, float]:
    """p-values of the first token against p1 and of the second given the first against p2[first] (expected
    counts from the observed first tokens: a conservative test, its degrees of freedom not reduced per group)."""
    first, second = sibling_draws(p1, p2, q1, q2, n, rule)
    n2 = sum(second.values())
    given = {x: sum(c for (a, _), c in second.items() if a == x) for x in range(V)}
    law2 = {(x, y): given[x] / n2 * float(p2[x, y]) for x in range(V) if given[x] for y in range(V)}
    return chi2_pvalue(first, {x: float(p1[x]) for x in range(V)}, n), chi2_pvalue(second, law2, n2)


def unverified(tree, p, g, vocab=None):
    """Broken: the draft's first path committed as it is."""
    path = [0]
    while (tree.parents == path[-1]).any():
        path.append(int((tree.parents == path[-1]).nonzero()[0]))
    return torch.tensor(path), int(smp.draw(p[path[-1]], g))


def no_residual(tree, p, g):
    """Broken: a rejected token replaced by a draw from the target, not from the residual max(0, p - q)."""
    path, bonus = verify_sampled(tree, p, g)
    if path.numel() < tree.size:
        bonus = int(smp.draw(p[path.numel() - 1], g))
    return path, bonus


def first_child(tree, p, g):
    """Broken: a drawn token outside the children still descends into the first child."""
    path, bonus = verify_sampled(tree, p, g)
    if path.numel() == 1:
        return torch.tensor([0, 1]), int(smp.draw(p[1], g))
    return path, bonus


def with_replacement(p, logq, drawn, g):
    """Broken: siblings verified as if drawn with replacement (a rejected sibling's mass left in q)."""
    u = torch.rand(len(drawn), generator=g).tolist()
    q = torch.softmax(logq.double(), -1)
    p = p.double()
    for i, x in enumerate(drawn):
        if u[i] * float(q[x]) < float(p[x]):
            return i, x
        p = (p - q).clamp(min=0)
        p = p / p.sum()
    return None, int(smp.draw(p, g))


def sibling_laws(peaked: bool, seed: int):
    return (random_law(1, V, peaked, seed)[0], random_law(V, V, peaked, seed + 1),
            random_law(1, V, peaked, seed + 2)[0], random_law(V, V, peaked, seed + 3))


@pytest.mark.parametrize("peaked", [True, False], ids=["peaked", "flat"])
def test_chosen_children_keep_the_target_law(peaked):
    p = random_law(6, V, peaked, seed=1)
    assert min(walk_pvalues(p, 20_000)) > OK


@pytest.mark.parametrize("peaked", [True, False], ids=["peaked", "flat"])
def test_a_drawn_chain_keeps_the_target_law(peaked):
    p, q = random_law(3, V, peaked, seed=2), random_law(2, V, peaked, seed=3)
    assert min(chain_pvalues(p, q, 20_000)) > OK


@pytest.mark.parametrize("peaked", [True, False], ids=["peaked", "flat"])
def test_drawn_siblings_keep_the_target_law(peaked):
    assert min(sibling_pvalues(*sibling_laws(peaked, seed=20), 20_000)) > OK


def test_the_rule_tests_catch_broken_samplers(monkeypatch):
    p, q = random_law(3, V, True, seed=2), random_law(2, V, True, seed=3)
    assert chain_pvalues(p, q, 20_000, unverified)[0] < BROKEN
    assert chain_pvalues(p, q, 20_000, no_residual)[0] < BROKEN
    assert walk_pvalues(random_law(6, V, True, seed=1), 20_000, first_child)[1] < BROKEN
    monkeypatch.setattr(smp, "sibling_rejection", with_replacement)
    assert sibling_pvalues(*sibling_laws(True, seed=20), 20_000)[0] < BROKEN


def test_siblings_a_hundred_nats_down_keep_the_target_law():
    """A confident draft at a low temperature: after its first sibling the next ones lie 110 and 115 nats down,
    where fp32 probabilities are 0; once the first is rejected, q must be renormalized over the rest."""
    logq = torch.full((V,), -130.0)
    logq[1], logq[3], logq[2] = 0.0, -110.0, -115.0
    p = torch.tensor([0.0, 0.5, 0.45, 0.05, 0.0, 0.0])
    tree = Tree.build([0, 1, 3, 2], [-1, 0, 0, 0], [0.0] * 4, [0.0] * 4, q=torch.log_softmax(logq, -1)[None],
                      q_row=[0, -1, -1, -1])  # drawn in the only order of non-negligible probability
    g = torch.Generator().manual_seed(0)
    first, _ = first_two([committed(tree, verify_sampled, p.expand(4, V), g) for _ in range(20_000)])
    assert chi2_pvalue(first, {x: float(p[x]) for x in range(V) if p[x] > 0}, 20_000) > OK


@pytest.mark.slow
@pytest.mark.parametrize("peaked", [True, False], ids=["peaked", "flat"])
def test_rules_keep_the_target_law_over_100k_draws(peaked):
    p = random_law(6, V, peaked, seed=11)
    assert min(walk_pvalues(p, 100_000)) > OK
    p, q = random_law(3, V, peaked, seed=12), random_law(2, V, peaked, seed=13)
    assert min(chain_pvalues(p, q, 100_000)) > OK
    assert chain_pvalues(p, q, 100_000, no_residual)[0] < BROKEN
    assert min(sibling_pvalues(*sibling_laws(peaked, seed=30), 100_000)) > OK


def test_target_probs_filters_as_transformers_does():
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 2
    for s in (Sampling(0.7), Sampling(1.0, top_k=5), Sampling(1.3, top_p=0.8), Sampling(0.9, top_k=10, top_p=0.5)):
        x = TemperatureLogitsWarper(s.temperature)(None, logits.clone())
        if s.top_k:
            x = TopKLogitsWarper(s.top_k)(None, x)
        if s.top_p:
            x = TopPLogitsWarper(s.top_p)(None, x)
        assert torch.allclose(target_probs(logits, s), torch.softmax(x, -1), atol=1e-6), s


@pytest.mark.parametrize("bad,match", [(dict(temperature=-0.1), "temperature must be"), (dict(top_p=0.0), "top_p"),
                                       (dict(top_p=1.5), "top_p"), (dict(top_k=0), "top_k"), (dict(top_k=2.5), "top_k")])
def test_bad_sampling_settings_are_refused(bad, match, target):
    with pytest.raises(ValueError, match=match):
        generate(target, torch.arange(1, 5), 4, **bad)


# ---- every method end to end: the joint law of the first three tokens of a tiny model ---------------------------

VOCAB, PROMPT, T = 8, torch.tensor([1, 5]), 3


@pytest.fixture(scope="module")
def tiny_pair():
    t = tiny_llama(seed=3, vocab_size=VOCAB, hidden_size=32, layers=1, heads=2, kv_heads=1, max_positions=32,
                   init_range=0.15)
    d = perturb(tiny_llama(seed=3, vocab_size=VOCAB, hidden_size=32, layers=1, heads=2, kv_heads=1, max_positions=32,
                           init_range=0.15), 0.05, seed=4)
    return t, d


@torch.no_grad()
def exact_law(target, s: Sampling) -> dict:
    """P(x1, x2, x3) of the target's sampling law, enumerated."""
    law = {}
    for seq in itertools.product(range(VOCAB), repeat=T):
        p = 1.0
        for i in range(T):
            ids = torch.cat([PROMPT, torch.tensor(seq[:i], dtype=torch.long)])[None]
            p *= float(target_probs(target(input_ids=ids).logits[0, -1], s)[seq[i]])
        if p > 0:
            law[seq] = p
    return law


def method_config(name: str):
    from dynatree_lib import DynaTreeConfig, FixedTreeConfig, LinearConfig, StreamingConfig, TalonConfig
    from dynatree_lib.baselines.hf_generate import HFARConfig, HFAssistedConfig
    from dynatree_lib.extensions.cost_aware import CostAwareConfig

    return {"ar": None, "linear": LinearConfig(2), "fixed_tree": FixedTreeConfig(2, 2, 0.0, 8),
            "dynatree": DynaTreeConfig(D0=2, D_max=3, n_max=8), "dynatree_cost": CostAwareConfig(DynaTreeConfig(D0=2, D_max=3, n_max=8)),
            "talon": TalonConfig(0.1, 6, 2), "streaming_spec": StreamingConfig(2, 24, 2), "hf_ar": HFARConfig(),
            "hf_assisted": HFAssistedConfig(2)}[name]


def empirical(target, draft, name: str, s: Sampling, n: int, seed: int = 0) -> dict:
    g, counts = torch.Generator().manual_seed(seed), {}
    cfg = method_config(name)
    for _ in range(n):
        out = tuple(generate(target, PROMPT, T, draft=draft, method=cfg, temperature=s.temperature, top_k=s.top_k,
                             top_p=s.top_p, generator=g).tokens)
        counts[out] = counts.get(out, 0) + 1
    return counts


METHODS = [m for m, method in REGISTRY.items() if method.role != "peer"]  # peers (llama.cpp) run greedy only


def test_every_registered_method_is_covered():
    assert set(METHODS) == {"ar", "linear", "fixed_tree", "dynatree", "dynatree_cost", "talon", "streaming_spec",
                            "hf_ar", "hf_assisted"}
    assert {m for m, method in REGISTRY.items() if method.role == "peer"} <= {"llamacpp"}


@pytest.mark.parametrize("name", METHODS)
def test_every_method_samples_the_target_law(tiny_pair, name):
    target, draft = tiny_pair
    s = Sampling(1.0)
    assert chi2_pvalue(empirical(target, draft, name, s, 2000), exact_law(target, s), 2000) > OK


@pytest.mark.parametrize("name", ["dynatree", "talon"])
def test_drawn_trees_of_a_subset_head_with_a_lookup_sample_the_target_law(tiny_pair, name):
    """The cpu draft's shape: a head over a subset of the vocabulary (its laws mapped back, -inf elsewhere),
    mixed with a context lookup."""
    from dynatree_lib.core.lookup import LookupConfig, LookupRunner
    from dynatree_lib.core.runners import HFRunner

    target, draft = tiny_pair
    drf = LookupRunner(HFRunner(draft, torch.tensor([0, 1, 2, 3, 5, 7])), LookupConfig((0.5, 0.9)))
    s = Sampling(1.0)
    assert chi2_pvalue(empirical(target, drf, name, s, 2000), exact_law(target, s), 2000) > OK


@pytest.mark.parametrize("name", ["linear", "dynatree", "talon", "dynatree_cost"])
def test_an_eagle3_head_samples_the_target_law(tiny_pair, name):
    """A head on the target's own features over a subset of the vocabulary (its laws mapped back, -inf elsewhere):
    drawn trees, chains and chosen children keep the target's law."""
    from dynatree_lib.core.eagle3_runner import Eagle3Runner
    from dynatree_lib.harness.tiny import tiny_eagle3

    target, _ = tiny_pair
    drf = Eagle3Runner(tiny_eagle3(target, draft_vocab=6, seed=1, init_range=0.5))
    s = Sampling(1.0)
    assert chi2_pvalue(empirical(target, drf, name, s, 2000), exact_law(target, s), 2000) > OK


def test_the_end_to_end_test_catches_a_broken_sampler(tiny_pair, monkeypatch):
    target, draft = tiny_pair
    s = Sampling(1.0)
    monkeypatch.setattr("dynatree_lib.core.decoding.verify_sampled", unverified)
    assert chi2_pvalue(empirical(target, draft, "linear", s, 2000), exact_law(target, s), 2000) < BROKEN


@pytest.mark.slow
@pytest.mark.parametrize("s", [Sampling(0.7), Sampling(0.7, top_k=3), Sampling(1.0, top_p=0.8)],
                         ids=["t0.7", "t0.7-top3", "t1-p0.8"])
@pytest.mark.parametrize("name", METHODS)
def test_every_method_samples_the_target_law_tempered_and_filtered(tiny_pair, name, s):
    target, draft = tiny_pair
    assert chi2_pvalue(empirical(target, draft, name, s, 4000), exact_law(target, s), 4000) > OK


@pytest.mark.parametrize("name", ["linear", "fixed_tree", "streaming_spec"])
def test_a_draft_equal_to_the_target_has_every_drawn_token_accepted(tiny_pair, name):
    """Efficiency, which the law tests cannot see: a child drawn from q is accepted with probability
    min(1, p/q), so a draft whose law is the target's has its first drawn child accepted at every level, and
    every iteration commits its whole drafted depth plus the bonus token (the loop drafts no deeper than T
    allows). 22 positions stay inside StreamingLLM's window, so its case is linear drafting's through its engine."""
    target, _ = tiny_pair
    draft = copy.deepcopy(target)
    for seed in range(5):
        out = generate(target, PROMPT, 20, draft=draft, method=method_config(name), temperature=1.0,
                       generator=torch.Generator().manual_seed(seed))
        assert out.log.accepted == out.log.depth and sum(out.log.accepted) + out.iterations == 20, (name, seed)


def test_sampling_is_reproducible_from_the_seed(tiny_pair):
    target, draft = tiny_pair
    for name in ("ar", "linear", "dynatree", "hf_assisted"):
        a, b = (generate(target, PROMPT, 12, draft=draft, method=method_config(name), temperature=1.0,
                         generator=torch.Generator().manual_seed(7)).tokens for _ in range(2))
        assert a == b, name


def test_tree_policies_draw_their_children_and_the_extension_chooses_them(tiny_pair):
    """When sampling, a tree policy gives each node as many children as it would rank (the count comes from the
    draft's law, not from the draws), drawn without replacement; the cost-aware extension, which cuts trees by
    their nodes' probabilities, keeps its top-k children."""
    from dynatree_lib.core.drafting import DraftState, draft_tree
    from dynatree_lib.core.runners import as_runner

    target, draft = tiny_pair
    s, g = Sampling(1.0), torch.Generator().manual_seed(5)
    for name, drawn in (("fixed_tree", True), ("dynatree", True), ("talon", True), ("dynatree_cost", False)):
        trees = []
        for sampled in (True, False):
            policy = method_config(name).policy()
            policy.sampled = policy.sampled and sampled
            runner = as_runner(draft)
            runner.reset()
            trees.append(draft_tree(runner, DraftState(), PROMPT, policy, 3, s, g)[0])
        tree, top = trees
        assert (tree.q_row is not None and bool((tree.q_row >= 0).any())) == drawn, name
        assert (tree.parents == 0).sum() == (top.parents == 0).sum(), name
        for u in range(tree.size):
            kids = tree.tokens[tree.parents == u].tolist()
            assert len(set(kids)) == len(kids), name


def test_a_tree_with_drawn_children_cannot_be_cut():
    tree = Tree.build([0, 3, 1], [-1, 0, 0], [0.0] * 3, [0.0] * 3, q=random_law(1, V, True, 0).log(), q_row=[0, -1, -1])
    with pytest.raises(ValueError, match="cannot be cut"):
        tree.subset(torch.tensor([0, 1]))
