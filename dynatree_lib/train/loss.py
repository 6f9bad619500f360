"""The distillation loss, in a module that imports only torch: ``tools/gpu_distill.py`` loads this file by path
on machines where dynatree_lib is not installed."""
from __future__ import annotations

import torch


def distill_loss(logits: torch.Tensor, top_lp: torch.Tensor, top_ids: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against the teacher's distribution kept as its top-k tokens plus one 'rest' bucket (so the
    draft also learns how much mass lies outside the teacher's top-k). Entries with log-probability -inf (tokens
    outside the draft's head, ``head_targets``) carry no mass of their own: theirs is in the rest. Mean over rows."""
    q = torch.log_softmax(logits.float(), dim=-1)
    kept = top_lp.isfinite()
    p = top_lp.float().exp()
    qk = q.gather(-1, top_ids.long())
    p_rest = (1 - p.sum(-1)).clamp(min=0)
    q_rest = torch.log1p(-(qk.exp() * kept).sum(-1).clamp(max=1 - 1e-6))
    return -((p * qk.masked_fill(~kept, 0)).sum(-1) + p_rest * q_rest).mean()
