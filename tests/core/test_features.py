"""The target's hidden states for a draft that reads them (an EAGLE-3 head): every runner returns, from the forward it
runs anyway, the hidden states entering the layers asked for, equal to transformers' ``output_hidden_states``; the
loop hands the draft exactly the committed rows, each position once and in order."""
import pytest
import torch

from dynatree_lib import DynaTreeConfig, LinearConfig, generate
from dynatree_lib.core.engines import kernels
from dynatree_lib.core.engines.static import StaticRunner
from dynatree_lib.core.engines.hf import HFRunner
from dynatree_lib.core.engines.runner import Draft, Runner, Target
from dynatree_lib.harness.setup.tiny import tiny_llama

from ..conftest import prompts

LAYERS = (2, 0, 1)  # any order, as the draft asks; features come back in that order


@torch.no_grad()
def reference(model, ids: torch.Tensor, layers=LAYERS) -> torch.Tensor:
    """[len(ids), len(layers) * d]: transformers' hidden_states[i] of a plain forward, concatenated."""
    out = model(input_ids=ids[None], output_hidden_states=True)
    return torch.cat([out.hidden_states[i][0] for i in layers], -1)


# root (a), its children b and c, b's children d and e: slots after the prefix, positions by depth
TREE = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 1, 0, 0, 1]],
                    dtype=torch.bool)
DEPTH = torch.tensor([0, 1, 1, 2, 2])


def runners(model):
    return {"eager": HFRunner(model), "static": StaticRunner(model)}


@pytest.mark.parametrize("engine", ["eager", "static"])
def test_features_of_prefill_and_of_a_tree_equal_transformers_hidden_states(llama_target, engine):
    r = runners(llama_target)[engine]
    r.keep_features(LAYERS)
    ids = prompts(1, seed=3, lo=20, hi=21)[0]
    tree = torch.tensor([7, 11, 13, 17, 19])
    r.reset()
    r.forward(ids, torch.arange(ids.numel()), last_only=True)
    torch.testing.assert_close(r.features, reference(llama_target, ids), rtol=1e-3, atol=1e-3)
    n = ids.numel()
    r.argmax(tree, n + DEPTH, TREE, n)
    assert r.features.shape == (5, 3 * 64)
    for path in ([0, 1, 3], [0, 2], [0, 1, 4]):  # each root-to-node path is a plain sequence after the prompt
        want = reference(llama_target, torch.cat([ids, tree[path]]))[n:]
        torch.testing.assert_close(r.features[path], want, rtol=1e-3, atol=1e-3)


def test_no_features_unless_asked(llama_target):
    for r in runners(llama_target).values():
        r.forward(torch.tensor([3, 4, 5]), torch.arange(3))
        assert r.features is None


@pytest.mark.parametrize("engine", ["eager", "static"])
def test_the_last_layer_id_is_the_final_normed_state(llama_target, engine):
    """Layer id L (the number of layers): the hidden state the output layer reads, after the final norm
    (transformers' hidden_states[L]; Medusa's and Hydra's input), for a prompt and a tree."""
    r = runners(llama_target)[engine]
    r.keep_features((3, 1))
    ids = prompts(1, seed=6, lo=12, hi=13)[0]
    r.forward(ids, torch.arange(12), last_only=True)
    torch.testing.assert_close(r.features, reference(llama_target, ids, (3, 1)), rtol=1e-3, atol=1e-3)
    with torch.no_grad():
        normed = llama_target.model(input_ids=ids[None]).last_hidden_state[0]
    torch.testing.assert_close(r.features[:, :64], normed, rtol=1e-3, atol=1e-3)
    tree = torch.tensor([7, 11, 13, 17, 19])
    r.argmax(tree, 12 + DEPTH, TREE, 12)
    torch.testing.assert_close(r.features[[0, 1, 3]], reference(llama_target, torch.cat([ids, tree[[0, 1, 3]]]),
                                                                (3, 1))[12:], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("bad", [(), (4,), (-1,), (0.5,), (True,)])
def test_bad_feature_layers_are_refused(llama_target, bad):
    for r in runners(llama_target).values():
        with pytest.raises(ValueError, match=r"layer ids in \[0, 3\]"):
            r.keep_features(bad)


needs_kernel = pytest.mark.skipif(not kernels.available(), reason="the bf16 kernels need a CPU with AVX512-BF16")


@needs_kernel
def test_one_call_forward_keeps_the_features_of_the_layered_forward():
    """The fused bf16 engine writes the features inside its one call: the bits of the layered bf16 path, for a
    prompt, a tree and last-only rows, with logits and argmaxes unchanged by asking."""
    m = tiny_llama(seed=3, hidden_size=128, heads=4, kv_heads=2, layers=3, vocab_size=96).to(torch.bfloat16)
    # three runners over one model: the first two leave it its weights (the last takes them)
    fused, layered = StaticRunner(m, fused=True, keep_model=True), StaticRunner(m, keep_model=True)
    plain = StaticRunner(m, fused=True)
    assert fused.engine == "static+fused" and layered.engine == "static+dpbf16"
    for r in (fused, layered):
        r.keep_features(LAYERS)
    x = torch.randint(1, 96, (30,), generator=torch.Generator().manual_seed(2))
    calls = [(x[:20], torch.arange(20), None, None, True), (x[20:25], 20 + DEPTH, TREE, 20, False)]
    for tokens, pos, vis, start, last in calls:
        logits = [r.forward(tokens, pos, vis, start, last) for r in (fused, layered, plain)]
        assert torch.equal(logits[0], logits[1]) and torch.equal(logits[0], logits[2])
        assert torch.equal(fused.features, layered.features) and fused.features.shape == (tokens.numel(), 3 * 128)
        for r in (fused, layered, plain):
            r.truncate(r.length - tokens.numel())
        ids = [r.argmax(tokens, pos, vis, start, last) for r in (fused, layered, plain)]
        assert torch.equal(ids[0], ids[1]) and torch.equal(ids[0], ids[2])
        assert torch.equal(fused.features, layered.features)


@needs_kernel
def test_one_call_forward_keeps_the_final_normed_state():
    """Layer id L from the fused engine: the bits of the layered bf16 path (its final norm), logits unchanged."""
    m = tiny_llama(seed=3, hidden_size=128, heads=4, kv_heads=2, layers=3, vocab_size=96).to(torch.bfloat16)
    fused, layered = StaticRunner(m, fused=True, keep_model=True), StaticRunner(m)
    for r in (fused, layered):
        r.keep_features((3, 0))
    x = torch.randint(1, 96, (25,), generator=torch.Generator().manual_seed(4))
    for tokens, pos, vis, start, last in [(x[:20], torch.arange(20), None, None, True), (x[20:], 20 + DEPTH, TREE, 20,
                                          False)]:
        assert torch.equal(fused.forward(tokens, pos, vis, start, last), layered.forward(tokens, pos, vis, start, last))
        assert torch.equal(fused.features, layered.features) and fused.features.shape == (tokens.numel(), 2 * 128)


class Recorder(Target, Draft):
    """A draft that reads features and records what the loop hands it (its drafting is the inner runner's)."""

    reads_features = LAYERS

    def __init__(self, inner: Runner):
        self.inner, self.model, self.seen = inner, inner.model, []

    length = property(lambda self: self.inner.length)

    def reset(self):
        self.inner.reset()
        self.seen = []

    def forward(self, *a, **k):
        return self.inner.forward(*a, **k)

    def truncate(self, n):
        self.inner.truncate(n)

    def observe_target(self, features, start):
        self.seen.append((start, features.clone()))


@pytest.mark.parametrize("kv_mode", ["gather", "rebuild"])
@pytest.mark.parametrize("method", [LinearConfig(K=3), DynaTreeConfig(n_max=8)])
@pytest.mark.parametrize("engine", ["eager", "static"])
def test_the_loop_hands_the_draft_each_committed_position_once_in_order(llama_target, llama_draft, engine, method,
                                                                        kv_mode):
    target = runners(llama_target)[engine]
    draft = Recorder(HFRunner(llama_draft))
    for p, T in zip(prompts(3, seed=8), (30, 5, 17)):
        out = generate(target, p, T, draft=draft, method=method, kv_mode=kv_mode)
        ids = torch.cat([p, torch.tensor(out.tokens)])
        starts = [s for s, _ in draft.seen]
        rows = torch.cat([f for _, f in draft.seen])
        sizes = [f.shape[0] for _, f in draft.seen]
        assert starts == [sum(sizes[:i]) for i in range(len(sizes))]  # contiguous from 0, no position twice
        assert rows.shape[0] == ids.numel() - 1  # every token but the last (a bonus: never verified)
        torch.testing.assert_close(rows, reference(llama_target, ids)[:-1], rtol=1e-3, atol=1e-3)


def test_a_draft_on_features_refuses_a_target_that_cannot_keep_them(llama_target, llama_draft):
    class Opaque(HFRunner):
        keep_features = Target.keep_features

    with pytest.raises(ValueError, match="cannot return them"):
        generate(Opaque(llama_target), torch.tensor([1, 2, 3]), 4, draft=Recorder(HFRunner(llama_draft)),
                 method=LinearConfig(K=2))
