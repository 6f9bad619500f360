"""A draft head over a subset of the vocabulary (FR-Spec): the draft scores only ``vocab``, the target
still verifies every token, so every decoder still equals greedy AR (fp32), on the eager and the fast path."""
import json

import pytest
import torch

from dynatree_lib import DynaTreeConfig, FixedTreeConfig, LinearConfig, StreamingConfig, TalonConfig, generate
from dynatree_lib.core.loop import KV_MODES
from dynatree_lib.core.engines.static import StaticRunner
from dynatree_lib.harness.setup.paths import DRAFT_DIR
from dynatree_lib.harness.setup.weights import frequent_tokens
from dynatree_lib.harness.setup.models import load_pair
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.core.engines.hf import HFRunner

from ..conftest import VOCAB, prompts

METHODS = {"linear_k4": LinearConfig(K=4), "fixed": FixedTreeConfig(D=5, B=3, tau=0.0, n_max=40),
           "dynatree": DynaTreeConfig(), "talon": TalonConfig(mu=0.2, N=8, K=3),
           "streaming": StreamingConfig(K=4, cache_size=128, n_sink=4)}
CASES = list(zip(prompts(4, seed=11), [1, 9, 33, 48]))


def subsets() -> dict:
    g = torch.Generator().manual_seed(3)
    return {"half": torch.randperm(VOCAB, generator=g)[: VOCAB // 2], "one": torch.tensor([7]),
            "all_permuted": torch.randperm(VOCAB, generator=g)}


@pytest.mark.parametrize("kv_mode", [pytest.param(m, marks=pytest.mark.full) if m == "rebuild" else m for m in KV_MODES])
@pytest.mark.parametrize("subset", list(subsets()))
@pytest.mark.parametrize("name", list(METHODS))
def test_subset_head_equals_ar_eager(target, draft, name, subset, kv_mode):
    drf = HFRunner(draft, subsets()[subset])
    for p, T in CASES:
        res = generate(target, p, T, draft=drf, method=METHODS[name], kv_mode=kv_mode)
        assert res.tokens == generate(target, p, T).tokens, f"{name}/{subset}/{kv_mode}"


@pytest.mark.parametrize("name", ["linear_k4", "dynatree", "talon"])
def test_subset_head_equals_ar_fast_path(llama_target, llama_draft, name):
    tgt = StaticRunner(llama_target)
    for subset, v in subsets().items():  # the session's draft keeps its weights: a subset runner holds some head rows
        drf = StaticRunner(llama_draft, vocab=v, keep_model=True)
        for p, T in CASES:
            assert generate(tgt, p, T, draft=drf, method=METHODS[name]).tokens == generate(tgt, p, T).tokens, subset


def test_subset_logits_are_the_full_heads_columns(llama_draft):
    v = subsets()["half"]
    p = prompts(1, seed=5)[0]
    pos = torch.arange(p.numel())
    full = StaticRunner(llama_draft).forward(p, pos)
    for r in (StaticRunner(llama_draft, vocab=v, keep_model=True), HFRunner(llama_draft, v)):
        assert torch.allclose(r.forward(p, pos), full[:, v], atol=1e-5)


def test_drafted_tokens_come_from_the_subset(target, draft):
    v = subsets()["half"]
    res = generate(target, prompts(1, seed=8)[0], 40, draft=HFRunner(draft, v), method=DynaTreeConfig(),
                   record_trees=50)
    drafted = {t for rec in res.trees for t in rec["tokens"][1:]}
    assert drafted and drafted <= set(v.tolist())
    assert res.accepted > 0


def test_bad_subsets_and_a_subset_target_are_refused(target, draft):
    for bad, err in ((torch.tensor([1, 1]), "more than once"), (torch.tensor([VOCAB]), "outside"),
                     (torch.tensor([-1]), "outside"), (torch.tensor([], dtype=torch.long), "non-empty"),
                     (torch.tensor([[1, 2]]), "1-D")):
        with pytest.raises(ValueError, match=err):
            HFRunner(draft, bad)
    with pytest.raises(TypeError, match="integer"):
        HFRunner(draft, torch.tensor([0.5]))
    with pytest.raises(ValueError, match="subset"):
        generate(HFRunner(target, torch.arange(10)), prompts(1)[0], 4, draft=draft, method=LinearConfig(2))
    for n in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="draft_vocab"):
            frequent_tokens("embedded:draft", n)
    with pytest.raises(ValueError, match="exceeds"):
        frequent_tokens("embedded:draft", 10 ** 6)
    with pytest.raises(ValueError, match="token ranking"):
        load_pair("tiny:target", "tiny:draft", draft_vocab=16)


def test_committed_ranking():
    """The ranking behind the cpu profile's draft head: distinct ids, most frequent first, with provenance."""
    r = json.loads((DRAFT_DIR / "token_counts.json").read_text())
    ids, counts = r["ids"], r["counts"]
    assert len(set(ids)) == len(ids) and all(0 <= i < r["vocab_size"] == 49152 for i in ids)
    assert counts == sorted(counts, reverse=True) and sum(counts) <= r["total_tokens"]
    assert "test split" in r["source"] and "vocab-only" in r["rebuild"]
    n = get_profile("cpu").models.draft_vocab
    assert frequent_tokens("embedded:draft", n).tolist() == ids[:n]
    assert sum(counts[:n]) / r["total_tokens"] > 0.85  # the subset covers most of the training text
