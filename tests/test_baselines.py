"""HF assisted generation (exact), StreamingLLM + speculative (sink/window bookkeeping), TALON lives in
test_exactness / test_drafting."""
import pytest
import torch

from dynatree_lib import LinearConfig, generate
from dynatree_lib.baselines import (HFAssistedConfig, StreamingConfig, _inv_freq, evict, generate_hf_assisted,
                                    generate_streaming_spec, rerotate)
from dynatree_lib.cache import new_cache
from dynatree_lib.models import forward

from .conftest import prompts


@pytest.mark.parametrize("cfg", [HFAssistedConfig(), HFAssistedConfig(3, "heuristic"),
                                 HFAssistedConfig(6, "constant", 0.4)])
def test_hf_assisted_equals_ar(target, draft, cfg):
    for p, T in zip(prompts(3, seed=5), (1, 20, 45)):
        res = generate_hf_assisted(target, draft, p, T, cfg)
        assert res.tokens == generate(target, p, T).tokens
        assert sum(res.committed) == T and res.target_forwards == res.iterations >= 1


def test_hf_assisted_bad_settings():
    with pytest.raises(ValueError, match="schedule"):
        HFAssistedConfig(schedule="linear")
    with pytest.raises(ValueError, match="num_assistant_tokens"):
        HFAssistedConfig(num_assistant_tokens=0)


def test_rerotation_equals_computing_at_the_new_position(target):
    x = prompts(1, seed=2, lo=12, hi=13)[0]
    a, b = new_cache(), new_cache()
    forward(target, x, a, torch.arange(x.numel()))
    forward(target, x, b, torch.arange(x.numel()) + 7)
    moved = rerotate(a.layers[0].keys, 7, _inv_freq(target))
    assert torch.allclose(moved, b.layers[0].keys, atol=1e-5)
    assert torch.allclose(a.layers[0].values, b.layers[0].values, atol=1e-6)


def test_evict_keeps_sinks_and_recent_window(target):
    x = prompts(1, seed=3, lo=30, hi=31)[0]
    c = new_cache()
    forward(target, x, c, torch.arange(30))
    k0, v0 = c.layers[0].keys.clone(), c.layers[0].values.clone()
    n = evict(c, n_sink=4, cache_size=20, inv_freq=_inv_freq(target))
    assert n == 10 and c.get_seq_length() == 20
    assert torch.equal(c.layers[0].keys[..., :4, :], k0[..., :4, :])          # sinks untouched
    assert torch.equal(c.layers[0].values[..., 4:, :], v0[..., 14:, :])      # most recent 16 kept
    assert torch.allclose(c.layers[0].keys[..., 4:, :], rerotate(k0[..., 14:, :], -10, _inv_freq(target)))
    assert evict(c, 4, 20, _inv_freq(target)) == 0


def test_streaming_equals_linear_spec_while_it_fits(target, draft):
    p, T = prompts(1, seed=8, lo=20, hi=21)[0], 30
    res = generate_streaming_spec(target, draft, p, T, StreamingConfig(K=4, cache_size=64))
    assert res.tokens == generate(target, p, T).tokens
    assert res.tokens == generate(target, p, T, draft=draft, method=LinearConfig(4)).tokens


def test_streaming_slides_and_stays_bounded(target, draft):
    p, T = prompts(1, seed=9, lo=30, hi=31)[0], 60
    res = generate_streaming_spec(target, draft, p, T, StreamingConfig(K=3, cache_size=24, n_sink=4))
    ar = generate(target, p, T).tokens
    assert len(res.tokens) == T
    agree = sum(a == b for a, b in zip(res.tokens, ar)) / T
    assert 0.0 <= agree <= 1.0   # measured, not asserted equal: the window changes what attention sees


def test_streaming_bad_settings():
    with pytest.raises(ValueError, match="n_sink < cache_size"):
        StreamingConfig(cache_size=4, n_sink=4)
