"""Sampling is lossless: the verification rules keep the target's law, shown by the empirical laws of the
committed tokens, and the same tests reject deliberately broken samplers (their power).

Statistic: Pearson's chi-square over the cells of the exact law (cells expected to hold fewer than 5 draws merged
into one), its p-value from the chi-square survival function. Every draw comes from seeded generators, so each test
is deterministic. A correct sampler must give p > 1e-3.

What the tests detect. Power is stated as the chi-square distance D = sum((q - p)^2 / p) of a sampled law q from
the target's law p that a test rejects with probability 0.9 at its threshold p < 1e-3: computed from the test's
draws and degrees of freedom (the noncentral chi-square, ``detectable_distance``), and checked against the numbers
below by ``test_the_docstring_states_the_computed_power``. A sampler that draws a fraction e of its tokens from a
law at distance 1 from the target's is at distance e^2.

Draws differ by tier (``tests/tiers.py``): the full tier's (CI, ``./test.sh --full``) first, the fast tier's in
brackets.

- The rules, on hand-built trees (chosen children, a drawn chain, drawn siblings and grandchildren), 20,000 draws
  [5,000], up to 5 degrees of freedom per law: D >= 0.0015 [0.006] (e >= 4% [8%]). The four broken rules
  (unverified, no residual, a descent into a child not drawn, siblings verified as if drawn with replacement) are
  rejected at p < 1e-9.
- A residual off by 5% [10%] of its mass (``residual_off``): with a target split evenly over two tokens and a draft
  that proposes the second 98% of the time, its exact distance is 0.000576 [0.0023]; 40,000 draws [10,000] (1
  degree of freedom) detect D >= 0.00052 [0.0021], and the test shows the mutant rejected and the correct rule
  passing.
- End to end, every registered method at T = 1 and at T = 0.7 with top-k 5 and top-p 0.9: a bigram target (its
  next token's law depends on the current token alone, so one long generation holds many draws of its transition
  law) and a draft that differs from it; 2,000 tokens [700] per generation, the transition law's 56 degrees of
  freedom at most (32 under top-k 5): D >= 0.031 [0.089] (0.025 [0.071]), e >= 18% [30%]. The trees reach depth 3
  and more. Each rule broken in one place (drawn children without the residual, drawn siblings verified as if
  drawn with replacement, chosen children descending without the draw) is rejected on the differing draft over
  2,000 tokens in both tiers, its distance estimated from its own statistic inside the region of power 0.9.
- Full tier only: the rules with 100,000 draws on peaked and flat laws: D >= 0.00029.

What they cannot detect. End to end, a bias below D = 0.031 [0.089]: a residual off by a few percent moves the
transition law far less (only tokens after a rejection change), which is why the rule tier tests the residual on
its own. A
bias in the target's law given more than the last token: the bigram cannot show it; the greedy exactness tests
compare every decoder's text with AR's token for token. Rare events: a rule wrong only in a tree shape that none
of these draws reaches.
"""
import copy

import pytest
import torch

from dynatree_lib import generate
from dynatree_lib.core import sampling as smp
from dynatree_lib.core.sampling import Sampling, sibling_rejection, target_probs, verify_sampled
from dynatree_lib.core.tree import Tree
from dynatree_lib.harness.setup.tiny import perturb, tiny_llama
from dynatree_lib.methods import REGISTRY

from ..tiers import FULL, tiered

OK, BROKEN = 1e-3, 1e-9
RULE_N = tiered(5_000, 20_000)  # draws of each rule's test on hand-built trees


def pearson(counts: dict, law: dict, n: int) -> tuple[float, int]:
    """Pearson's statistic of observed ``counts`` (cell -> draws) against ``law`` (cell -> probability) over ``n``
    draws, and its degrees of freedom: cells expected to hold fewer than 5 draws are merged into one; a draw
    outside the law's support makes the statistic infinite."""
    if any(v and c not in law for c, v in counts.items()):
        return float("inf"), max(len(law) - 1, 1)
    small = [c for c, p in law.items() if p * n < 5]
    cells = [c for c in law if c not in small]
    obs = [counts.get(c, 0) for c in cells] + [sum(counts.get(c, 0) for c in small)]
    exp = [law[c] * n for c in cells] + [sum(law[c] for c in small) * n]
    pairs = [(o, e) for o, e in zip(obs, exp) if e > 0]
    return sum((o - e) ** 2 / e for o, e in pairs), len(pairs) - 1


def chi2_sf(stat: float, df: int) -> float:
    """P(chi-square with ``df`` degrees of freedom > ``stat``)."""
    if df <= 0:
        return 0.0 if stat == float("inf") else 1.0
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def chi2_pvalue(counts: dict, law: dict, n: int) -> float:
    """Pearson's chi-square test of observed ``counts`` (cell -> draws) against ``law`` (cell -> probability)."""
    return chi2_sf(*pearson(counts, law, n))


# ---- power: what the tests can detect, computed from their sample sizes and threshold ---------------------------

def bisect(holds, lo: float, hi: float) -> float:
    """The least x in [lo, hi] where the monotone predicate ``holds`` turns true (to float precision)."""
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if holds(mid) else (mid, hi)
    return hi


def critical_value(df: int, alpha: float = OK) -> float:
    """The statistic above which a chi-square test with ``df`` degrees of freedom rejects at level ``alpha``."""
    return bisect(lambda c: chi2_sf(c, df) <= alpha, 0.0, 10.0 * df + 100.0)


def noncentral_sf(x: float, df: int, lam: float) -> float:
    """P(noncentral chi-square(df, lam) > x), a Poisson(lam / 2) mixture of central chi-squares: the law of
    Pearson's statistic for n draws from a law at chi-square distance lam / n from the tested one."""
    j = torch.arange(int(lam / 2 + 20 * (lam / 2 + 1) ** 0.5 + 50), dtype=torch.float64)
    weights = torch.distributions.Poisson(torch.tensor(max(lam / 2, 1e-300), dtype=torch.float64)).log_prob(j).exp()
    tails = torch.special.gammaincc((df + 2 * j) / 2, torch.tensor(x / 2, dtype=torch.float64))
    return float((weights * tails).sum())


def power(df: int, lam: float, alpha: float = OK) -> float:
    """The probability that the test rejects a law whose noncentrality (n times its distance) is ``lam``."""
    return noncentral_sf(critical_value(df, alpha), df, lam)


def detectable_distance(n: int, df: int, alpha: float = OK, at_power: float = 0.9) -> float:
    """The smallest chi-square distance sum((q - p)^2 / p) from the tested law p that n draws reject with
    probability ``at_power`` at level ``alpha``."""
    return bisect(lambda lam: power(df, lam, alpha) >= at_power, 0.0, 1000.0 + 10.0 * df) / n


def random_law(rows: int, V: int, peaked: bool, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, V, generator=g) * (3.0 if peaked else 0.5), -1)


# ---- the rules, on hand-built trees -----------------------------------------------------------------------------

V = 6
#   root -> 1, 3;   1 -> 0, 2;   3 -> 5   (chosen children: lookup copies, the top-k of trees cut by probability)
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


def no_residual(tree, p, g, vocab=None):
    """Broken: a rejected token replaced by a draw from the target, not from the residual max(0, p - q)."""
    path, bonus = verify_sampled(tree, p, g, vocab)
    if path.numel() < tree.size:
        bonus = int(smp.draw(p[path.numel() - 1], g))
    return path, bonus


def first_child(tree, p, g, vocab=None):
    """Broken: a drawn token outside the children still descends into the first child."""
    path, bonus = verify_sampled(tree, p, g, vocab)
    if path.numel() == 1 and tree.size > 1:
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
    assert min(walk_pvalues(p, RULE_N)) > OK


@pytest.mark.parametrize("peaked", [True, False], ids=["peaked", "flat"])
def test_a_drawn_chain_keeps_the_target_law(peaked):
    p, q = random_law(3, V, peaked, seed=2), random_law(2, V, peaked, seed=3)
    assert min(chain_pvalues(p, q, RULE_N)) > OK


@pytest.mark.parametrize("peaked", [True, False], ids=["peaked", "flat"])
def test_drawn_siblings_keep_the_target_law(peaked):
    assert min(sibling_pvalues(*sibling_laws(peaked, seed=20), RULE_N)) > OK


def test_the_rule_tests_catch_broken_samplers(monkeypatch):
    p, q = random_law(3, V, True, seed=2), random_law(2, V, True, seed=3)
    assert chain_pvalues(p, q, RULE_N, unverified)[0] < BROKEN
    assert chain_pvalues(p, q, RULE_N, no_residual)[0] < BROKEN
    assert walk_pvalues(random_law(6, V, True, seed=1), RULE_N, first_child)[1] < BROKEN
    monkeypatch.setattr(smp, "sibling_rejection", with_replacement)
    assert sibling_pvalues(*sibling_laws(True, seed=20), RULE_N)[0] < BROKEN


def test_siblings_a_hundred_nats_down_keep_the_target_law():
    """A confident draft at a low temperature: after its first sibling the next ones lie 110 and 115 nats down,
    where fp32 probabilities are 0; once the first is rejected, q must be renormalized over the rest."""
    logq = torch.full((V,), -130.0)
    logq[1], logq[3], logq[2] = 0.0, -110.0, -115.0
    p = torch.tensor([0.0, 0.5, 0.45, 0.05, 0.0, 0.0])
    tree = Tree.build([0, 1, 3, 2], [-1, 0, 0, 0], [0.0] * 4, [0.0] * 4, q=torch.log_softmax(logq, -1)[None],
                      q_row=[0, -1, -1, -1])  # drawn in the only order of non-negligible probability
    g = torch.Generator().manual_seed(0)
    first, _ = first_two([committed(tree, verify_sampled, p.expand(4, V), g) for _ in range(RULE_N)])
    assert chi2_pvalue(first, {x: float(p[x]) for x in range(V) if p[x] > 0}, RULE_N) > OK


# A target split evenly between two tokens and a draft that nearly always proposes the second: a rejection about half
# the time, and a residual (the first token alone) far from the target's law, so a residual's error shows plainly.
RESIDUAL_P, RESIDUAL_Q = torch.tensor([0.5, 0.5]), torch.tensor([0.02, 0.98])
RESIDUAL_EPS, RESIDUAL_N = (0.05, 40_000) if FULL else (0.1, 10_000)  # the mutant's error, and the draws that see it


def residual_off(eps: float):
    """Broken: when every sibling is rejected, a fraction ``eps`` of the tokens is drawn from the target's law
    instead of the residual (the residual off by ``eps`` of its mass)."""
    def rule(p, logq, drawn, g):
        hit, x = sibling_rejection(p, logq, drawn, g)
        if hit is None and float(torch.rand(1, generator=g)) < eps:
            x = int(smp.draw(p, g))
        return hit, x
    return rule


def residual_off_distance(p: torch.Tensor, q: torch.Tensor, eps: float) -> float:
    """The exact chi-square distance from p of the law ``residual_off(eps)`` commits for one child drawn from q:
    min(p, q) + beta ((1 - eps) r + eps p) = p + eps beta (p - r), with beta = 1 - sum(min(p, q)) the
    probability of a rejection and r the residual."""
    beta = 1 - torch.minimum(p, q).sum()
    r = (p - q).clamp(min=0) / beta
    return float(((eps * beta * (p - r)) ** 2 / p).sum())


def one_child_counts(p: torch.Tensor, q: torch.Tensor, n: int, rule=sibling_rejection, seed: int = 0) -> dict:
    """Counts of the token committed after one child drawn from q and verified against p by ``rule`` (speculative
    sampling's rule: the last step of the rule for any number of siblings)."""
    g, counts = torch.Generator().manual_seed(seed), {}
    for x in torch.multinomial(q, n, replacement=True, generator=g).tolist():
        token = rule(p, q.log(), [x], g)[1]
        counts[token] = counts.get(token, 0) + 1
    return counts


def test_a_residual_off_by_a_few_percent_is_caught():
    """The power computed, then shown: the mutant's exact distance (its residual off by 5%, 10% in the fast tier) is
    at least what RESIDUAL_N draws detect with probability 0.9; the correct rule passes and the mutant fails."""
    law = {x: float(RESIDUAL_P[x]) for x in range(2)}
    assert residual_off_distance(RESIDUAL_P, RESIDUAL_Q, RESIDUAL_EPS) >= detectable_distance(RESIDUAL_N, df=1)
    assert chi2_pvalue(one_child_counts(RESIDUAL_P, RESIDUAL_Q, RESIDUAL_N), law, RESIDUAL_N) > OK
    broken = one_child_counts(RESIDUAL_P, RESIDUAL_Q, RESIDUAL_N, residual_off(RESIDUAL_EPS))
    assert chi2_pvalue(broken, law, RESIDUAL_N) < OK


@pytest.mark.full
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
                                       (dict(top_p=1.5), "top_p"), (dict(top_k=0), "top_k"), (dict(top_k=2.5),
                                                                                              "top_k")])
def test_bad_sampling_settings_are_refused(bad, match, target):
    with pytest.raises(ValueError, match=match):
        generate(target, torch.arange(1, 5), 4, sampling=Sampling(**bad))


# ---- every method end to end: the transition law of a bigram target over long generations -----------------------

BIGRAM_V, N_TOKENS, START = 8, tiered(700, 2000), torch.tensor([1, 5])
N_MUTANT = 2000  # tokens of each generation that shows a broken rule caught, in both tiers
SETTINGS = {"t1": Sampling(1.0), "t0.7-top5-p0.9": Sampling(0.7, top_k=5, top_p=0.9)}
METHODS = [m for m, method in REGISTRY.items() if method.study.role != "peer"]  # peers (llama.cpp) run greedy only
DEEP = {"linear", "fixed_tree", "dynatree", "talon", "streaming_spec", "eagle3_tree", "opt_tree"}  # depth >= 3 here


def bigram_llama(seed: int, attention: bool = True):
    """A one-layer Llama over 8 tokens. Without attention (its output projection zeroed) the next token's law
    depends on the current token alone: a bigram model, whose sampled text is a Markov chain."""
    m = tiny_llama(seed=seed, vocab_size=BIGRAM_V, hidden_size=32, layers=1, heads=2, kv_heads=1,
                   max_positions=max(N_TOKENS, N_MUTANT) + 8, init_range=0.15)
    if not attention:
        with torch.no_grad():
            m.model.layers[0].self_attn.o_proj.weight.zero_()
    return m


@pytest.fixture(scope="module")
def bigram_pair():
    """The bigram target, and a draft that differs from it: the same network with noisy weights and its attention
    kept (its law depends on the whole context), which the target rejects often."""
    return bigram_llama(3, attention=False), perturb(bigram_llama(3), 0.3, seed=4)


@pytest.fixture
def one_thread():
    """Forwards this small run fastest on one thread (conftest's autouse fixture restores the count)."""
    torch.set_num_threads(1)


def bigram_config(name: str):
    """Each method's small test setting (``Study.test_config``): trees of depth 3 or more, windows that slide."""
    return REGISTRY[name].study.test_config


@torch.no_grad()
def transition_law(target, s: Sampling) -> torch.Tensor:
    """[V, V]: row a is the target's sampling law of the token after token a."""
    return target_probs(target(input_ids=torch.arange(BIGRAM_V)[:, None]).logits[:, 0], s)


def transition_statistic(tokens: list[int], law: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic of the transitions of ``START[-1]`` then ``tokens`` against ``law``, and its degrees of
    freedom: each row's counts against its own expected counts, summed over the rows (the test of a Markov
    chain's transition law)."""
    seq, rows = [int(START[-1])] + tokens, {}
    for a, b in zip(seq, seq[1:]):
        rows.setdefault(a, {})[b] = rows.setdefault(a, {}).get(b, 0) + 1
    stats = [pearson(c, {b: float(law[a, b]) for b in range(BIGRAM_V) if law[a, b] > 0}, sum(c.values()))
             for a, c in rows.items()]
    return sum(x for x, _ in stats), sum(df for _, df in stats)


def sample(pair, name: str, s: Sampling, draft=None, n: int = N_TOKENS, control=None):
    """One generation of ``n`` tokens (``control``: each tree sized by that controller), and the statistic and
    degrees of freedom of its transitions."""
    target, default_draft = pair
    res = generate(target, START, n, draft=draft or default_draft, method=bigram_config(name),
                   sampling=s, generator=torch.Generator().manual_seed(0), control=control)
    return (res, *transition_statistic(res.tokens, transition_law(target, s)))


def test_every_registered_method_is_covered():
    """The law test runs every registered method but the peers, each with its declared test setting: adding a
    method needs no edit here, and a method without a test setting fails here."""
    assert {"ar", "linear", "fixed_tree", "dynatree", "dynatree_cost", "talon", "streaming_spec", "hf_ar",
            "hf_assisted", "eagle3_tree", "opt_tree", "talon_hw"} <= set(METHODS)
    assert not [m for m in METHODS if m != "ar" and REGISTRY[m].study.test_config is None]
    assert all(isinstance(REGISTRY[m].study.test_config, REGISTRY[m].config) for m in METHODS if m != "ar")
    # peers decode greedily in their own processes: our sampler is not theirs to test
    assert {m for m, method in REGISTRY.items() if method.study.role == "peer"} <= {"llamacpp", "vllm"}


def test_the_settings_filter_and_the_target_is_a_bigram(bigram_pair):
    """Top-k and top-p each cut some row at T = 0.7 (so both filters are under test), and the target's law after
    a token does not depend on what came before it."""
    target, _ = bigram_pair
    s = SETTINGS["t0.7-top5-p0.9"]
    law, top_k, top_p = (transition_law(target, x) for x in (s, Sampling(0.7, top_k=5), Sampling(0.7, top_p=0.9)))
    assert not torch.equal(law > 0, top_k > 0) and not torch.equal(law > 0, top_p > 0)
    ids = torch.randint(0, BIGRAM_V, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        along = torch.softmax(target(input_ids=ids).logits[0], -1)
    assert torch.allclose(along, transition_law(target, Sampling(1.0))[ids[0]], atol=1e-6)


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("name", METHODS)
def test_every_method_samples_the_target_law(bigram_pair, one_thread, name, setting):
    res, stat, df = sample(bigram_pair, name, SETTINGS[setting])
    assert chi2_sf(stat, df) > OK, (stat, df)
    assert name not in DEEP or max(res.log.depth) >= 3


@pytest.mark.parametrize("name", ["dynatree", "talon"])
def test_drawn_trees_of_a_subset_head_with_a_lookup_sample_the_target_law(bigram_pair, one_thread, name):
    """The cpu draft's shape: a head over a subset of the vocabulary (its laws mapped back, -inf elsewhere),
    mixed with a context lookup (copied levels: chosen children)."""
    from dynatree_lib.core.drafts.lookup import LookupConfig, LookupRunner
    from dynatree_lib.core.engines.hf import HFRunner

    drf = LookupRunner(HFRunner(bigram_pair[1], torch.tensor([0, 1, 2, 3, 5, 7])), LookupConfig((0.5, 0.9)))
    _, stat, df = sample(bigram_pair, name, SETTINGS["t1"], draft=drf)
    assert chi2_sf(stat, df) > OK, (stat, df)


@pytest.mark.parametrize("name", ["linear", "dynatree", "talon", "dynatree_cost", "eagle3_tree", "opt_tree"])
def test_an_eagle3_head_samples_the_target_law(bigram_pair, one_thread, name):
    """A head on the target's own features over a subset of the vocabulary (its laws mapped back, -inf elsewhere):
    drawn trees, chains and chosen children keep the target's law."""
    from dynatree_lib.core.drafts.heads.eagle3_runner import Eagle3Runner
    from dynatree_lib.harness.setup.tiny import tiny_eagle3

    drf = Eagle3Runner(tiny_eagle3(bigram_pair[0], draft_vocab=6, seed=1, init_range=0.5))
    _, stat, df = sample(bigram_pair, name, SETTINGS["t1"], draft=drf)
    assert chi2_sf(stat, df) > OK, (stat, df)


@pytest.mark.parametrize("kind,name", [("medusa", "dynatree"), ("medusa", "fixed_tree"), ("hydra", "dynatree"),
                                       ("hydra", "talon")])
def test_medusa_and_hydra_heads_sample_the_target_law(bigram_pair, one_thread, kind, name):
    """Heads on the target's last hidden state, one per level (trees cut at three levels), over a subset of the
    vocabulary: drawn trees keep the target's law."""
    from dynatree_lib.core.drafts.heads.mlp_runner import MLPHeadRunner
    from dynatree_lib.harness.setup.tiny import tiny_mlp_heads

    drf = MLPHeadRunner(tiny_mlp_heads(bigram_pair[0], kind, heads=3, draft_vocab=6, seed=1, init_range=0.5))
    res, stat, df = sample(bigram_pair, name, SETTINGS["t1"], draft=drf)
    assert chi2_sf(stat, df) > OK, (stat, df)
    assert max(res.log.depth) == 3


@pytest.mark.parametrize("rule,method,where,mutant", [
    ("drawn children: the residual", "dynatree", "dynatree_lib.core.loop.verify_sampled", no_residual),
    ("drawn children: q without the rejected", "dynatree", "dynatree_lib.core.sampling.sibling_rejection",
     with_replacement),
    ("chosen children: the draw decides", "dynatree_cost", "dynatree_lib.core.loop.verify_sampled", first_child),
    ("chosen children of a reranked tree", "eagle3_tree", "dynatree_lib.core.loop.verify_sampled", first_child),
], ids=["no-residual", "with-replacement", "first-child", "first-child-eagle3-tree"])
def test_the_end_to_end_tests_catch_each_rule_broken(bigram_pair, one_thread, monkeypatch, rule, method, where,
                                                      mutant):
    """Each verification rule broken in one place, on the differing draft at T = 1: the test rejects it, and the
    mutant's distance estimated from its own statistic ((stat - df) / n) lies where the test's power is 0.9 or
    more."""
    monkeypatch.setattr(where, mutant)
    _, stat, df = sample(bigram_pair, method, SETTINGS["t1"], n=N_MUTANT)
    assert chi2_sf(stat, df) < OK and power(df, stat - df) >= 0.9, (rule, stat, df)


# ---- the stated power ----------------------------------------------------------------------------------------------

# (draws, degrees of freedom) -> the chi-square distance detected with probability 0.9, as the module docstring states
# for each tier (the fast tier's draws first)
STATED = {(20_000, 5): 0.0015, (40_000, 1): 0.00052, (2000, 56): 0.031, (2000, 32): 0.025, (100_000, 5): 0.00029,
          (5_000, 5): 0.006, (10_000, 1): 0.0021, (700, 56): 0.089, (700, 32): 0.071}


def test_the_docstring_states_the_computed_power():
    for (n, df), stated in STATED.items():
        assert detectable_distance(n, df) == pytest.approx(stated, rel=0.05), (n, df)
        assert f"{stated:g}" in __doc__, stated
    assert (RULE_N, 5) in STATED and (RESIDUAL_N, 1) in STATED and (N_TOKENS, 56) in STATED
    for eps, exact in ((0.05, 0.000576), (0.1, 0.0023)):
        assert residual_off_distance(RESIDUAL_P, RESIDUAL_Q, eps) == pytest.approx(exact, rel=0.01)
        assert f"{exact:g}" in __doc__


# ---- the rest of sampling, on a tiny model ---------------------------------------------------------------------

VOCAB, PROMPT = 8, torch.tensor([1, 5])


@pytest.fixture(scope="module")
def tiny_pair():
    t = tiny_llama(seed=3, vocab_size=VOCAB, hidden_size=32, layers=1, heads=2, kv_heads=1, max_positions=32,
                   init_range=0.15)
    d = perturb(tiny_llama(seed=3, vocab_size=VOCAB, hidden_size=32, layers=1, heads=2, kv_heads=1, max_positions=32,
                           init_range=0.15), 0.05, seed=4)
    return t, d


def method_config(name: str):
    from dynatree_lib import (DynaTreeConfig, Eagle3TreeConfig, FixedTreeConfig, LinearConfig, OptTreeConfig,
                              StreamingConfig, TalonConfig)
    from dynatree_lib.baselines.hf_generate import HFARConfig, HFAssistedConfig
    from dynatree_lib.core.policies.hw_talon import HardwareTalonConfig
    from dynatree_lib.extensions.cost_aware import CostAwareConfig

    return {"ar": None, "linear": LinearConfig(2), "fixed_tree": FixedTreeConfig(2, 2, 0.0, 8),
            "dynatree": DynaTreeConfig(D0=2, D_max=3, n_max=8), "dynatree_cost": CostAwareConfig(DynaTreeConfig(D0=2,
                                                                                                 D_max=3, n_max=8)),
            "talon": TalonConfig(0.1, 6, 2), "streaming_spec": StreamingConfig(2, 24, 2), "hf_ar": HFARConfig(),
            "hf_assisted": HFAssistedConfig(2), "eagle3_tree": Eagle3TreeConfig(2, 2, 6),
            "opt_tree": OptTreeConfig(6, 0.0, 3),
            "talon_hw": HardwareTalonConfig(((1, 1.0), (8, 1.1)), mu=0.1, K=2)}[name]


@pytest.mark.parametrize("name", ["linear", "fixed_tree", "streaming_spec"])
def test_a_draft_equal_to_the_target_has_every_drawn_token_accepted(tiny_pair, name):
    """Efficiency, which the law tests cannot see: a child drawn from q is accepted with probability
    min(1, p/q), so a draft whose law is the target's has its first drawn child accepted at every level, and
    every iteration commits its whole drafted depth plus the bonus token (the loop drafts no deeper than T
    allows). 22 positions stay inside StreamingLLM's window, so its case is linear drafting's through its engine."""
    target, _ = tiny_pair
    draft = copy.deepcopy(target)
    for seed in range(5):
        out = generate(target, PROMPT, 20, draft=draft, method=method_config(name), sampling=Sampling(1.0),
                       generator=torch.Generator().manual_seed(seed))
        assert out.log.accepted == out.log.depth and sum(out.log.accepted) + out.iterations == 20, (name, seed)


def test_sampling_is_reproducible_from_the_seed(tiny_pair):
    target, draft = tiny_pair
    for name in ("ar", "linear", "dynatree", "hf_assisted"):
        a, b = (generate(target, PROMPT, 12, draft=draft, method=method_config(name), sampling=Sampling(1.0),
                         generator=torch.Generator().manual_seed(7)).tokens for _ in range(2))
        assert a == b, name


def test_tree_policies_draw_their_children_and_the_extension_chooses_them(tiny_pair):
    """When sampling, a tree policy gives each node as many children as it would rank (the count comes from the
    draft's law, not from the draws), drawn without replacement; the cost-aware extension, EAGLE-3's tree and
    OPT-Tree, which cut trees by their nodes' probabilities, keep their top-k children."""
    from dynatree_lib.core.drafter import DraftState, draft_tree
    from dynatree_lib.core.engines.hf import as_runner

    target, draft = tiny_pair
    s, g = Sampling(1.0), torch.Generator().manual_seed(5)
    for name, drawn in (("fixed_tree", True), ("dynatree", True), ("talon", True), ("dynatree_cost", False),
                        ("eagle3_tree", False), ("opt_tree", False)):
        trees = []
        for sampled in (True, False):
            policy = method_config(name).policy()
            policy.sampled = policy.sampled and sampled
            runner = as_runner(draft)
            runner.reset()
            trees.append(draft_tree(runner, DraftState(), PROMPT, policy, max_depth=3, sampling=s, generator=g)[0])
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
