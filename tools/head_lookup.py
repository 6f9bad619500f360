"""Does the EAGLE-3 head need a context lookup of its own? (issue 56; ``core.lookup``)

The head's folder carries v4's ``lookup.json``: one mixture weight w[n] per match length, fitted against v4's
probabilities (``draft.lookup_fit``). A stronger network should trust a copy less, so this fits the weights again
against the head's probabilities and asks whether that pays, on text no experiment uses: the held-out teacher
shards (``draft.eagle3.shard_text``, the rows the head's temperature was fitted on: never trained on, never a dev
or test prompt), greedy kinds only (the target's answers and continuations, the text greedy decoding writes).

Cross-fitted, so no number scores weights on the rows they were fitted on: the sequences (seeded shuffle, each cut
to its first ``--max-len`` tokens) split into halves A (even) and B (odd); weights fitted on A are scored on B and
the other way round, beside the network alone and v4's lookup. Per half: the first drafted token's agreement
with the target's greedy token (teacher-forced, ``core.eagle3.first_drafts``, as the pair report) and the mean
log-likelihood of the target's token under the mixture as drafting mixes it (``core.lookup.mix``). Writes
``results/cpu/head_lookup.json``; nothing is timed, so it can run beside other work.

    python tools/head_lookup.py [--head eagle3:weights/smollm2-eagle3] [--sequences 160] [--max-len 1024]
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dynatree_lib.core.eagle3 import load_head  # noqa: E402
from dynatree_lib.core.lookup import LookupConfig, column_of, mix  # noqa: E402
from dynatree_lib.draft.eagle3 import HeadSpec, shard_text  # noqa: E402
from dynatree_lib.draft.lookup_fit import fit_weights, matched  # noqa: E402
from dynatree_lib.draft.teacher import load_target  # noqa: E402
from dynatree_lib.harness.environment import environment  # noqa: E402
from dynatree_lib.harness.pair import teacher_forced_head, top1  # noqa: E402
from dynatree_lib.harness.paths import REPO, written_whole  # noqa: E402
from dynatree_lib.harness.weights import head_folder, weights_info  # noqa: E402

OUT = REPO / "results" / "cpu" / "head_lookup.json"
GREEDY_KINDS = ("instruction", "continuation")


def heldout_sequences(n: int, max_len: int, seed: int) -> list[tuple[list[int], int]]:
    """(tokens, first loss row) of ``n`` held-out greedy sequences, seeded, each cut to ``max_len`` tokens."""
    held = [s for kind, s in shard_text(HeadSpec(), heldout=True) if kind in GREEDY_KINDS]
    if not held:
        raise FileNotFoundError("no held-out teacher shards of greedy text (draft.eagle3.shard_text): nothing to "
                                "fit on")
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


ALONE, V4, REFITTED = "network alone", "v4's lookup", "refitted lookup"  # the rows, as the report and card name them


def teacher_force(target, head, sequences) -> list:
    """(tokens, first loss row, the target's greedy token of each row from it, the head's log-probabilities of every
    row but the last) of each sequence: ``lookup_fit.matched``'s rows."""
    forced = []
    for ids, start in sequences:
        t_lp, d_lp = teacher_forced_head(target, head, torch.tensor(ids))
        forced.append((ids, start, t_lp[start:-1].argmax(-1), d_lp[:-1]))
        print(f"\r{len(forced)} sequences teacher-forced", end="", file=sys.stderr)
    if len(forced) < 2:
        raise ValueError(f"{len(forced)} usable held-out sequences (--sequences, --max-len): the two halves need two")
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--head", default="eagle3:weights/smollm2-eagle3")
    ap.add_argument("--sequences", type=int, default=160)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(2)
    target, tok = load_target()
    folder = head_folder(args.head)
    head = load_head(folder, target.get_input_embeddings().weight, torch.float32)
    committed = LookupConfig.load(folder / "lookup.json").weights
    vocab = head.vocab()
    forced = teacher_force(target, head, heldout_sequences(args.sequences, args.max_len, args.seed))
    fitted, scores = cross_fit(forced, committed, vocab, column_of(vocab, len(tok)))
    report = {"head": args.head, "committed_weights": list(committed),
              "weights": weights_info(args.head),
              "data": f"{len(forced)} held-out greedy teacher sequences ({', '.join(GREEDY_KINDS)}; seed "
                      f"{args.seed}, at most {args.max_len} tokens each), halves A (even) and B (odd)",
              "fitted": fitted, "scores": scores, "environment": environment("cpu")}
    with written_whole(OUT) as tmp:
        tmp.write_text(json.dumps(report, indent=1) + "\n")
    for h, rows in scores.items():
        print(f"\nhalf {h}: " + "; ".join(f"{k} {v['agreement']:.4f} / {v['log_likelihood']:.4f}"
                                         for k, v in rows.items()))
    print(OUT)


if __name__ == "__main__":
    main()
