"""dynatree's vLLM plugin (issue 90): where dynamic speculative decoding drafts nothing (k = 0 at this batch size),
the EAGLE head skips its pass over a step of single-token decodes.

vLLM 0.32's proposer (``vllm/v1/spec_decode/llm_base_proposer.py``, ``propose``) runs the head's first pass even at
k = 0, "to keep the drafter KV cache in sync"; at the loads where the schedule drafts nothing that pass costs
throughput that no draft repays. Here it still runs on every step holding more than one token per request (a
prefill, or the verification of earlier drafts), so the head holds every prompt; it skips only the steps that
decode one token per request. The head's cache then lacks those decoded positions, which may lower its acceptance
after the load drops; outputs cannot change, since the target verifies every draft.

Not imported by dynatree: vLLM loads it in each of its processes, through the entry point beside this file, when
this folder is on PYTHONPATH and VLLM_PLUGINS names ``dynatree_skip_idle_head``.
"""
from __future__ import annotations

import logging

PLUGIN = "dynatree_skip_idle_head"
_installed = False


def skip_idle_head() -> None:
    """Wrap the proposer's ``propose`` once per process (vLLM may load a plugin more than once)."""
    global _installed
    if _installed:
        return
    import torch
    from vllm.v1.spec_decode import llm_base_proposer

    base = llm_base_proposer.SpecDecodeBaseProposer
    original = base.propose

    def propose(self, num_speculative_tokens, *args, **kwargs):
        tokens, meta = kwargs.get("target_token_ids"), kwargs.get("common_attn_metadata")
        if num_speculative_tokens == 0 and tokens is not None and meta is not None \
                and tokens.shape[0] == meta.batch_size():
            self.num_speculative_tokens, self._last_draft_probs = 0, None
            return torch.empty(meta.batch_size(), 0, device=tokens.device, dtype=torch.int64)
        return original(self, num_speculative_tokens, *args, **kwargs)

    base.propose = propose
    _installed = True
    logging.getLogger("vllm").info("%s: at k = 0 the head skips decode-only steps", PLUGIN)
