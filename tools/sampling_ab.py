"""Tokens per verification and speed over AR when sampling, on dev prompts: one code version per run, so that a
change of a sampling rule can be compared before and after.

    python tools/sampling_ab.py                          # T = 1, 3 dev prompts per continuation workload, T = 128
    python tools/sampling_ab.py --out /tmp/after.json    # also write the per-prompt rows

Run it once per version of the library (``PYTHONPATH`` pointing at each checkout), with nothing else running.
Methods use the paper's settings (linear: K = 4), so both versions decode the same configuration; each prompt
runs every method back to back (AR first) with the same seed. Printed per workload, with the harness's
definitions (``harness.measure.metrics``): tau (``L_bar``, tokens per verification, mean over prompts: a property of the
drafts and the rule, not of the machine) and the speedup over AR with its 95% paired bootstrap interval
(``tables.paired``; machine speed cancels within a prompt, not across runs).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from dynatree_lib import LinearConfig, Sampling, generate
from dynatree_lib.harness.measure.metrics import prompt_metrics
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.harness.setup.prompts import load_prompts
from dynatree_lib.harness.measure.bench import prompt_seed
from dynatree_lib.reporting.tables import paired

METHODS = ("ar", "linear", "fixed_tree", "dynatree", "talon")


def config(p, name: str, workload: str):
    return LinearConfig(4) if name == "linear" else p.method(name, workload)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--n", type=int, default=3, help="dev prompts per continuation workload (Spec-Bench: 1 per category)")
    ap.add_argument("--T", type=int, default=128)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    p = get_profile("cpu")
    torch.set_num_threads(p.models.threads)
    target, draft, tok = p.load_pair()
    rows = []
    for ws in p.workloads:
        n = 1 if ws == "spec_bench" else args.n
        eos = tok.eos_token_id if ws == "spec_bench" else None
        for prompt in load_prompts(ws, tok, n, p.L_max(ws), split="dev"):
            seed = prompt_seed(p.protocol.seed, prompt.id, 0)
            for name in METHODS:
                res = generate(target, prompt.ids, args.T, draft=draft, method=None if name == "ar" else config(p, name, ws),
                               eos_token_id=eos, sampling=Sampling(args.temperature),
                               generator=torch.Generator().manual_seed(seed))
                m = prompt_metrics(res)
                rows.append({"workload": ws, "prompt_id": prompt.id, "method": name, "L_bar": m["L_bar"], "tps": m["tps"]})
    report(rows)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


def report(rows: list[dict]) -> None:
    tps = lambda ws, name: {r["prompt_id"]: r["tps"] for r in rows if r["workload"] == ws and r["method"] == name}
    print(f"{'workload':12} {'method':11} {'tau':>6} {'x AR':>6}  95% interval")
    for ws in dict.fromkeys(r["workload"] for r in rows):
        for name in METHODS[1:]:
            tau = statistics.fmean(r["L_bar"] for r in rows if r["workload"] == ws and r["method"] == name)
            ratio, lo, hi, _ = paired(tps(ws, name), tps(ws, "ar"))
            print(f"{ws:12} {name:11} {tau:6.2f} {ratio:6.2f}  [{lo:.2f}, {hi:.2f}]")


if __name__ == "__main__":
    main()
