"""The EAGLE-3 head on the fused bf16 engine (``core.drafts.heads.eagle3_fused``): its logits are the eager head's up
to bf16 rounding, at every row of every forward a decoding asks of it (catch-up, tree levels, waves), and with it on the
fused target every decoder's greedy bf16 tokens are bf16 AR's.

The tolerance. bf16 keeps 8 significant bits (unit roundoff 2^-9); a head step rounds a dozen intermediate tensors
to it, and the eager bf16 head and the fused one round at different places (eager rounds attention scores and each
matmul's output; the kernels sum in fp32 and round once), so neither is the other's bits. Both are compared with the
same head in fp32 (the same bf16-rounded weights and inputs, computed without rounding): the fused head must be as
accurate as the eager bf16 head (its worst row error at most twice eager's worst, over a decoding) and every row
close (relative L2 error of a logits row below 0.1). A real defect (a weight packed wrong, a row reading another
slot's input, a position off by one) moves a row by O(1); bf16 noise on these random heads stays at a few percent.
"""
import copy

import pytest
import torch

from dynatree_lib import CostAwareConfig, DynaTreeConfig, FixedTreeConfig, LinearConfig, TalonConfig, generate
from dynatree_lib.core.engines import kernels
from dynatree_lib.core.drafts.heads.eagle3_fused import FusedEagle3Runner, head_runner
from dynatree_lib.core.drafts.heads.eagle3_runner import Eagle3Runner
from dynatree_lib.core.engines.static import StaticRunner
from dynatree_lib.core.drafts.lookup import LookupConfig, LookupRunner
from dynatree_lib.harness.setup.tiny import tiny_eagle3, tiny_llama

from ..conftest import NO_KERNEL, FannedRunner, SameBits, prompts

pytestmark = pytest.mark.skipif(not kernels.available(), reason=NO_KERNEL)

SHAPE = dict(hidden_size=128, heads=4, kv_heads=2, layers=3, vocab_size=96, max_positions=160)  # head size 32


@pytest.fixture(scope="module")
def pair(isa):
    """A bf16 Llama the one-call forward takes, on the fused engine, and a random head on it (which a fused runner
    takes over: tests hand runners ``own(head)``), on each instruction set of the kernels (``isa``)."""
    m = tiny_llama(seed=3, **SHAPE).to(torch.bfloat16)
    head = tiny_eagle3(m, draft_vocab=64, seed=1)
    return StaticRunner(m, fused=True, keep_model=True), head


def own(head):
    """A copy of the module's head for a runner that takes its weights over (``eagle3_fused.release``)."""
    return copy.deepcopy(head)


def in_fp32(head):
    """The same head (its bf16 weights, the same embedding values) computing in fp32."""
    h = copy.deepcopy(head).float()
    object.__setattr__(h, "embed_tokens", head.embed_tokens.float())
    return h


def row_errors(x: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Relative L2 error of each logits row."""
    return (x.float() - ref).norm(dim=-1) / ref.norm(dim=-1)


class Twin(FannedRunner):
    """The fused runner, with the eager bf16 and the fp32 runners of the same head fed every call it gets; records
    each returned row's errors against fp32 (fused, eager), the first token's row of a longer prompt aside (never
    read, see ``FusedEagle3Runner._mask``)."""

    def __init__(self, head):
        super().__init__(head, FusedEagle3Runner(head, keep_head=True), Eagle3Runner(head), Eagle3Runner(in_fp32(head)))
        self.errors = []

    def forward(self, tokens, positions, visible=None, tree_start=None, last_only=False):
        skip = self.length == 0 and tokens.numel() > 1 and not last_only
        fused, eager, exact = self.each("forward", tokens, positions, visible, tree_start, last_only)
        keep = slice(1 if skip else 0, None)
        self.errors.append((row_errors(fused[keep], exact.float()[keep]), row_errors(eager[keep], exact.float()[keep])))
        return fused


def kernel_calls(runner: FusedEagle3Runner) -> list[int]:
    """The rows of each kernel call ``runner`` makes from now on (its ``_step`` wrapped)."""
    calls, step = [], runner._step
    runner._step = lambda *a, **kw: calls.append(a[0].numel()) or step(*a, **kw)
    return calls


def errors_of_a_decoding(target, head, draft_of=lambda twin: twin, method=DynaTreeConfig(n_max=10), T=24):
    """(fused, eager) row errors against fp32 over decodings of a one-token and two longer prompts, which must
    commit bf16 AR's tokens."""
    twin = Twin(head)
    for p in [torch.tensor([7])] + prompts(2, seed=4, lo=3, hi=30):
        assert generate(target, p, T, draft=draft_of(twin), method=method).tokens == generate(target, p, T).tokens
    fused, eager = (torch.cat(e) for e in zip(*twin.errors))
    return fused, eager


@pytest.mark.parametrize("method", [DynaTreeConfig(n_max=10), LinearConfig(K=4)], ids=["dynatree", "linear"])
def test_the_fused_heads_logits_are_the_eager_heads_up_to_bf16_rounding(pair, method):
    target, head = pair
    fused, eager = errors_of_a_decoding(target, head, method=method)
    assert fused.numel() > 50
    assert fused.max() <= 2 * eager.max() and fused.max() < 0.1, (fused.max(), eager.max())


def test_waves_of_nodes_fed_with_their_parents_run_one_call_each(pair):
    """A lookup that skips levels feeds a parent and its child in one forward: the fused runner runs them in waves,
    each row on its parent's output."""
    target, head = pair
    cfg = CostAwareConfig(DynaTreeConfig(n_max=10), lookup_skip=0.5, skip_window=0)
    twin = Twin(head)
    lookup = lambda t: LookupRunner(t, LookupConfig((0.95, 0.97, 0.99)))
    p = torch.tensor([5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6])
    calls = kernel_calls(twin.runners[0])
    res = generate(target, p, 30, draft=lookup(twin), method=cfg)
    assert res.tokens == generate(target, p, 30).tokens and res.accepted > 0  # commits moved the head's slots
    fused, eager = (torch.cat(e) for e in zip(*twin.errors))
    assert fused.max() <= 2 * eager.max() and fused.max() < 0.1, (fused.max(), eager.max())
    assert len(calls) > len(twin.errors)  # some forward ran in more than one wave


@pytest.mark.parametrize("runner", [Eagle3Runner, FusedEagle3Runner], ids=["eager", "fused"])
def test_a_ring_of_outputs_that_wraps_gives_the_bits_of_one_that_does_not(pair, runner):
    """With 8 tree slots the outputs ring (9 rows: slot s in row s mod 9) wraps again and again over a decoding, and
    every call gives the bits of the default ring, which never wraps here (both caches the same size); a tree of
    more nodes than the ring holds is refused, naming it."""
    target, head = pair
    small, large = runner(own(head), max_len=head.cfg.max_positions + 320 - 8, tree_slots=8), runner(own(head))
    assert small.max_len == large.max_len and len(small.out) == 9
    p = prompts(1, seed=5, lo=40, hi=41)[0]
    res = generate(target, p, 60, draft=SameBits(head, small, large, rings=False), method=DynaTreeConfig(n_max=8))
    assert res.tokens == generate(target, p, 60).tokens and small.length > 10 * len(small.out)
    with pytest.raises(ValueError, match="is more than the 4 tree slots"):
        generate(target, p, 5, draft=runner(own(head), tree_slots=4), method=DynaTreeConfig(n_max=8))


def test_a_prompts_catch_up_in_pieces_gives_the_bits_of_one_call(pair):
    """A 100-token prompt's catch-up runs in pieces of ``catch_up_rows``: the same bits as one call over all of it."""
    target, head = pair
    pieces, whole = FusedEagle3Runner(own(head)), FusedEagle3Runner(own(head))
    whole.catch_up_rows = 10**6
    calls = kernel_calls(pieces)
    p = prompts(1, seed=6, lo=100, hi=101)[0]
    res = generate(target, p, 20, draft=SameBits(head, pieces, whole), method=LinearConfig(K=4))
    assert res.tokens == generate(target, p, 20).tokens
    assert calls[:4] == [32, 32, 32, 4]


METHODS = {"linear": LinearConfig(K=4), "fixed": FixedTreeConfig(D=3, B=2, tau=0.0, n_max=12),
           "dynatree": DynaTreeConfig(n_max=12), "talon": TalonConfig(mu=0.05, N=10, K=3),
           "cost": CostAwareConfig(DynaTreeConfig(n_max=10))}


@pytest.mark.parametrize("name,kv_mode", [(name, "gather") for name in METHODS] + [("dynatree", "rebuild")])
def test_bf16_decoding_with_the_fused_head_is_bf16_ar(pair, name, kv_mode):
    """The fused target is batch-invariant, so whatever the head drafts, every decoder commits bf16 AR's tokens:
    a one-token prompt, T = 1 and prompts near the context limit included; with the context lookup on a prompt the
    target repeats, drafts are accepted (the head's cache committed through a tree)."""
    from dynatree_lib.harness.setup.models import rope_tables

    target, head = pair
    drf = head_runner(own(head), fused=True, rope=rope_tables(target))
    assert drf.engine == "eagle3+fused" and drf.net.cos is target.net.cos
    cases = [(torch.tensor([9]), 20), (prompts(1, seed=2, lo=5, hi=6)[0], 1)]
    cases += [(p, 30) for p in prompts(2, seed=7, lo=4, hi=40)] + [(prompts(1, seed=3, lo=120, hi=121)[0], 30)]
    for p, T in cases:
        assert generate(target, p, T, draft=drf, method=METHODS[name], kv_mode=kv_mode).tokens == \
            generate(target, p, T).tokens
    p = torch.tensor([5, 6, 7] * 4)
    res = generate(target, p, 30, draft=LookupRunner(drf, LookupConfig((0.95, 0.97, 0.99))), method=METHODS[name],
                   kv_mode=kv_mode)
    assert res.tokens == generate(target, p, 30).tokens and res.accepted > 0


def test_the_fused_head_reads_the_targets_rope_tables_where_they_are_its_own(pair):
    """One copy of the RoPE tables: the head's runner reads the target's (the same values: the same logits), and
    keeps its own where the target's differ or are too short."""
    from dynatree_lib.harness.setup.models import rope_tables

    target, head = pair
    rope = rope_tables(target)
    shared, alone = head_runner(own(head), fused=True, rope=rope), head_runner(own(head), fused=True)
    assert shared.net.cos is rope[0] and shared.net.sin is rope[1] and alone.net.cos is not rope[0]
    assert head_runner(own(head), fused=True, rope=rope._replace(inv_freq=rope.inv_freq * 2)).net.cos is not rope[0]
    assert head_runner(own(head), fused=True, rope=rope._replace(cos=rope.cos[:8])).net.cos is not rope[0]
    assert_same_logits(shared, alone, head)


def test_the_fused_runner_only_where_the_kernels_take_the_head(pair):
    target, head = pair
    assert isinstance(head_runner(own(head), fused=True), FusedEagle3Runner)
    assert type(head_runner(head, fused=False)) is Eagle3Runner  # the target is not on the fused engine
    assert type(head_runner(in_fp32(head), fused=True)) is Eagle3Runner  # fp32: the exactness path stays eager
    small = tiny_llama(seed=3, hidden_size=64, heads=4, kv_heads=2, layers=3, vocab_size=96).to(torch.bfloat16)
    assert type(head_runner(tiny_eagle3(small, draft_vocab=64), fused=True)) is Eagle3Runner  # head size 16


def test_the_step_refuses_inputs_it_cannot_read(pair):
    _, head = pair
    r = FusedEagle3Runner(own(head))
    r.reset()
    one = torch.tensor([1])
    mask = torch.zeros(1, 2, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="input row 999 outside the inputs"):
        kernels.eagle3_step(one, one, one, mask, inputs=r.out, input_rows=torch.tensor([999]), net=r.net)
    with pytest.raises(RuntimeError, match="inputs must be 384 wide"):
        kernels.eagle3_step(one, one, one, mask, inputs=r.out, input_rows=torch.tensor([0]), net=r.net, fc=r.net.fc)
    with pytest.raises(RuntimeError, match="fc must be packed"):
        kernels.eagle3_step(one, one, one, mask, inputs=r.target, input_rows=torch.tensor([0]), net=r.net,
                            fc=r.net.wo[0])


def test_a_step_over_no_feature_rows_is_a_step_over_zero_rows(pair):
    """A one-token prompt's first row reads no features (-1), and the runner may then hold none at all: the step
    over an empty inputs tensor is the step over a zero row (the kernel once took an empty one for no head)."""
    _, head = pair
    r = FusedEagle3Runner(own(head))
    r.reset()
    args = torch.tensor([7]), torch.tensor([0]), torch.tensor([0]), r._mask(1, None, None)
    width = 3 * head.cfg.target_hidden
    none = kernels.eagle3_step(*args, torch.zeros(0, width, dtype=torch.bfloat16), input_rows=torch.tensor([-1]),
                               net=r.net, fc=r.net.fc)
    zero = kernels.eagle3_step(*args, torch.zeros(1, width, dtype=torch.bfloat16), input_rows=torch.tensor([-1]),
                               net=r.net, fc=r.net.fc)
    assert torch.equal(none, zero)


def test_the_fused_runner_holds_the_heads_weights_once(pair):
    """Packed, its weights are the head's one copy: the plain ones are released (any use names the weight and the
    runner), the input norms read the packed row; ``keep_head`` keeps the head whole beside it."""
    from dynatree_lib.core.engines.ownership import ReleasedWeight, ReleasedWeightError

    _, head = pair
    taken, kept = own(head), own(head)
    r, k = FusedEagle3Runner(taken), FusedEagle3Runner(kept, keep_head=True)
    assert isinstance(taken.fc.weight, ReleasedWeight) and isinstance(taken.lm_head.weight, ReleasedWeight)
    assert taken.layer.hidden_norm.weight.data_ptr() == r.net.ln1.data_ptr() + 2 * head.cfg.hidden
    with pytest.raises(ReleasedWeightError, match="fc.weight .* released: a FusedEagle3Runner"):
        taken.state_dict()
    assert not any(isinstance(p, ReleasedWeight) for p in kept.parameters())
    assert_same_logits(r, k, head)


def assert_same_logits(a, b, head):
    """Two runners of ``head`` give the same bits over 8 committed tokens on the same random target features."""
    p = torch.arange(1, 9)
    feats = torch.randn(8, 3 * head.cfg.target_hidden, generator=torch.Generator().manual_seed(0)).bfloat16()
    for r in (a, b):
        r.reset()
        r.observe_target(feats, 0)
    assert torch.equal(a.forward(p, torch.arange(8)), b.forward(p, torch.arange(8)))
