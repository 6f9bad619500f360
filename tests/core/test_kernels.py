"""The bf16 kernels (linear, attention): packing, results against fp32 references, batch invariance, and
the fast path with them: compiled and eager agree, and bf16 speculative decoding reproduces bf16 AR
(dynamic shapes: tests/core/test_fastpath.py). Each test that multiplies runs on every instruction set the kernels have
here (``isa``: AVX512-BF16, and AMX tiles where the CPU has them)."""
import os
import time

import pytest
import torch

from dynatree_lib.core.engines import kernels
from dynatree_lib.core.loop import KV_MODES
from dynatree_lib.core.engines.static import StaticRunner
from dynatree_lib.harness.setup.tiny import tiny_llama
from dynatree_lib.core.engines.runner import additive_mask

from ..conftest import NO_KERNEL

needs_kernel = pytest.mark.skipif(not kernels.available(), reason=NO_KERNEL)


def test_pack_layout():
    w = torch.arange(32 * 6, dtype=torch.float32).reshape(32, 6).to(torch.bfloat16)
    p = kernels.pack(w)
    assert p.shape == (2, 3, 32)
    for b, c, i, e in ((0, 0, 0, 1), (1, 2, 15, 0), (1, 1, 3, 1)):
        assert p[b, c, 2 * i + e] == w[16 * b + i, 2 * c + e]
    assert kernels.packable(w) and not kernels.packable(w.float()) and not kernels.packable(w[:30])


@needs_kernel
@pytest.mark.parametrize("k,d", [(1, 576), (2, 576), (3, 576), (8, 576), (9, 576), (16, 576), (17, 576), (40, 576),
                                 (33, 1536), (1, 18), (11, 18)])  # d = 18: an odd number of feature pairs (no tiles)
def test_linear_matches_fp32_and_is_batch_invariant(k, d, isa):
    g = torch.Generator().manual_seed(k)
    w = torch.randn(96, d, generator=g).to(torch.bfloat16)
    x = torch.randn(k, d, generator=g).to(torch.bfloat16)
    out = kernels.linear(x, kernels.pack(w), isa)
    ref = x.float() @ w.float().t()
    assert out.dtype == torch.bfloat16 and out.shape == (k, 96)
    assert (out.float() - ref).abs().max() <= 1e-2 * ref.abs().max()
    # every row's bits are the ones it gets alone (the order of its sums does not depend on k)
    alone = torch.cat([kernels.linear(x[i:i + 1], kernels.pack(w), isa) for i in range(k)])
    assert torch.equal(out, alone)
    # and inside any number of rows (the tiles' padding included)
    assert all(torch.equal(kernels.linear(x[:j], kernels.pack(w), isa), out[:j]) for j in range(1, k))
    # a non-contiguous x is accepted
    assert torch.equal(kernels.linear(x.t().contiguous().t(), kernels.pack(w), isa), out)


@needs_kernel
def test_bad_operands_are_refused():
    w = kernels.pack(torch.randn(32, 64).to(torch.bfloat16))
    with pytest.raises(RuntimeError, match="x has 48 features"):
        kernels.linear(torch.randn(2, 48).to(torch.bfloat16), w)
    with pytest.raises(RuntimeError, match="bf16"):
        kernels.linear(torch.randn(2, 64), w)


@pytest.mark.full
@needs_kernel
def test_fast_path_with_the_kernel():
    """bf16 runner with the kernel: logits near the plain-matmul runner's, and compiled == eager tokens
    (no recompiles across tree sizes: tests/core/test_fastpath.py)."""
    from dynatree_lib import DynaTreeConfig, generate

    m = tiny_llama(layers=2, vocab_size=96, max_positions=96).to(torch.bfloat16)
    d = tiny_llama(layers=1, vocab_size=96, max_positions=96).to(torch.bfloat16)
    k, plain = StaticRunner(m, kernel=True, keep_model=True), StaticRunner(m, kernel=False, keep_model=True)
    assert k.engine == "static+dpbf16" and plain.engine == "static"
    x = torch.arange(1, 30)
    a, b = k.forward(x, torch.arange(29)), plain.forward(x, torch.arange(29))
    assert (a.float() - b.float()).abs().max() < 0.05 * b.float().abs().max()
    eager, comp = (k, StaticRunner(d, kernel=True, keep_model=True)), (StaticRunner(m, compile=True, kernel=True),
                                                      StaticRunner(d, compile=True, kernel=True))
    p = torch.arange(3, 60)
    cfg = DynaTreeConfig(n_max=6, D_max=3, D0=2, B_max=2)
    assert generate(eager[0], p, 12, draft=eager[1], method=cfg).tokens == \
        generate(comp[0], p, 12, draft=comp[1], method=cfg).tokens


def _attention_fp32(q, k, v, mask):
    """SDPA in fp32 with repeated KV heads (the reference of tests/core/test_fastpath.py), as [n, H * hd]."""
    g = q.shape[0] // k.shape[0]
    o = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(g, 0),
                                                         v.float().repeat_interleave(g, 0), attn_mask=mask.float())
    return o.transpose(0, 1).reshape(q.shape[1], -1)


@needs_kernel
@pytest.mark.parametrize("n", [1, 3, 16, 40])
def test_attention_matches_fp32_and_a_node_gets_the_bits_of_its_sequence(n, isa):
    """A tree row over strided cache slices equals fp32 attention, and its bits are those of the same
    query over its visible slots laid out as a plain sequence (what AR computes for that token)."""
    g = torch.Generator().manual_seed(n)
    H, KV, hd, L, slots = 6, 2, 64, 37, 128
    K = torch.randn(KV, slots, hd, generator=g).to(torch.bfloat16)
    V = torch.randn(KV, slots, hd, generator=g).to(torch.bfloat16)
    q = torch.randn(n, H, hd, generator=g).to(torch.bfloat16).transpose(0, 1)  # [H, n, hd], strided
    parent = [-1] + [int(torch.randint(i, (1,), generator=g)) for i in range(1, n)]
    vis = torch.eye(n, dtype=torch.bool)
    for i in range(1, n):
        vis[i] |= vis[parent[i]]
    mask = additive_mask(vis, L, L + n, torch.bfloat16)
    out = kernels.attention(q, K[:, :L + n], V[:, :L + n], mask, isa)
    assert out.shape == (n, H * hd) and out.dtype == torch.bfloat16
    ref = _attention_fp32(q, K[:, :L + n], V[:, :L + n], mask)
    assert (out.float() - ref).abs().max() < 1e-2
    for i in range(n):
        seq = torch.cat([torch.arange(L), L + vis[i].nonzero()[:, 0]])
        alone = kernels.attention(q[:, i:i + 1], K[:, seq], V[:, seq], torch.zeros(1, seq.numel(), dtype=torch.bfloat16),
                                  isa)
        assert torch.equal(alone, out[i:i + 1])


@needs_kernel
def test_attention_bad_operands_are_refused():
    q, k = torch.zeros(4, 2, 64, dtype=torch.bfloat16), torch.zeros(2, 10, 64, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="mask must be"):
        kernels.attention(q, k, k, torch.zeros(2, 9, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="head dim"):
        kernels.attention(q[..., :48], k[..., :48], k[..., :48], torch.zeros(2, 10, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="bf16"):
        kernels.attention(q.float(), k, k, torch.zeros(2, 10, dtype=torch.bfloat16))
    assert kernels.attention_takes(64) and not kernels.attention_takes(16)


@pytest.mark.full
@needs_kernel
def test_bf16_speculative_decoding_reproduces_bf16_ar(isa):
    """With the kernels (matmuls and attention batch-invariant) and a compiled graph that rounds as eager,
    every exact decoder's bf16 tokens are bf16 AR's, trees included."""
    from dynatree_lib import DynaTreeConfig, FixedTreeConfig, LinearConfig, TalonConfig, generate

    from dynatree_lib.harness.setup.tiny import perturb

    shape = dict(hidden_size=128, heads=4, kv_heads=2, vocab_size=96, max_positions=160)
    m = tiny_llama(seed=1, **shape).to(torch.bfloat16)
    d = perturb(tiny_llama(seed=1, **shape), 0.03, seed=2).to(torch.bfloat16)  # agrees often: trees get accepted
    tgt, drf = StaticRunner(m, compile=True, kernel=True), StaticRunner(d, compile=True, kernel=True)
    assert tgt.net.fused_attention and tgt.engine == "static+compile+dpbf16" and tgt.isa == isa
    configs = [LinearConfig(K=4), FixedTreeConfig(D=3, B=2, tau=0.0, n_max=12),
               DynaTreeConfig(n_max=10, D_max=4, D0=3, B_max=3), TalonConfig(mu=0.01, N=10, K=3)]
    accepted = dict.fromkeys(range(len(configs)), 0)
    for seed in range(3):
        p = torch.randint(1, 96, (20 + 7 * seed,), generator=torch.Generator().manual_seed(seed))
        ar = generate(tgt, p, 40).tokens
        for i, cfg in enumerate(configs):
            res = generate(tgt, p, 40, draft=drf, method=cfg)
            assert res.tokens == ar, (seed, cfg)
            accepted[i] += res.accepted
    assert all(accepted.values()), accepted


def _fused_pair():
    """bf16 Llama pair whose sizes the one-call forward takes (head size 32), as fused and as layered runners."""
    from dynatree_lib.harness.setup.tiny import perturb

    m = tiny_llama(seed=3, hidden_size=128, heads=4, kv_heads=2, layers=3, vocab_size=96, max_positions=160)
    d = perturb(tiny_llama(seed=3, hidden_size=128, heads=4, kv_heads=2, layers=3, vocab_size=96, max_positions=160),
                0.03, 5)
    m, d = m.to(torch.bfloat16), d.to(torch.bfloat16)
    return ((StaticRunner(m, fused=True, keep_model=True), StaticRunner(d, fused=True, keep_model=True)),
            (StaticRunner(m), StaticRunner(d)))


@needs_kernel
def test_one_call_forward_computes_what_the_layered_forward_computes(isa):
    """``kernels.forward`` (the whole forward in one call) against the layer-by-layer fast path with the same
    kernels: the same logits and cache bits for a prompt, a causal chunk and a tree."""
    (f, _), (s, _) = _fused_pair()
    assert f.engine == "static+fused" and s.engine == "static+dpbf16" and f.isa == s.isa == isa
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, 96, (37,), generator=g)
    for r in (f, s):
        r.reset()
    assert torch.equal(f.forward(x, torch.arange(37)), s.forward(x, torch.arange(37)))
    assert torch.equal(f.forward(x[:1], torch.tensor([37])), s.forward(x[:1], torch.tensor([37])))
    # a tree of 6 nodes: root, two children, grandchildren; positions by depth
    visible = torch.tensor([[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0], [1, 1, 0, 1, 0, 0],
                            [1, 1, 0, 0, 1, 0], [1, 0, 1, 0, 0, 1]], dtype=torch.bool)
    pos = 38 + torch.tensor([0, 1, 1, 2, 2, 2])
    a = f.forward(x[:6], pos, visible=visible, tree_start=38)
    b = s.forward(x[:6], pos, visible=visible, tree_start=38)
    assert torch.equal(a, b)
    for cf, cs in zip(f.net.cache(), s.net.cache()):
        assert torch.equal(cf[:, :, :44], cs[:, :, :44])
    f.truncate(40)  # last-only logits of a prompt chunk
    s.truncate(40)
    assert torch.equal(f.forward(x[:5], torch.arange(40, 45), last_only=True),
                       s.forward(x[:5], torch.arange(40, 45), last_only=True))


@needs_kernel
def test_the_profile_times_each_step_of_the_one_call_forward():
    """``kernels.forward_profile``: on, every thread's steps of the fused forwards since the last call, in
    ``PROFILE_STEPS``' order; off, nothing is timed."""
    (f, _), _ = _fused_pair()
    x = torch.randint(1, 96, (8,), generator=torch.Generator().manual_seed(2))
    f.reset()
    kernels.forward_profile(True)
    f.argmax(x, torch.arange(8))
    table = kernels.forward_profile(False)
    assert table.shape[0] >= 1 and table.shape[1] == len(kernels.PROFILE_STEPS) and (table >= 0).all()
    assert (table[:, kernels.PROFILE_STEPS.index("q, k, v + RoPE")] > 0).all()
    f.truncate(0)
    f.argmax(x, torch.arange(8))
    assert kernels.forward_profile(False).numel() == 0


@needs_kernel
def test_the_call_clock_counts_the_one_call_forwards_only():
    """``kernels.CallClock``: a one-call forward or greedy decode adds at most its own wall time, and more than
    nothing; a layered forward adds nothing (its time is the host's)."""
    import time

    (f, _), (s, _) = _fused_pair()
    x = torch.randint(1, 96, (8,), generator=torch.Generator().manual_seed(4))
    for call in (lambda: f.forward(x, torch.arange(8)), lambda: f.greedy_steps(x[:1], 4)):
        f.reset()
        before, t0 = kernels.CallClock.seconds, time.perf_counter()
        call()
        assert 0 < kernels.CallClock.seconds - before <= time.perf_counter() - t0
    s.reset()
    before = kernels.CallClock.seconds
    s.forward(x, torch.arange(8))
    assert kernels.CallClock.seconds == before


@needs_kernel
def test_one_call_argmax_is_greedy_of_the_logits(isa):
    """``StaticRunner.argmax`` on the one-call forward (the kernel's own argmax, no logits) returns
    ``greedy(forward(..))`` for a prompt, one token, a tree and last-only rows; with heads whose rows tie (equal
    rows within one thread's columns and across the threads', and an all-zero head) it keeps the first index."""
    from dynatree_lib.core.engines.runner import greedy

    visible = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    x = torch.randint(1, 96, (30,), generator=torch.Generator().manual_seed(1))
    for ties in (None, (50, 90), (10, 50, 90), (20, 52), ()):
        m = tiny_llama(seed=3, hidden_size=128, heads=4, kv_heads=2, layers=2, vocab_size=96, max_positions=160)
        if ties is not None:
            with torch.no_grad():
                w = m.lm_head.weight
                v = w[7].clone()
                w.zero_()
                for i in ties:
                    w[i] = v
        r = StaticRunner(m.to(torch.bfloat16), fused=True)
        assert r.engine == "static+fused" and r.isa == isa
        calls = [(x[:20], torch.arange(20), None, None, False), (x[20:21], torch.tensor([20]), None, None, False),
                 (x[21:25], 21 + torch.tensor([0, 1, 1, 2]), visible, 21, False),
                 (x[25:30], torch.arange(25, 30), None, None, True)]
        for tokens, pos, vis, start, last in calls:
            length = r.length
            want = greedy(r.forward(tokens, pos, vis, start, last))
            r.truncate(length)
            got = r.argmax(tokens, pos, vis, start, last)
            assert got.dtype == torch.long and torch.equal(got, want), (ties, tokens.numel())
            assert r.length == length + tokens.numel()


@needs_kernel
def test_greedy_decoding_in_one_call_is_the_token_by_token_loop(isa):
    """``StaticRunner.greedy_steps`` (``kernels.greedy_decode``: every one-token forward in one call) gives the tokens
    and cache bits of ``Target.greedy_steps``' loop of ``argmax`` calls; it stops right after EOS, takes 0 and 1
    steps, refuses what the cache cannot hold, and leaves a runner keeping features to the loop."""
    from dynatree_lib.core.engines.runner import Target

    (r, _), _ = _fused_pair()
    assert r.isa == isa
    x = torch.randint(1, 96, (12,), generator=torch.Generator().manual_seed(4))

    def decode(one_call: bool, steps: int, eos=None):
        r.reset()
        r.forward(x[:-1], torch.arange(11), last_only=True)
        out = (r.greedy_steps if one_call else lambda *a: Target.greedy_steps(r, *a))(x[-1:], steps, eos)
        return out.tolist(), r.length, [c[:, :, :r.length].clone() for c in r.net.cache()]

    loop, length, cache = decode(False, 60)
    fast = decode(True, 60)
    assert fast[0] == loop and fast[1] == length == 71 and all(map(torch.equal, fast[2], cache))
    eos = loop[20]
    assert decode(True, 60, eos)[:2] == (loop[:loop.index(eos) + 1], 12 + loop.index(eos))
    assert decode(True, 1)[0] == loop[:1] and decode(True, 0)[:2] == ([], 11)
    r.reset()
    with pytest.raises(ValueError, match="static cache of .* slots is full"):
        r.greedy_steps(x[-1:], r.max_len + 1)
    r.net.feature_layers = (1,)  # features are kept by the loop's forwards only
    try:
        assert decode(True, 5)[0] == loop[:5] and r.features is not None
    finally:
        r.net.feature_layers = ()


@needs_kernel
def test_one_call_forward_falls_back_where_it_cannot_run():
    m = tiny_llama(layers=1, vocab_size=96)  # head size 16: the attention kernel does not take it
    assert StaticRunner(m.to(torch.bfloat16), fused=True).engine == "static+dpbf16"
    assert StaticRunner(tiny_llama(layers=1, hidden_size=128, vocab_size=96), fused=True).engine == "static"  # fp32
    r, _ = _fused_pair()[0]
    with pytest.raises(RuntimeError, match="token id 96 outside the vocabulary"):
        r.forward(torch.tensor([96]), torch.tensor([0]))
    with pytest.raises(RuntimeError, match="position 999 past the RoPE table"):
        r.forward(torch.tensor([5]), torch.tensor([999]))
    import types

    unpacked = types.SimpleNamespace(**{**vars(r.net), **r.net._parameters, **r.net._buffers,
                                        "wo": torch.zeros(3, 128, 128, dtype=torch.bfloat16)})
    mask = torch.zeros(1, 1, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="must be packed by dynatree_lib.core.engines.kernels.pack"):
        kernels.forward(torch.tensor([5]), torch.tensor([0]), torch.tensor([0]), mask, unpacked)


@needs_kernel
@pytest.mark.parametrize("kv_mode", KV_MODES)
def test_bf16_one_call_forward_speculative_decoding_reproduces_bf16_ar(kv_mode, isa):
    """On the one-call forward too, every decoder family's bf16 tokens are bf16 AR's: T=1, a one-token prompt,
    a budget of one node, EOS inside a draft and the context limit included."""
    from dynatree_lib import (CostAwareConfig, DynaTreeConfig, FixedTreeConfig, LinearConfig, StreamingConfig,
                              TalonConfig, generate)
    (tgt, drf), (layered, _) = _fused_pair()
    assert tgt.isa == drf.isa == layered.isa == isa
    configs = [LinearConfig(K=4), FixedTreeConfig(D=4, B=2, tau=0.0, n_max=12), FixedTreeConfig(D=5, B=3, n_max=1),
               DynaTreeConfig(n_max=10, D_max=4, D0=3, B_max=3), DynaTreeConfig(n_max=1), TalonConfig(mu=0.01, N=10,
                                                                                                      K=3),
               StreamingConfig(K=4, cache_size=128, n_sink=4), CostAwareConfig()]
    g = torch.Generator().manual_seed(11)
    cases = [(torch.randint(1, 96, (n,), generator=g), T) for n, T in ((1, 25), (9, 1), (30, 40), (150, 10))]
    accepted = 0
    for p, T in cases:
        ar = generate(tgt, p, T).tokens
        assert ar == generate(layered, p, T).tokens
        for cfg in configs:
            if isinstance(cfg, StreamingConfig) and p.numel() + T > 128:
                continue
            res = generate(tgt, p, T, draft=drf, method=cfg, kv_mode=kv_mode)
            assert res.tokens == ar, (p.numel(), T, cfg)
            accepted += res.accepted
        if T >= 40:  # EOS inside a draft: every decoder stops right after it
            eos = ar[12]
            stop = ar[: ar.index(eos) + 1]
            assert generate(tgt, p, T, eos_token_id=eos).tokens == stop
            for cfg in configs[:4]:
                assert generate(tgt, p, T, draft=drf, method=cfg, kv_mode=kv_mode, eos_token_id=eos).tokens == stop
    assert accepted > 0


def test_a_lock_left_by_a_killed_build_is_removed_and_a_live_one_kept(tmp_path, monkeypatch):
    """torch's loader waits while its build lock exists: one older than any build is removed (with a warning that
    names it), one a build may still hold is kept."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    lock = tmp_path / kernels.build_name() / "lock"
    lock.parent.mkdir()
    lock.touch()
    kernels.clear_stale_lock()
    assert lock.exists()
    old = time.time() - kernels.STALE_LOCK_S - 5
    os.utime(lock, (old, old))
    with pytest.warns(UserWarning, match=str(lock)):
        kernels.clear_stale_lock()
    assert not lock.exists()


@needs_kernel
def test_the_machine_chooses_the_instruction_set_and_says_why(monkeypatch):
    """AMX where the CPU has it (and the build and Linux allow it), else AVX512-BF16; a run can refuse AMX with
    DYNATREE_AMX=0, and a test cannot ask for an instruction set this machine lacks."""
    monkeypatch.setattr(kernels, "_chosen_isa", [])  # as a run starts (the module's ``isa`` fixture may be active)
    have_amx = kernels.why_no_amx() is None
    assert kernels.isas() == ((kernels.AVX512, kernels.AMX) if have_amx else (kernels.AVX512,))
    assert kernels.default_isa() == (kernels.AMX if have_amx else kernels.AVX512)
    with kernels.using_isa(kernels.AVX512):
        assert kernels.default_isa() == kernels.AVX512
    if not have_amx:
        with pytest.raises(ValueError, match="cannot run here"):
            kernels.using_isa(kernels.AMX).__enter__()
        w = kernels.pack(torch.randn(32, 64).to(torch.bfloat16))
        with pytest.raises(RuntimeError, match="amx=True, but"):  # refused before any thread starts
            kernels.linear(torch.randn(2, 64).to(torch.bfloat16), w, kernels.AMX)
    kernels.why_no_amx.cache_clear()
    monkeypatch.setenv("DYNATREE_AMX", "0")
    try:
        assert kernels.why_no_amx() in ("DYNATREE_AMX=0", "the CPU has no amx_bf16")
        assert kernels.default_isa() == kernels.AVX512
    finally:
        kernels.why_no_amx.cache_clear()
