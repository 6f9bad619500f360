"""Builds the ``cpu`` profile's draft for SmolLM2-135M-Instruct: ``python -m dynatree_lib build-draft``.

Four resumable phases, each writing under ``models/draft-build/`` (git-ignored) and skipped when its
output exists:

1. ``teacher``: prompts cut from text no experiment uses (the 36 PG-19 books outside the test split and
   the WikiText-2 *validation* split), the target's greedy continuation of each, and the target's top-k
   next-token log-probabilities at every position (prompt and continuation), in shards.
2. ``train``: the draft (a small Llama sharing the target's tokenizer; its tied embedding starts from the
   target's embedding projected on its top principal directions) distilled on those distributions,
   with checkpoints.
3. ``calibrate``: one temperature fitted on held-out shards so that the draft's top-1 probability
   predicts agreement with the target's greedy token; baked into the final norm (a plain Llama again).
4. ``export``: evaluation on the target's greedy continuations of the experiment prompts (held out from
   every phase above), then ``weights/smollm2-draft/`` with the model card.
"""
from __future__ import annotations

import json
import math
import random
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .models import REPO

BUILD = REPO / "models" / "draft-build"


@dataclass(frozen=True)
class TeacherSpec:
    """What the teacher phase generates: ``shards`` x ``batch`` sequences of a prompt of one of
    ``prompt_lens`` tokens plus ``cont`` greedy tokens, top-``k`` log-probs at every position."""

    shards: int = 96
    batch: int = 48
    prompt_lens: tuple = (64, 128, 192, 256)
    cont: int = 192
    k: int = 32
    wiki_share: float = 0.4
    seed: int = 1234
    threads: int = 2


_WIKI_FIXES = [(" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), (" , ", ", "), (" . ", ". "), (" ; ", "; "),
               (" : ", ": "), (" 's", "'s"), (" n't", "n't"), ("( ", "("), (" )", ")"), ('" ', '"')]


def wiki_valid_articles() -> list[str]:
    """WikiText-2 validation articles, roughly detokenized (they only serve as prompts)."""
    from .data import wikitext_valid_text

    arts: list[list[str]] = []
    for line in wikitext_valid_text().splitlines(keepends=True):
        if re.match(r"^ = [^=].* = $", line.rstrip("\n")) or not arts:
            arts.append([])
        arts[-1].append(line)
    out = []
    for a in arts:
        t = "".join(a)
        for x, y in _WIKI_FIXES:
            t = t.replace(x, y)
        out.append(t)
    return out


def _corpora(tok) -> dict[str, list[list[int]]]:
    from .data import training_text

    enc = lambda texts: [ids for ids in tok(texts, add_special_tokens=False)["input_ids"] if len(ids) > 300]
    return {"wiki_valid": enc(wiki_valid_articles()), "pg19_train": enc(training_text())}


def _load_target():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .models import smollm2_folder

    folder = smollm2_folder()
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(folder)


def _topk_logp(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    lp = torch.log_softmax(logits.float(), dim=-1)
    v, i = lp.topk(k, dim=-1)
    return v.half(), i.int()


@torch.no_grad()
def teacher_shard(model, corpora: dict, spec: TeacherSpec, s: int) -> dict:
    """One shard: ``batch`` prompts of one length, greedy continuations, top-k teacher log-probs."""
    from transformers import DynamicCache

    rng = random.Random(spec.seed * 100_003 + s)
    P = spec.prompt_lens[s % len(spec.prompt_lens)]
    src = "wiki_valid" if rng.random() < spec.wiki_share else "pg19_train"
    docs = [d for d in corpora[src] if len(d) >= P]
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
        v, i = _topk_logp(model.lm_head(hidden[b:b + 8]), spec.k)
        lps.append(v)
        tops.append(i)
    lp, top = torch.cat(lps), torch.cat(tops)
    nxt = top[:, -1:, 0].long()
    seq, step_lp, step_top = [x, nxt], [lp], [top]
    for t in range(spec.cont - 1):
        logits = model(input_ids=nxt, past_key_values=cache, use_cache=True,
                       position_ids=torch.full_like(nxt, P + t)).logits
        v, i = _topk_logp(logits, spec.k)
        step_lp.append(v)
        step_top.append(i)
        nxt = i[:, -1:, 0].long()
        seq.append(nxt)
    return {"tokens": torch.cat(seq, 1).int(), "top_lp": torch.cat(step_lp, 1), "top_ids": torch.cat(step_top, 1),
            "prompt_len": P, "source": src, "prompt_ids": ids_, "shard": s}


def build_teacher(spec: TeacherSpec = TeacherSpec(), out: Path = BUILD / "teacher", shards: int | None = None) -> Path:
    """Phase 1 (resumable: existing shards are kept). Shard ``s`` depends only on ``spec`` and ``s``."""
    from tqdm.auto import tqdm

    torch.set_num_threads(spec.threads)
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(asdict(spec)))
    todo = [s for s in range(shards or spec.shards) if not (out / f"shard-{s:04d}.pt").exists()]
    if not todo:
        return out
    model, tok = _load_target()
    corpora = _corpora(tok)
    bar = tqdm(todo, desc="teacher shards", unit="shard")
    for s in bar:
        t0 = time.time()
        shard = teacher_shard(model, corpora, spec, s)
        tmp = out / f"shard-{s:04d}.pt.tmp"
        torch.save(shard, tmp)
        tmp.rename(out / f"shard-{s:04d}.pt")
        n = shard["tokens"].numel()
        bar.set_postfix_str(f"{n / (time.time() - t0):.0f} tok/s")
    return out


@dataclass(frozen=True)
class DraftSpec:
    """The draft's shape and its distillation. ``heldout_every``: shards ``s`` with
    ``s % heldout_every == heldout_every - 1`` are never trained on (they calibrate the temperature)."""

    layers: int = 4
    hidden: int = 256
    heads: int = 4
    intermediate: int = 1024
    steps: int = 1500
    seqs_per_step: int = 8
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.01
    ckpt_every: int = 100
    heldout_every: int = 16
    seed: int = 0
    threads: int = 2


def draft_config(target_cfg, spec: DraftSpec):
    """A plain Llama with the target's vocabulary, special tokens, rotary base and context."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=target_cfg.vocab_size, hidden_size=spec.hidden, intermediate_size=spec.intermediate,
                       num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.heads,
                       max_position_embeddings=target_cfg.max_position_embeddings, rms_norm_eps=target_cfg.rms_norm_eps,
                       rope_parameters=dict(target_cfg.rope_parameters), tie_word_embeddings=True,
                       bos_token_id=target_cfg.bos_token_id, eos_token_id=target_cfg.eos_token_id,
                       pad_token_id=target_cfg.pad_token_id)


def projected_embedding(target, dim: int) -> torch.Tensor:
    """The target's input embedding on its top ``dim`` right-singular directions: token geometry for free."""
    E = target.get_input_embeddings().weight.detach().float()
    _, _, Vh = torch.linalg.svd(E, full_matrices=False)
    return E @ Vh[:dim].T


def distill_loss(logits: torch.Tensor, top_lp: torch.Tensor, top_ids: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against the teacher's distribution kept as its top-k tokens plus one 'rest' bucket
    (so the draft also learns how much mass lies outside the teacher's top-k). Mean over positions."""
    q = torch.log_softmax(logits.float(), dim=-1)
    p = top_lp.float().exp()
    qk = q.gather(-1, top_ids.long())
    p_rest = (1 - p.sum(-1)).clamp(min=0)
    q_rest = torch.log1p(-qk.exp().sum(-1).clamp(max=1 - 1e-6))
    return -((p * qk).sum(-1) + p_rest * q_rest).mean()


def _shards(folder: Path) -> list[Path]:
    return sorted(folder.glob("shard-*.pt"))


def _is_heldout(path: Path, spec: DraftSpec) -> bool:
    return int(path.stem.split("-")[1]) % spec.heldout_every == spec.heldout_every - 1


def train_draft(spec: DraftSpec = DraftSpec(), teacher: Path = BUILD / "teacher", out: Path = BUILD / "train") -> Path:
    """Phase 2: distil the draft on the teacher shards; resumes from the newest checkpoint in ``out``."""
    from tqdm.auto import tqdm
    from transformers import LlamaForCausalLM

    torch.set_num_threads(spec.threads)
    out.mkdir(parents=True, exist_ok=True)
    final = out / "final.pt"
    if final.exists():
        return final
    files = [f for f in _shards(teacher) if not _is_heldout(f, spec)]
    if not files:
        raise FileNotFoundError(f"no teacher shards in {teacher}: run the teacher phase first")
    shards = [torch.load(f) for f in files]
    target, _ = _load_target()
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(draft_config(target.config, spec))
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(projected_embedding(target, spec.hidden))
    del target
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=spec.weight_decay)
    lr_at = lambda s: spec.lr * min(1.0, (s + 1) / spec.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / spec.steps)))
    log, start = [], 0
    ckpts = sorted(out.glob("ckpt-*.pt"))
    if ckpts:
        st = torch.load(ckpts[-1])
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        log, start = st["log"], st["step"]
    model.train()
    bar = tqdm(range(start, spec.steps), desc="distil draft", initial=start, total=spec.steps)
    t0 = time.time()
    for step in bar:
        g = torch.Generator().manual_seed(spec.seed * 1_000_003 + step)  # batch depends on the step only: resumable
        sh = shards[int(torch.randint(len(shards), (1,), generator=g))]
        rows = torch.randperm(sh["tokens"].shape[0], generator=g)[:spec.seqs_per_step]
        x = sh["tokens"][rows].long()
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step)
        logits = model(input_ids=x[:, :-1]).logits
        loss = distill_loss(logits, sh["top_lp"][rows], sh["top_ids"][rows])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            agree = (logits.argmax(-1) == sh["top_ids"][rows][..., 0]).float().mean().item()
        log.append({"step": step, "loss": round(loss.item(), 4), "agree": round(agree, 4),
                    "seconds": round(time.time() - t0, 1)})
        recent = log[-20:]
        bar.set_postfix(loss=f"{sum(r['loss'] for r in recent) / len(recent):.3f}",
                        agree=f"{sum(r['agree'] for r in recent) / len(recent):.3f}")
        if (step + 1) % spec.ckpt_every == 0 or step + 1 == spec.steps:
            tmp = out / "ckpt.tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "log": log, "step": step + 1}, tmp)
            tmp.rename(out / f"ckpt-{step + 1:06d}.pt")
            for old in sorted(out.glob("ckpt-*.pt"))[:-2]:
                old.unlink()
    torch.save({"model": model.state_dict(), "log": log, "spec": asdict(spec),
                "train_tokens": sum(s["tokens"].numel() for s in shards), "shards": [f.name for f in files]}, final)
    return final
