"""The target's answers to the draft's instructions, with its next-token distributions (soft targets).

``answer_batch`` decodes a batch of chat prompts greedily (left-padded, one cached forward per step, stopping
each row at EOS or ``max_new`` tokens) and records the target's top-``k`` log-probabilities at every answer
position: the distribution the draft learns (greedy labels are its argmax). ``build_instruction_teacher``
writes them in resumable shards beside the continuation shards (``distill.build_teacher``).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..data import chat_prompt
from . import instructions


@dataclass(frozen=True)
class InstructionTeacherSpec:
    """``shards`` of ``batch`` instructions (the committed instruction file, shuffled by ``seed``), answers of
    at most ``max_new`` tokens, top-``k`` log-probs, prompts cut to their last ``max_prompt`` tokens; the target
    in ``dtype`` (bf16: the precision the timed runs decode in, and several times faster here than fp32)."""

    dtype: str = "bfloat16"
    batch: int = 32
    max_new: int = 256
    k: int = 32
    max_prompt: int = 1024
    seed: int = 4321
    threads: int = 2


class _TopK:
    """A logits processor that records each step's top-k log-probs and passes the scores on unchanged."""

    def __init__(self, k: int):
        self.k, self.lp, self.ids = k, [], []

    def __call__(self, input_ids, scores):
        v, i = torch.log_softmax(scores.float(), dim=-1).topk(self.k, dim=-1)
        self.lp.append(v.half())
        self.ids.append(i.int())
        return scores


@torch.no_grad()
def answer_batch(model, prompts: list[list[int]], max_new: int, eos: int, pad: int, k: int = 0) -> list[dict]:
    """Greedy answers to ``prompts`` (token id lists): for each, ``answer`` (ids, EOS included if reached) and,
    with ``k``, ``top_lp`` / ``top_ids`` [len(answer), k]: the target's distribution before each answer token."""
    from transformers import GenerationConfig, LogitsProcessorList

    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    rec = _TopK(k) if k else None
    cfg = GenerationConfig(do_sample=False, max_new_tokens=max_new, eos_token_id=eos, pad_token_id=pad)
    out = model.generate(ids, attention_mask=mask, generation_config=cfg,
                         logits_processor=LogitsProcessorList([rec] if rec else []))
    new = out[:, width:]
    rows = []
    for b in range(len(prompts)):
        ans = new[b].tolist()
        n = ans.index(eos) + 1 if eos in ans else len(ans)
        row = {"answer": ans[:n]}
        if rec:
            row["top_lp"] = torch.stack([x[b] for x in rec.lp[:n]])
            row["top_ids"] = torch.stack([x[b] for x in rec.ids[:n]])
        rows.append(row)
    return rows


def german(model, tok, sentences: list[str], batch: int = 32) -> list[str]:
    """The target's greedy German rendering of each sentence (one line, at most 80 tokens)."""
    prompts = [chat_prompt(tok, f"Translate to German: {s}") for s in sentences]
    out = []
    for i in range(0, len(prompts), batch):
        for row in answer_batch(model, prompts[i:i + batch], 80, tok.eos_token_id, tok.pad_token_id or 0):
            out.append(tok.decode(row["answer"], skip_special_tokens=True).strip().split("\n")[0])
    return out


def build_instruction_teacher(out: Path, spec: InstructionTeacherSpec = InstructionTeacherSpec()) -> Path:
    """Shards ``instr-NNNN.pt`` of the target's answers to the committed instructions (resumable: shard ``s``
    depends only on ``spec`` and the instruction file, and existing shards are kept)."""
    import random

    from tqdm.auto import tqdm

    from ..distill import load_target

    torch.set_num_threads(spec.threads)
    out.mkdir(parents=True, exist_ok=True)
    (out / "instruction_spec.json").write_text(json.dumps(asdict(spec)))
    rows = instructions.load()
    random.Random(spec.seed).shuffle(rows)
    shards = [rows[i:i + spec.batch] for i in range(0, len(rows), spec.batch)]
    todo = [s for s in range(len(shards)) if not (out / f"instr-{s:04d}.pt").exists()]
    if not todo:
        return out
    model, tok = load_target()
    model = model.to(getattr(torch, spec.dtype))
    bar = tqdm(todo, desc="instruction teacher shards", unit="shard")
    for s in bar:
        t0 = time.time()
        group = sorted(shards[s], key=lambda r: len(r["text"]))
        prompts = [chat_prompt(tok, r["text"])[-spec.max_prompt:] for r in group]
        answers = answer_batch(model, prompts, spec.max_new, tok.eos_token_id, tok.pad_token_id or 0, spec.k)
        shard = {"kind": "instruction", "ids": [r["id"] for r in group], "prompts": prompts,
                 "answers": [a["answer"] for a in answers], "top_lp": [a["top_lp"] for a in answers],
                 "top_ids": [a["top_ids"] for a in answers], "shard": s}
        tmp = out / f"instr-{s:04d}.pt.tmp"
        torch.save(shard, tmp)
        tmp.rename(out / f"instr-{s:04d}.pt")
        bar.set_postfix_str(f"{sum(map(len, shard['answers'])) / (time.time() - t0):.0f} answer tok/s")
    return out
