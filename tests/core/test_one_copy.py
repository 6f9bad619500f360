"""One copy of every weight (``core.engines.ownership``): a pair served as the cpu profile serves it (a tied target on
the fast path; a draft borrowing the target's embedding with a head over a token subset, or an EAGLE-3 head) holds each
weight once: the storages reachable from the runners, their models and the head add up to the pair's parameter
bytes, plus the caches named here and the draft's subset head. A transformers model that gave its weights away
computes from the runner's (views) or refuses loudly (released), never silently."""
import gc
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from dynatree_lib import generate
from dynatree_lib.baselines.hf_generate import HFARConfig
from dynatree_lib.core.engines import kernels
from dynatree_lib.core.drafts.heads.eagle3 import save_head
from dynatree_lib.core.drafts.heads.eagle3_fused import FusedEagle3Runner
from dynatree_lib.core.drafts.heads.eagle3_runner import Eagle3Runner
from dynatree_lib.core.engines.static import StaticRunner
from dynatree_lib.core.engines.ownership import ReleasedWeight, ReleasedWeightError, reachable_storages
from dynatree_lib.harness.measure.environment import weight_bytes
from dynatree_lib.harness.measure.cell import divergence_gap
from dynatree_lib.harness.measure.memory import tensors_mb
from dynatree_lib.harness.setup.models import Engine, load_head_draft, on_engine, serve_pair, share_embedding
from dynatree_lib.harness.setup.tiny import tiny_eagle3

DTYPES = (torch.bfloat16, torch.float32)


def tied_llama(layers: int, seed: int) -> LlamaForCausalLM:
    """A small Llama with a tied output layer (as SmolLM2's) in sizes the one-call bf16 forward takes."""
    cfg = LlamaConfig(vocab_size=96, hidden_size=128, intermediate_size=256, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=True)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval()


def pair(dtype):
    """The cpu profile's pair in miniature: a tied target, and a draft of fewer layers under the target's embedding."""
    target, draft = tied_llama(3, 0).to(dtype), tied_llama(1, 1).to(dtype)
    with torch.no_grad():
        draft.get_input_embeddings().weight.copy_(target.get_input_embeddings().weight)
    return target, draft


def engine(dtype) -> Engine:
    """The cpu profile's engine where the bf16 kernels run (one C++ call a forward), else the plain fast path."""
    return Engine("static+fused" if dtype == torch.bfloat16 and kernels.available() else "static")


def held(*tensors) -> dict[int, int]:
    return {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}


def packed(runner) -> dict[int, int]:
    """The head's weights a fused EAGLE-3 runner packed (its one copy of them: ``eagle3_fused.PackedHead``)."""
    if not isinstance(runner, FusedEagle3Runner):
        return {}
    n = runner.net
    return held(n.fc, n.wqkv, n.wo, n.w13, n.w2, n.ln1, n.head)


def caches(runner, target=None) -> dict[int, int]:
    """The caches and tables a runner (and its transformers model) allocates beside the weights: KV caches, RoPE
    tables; an EAGLE-3 runner's per-slot outputs, positions and target features, the target ids of its columns
    (``vocab``, from the head's ``d2t``) and the head's rotary frequencies (and a fused one's RoPE tables, unless it
    reads the ``target`` runner's)."""
    if isinstance(runner, FusedEagle3Runner):
        borrowed = target is not None and runner.net.cos is target.net.cos and runner.net.sin is target.net.sin
        own = () if borrowed else (runner.net.cos, runner.net.sin)
        return held(runner.k, runner.v, runner.out, runner.pos, runner.target, runner.vocab, runner.head.inv_freq,
                    *own)
    if isinstance(runner, Eagle3Runner):
        return held(runner.k, runner.v, runner.out, runner.pos, runner.target, runner.vocab, runner.head.inv_freq)
    n = runner.net
    return held(n.k, n.v, n.cos, n.sin, n.inv_freq, *runner.model.buffers())


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_served_pair_holds_every_weight_once(dtype):
    """Target and a subset-head draft sharing its embedding: the reachable storages are one copy of the pair's
    parameters, the caches, and the draft head's rows with their token ids (gathered from the shared output layer:
    the rows a subset head reads, the one derived weight)."""
    target, draft = pair(dtype)
    assert share_embedding(target, draft)
    one = reachable_storages(*target.parameters(), *draft.parameters())
    target_only = reachable_storages(*target.parameters())
    vocab = torch.arange(0, 96, 3)
    tgt, drf = serve_pair(target, draft, engine(dtype), 64, vocab)
    assert drf.net.embed.data_ptr() == tgt.net.embed.data_ptr()  # the draft reads the target's embedding tensor
    if tgt.net.embed.dim() == 3:  # packed: the tied embedding is the packed head itself
        assert tgt.net.embed is tgt.net.head
    subset = held(drf.net.head, drf.vocab)
    assert sum(subset.values()) == vocab.numel() * (128 * target.dtype.itemsize + 8)
    total = reachable_storages(tgt, drf)
    assert sum(total.values()) == sum(one.values()) + sum(caches(tgt).values()) + sum(caches(drf).values()) + \
        sum(subset.values())
    logged = tensors_mb(tgt, drf)  # what memory records log: the draft's own (layers, caches, subset head) apart
    assert logged["target_tensors_mb"] * 2**20 == sum(target_only.values()) + sum(caches(tgt).values())
    assert logged["draft_tensors_mb"] * 2**20 == sum(one.values()) - sum(target_only.values()) + \
        sum(caches(drf).values()) + sum(subset.values())


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_head_on_the_fast_path_holds_every_weight_once(dtype, tmp_path):
    """The EAGLE-3 head reads the target runner's embedding tensor (the packed tied head in bf16; the fused runner
    holds the head's weights packed, the plain ones released): the reachable storages are the target's and the
    head's parameters once, and the caches."""
    target = tied_llama(3, 0).to(dtype)
    save_head(tiny_eagle3(target, draft_vocab=80, seed=2), tmp_path, verifier="tiny")
    one = reachable_storages(*target.parameters())
    tgt = on_engine(target, engine(dtype), 64)
    drf = load_head_draft(f"eagle3:{tmp_path}", tgt, 64, None, False, fused=engine(dtype).fused)
    assert drf.head.embed_tokens.data_ptr() == tgt.embedding.data_ptr()
    assert drf.engine == ("eagle3+fused" if engine(dtype).fused else "eagle3")
    assert not engine(dtype).fused or drf.net.cos is tgt.net.cos  # the target's RoPE tables, one copy
    head = {**reachable_storages(*drf.head.parameters(), *drf.head.buffers()), **packed(drf)}
    assert sum(head.values()) == sum(p.numel() * p.element_size() for p in (*drf.head.parameters(),
                                                                            *drf.head.buffers()))
    total = reachable_storages(tgt, drf)
    assert sum(total.values()) == sum(one.values()) + sum(head.values()) + sum(caches(tgt).values()) + \
        sum(caches(drf, tgt).values())
    p = torch.arange(1, 20)
    assert generate(tgt, p, 12, draft=drf, method="dynatree").tokens == generate(tgt, p, 12).tokens


def test_nothing_served_keeps_the_checkpoint_file_mapped(tmp_path):
    """``from_pretrained`` maps a checkpoint's file and its weights are views of that mapping (every page read stays
    resident while one of them lives): once a runner took the weights over, nothing holds the mapping."""
    tied_llama(2, 0).save_pretrained(tmp_path)
    maps = Path("/proc/self/maps")
    mapped = lambda: maps.exists() and str(tmp_path) in maps.read_text()
    m = LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()  # as harness.setup.models.load_model loads
    if not mapped():
        pytest.skip("this platform or transformers reads the checkpoint without mapping it")
    r = StaticRunner(m)
    gc.collect()
    assert not mapped()
    assert r.forward(torch.arange(1, 9), torch.arange(8)).shape == (8, 96)


def test_a_model_computes_from_the_runners_views_or_refuses_loudly():
    """fp32: the model's weights are views of the runner's tensors, and it computes what it computed. Packed bf16:
    its weights are released; a forward, ``.to()`` or ``state_dict()`` raises, naming the weight and the runner, while
    shapes, dtype, device and the weight bytes stay readable. ``keep_model`` leaves the model its weights."""
    m = tied_llama(2, 0)
    x = torch.arange(1, 12)[None]
    before = m(input_ids=x).logits
    r = StaticRunner(m)
    q = m.model.layers[0].self_attn.q_proj.weight
    assert q.untyped_storage().data_ptr() == r.net.wqkv.untyped_storage().data_ptr()
    assert torch.equal(m(input_ids=x).logits, before)
    if not kernels.available():
        pytest.skip("packed weights need the bf16 kernels (a CPU with AVX512-BF16)")
    m = tied_llama(2, 0).to(torch.bfloat16)
    nbytes, kept = weight_bytes(m), StaticRunner(m, fused=True, keep_model=True)
    r = StaticRunner(m, fused=True)
    assert isinstance(m.lm_head.weight, ReleasedWeight) and m.lm_head.weight is m.model.embed_tokens.weight
    assert m.dtype == torch.bfloat16 and m.lm_head.weight.shape == (96, 128) and weight_bytes(m) == nbytes
    for use in (lambda: m(input_ids=x), lambda: m.to(torch.float32), lambda: m.state_dict(),
                lambda: m.lm_head.weight.data_ptr()):
        with pytest.raises(ReleasedWeightError, match=r"embed_tokens\.weight \(\(96, 128\), torch\.bfloat16\) was "
                                                      r"released: a StaticRunner \(static\+fused\) took"):
            use()
    assert torch.equal(r.forward(x[0], torch.arange(11)), kept.forward(x[0], torch.arange(11)))


def test_transformers_loop_gets_models_with_their_weights():
    """A profile's pair for transformers' own loop (HF's AR): the models themselves, or beside runners ("both");
    for our loop only, HF's loop refuses loudly where the runner packed the weights (the bf16 kernels), and without
    the kernels computes from the views of the runner's tensors its model keeps (one copy either way). The divergence
    gap reads the runner, whose model gave its weights."""
    from dynatree_lib.harness.setup.profiles import get_profile

    prof = get_profile("smoke", target="tiny-llama:target", draft="tiny-llama:draft", engine="static",
                       dtype="bfloat16")
    p = torch.arange(1, 20)
    hf, _, _ = prof.load_pair(models_for="transformers")
    assert isinstance(hf, LlamaForCausalLM)
    ours, _, _ = prof.load_pair(models_for="both")
    assert generate(ours, p, 8, method=HFARConfig()).tokens == generate(hf, p, 8, method=HFARConfig()).tokens
    ours, _, _ = prof.load_pair()
    if kernels.available():
        with pytest.raises(ReleasedWeightError, match="StaticRunner"):
            generate(ours, p, 8, method=HFARConfig())
    else:
        assert generate(ours, p, 8, method=HFARConfig()).tokens == generate(hf, p, 8, method=HFARConfig()).tokens
    ar = generate(ours, p, 8).tokens
    ours.reset()
    logits = ours.forward(torch.cat([p, torch.tensor(ar[:3])]), torch.arange(22), last_only=True)[0].float()
    top2 = logits.topk(2).values
    assert divergence_gap(ours, p, ar, 3) == float(top2[0] - top2[1])
    with pytest.raises(ValueError, match="models_for"):
        prof.load_pair(models_for="hf")
