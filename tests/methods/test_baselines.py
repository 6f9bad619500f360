"""HF assisted generation (exact, nothing inherited from the checkpoint's generation config) and
StreamingLLM + speculative decoding (sink/window bookkeeping, key re-rotation, on both runners).
TALON lives in test_exactness / test_drafting."""
import pytest
import torch

from dynatree_lib import HFARConfig, HFAssistedConfig, LinearConfig, StreamingConfig, generate
from dynatree_lib.baselines.hf_generate import _SubsetHead, generate_hf
from dynatree_lib.core.loop import Window
from dynatree_lib.core.engines.static import StaticRunner
from dynatree_lib.core.engines.hf import HFRunner
from dynatree_lib.core.engines.runner import rerotate, rotary_inv_freq

from ..conftest import MAX_POS, prompts


@pytest.mark.parametrize("cfg", [HFAssistedConfig(), HFAssistedConfig(3, "heuristic"),
                                 HFAssistedConfig(6, "constant", 0.4)])
def test_hf_assisted_equals_ar(target, draft, cfg):
    for p, T in zip(prompts(3, seed=5), (1, 20, 45)):
        res = generate_hf(target, draft, p, T, cfg)
        assert res.tokens == generate(target, p, T).tokens
        assert res.target_forwards == res.iterations >= 1 and res.log is None and res.engine == "hf-generate"


def test_hf_assists_with_the_drafts_subset_head(target, draft):
    """A draft runner over a token subset assists HF with that head: the other rows score -inf while the call
    runs, and the draft is untouched after it; the output is still greedy AR's."""
    vocab = torch.arange(0, draft.config.vocab_size, 2)
    ids = prompts(1, seed=3)[0][None]
    full = draft(ids).logits
    head = _SubsetHead(draft, vocab)
    try:
        masked = draft(ids).logits
    finally:
        head.remove()
    outside = torch.ones(full.shape[-1], dtype=torch.bool)
    outside[vocab] = False
    assert torch.isinf(masked[..., outside]).all() and torch.equal(masked[..., vocab], full[..., vocab])
    for p, T in zip(prompts(2, seed=8), (1, 30)):
        res = generate_hf(target, HFRunner(draft, vocab=vocab), p, T, HFAssistedConfig())
        assert res.tokens == generate(target, p, T).tokens
    assert torch.equal(draft(ids).logits, full)


def test_hf_ar_is_ar_on_transformers_engine(target):
    for p, T in zip(prompts(2, seed=6), (1, 30)):
        res = generate(target, p, T, method=HFARConfig())  # no draft needed
        assert res.tokens == generate(target, p, T).tokens
        assert res.iterations == res.target_forwards == T and res.drafted_nodes == 0 and res.engine == "hf-generate"


def test_hf_assisted_ignores_the_checkpoints_generation_config(target, draft):
    """A checkpoint's eos and repetition penalty must not leak into our greedy comparison (it stopped at the
    model's eos after 11 tokens of 40, and a penalty changed its output)."""
    p, T = prompts(1, seed=9)[0], 40
    ar = generate(target, p, T).tokens
    saved = target.generation_config.to_dict()
    target.generation_config.eos_token_id = ar[10]
    target.generation_config.repetition_penalty = 1.5
    try:
        res = generate(target, p, T, draft=draft, method="hf_assisted")
        assert res.tokens == ar and len(res.tokens) == T
        assert target.generation_config.repetition_penalty == 1.5  # the user's config is restored
    finally:
        target.generation_config.eos_token_id = saved.get("eos_token_id")
        target.generation_config.repetition_penalty = saved.get("repetition_penalty", 1.0)


def test_hf_assisted_bad_settings():
    with pytest.raises(ValueError, match="schedule"):
        HFAssistedConfig(schedule="linear")
    with pytest.raises(ValueError, match="num_assistant_tokens"):
        HFAssistedConfig(num_assistant_tokens=0)


def test_rerotation_equals_computing_at_the_new_position(target):
    x = prompts(1, seed=2, lo=12, hi=13)[0]
    a, b = HFRunner(target), HFRunner(target)
    a.forward(x, torch.arange(x.numel()))
    b.forward(x, torch.arange(x.numel()) + 7)
    moved = rerotate(a.cache.layers[0].keys, 7, rotary_inv_freq(target))
    assert torch.allclose(moved, b.cache.layers[0].keys, atol=1e-5)
    assert torch.allclose(a.cache.layers[0].values, b.cache.layers[0].values, atol=1e-6)


@pytest.mark.parametrize("fast", [False, True])
def test_evict_keeps_sinks_and_recent_window(target, llama_target, fast):
    model = llama_target if fast else target
    r = StaticRunner(model) if fast else HFRunner(model)
    x = prompts(1, seed=3, lo=30, hi=31)[0]
    r.forward(x, torch.arange(30))
    keys = (lambda: r.net.cache()[0][0, ..., :r.length, :]) if fast else (lambda: r.cache.layers[0].keys[0])
    vals = (lambda: r.net.cache()[1][0, ..., :r.length, :]) if fast else (lambda: r.cache.layers[0].values[0])
    k0, v0 = keys().clone(), vals().clone()
    Window(cache_size=20, n_sink=4).evict(r)
    assert r.length == 20
    assert torch.equal(keys()[..., :4, :], k0[..., :4, :])          # sinks untouched
    assert torch.equal(vals()[..., 4:, :], v0[..., 14:, :])          # most recent 16 kept
    assert torch.allclose(keys()[..., 4:, :], rerotate(k0[..., 14:, :], -10, rotary_inv_freq(model)), atol=1e-6)
    Window(cache_size=20, n_sink=4).evict(r)
    assert r.length == 20


def test_streaming_equals_linear_spec_while_it_fits(target, draft):
    p, T = prompts(1, seed=8, lo=20, hi=21)[0], 30
    res = generate(target, p, T, draft=draft, method=StreamingConfig(K=4, cache_size=64))
    assert res.tokens == generate(target, p, T).tokens
    assert res.tokens == generate(target, p, T, draft=draft, method=LinearConfig(4)).tokens


def record_lengths(runner, monkeypatch) -> list[int]:
    """The runner's cache length after each of its forwards, appended to the list returned (undone at teardown:
    the fixtures' runners are shared)."""
    seen = []
    for name in ("forward", "argmax"):
        call = getattr(runner, name)
        monkeypatch.setattr(runner, name, lambda *a, _call=call, **k: (_call(*a, **k), seen.append(runner.length))[0])
    return seen


@pytest.mark.parametrize("fast", [False, True])
def test_streaming_slides_and_stays_bounded(target, draft, fast_pair, fast, monkeypatch):
    """Both caches hold at most ``cache_size`` slots between iterations, a prompt twice the window's length
    included; a verification adds the K + 1 tree nodes, a draft the up to K + 1 new committed tokens and K - 1
    levels (its leaves are never fed)."""
    t, d = fast_pair if fast else (HFRunner(target), HFRunner(draft))
    cfg = StreamingConfig(K=3, cache_size=24, n_sink=4)
    lengths = {"target": record_lengths(t, monkeypatch), "draft": record_lengths(d, monkeypatch)}
    p, T = prompts(1, seed=9, lo=50, hi=51)[0], 60
    res = generate(t, p, T, draft=d, method=cfg)
    assert len(res.tokens) == T
    assert max(lengths["target"]) <= cfg.cache_size + cfg.K + 1, lengths["target"]
    assert max(lengths["draft"]) <= cfg.cache_size + 2 * cfg.K, lengths["draft"]
    assert max(lengths["target"]) > cfg.cache_size  # the window was full when verifying: it slid
    assert t.length <= cfg.cache_size and d.length <= cfg.cache_size
    if not fast:  # the eager cache's tensors hold what its length says
        assert t.cache.layers[0].keys.shape[-2] == t.length


def record_positions(runner, monkeypatch) -> list[int]:
    """The largest position of each of the runner's forwards, appended to the list returned (undone at teardown)."""
    seen = []
    for name in ("forward", "argmax"):
        call = getattr(runner, name)
        monkeypatch.setattr(runner, name, lambda tokens, positions, *a, _call=call, **k: (
            seen.append(int(positions.max())), _call(tokens, positions, *a, **k))[1])
    return seen


def test_streaming_runs_past_the_context(target, draft, monkeypatch):
    """StreamingLLM's point: prompt + T beyond the model's positions, with a window inside them: no forward of
    either model reaches a position past the window's."""
    t, d = HFRunner(target), HFRunner(draft)
    cfg = StreamingConfig(K=3, cache_size=48, n_sink=4)
    positions = record_positions(t, monkeypatch), record_positions(d, monkeypatch)
    p = prompts(1, seed=1, lo=100, hi=101)[0]
    res = generate(t, p, 100, draft=d, method=cfg)
    assert len(res.tokens) == 100 and p.numel() + 100 > MAX_POS
    assert max(positions[0]) < cfg.cache_size + cfg.K + 1 and max(positions[1]) < cfg.cache_size + 2 * cfg.K


def test_streaming_bad_settings(target, draft):
    with pytest.raises(ValueError, match="n_sink < cache_size"):
        StreamingConfig(cache_size=4, n_sink=4)
    with pytest.raises(ValueError, match="lower cache_size"):
        generate(target, prompts(1, lo=100, hi=101)[0], 100, draft=draft, method=StreamingConfig(cache_size=1024))
