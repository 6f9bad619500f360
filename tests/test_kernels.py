"""The bf16 linear kernel: its packing, its products against fp32 references, its batch invariance, and
the fast path with it (compiled and eager agree; dynamic shapes: tests/test_fastpath.py)."""
import pytest
import torch

from dynatree_lib import kernels
from dynatree_lib.fastpath import StaticRunner
from dynatree_lib.models import tiny_llama

needs_kernel = pytest.mark.skipif(not kernels.available(), reason="no AVX512-BF16 CPU or no C++ toolchain")


def test_pack_layout():
    w = torch.arange(32 * 6, dtype=torch.float32).reshape(32, 6).to(torch.bfloat16)
    p = kernels.pack(w)
    assert p.shape == (2, 3, 32)
    for b, c, i, e in ((0, 0, 0, 1), (1, 2, 15, 0), (1, 1, 3, 1)):
        assert p[b, c, 2 * i + e] == w[16 * b + i, 2 * c + e]
    assert kernels.packable(w) and not kernels.packable(w.float()) and not kernels.packable(w[:30])


@needs_kernel
@pytest.mark.parametrize("k", [1, 2, 3, 8, 9, 16, 17, 40])
def test_linear_matches_fp32_and_is_batch_invariant(k):
    g = torch.Generator().manual_seed(k)
    w = torch.randn(96, 576, generator=g).to(torch.bfloat16)
    x = torch.randn(k, 576, generator=g).to(torch.bfloat16)
    out = kernels.linear(x, kernels.pack(w))
    ref = x.float() @ w.float().t()
    assert out.dtype == torch.bfloat16 and out.shape == (k, 96)
    assert (out.float() - ref).abs().max() <= 1e-2 * ref.abs().max()
    # every row's bits are the ones it gets alone (the order of its sums does not depend on k)
    alone = torch.cat([kernels.linear(x[i:i + 1], kernels.pack(w)) for i in range(k)])
    assert torch.equal(out, alone)
    # a non-contiguous x is accepted
    assert torch.equal(kernels.linear(x.t().contiguous().t(), kernels.pack(w)), out)


@needs_kernel
def test_bad_operands_are_refused():
    w = kernels.pack(torch.randn(32, 64).to(torch.bfloat16))
    with pytest.raises(RuntimeError, match="x has 48 features"):
        kernels.linear(torch.randn(2, 48).to(torch.bfloat16), w)
    with pytest.raises(RuntimeError, match="bf16"):
        kernels.linear(torch.randn(2, 64), w)


@needs_kernel
def test_fast_path_with_the_kernel():
    """bf16 runner with the kernel: logits near the plain-matmul runner's, and compiled == eager tokens
    (no recompiles across tree sizes: tests/test_fastpath.py)."""
    from dynatree_lib import DynaTreeConfig, generate

    m = tiny_llama(layers=2, vocab_size=96, max_positions=96).to(torch.bfloat16)
    d = tiny_llama(layers=1, vocab_size=96, max_positions=96).to(torch.bfloat16)
    k, plain = StaticRunner(m, kernel=True), StaticRunner(m, kernel=False)
    assert k.engine == "static+dpbf16" and plain.engine == "static"
    x = torch.arange(1, 30)
    a, b = k.forward(x, torch.arange(29)), plain.forward(x, torch.arange(29))
    assert (a.float() - b.float()).abs().max() < 0.05 * b.float().abs().max()
    eager, comp = (k, StaticRunner(d, kernel=True)), (StaticRunner(m, compile=True, kernel=True),
                                                      StaticRunner(d, compile=True, kernel=True))
    p = torch.arange(3, 60)
    cfg = DynaTreeConfig(n_max=6, D_max=3, D0=2, B_max=2)
    assert generate(eager[0], p, 12, draft=eager[1], method=cfg).tokens == \
        generate(comp[0], p, 12, draft=comp[1], method=cfg).tokens
