"""The fast path (our Llama over a static cache) computes what transformers computes, and its cache
operations match the eager runner's."""
import pytest
import torch

from dynatree_lib import DynaTreeConfig, LinearConfig, generate
from dynatree_lib.fastpath import StaticRunner
from dynatree_lib.models import tiny_llama
from dynatree_lib.runners import HFRunner

from .conftest import prompts


def test_logits_match_transformers(llama_target):
    x = prompts(1, seed=1, lo=20, hi=21)[0]
    ref = llama_target(input_ids=x[None]).logits[0]
    r = StaticRunner(llama_target)
    out = torch.cat([r.forward(x[:7], torch.arange(7)), r.forward(x[7:], torch.arange(7, 20))])
    assert torch.allclose(out, ref, atol=1e-4)


def test_tree_forward_matches_the_eager_runner(llama_target):
    """A tree verified with a visibility pattern gives the same logits on both runners."""
    x = prompts(1, seed=2, lo=12, hi=13)[0]
    tree_tok = torch.tensor([5, 7, 9, 11])
    pos = torch.tensor([12, 13, 13, 14])
    vis = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    outs = []
    for r in (HFRunner(llama_target), StaticRunner(llama_target)):
        r.forward(x, torch.arange(12))
        outs.append(r.forward(tree_tok, pos, vis, 12))
        r.commit(12, torch.tensor([0, 1, 3]))
        assert r.length == 15
        outs.append(r.forward(torch.tensor([3]), torch.tensor([15])))
    assert torch.allclose(outs[0], outs[2], atol=1e-4) and torch.allclose(outs[1], outs[3], atol=1e-4)
    seq = HFRunner(llama_target)  # the committed path run causally gives the same next logits
    ref = seq.forward(torch.cat([x, torch.tensor([5, 7, 11, 3])]), torch.arange(16), last_only=True)
    assert torch.allclose(outs[1], ref, atol=1e-4) and torch.allclose(outs[3], ref, atol=1e-4)


def test_cache_full_and_unsupported_models(llama_target, target):
    r = StaticRunner(llama_target, max_len=8, tree_slots=0)
    with pytest.raises(ValueError, match="static cache of 8 slots is full"):
        r.forward(torch.arange(9), torch.arange(9))
    with pytest.raises(ValueError, match="fast path supports plain Llama models; this one has model type 'gpt_neox'"):
        StaticRunner(target)


def test_compiled_equals_eager():
    """The compiled graphs (dynamic shapes: any tree size, any prompt length) emit the eager path's tokens."""
    m = tiny_llama(layers=2, vocab_size=96, max_positions=96)
    d = tiny_llama(layers=1, vocab_size=96, max_positions=96)
    eager, comp = (StaticRunner(m), StaticRunner(d)), (StaticRunner(m, compile=True), StaticRunner(d, compile=True))
    p = prompts(1, seed=5, lo=70, hi=71)[0]
    for method in (None, LinearConfig(3), DynaTreeConfig(n_max=6, D_max=3, D0=2, B_max=2)):
        a = generate(eager[0], p, 10, draft=eager[1], method=method).tokens
        b = generate(comp[0], p, 10, draft=comp[1], method=method).tokens
        assert a == b
