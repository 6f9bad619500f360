"""The draft's context lookup (lookup.py): only what gets drafted changes, so every decoder still equals
greedy AR (fp32) with it, on the eager and the fast path, with and without a subset head; the runner's
mixture is the teacher-forced one; bad weights and a missing lookup file are refused."""
import collections
import dataclasses
import json
import math

import pytest
import torch

from dynatree_lib import CostAwareConfig, DynaTreeConfig, FixedTreeConfig, LinearConfig, StreamingConfig, TalonConfig, generate
from dynatree_lib.core.loop import KV_MODES, speculative_decode
from dynatree_lib.core.drafter import DraftState, draft_tree
from dynatree_lib.core.engines.static import StaticRunner
from dynatree_lib.core.drafts.lookup import LookupConfig, LookupRunner, NGramIndex, mix, mix_rows
from dynatree_lib.harness.setup.paths import DRAFT_DIR
from dynatree_lib.harness.setup.weights import lookup_config
from dynatree_lib.core.engines.hf import HFRunner
from dynatree_lib.core.tree import copy_outcomes
from dynatree_lib.train.lookup_fit import LOOKUP_WEIGHTS, fit_weights, matched

from ..conftest import VOCAB, prompts

METHODS = {"linear_k4": LinearConfig(K=4), "fixed": FixedTreeConfig(D=5, B=3, tau=0.0, n_max=40),
           "dynatree": DynaTreeConfig(), "talon": TalonConfig(mu=0.2, N=8, K=3),
           "streaming": StreamingConfig(K=4, cache_size=128, n_sink=4)}
STRONG = LookupConfig((0.5, 0.9, 0.95, 0.99))


def looping(n: int, seed: int) -> list[torch.Tensor]:
    """Prompts that repeat a short random phrase (the lookup has matches to copy from) and random ones."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        phrase = torch.randint(0, VOCAB, (3 + i,), generator=g)
        out.append(torch.cat([torch.randint(0, VOCAB, (2,), generator=g), phrase.repeat(4)]))
    return out + prompts(n, seed=seed)


CASES = list(zip(looping(2, 5), [1, 12, 40, 48]))


def test_index_finds_the_longest_latest_match():
    idx = NGramIndex(4)
    idx.extend([1, 2, 3, 9, 1, 2, 3, 7, 5, 2, 3])
    assert idx.match([0, 1, 2, 3]) == (3, 7)      # (1, 2, 3) last followed by 7
    assert idx.match([5, 2, 3]) == (2, 7)         # (5, 2, 3) unseen with a successor; (2, 3) -> 7 (latest)
    assert idx.match([4, 4]) == (0, -1)
    assert idx.match([]) == (0, -1)


def test_mixture_rows_are_distributions():
    logits = torch.randn(3, 10)
    out = mix_rows(logits, torch.tensor([2, 5, 0]), torch.tensor([0.0, 0.5, 0.99]))
    assert torch.allclose(out.exp().sum(-1), torch.ones(3), atol=1e-5)
    assert torch.allclose(out[0], torch.log_softmax(logits[0], -1), atol=1e-6)
    assert out[2].argmax() == 0 and out[1, 5].exp() >= 0.5


@pytest.mark.parametrize("bad", [(), (1.0,), (-0.1,), (float("nan"),), (True,), [0.5], (0.5,) * 65])
def test_bad_weights_are_refused(bad):
    with pytest.raises(ValueError, match="lookup weight"):
        LookupConfig(bad)


@pytest.mark.parametrize("kv_mode", KV_MODES)
@pytest.mark.parametrize("subset", [False, True])
@pytest.mark.parametrize("name", list(METHODS))
def test_lookup_draft_equals_ar_eager(target, draft, name, subset, kv_mode):
    v = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(1))[: VOCAB // 2] if subset else None
    for p, T in CASES:
        drf = LookupRunner(HFRunner(draft, v), STRONG)
        res = generate(target, p, T, draft=drf, method=METHODS[name], kv_mode=kv_mode)
        assert res.tokens == generate(target, p, T).tokens, f"{name}/{subset}/{kv_mode}"
        assert drf.slots == drf.index.tokens or name == "streaming"


@pytest.mark.parametrize("name", ["linear_k4", "dynatree", "talon", "streaming"])
def test_lookup_draft_equals_ar_fast_path(llama_target, llama_draft, name):
    tgt = StaticRunner(llama_target)
    for p, T in CASES:
        drf = LookupRunner(StaticRunner(llama_draft), STRONG)
        assert generate(tgt, p, T, draft=drf, method=METHODS[name]).tokens == generate(tgt, p, T).tokens


SKIP = CostAwareConfig(DynaTreeConfig(B_max=3, D_max=8, n_max=40), ((1, 1.0), (2, 1.2), (64, 4.0)), 0.3, 1.0,
                       lookup_skip=0.9)


@pytest.mark.parametrize("kv_mode", KV_MODES)
@pytest.mark.parametrize("subset", [False, True])
def test_lookup_skipped_levels_keep_the_tokens_eager(target, draft, subset, kv_mode):
    """Levels drafted from the lookup alone (no draft forward; their nodes fed with a later level, level 0's
    committed tokens perhaps with the next tree) change what is drafted, never what is emitted; on looping
    prompts they occur (deeper trees than forwards, trees without a forward)."""
    v = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(1))[: VOCAB // 2] if subset else None
    skipped = deferred = 0
    for p, T in CASES:
        res = generate(target, p, T, draft=LookupRunner(HFRunner(draft, v), STRONG), method=SKIP, kv_mode=kv_mode)
        assert res.tokens == generate(target, p, T).tokens, f"{subset}/{kv_mode}"
        skipped += res.drafted_depth > res.draft_forwards
        deferred += 0 in res.log.draft_forwards  # a tree drafted without the draft at all
    assert skipped and deferred


def test_lookup_skipped_levels_keep_the_tokens_fast_path(llama_target, llama_draft):
    tgt = StaticRunner(llama_target)
    never = dataclasses.replace(SKIP, lookup_skip=1.0)
    for p, T in CASES:
        ar = generate(tgt, p, T).tokens
        res = generate(tgt, p, T, draft=LookupRunner(StaticRunner(llama_draft), STRONG), method=SKIP)
        off = generate(tgt, p, T, draft=LookupRunner(StaticRunner(llama_draft), STRONG), method=never)
        assert res.tokens == off.tokens == ar
        assert res.draft_forwards <= off.draft_forwards and off.drafted_depth <= off.draft_forwards


@pytest.mark.parametrize("skip", [0.9, 0.97])
def test_skipped_nodes_are_fed_with_the_next_level(draft, skip):
    """Every node of a tree drafted with skipped levels scores what it should on its own path: a copy child
    log(weight) of its parent's copy token; any other node the lookup draft's mixture computed from scratch,
    also below a copy child (its forward fed the nodes that waited, at their own positions and masks) and
    after a skipped level 0 (the committed tokens fed first, or left for the next tree)."""
    policy = dataclasses.replace(SKIP, base=DynaTreeConfig(B_max=3, D0=3, D_max=8, n_max=40), lookup_skip=skip).policy()
    copied, seen = set(), collections.Counter()
    # the last prompt's copies run into its own end: "5 6 7" -> 8 -> 5 -> 6 -> 7, where the longest match is
    # "5 6 7" again (weight 0.95): a level fed after three skipped ones when skipping takes 0.99
    for k, p in enumerate(looping(3, 11)[:3] + [torch.tensor([5, 6, 7, 8, 5, 6, 7])]):
        drf, state = LookupRunner(HFRunner(draft), STRONG), DraftState()
        for r in range(4):  # four trees, each after committing the previous tree's first drafted token
            tree, n_fwd = draft_tree(drf, state, p, policy, 8)
            assert drf.length == state.consumed <= p.numel()
            level0 = "drafted" if not math.isnan(tree.root_conf) else "deferred" if n_fwd == 0 else "copied"
            seen[level0] += 1
            for i in range(1, tree.size):
                path = tree.anc[i].nonzero().squeeze(1).tolist()  # root .. i
                ctx = p.tolist() + tree.tokens[path[1:-1]].tolist()
                c, logp, token = drf.lookup(ctx), float(tree.logp[i]), int(tree.tokens[i])
                if c is not None and c[1] >= skip and token == c[0] and logp == pytest.approx(math.log(c[1]), abs=1e-6):
                    copied.add((k, r, i))
                    continue
                with torch.no_grad():
                    logits = HFRunner(draft).forward(torch.tensor(ctx), torch.arange(len(ctx)), last_only=True)
                ref = torch.log_softmax(logits.float(), -1)
                if c is not None:
                    ref = mix_rows(ref, torch.tensor([c[0]]), torch.tensor([c[1]]))
                assert logp == pytest.approx(float(ref[0, token]), abs=1e-4), (k, r, i)
                seen["below a copy"] += (k, r, path[-2]) in copied
            p = torch.cat([p, tree.tokens[1:2]])
    assert copied and seen["drafted"] and seen["deferred"]
    assert skip < 0.95 or (seen["below a copy"] and seen["copied"])  # 0.97: the last prompt's second tree


def test_lookup_skip_without_a_lookup_is_plain_drafting(target, draft):
    p, T = CASES[0]
    a = generate(target, p, T, draft=draft, method=SKIP)
    b = generate(target, p, T, draft=draft, method=dataclasses.replace(SKIP, lookup_skip=1.0))
    assert (a.tokens, a.draft_forwards, a.drafted_nodes) == (b.tokens, b.draft_forwards, b.drafted_nodes)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.9", True])
def test_bad_lookup_skip_is_refused(bad):
    with pytest.raises(ValueError, match="lookup_skip"):
        CostAwareConfig(lookup_skip=bad)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "8"])
def test_bad_skip_window_is_refused(bad):
    with pytest.raises(ValueError, match="skip_window"):
        CostAwareConfig(skip_window=bad)


def test_skipping_follows_the_record_of_the_copies():
    """Skipping stops once the recent strong copies were taken less often than ``lookup_skip`` and resumes as
    the misses fade (decay 1 - 1/skip_window per verification); skip_window=0 skips on the weight alone."""
    pol = dataclasses.replace(SKIP, skip_window=4).policy()
    assert pol.copies_trusted()                         # a generation starts trusting its copies
    pol.observe_copies(10, 10)
    assert pol.copies_trusted()
    pol.observe_copies(4, 1)                            # 3 misses: (7.5 + 1 + 1) / (7.5 + 4 + 1) < 0.9
    assert not pol.copies_trusted()
    for n in range(1, 40):                              # no copies met: the misses fade with the rest
        pol.observe_copies(0, 0)
        if pol.copies_trusted():
            break
    assert 1 < n < 40 and pol.copies_trusted()
    always = dataclasses.replace(SKIP, skip_window=0).policy()
    always.observe_copies(10, 0)
    assert always.copies_trusted()


def test_trees_list_their_strong_copies_and_the_loop_reports_them(draft):
    """``Tree.copies`` lists each expanded node whose copy weighs >= lookup_skip with that copy, skipped or
    not (also with skipping refused by the record); ``copy_outcomes`` counts those on the accepted path and the
    ones the target continued with; the loop hands them to the policy after each verification."""
    for trusted in (True, False):
        policy = SKIP.policy()
        policy.copies_trusted = lambda: trusted
        drf, p = LookupRunner(HFRunner(draft), STRONG), looping(1, 11)[0]
        tree, n_fwd = draft_tree(drf, DraftState(), p, policy, 8)
        assert tree.copies and (n_fwd > 0 or trusted)
        assert trusted or n_fwd == tree.levels  # nothing skipped: a draft forward a level
        for u, c in tree.copies:
            path = tree.anc[u].nonzero().squeeze(1).tolist()
            copy = drf.lookup(p.tolist() + tree.tokens[path[1:]].tolist())
            assert copy is not None and copy == (c, copy[1]) and copy[1] >= 0.9
        # a target that agrees with every copy, then one that never does
        nxt = torch.full((tree.size,), -1)
        for u, c in tree.copies:
            nxt[u] = c
        path = tree.anc[max(u for u, _ in tree.copies)].nonzero().squeeze(1)
        on = sum(u in path.tolist() for u, _ in tree.copies)
        assert copy_outcomes(tree, path, nxt) == (on, on) and on >= 1
        assert copy_outcomes(tree, path, torch.full((tree.size,), -1)) == (on, 0)
        sub = tree.subset(path)
        assert sorted(sub.copies) == sorted((path.tolist().index(u), c) for u, c in tree.copies if u in path.tolist())

    seen = []

    class Recording(type(SKIP.policy())):
        def observe_copies(self, met, taken):
            seen.append((met, taken))
            super().observe_copies(met, taken)

    p, T = CASES[1]
    res = generate(draft, p, T, draft=LookupRunner(HFRunner(draft), STRONG), method=SKIP)  # the draft as target
    pol = Recording(SKIP)
    out = speculative_decode(draft, LookupRunner(HFRunner(draft), STRONG), p, T, pol)
    assert out.tokens == res.tokens == generate(draft, p, T).tokens
    assert len(seen) == out.iterations and all(0 <= t <= m for m, t in seen) and sum(m for m, _ in seen) > 0


def test_lookup_changes_what_is_drafted(target, draft):
    """On a looping prompt the lookup drafts the loop: more accepted tokens per iteration."""
    p = looping(1, 9)[0]
    plain = generate(target, p, 24, draft=draft, method=LinearConfig(K=4))
    hyb = generate(target, p, 24, draft=LookupRunner(HFRunner(draft), STRONG), method=LinearConfig(K=4))
    assert hyb.tokens == plain.tokens
    assert hyb.accepted != plain.accepted or hyb.drafted_nodes != plain.drafted_nodes


def test_runner_mixture_is_the_teacher_forced_one(draft):
    """At a tree's root (the draft's catch-up feed), the runner's log-probs equal ``mix``'s row."""
    for p in looping(2, 3):
        ids = p.tolist()
        drf = LookupRunner(HFRunner(draft), STRONG)
        root = drf.forward(p, torch.arange(p.numel()), last_only=True)
        lp = torch.log_softmax(draft(input_ids=p[None]).logits[0].float(), -1)
        ref = mix(lp, ids, 0, STRONG)[-1]
        assert torch.allclose(torch.log_softmax(root.float(), -1)[0], ref, atol=1e-5)


def test_committed_lookup_loads_and_missing_file_is_refused(tmp_path):
    cfg = lookup_config("embedded:draft")
    assert 1 <= cfg.max_n <= 32 and all(0.0 <= w < 1.0 for w in cfg.weights)
    fit = json.loads((DRAFT_DIR / "lookup.json").read_text())
    assert fit["agreement_with_lookup"] > fit["agreement_draft"]
    with pytest.raises(ValueError, match="lookup.json"):
        LookupConfig.load(tmp_path / "lookup.json")
    with pytest.raises(ValueError, match="draft folder"):
        lookup_config("tiny:draft")


def test_the_lookup_fit_trusts_a_copy_as_far_as_it_is_right():
    """w[n] maximises the target token's likelihood under the mixture: a copy always right (and the draft unsure)
    gets the largest candidate, one never right gets 0, one right half the time where the draft gives the target's
    token nothing gets 0.5; a length no row matched gets 0, in its place."""
    always, never = {1: [(0.1, True)] * 50}, {1: [(0.3, False)] * 50}
    half = {1: [(0.0, True)] * 50 + [(1.0, False)] * 50}
    assert fit_weights(always)[0] == [max(LOOKUP_WEIGHTS)]
    assert fit_weights(never)[0] == [0.0]
    weights, fit = fit_weights(half)
    assert weights == [0.5] and fit["1"] == {"positions": 100, "copy_agreement": 0.5, "w": 0.5}
    assert fit_weights({2: [(0.1, True)] * 50})[0] == [0.0, max(LOOKUP_WEIGHTS)]


def test_the_lookup_fit_reads_each_matched_row():
    """From row s = 2 of 1 2 3 1 2 3 1 2, rows 3..6 match 1, 2, 3 and 4 tokens; row 5's target token (4, set apart
    from its copy 1) is outside the draft's vocabulary, so the draft gives it 0 and the copy is wrong there."""
    ids, s = [1, 2, 3, 1, 2, 3, 1, 2], 2
    t_top = torch.tensor([1, 2, 3, 4, 2])  # rows 2..6: the next tokens, but row 5's
    col_of = torch.tensor([0, 1, 2, 3, -1, 5, 6, 7])
    lp = torch.log_softmax(torch.arange(56, dtype=torch.float32).reshape(7, 8).sin(), -1)
    p = lambda t, tok: float(lp[t, tok].exp())  # noqa: E731
    assert matched([(ids, s, t_top, lp)], col_of, 4) == {1: [(p(3, 2), True)], 2: [(p(4, 3), True)],
                                                         3: [(0.0, False)], 4: [(p(6, 2), True)]}
