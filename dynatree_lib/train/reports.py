"""The feature head's reports that read the training text: one JSON document each, registered as experiments and
made like every record (``bench --experiment NAME``, notebook 13's ``rerun``), for the profile's head
(``extras.head``); nothing here is timed. The package's ``__init__`` imports this module, so they are registered
whatever was imported.

- ``head_vocab``: which reduced vocabulary pays: coverage of the target's held-out tokens by the V most frequent
  training tokens (a ceiling on agreement), and the weights one step reads.
- ``head_lookup``: does the head need a context lookup of its own? v4's lookup weights against weights refitted to
  the head, cross-fitted on the held-out teacher shards (never trained on, never a dev or test prompt).
"""
from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import torch

from ..core.drafts.heads.eagle3 import Eagle3Config, load_head
from ..core.drafts.lookup import LookupConfig, column_of, mix
from ..harness.measure.environment import environment
from ..harness.experiments.catalog import Document, Sequence, experiment
from ..harness.experiments.head_reports import report, with_head
from ..harness.experiments.roofline import target_matmul_params
from ..harness.experiments.talon import TALON, TALON_TUNING
from ..harness.experiments.pair import teacher_forced_head, top1
from ..harness.setup.profiles import Profile
from ..harness.setup.weights import head_folder, resolve, weights_info
from .eagle3 import HeadSpec, frequent_tokens, read_gz, shard_sequences, shard_text, teacher_text
from .lookup_fit import fit_weights, matched
from .teacher import SAMPLED_TEXT, TEXT, load_target
from .train import DraftSpec, is_heldout

VOCAB_SIZES = (8192, 16384, 32768)  # head_vocab: the draft vocabularies compared
LOOKUP_SEQUENCES, LOOKUP_MAX_LEN, LOOKUP_SEED = 160, 1024, 0  # head_lookup: held-out sequences, their cut, the seed
GREEDY_KINDS = ("instruction", "continuation")
ALONE, V4, REFITTED = "network alone", "v4's lookup", "refitted lookup"  # head_lookup's rows, as tables name them


def head_matmul_params(c: Eagle3Config) -> int:
    """The weights one head step reads: fc over the fused features, the layer (q/k/v read 2h inputs), the output."""
    h, kv = c.hidden, c.kv_heads * c.head_dim
    attention = 2 * h * (c.heads * c.head_dim + 2 * kv) + c.heads * c.head_dim * h
    return c.target_hidden * 3 * h + attention + 3 * h * c.intermediate + c.draft_vocab * h


def heldout_by_kind(spec) -> dict[str, list[int]]:
    """The target's held-out tokens that a loss would cover, per teacher-text kind."""
    out: dict[str, list[int]] = {}
    for f in sorted(p for folder in (TEXT, SAMPLED_TEXT) if folder.is_dir() for p in folder.glob("*.json.gz")):
        if is_heldout(f.name, DraftSpec()):
            row = read_gz(f)
            for s in shard_sequences(row, spec.prompt_tail):
                out.setdefault(row["kind"], []).extend(s.tokens[s.start + 1:])
    return out


def run_head_vocab(profile: Profile, rerun: bool = False, root: Path | None = None, render_only: bool = False) -> Path:
    def measure() -> dict:
        from transformers import AutoConfig

        tcfg = AutoConfig.from_pretrained(resolve(profile.models.target))
        spec = HeadSpec()
        train, heldout, target_params = teacher_text(spec), heldout_by_kind(spec), target_matmul_params(tcfg)
        rows = []
        for size in VOCAB_SIZES:
            vocab = set(frequent_tokens(train, size, tcfg.vocab_size).tolist())
            head = head_matmul_params(Eagle3Config.for_target(tcfg, size))
            cover = {k: sum(t in vocab for t in toks) / len(toks) for k, toks in heldout.items()}
            rows.append({"draft_vocab": size, "coverage": cover, "head_params": head,
                        "bytes_ratio": head / target_params})
        return {"target_params": target_params, "heldout_tokens": {k: len(v) for k, v in heldout.items()},
                "train_tokens": sum(len(s.tokens) - s.start - 1 for s in train), "sizes": rows,
                "environment": environment("cpu")}

    return report("head_vocab", profile, measure, rerun, root, render_only=render_only)


def heldout_sequences(n: int, max_len: int, seed: int) -> list[tuple[list[int], int]]:
    """(tokens, first loss row) of ``n`` held-out greedy sequences, seeded, each cut to ``max_len`` tokens."""
    held = [s for kind, s in shard_text(HeadSpec(), heldout=True) if kind in GREEDY_KINDS]
    if not held:
        raise FileNotFoundError("no held-out teacher shards of greedy text (train.eagle3.shard_text): nothing to fit on")
    random.Random(seed).shuffle(held)
    out = [(list(s.tokens[:max_len]), s.start) for s in held]
    return [(ids, start) for ids, start in out if start < len(ids) - 2][:n]


def score(forced, weights, vocab: torch.Tensor, col_of: torch.Tensor) -> dict:
    """Agreement of the mixture's top token with the target's, and the target token's mean log-likelihood."""
    cfg = LookupConfig(tuple(weights)) if any(weights) else None
    hits, ll, rows = 0, 0.0, 0
    for ids, s, t_top, lp in forced:
        m = lp[s:] if cfg is None else mix(lp, ids, s, cfg, vocab)
        hits += int((top1(m, vocab)[1] == t_top).sum())
        cols = col_of[t_top]
        ll += float(torch.where(cols >= 0, m[torch.arange(len(cols)), cols.clamp(min=0)], math.log(1e-9)).sum())
        rows += len(cols)
    return {"agreement": hits / rows, "log_likelihood": ll / rows, "rows": rows}


def teacher_force(target, head, sequences) -> list:
    """(tokens, first loss row, the target's greedy token of each row from it, the head's log-probabilities of every
    row but the last) of each sequence: ``lookup_fit.matched``'s rows."""
    forced = []
    for ids, start in sequences:
        t_lp, d_lp = teacher_forced_head(target, head, torch.tensor(ids))
        forced.append((ids, start, t_lp[start:-1].argmax(-1), d_lp[:-1]))
        print(f"\r{len(forced)} sequences teacher-forced", end="", file=sys.stderr)
    if len(forced) < 2:
        raise ValueError(f"{len(forced)} usable held-out sequences: the two halves of head_lookup need two")
    return forced


def cross_fit(forced, committed: tuple, vocab: torch.Tensor, col_of: torch.Tensor) -> tuple[dict, dict]:
    """Weights fitted on each half (A: even sequences, B: odd) and each half's scores: the network alone, v4's lookup
    and the lookup refitted on the other half."""
    halves = {"A": forced[0::2], "B": forced[1::2]}
    fits = {h: fit_weights(matched(rows, col_of, len(committed))) for h, rows in halves.items()}
    other = {"A": "B", "B": "A"}
    scores = {h: {ALONE: score(rows, [0.0] * len(committed), vocab, col_of), V4: score(rows, committed, vocab, col_of),
                  REFITTED: score(rows, fits[other[h]][0], vocab, col_of)} for h, rows in halves.items()}
    return {h: {"weights": w, "fit": f} for h, (w, f) in fits.items()}, scores


def run_head_lookup(profile: Profile, rerun: bool = False, root: Path | None = None, render_only: bool = False) -> Path:
    def measure() -> dict:
        ref = with_head(profile).models.draft
        target, tok = load_target()
        folder = head_folder(ref)
        head = load_head(folder, target.get_input_embeddings().weight, torch.float32)
        committed = LookupConfig.load(folder / "lookup.json").weights
        vocab = head.vocab()
        forced = teacher_force(target, head, heldout_sequences(LOOKUP_SEQUENCES, LOOKUP_MAX_LEN, LOOKUP_SEED))
        fitted, scores = cross_fit(forced, committed, vocab, column_of(vocab, len(tok)))
        return {"head": ref, "committed_weights": list(committed), "weights": weights_info(ref),
                "data": f"{len(forced)} held-out greedy teacher sequences ({', '.join(GREEDY_KINDS)}; seed "
                        f"{LOOKUP_SEED}, at most {LOOKUP_MAX_LEN} tokens each), halves A (even) and B (odd)",
                "fitted": fitted, "scores": scores, "environment": environment("cpu")}

    return report("head_lookup", profile, measure, rerun, root, render_only=render_only)


@experiment
class HeadVocab(Document):
    name = "head_vocab"
    notebook = "13_heads"
    make = run_head_vocab


@experiment
class HeadLookup(Document):
    name = "head_lookup"
    notebook = "13_heads"
    make = run_head_lookup


@experiment
class HeadRecords(Sequence):
    """Every record drafted with the feature head, in the order a newly published head measures them again
    (``bench --experiment head_records``; ``build-draft --head eagle3 --publish`` says to)."""
    name = "head_records"
    parts = ("pair_eagle3", "head_cost", "head_tree_depth", "memory_head", "head_lookup", "heads", TALON_TUNING, TALON)
