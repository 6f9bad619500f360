"""Issue 56's tree-depth target: tokens committed per verification (``L_bar``, ``harness.metrics``) of EAGLE-3's own
dynamic tree (``core/eagle_tree.py`` at SafeAILab/EAGLE's defaults: depth 7, top-k 10, 60 tokens) drafting with the
committed EAGLE-3 head, greedy, on Spec-Bench *dev* questions through the chat template (to EOS); beside it the same
tree on v4, and DynaTree (the paper's settings) on each, every prompt decoded by every configuration in turn. Each
output is checked against the target's greedy AR (bf16 on the batch-invariant fused engine: equal token for token).
No timing: the counts are what it records, so it may run beside other work. Writes
``results/cpu/head_tree_depth.json`` (configuration, prompt ids, per-prompt metrics, environment).

    python tools/head_tree_depth.py [--head eagle3:weights/smollm2-eagle3] [--per-category 2] [--T 256]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tqdm import tqdm  # noqa: E402

from dynatree_lib.harness.environment import environment  # noqa: E402
from dynatree_lib.harness.metrics import prompt_metrics  # noqa: E402
from dynatree_lib.harness.paths import REPO  # noqa: E402
from dynatree_lib.harness.profiles import get_profile  # noqa: E402
from dynatree_lib.harness.prompts import candidates, load_prompts  # noqa: E402
from dynatree_lib.harness.weights import weights_info  # noqa: E402
from dynatree_lib.harness.workloads import SPEC_BENCH, eos  # noqa: E402
from dynatree_lib.methods import DYNATREE, EAGLE3_TREE, generate  # noqa: E402

DRAFTS = ("head", "v4")
METHODS = (EAGLE3_TREE, DYNATREE)


def pairs(head_ref: str) -> dict:
    """Each draft's loaded (target, draft, tokenizer) on the cpu profile's timed engine."""
    out = {}
    for name, prof in (("head", get_profile("cpu", draft=head_ref, draft_vocab=None)), ("v4", get_profile("cpu"))):
        out[name] = (prof, *prof.models.load_pair(prof.models.dtype, prof.max_len))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--head", default="eagle3:weights/smollm2-eagle3")
    ap.add_argument("--per-category", type=int, default=2, help="dev questions per Spec-Bench category")
    ap.add_argument("--T", type=int, default=256, help="at most this many new tokens (each stops at EOS)")
    args = ap.parse_args()
    loaded = pairs(args.head)
    prof, target, _, tok = loaded["head"]
    prompts = load_prompts(SPEC_BENCH, tok, n=args.per_category, split="dev")
    dev = set(candidates(SPEC_BENCH, "dev"))
    assert all(p.id in dev for p in prompts), "a prompt is not a Spec-Bench dev question"
    stop = eos(SPEC_BENCH, tok)
    configs = {m: prof.method(m, SPEC_BENCH) for m in METHODS}
    rows = []
    for p in tqdm(prompts, desc="dev questions", unit="prompt"):
        ar = generate(target, p.ids, args.T, eos_token_id=stop).tokens
        for d in DRAFTS:
            _, tgt, drf, _ = loaded[d]
            for m, cfg in configs.items():
                res = generate(tgt, p.ids, args.T, draft=drf, method=cfg, eos_token_id=stop)
                rows.append({"prompt_id": p.id, "category": p.category, "draft": d, "method": m,
                             "equals_ar": res.tokens == ar, **prompt_metrics(res)})
    summary = {f"{d}/{m}": statistics.fmean(r["L_bar"] for r in rows if r["draft"] == d and r["method"] == m)
               for d in DRAFTS for m in METHODS}
    out = {"workload": SPEC_BENCH, "split": "dev", "T": args.T, "dtype": prof.models.dtype,
           "engine": str(prof.models.engine), "drafts": {d: {"ref": loaded[d][0].models.draft,
                                                             "weights": weights_info(loaded[d][0].models.draft)}
                                                         for d in DRAFTS},
           "configs": {m: {"type": type(c).__name__, **asdict(c)} for m, c in configs.items()},
           "prompt_ids": [p.id for p in prompts], "mean_L_bar": summary, "per_prompt": rows,
           "environment": environment(prof.models.device)}
    path = REPO / "results" / "cpu" / "head_tree_depth.json"
    path.write_text(json.dumps(out, indent=1))
    for k, v in summary.items():
        print(f"{k}: tokens per verification {v:.2f}")
    print(path, "every output equals AR:", all(r["equals_ar"] for r in rows))


if __name__ == "__main__":
    main()
