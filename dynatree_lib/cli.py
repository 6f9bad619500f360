"""Command line: ``python -m dynatree_lib {setup,generate,bench}``.

  python -m dynatree_lib setup --profile cpu                # build/load models, check data
  python -m dynatree_lib generate --profile cpu --method dynatree -T 64 --text "It was a dark night"
  python -m dynatree_lib bench --profile cpu --experiment main --set T=128 --set n_prompts=4
"""
from __future__ import annotations

import argparse
import ast
import json
import sys

from .profiles import EXTRA_METHODS, METHODS, get_profile


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dynatree", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("setup", "generate", "bench"):
        sp = sub.add_parser(name)
        sp.add_argument("--profile", default="cpu")
        sp.add_argument("--set", action="append", metavar="FIELD=VALUE", help="override a profile field")
    g = sub.choices["generate"]
    g.add_argument("--method", default="dynatree", choices=METHODS + EXTRA_METHODS)
    g.add_argument("--dataset", default="wikitext2")
    g.add_argument("--text", default=None, help="prompt text (default: first prompt of --dataset)")
    g.add_argument("-T", type=int, default=None)
    b = sub.choices["bench"]
    b.add_argument("--experiment", default="main")
    b.add_argument("--rerun", action="store_true", help="archive the existing JSON and start over")
    args = ap.parse_args(argv)
    try:
        prof = get_profile(args.profile, **_overrides(args.set))
        if args.cmd == "bench":
            from .experiments import run

            print(run(args.experiment, prof, rerun=args.rerun))
            return 0
        import torch

        from .data import load_prompts
        from .decoders import generate
        from .metrics import prompt_metrics
        from .models import load_pair

        if prof.threads:
            torch.set_num_threads(prof.threads)
        target, draft, tok = load_pair(prof.target, prof.draft, prof.device, prof.dtype, prof.context_override)
        if args.cmd == "setup":
            for ds in prof.datasets:
                ps = load_prompts(ds, tok, prof.n_prompts, prof.L_max[ds], prof.seed, prof.data_source)
                print(f"{ds}: {len(ps)} prompts of {prof.L_max[ds]} tokens ok")
            print(f"models ok: target {prof.target}, draft {prof.draft}")
            return 0
        if args.text:
            ids = torch.tensor(tok(args.text, add_special_tokens=False)["input_ids"])
        else:
            ids = load_prompts(args.dataset, tok, 1, prof.L_max[args.dataset], prof.seed, prof.data_source)[0].ids
        res = generate(target, ids.to(prof.device), args.T or prof.T, draft=draft,
                       method=prof.method(args.method, args.dataset), kv_mode=prof.kv_mode)
        print(tok.decode(res.tokens))
        m = prompt_metrics(res)
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in m.items()}), file=sys.stderr)
        return 0
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
