"""Fitting the draft's context lookup: one mixture weight per match length, on text no experiment uses."""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

import torch

from ..core.drafts.lookup import LookupConfig, column_of, matches, mix
from ..harness.setup.data import chat_prompt
from ..harness.experiments.pair import teacher_forced, top1
from ..harness.setup.paths import DRAFT_DIR
from ..harness.setup.weights import frequent_tokens, resolve
from . import instructions
from .teacher import answer_batch, corpora, load_target


def continuation_sequences(target, tok, rng: random.Random, n_seq: int, cont: int) -> list[tuple[list[int], int]]:
    """(tokens, last prompt row) of ``n_seq`` PG-19 and ``n_seq`` raw WikiText-2 prompts with greedy continuations."""
    texts, seqs = corpora(tok), []
    for src, P in (("pg19_train", 250), ("wiki_valid_raw", 200)):
        docs = [d for d in texts[src] if len(d) >= P]
        rows = []
        for _ in range(n_seq):
            d = docs[rng.randrange(len(docs))]
            off = rng.randrange(len(d) - P + 1)
            rows.append(d[off:off + P])
        x = torch.tensor(rows)
        y = target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=cont, do_sample=False,
                            min_new_tokens=cont, pad_token_id=tok.eos_token_id or 0)
        seqs += [(r.tolist(), P - 1) for r in y]
    return seqs


def instruction_sequences(target, tok, rng: random.Random, n: int, max_new: int) -> list[tuple[list[int], int]]:
    """(tokens, last prompt row) of ``n`` of the draft's instructions with the target's greedy answers."""
    if n == 0:
        return []
    prompts = [chat_prompt(tok, r["text"])[-1024:] for r in rng.sample(instructions.load(), n)]
    answers = answer_batch(target, prompts, max_new, tok.eos_token_id, tok.pad_token_id or 0)
    return [(p + a["answer"], len(p) - 1) for p, a in zip(prompts, answers)]


LOOKUP_WEIGHTS = tuple(round(0.05 * i, 2) for i in range(20)) + (0.97, 0.99)  # candidates for each w[n]


@torch.no_grad()
def fit_lookup(out: Path = DRAFT_DIR / "lookup.json", max_n: int = 12, n_seq: int = 12, n_instructions: int = 24,
               cont: int = 256, *, draft_vocab: int = 8192, seed: int = 7) -> Path:
    """The context lookup's weights (``core.drafts.lookup``; minutes, ``build-draft --lookup-only``).

    Text no experiment uses: ``n_seq`` prompts from the PG-19 books outside the test split (250 tokens) and
    ``n_seq`` from the raw WikiText-2 validation text (200 tokens, the experiment prompts' lengths) with the
    target's greedy continuation of each (``cont`` tokens, fp32, batched), and ``n_instructions`` of the draft's
    instructions (``train.instructions``) with the target's greedy answer (to EOS or ``cont`` tokens); the
    draft's teacher-forced log-probabilities over its ``draft_vocab`` head. For every match length n, w[n]
    maximises the likelihood of the target's greedy token under ``(1 - w) p_draft + w [copy]`` (a proper score,
    so the mixture's probabilities stay calibrated)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    target, tok = load_target()
    draft = AutoModelForCausalLM.from_pretrained(resolve("embedded:draft"), dtype=torch.float32).eval()
    vocab = frequent_tokens("embedded:draft", draft_vocab)
    col_of = column_of(vocab, len(tok))
    rng = random.Random(seed)
    seqs = continuation_sequences(target, tok, rng, n_seq, cont) + instruction_sequences(target, tok, rng,
                                                                                          n_instructions, cont)
    # per sequence: the target's greedy tokens and the draft's log-probs, teacher-forced once
    forced = [(ids, s, teacher_forced(target, torch.tensor(ids))[s:-1].argmax(-1),
               teacher_forced(draft, torch.tensor(ids), vocab=vocab)[:-1]) for ids, s in seqs]
    weights, fit = fit_weights(matched(forced, col_of, max_n))
    cfg = LookupConfig(tuple(weights))
    agree = []
    for ids, s, t_top, lp in forced:
        for rows in (lp[s:], mix(lp, ids, s, cfg, vocab)):
            agree.append((top1(rows, vocab)[1] == t_top).float().mean())
    out.write_text(json.dumps({
        "weights": weights, "max_n": max_n,
        "data": f"{n_seq} PG-19 non-test-book prompts (250 tokens) + {n_seq} raw WikiText-2 validation prompts "
                f"(200 tokens) with SmolLM2's fp32 greedy continuations ({cont} tokens), {n_instructions} of the "
                f"draft's instructions with SmolLM2's greedy answers, seed {seed}; the draft over its {draft_vocab} "
                "most frequent tokens",
        "fit": fit, "agreement_draft": float(torch.stack(agree[0::2]).mean()),
        "agreement_with_lookup": float(torch.stack(agree[1::2]).mean()),
        "rebuild": "python -m dynatree_lib build-draft --lookup-only"}, indent=1) + "\n")
    return out


def matched(forced, col_of, max_n: int) -> dict[int, list[tuple[float, bool]]]:
    """Per match length n = 1..max_n, at every matched row of the teacher-forced sequences ``forced`` ((tokens, first
    row s, the target's greedy token of each row from s, the draft's log-probabilities of every row)): the draft's
    probability of the target's token (0 outside its vocabulary) and whether the copy is the target's token."""
    by_n: dict[int, list[tuple[float, bool]]] = {n: [] for n in range(1, max_n + 1)}
    for ids, s, t_top, lp in forced:
        for t, n, c in matches(ids, s, len(ids) - 1, max_n):
            tt = int(t_top[t - s])
            pt = float(lp[t, col_of[tt]].exp()) if col_of[tt] >= 0 else 0.0
            by_n[n].append((pt, c == tt))
    return by_n


def fit_weights(by_n: dict[int, list[tuple[float, bool]]]) -> tuple[list[float], dict]:
    """w[n] for n = 1..max(by_n) of ``matched``'s rows: the candidate (``LOOKUP_WEIGHTS``) that maximises the
    likelihood of the target's token under ``(1 - w) p_draft + w [copy]`` (0 where no row matched n), and the fit's
    record."""
    weights, fit = [], {}
    for n in range(1, max(by_n) + 1):
        obs = by_n.get(n, [])
        ll = {w: sum(math.log(max((1 - w) * pt + w * ok, 1e-9)) for pt, ok in obs) for w in LOOKUP_WEIGHTS}
        best = max(ll, key=ll.get) if obs else 0.0
        weights.append(best)
        fit[str(n)] = {"positions": len(obs), "copy_agreement": sum(ok for _, ok in obs) / max(1, len(obs)), "w": best}
    return weights, fit
