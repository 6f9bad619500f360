"""The model card of a published Medusa or Hydra head (``train.publish``), written from the training record its export
carries. What the heads draft on held-out prompts is measured where they draft:
notebook 14's Medusa and Hydra rows (``results/cpu/talon.json``)."""
from __future__ import annotations

from ..core.drafts.heads.kinds import HEAD_KINDS
from ..core.drafts.heads.mlp import OUR_KEY

INPUTS = {"medusa": "the target's last hidden state (after its final norm)",
          "hydra": "the target's last hidden state (after its final norm) and the embeddings of tokens t + 1 to "
                   "t + 1 + k (the tree's root and the tokens drafted before it)"}


def card(cfg: dict) -> str:
    """The model card of an exported head folder's ``config.json``."""
    kind, t = cfg["model_type"], cfg[OUR_KEY]["training"]
    s, last = t["spec"], t["last"]
    agree = " / ".join(f"{sum(r[f'agree{i}'] for r in last) / len(last):.3f}" for i in range(s["heads"]))
    return f"""---
license: apache-2.0
base_model: {cfg['base_model_name_or_path']}
tags: [speculative-decoding, {kind}]
---
# {HEAD_KINDS[kind].label} heads for {cfg['base_model_name_or_path']}

{cfg['num_heads']} heads: head k (k = 0, 1, ...) drafts token t + 2 + k from {INPUTS[kind]} at t, through
{cfg['num_hidden_layers']} residual SiLU layer(s) and an output layer over {cfg['truncated_vocab_size']} tokens (`token_map`: their
target ids), in vLLM's Medusa layout (`config.json`, `model.safetensors`; the embedding is the target's, borrowed, not stored). In this
library: the draft reference `{kind}:weights/smollm2-{kind}` (`dynatree_lib/core/drafts/heads/mlp.py`); notebook 14's
{HEAD_KINDS[kind].label} row drafts Medusa's tree over it, exactly.

## Training
{t['steps']} steps of the schedule's {s['steps']} ({t['seconds'] / 60:.0f} min on 2 CPU cores), each on
{s['seqs_per_step']} windows of at most {s['seq_len']} tokens of the target's own text (the EAGLE-3 head's: v4's
teacher text, v3's shard texts and the sampled answers; held-out shards excluded): at most
{t['steps'] * s['seqs_per_step'] * s['seq_len']:,} tokens. Initialisation as Medusa's (residual layers at zero, each
output layer the target's rows over the draft vocabulary); head k learns the target's own law {s['head_decay']} ** k
weighted (Medusa-1's self-distillation); AdamW, lr {s['lr']}, warm-up {s['warmup']}, cosine decay. Agreement with the
target's argmax on the last {len(last)} training batches, per head: {agree}. Rebuild or resume: `{t['rebuild']}`
(checkpoints under `models/{kind}/`), then publish: `python -m dynatree_lib build-draft --head {kind} --publish`.
"""

