"""One vLLM engine (offline API) that decodes token ids on request: run by ``dynatree_lib.harness.peers.vllm`` with
the interpreter of the optional vLLM environment (``tools/setup_vllm.sh``), which cannot import ``dynatree_lib``
(its transformers is older than ours). So this file imports nothing of ours, and the two sides exchange token ids.

    python tools/vllm_worker.py --model DIR [--speculative-config JSON] [--dtype bfloat16] [--max-model-len N]

Protocol: one JSON object per line on stdin, one per line on a copy of stdout (fd 1 itself becomes stderr, so
vLLM's logs and those of the engine processes it spawns never reach the protocol).
The first line it writes is ``{"ready": true, "vllm": version, ...}`` once the engine is loaded. Requests:
  {"op": "generate", "prompts": [[ids], ...], "max_tokens": N or [N per prompt], "ignore_eos": bool,
   "stop_token_ids": [ids]}
      -> {"outputs": [[ids], ...], "finish": [...], "wall_s": s, "spec": counter deltas over the call,
          "tpot_s": [each request's time per output token after its first, from vLLM's own timestamps, or null],
          "wake_s": the untimed call's seconds}
  {"op": "quit"}
``wall_s`` is the time of ``LLM.generate`` alone (the prompts already tokenized), after an untimed one-token call
(``wake``). Every request is greedy
(temperature 0): vLLM's sampler is not ours, so a sampled output could not be compared token for token.
``spec`` sums vLLM's speculative-decoding counters (``vllm:spec_decode_num_drafts``, ``_num_draft_tokens``,
``_num_accepted_tokens`` and ``_num_accepted_tokens_per_pos``) over the call.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

COUNTERS = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
            "vllm:spec_decode_num_accepted_tokens": "accepted"}
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def spec_counters(llm) -> dict:
    """vLLM's speculative-decoding counters, summed over engines (zeros where it does not speculate)."""
    out = {name: 0 for name in COUNTERS.values()} | {"per_pos": []}
    for metric in llm.get_metrics():
        if metric.name in COUNTERS:
            out[COUNTERS[metric.name]] += int(metric.value)
        elif metric.name == PER_POS:
            vals = [int(v) for v in metric.values]
            out["per_pos"] = [a + b for a, b in zip(out["per_pos"] + [0] * len(vals), vals)]
    return out


def delta(after: dict, before: dict) -> dict:
    per_pos = [a - (before["per_pos"][i] if i < len(before["per_pos"]) else 0)
               for i, a in enumerate(after["per_pos"])]
    return {k: after[k] - before[k] for k in COUNTERS.values()} | {"per_pos": per_pos}


def time_per_output_token(out) -> float | None:
    """A request's seconds per output token after its first, from the engine's timestamps (None without them)."""
    stats, n = out.metrics, len(out.outputs[0].token_ids)
    if stats is None or n < 2 or not stats.last_token_ts:
        return None
    return (stats.last_token_ts - stats.first_token_ts) / (n - 1)


def wake(llm, prompt) -> float:
    """One untimed token before the timed call. After a pause, vLLM's engine processes wait for a socket ping to
    read their queue, and a missed ping stalls the next call by their recheck interval (5 s in vLLM 0.32); the
    call right after a read spins instead (``shm_broadcast.SpinCondition``). Returns its seconds."""
    from vllm import SamplingParams

    t0 = time.perf_counter()
    llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=1, detokenize=False), use_tqdm=False)
    return time.perf_counter() - t0


def generate(llm, req: dict) -> dict:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    lengths = req["max_tokens"] if isinstance(req["max_tokens"], list) else [req["max_tokens"]] * len(req["prompts"])
    params = [SamplingParams(temperature=0.0, max_tokens=int(n), ignore_eos=bool(req["ignore_eos"]),
                             stop_token_ids=[int(t) for t in req.get("stop_token_ids") or []] or None,
                             detokenize=False) for n in lengths]
    prompts = [TokensPrompt(prompt_token_ids=list(map(int, ids))) for ids in req["prompts"]]
    wake_s = wake(llm, TokensPrompt(prompt_token_ids=[int(req["prompts"][0][0])]))
    before = spec_counters(llm)
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - t0
    return {"outputs": [list(o.outputs[0].token_ids) for o in outs],
            "finish": [o.outputs[0].finish_reason for o in outs], "wall_s": wall,
            "spec": delta(spec_counters(llm), before), "tpot_s": [time_per_output_token(o) for o in outs],
            "wake_s": wake_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--speculative-config", default=None, help="vLLM's speculative_config as JSON")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    # the protocol gets a copy of stdout; fd 1 becomes stderr, so that vLLM's prints and its engine processes'
    # logs (they inherit fd 1) never reach the protocol's stream
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    import vllm
    from vllm import LLM

    spec = json.loads(args.speculative_config) if args.speculative_config else None
    llm = LLM(model=args.model, tokenizer=args.model, dtype=args.dtype, max_model_len=args.max_model_len,
              max_num_seqs=args.max_num_seqs, seed=args.seed, speculative_config=spec, disable_log_stats=False,
              enable_prefix_caching=False)
    out.write(json.dumps({"ready": True, "vllm": vllm.__version__, "speculative_config": spec}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("op") == "quit":
            break
        try:
            reply = generate(llm, req) if req.get("op") == "generate" else {"error": f"unknown op {req.get('op')!r}"}
        except Exception as exc:  # the caller names the step; the engine stays up for the next request
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
