"""Medusa and Hydra heads as draft runners: every log-probability they give the drafter, at every tree node of every
iteration, is what the heads compute from scratch (head d on the target's last hidden state of the token before the
tree's root, from a plain forward; Hydra also on the path's tokens); trees stop at the heads' depth; the folder
round-trips in vLLM's Medusa layout, is a draft reference like an EAGLE-3 head's, and a malformed one is refused
with its file and field named."""
import json

import pytest
import torch

from dynatree_lib import CostAwareConfig, DynaTreeConfig, FixedTreeConfig, LinearConfig, Sampling, TalonConfig, generate
from dynatree_lib.core.drafts.heads.kinds import HEAD_KINDS
from dynatree_lib.core.drafts.lookup import LookupConfig, LookupRunner
from dynatree_lib.core.drafts.heads.mlp_runner import MLPHeadRunner
from dynatree_lib.core.drafts.heads.mlp import KINDS, MLPHeads, load_heads, read_config, save_heads
from dynatree_lib.core.engines.hf import HFRunner
from dynatree_lib.harness.setup.tiny import tiny_mlp_heads

from ..conftest import prompts

KIND_NAMES = list(KINDS)


@pytest.fixture(scope="module", params=KIND_NAMES)
def heads(request, llama_target):
    return tiny_mlp_heads(llama_target, request.param, heads=3, draft_vocab=64, seed=1)


@torch.no_grad()
def from_scratch(heads: MLPHeads, target, committed: list[int], chain: list[int]) -> torch.Tensor:
    """The heads' logits after ``chain`` drafted below the last committed token: head len(chain) on the target's
    last hidden state of the committed token before the root (zeros for a one-token sequence) and, for Hydra, on
    the root and the chain."""
    ids = torch.tensor(committed)
    if ids.numel() > 1:
        h = target(input_ids=ids[None, :-1], output_hidden_states=True).hidden_states[-1][0, -1]
    else:
        h = torch.zeros(heads.cfg.hidden)
    return heads.head(len(chain), h[None], torch.tensor([committed[-1], *chain])[None])[0]


class Checked(MLPHeadRunner):
    """The runner, checking each row it returns against ``from_scratch`` (committed rows: the last one)."""

    def __init__(self, heads, target):
        super().__init__(heads)
        self.target_model, self.tokens, self.checked = target, [], 0

    def forward(self, tokens, positions, visible=None, tree_start=None, last_only=False):
        out = super().forward(tokens, positions, visible, tree_start, last_only)
        del self.tokens[self.length - tokens.numel():]
        self.tokens += tokens.tolist()
        for r, row in enumerate(out):
            slot = self.length - out.shape[0] + r
            torch.testing.assert_close(row, self.expected(slot, visible, tree_start), rtol=1e-4, atol=1e-4)
            self.checked += 1
        return out

    def expected(self, slot: int, visible, tree_start):
        if tree_start is None:
            return from_scratch(self.heads, self.target_model, self.tokens[:slot + 1], [])
        first_new = self.length - (visible.shape[0] if visible is not None else 0)
        if visible is None:  # a chain: every slot from the tree's start up to this one
            path = list(range(tree_start, slot + 1))
        else:
            path = [tree_start + j for j in visible[slot - first_new].nonzero().flatten().tolist()]
        return from_scratch(self.heads, self.target_model, self.tokens[:tree_start], [self.tokens[s] for s in path])


METHODS = {"linear": LinearConfig(K=4), "fixed": FixedTreeConfig(D=3, B=2, tau=0.0, n_max=12),
           "dynatree": DynaTreeConfig(n_max=12), "talon": TalonConfig(mu=0.05, N=10, K=3),
           "cost": CostAwareConfig(DynaTreeConfig(n_max=10))}


@pytest.mark.parametrize("name,kv_mode", [(name, "gather") for name in METHODS] + [("dynatree", "rebuild")])
def test_every_drafted_row_is_the_heads_own_computation(llama_target, heads, name, kv_mode):
    drf = Checked(heads, llama_target)
    for p, T in zip(prompts(2, seed=2, lo=1, hi=20), (10, 8)):  # the second prompt is a lone token
        out = generate(HFRunner(llama_target), p, T, draft=drf, method=METHODS[name], kv_mode=kv_mode)
        assert out.tokens == generate(llama_target, p, T).tokens
        assert max(out.log.depth) <= heads.cfg.heads
    assert drf.checked > 10


def test_trees_stop_at_the_heads_depth(llama_target, heads):
    """K heads draft K levels, whatever depth the policy asks (a chain of 8 becomes one of 3), with a lookup too."""
    p = prompts(1, seed=2, lo=10, hi=11)[0]
    for drf in (MLPHeadRunner(heads), LookupRunner(MLPHeadRunner(heads), LookupConfig((0.5, 0.9)))):
        assert drf.depth_limit == 3
        out = generate(llama_target, p, 24, draft=drf, method=LinearConfig(K=8), record_trees=50)
        assert max(out.log.depth) == 3 and all(max(t["depth"]) <= 3 for t in out.trees)
        assert out.tokens == generate(llama_target, p, 24).tokens


def test_nodes_waiting_for_a_skipped_level_get_their_paths(llama_target, heads):
    """A lookup that skips levels leaves nodes fed with the next level: a parent and its child in one forward."""
    drf = Checked(heads, llama_target)
    lookup = LookupRunner(drf, LookupConfig((0.95, 0.97, 0.99)))
    p = torch.tensor([5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6])
    cfg = CostAwareConfig(DynaTreeConfig(n_max=10), lookup_skip=0.5, skip_window=0)
    assert generate(llama_target, p, 30, draft=lookup, method=cfg).tokens == generate(llama_target, p, 30).tokens
    assert drf.checked > 10


def test_a_medusa_node_ignores_its_path_and_a_hydra_node_reads_it(llama_target):
    """Medusa: a node's law depends on its depth only; Hydra: on the tokens above it too."""
    p = prompts(1, seed=3, lo=8, hi=9)[0]
    for kind, same in (("medusa", True), ("hydra", False)):
        r = MLPHeadRunner(tiny_mlp_heads(llama_target, kind, heads=3, seed=4))
        tgt = HFRunner(llama_target)
        tgt.keep_features(r.reads_features)
        tgt.forward(p[:-1], torch.arange(p.numel() - 1))
        r.observe_target(tgt.features, 0)
        r.forward(p, torch.arange(p.numel()), last_only=True)
        n = p.numel()
        kids = r.forward(torch.tensor([3, 9]), torch.tensor([n, n]), torch.eye(2, dtype=torch.bool), n)
        assert torch.equal(kids[0], kids[1]) == same


def test_the_folder_round_trips_in_vllms_medusa_layout(llama_target, heads, tmp_path):
    save_heads(heads, tmp_path, verifier="tiny-llama:target")
    raw = json.loads((tmp_path / "config.json").read_text())
    kind = heads.cfg.kind
    assert raw["model_type"] == kind and raw["architectures"] == [KINDS[kind]]
    assert raw["num_heads"] == 3 and raw["num_hidden_layers"] == 1 and raw["truncated_vocab_size"] == 64
    assert raw["vocab_size"] == 96 and raw["hidden_size"] == 64 and raw["medusa_fc_bias"] is True
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
    assert {"blocks.0.layers.0.weight", "blocks.2.layers.0.bias", "lm_heads.1.weight", "token_map"} <= names
    assert ("blocks.1.res.weight" in names) == (kind == "hydra") and not any("embed" in n for n in names)
    back = load_heads(tmp_path, llama_target.get_input_embeddings().weight)
    assert read_config(tmp_path)[0] == heads.cfg and back.embed_tokens is llama_target.get_input_embeddings().weight
    for (a, x), (b, y) in zip(heads.state_dict().items(), back.state_dict().items()):
        assert a == b and torch.equal(x, y)


def broken(folder, edit) -> None:
    raw = json.loads((folder / "config.json").read_text())
    edit(raw)
    (folder / "config.json").write_text(json.dumps(raw))


def drop(*keys):
    def edit(raw):
        for k in keys[:-1]:
            raw = raw[k]
        del raw[keys[-1]]
    return edit


BAD_CONFIGS = {  # what breaks config.json -> what the error names
    "model_type": (lambda r: r.update(model_type="eagle3"), "model_type is 'eagle3'"),
    "num_heads missing": (drop("num_heads"), "field 'num_heads' is missing"),
    "feature_layer missing": (drop("dynatree_lib", "feature_layer"), "field 'dynatree_lib.feature_layer' is missing"),
    "num_heads zero": (lambda r: r.update(num_heads=0), "heads must be an integer >= 1, got 0"),
    "draft vocabulary": (lambda r: r.update(truncated_vocab_size=500), r"draft_vocab \(500\) exceeds"),
    "no biases": (lambda r: r.update(medusa_fc_bias=False), "medusa_fc_bias must be true"),
    "shapes": (lambda r: r.update(truncated_vocab_size=32), "do not fit the heads of its config.json"),
}


@pytest.mark.parametrize("what", BAD_CONFIGS)
def test_a_malformed_head_folder_is_refused_naming_its_file_and_field(llama_target, heads, tmp_path, what):
    save_heads(heads, tmp_path, verifier="x")
    edit, message = BAD_CONFIGS[what]
    broken(tmp_path, edit)
    with pytest.raises(ValueError, match=message) as e:
        load_heads(tmp_path, llama_target.get_input_embeddings().weight)
    assert str(tmp_path) in str(e.value)


def test_missing_files_a_wrong_kind_and_a_bad_token_map_are_refused(llama_target, heads, tmp_path):
    emb = llama_target.get_input_embeddings().weight
    with pytest.raises(FileNotFoundError, match="not a Medusa or Hydra head folder"):
        read_config(tmp_path / "nothing")
    save_heads(heads, tmp_path, verifier="x")
    other = next(k for k in KINDS if k != heads.cfg.kind)
    with pytest.raises(ValueError, match=f"model_type is '{heads.cfg.kind}', not '{other}'"):
        load_heads(tmp_path, emb, kind=other)
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(tmp_path / "model.safetensors"))
    save_file({**tensors, "token_map": tensors["token_map"].flip(0)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="model.safetensors: token_map must hold ascending"):
        load_heads(tmp_path, emb)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors is missing"):
        load_heads(tmp_path, emb)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json: not JSON"):
        read_config(tmp_path)
    with pytest.raises(ValueError, match=r"heads need \[96, 64\]"):
        MLPHeads(heads.cfg, torch.zeros(10, 64))


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_a_head_folder_is_a_draft_reference(tmp_path, kind):
    """``<kind>:<folder>`` loads as any draft: through a profile and ``load_pair``, on the eager and the static
    engines, borrowing the target's embedding tensor, and ``generate`` drafts with it exactly."""
    from dynatree_lib.harness.setup.models import load_model, load_pair
    from dynatree_lib.harness.setup.profiles import get_profile
    from dynatree_lib.harness.setup.weights import head_kind, weights_info

    target, _ = load_model("tiny-llama:target")
    save_heads(tiny_mlp_heads(target, kind, heads=2, draft_vocab=200, seed=3), tmp_path, verifier="tiny-llama:target")
    ref = f"{kind}:{tmp_path}"
    assert head_kind(ref) == kind and head_kind("tiny-llama:target") is None and weights_info(ref)["head"] == kind
    prof = get_profile("smoke", target="tiny-llama:target", draft=ref, draft_vocab=None, draft_lookup=False,
                       dtype="float32")
    tgt, drf, tok = prof.load_pair()
    assert isinstance(drf, MLPHeadRunner) and drf.heads.embed_tokens is tgt.get_input_embeddings().weight
    p = torch.tensor(tok("It was a dark night")["input_ids"])
    ar = generate(tgt, p, 16).tokens
    for method in ("linear", "fixed_tree", "dynatree", "talon"):
        assert generate(tgt, p, 16, draft=drf, method=method).tokens == ar
    assert generate(tgt, p, 16, draft=drf, method="dynatree", sampling=Sampling(1.0),
                    generator=torch.Generator().manual_seed(0)).tokens
    tgt, drf, _ = load_pair("tiny-llama:target", ref, engine="static", draft_vocab=200)
    assert generate(tgt, p, 16, draft=drf, method="dynatree").tokens == ar
    with pytest.raises(ValueError, match="scores its own 200 tokens"):
        load_pair("tiny-llama:target", ref, draft_vocab=8192)
    with pytest.raises(ValueError, match="lookup.json is missing"):
        load_pair("tiny-llama:target", ref, draft_lookup=True)
    with pytest.raises(FileNotFoundError, match=f"config.json is missing .a {HEAD_KINDS[kind].label} head folder"):
        load_pair("tiny-llama:target", f"{kind}:{tmp_path / 'nowhere'}")
    other = next(k for k in KINDS if k != kind)
    with pytest.raises(ValueError, match=f"model_type is '{kind}', not '{other}'"):
        load_pair("tiny-llama:target", f"{other}:{tmp_path}")
    from dynatree_lib.harness.experiments.pair import run_pair

    with pytest.raises(ValueError, match="first drafts are not reported yet"):
        run_pair(prof, root=tmp_path / "results")
