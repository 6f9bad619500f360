"""How well a draft predicts its target: teacher-forced agreement, calibration, bits per byte.

All on held-out text. Agreement is measured where drafting works: on the target's own greedy
continuations of the experiment prompts (the text a speculative decoder actually drafts), teacher-forced
(both models read the same tokens), and, for contrast, on the human-written prompts themselves.

- agreement: share of positions where the draft's argmax equals the target's.
- calibration: the draft's top-1 probability against that agreement in 10 equal-width bins; ECE is the
  bin-size-weighted mean |accuracy - confidence|.
- overlap: sum over tokens of min(p, q), the target's and the draft's next-token laws at temperature 1, averaged
  over positions: the probability that a token drawn from the draft is accepted by speculative sampling
  (one drawn child; a tree's siblings add to it). Greedy agreement reads only the top token; this reads the law.
- chain acceptance by depth: a linear draft of K started at position t is accepted up to depth j iff the
  teacher-forced agreements t..t+j-1 all hold (while the draft agrees, it reads the target's tokens), so
  P(depth j accepted) is a run-length statistic of the agreement sequence.

A draft on the target's features (an EAGLE-3 head, ``eagle3:<folder>``) is teacher-forced the way it was trained: the
target runs once over the text, keeping the hidden states the head reads, and the head's row after each prefix is the
token it would draft first there (``core.drafts.heads.eagle3.first_drafts``: what ``Eagle3Runner`` drafts). Its
log-probabilities cover its draft vocabulary, read through ``vocab`` as a head over a token subset is (a token outside
it has q = 0), so every measure keeps its one definition.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from ...core.drafts.heads.eagle3 import Eagle3Head, first_drafts, fused_features
from ...core.drafts.heads.eagle3_runner import Eagle3Runner
from ...core.engines.runner import Runner
from ... import methods as registry
from ..measure.cell import Cell
from ..setup.splits import CATEGORIES
from ..setup.workloads import POOLED, count, eos, workload
from .catalog import Document, Settings, experiment, get


@torch.no_grad()
def teacher_forced(model, ids: Tensor, chunk: int = 1024, vocab: Tensor | None = None) -> Tensor:
    """Log-probabilities [n, V] of the next token after every position of ``ids`` (fp32); with ``vocab``,
    [n, len(vocab)] over those tokens only (a draft head over a token subset)."""
    out = []
    for s in range(0, ids.numel(), chunk):  # long texts: independent windows (bits/byte is a lower bound)
        logits = model(input_ids=ids[None, s:s + chunk]).logits[0].float()
        out.append(torch.log_softmax(logits if vocab is None else logits[:, vocab], -1))
    return torch.cat(out)


@torch.no_grad()
def teacher_forced_head(target, head: Eagle3Head, ids: Tensor, chunk: int = 1024) -> tuple[Tensor, Tensor]:
    """The target's log-probabilities [n, V] (as ``teacher_forced``) and the head's [n, V'] over its draft
    vocabulary (columns ``head.vocab()``) of the token it drafts first after every position of ``ids`` (fp32):
    one target forward per window, which also keeps the features of the head's layers (``first_drafts``)."""
    t_out, d_out = [], []
    for s in range(0, ids.numel(), chunk):  # the windows of ``teacher_forced``
        x = ids[s:s + chunk]
        out = target(input_ids=x[None], output_hidden_states=True)
        t_out.append(torch.log_softmax(out.logits[0].float(), -1))
        features = fused_features(out.hidden_states, head.cfg.aux_layers)[0]
        d_out.append(torch.log_softmax(first_drafts(head, x, features).float(), -1))
    return torch.cat(t_out), torch.cat(d_out)


def draft_head(draft) -> Eagle3Head | None:
    """The EAGLE-3 head of a draft on the target's features (an ``Eagle3Runner``); None for a causal LM."""
    return draft.head if isinstance(draft, Eagle3Runner) else None


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


def top1(lp: Tensor, vocab: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Top-1 probability and token id at every row of log-probabilities whose columns are ``vocab``'s
    tokens (all tokens if None)."""
    conf, top = lp.max(-1)
    return conf.exp(), top if vocab is None else vocab[top]


def agreement_stats(conf: list[Tensor], agree: list[Tensor], overlap: list[Tensor]) -> dict:
    """Agreement, calibration, chain acceptance and the laws' overlap from per-sequence draft confidences,
    agreement flags (the draft's argmax equals the target's) and sum(min(p, q)) at the same positions."""
    c, ok = torch.cat(conf), torch.cat(agree)
    bins, ece = calibration_bins(c, ok)
    return {"positions": int(c.numel()), "agreement": float(ok.float().mean()),
            "mean_confidence": float(c.mean()), "ece": ece, "bins": bins, "chain_acceptance": chain_acceptance(agree),
            "overlap": float(torch.cat(overlap).mean())}


def overlap(target_lp: Tensor, draft_lp: Tensor, vocab: Tensor | None = None) -> Tensor:
    """sum(min(p, q)) per row of two log-probability tables, the draft's over the columns ``vocab`` (a token
    outside it has q = 0 and adds nothing)."""
    p = (target_lp if vocab is None else target_lp[:, vocab]).exp()
    return torch.minimum(p, draft_lp.exp()).sum(-1)


@torch.no_grad()
def bits_per_byte(model, tokenizer, text: str, max_tokens: int = 8192) -> float:
    """Held-out bits per UTF-8 byte of the first ``max_tokens`` tokens of ``text``."""
    ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"][:max_tokens])
    lp = teacher_forced(model, ids)[:-1].gather(1, ids[1:, None]).squeeze(1)
    n_bytes = len(tokenizer.decode(ids[1:]).encode("utf-8"))
    return float(-lp.sum()) / math.log(2) / n_bytes


def run_pair(profile, rerun: bool = False, root=None, render_only: bool = False, name: str = "pair",
             *, draft: str | None = None):
    """Notebook 00's facts about the profile's pair, measured once into ``results/<profile>/<name>.json``:
    held-out bits/byte of both models, a greedy sample, and teacher-forced agreement and calibration on the
    target's greedy output for the dev prompts of every workload (continuations of the continuation datasets,
    answers to Spec-Bench's questions, per category) and on the prompts themselves (``*_human``). With a
    ``draft_vocab`` profile the agreement is the draft's as drafting uses it (its head over the frequent tokens),
    and ``agreement_full_vocab`` the same draft scoring every token; with ``draft_lookup`` the draft's distribution
    carries its context lookup (``core.drafts.lookup.mix``) and ``agreement_no_lookup`` is the network alone; bits/byte
    always score the network alone, over every token. ``sampled``: the same agreement report on the target's
    output sampled at temperature 1 (where a sampled verification drafts; its overlap is what acceptance reads).
    ``draft``: another draft than the profile's (a folder with
    the same companions: an earlier version, reported beside the current one), or an EAGLE-3 head
    (``eagle3:<folder>``; its own draft vocabulary, the ``lookup.json`` of its folder with ``draft_lookup``, no
    bits/byte: it scores only its draft vocabulary, and only with the target's features)."""
    from ..measure.environment import environment
    from ..setup.models import load_pair
    from ..measure.store import needs_run, results_path, write_report
    from ..setup.weights import weights_info

    path = results_path(name, profile, root)
    if not needs_run(path, rerun, render_only, profile):
        return path
    if profile.models.threads:
        torch.set_num_threads(profile.models.threads)
    draft_ref = draft or profile.models.draft
    target, dm, tok = load_pair(profile.models.target, draft_ref, profile.models.device, "float32",
                                profile.models.context_override)
    own = get(Pair.name).settings_of(profile)
    T = own.T or profile.protocol.T
    head = draft_head(dm)
    if head is None and isinstance(dm, Runner) and dm.reads_features:
        raise ValueError(f"{draft_ref!r}: the pair report teacher-forces EAGLE-3 heads and causal LMs; a Medusa or "
                         "Hydra head's first drafts are not reported yet")
    report = {"profile": profile.name, "T": T, "n_prompts": own.n_prompts, "n_questions": own.n_questions,
              "split": "dev",
              "draft_vocab": profile.models.draft_vocab if head is None else head.cfg.draft_vocab,
              "draft_lookup": profile.models.draft_lookup, "models": {}, "bits_per_byte": {}}
    for role, m, ref in (("target", target, profile.models.target), ("draft", dm, draft_ref)):
        net = m.model if isinstance(m, Runner) else m  # a head's runner: the head (the embedding it borrows aside)
        report["models"][role] = {"ref": ref, "params": sum(p.numel() for p in net.parameters()),
                                  "layers": net.config.num_hidden_layers, "hidden": net.config.hidden_size,
                                  "weights": weights_info(ref)}
    report["bits_per_byte"] = held_out_bits(profile, target, dm if head is None else None, tok)
    seqs = target_outputs(profile, target, tok, T, report)
    report |= agreement_report(profile, draft_ref, target, dm, seqs)
    # the same on text the target samples at temperature 1, where a sampled verification drafts
    # (the prompts themselves, ``*_human``, are the same text: reported once, above)
    sampled = target_outputs(profile, target, tok, T, report, sample=True)
    report["sampled"] = agreement_report(profile, draft_ref, target, dm, sampled, human=False)
    report["environment"] = environment(profile.models.device)
    write_report(path, report, replace=rerun)
    return path


def held_out_bits(profile, target, draft, tok) -> dict:
    """Bits per byte of both models on the continuation datasets' test text (of the target alone if ``draft`` is
    None)."""
    from ..setup.data import load_texts

    out = {}
    models = (("target", target),) + ((("draft", draft),) if draft is not None else ())
    for ds in [w for w in profile.workloads if workload(w).continuation]:
        docs = [text for _, text in load_texts(ds, profile.protocol.data_source)]
        w = workload(ds)
        texts = ["".join(docs)] if w.bits_docs is None else docs[:w.bits_docs]
        for role, m in models:
            bpb = [bits_per_byte(m, tok, t, w.bits_tokens) for t in texts]
            out.setdefault(role, {})[ds] = sum(bpb) / len(bpb)
    return out


def target_outputs(profile, target, tok, T: int, report: dict, *, sample: bool = False) -> list[tuple[str, Tensor, int]]:
    """(group, prompt + the target's output, the prompt's last row) for every dev prompt: greedy, or with
    ``sample`` drawn at temperature 1 (seeded by the protocol's seed); Spec-Bench's groups are
    ``spec_bench/<category>``. The first greedy continuation is kept as a sample in ``report``."""
    from ...core.sampling import Sampling
    from ...methods import generate
    from ..setup.prompts import load_prompts

    gen = torch.Generator().manual_seed(profile.protocol.seed) if sample else None
    seqs = []
    for ws in profile.workloads:
        own = get(Pair.name).settings_of(profile)
        n = count(ws, own.n_prompts, own.n_questions) or profile.protocol.n_prompts
        for p in load_prompts(ws, tok, n, profile.L_max(ws), split="dev", seed=profile.protocol.seed,
                              source=profile.protocol.data_source):
            ids = p.ids[-profile.protocol.max_prompt:] if profile.protocol.max_prompt else p.ids
            out = generate(target, ids, T, eos_token_id=eos(ws, tok),
                           sampling=Sampling(1.0) if sample else Sampling(),
                           generator=gen).tokens
            group = f"{ws}/{p.category}" if workload(ws).per_category else ws
            seqs.append((group, torch.cat([ids, torch.tensor(out)]), ids.numel() - 1))
            if not sample and not report.get("sample"):
                report["sample"] = {"prompt_id": p.id, "prompt_tail": tok.decode(ids[-40:]),
                                    "continuation": tok.decode(out[:64])}
    return seqs


CONTINUATIONS = POOLED  # the scope pooling every continuation workload (groups without a category)


def in_scope(scope: str, group: str) -> bool:
    """Whether a sequence of ``group`` ("wikitext2", "spec_bench/qa") counts in a report ``scope``."""
    return scope in ("all", group, group.split("/")[0]) or (scope == CONTINUATIONS and "/" not in group)


def versions(pair: dict, before: dict) -> dict[str, dict]:
    """A draft's report against another draft's (an earlier version, or an EAGLE-3 head) on the same dev prompts
    and greedy outputs: per scope of both (human text aside) the positions, and for ``before`` and ``now`` the
    network alone's agreement and ECE, the agreement with its lookup (a report without a lookup: its drafting head
    for both) and the overlap of the laws on the target's T = 1 samples, alone and with the lookup (NaN where a
    report has no sampled part)."""
    out = {}
    for key in pair["agreement"]:
        if key.endswith("_human") or key not in before.get("agreement", {}):
            continue
        out[key] = {"positions": pair["agreement"][key]["positions"]}
        for name, rep in (("before", before), ("now", pair)):
            alone = rep.get("agreement_no_lookup", rep["agreement"])[key]
            out[key][name] = {"alone": alone["agreement"], "served": rep["agreement"][key]["agreement"],
                              "ece": alone["ece"], **sampled_overlap(rep, key)}
    return out


def sampled_overlap(rep: dict, key: str) -> dict[str, float]:
    """Scope ``key``'s overlap on the target's T = 1 samples: of the network alone and as drafting serves it."""
    sampled = rep.get("sampled", {})
    served = sampled.get("agreement", {})
    alone = sampled.get("agreement_no_lookup", served)
    at = lambda part: part.get(key, {}).get("overlap", float("nan"))
    return {"overlap": at(alone), "overlap_served": at(served)}


def agreement_report(profile, draft_ref: str, target, draft, seqs, *, human: bool = True) -> dict:
    """Agreement and calibration of each draft head (see ``run_pair``) per group, per workload, and over all,
    on the target's output and (with ``human``) on the human prompt. Teacher-forced once per sequence and text."""
    from ..setup.weights import frequent_tokens, lookup_config

    head = draft_head(draft)
    if head is not None:
        vocab = draft.vocab  # the columns the runner drafts from
    else:
        vocab = None if profile.models.draft_vocab is None else frequent_tokens(draft_ref, profile.models.draft_vocab)
    lookup = lookup_config(draft_ref) if profile.models.draft_lookup else None
    full = vocab is not None and head is None  # a head has no scores outside its vocabulary
    heads = ({"agreement": (vocab, lookup)} | ({"agreement_full_vocab": (None, lookup)} if full else {})
             | ({"agreement_no_lookup": (vocab, None)} if lookup is not None else {}))
    flags = {key: [] for key in heads}  # (group, text, draft confidences, agreement with the target, overlap)
    for group, ids, s in seqs:
        for text, x, lo in (("", ids, s),) + ((("_human", ids[:s + 1], 0),) if human else ()):
            for key, row in sequence_flags(target, draft, x, lo, heads).items():
                flags[key].append((group, text, *row))
    groups = list(dict.fromkeys(g for g, _, _ in seqs))
    pooled = [CONTINUATIONS] if sum("/" not in g for g in groups) > 1 else []
    scopes = groups + [w for w in profile.workloads if w not in groups] + pooled + ["all"]
    out = {}
    for key in heads:
        out[key] = {}
        for scope in scopes:
            for text in ("", "_human"):
                sel = [f for f in flags[key] if f[1] == text and in_scope(scope, f[0])]
                if sel:
                    out[key][scope + text] = agreement_stats(*([f[i] for f in sel] for i in (2, 3, 4)))
    return out


def sequence_flags(target, draft, x: Tensor, lo: int, heads: dict) -> dict[str, tuple[Tensor, Tensor, Tensor]]:
    """Per draft head of ``heads`` (key -> (vocab, lookup config)), at rows ``lo..`` of the text ``x`` (row t: the
    next token after ``x[:t + 1]``), teacher-forced: the draft's top-1 probability, whether its argmax is the
    target's, and the overlap of the two laws. One draft forward per vocabulary (the rows with and without the
    lookup share it); an EAGLE-3 head's rows come from the target's forward."""
    from ...core.drafts.lookup import mix

    head = draft_head(draft)
    if head is not None:
        t_lp, d_lp = teacher_forced_head(target, head, x)
        lps = {False: d_lp[:-1]}
    else:
        t_lp, lps = teacher_forced(target, x), {}
    t_lp = t_lp[lo:-1]
    t_top, out = t_lp.argmax(-1), {}
    for key, (v, lk) in heads.items():
        if (v is None) not in lps:
            lps[v is None] = teacher_forced(draft, x, vocab=v)[:-1]
        lp = lps[v is None]
        d_lp = lp[lo:] if lk is None else mix(lp, x.tolist(), lo, lk, v)
        conf, top = top1(d_lp, v)
        out[key] = (conf, top == t_top, overlap(t_lp, d_lp, v))
    return out


@dataclass(frozen=True)
class PairSettings(Settings):
    """``T`` new tokens of the target's output (0: the protocol's) of ``n_prompts`` dev prompts per continuation
    workload (0: the protocol's) and ``n_questions`` per Spec-Bench category."""

    T: int = 0
    n_prompts: int = 0
    n_questions: int = 2
    part: ClassVar[str] = "pair"


@experiment
class Pair(Document):
    """Notebook 00's report on the profile's pair (``run_pair``)."""
    name = "pair"
    notebook = "00_setup"
    make = run_pair
    settings = PairSettings

    def planned(self, p, cells: list[Cell]) -> list[tuple[Cell, int]]:
        """The target's greedy output of the dev prompts, in fp32."""
        out, per_category = [], len(set(CATEGORIES.values()))
        for ws in p.workloads:
            own = self.settings_of(p)
            n = count(ws, own.n_prompts or p.protocol.n_prompts, own.n_questions * per_category)
            out.append((Cell(dataset=ws, method=registry.AR, config=None, T=p.protocol.T, L_max=p.L_max(ws),
                             dtype="float32"), n))
        return out
