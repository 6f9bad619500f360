"""The fast path (our Llama over a static cache) computes what transformers computes, and its cache
operations match the eager runner's."""
import pytest
import torch

from dynatree_lib import DynaTreeConfig, LinearConfig, generate
from dynatree_lib.core.engines import kernels
from dynatree_lib.core.engines.static import StaticRunner, gqa_attention, linear
from dynatree_lib.harness.setup.tiny import perturb, tiny_llama
from dynatree_lib.core.engines.hf import HFRunner

from ..conftest import NO_KERNEL, prompts


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


@pytest.mark.full
def test_compiled_equals_eager():
    """The compiled graphs (dynamic shapes: any tree size, any prompt length) emit the eager path's tokens, with a
    draft close to the target, so that accepted paths of several tokens are committed from the compiled trees."""
    m = tiny_llama(layers=2, vocab_size=96, max_positions=96)
    d = perturb(tiny_llama(layers=2, vocab_size=96, max_positions=96), 0.03, seed=1)
    eager, comp = (StaticRunner(m), StaticRunner(d)), (StaticRunner(m, compile=True), StaticRunner(d, compile=True))
    p = prompts(1, seed=5, lo=70, hi=71)[0]
    for method in (None, LinearConfig(3), DynaTreeConfig(n_max=6, D_max=3, D0=2, B_max=2)):
        a = generate(eager[0], p, 10, draft=eager[1], method=method)
        b = generate(comp[0], p, 10, draft=comp[1], method=method)
        assert a.tokens == b.tokens
        if method is not None:
            assert b.accepted > 0 and a.accepted == b.accepted, method


def test_written_out_attention_and_matvec_match_the_references():
    """Both forms of the fast path's attention (batched matmuls; multiply-and-sum for one query) equal
    SDPA with repeated KV heads, and the matrix-vector form of a linear equals the matmul."""
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(6, 3, 16, generator=g), torch.randn(2, 9, 16, generator=g), torch.randn(2, 9, 16, generator=g)
    mask = torch.zeros(3, 9).masked_fill_(torch.rand(3, 9, generator=g) < 0.3, torch.finfo(torch.float32).min)
    mask[:, 0] = 0
    ref = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(3, 0), v.repeat_interleave(3, 0),
                                                           attn_mask=mask)
    assert torch.allclose(gqa_attention(q, k, v, mask), ref, atol=1e-5)
    assert torch.allclose(gqa_attention(q[:, :1], k, v, mask[:1], reduce=True), ref[:, :1], atol=1e-5)
    x, w = torch.randn(1, 40, generator=g), torch.randn(24, 40, generator=g)
    assert torch.allclose(linear(x, w, reduce=True), x @ w.t(), atol=1e-5)


@pytest.mark.parametrize("kernel", [False, pytest.param(True, marks=pytest.mark.skipif(
    not kernels.available(), reason=NO_KERNEL))], ids=["plain", "bf16-kernel"])
@pytest.mark.full
def test_compiled_graphs_serve_every_tree_size(kernel):
    """Dynamic shapes: the runner compiles its graphs when built (``warm``); then prompts of any length,
    one token on an empty cache, trees of any size, last-logits calls after a prefix and longer caches
    all reuse them (no compilation inside a timed run); with the bf16 kernel too (its shape function keeps
    the row count symbolic)."""
    from torch._dynamo.utils import counters

    m = tiny_llama(layers=1, vocab_size=96, max_positions=96)
    r = StaticRunner(m.to(torch.bfloat16) if kernel else m, compile=True, kernel=kernel)
    before = counters["stats"]["unique_graphs"]
    r.forward(torch.tensor([3]), torch.tensor([0]))
    r.reset()
    r.forward(torch.arange(1, 9), torch.arange(8), last_only=True)
    r.forward(torch.tensor([3]), torch.tensor([8]))
    r.forward(torch.tensor([4, 5]), torch.tensor([9, 10]), last_only=True)
    for q in (2, 3, 5, 9, 17, 20):
        vis = torch.ones(q, q, dtype=torch.bool).tril()
        r.forward(torch.arange(1, q + 1), torch.arange(r.length, r.length + q), vis, r.length)
        r.forward(torch.tensor([7]), torch.tensor([r.length]), torch.ones(1, 1, dtype=torch.bool), r.length)
    assert counters["stats"]["unique_graphs"] == before


@pytest.mark.parametrize("keep", [[0], [0, 1, 2], [0, 1, 4, 6], [0, 3]])
def test_commit_copies_only_what_moves(llama_target, keep):
    """A commit leaves slots already in place alone (none at all when only the root is kept) and gives the
    same cache as moving every kept slot: on both runners."""
    from dynatree_lib.core.engines.hf import HFRunner
    from dynatree_lib.core.engines.runner import first_moved

    keep = torch.tensor(keep)
    assert first_moved(keep) == next((i for i, k in enumerate(keep.tolist()) if k != i), len(keep))
    ids = torch.arange(1, 13)
    for r in (StaticRunner(llama_target), HFRunner(llama_target)):
        r.forward(ids, torch.arange(12))
        kv = ([(k[:, :12].clone(), v[:, :12].clone()) for k, v in zip(*r.net.cache())] if isinstance(r, StaticRunner)
              else [(layer.keys[0].clone(), layer.values[0].clone()) for layer in r.cache.layers])
        r.commit(5, keep)
        assert r.length == 5 + len(keep)
        src = torch.cat([torch.arange(5), keep + 5])
        after = ([(k[:, :r.length], v[:, :r.length]) for k, v in zip(*r.net.cache())] if isinstance(r, StaticRunner)
                 else [(layer.keys[0], layer.values[0]) for layer in r.cache.layers])
        for (k0, v0), (k1, v1) in zip(kv, after):
            assert torch.equal(k1, k0[:, src]) and torch.equal(v1, v0[:, src])


def test_a_runner_shares_the_tensors_it_reads_as_the_model_holds_them(llama_target):
    """The embedding (and an unpacked whole head) is one tensor for the runner and the model (the model's parameter
    is a view of the runner's: ``core.engines.ownership``), not a second copy in memory."""
    r = StaticRunner(llama_target)
    assert r.net.embed.data_ptr() == llama_target.get_input_embeddings().weight.data_ptr()
    assert r.net.head.data_ptr() == llama_target.lm_head.weight.data_ptr()


def test_a_draft_holding_the_targets_embedding_shares_it_with_the_same_logits():
    from dynatree_lib.harness.setup.models import share_embedding

    target, draft = (tiny_llama(seed=s, vocab_size=64, hidden_size=32, layers=1, max_positions=64) for s in (0, 1))
    assert not share_embedding(target, draft)  # other values: each keeps its own
    draft.get_input_embeddings().weight.data.copy_(target.get_input_embeddings().weight)
    x = torch.arange(10)[None]
    before = draft(input_ids=x).logits
    assert share_embedding(target, draft)
    assert draft.get_input_embeddings().weight is target.get_input_embeddings().weight
    assert torch.equal(draft(input_ids=x).logits, before)
