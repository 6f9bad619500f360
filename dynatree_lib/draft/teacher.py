"""The draft's teacher data: the target's greedy text with its next-token distributions (soft targets).

Two kinds of shard, both resumable (shard ``s`` depends only on its spec and ``s``; existing shards are kept):

- continuations (``shard-NNNN.pt``, ``ContinuationSpec``): prompts cut from text no experiment uses (the PG-19
  books outside the test split and the WikiText-2 *validation* split), the target's greedy continuation of each,
  and its top-k next-token log-probabilities at every position;
- instruction answers (``instr-NNNN.pt``, ``InstructionSpec``): the committed instructions
  (``draft.instructions``) through the chat template, the target's greedy answer to each (to EOS or
  ``max_new`` tokens, left-padded batches) and its top-k log-probabilities before every answer token.
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..harness.data import chat_prompt, training_text, wikitext_valid_articles
from ..harness.paths import REPO
from ..harness.weights import smollm2_folder
from . import instructions

BUILD = REPO / "models" / "draft-build-v3"  # git-ignored: teacher shards, checkpoints
TEACHER = BUILD / "teacher"


def load_target(dtype: str = "float32"):
    """The cpu profile's target (eager transformers) and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = smollm2_folder()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
    return model, AutoTokenizer.from_pretrained(folder)


def topk_logp(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-``k`` log-probabilities (fp16) and token ids (int32) of each row of logits."""
    v, i = torch.log_softmax(logits.float(), dim=-1).topk(k, dim=-1)
    return v.half(), i.int()


def corpora(tok) -> dict[str, list[list[int]]]:
    """The continuation teacher's source text, tokenized: documents of more than 300 tokens."""
    enc = lambda texts: [ids for ids in tok(texts, add_special_tokens=False)["input_ids"] if len(ids) > 300]
    return {"wiki_valid": enc(wikitext_valid_articles()), "wiki_valid_raw": enc(wikitext_valid_articles(raw=True)),
            "pg19_train": enc(training_text())}


@dataclass(frozen=True)
class ContinuationSpec:
    """What the continuation teacher generates: ``shards`` x ``batch`` sequences of a prompt of one of
    ``prompt_lens`` tokens plus ``cont`` greedy tokens, top-``k`` log-probs at every position.

    Shards from ``raw_from`` on (None: none) cut their WikiText prompts from the raw validation text
    (" @-@ ", " , " as in the experiment prompts) and draw WikiText with ``raw_wiki_share``; shards
    before it keep the detokenized text and ``wiki_share``, so adding raw shards leaves the old ones as
    they were built."""

    shards: int = 40
    batch: int = 48
    prompt_lens: tuple = (64, 128, 192, 256)
    cont: int = 192
    k: int = 32
    wiki_share: float = 0.4
    raw_from: int | None = 0
    raw_wiki_share: float = 0.6
    seed: int = 1234
    threads: int = 2
    dtype: str = "bfloat16"  # the target's precision while it writes (the timed runs decode in bf16)


@torch.no_grad()
def continuation_shard(model, texts: dict, spec: ContinuationSpec, s: int) -> dict:
    """One shard: ``batch`` prompts of one length, greedy continuations, top-k teacher log-probs."""
    from transformers import DynamicCache

    rng = random.Random(spec.seed * 100_003 + s)
    P = spec.prompt_lens[s % len(spec.prompt_lens)]
    if spec.raw_from is not None and s >= spec.raw_from:
        src = "wiki_valid_raw" if rng.random() < spec.raw_wiki_share else "pg19_train"
    else:
        src = "wiki_valid" if rng.random() < spec.wiki_share else "pg19_train"
    docs = [d for d in texts[src] if len(d) >= P]
    rows, ids_ = [], []
    for _ in range(spec.batch):
        d = rng.randrange(len(docs))
        off = rng.randrange(len(docs[d]) - P + 1)
        rows.append(torch.tensor(docs[d][off:off + P]))
        ids_.append(f"{src}:{d}@{off}")
    x = torch.stack(rows)
    cache = DynamicCache()
    hidden = model.model(input_ids=x, past_key_values=cache, use_cache=True).last_hidden_state
    lps, tops = [], []
    for b in range(0, spec.batch, 8):  # the full [B, P, V] logits would take gigabytes
        v, i = topk_logp(model.lm_head(hidden[b:b + 8]), spec.k)
        lps.append(v)
        tops.append(i)
    lp, top = torch.cat(lps), torch.cat(tops)
    nxt = top[:, -1:, 0].long()
    seq, step_lp, step_top = [x, nxt], [lp], [top]
    for t in range(spec.cont - 1):
        logits = model(input_ids=nxt, past_key_values=cache, use_cache=True,
                       position_ids=torch.full_like(nxt, P + t)).logits
        v, i = topk_logp(logits, spec.k)
        step_lp.append(v)
        step_top.append(i)
        nxt = i[:, -1:, 0].long()
        seq.append(nxt)
    return {"tokens": torch.cat(seq, 1).int(), "top_lp": torch.cat(step_lp, 1), "top_ids": torch.cat(step_top, 1),
            "prompt_len": P, "source": src, "prompt_ids": ids_, "shard": s}


def build_continuation_teacher(spec: ContinuationSpec = ContinuationSpec(), out: Path = TEACHER) -> Path:
    """The continuation shards (see module docstring)."""
    from tqdm.auto import tqdm

    torch.set_num_threads(spec.threads)
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(asdict(spec)))
    todo = [s for s in range(spec.shards) if not (out / f"shard-{s:04d}.pt").exists()]
    if not todo:
        return out
    model, tok = load_target(spec.dtype)
    texts = corpora(tok)
    bar = tqdm(todo, desc="continuation teacher shards", unit="shard")
    for s in bar:
        t0 = time.time()
        shard = continuation_shard(model, texts, spec, s)
        tmp = out / f"shard-{s:04d}.pt.tmp"
        torch.save(shard, tmp)
        tmp.rename(out / f"shard-{s:04d}.pt")
        n = shard["tokens"].numel()
        bar.set_postfix_str(f"{n / (time.time() - t0):.0f} tok/s")
    return out


@dataclass(frozen=True)
class InstructionSpec:
    """``shards`` of ``batch`` instructions (the committed instruction file, shuffled by ``seed``), answers of
    at most ``max_new`` tokens, top-``k`` log-probs, prompts cut to their last ``max_prompt`` tokens; the target
    in ``dtype`` (bf16: the precision the timed runs decode in, and faster than fp32 on CPUs with bf16 instructions)."""

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


def build_instruction_teacher(out: Path = TEACHER, spec: InstructionSpec = InstructionSpec()) -> Path:
    """Shards ``instr-NNNN.pt`` of the target's answers to the committed instructions (resumable: shard ``s``
    depends only on ``spec`` and the instruction file, and existing shards are kept)."""
    import random

    from tqdm.auto import tqdm

    torch.set_num_threads(spec.threads)
    out.mkdir(parents=True, exist_ok=True)
    (out / "instruction_spec.json").write_text(json.dumps(asdict(spec)))
    rows = instructions.load()
    random.Random(spec.seed).shuffle(rows)
    shards = [rows[i:i + spec.batch] for i in range(0, len(rows), spec.batch)]
    todo = [s for s in range(len(shards)) if not (out / f"instr-{s:04d}.pt").exists()]
    if not todo:
        return out
    model, tok = load_target(spec.dtype)
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
