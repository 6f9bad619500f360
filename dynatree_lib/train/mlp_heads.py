"""Training Medusa and Hydra heads (``core.drafts.heads.mlp``) with the EAGLE-3 head's pipeline (``train.eagle3``):
``build-draft --head medusa`` / ``--head hydra``.

The same text (the target's own, held-out shards excluded), draft vocabulary (the ``draft_vocab`` most frequent loss
tokens), seeded windows and teacher pass: each step runs the bf16 target once, teacher-forced, and keeps its last
hidden state after the final norm (feature layer id L) and its logits over the draft vocabulary. Head k at row t
reads ``h(t)`` (Hydra: and the true tokens x(t + 1) .. x(t + 1 + k), teacher-forced as Hydra trains) and learns the
target's own law of x(t + 2 + k), its softmax at position t + 1 + k restricted to the draft vocabulary (Medusa's
self-distillation); head k's loss weighs ``head_decay ** k`` (Medusa-1's 0.8 ** k).

Initialisation (Medusa's): residual weights and biases at zero, so that head k starts as the target's next-token
law on its own hidden state; each head's output layer as the target's rows over the draft vocabulary; Hydra's
``res`` passes the hidden state through (identity on its first ``hidden`` inputs, zero on the token embeddings).
Seeded, checkpointed every ``ckpt_every`` steps under ``models/<kind>/v<N>k`` (git-ignored) and resumed by a rerun;
the folder (vLLM's Medusa layout) is exported at the end of every run with the training record and v4's lookup.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path

import torch

from ..core.drafts.heads.mlp import KINDS, MLPHeadConfig, MLPHeads, save_heads
from ..harness.setup.paths import REPO
from .eagle3 import VERIFIER, Batch, HeadRecipe, HeadSpec, bf16_copy, soft_loss, training_record, with_lookup


@dataclass(frozen=True)
class MLPHeadSpec(HeadRecipe):
    """Medusa's or Hydra's training (``kind``): ``heads`` levels of ``layers`` residual layers each; the schedule's
    fields as ``HeadSpec``'s (``steps``: its length; a run stops at its ``--seconds`` / ``--steps`` budget)."""

    kind: str = "medusa"
    heads: int = 4
    layers: int = 1
    draft_vocab: int = 8192
    head_decay: float = 0.8
    steps: int = 6000
    seqs_per_step: int = 4
    seq_len: int = 512
    lr: float = 1e-3
    warmup: int = 50
    weight_decay: float = 0.0
    ckpt_every: int = 25
    prompt_tail: int = 64
    sampled: bool = True  # train on the sampled answers too, where committed
    seed: int = 0
    threads: int = 2
    matmul_dtype: str = "bfloat16"  # the heads' matmuls under autocast (weights, optimizer, loss in fp32)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"MLPHeadSpec.kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if min(self.heads, self.layers, self.draft_vocab) < 1:
            raise ValueError(f"MLPHeadSpec.heads, layers and draft_vocab must be >= 1, got {self.heads}, "
                             f"{self.layers}, {self.draft_vocab}")

    def folder(self) -> Path:
        return REPO / "models" / self.kind / f"v{self.draft_vocab // 1024}k"

    def new_head(self, target, vocab: torch.Tensor) -> MLPHeads:
        return new_heads(target, self, vocab)

    def feature_layers(self, head: MLPHeads) -> tuple[int, ...]:
        return (head.cfg.feature_layer,)

    def losses(self, head: MLPHeads, batch: Batch) -> tuple[torch.Tensor, list[float]]:
        return head_losses(head, batch, self)

    def export(self, head: MLPHeads, folder: Path, log: list[dict]) -> Path:
        save_heads(bf16_copy(head), folder, VERIFIER,
                   {"training": training_record(self, log), "embedding_from": "embedded:target"})
        return with_lookup(folder)

    def command(self) -> str:
        return f"{super().command()} --heads {self.heads}"


def new_heads(target, spec: MLPHeadSpec, vocab: torch.Tensor) -> MLPHeads:
    """fp32 heads on ``target``'s last hidden state and embedding, initialised as the module docstring says."""
    cfg = MLPHeadConfig.for_target(target.config, spec.kind, spec.heads, spec.draft_vocab, spec.layers)
    torch.manual_seed(spec.seed)
    heads = MLPHeads(cfg, target.get_input_embeddings().weight)
    h = cfg.hidden
    with torch.no_grad():
        heads.set_vocab(vocab)
        for block in heads.blocks:
            for layer in block.layers:
                layer.weight.zero_(), layer.bias.zero_()
            if isinstance(block.res, torch.nn.Linear):
                block.res.weight.zero_()
                block.res.weight[:, :h] = torch.eye(h)
        for lm in heads.lm_heads:
            lm.weight.copy_(target.get_output_embeddings().weight[heads.vocab()].float())
    return heads


def head_losses(heads: MLPHeads, batch: Batch, spec: MLPHeadSpec) -> tuple[torch.Tensor, list[float]]:
    """The weighted soft cross entropy of every head on ``batch`` (row t of head k against the target's law at
    position t + 1 + k) and each head's agreement with the target's argmax on its loss rows."""
    total, agree = 0.0, []
    for k, logits in enumerate(heads(batch.features, batch.tokens)):
        loss, acc = soft_loss(logits[:, :-1], batch, k)
        total = total + spec.head_decay ** k * loss
        agree.append(acc)
    return total, agree


# the training spec of each kind of head (``core.drafts.heads.kinds.HEAD_KINDS``): build-draft --head <kind>
SPECS = {"eagle3": HeadSpec, **{kind: partial(MLPHeadSpec, kind=kind) for kind in KINDS}}


def training_spec(kind: str, **values) -> HeadRecipe:
    """The training spec of ``kind`` with ``values`` set; a field its kind does not have is refused by name."""
    make = SPECS[kind]
    unknown = set(values) - {f.name for f in fields(make.func if isinstance(make, partial) else make)}
    if unknown:
        raise ValueError(f"the {kind} head's training has no {', '.join(sorted(unknown))} to set")
    return make(**values)
