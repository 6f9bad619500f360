"""How well a draft predicts its target: teacher-forced agreement, calibration, bits per byte.

All on held-out text. Agreement is measured where drafting works: on the target's own greedy
continuations of the experiment prompts (the text a speculative decoder actually drafts), teacher-forced
(both models read the same tokens), and, for contrast, on the human-written prompts themselves.

- agreement: share of positions where the draft's argmax equals the target's.
- calibration: the draft's top-1 probability against that agreement in 10 equal-width bins; ECE is the
  bin-size-weighted mean |accuracy - confidence|.
- chain acceptance by depth: a linear draft of K started at position t is accepted up to depth j iff the
  teacher-forced agreements t..t+j-1 all hold (while the draft agrees, it reads the target's tokens), so
  P(depth j accepted) is a run-length statistic of the agreement sequence.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor


@torch.no_grad()
def teacher_forced(model, ids: Tensor, chunk: int = 1024, vocab: Tensor | None = None) -> Tensor:
    """Log-probabilities [n, V] of the next token after every position of ``ids`` (fp32); with ``vocab``,
    [n, len(vocab)] over those tokens only (a draft head over a token subset)."""
    out = []
    for s in range(0, ids.numel(), chunk):  # long texts: independent windows (bits/byte is a lower bound)
        logits = model(input_ids=ids[None, s:s + chunk]).logits[0].float()
        out.append(torch.log_softmax(logits if vocab is None else logits[:, vocab], -1))
    return torch.cat(out)


def calibration_bins(conf: Tensor, correct: Tensor, n_bins: int = 10) -> tuple[list[dict], float]:
    """Reliability bins (equal width on [0, 1]) and the expected calibration error."""
    bins, ece = [], 0.0
    edges = torch.linspace(0, 1, n_bins + 1)
    for i in range(n_bins):
        sel = (conf >= edges[i]) & ((conf < edges[i + 1]) if i < n_bins - 1 else (conf <= 1))
        n = int(sel.sum())
        if n:
            c, a = float(conf[sel].mean()), float(correct[sel].float().mean())
            ece += n / conf.numel() * abs(a - c)
        else:
            c, a = float("nan"), float("nan")
        bins.append({"lo": round(float(edges[i]), 2), "hi": round(float(edges[i + 1]), 2), "n": n,
                     "confidence": c, "accuracy": a})
    return bins, ece


def chain_acceptance(agree: list[Tensor], depth: int = 8) -> list[float]:
    """P(a linear draft is accepted at least to depth j), j = 1..depth, from agreement sequences."""
    out = []
    for j in range(1, depth + 1):
        hits = tot = 0
        for a in agree:
            if a.numel() < j:
                continue
            win = a.float().unfold(0, j, 1).prod(1)
            hits, tot = hits + float(win.sum()), tot + win.numel()
        out.append(hits / tot if tot else float("nan"))
    return out


def pair_agreement(target, draft, texts: list[Tensor], starts: list[int], vocab: Tensor | None = None) -> dict:
    """Teacher-forced agreement and calibration of ``draft`` (scoring only ``vocab``, if given) against
    ``target`` on the positions ``start..end`` of each token sequence (predictions of the tokens after them)."""
    conf, correct, agree = [], [], []
    for ids, s in zip(texts, starts):
        t_top = teacher_forced(target, ids)[s:-1].argmax(-1)
        d_lp = teacher_forced(draft, ids, vocab=vocab)[s:-1]
        d_conf, d_top = d_lp.max(-1)
        if vocab is not None:
            d_top = vocab[d_top]
        ok = d_top == t_top
        conf.append(d_conf.exp())
        correct.append(ok)
        agree.append(ok)
    conf, correct = torch.cat(conf), torch.cat(correct)
    bins, ece = calibration_bins(conf, correct)
    return {"positions": int(conf.numel()), "agreement": float(correct.float().mean()),
            "mean_confidence": float(conf.mean()), "ece": ece, "bins": bins, "chain_acceptance": chain_acceptance(agree)}


@torch.no_grad()
def bits_per_byte(model, tokenizer, text: str, max_tokens: int = 8192) -> float:
    """Held-out bits per UTF-8 byte of the first ``max_tokens`` tokens of ``text``."""
    ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"][:max_tokens])
    lp = teacher_forced(model, ids)[:-1].gather(1, ids[1:, None]).squeeze(1)
    n_bytes = len(tokenizer.decode(ids[1:]).encode("utf-8"))
    return float(-lp.sum()) / math.log(2) / n_bytes


def run_pair(profile, rerun: bool = False, root=None, render_only: bool = False):
    """Notebook 00's facts about the profile's pair, measured once into ``results/<profile>/pair.json``:
    held-out bits/byte of both models, a greedy sample, teacher-forced agreement and calibration on the
    target's greedy continuations of the test prompts and on the prompts themselves. With a ``draft_vocab``
    profile the agreement is the draft's as drafting uses it (its head over the frequent tokens), and
    ``agreement_full_vocab`` the same draft scoring every token; bits/byte always score every token."""
    import json

    from .bench import RESULTS, environment, needs_run
    from .data import load_prompts, load_texts
    from .methods import generate
    from .models import frequent_tokens, load_pair, weights_info

    path = (root or RESULTS) / profile.name / "pair.json"
    if not needs_run(path, rerun, render_only, profile.threads):
        return path
    target, draft, tok = load_pair(profile.target, profile.draft, profile.device, "float32", profile.context_override)
    T, n = profile.pair_T or profile.T, profile.pair_n_prompts or profile.n_prompts
    vocab = None if profile.draft_vocab is None else frequent_tokens(profile.draft, profile.draft_vocab)
    report = {"profile": profile.name, "T": T, "n_prompts": n, "draft_vocab": profile.draft_vocab, "models": {},
              "bits_per_byte": {}, "agreement": {}}
    for role, m, ref in (("target", target, profile.target), ("draft", draft, profile.draft)):
        report["models"][role] = {"ref": ref, "params": sum(p.numel() for p in m.parameters()),
                                  "layers": m.config.num_hidden_layers, "hidden": m.config.hidden_size,
                                  "weights": weights_info(ref)}
    for ds in profile.datasets:
        docs = [text for _, text in load_texts(ds, profile.data_source)]
        texts = ["".join(docs)] if ds == "wikitext2" else docs[:4]
        n_tok = 8192 if ds == "wikitext2" else 2048
        for role, m in (("target", target), ("draft", draft)):
            bpb = [bits_per_byte(m, tok, t, n_tok) for t in texts]
            report["bits_per_byte"].setdefault(role, {})[ds] = sum(bpb) / len(bpb)
    seqs, human = [], []
    for ds in profile.datasets:
        for p in load_prompts(ds, tok, n, profile.L_max[ds], profile.seed, profile.data_source):
            out = generate(target, p.ids, T).tokens
            seqs.append((ds, torch.cat([p.ids, torch.tensor(out)]), p.ids.numel() - 1))
            if not report.get("sample"):
                report["sample"] = {"prompt_id": p.id, "prompt_tail": tok.decode(p.ids[-40:]),
                                    "continuation": tok.decode(out[:64])}
    for key, v in (("agreement", vocab),) + ((("agreement_full_vocab", None),) if vocab is not None else ()):
        report[key] = {}
        for ds in profile.datasets + ("all",):
            sel = [s for s in seqs if ds in ("all", s[0])]
            report[key][ds] = pair_agreement(target, draft, [s[1] for s in sel], [s[2] for s in sel], v)
            report[key][f"{ds}_human"] = pair_agreement(target, draft, [s[1][:s[2] + 1] for s in sel],
                                                        [0] * len(sel), v)
    report["environment"] = environment(profile.device)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))
    return path
