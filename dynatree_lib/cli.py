"""Command line: ``python -m dynatree_lib {setup,generate,show-tree,bench,plan,build-draft}``.

  python -m dynatree_lib setup --profile cpu                 # load the models, check the data
  python -m dynatree_lib generate --method dynatree -T 64 --text "It was a dark night"
  python -m dynatree_lib show-tree --method dynatree -T 24 --text "The capital of France is"
  python -m dynatree_lib bench --experiment main --set T=128 --set n_prompts=4
  python -m dynatree_lib plan --profile paper [--quick]      # what a run costs, without running it
  python -m dynatree_lib build-draft [--instructions-only | --teacher-only | --vocab-only | --lookup-only]
  python -m dynatree_lib build-draft --sampled-teacher-only  # the target's answers sampled at T = 1 (resumable)
  python -m dynatree_lib build-draft --from-gpu DIR          # calibrate and publish tools/gpu_distill.py's output
"""
from __future__ import annotations

import argparse
import ast
import json
import sys

from .harness.profiles import get_profile
from .methods import method_names

# ./run_all.sh --quick: a first look (two prompts per continuation dataset, one per Spec-Bench category, one replicate)
QUICK = {"n_prompts": 2, "n_questions": 1, "n_exact": 1, "replicates": 1, "tuning.n": 1, "tuning.n_questions": 1,
         "warmup": 1}
BUILD_STEPS = ("instructions", "teacher", "sampled-teacher", "vocab", "lookup")
STEP_HELP = {"sampled-teacher": "only the target's answers sampled at T = 1 (resumable; no other phase reads them)"}


def overrides(items: list[str]) -> dict:
    """``--set FIELD=VALUE`` pairs as profile overrides (values parsed as Python literals where they are)."""
    out = {}
    for it in items or []:
        if "=" not in it:
            raise ValueError(f"--set expects FIELD=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        try:
            out[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            out[k] = v
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dynatree", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("setup", "generate", "show-tree", "bench", "plan"):
        sp = sub.add_parser(name)
        sp.add_argument("--profile", default="cpu")
        sp.add_argument("--set", action="append", metavar="FIELD=VALUE", help="override a profile field")
    for name in ("generate", "show-tree"):
        g = sub.choices[name]
        g.add_argument("--method", default="dynatree", choices=method_names())
        g.add_argument("--dataset", default="wikitext2", help="a workload (wikitext2, pg19, spec_bench)")
        g.add_argument("--text", default=None, help="prompt text (default: the first dev prompt of --dataset)")
        g.add_argument("-T", type=int, default=None)
        g.add_argument("--dtype", default=None, help="float32 or bfloat16 (default: the profile's)")
        g.add_argument("--temperature", type=float, default=0.0, help="0: greedy; > 0: sample the target's law")
        g.add_argument("--seed", type=int, default=0, help="the sampling generator's seed")
    sub.choices["show-tree"].add_argument("--iterations", type=int, default=4, help="trees to print")
    sub.choices["bench"].add_argument("--experiment", default="main")
    sub.choices["bench"].add_argument("--rerun", action="store_true", help="archive the existing JSON and start over")
    sub.choices["plan"].add_argument("--quick", action="store_true", help=f"the quick subset: {QUICK}, no sweeps")
    bd = sub.add_parser("build-draft", help="rebuild weights/smollm2-draft (teacher data, distillation, calibration)")
    for step in BUILD_STEPS:
        bd.add_argument(f"--{step}-only", action="store_true", help=STEP_HELP.get(step, f"only the {step} phase"))
    bd.add_argument("--from-gpu", metavar="DIR", help="the files `tools/gpu_distill.py run` wrote (default: "
                    "models/draft-build-v4/gpu)")
    return ap


def build_draft(args) -> object:
    from .draft import build

    if args.instructions_only:
        return build.build_instructions()
    if args.teacher_only:
        return build.build_teacher()
    if args.sampled_teacher_only:
        return build.build_sampled_text()
    if args.vocab_only:
        from .draft.vocab import count_tokens

        return count_tokens()
    if args.lookup_only:
        from .draft.lookup_fit import fit_lookup

        return fit_lookup()
    return build.build_all(args.from_gpu)


def decode(args, prof) -> None:
    """``generate`` and ``show-tree``: one prompt with the method's tuned setting (else the paper's)."""
    import torch

    from .harness.metrics import prompt_metrics
    from .harness.prompts import load_prompts
    from .harness.tuning import NotTuned, tuned
    from .methods import generate

    if prof.models.threads:
        torch.set_num_threads(prof.models.threads)
    target, draft, tok = prof.load_pair(args.dtype)
    try:
        method = tuned(prof, args.method, args.dataset)
    except NotTuned as e:
        print(f"note: {e}; decoding with the profile's default setting", file=sys.stderr)
        method = prof.method(args.method, args.dataset)
    if args.text:
        ids = torch.tensor(tok(args.text, add_special_tokens=False)["input_ids"])
    else:
        ids = load_prompts(args.dataset, tok, 1, prof.L_max(args.dataset), "dev", prof.protocol.seed,
                           prof.protocol.data_source)[0].ids
    T = args.T or prof.protocol.T
    if args.cmd == "show-tree":
        from .reporting.treeviz import format_tree

        res = generate(target, ids, T, draft=draft, method=method, record_trees=args.iterations)
        print(f"prompt: ...{tok.decode(ids[-30:])!r}")
        for rec in res.trees:
            print(format_tree(rec, tok))
        print(f"output: {tok.decode(res.tokens)!r}")
        return
    eos = tok.eos_token_id if args.dataset == "spec_bench" else None
    res = generate(target, ids, T, draft=draft, method=method, kv_mode=prof.protocol.kv_mode, eos_token_id=eos,
                   temperature=args.temperature, generator=torch.Generator().manual_seed(args.seed))
    print(tok.decode(res.tokens))
    m = prompt_metrics(res)
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in m.items()}), file=sys.stderr)


def setup(prof) -> None:
    from .harness.prompts import load_prompts

    _, _, tok = prof.load_pair()
    for ws in prof.workloads:
        n = prof.protocol.n_questions if ws == "spec_bench" else prof.protocol.n_prompts
        ps = load_prompts(ws, tok, n, prof.L_max(ws), "test", prof.protocol.seed, prof.protocol.data_source)
        print(f"{ws}: {len(ps)} test prompts ok")
    print(f"models ok: target {prof.models.target}, draft {prof.models.draft}")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.cmd == "build-draft":
            print(build_draft(args))
            return 0
        prof = get_profile(args.profile, **{**(QUICK if getattr(args, "quick", False) else {}), **overrides(args.set)})
        if args.cmd == "bench":
            from .harness.experiments import run

            print(run(args.experiment, prof, rerun=args.rerun))
        elif args.cmd == "plan":
            from .reporting.plan import format_plan, plan

            print(format_plan(plan(prof, quick=args.quick), prof))
        elif args.cmd == "setup":
            setup(prof)
        else:
            decode(args, prof)
        return 0
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
