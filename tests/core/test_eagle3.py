"""The EAGLE-3 head as a draft runner: every log-probability it gives the drafter, at every tree node of every
iteration, is what the head computes from scratch on the committed tokens (the target's features of each, from a
plain forward) and the node's ancestors (each on its parent's output); its folder round-trips through the
speculators format; it borrows the target's embedding."""
import json

import pytest
import torch

from dynatree_lib import CostAwareConfig, DynaTreeConfig, FixedTreeConfig, LinearConfig, TalonConfig, generate
from dynatree_lib.core.drafts.heads.eagle3 import default_aux_layers, load_head, read_config, save_head
from dynatree_lib.core.drafts.heads.eagle3_runner import Eagle3Runner
from dynatree_lib.core.drafts.heads.base import waves
from dynatree_lib.core.drafts.lookup import LookupConfig, LookupRunner
from dynatree_lib.core.engines.hf import HFRunner
from dynatree_lib.harness.setup.tiny import tiny_eagle3

from ..conftest import prompts


@pytest.fixture(scope="module")
def head(llama_target):
    return tiny_eagle3(llama_target, draft_vocab=64, seed=1)


@torch.no_grad()
def target_features(target, ids: torch.Tensor, layers) -> torch.Tensor:
    out = target(input_ids=ids[None], output_hidden_states=True)
    return torch.cat([out.hidden_states[i][0] for i in layers], -1)


@torch.no_grad()
def from_scratch(head, target, committed: list[int], chain: list[int]) -> torch.Tensor:
    """The head's logits after ``chain`` drafted below the last committed token: the committed pairs (target
    features of token t, token t + 1) causally at positions t, then each drafted token on its parent's output."""
    ids = torch.tensor(committed)
    n = ids.numel()
    feats = target_features(target, ids[:-1], head.cfg.aux_layers)
    out, past = head(ids[1:], feats, torch.arange(n - 1))
    h = out[-1:]
    for d, tok in enumerate(chain):
        h, past = head(torch.tensor([tok]), h, torch.tensor([n - 1 + d]), past=past)
    return head.logits(h)[0]


class Checked(Eagle3Runner):
    """The runner, checking each row it returns against ``from_scratch`` (committed rows: the last one)."""

    def __init__(self, head, target):
        super().__init__(head)
        self.target_model, self.tokens, self.checked = target, [], 0

    def forward(self, tokens, positions, visible=None, tree_start=None, last_only=False):
        out = super().forward(tokens, positions, visible, tree_start, last_only)
        del self.tokens[self.length - tokens.numel():]
        self.tokens += tokens.tolist()
        for r, row in enumerate(out):
            slot = self.length - out.shape[0] + r
            want = self.expected(slot, visible, tree_start)
            if want is not None:
                torch.testing.assert_close(row, want, rtol=1e-4, atol=1e-4)
                self.checked += 1
        return out

    def expected(self, slot: int, visible, tree_start):
        if tree_start is None:
            return from_scratch(self.head, self.target_model, self.tokens[:slot + 1], []) if slot > 0 else None
        first_new = self.length - (visible.shape[0] if visible is not None else 0)
        if visible is None:  # a chain: every slot from the tree's start up to this one
            path = list(range(tree_start, slot + 1))
        else:
            row = slot - first_new
            path = [tree_start + j for j in visible[row].nonzero().flatten().tolist()]
        if tree_start <= 1:
            return None  # below a one-token prompt there are no features to compare against
        return from_scratch(self.head, self.target_model, self.tokens[:tree_start], [self.tokens[s] for s in path])


METHODS = {"linear": LinearConfig(K=4), "fixed": FixedTreeConfig(D=3, B=2, tau=0.0, n_max=12),
           "dynatree": DynaTreeConfig(n_max=12), "talon": TalonConfig(mu=0.05, N=10, K=3),
           "cost": CostAwareConfig(DynaTreeConfig(n_max=10))}


@pytest.mark.parametrize("name,kv_mode", [(name, "gather") for name in METHODS] + [("dynatree", "rebuild")])
def test_every_drafted_row_is_the_heads_own_computation(llama_target, head, name, kv_mode):
    drf = Checked(head, llama_target)
    for p, T in zip(prompts(2, seed=5, lo=2, hi=20), (10, 6)):
        out = generate(HFRunner(llama_target), p, T, draft=drf, method=METHODS[name], kv_mode=kv_mode)
        assert out.tokens == generate(llama_target, p, T).tokens
    assert drf.checked > 10


def test_nodes_waiting_for_a_skipped_level_read_their_parents_output(llama_target, head):
    """A lookup that skips levels leaves nodes that are fed with the next level: a parent and its child in one
    forward, run in waves."""
    drf = Checked(head, llama_target)
    lookup = LookupRunner(drf, LookupConfig((0.95, 0.97, 0.99)))
    p = torch.tensor([5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6])
    cfg = CostAwareConfig(DynaTreeConfig(n_max=10), lookup_skip=0.5, skip_window=0)
    out = generate(llama_target, p, 30, draft=lookup, method=cfg)
    assert out.tokens == generate(llama_target, p, 30).tokens
    assert drf.checked > 10


class Watched(Eagle3Runner):
    """The runner, noting the most target-feature rows it ever holds."""

    most = 0

    def observe_target(self, features, start):
        super().observe_target(features, start)
        self.most = max(self.most, self.target.shape[0])


def test_the_head_holds_only_the_features_it_may_still_read(llama_target, head):
    """The target's features are kept from the position before the last committed row fed, not for the whole
    context: after the prompt's, a decoding holds a few rows (the accepted path's), and a read of a dropped
    position is refused with the positions held, never served from other rows."""
    drf = Watched(head)
    p = prompts(1, seed=6, lo=40, hi=41)[0]
    out = generate(HFRunner(llama_target), p, 30, draft=drf, method=DynaTreeConfig(n_max=12))
    assert out.tokens == generate(llama_target, p, 30).tokens
    assert drf.most >= p.numel() - 1  # the prompt's rows, handed over at once
    assert drf.target.shape[0] <= 12 + 2 and drf.base > p.numel()
    with pytest.raises(ValueError, match=f"holds the target's features of positions {drf.base}\\.\\."):
        drf.features_of(torch.tensor([drf.base - 1]))
    with pytest.raises(ValueError, match="a row needs those of position 1000"):
        drf.features_of(torch.tensor([1000]))


def test_waves_run_parents_first():
    assert waves([9, 9, 9], 10) == [[0, 1, 2]]
    assert waves([9, 10, 11, 10], 10) == [[0], [1, 3], [2]]


def test_the_head_borrows_the_targets_embedding(llama_target, head):
    emb = llama_target.get_input_embeddings().weight
    assert head.embed_tokens is emb
    assert all(p.data_ptr() != emb.data_ptr() for p in head.parameters())
    assert "embed_tokens.weight" not in head.state_dict()


def test_the_folder_round_trips_in_the_speculators_format(llama_target, head, tmp_path):
    save_head(head, tmp_path, verifier="tiny-llama:target")
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["speculators_model_type"] == "eagle3" and raw["architectures"] == ["Eagle3Speculator"]
    assert raw["draft_vocab_size"] == 64 and raw["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    assert raw["target_hidden_size"] == 64 and raw["norm_before_residual"] is False
    assert raw["speculators_config"]["verifier"]["name_or_path"] == "tiny-llama:target"
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
    assert {"fc.weight", "layers.0.self_attn.q_proj.weight", "layers.0.hidden_norm.weight", "norm.weight",
            "lm_head.weight", "d2t", "t2d"} <= names and not any("embed" in n for n in names)
    back = load_head(tmp_path, llama_target.get_input_embeddings().weight)
    assert read_config(tmp_path)[0] == head.cfg
    for (a, x), (b, y) in zip(head.state_dict().items(), back.state_dict().items()):
        assert a == b and torch.equal(x, y)
    assert torch.equal(back.vocab(), head.vocab())
    assert back.t2d.sum() == 64 and torch.equal(back.t2d.nonzero().flatten(), back.vocab())


def test_eagle3_layer_ids():
    assert default_aux_layers(30) == (2, 15, 27)
    assert default_aux_layers(3) == (0, 1, 2)
    assert default_aux_layers(1) == (0, 0, 0)


def test_a_head_file_that_does_not_fit_is_refused(llama_target, head, tmp_path):
    save_head(head, tmp_path, verifier="x")
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["draft_vocab_size"] = 32
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="do not fit the head of its config.json"):
        load_head(tmp_path, llama_target.get_input_embeddings().weight)
    with pytest.raises(FileNotFoundError, match="not an EAGLE-3 head folder"):
        read_config(tmp_path / "nothing")
    with pytest.raises(ValueError, match=r"needs \[96, 64\]"):
        from dynatree_lib.core.drafts.heads.eagle3 import Eagle3Head

        Eagle3Head(head.cfg, torch.zeros(10, 64))


def test_a_head_folder_is_a_draft_reference(tmp_path):
    """``eagle3:<folder>`` loads as any draft: through a profile and ``load_pair``, on the eager and the static
    engines, borrowing the target's embedding tensor, and ``generate`` drafts with it exactly."""
    from dynatree_lib.harness.setup.models import load_model, load_pair
    from dynatree_lib.harness.setup.profiles import get_profile

    target, _ = load_model("tiny-llama:target")
    save_head(tiny_eagle3(target, draft_vocab=200, seed=3), tmp_path, verifier="tiny-llama:target")
    ref = f"eagle3:{tmp_path}"
    prof = get_profile("smoke", target="tiny-llama:target", draft=ref, draft_vocab=None, draft_lookup=False,
                       dtype="float32")
    tgt, drf, tok = prof.load_pair()
    assert isinstance(drf, Eagle3Runner) and drf.head.embed_tokens is tgt.get_input_embeddings().weight
    p = torch.tensor(tok("It was a dark night")["input_ids"])
    ar = generate(tgt, p, 16).tokens
    for method in ("linear", "dynatree", "talon", "dynatree_cost"):
        assert generate(tgt, p, 16, draft=drf, method=method).tokens == ar
    tgt, drf, _ = load_pair("tiny-llama:target", ref, engine="static", draft_vocab=200)
    assert drf.head.embed_tokens.data_ptr() == tgt.net.embed.data_ptr()
    assert generate(tgt, p, 16, draft=drf, method="dynatree").tokens == ar
    with pytest.raises(ValueError, match="scores its own 200 tokens"):
        load_pair("tiny-llama:target", ref, draft_vocab=8192)
    with pytest.raises(ValueError, match="lookup.json is missing"):
        load_pair("tiny-llama:target", ref, draft_lookup=True)
    with pytest.raises(FileNotFoundError, match="config.json is missing"):
        load_pair("tiny-llama:target", f"eagle3:{tmp_path / 'nowhere'}")
