"""Builds the ``cpu`` profile's draft for SmolLM2-135M-Instruct: ``python -m dynatree_lib build-draft``.

Four resumable phases, each writing under ``models/draft-build/`` (git-ignored) and skipped when its
output exists, and two quick ones (``count_tokens``: seconds, ``build-draft --vocab-only``; ``fit_lookup``:
minutes, ``build-draft --lookup-only``):

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
5. ``count_tokens``: token frequencies of the same training text, ranked, in
   ``weights/smollm2-draft/token_counts.json``: the draft head's token subset (FR-Spec, the ``cpu``
   profile's ``draft_vocab``) is the top of this ranking.
6. ``fit_lookup``: the weights of the draft's context lookup (``lookup.py``) on the target's greedy
   continuations of non-experiment prompts, in ``weights/smollm2-draft/lookup.json``.
"""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .models import DRAFT_DIR, REPO, smollm2_folder

BUILD = REPO / "models" / "draft-build"


@dataclass(frozen=True)
class TeacherSpec:
    """What the teacher phase generates: ``shards`` x ``batch`` sequences of a prompt of one of
    ``prompt_lens`` tokens plus ``cont`` greedy tokens, top-``k`` log-probs at every position.

    Shards from ``raw_from`` on (None: none) cut their WikiText prompts from the raw validation text
    (" @-@ ", " , " as in the experiment prompts) and draw WikiText with ``raw_wiki_share``; shards
    before it keep the detokenized text and ``wiki_share``, so adding raw shards leaves the old ones as
    they were built."""

    shards: int = 64
    batch: int = 48
    prompt_lens: tuple = (64, 128, 192, 256)
    cont: int = 192
    k: int = 32
    wiki_share: float = 0.4
    raw_from: int | None = 39
    raw_wiki_share: float = 0.6
    seed: int = 1234
    threads: int = 2
    dtype: str = "float32"  # the target's precision while it writes the continuations


def _corpora(tok) -> dict[str, list[list[int]]]:
    from .data import training_text, wikitext_valid_articles

    enc = lambda texts: [ids for ids in tok(texts, add_special_tokens=False)["input_ids"] if len(ids) > 300]
    return {"wiki_valid": enc(wikitext_valid_articles()), "wiki_valid_raw": enc(wikitext_valid_articles(raw=True)),
            "pg19_train": enc(training_text())}


def count_tokens(out: Path = DRAFT_DIR / "token_counts.json", keep: int = 16384) -> Path:
    """Phase 5: how often each token occurs in the training text (the draft's, no experiment's: PG-19
    books outside the test split, WikiText-2 validation raw and detokenized); the ``keep`` most frequent
    ids, ranked (ties by id), with their counts."""
    from transformers import AutoTokenizer

    from .data import training_text, wikitext_valid_articles

    tok = AutoTokenizer.from_pretrained(smollm2_folder())
    texts = training_text() + wikitext_valid_articles() + wikitext_valid_articles(raw=True)
    counts = torch.zeros(len(tok), dtype=torch.long)
    for i in range(0, len(texts), 16):
        for ids in tok(texts[i:i + 16], add_special_tokens=False)["input_ids"]:
            counts += torch.bincount(torch.tensor(ids, dtype=torch.long), minlength=counts.numel())
    order = sorted(range(counts.numel()), key=lambda t: (-int(counts[t]), t))[:keep]
    out.write_text(json.dumps({
        "source": "PG-19 books outside the test split + WikiText-2 validation (raw and detokenized), "
                  "tokenized with SmolLM2's tokenizer; the draft's training text, no experiment's",
        "rebuild": "python -m dynatree_lib build-draft --vocab-only", "vocab_size": counts.numel(),
        "total_tokens": int(counts.sum()), "ids": order, "counts": [int(counts[t]) for t in order]}) + "\n")
    return out


def load_target():
    from transformers import AutoModelForCausalLM, AutoTokenizer

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
    if spec.raw_from is not None and s >= spec.raw_from:
        src = "wiki_valid_raw" if rng.random() < spec.raw_wiki_share else "pg19_train"
    else:
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
    model, tok = load_target()
    model = model.to(getattr(torch, spec.dtype))
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
    """The draft's shape and its distillation, on teacher shards ``0 .. teacher_shards - 1``, of which
    shards ``s`` with ``s % heldout_every == heldout_every - 1`` are never trained on (they calibrate
    the temperature)."""

    layers: int = 4
    hidden: int = 256
    heads: int = 4
    intermediate: int = 1024
    steps: int = 1700
    seqs_per_step: int = 8
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.01
    ckpt_every: int = 100
    heldout_every: int = 16
    prompt_tail: int = 64
    teacher_shards: int = 64
    seed: int = 0
    threads: int = 2
    # train (and calibrate) the output layer over only the head_vocab most frequent tokens, the subset
    # drafting scores (FR-Spec, ``token_counts.json``); None: the full vocabulary. Steps run ~2.3x faster
    # (75 vs 32 a minute here); the teacher's mass on other tokens goes to the loss's rest bucket.
    head_vocab: int | None = None


def head_ids(spec: DraftSpec) -> torch.Tensor | None:
    """The token ids the draft's output layer is trained over (None: every token)."""
    from .models import frequent_tokens

    return None if spec.head_vocab is None else frequent_tokens("embedded:draft", spec.head_vocab)


def head_logits(model, hidden: torch.Tensor, ids: torch.Tensor | None) -> torch.Tensor:
    """Logits over ``ids`` (the tied embedding's rows; all tokens when None) of final hidden states."""
    return model.lm_head(hidden) if ids is None else hidden @ model.get_input_embeddings().weight[ids].T


def columns(ids: torch.Tensor | None, vocab_size: int) -> torch.Tensor | None:
    """token id -> its column among ``ids`` (-1 for a token outside them): ``distill_loss``'s ``cols``."""
    if ids is None:
        return None
    cols = torch.full((vocab_size,), -1, dtype=torch.long)
    cols[ids] = torch.arange(ids.numel())
    return cols


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


def distill_loss(logits: torch.Tensor, top_lp: torch.Tensor, top_ids: torch.Tensor,
                 cols: torch.Tensor | None = None) -> torch.Tensor:
    """Cross-entropy against the teacher's distribution kept as its top-k tokens plus one 'rest' bucket
    (so the draft also learns how much mass lies outside the teacher's top-k). Mean over positions.
    ``cols`` (``columns``): the logits cover a subset of the tokens; teacher mass on tokens outside it
    joins the rest bucket."""
    q = torch.log_softmax(logits.float(), dim=-1)
    p = top_lp.float().exp()
    idx = top_ids.long()
    inside = None
    if cols is not None:
        idx = cols[idx]
        inside = idx >= 0
        idx, p = idx.clamp(min=0), p * inside
    qk = q.gather(-1, idx)
    qk_p = qk.exp() if inside is None else qk.exp() * inside
    p_rest = (1 - p.sum(-1)).clamp(min=0)
    q_rest = torch.log1p(-qk_p.sum(-1).clamp(max=1 - 1e-6))
    return -((p * qk).sum(-1) + p_rest * q_rest).mean()


def _shards(folder: Path, spec: "DraftSpec") -> list[Path]:
    return [f for f in sorted(folder.glob("shard-*.pt")) if int(f.stem.split("-")[1]) < spec.teacher_shards]


def _is_heldout(path: Path, spec: DraftSpec) -> bool:
    return int(path.stem.split("-")[1]) % spec.heldout_every == spec.heldout_every - 1


def train_draft(spec: DraftSpec = DraftSpec(), teacher: Path = BUILD / "teacher", out: Path = BUILD / "train") -> Path:
    """Phase 2: distil the draft on the teacher shards; resumes from the newest checkpoint in ``out``."""
    from tqdm.auto import tqdm
    from transformers import LlamaForCausalLM

    torch.set_num_threads(spec.threads)
    out.mkdir(parents=True, exist_ok=True)
    final = out / "final.pt"
    done = [p for p in [final, *sorted(out.glob("ckpt-*.pt"))[-1:]] if p.exists()]
    if done and ((was := torch.load(done[0]).get("spec")) is None or DraftSpec(**was) != spec):
        raise ValueError(f"{out} holds a draft trained with {was}, not {spec}: choose another folder or remove it")
    if final.exists():
        return final
    files = [f for f in _shards(teacher, spec) if not _is_heldout(f, spec)]
    if not files:
        raise FileNotFoundError(f"no teacher shards in {teacher}: run the teacher phase first")
    shards = [torch.load(f) for f in files]
    ids = head_ids(spec)
    target, _ = load_target()
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(draft_config(target.config, spec))
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(projected_embedding(target, spec.hidden))
    cols = columns(ids, target.config.vocab_size)
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
        # the loss covers the continuation (what drafting serves) and the last prompt_tail prompt tokens
        # (human text); skipping the rest of the prompt saves a third of the vocabulary projections
        s0 = max(0, sh["prompt_len"] - spec.prompt_tail)
        hidden = model.model(input_ids=x[:, :-1]).last_hidden_state
        logits = head_logits(model, hidden[:, s0:], ids)
        loss = distill_loss(logits, sh["top_lp"][rows][:, s0:], sh["top_ids"][rows][:, s0:], cols)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            top = logits.argmax(-1) if ids is None else ids[logits.argmax(-1)]
            agree = (top == sh["top_ids"][rows][:, s0:, 0]).float().mean().item()
        log.append({"step": step, "loss": round(loss.item(), 4), "agree": round(agree, 4),
                    "seconds": round(time.time() - t0, 1)})
        recent = log[-20:]
        bar.set_postfix(loss=f"{sum(r['loss'] for r in recent) / len(recent):.3f}",
                        agree=f"{sum(r['agree'] for r in recent) / len(recent):.3f}")
        if (step + 1) % spec.ckpt_every == 0 or step + 1 == spec.steps:
            tmp = out / "ckpt.tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "log": log, "step": step + 1,
                        "spec": asdict(spec)}, tmp)
            tmp.rename(out / f"ckpt-{step + 1:06d}.pt")
            for old in sorted(out.glob("ckpt-*.pt"))[:-2]:
                old.unlink()
    torch.save({"model": model.state_dict(), "log": log, "spec": asdict(spec),
                "train_tokens": sum(s["tokens"].numel() for s in shards), "shards": [f.name for f in files]}, final)
    return final


def _draft_from(final: Path):
    """The trained draft (fp32 LlamaForCausalLM) from phase 2's final checkpoint."""
    from transformers import AutoConfig, LlamaForCausalLM

    st = torch.load(final)
    spec = DraftSpec(**st["spec"])
    target_cfg = AutoConfig.from_pretrained(smollm2_folder())
    model = LlamaForCausalLM(draft_config(target_cfg, spec))
    model.load_state_dict(st["model"])
    return model.eval(), st


TEMPERATURES = tuple(round(0.5 + 0.05 * i, 2) for i in range(31))  # 0.5 .. 2.0


@torch.no_grad()
def fit_temperature(model, shards: list[dict], temps=TEMPERATURES, ids: torch.Tensor | None = None) -> tuple[float, dict]:
    """Phase 3's fit: the temperature whose top-1 probabilities best predict agreement with the target's
    greedy token (lowest expected calibration error, 10 bins) on the continuations of held-out shards;
    ``ids``: the head covers these tokens only (``head_ids``)."""
    from .calibration import calibration_bins

    confs = {t: [] for t in temps}
    correct = []
    for sh in shards:
        P = sh["prompt_len"]
        for b in range(0, sh["tokens"].shape[0], 8):
            x = sh["tokens"][b:b + 8].long()
            h = model.model(input_ids=x[:, :-1]).last_hidden_state[:, P - 1:]  # predicts the continuation
            logits = head_logits(model, h, ids).float()
            top1 = logits.argmax(-1) if ids is None else ids[logits.argmax(-1)]
            correct.append((top1 == sh["top_ids"][b:b + 8, P - 1:, 0]).flatten())
            top = logits.max(-1).values
            for t in temps:
                confs[t].append((top / t - torch.logsumexp(logits / t, -1)).exp().flatten())
    correct = torch.cat(correct)
    ece = {t: calibration_bins(torch.cat(confs[t]), correct)[1] for t in temps}
    best = min(ece, key=ece.get)
    return best, {"ece_by_temperature": {str(t): round(e, 4) for t, e in ece.items()},
                  "heldout_positions": int(correct.numel()), "heldout_agreement": float(correct.float().mean())}


def calibrate(final: Path = BUILD / "train" / "final.pt", teacher: Path = BUILD / "teacher",
              out: Path = BUILD / "calibrated") -> Path:
    """Phase 3: fit one temperature on the held-out shards and bake it into the final norm's weight
    (the logits are tied-embedding @ (norm weight * normalised h), so scaling the weight by 1/T divides
    the logits by T): the result is a plain Llama again."""
    if (out / "model.safetensors").exists():
        return out
    model, st = _draft_from(final)
    spec = DraftSpec(**st["spec"])
    torch.set_num_threads(spec.threads)
    held = [torch.load(f) for f in _shards(teacher, spec) if _is_heldout(f, spec)]
    if not held:
        raise FileNotFoundError(f"no held-out teacher shards in {teacher} (every {spec.heldout_every}th shard)")
    temp, fit = fit_temperature(model, held, ids=head_ids(spec))
    with torch.no_grad():
        model.model.norm.weight.div_(temp)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    (out / "calibration.json").write_text(json.dumps({"temperature": temp, **fit}, indent=1))
    return out


def export(calibrated: Path = BUILD / "calibrated", final: Path = BUILD / "train" / "final.pt") -> Path:
    """Phase 4: ``weights/smollm2-draft/`` (bf16 safetensors, the target's tokenizer, training.json, the
    model card; the context lookup, ``fit_lookup``), then the held-out evaluation on the ``cpu`` profile's test prompts (notebook 00's
    ``results/cpu/pair.json`` and ``costs.json``), whose figures the model card quotes."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    from .calibration import run_pair
    from .costmodel import run_costs
    from .profiles import get_profile

    model = LlamaForCausalLM.from_pretrained(calibrated, dtype=torch.bfloat16)
    DRAFT_DIR.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(DRAFT_DIR)
    AutoTokenizer.from_pretrained(smollm2_folder()).save_pretrained(DRAFT_DIR)
    st = torch.load(final)
    cal = json.loads((calibrated / "calibration.json").read_text())
    log = st["log"]
    training = {"draft_spec": st["spec"], "teacher_spec": asdict(TeacherSpec()), "train_tokens": st["train_tokens"],
                "shards": st["shards"], "steps": len(log), "wall_s": log[-1]["seconds"] if log else None,
                "final_loss": sum(r["loss"] for r in log[-50:]) / max(1, len(log[-50:])),
                "calibration": cal, "params": sum(p.numel() for p in model.parameters()),
                "rebuild": "python -m dynatree_lib build-draft"}
    (DRAFT_DIR / "training.json").write_text(json.dumps(training, indent=1))
    fit_lookup()
    prof = get_profile("cpu")
    pair = json.loads(run_pair(prof, rerun=True).read_text())
    costs = json.loads(run_costs(prof, rerun=True).read_text())
    (DRAFT_DIR / "README.md").write_text(model_card(training, pair, costs))
    return DRAFT_DIR


def model_card(training: dict, pair: dict, costs: dict) -> str:
    """The draft's model card, from its training log and its held-out evaluation."""
    s, a, ts = training["draft_spec"], pair["agreement"], training["teacher_spec"]
    raw = ("" if ts.get("raw_from") is None else
           f" Shards from {ts['raw_from']} on cut their WikiText prompts from the raw text (` @-@ `, ` , `), as the"
           f" experiment prompts are, and draw WikiText {ts['raw_wiki_share']:.0%} of the time (earlier shards:"
           f" detokenized WikiText, {ts['wiki_share']:.0%}).")
    cur = costs["curves"]
    ratio = {d: c["draft"]["1"] / c["target"]["1"] for d, c in cur.items()}
    n_sub = pair.get("draft_vocab")
    ranked = DRAFT_DIR / "token_counts.json"
    cover = (lambda r: sum(r["counts"][:n_sub]) / r["total_tokens"])(json.loads(ranked.read_text())) \
        if n_sub and ranked.exists() else float("nan")
    heads = [(f"top {n_sub}" if n_sub else "full", a)] + ([("full", pair["agreement_full_vocab"])] if n_sub else [])
    rows = "\n".join(f"| {k} | {h} | {v['positions']} | {v['agreement']:.3f} | {v['mean_confidence']:.3f} | "
                     f"{v['ece']:.3f} |" for h, agr in heads for k, v in agr.items())
    subset = "" if not n_sub else f"""
## Draft head over the frequent tokens (FR-Spec)
The `cpu` profile drafts with a head over the {n_sub} most frequent tokens of the training text only
(`draft_vocab={n_sub}`; ranking and counts in `token_counts.json`, rebuilt by
`python -m dynatree_lib build-draft --vocab-only`; they cover {cover:.1%} of that text's tokens): the head
reads {n_sub} of the 49152 rows of the tied embedding. The target still verifies every token, so decoding stays exact; a token outside the subset is simply
never drafted. One-token draft forward, subset head / full head (`results/cpu/costs.json`):
{', '.join(f'{d} {c["draft"]["1"]:.2f} / {c["draft_full_vocab"]["1"]:.2f} ms' for d, c in cur.items() if "draft_full_vocab" in c)}.
"""
    lk_file = DRAFT_DIR / "lookup.json"
    lookup = "" if not (pair.get("draft_lookup") and lk_file.exists()) else _lookup_card(json.loads(lk_file.read_text()), pair)
    bpb = pair["bits_per_byte"]
    head = "" if not s.get("head_vocab") else f"; output layer trained over the {s['head_vocab']} most frequent tokens only"
    return f"""---
license: apache-2.0
base_model: HuggingFaceTB/SmolLM2-135M-Instruct
tags: [speculative-decoding, draft-model, distillation]
---
# smollm2-draft: a calibrated draft for SmolLM2-135M-Instruct

The `cpu` profile's draft model (`embedded:draft`) for the DynaTree reproduction: a
{s['layers']}-layer Llama (hidden {s['hidden']}, {s['heads']} heads, MLP {s['intermediate']}, tied embeddings,
{training['params'] / 1e6:.1f}M parameters) sharing SmolLM2's tokenizer and vocabulary (49152), stored in bf16.

## Training
- Teacher data: prompts of 64-256 tokens cut from text no experiment uses (the PG-19 books outside the test
  split and the WikiText-2 *validation* split), SmolLM2's greedy continuation of each ({ts['cont']}
  tokens) and its top-{ts['k']} next-token log-probabilities at every position;
  {len(training['shards'])} training shards, {training['train_tokens']:,} tokens. Every
  {s['heldout_every']}th shard is held out (temperature fit only).{raw}
- Initialisation: the embedding is SmolLM2's input embedding projected on its top {s['hidden']} principal directions.
- Loss: cross-entropy against the teacher's top-k distribution plus one bucket for the rest of the mass, on the
  continuation and the last {s['prompt_tail']} prompt tokens{head}. AdamW, lr {s['lr']}, {training['steps']} steps of
  {s['seqs_per_step']} sequences, {training['wall_s'] / 60:.0f} min on 2 CPU cores; final loss {training['final_loss']:.3f}.
- Calibration: one temperature, {training['calibration']['temperature']}, fitted for the lowest expected calibration
  error on the held-out shards and baked into the final norm's weight (so the files are a plain Llama).
- Rebuild: `{training['rebuild']}` (seeded and resumable; teacher shards take about a minute each on 2 cores).

## Held-out evaluation
On the `cpu` profile's test prompts (WikiText-2 test, PG-19 test books; never trained on), teacher-forced on
SmolLM2's own greedy continuations ({pair['T']} tokens; the text a speculative decoder drafts) and, as `*_human`,
on the human-written prompts. Agreement: the draft's argmax equals the target's. ECE: 10 equal-width bins.
Head: the draft as drafting uses it{f" (its {n_sub} most frequent tokens)" if n_sub else ""}{", and with its full head" if n_sub else ""}.

| text | head | positions | agreement | mean top-1 prob | ECE |
|---|---|---|---|---|---|
{rows}

Bits per byte (held out): target {bpb['target']['wikitext2']:.2f} / draft {bpb['draft']['wikitext2']:.2f} on
WikiText-2 test, target {bpb['target']['pg19']:.2f} / draft {bpb['draft']['pg19']:.2f} on the PG-19 test books.

One-token cached forward, draft / target, same process, back to back, on the profile's engine
(`results/cpu/costs.json`): {', '.join(f'{d} {r:.3f} ({cur[d]["draft"]["1"]:.2f} / {cur[d]["target"]["1"]:.2f} ms, '
                                       f'`{cur[d].get("engine", "?")}`)' for d, r in ratio.items())}.
{subset}{lookup}
Licence: Apache-2.0, as SmolLM2 (whose outputs it is trained on).
"""


def _lookup_card(fit: dict, pair: dict) -> str:
    """The model card's section on the context lookup (``lookup.json`` and pair.json's agreement)."""
    a, b = pair["agreement"], pair.get("agreement_no_lookup", {})
    rows = "\n".join(f"| {k} | {b[k]['agreement']:.3f} | {v['agreement']:.3f} | {v['ece']:.3f} |"
                     for k, v in a.items() if k in b)
    w = ", ".join(f"{x:g}" for x in fit["weights"])
    return f"""
## Context lookup
Drafting mixes the network's distribution with the token that followed the latest earlier occurrence of the
longest suffix (up to {fit['max_n']} tokens) of the committed text plus the node's drafted path
(`dynatree_lib/lookup.py`): p = (1 - w[n]) p_draft + w[n] [copy], n the match length. Why: SmolLM2's greedy
continuations loop, and this network copies poorly. Weights w[1..{fit['max_n']}] = {w}, each the maximum-likelihood
weight of the target's greedy token at that match length, fitted on {fit['data']}
(`lookup.json`; `{fit['rebuild']}`). On that fitting text: agreement {fit['agreement_draft']:.3f} without,
{fit['agreement_with_lookup']:.3f} with the lookup. The target still verifies every token: decoding stays exact.

Held out (the test prompts above; the tables above are the draft *with* its lookup, as drafting uses it):

| text | agreement, network alone | agreement, with lookup | ECE, with lookup |
|---|---|---|---|
{rows}
"""


LOOKUP_WEIGHTS = tuple(round(0.05 * i, 2) for i in range(20)) + (0.97, 0.99)  # candidates for each w[n]


@torch.no_grad()
def fit_lookup(out: Path = DRAFT_DIR / "lookup.json", max_n: int = 12, n_seq: int = 12, cont: int = 256,
               draft_vocab: int = 8192, seed: int = 7) -> Path:
    """Phase 6 (minutes, ``build-draft --lookup-only``): the context lookup's weights (``lookup.py``).

    Text no experiment uses: ``n_seq`` prompts from the PG-19 books outside the test split (250 tokens) and
    ``n_seq`` from the raw WikiText-2 validation text (200 tokens, the experiment prompts' lengths), the
    target's greedy continuation of each (``cont`` tokens, fp32, batched), and the draft's teacher-forced
    log-probabilities over its ``draft_vocab`` head. For every match length n, w[n] maximises the
    likelihood of the target's greedy token under ``(1 - w) p_draft + w [copy]`` (a proper score, so the
    mixture's probabilities stay calibrated)."""
    from transformers import AutoModelForCausalLM

    from .calibration import teacher_forced, top1
    from .lookup import LookupConfig, column_of, matches, mix
    from .models import frequent_tokens

    torch.manual_seed(seed)
    target, tok = load_target()
    draft = AutoModelForCausalLM.from_pretrained(DRAFT_DIR, dtype=torch.float32).eval()
    corpora = _corpora(tok)
    vocab = frequent_tokens("embedded:draft", draft_vocab)
    col_of = column_of(vocab, len(tok))
    rng = random.Random(seed)
    seqs = []
    for src, P in (("pg19_train", 250), ("wiki_valid_raw", 200)):
        docs = [d for d in corpora[src] if len(d) >= P]
        rows = []
        for _ in range(n_seq):
            d = docs[rng.randrange(len(docs))]
            off = rng.randrange(len(d) - P + 1)
            rows.append(d[off:off + P])
        x = torch.tensor(rows)
        y = target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=cont, do_sample=False,
                            min_new_tokens=cont, pad_token_id=tok.eos_token_id or 0)
        seqs += [(r.tolist(), P - 1) for r in y]
    # per sequence: the target's greedy tokens and the draft's log-probs, teacher-forced once
    forced = [(ids, s, teacher_forced(target, torch.tensor(ids))[s:-1].argmax(-1),
               teacher_forced(draft, torch.tensor(ids), vocab=vocab)[:-1]) for ids, s in seqs]
    # per matched position: p_draft(copy token), p_draft(target token), copy == target token
    by_n: dict[int, list[tuple[float, float, bool]]] = {n: [] for n in range(1, max_n + 1)}
    for ids, s, t_top, lp in forced:
        for t, n, c in matches(ids, s, len(ids) - 1, max_n):
            tt = int(t_top[t - s])
            pc = float(lp[t, col_of[c]].exp()) if col_of[c] >= 0 else 0.0
            pt = float(lp[t, col_of[tt]].exp()) if col_of[tt] >= 0 else 0.0
            by_n[n].append((pc, pt, c == tt))
    weights, fit = [], {}
    for n in range(1, max_n + 1):
        obs = by_n[n]
        ll = {w: sum(math.log(max((1 - w) * pt + w * ok, 1e-9)) for _, pt, ok in obs) for w in LOOKUP_WEIGHTS}
        best = max(ll, key=ll.get) if obs else 0.0
        weights.append(best)
        fit[str(n)] = {"positions": len(obs), "copy_agreement": sum(o[2] for o in obs) / max(1, len(obs)), "w": best}
    cfg = LookupConfig(tuple(weights))
    agree = []
    for ids, s, t_top, lp in forced:
        for rows in (lp[s:], mix(lp, ids, s, cfg, vocab)):
            agree.append((top1(rows, vocab)[1] == t_top).float().mean())
    out.write_text(json.dumps({
        "weights": weights, "max_n": max_n,
        "data": f"{n_seq} PG-19 non-test-book prompts (250 tokens) + {n_seq} raw WikiText-2 validation prompts "
                f"(200 tokens), seed {seed}; SmolLM2's fp32 greedy continuations ({cont} tokens); the draft over its "
                f"{draft_vocab} most frequent tokens",
        "fit": fit, "agreement_draft": float(torch.stack(agree[0::2]).mean()),
        "agreement_with_lookup": float(torch.stack(agree[1::2]).mean()),
        "rebuild": "python -m dynatree_lib build-draft --lookup-only"}, indent=1) + "\n")
    return out


def build_all(teacher_spec: TeacherSpec = TeacherSpec(), draft_spec: DraftSpec = DraftSpec()) -> Path:
    """``python -m dynatree_lib build-draft``: the four phases, each resumed or skipped when done."""
    build_teacher(teacher_spec)
    final = train_draft(draft_spec)
    count_tokens()
    return export(calibrate(final))
