"""Command line: ``python -m dynatree_lib {setup,generate,show-tree,bench,plan,serve-plan,build-draft}``.

  python -m dynatree_lib setup --profile cpu                 # load the models, check the data
  python -m dynatree_lib generate --method dynatree -T 64 --text "It was a dark night"
  python -m dynatree_lib generate --chat --temperature 0.7 --top-p 0.9 --text "Name three primary colors."
  python -m dynatree_lib generate --method eagle3_tree --draft eagle3:weights/smollm2-eagle3 --chat --text "Hi"
  python -m dynatree_lib show-tree --method dynatree -T 24 --text "The capital of France is"
  python -m dynatree_lib bench --experiment main --set T=128 --set n_prompts=4
  python -m dynatree_lib bench --experiment head_records     # every record drafted with the head, again
  python -m dynatree_lib bench --queue main,sampling,heads   # one after another, detached, resumable
  python -m dynatree_lib bench --status                      # the queue's cells done and left, the time left
  python -m dynatree_lib plan --profile paper [--quick]      # what a run costs, without running it
  python -m dynatree_lib serve-plan [--json]                 # vLLM's config for our head, k per batch size
  python -m dynatree_lib build-draft [--instructions-only | --teacher-only | --vocab-only | --lookup-only]
  python -m dynatree_lib build-draft --sampled-teacher-only  # the target's answers sampled at T = 1 (resumable)
  python -m dynatree_lib build-draft --from-gpu DIR          # calibrate and publish tools/gpu_distill.py's output
  python -m dynatree_lib build-draft --head eagle3 [--draft-vocab 8192] [--seconds S | --steps N]  # resumable
  python -m dynatree_lib build-draft --head medusa [--heads 4] [--steps N]  # or --head hydra: the same pipeline
  python -m dynatree_lib build-draft --head eagle3 --publish  # (or medusa, hydra) its last export, with a card
"""
from __future__ import annotations

import argparse
import ast
import json
import math
import os
import signal
import sys

from .core.drafts.heads.kinds import HEAD_KINDS
from .harness.peers.vllm_serving import MAX_NUM_SEQS
from .harness.setup.profiles import PROFILES, get_profile, models_for
from .harness.setup.weights import COMMITTED_DRAFTS
from .harness.setup.workloads import WORKLOADS, continuations, count, eos as workload_eos
from .methods import DYNATREE, DYNATREE_COST, REGISTRY, method_names
from .reporting.console import COMPARE_ROUNDS

# ./run_all.sh --quick: a first look (two prompts per continuation dataset, one per Spec-Bench category, one replicate)
QUICK = {"n_prompts": 2, "n_questions": 1, "n_exact": 1, "replicates": 1, "tuning.n": 1, "tuning.n_questions": 1,
         "warmup": 1}
BUILD_STEPS = ("instructions", "teacher", "sampled-teacher", "vocab", "lookup")
STEP_HELP = {"sampled-teacher": "only the target's answers sampled at T = 1 (resumable; no other phase reads them)"}
DTYPES = ("float32", "bfloat16", "float16")


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


def flag_type(parse, ok, rule: str):
    """An argparse ``type=``: ``parse`` the flag's text and refuse a value outside ``rule`` (argparse then exits
    with code 2, naming the flag: "argument -T: must be an integer >= 1, got '0'"), before anything loads."""
    def convert(text: str):
        try:
            value = parse(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text!r}")
        return value
    return convert


POSITIVE_INT = flag_type(int, lambda v: v >= 1, "an integer >= 1")
TEMPERATURE = flag_type(float, lambda v: math.isfinite(v) and v >= 0, "a number >= 0 (0: greedy)")
TOP_K = flag_type(int, lambda v: v >= 0, "an integer >= 0 (0: no top-k cut)")
TOP_P = flag_type(float, lambda v: 0 < v <= 1, "a number in (0, 1]")
TEXT = flag_type(str, str.strip, "non-empty text")


def for_heads() -> str:
    return ", ".join(n for n, m in REGISTRY.items() if m.for_heads)


def add_decode_flags(g: argparse.ArgumentParser) -> None:
    """The flags ``generate`` and ``show-tree`` share: the method, the draft, the prompt, the length and the sampling
    law."""
    g.add_argument("--method", default=DYNATREE, choices=method_names(),
                   help=f"the decoding method (default {DYNATREE}); {for_heads()} were designed for a feature head and, "
                        "on a draft model, draft the same trees on purpose (the comparison of policies on one draft)")
    g.add_argument("--draft", metavar="REF", default=None,
                   help="what drafts (default: the profile's draft): a draft model's folder or hub id, or a feature "
                        "head as <kind>:<folder>. Committed: " +
                        "; ".join(f"{ref} ({what})" for ref, what in COMMITTED_DRAFTS.items()))
    g.add_argument("--dataset", default=None, choices=tuple(WORKLOADS),
                   help="the workload whose tuned setting the method takes and, without --text, whose first dev "
                        "prompt is decoded (default: spec_bench with --chat, else wikitext2)")
    g.add_argument("--text", default=None, type=TEXT, help="prompt text (default: the first dev prompt of --dataset)")
    g.add_argument("--chat", action="store_true",
                   help="send --text through the target tokenizer's chat template as one user turn (as Spec-Bench "
                        "questions are) and stop at its end-of-sequence token; needs --text (spec_bench's dataset "
                        "prompts are already chat turns)")
    g.add_argument("-T", type=POSITIVE_INT, default=None, help="new tokens (default: the profile's T)")
    g.add_argument("--dtype", default=None, choices=DTYPES, help="precision (default: the profile's)")
    g.add_argument("--temperature", type=TEMPERATURE, default=0.0, help="0: greedy; > 0: sample the target's law")
    g.add_argument("--top-k", type=TOP_K, default=0, help="sample among the k most probable tokens (0: all)")
    g.add_argument("--top-p", type=TOP_P, default=None,
                   help="sample among the smallest most-probable set whose mass reaches p (default: all)")
    g.add_argument("--seed", type=int, default=0, help="the sampling generator's seed")
    g.add_argument("--control", action="store_true",
                   help="size each tree from the acceptance seen so far and the profile's measured costs, down to a "
                        "plain AR step (our controller, extensions.control; a tree method only)")
    g.set_defaults(refuse=g.error)  # check_decode_flags' errors then read as this command's own


COMMANDS = {
    "setup": "load the profile's models and check its data (the first run converts the target once)",
    "generate": "decode one prompt with a method, then print the text, a summary line and its metrics as JSON",
    "show-tree": "decode one prompt and print the first trees the method drafted",
    "bench": "measure an experiment into results/<profile>/ (or a queue of them), or show the queue's progress",
    "plan": "print what a run of the notebooks costs (generations, tokens, hours) without running it",
    "build-draft": "rebuild weights/smollm2-draft (teacher data, distillation, calibration), or train a draft head",
    "serve-plan": "print the vLLM config that serves our EAGLE-3 head here, its draft length chosen per batch size "
                  "from this machine kind's measured costs",
}


def experiment_names() -> list[str]:
    from .harness.experiments.catalog import names

    return names()


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dynatree", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for name, what in COMMANDS.items():
        if name == "build-draft":
            continue
        sp = sub.add_parser(name, help=what, description=what)
        sp.add_argument("--profile", default="cpu", choices=sorted(PROFILES), help="the profile (default: cpu)")
        sp.add_argument("--set", action="append", metavar="FIELD=VALUE",
                        help="override a profile field, e.g. T=128 or tuning.n=2 (repeatable; checked before "
                             "anything loads)")
    for name in ("generate", "show-tree"):
        add_decode_flags(sub.choices[name])
    sub.choices["generate"].add_argument("--compare-ar", action="store_true",
                                         help=f"also decode with AR, alternating {COMPARE_ROUNDS} times after a warm-up; "
                                              "print the median speedup and whether the tokens equal AR's")
    sub.choices["show-tree"].add_argument("--iterations", type=POSITIVE_INT, default=4, help="trees to print")
    sub.choices["bench"].add_argument("--experiment", default="main", metavar="NAME",
                                      help="an experiment, a report (one document) or a list of them; one of: "
                                           + ", ".join(experiment_names()))
    sub.choices["bench"].set_defaults(refuse=sub.choices["bench"].error)
    sub.choices["bench"].add_argument("--rerun", action="store_true", help="archive the existing JSON and start over")
    sub.choices["bench"].add_argument("--allow-dirty", action="store_true",
                                      help="keep records measured on a tree with uncommitted changes (marked "
                                           "git_dirty); without it they are refused")
    sub.choices["bench"].add_argument("--allow-busy", action="store_true",
                                      help="time even while another process computes (the records say so, and "
                                           "tables mark them); without it a busy machine is refused by name")
    sub.choices["bench"].add_argument("--queue", metavar="A,B,...", help="run these experiments one after another "
                                      "as one detached job with a log (.queue/queue.log); the same command resumes "
                                      "a stopped queue, measuring only what is missing")
    sub.choices["bench"].add_argument("--status", action="store_true", help="the queue's progress: each "
                                      "experiment's cells done, in progress and left, and the time left")
    sub.choices["bench"].add_argument("--foreground", action="store_true",
                                      help="with --queue: run here instead of detached")
    sub.choices["plan"].add_argument("--quick", action="store_true", help=f"the quick subset: {QUICK}, no sweeps")
    sp = sub.choices["serve-plan"]
    sp.add_argument("--record", metavar="PATH", help="a vllm_throughput.json to plan from (default: this machine "
                                                     "kind's, committed under results/)")
    sp.add_argument("--max-num-seqs", type=POSITIVE_INT, default=MAX_NUM_SEQS,
                    help=f"the most concurrent requests to plan for (default: {MAX_NUM_SEQS}, the most measured)")
    sp.add_argument("--model", metavar="DIR", help="the target folder vLLM serves (default: the dequantized "
                                                   "SmolLM2-135M-Instruct in the user's cache)")
    sp.add_argument("--json", action="store_true", help="print the plan as JSON")
    bd = sub.add_parser("build-draft", help=COMMANDS["build-draft"], description=COMMANDS["build-draft"])
    for step in BUILD_STEPS:
        bd.add_argument(f"--{step}-only", action="store_true", help=STEP_HELP.get(step, f"only the {step} phase"))
    bd.add_argument("--from-gpu", metavar="DIR", help="the files `tools/gpu_distill.py run` wrote (default: "
                    "models/draft-build-v4/gpu)")
    bd.add_argument("--head", choices=tuple(HEAD_KINDS), help="train a draft head on the target's features instead "
                    "(train.eagle3, train.mlp_heads; checkpoints and the exported head under models/<head>/v<N>k)")
    bd.add_argument("--heads", type=POSITIVE_INT, default=None, help="levels a Medusa or Hydra head drafts (default 4)")
    bd.add_argument("--draft-vocab", type=POSITIVE_INT, default=8192, help="the head's vocabulary (--head)")
    bd.add_argument("--seconds", type=POSITIVE_INT, default=None, help="stop this run after that long (--head)")
    bd.add_argument("--steps", type=POSITIVE_INT, default=None, help="stop this run after that many steps (--head)")
    bd.add_argument("--publish", action="store_true", help="copy the last export of a head's training to "
                    "weights/smollm2-<head> with its model card, EAGLE-3's calibrated there on the held-out teacher "
                    "shards (trains nothing; then measure its records again: "
                    "bench --experiment head_records for EAGLE-3)")
    bd.set_defaults(refuse=bd.error)
    return ap


def check_decode_flags(args, prof) -> None:
    """The decode flags that only make sense together, checked before any model loads (argparse's exit 2);
    fills in ``--dataset``'s default."""
    if args.chat and args.text is None:
        args.refuse("argument --chat: needs --text (the text to send as the user's turn)")
    if args.temperature == 0:
        for flag, value in (("--top-k", args.top_k or None), ("--top-p", args.top_p)):
            if value is not None:
                args.refuse(f"argument {flag}: {value} applies only when sampling; add --temperature > 0 "
                         "(greedy decoding takes the most probable token)")
    if args.dataset is None:
        questions = [w for w in prof.workloads if not WORKLOADS[w].continuation]
        args.dataset = questions[0] if args.chat and questions else continuations()[0]
    if args.dataset not in prof.workloads:
        args.refuse(f"argument --dataset: {args.dataset!r} is not a workload of profile {prof.name!r} "
                 f"(choose from {', '.join(prof.workloads)})")
    if args.dtype == "float16" and prof.models.device == "cpu":
        args.refuse("argument --dtype: float16 is the paper profile's GPU precision; on a CPU decode in bfloat16 "
                    "(the fast path: AVX512-BF16) or float32")
    method = REGISTRY[args.method]
    if method.impl not in ("ours", "transformers"):  # generate runs our engine (and transformers' baselines) only
        why = method.unavailable()
        args.refuse(f"argument --method: {args.method} is {method.display.label}, not our engine, so generate "
                    f"cannot decode with it: {method.study.setting_from}" + (f". {why}" if why else ""))


def build_draft(args) -> object:
    from .train import build

    if args.publish:
        from .train.publish import publish

        if not args.head:
            args.refuse("argument --publish: names no head; add --head " + "|".join(HEAD_KINDS))
        return publish(args.head, args.draft_vocab)
    if args.head:
        from .train.eagle3 import train_head
        from .train.head_checkpoints import committed_checkpoint
        from .train.mlp_heads import training_spec

        values = {"draft_vocab": args.draft_vocab} | ({"heads": args.heads} if args.heads else {})
        spec = training_spec(args.head, **values)
        return train_head(spec, seconds=args.seconds, steps=args.steps, committed=committed_checkpoint(spec))
    if args.instructions_only:
        return build.build_instructions()
    if args.teacher_only:
        return build.build_teacher()
    if args.sampled_teacher_only:
        return build.build_sampled_text()
    if args.vocab_only:
        from .train.vocab import count_tokens

        return count_tokens()
    if args.lookup_only:
        from .train.lookup_fit import fit_lookup

        return fit_lookup()
    return build.build_all(args.from_gpu)


def with_draft(prof, ref: str | None):
    """``prof`` drafting with ``ref`` (``--draft``): a head scores its own vocabulary (no ``draft_vocab``)."""
    import dataclasses

    from .harness.setup.weights import check_ref, is_head

    if ref is None:
        return prof
    check_ref(ref, "--draft")
    vocab = None if is_head(ref) else prof.models.draft_vocab
    return dataclasses.replace(prof, models=dataclasses.replace(prof.models, draft=ref, draft_vocab=vocab))


def decode(args, prof) -> None:
    """``generate`` and ``show-tree``: one prompt with the method's tuned setting (else the paper's), resolved before
    any model loads; then the text, a summary line and the metrics as one JSON line (``--compare-ar``: against AR)."""
    import torch

    from .core.sampling import Sampling
    from .methods import generate

    if prof.models.threads:
        torch.set_num_threads(prof.models.threads)
    sampling = Sampling(args.temperature, args.top_k or None, args.top_p)
    method = decode_method(args, prof, sampling)
    control = decode_control(args, prof)
    target, draft, tok = prof.load_pair(args.dtype, models_for=models_for([args.method]))
    ids = prompt_ids(args, prof, tok)
    T = args.T if args.T is not None else prof.protocol.T
    eos = tok.eos_token_id if args.chat else workload_eos(args.dataset, tok)
    run = lambda cfg, trees=0: generate(target, ids, T, draft=draft, method=cfg, kv_mode=prof.protocol.kv_mode,
                                        eos_token_id=eos, record_trees=trees, sampling=sampling,
                                        generator=torch.Generator().manual_seed(args.seed),
                                        control=control if cfg is not None else None)
    if args.cmd == "show-tree":
        from .reporting.treeviz import format_decision, format_tree

        res = run(method, args.iterations)
        print(f"prompt: ...{tok.decode(ids[-30:])!r}")
        for i, rec in enumerate(res.trees):
            if res.decisions is not None:
                print(format_decision(res.decisions[i]))
            print(format_tree(rec, tok))
        print(f"output: {tok.decode(res.tokens)!r}")
        return
    from .reporting.console import compare_ar, metrics_json, summary

    res = run(method)
    print(tok.decode(res.tokens))
    print(summary(args.method, res), file=sys.stderr)
    if args.compare_ar:
        print(compare_ar(lambda: run(None), lambda: run(method), sampling.greedy), file=sys.stderr)
    print(metrics_json(res), file=sys.stderr)


def decode_control(args, prof):
    """``--control``'s controller, priced by the profile's measured costs for its draft (a head or a draft model);
    refused for a method that drafts no tree of our loop, or where the costs are not measured."""
    if not args.control:
        return None
    from .harness.experiments.tuning import NotTuned, control_config
    from .harness.setup.weights import is_head
    from .methods import controllable

    if args.method not in controllable():
        raise ValueError(f"--control sizes the trees of our speculative loop; --method {args.method} has none. "
                         f"Use one of: {', '.join(controllable())}")
    try:
        return control_config(prof, args.dtype or prof.models.dtype, is_head(prof.models.draft))
    except NotTuned as e:
        raise ValueError(f"--control prices trees by the measured costs: {e}") from None


def decode_method(args, prof, sampling):
    """``--method``'s setting on ``--dataset`` at this sampling law (``experiments.settings.decode_setting``: tuned
    for the profile's draft, on a head by notebook 14's tuning), else the profile's default."""
    from .harness.experiments.settings import decode_setting
    from .harness.experiments.tuning import NotTuned
    from .harness.setup.weights import is_head

    if REGISTRY[args.method].for_heads and not is_head(prof.models.draft):
        print(f"note: {args.method} was designed for a feature head; it drafts on the draft model "
              f"{prof.models.draft} (--draft eagle3:weights/smollm2-eagle3 drafts on the committed head)",
              file=sys.stderr)
    try:
        return decode_setting(prof, args.method, args.dataset, sampling=sampling, dtype=args.dtype)
    except NotTuned as e:
        if args.method == DYNATREE_COST:
            raise ValueError(f"--method {DYNATREE_COST}: {e}; measure them with `python -m dynatree_lib bench "
                             f"--experiment costs --profile {prof.name}`") from None
        print(f"note: {e}; decoding with the profile's default setting", file=sys.stderr)
        return prof.method(args.method, args.dataset)


def prompt_ids(args, prof, tok):
    """The prompt's token ids: ``--text`` (through the chat template with ``--chat``), else ``--dataset``'s first
    dev prompt."""
    import torch

    from .harness.setup.data import chat_prompt
    from .harness.setup.prompts import load_prompts

    if args.chat:
        if not getattr(tok, "chat_template", None):
            raise ValueError(f"--chat: the target's tokenizer ({prof.models.target}) has no chat template; "
                             "drop --chat to decode --text as plain text")
        return torch.tensor(chat_prompt(tok, args.text))
    if args.text is not None:
        return torch.tensor(tok(args.text, add_special_tokens=False)["input_ids"])
    return load_prompts(args.dataset, tok, 1, prof.L_max(args.dataset), split="dev", seed=prof.protocol.seed,
                        source=prof.protocol.data_source)[0].ids


def bench(args, prof) -> None:
    """``bench``: one experiment, a queue of them (detached unless ``--foreground``), or the queue's status."""
    from .harness.experiments import queue
    from .harness.measure.load import ALLOW_BUSY
    from .harness.measure.store import ALLOW_DIRTY
    from .harness.experiments.catalog import Sequence, get, names, run

    if args.status:
        print(queue.status(lambda q: get_profile(q.profile, **overrides(list(q.overrides)))))
        return
    os.environ.update({ALLOW_DIRTY: "1"} if args.allow_dirty else {})
    os.environ.update({ALLOW_BUSY: "1"} if args.allow_busy else {})
    todo = args.queue.split(",") if args.queue else [args.experiment]
    if unknown := [n for n in todo if n not in names()]:
        args.refuse(f"argument --{'queue' if args.queue else 'experiment'}: {', '.join(map(repr, unknown))} "
                    f"{'is' if len(unknown) == 1 else 'are'} none of {', '.join(names())}")
    if not args.queue:
        print(run(args.experiment, prof, rerun=args.rerun))
        return
    # a sequence's experiments, each shown apart
    todo = [n for name in todo for n in (get(name).parts if isinstance(get(name), Sequence) else (name,))]
    if args.rerun:
        args.refuse("argument --rerun: a queue resumes what is missing; rerun an experiment alone first")
    q = queue.Queue(tuple(todo), args.profile, tuple(args.set or ()), args.allow_dirty, args.allow_busy)
    if args.foreground:
        queue.run(q, run, prof)
    else:
        pid = queue.start(q)
        print(f"queue started as pid {pid}: {', '.join(todo)}; log {queue.log_path()}; progress: "
              f"python -m dynatree_lib bench --status")


def setup(prof) -> None:
    from .harness.setup.prompts import load_prompts

    _, _, tok = prof.load_pair()
    for ws in prof.workloads:
        n = count(ws, prof.protocol.n_prompts, prof.protocol.n_questions)
        ps = load_prompts(ws, tok, n, prof.L_max(ws), split="test", seed=prof.protocol.seed,
                          source=prof.protocol.data_source)
        print(f"{ws}: {len(ps)} test prompts ok")
    print(f"models ok: target {prof.models.target}, draft {prof.models.draft}")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.cmd in ("generate", "show-tree"):
        signal.signal(signal.SIGINT, stop_now)
    try:
        if args.cmd == "build-draft":
            print(build_draft(args))
            return 0
        from .harness.experiments.catalog import check_settings

        prof = check_settings(get_profile(args.profile, **{**(QUICK if getattr(args, "quick", False) else {}),
                                                           **overrides(args.set)}))
        check_models(prof)
        if args.cmd == "bench":
            bench(args, prof)
        elif args.cmd == "plan":
            from .reporting.plan import format_plan, plan

            print(format_plan(plan(prof, quick=args.quick), prof))
        elif args.cmd == "setup":
            setup(prof)
        elif args.cmd == "serve-plan":
            from .reporting.serve_plan import format_serve_plan, serve_plan

            plan = serve_plan(args.record, args.max_num_seqs, args.model, profile=prof.name)
            print(json.dumps(plan, indent=1) if args.json else format_serve_plan(plan))
        else:
            prof = with_draft(prof, args.draft)
            check_decode_flags(args, prof)
            decode(args, prof)
        return 0
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


def stop_now(signum, frame) -> None:
    """Ctrl-C during a decode: end at once with one line (torch's compiler can swallow a KeyboardInterrupt raised in
    its callbacks; a decode writes nothing that an abrupt end could leave half-written)."""
    print("\ninterrupted", file=sys.stderr, flush=True)
    os._exit(130)


def check_models(prof) -> None:
    """The profile's target and draft references, checked before anything loads (``weights.check_ref``)."""
    from .harness.setup.weights import check_ref

    check_ref(prof.models.target, "models.target")
    check_ref(prof.models.draft, "models.draft")


if __name__ == "__main__":
    sys.exit(main())
