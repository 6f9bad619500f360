"""Weights on int8 rows (``core.engines.int8_rows``): snapping puts a weight there for good, ``split`` (the reference,
in torch) finds its exact int8 form and ``kernels.int8_rows`` finds the same, and the fused engine, which holds such a
head in
int8 (half the bytes), computes bit for bit what it computes from the same head held in bf16: every logit, output row
and cache entry of every call of a decoding."""
import copy

import pytest
import torch

from dynatree_lib import DynaTreeConfig, LinearConfig, generate
from dynatree_lib.core.engines import int8_rows, kernels
from dynatree_lib.core.drafts.heads.eagle3_fused import FusedEagle3Runner
from dynatree_lib.core.engines.static import StaticRunner
from dynatree_lib.core.engines.ownership import reachable_storages
from dynatree_lib.harness.setup.tiny import tiny_eagle3, tiny_llama

from ..conftest import NO_KERNEL, SameBits, prompts

SHAPE = dict(hidden_size=128, heads=4, kv_heads=2, layers=3, vocab_size=96, max_positions=160)


def split(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The reference of ``kernels.int8_rows``: (int8 values [n, d], powers of two [n] fp32) of a weight on int8 rows,
    whose product is ``w`` exactly; None where ``w`` is not on int8 rows."""
    s = int8_rows.row_scales(w)
    q = w.detach().float() / s[:, None]
    if not torch.equal(q, q.round()) or q.abs().max() > int8_rows.LIMIT:
        return None
    return q.to(torch.int8), s


def test_snapping_puts_each_row_on_int8_steps_of_a_power_of_two():
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(48, 80, generator=g) * torch.logspace(-3, 1, 48)[:, None]).bfloat16()
    w[5] = 0
    assert split(w) is None
    snapped = int8_rows.snap(w)
    q, s = split(snapped)
    assert q.dtype == torch.int8 and q.abs().max() <= int8_rows.LIMIT
    assert torch.equal(torch.log2(s), torch.log2(s).round())  # powers of two
    assert torch.equal((q.float() * s[:, None]).to(w.dtype), snapped)
    assert torch.equal(int8_rows.snap(snapped), snapped)  # for good
    assert ((snapped.float() - w.float()).abs() <= s[:, None] / 2 + 1e-12).all()  # the nearest step
    assert (q.abs().amax(1)[torch.arange(48) != 5] >= 64).all()  # a row uses at least half the steps
    assert torch.equal(snapped[5], w[5])


@pytest.mark.skipif(not kernels.available(), reason=NO_KERNEL)
def test_the_kernels_split_is_the_reference_split():
    g = torch.Generator().manual_seed(1)
    w = (torch.randn(40, 64, generator=g) * torch.logspace(-4, 2, 40)[:, None]).bfloat16()
    w[3] = 0
    assert kernels.int8_rows(w) is None
    for x in (int8_rows.snap(w), int8_rows.snap(w)[:, :32]):
        (q, s), (q_ref, s_ref) = kernels.int8_rows(x), split(x)
        assert torch.equal(q, q_ref) and torch.equal(s, s_ref)


class Both(SameBits):
    """The int8 and the bf16 fused runners of one snapped head, fed every call; each call's results must be the
    same bits (logits, the outputs ring and the cache)."""

    def __init__(self, head):
        self.int8, self.bf16 = FusedEagle3Runner(copy.deepcopy(head)), bf16_runner(head)
        super().__init__(head, self.int8, self.bf16)
        assert self.int8.net.head.dtype == torch.int8 and self.bf16.net.scales is None


def bf16_runner(head):
    """The fused runner of ``head`` with its weights packed in bf16 (as a head off int8 rows is)."""
    from unittest import mock

    with mock.patch.object(kernels, "int8_rows", return_value=None):
        return FusedEagle3Runner(copy.deepcopy(head))


def snapped_head(model, seed=1, but=()):
    """A random head whose matmul weights are on int8 rows, those named in ``but`` aside."""
    head = tiny_eagle3(model, draft_vocab=64, seed=seed)
    with torch.no_grad():
        for name, module in head.named_modules():
            if isinstance(module, torch.nn.Linear) and name not in but:
                module.weight.copy_(int8_rows.snap(module.weight))
    return head


@pytest.mark.skipif(not kernels.available(), reason=NO_KERNEL)
@pytest.mark.parametrize("method,but", [(DynaTreeConfig(n_max=10), ()), (LinearConfig(K=4), ()),
                                        (DynaTreeConfig(n_max=10), ("fc",))], ids=["dynatree", "linear", "bf16-fc"])
def test_the_int8_head_computes_the_bf16_heads_bits(method, but, isa):
    """Every weight on int8 rows, or all but fc (which then stays bf16 beside the others' int8)."""
    model = tiny_llama(seed=3, **SHAPE).to(torch.bfloat16)
    target, head = StaticRunner(model, fused=True, keep_model=True), snapped_head(model, but=but)
    both = Both(head)
    assert (both.int8.net.fc.dtype == torch.bfloat16) == ("fc" in but) and both.int8.isa == both.bf16.isa == isa
    for p, T in [(torch.tensor([7]), 12), *((p, 24) for p in prompts(2, seed=4, lo=3, hi=40))]:
        assert generate(target, p, T, draft=both, method=method).tokens == generate(target, p, T).tokens
    assert both.calls > 20


@pytest.mark.skipif(not kernels.available(), reason=NO_KERNEL)
def test_the_int8_head_holds_half_the_bytes_and_the_kernel_checks_its_scales():
    model = tiny_llama(seed=3, **SHAPE).to(torch.bfloat16)
    head = snapped_head(model)
    int8, bf16 = FusedEagle3Runner(copy.deepcopy(head)), bf16_runner(head)
    packed = ("fc", "wqkv", "wo", "w13", "w2", "head")
    size = {r: sum(getattr(r.net, k).nbytes for k in packed) for r in (int8, bf16)}
    assert size[int8] * 2 == size[bf16] and all(getattr(int8.net, k).dtype == torch.int8 for k in packed)
    held = {r: sum(reachable_storages(r).values()) for r in (int8, bf16)}
    assert held[int8] == held[bf16] - size[int8] + int8.net.scales.nbytes  # the rest is the same
    int8.reset()
    one, mask = torch.tensor([1]), torch.zeros(1, 2, dtype=torch.bfloat16)
    net = copy.copy(int8.net)
    net.scales = int8.net.scales[:-1]
    with pytest.raises(RuntimeError, match="scales must be fp32"):
        kernels.eagle3_step(one, one, one, mask, inputs=int8.out, input_rows=torch.tensor([0]), net=net)
    net.scales = None
    with pytest.raises(RuntimeError, match="int8 rows where scales are given"):
        kernels.eagle3_step(one, one, one, mask, inputs=int8.out, input_rows=torch.tensor([0]), net=net)
