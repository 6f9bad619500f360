"""Command line: ``python -m dynatree_lib {setup,generate,show-tree,bench,plan,build-draft}``.

  python -m dynatree_lib setup --profile cpu                 # load the models, check the data
  python -m dynatree_lib generate --method dynatree -T 64 --text "It was a dark night"
  python -m dynatree_lib show-tree --method dynatree -T 24 --text "The capital of France is"
  python -m dynatree_lib bench --experiment main --set T=128 --set n_prompts=4
  python -m dynatree_lib plan --profile paper [--quick]      # what a run costs, without running it
  python -m dynatree_lib build-draft [--vocab-only | --lookup-only]  # rebuild the cpu draft (hours on 2 cores)
"""
from __future__ import annotations

import argparse
import ast
import json
import sys

from .methods import METHOD_NAMES
from .profiles import get_profile

QUICK = {"n_prompts": 2, "n_exact": 1, "tuning_n": 1, "warmup": 1}  # ./run_all.sh --quick: a first look


def _overrides(items: list[str]) -> dict:
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


def _load(prof, dtype=None):
    import torch

    from .models import load_pair

    if prof.threads:
        torch.set_num_threads(prof.threads)
    return load_pair(prof.target, prof.draft, prof.device, dtype or prof.dtype, prof.context_override, prof.engine,
                     prof.max_len, prof.draft_vocab, prof.draft_lookup)


def _prompt(args, prof, tok):
    import torch

    from .data import load_prompts

    if args.text:
        return torch.tensor(tok(args.text, add_special_tokens=False)["input_ids"])
    return load_prompts(args.dataset, tok, 1, prof.L_max[args.dataset], prof.seed, prof.data_source)[0].ids


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dynatree", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("setup", "generate", "show-tree", "bench", "plan"):
        sp = sub.add_parser(name)
        sp.add_argument("--profile", default="cpu")
        sp.add_argument("--set", action="append", metavar="FIELD=VALUE", help="override a profile field")
    for name in ("generate", "show-tree"):
        g = sub.choices[name]
        g.add_argument("--method", default="dynatree", choices=METHOD_NAMES)
        g.add_argument("--dataset", default="wikitext2")
        g.add_argument("--text", default=None, help="prompt text (default: first prompt of --dataset)")
        g.add_argument("-T", type=int, default=None)
        g.add_argument("--dtype", default=None, help="float32 or bfloat16 (default: the profile's)")
    sub.choices["show-tree"].add_argument("--iterations", type=int, default=4, help="trees to print")
    b = sub.choices["bench"]
    b.add_argument("--experiment", default="main")
    b.add_argument("--rerun", action="store_true", help="archive the existing JSON and start over")
    sub.choices["plan"].add_argument("--quick", action="store_true", help=f"the quick subset: {QUICK}, no sweeps")
    bd = sub.add_parser("build-draft", help="rebuild weights/smollm2-draft (teacher data, distillation, calibration)")
    bd.add_argument("--vocab-only", action="store_true", help="only the token ranking of the draft head's subset")
    bd.add_argument("--lookup-only", action="store_true", help="only the context lookup's weights (minutes)")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "build-draft":
            from .distill import build_all, count_tokens, fit_lookup

            print(count_tokens() if args.vocab_only else fit_lookup() if args.lookup_only else build_all())
            return 0
        prof = get_profile(args.profile, **{**(QUICK if getattr(args, "quick", False) else {}), **_overrides(args.set)})
        if args.cmd == "bench":
            from .experiments import run

            print(run(args.experiment, prof, rerun=args.rerun))
            return 0
        if args.cmd == "plan":
            from .plan import format_plan, plan

            print(format_plan(plan(prof, quick=args.quick), prof))
            return 0
        target, draft, tok = _load(prof, getattr(args, "dtype", None))
        if args.cmd == "setup":
            from .data import load_prompts

            for ds in prof.datasets:
                ps = load_prompts(ds, tok, prof.n_prompts, prof.L_max[ds], prof.seed, prof.data_source)
                print(f"{ds}: {len(ps)} prompts of {prof.L_max[ds]} tokens ok")
            print(f"models ok: target {prof.target}, draft {prof.draft}")
            return 0
        from .experiments import tuned
        from .methods import generate
        from .metrics import prompt_metrics

        try:  # the tuned setting where tuning was logged, else the paper's
            method = tuned(prof, args.method, args.dataset)
        except FileNotFoundError:
            method = prof.method(args.method, args.dataset)
        ids = _prompt(args, prof, tok)
        T = args.T or prof.T
        if args.cmd == "show-tree":
            from .treeviz import format_tree

            res = generate(target, ids, T, draft=draft, method=method, record_trees=args.iterations)
            print(f"prompt: ...{tok.decode(ids[-30:])!r}")
            for rec in res.trees:
                print(format_tree(rec, tok))
            print(f"output: {tok.decode(res.tokens)!r}")
            return 0
        res = generate(target, ids, T, draft=draft, method=method, kv_mode=prof.kv_mode)
        print(tok.decode(res.tokens))
        m = prompt_metrics(res)
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in m.items()}), file=sys.stderr)
        return 0
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
