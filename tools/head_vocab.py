"""Which reduced vocabulary pays for the EAGLE-3 head: 8k, 16k or 32k tokens (issue 56).

A head with a ``V``-token output can only agree with the target where the target's token is among its ``V``
tokens, and it reads ``V x hidden`` more weights each step. For each size this writes
``results/cpu/head_vocab.json``:

- ``coverage``: the share of the target's held-out tokens (the teacher text's held-out groups: greedy answers,
  sampled answers, continuations) inside the ``V`` most frequent tokens of the training text, the vocabulary
  ``build-draft --head eagle3 --draft-vocab V`` trains: a ceiling on the head's agreement;
- ``head_params`` and ``bytes_ratio``: the weights one head step reads against the target's one-token forward
  (both read every matmul weight once a token; the head's borrowed embedding row is one row, not counted):
  the floor of the cost ratio on a bandwidth-bound CPU, next to the issue's target of 0.08.

Nothing here is timed, so it can run beside other work.

    python tools/head_vocab.py [--sizes 8192 16384 32768]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dynatree_lib.core.eagle3 import Eagle3Config  # noqa: E402
from dynatree_lib.draft.eagle3 import HeadSpec, frequent_tokens, read_gz, shard_sequences, teacher_text  # noqa: E402
from dynatree_lib.draft.teacher import SAMPLED_TEXT, TEXT  # noqa: E402
from dynatree_lib.draft.train import DraftSpec, is_heldout  # noqa: E402
from dynatree_lib.harness.environment import environment  # noqa: E402
from dynatree_lib.harness.paths import REPO  # noqa: E402
from dynatree_lib.harness.weights import resolve  # noqa: E402

OUT = REPO / "results" / "cpu" / "head_vocab.json"


def heldout_by_kind(spec: HeadSpec) -> dict[str, list[int]]:
    """The target's held-out tokens that a loss would cover, per teacher-text kind (instruction, sampled,
    continuation)."""
    out: dict[str, list[int]] = {}
    for f in sorted(p for folder in (TEXT, SAMPLED_TEXT) if folder.is_dir() for p in folder.glob("*.json.gz")):
        if not is_heldout(f.name, DraftSpec()):
            continue
        row = read_gz(f)
        for s in shard_sequences(row, spec.prompt_tail):
            out.setdefault(row["kind"], []).extend(s.tokens[s.start + 1:])
    return out


def target_matmul_params(cfg) -> int:
    """The weights the target's one-token forward reads: every layer's matmuls and the (tied) output head."""
    h, i, n = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    kv = cfg.num_key_value_heads * (h // cfg.num_attention_heads)
    return n * (h * h * 2 + 2 * h * kv + 3 * h * i) + cfg.vocab_size * h


def head_matmul_params(c: Eagle3Config) -> int:
    """The weights one head step reads: fc over the fused features, the layer (q/k/v read 2h inputs), the output."""
    h, kv = c.hidden, c.kv_heads * c.head_dim
    attention = 2 * h * (c.heads * c.head_dim + 2 * kv) + c.heads * c.head_dim * h
    return c.target_hidden * 3 * h + attention + 3 * h * c.intermediate + c.draft_vocab * h


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[8192, 16384, 32768])
    args = ap.parse_args()
    from transformers import AutoConfig

    tcfg = AutoConfig.from_pretrained(resolve("embedded:target"))
    spec = HeadSpec()
    train = teacher_text(spec)
    heldout = heldout_by_kind(spec)
    target_params = target_matmul_params(tcfg)
    rows = []
    for size in args.sizes:
        vocab = set(frequent_tokens(train, size, tcfg.vocab_size).tolist())
        head = head_matmul_params(Eagle3Config.for_target(tcfg, size))
        cover = {k: sum(t in vocab for t in toks) / len(toks) for k, toks in heldout.items()}
        rows.append({"draft_vocab": size, "coverage": cover, "head_params": head,
                     "bytes_ratio": head / target_params})
        print(f"{size:6d}: coverage " + ", ".join(f"{k} {v:.4f}" for k, v in cover.items())
              + f"; reads {head / 1e6:.1f}M weights, {head / target_params:.3f} of the target's")
    report = {"target_params": target_params, "heldout_tokens": {k: len(v) for k, v in heldout.items()},
              "train_tokens": sum(len(s.tokens) - s.start - 1 for s in train), "sizes": rows,
              "environment": environment("cpu")}
    OUT.write_text(json.dumps(report, indent=1))
    print(OUT)


if __name__ == "__main__":
    main()
