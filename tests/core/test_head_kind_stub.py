"""The head kind added after the house was built (issue 76's proof): a stub head on the target's last hidden state,
declared in this one module and entered in the one registry of head kinds (``core.drafts.heads.kinds``). Every tree
method drafts with it through a ``<kind>:<folder>`` reference and stays exact."""
import json

import pytest
import torch
from torch import nn

from dynatree_lib import DynaTreeConfig, LinearConfig, TalonConfig, generate
from dynatree_lib.core.drafts.heads import kinds
from dynatree_lib.core.drafts.heads.base import HeadRunner
from dynatree_lib.harness.setup.models import load_head_draft

from ..conftest import prompts


class StubHead(nn.Module):
    """A random output layer over the target's last hidden state (after the final norm): ``weight`` [V, hidden];
    ``config`` is what the loops' checks read of any model (the target's vocabulary and context)."""

    def __init__(self, weight: torch.Tensor, layer: int, context: int):
        super().__init__()
        from transformers import PretrainedConfig

        self.weight, self.layer = weight, layer
        self.config = PretrainedConfig(vocab_size=weight.shape[0], max_position_embeddings=context)
        self.config.model_type = "stub"
        self.eval()

    def forward(self, hidden: torch.Tensor, position_ids=None) -> torch.Tensor:
        return hidden @ self.weight.T

    def get_output_embeddings(self):
        """None: the head scores the target's vocabulary (``config.vocab_size``)."""
        return None


def load(folder, embedding, dtype=None) -> StubHead:
    """The stub head of ``folder`` (its ``config.json``: a seed and the target's layer count), over the target's
    embedding's width; a folder of another kind is refused by name."""
    cfg = json.loads((folder / "config.json").read_text())
    if cfg.get("kind") != "stub":
        raise ValueError(f"{folder}/config.json: not a stub head (kind {cfg.get('kind')!r})")
    g = torch.Generator().manual_seed(cfg["seed"])
    weight = torch.randn(embedding.shape[0], embedding.shape[1], generator=g).to(dtype or embedding.dtype)
    return StubHead(weight, cfg["layers"], cfg["context"])


class StubRunner(HeadRunner):
    """One level a tree, as a Medusa head 0: a committed row at position p (a tree's root) reads the target's last
    hidden state of p - 1, a drafted row (depth 1) its root's."""

    what = "the stub head"
    depth_limit = 1

    def __init__(self, head: StubHead, max_len: int | None = None, fused: bool = False, rope=None):
        self.model = self.head = head
        self.reads_features = (head.layer,)
        self.init_slots((max_len or 256) + 320, head.weight.shape[1], head.weight.dtype, head.weight.device)

    def forward(self, tokens, positions, visible=None, tree_start=None, last_only=False):
        self.new_slots(positions)
        self.length += positions.numel()
        before = positions - (0 if tree_start is None else 1) - 1
        logits = self.head(self.features_of(before[-1:] if last_only else before))
        if tree_start is None:
            self.fed()
        return logits


@pytest.fixture
def stub_kind(monkeypatch, tmp_path, llama_target):
    """The stub kind in the registry (one entry), and a folder of it."""
    monkeypatch.setitem(kinds.HEAD_KINDS, "stub", kinds.HeadKind(load, StubRunner, "Stub"))
    folder = tmp_path / "stub"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"kind": "stub", "seed": 3, "context": 256,
                                                    "layers": llama_target.config.num_hidden_layers}))
    return f"stub:{folder}"


@pytest.mark.parametrize("method", [LinearConfig(K=1), DynaTreeConfig(n_max=8), TalonConfig(mu=0.1, N=6, K=3)],
                         ids=["chain", "dynatree", "talon"])
def test_a_new_head_kind_drafts_exactly(stub_kind, llama_target, method):
    draft = load_head_draft(stub_kind, llama_target, 256, None, False)
    assert isinstance(draft, StubRunner)
    for p in prompts(3, seed=2, lo=2):
        ar = generate(llama_target, p, 16).tokens
        res = generate(llama_target, p, 16, draft=draft, method=method)
        assert res.tokens == ar and res.iterations <= 16


def test_a_folder_of_another_kind_is_refused_by_name(stub_kind, llama_target, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"kind": "medusa"}))
    with pytest.raises(ValueError, match="not a stub head"):
        load_head_draft(f"stub:{other}", llama_target, 256, None, False)
