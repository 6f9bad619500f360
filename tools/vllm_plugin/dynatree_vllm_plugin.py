"""dynatree's vLLM plugin (issue 90): where dynamic speculative decoding drafts nothing (k = 0 at this batch size),
a step costs what it costs without speculation, as near as vLLM allows.

vLLM 0.32 keeps the speculative path on steps that carry no draft:

- its proposer (``vllm/v1/spec_decode/llm_base_proposer.py``, ``propose``) runs the head's first pass even at
  k = 0, "to keep the drafter KV cache in sync". Here no step at k = 0 runs the head, a prefill's included: under load
  the prompts' prefills are a large share of the work, and that pass is most of what a step at k = 0 costs beyond
  AR. The head's cache then lacks what was prefilled or decoded at k = 0, which lowers its acceptance for those
  requests after the load drops (the record's load drop measures how much);
- its model runner (``vllm/v1/worker/gpu_model_runner.py``, ``_prepare_inputs``) builds speculative metadata with
  zero drafts per request and samples through the rejection sampler. Here a step where no request has a draft takes
  the runner's plain path: the same logits rows, vLLM's own sampler, as on the step after a prefill.

Outputs cannot change: the target verifies every draft, and a step without drafts samples the same rows.

Not imported by dynatree: vLLM loads it in each of its processes, through the entry point beside this file, when
this folder is on PYTHONPATH and VLLM_PLUGINS names ``dynatree_skip_idle_head``.
"""
from __future__ import annotations

import logging

PLUGIN = "dynatree_skip_idle_head"
_installed = False


def _skip_idle_head_pass() -> None:
    """At k = 0 the proposer returns no drafts without running the head."""
    import torch
    from vllm.v1.spec_decode import llm_base_proposer

    base = llm_base_proposer.SpecDecodeBaseProposer
    original = base.propose

    def propose(self, num_speculative_tokens, *args, **kwargs):
        tokens, meta = kwargs.get("target_token_ids"), kwargs.get("common_attn_metadata")
        if num_speculative_tokens == 0 and tokens is not None and meta is not None:
            self.num_speculative_tokens, self._last_draft_probs = 0, None
            return torch.empty(meta.batch_size(), 0, device=tokens.device, dtype=torch.int64)
        return original(self, num_speculative_tokens, *args, **kwargs)

    base.propose = propose


def _plain_path_without_drafts() -> None:
    """A step where no request carries a draft gets no speculative metadata: the runner samples its rows with the
    plain sampler instead of verifying zero drafts."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    original = GPUModelRunner._prepare_inputs

    def _prepare_inputs(self, *args, **kwargs):
        logits_indices, spec_meta, max_sampled = original(self, *args, **kwargs)
        if spec_meta is not None and not any(spec_meta.num_draft_tokens):
            spec_meta = None
        return logits_indices, spec_meta, max_sampled

    GPUModelRunner._prepare_inputs = _prepare_inputs


def skip_idle_head() -> None:
    """Install both changes once per process (vLLM may load a plugin more than once)."""
    global _installed
    if _installed:
        return
    _skip_idle_head_pass()
    _plain_path_without_drafts()
    _installed = True
    logging.getLogger("vllm").info("%s: at k = 0 the head does not run and the runner samples "
                                   "without verifying", PLUGIN)
