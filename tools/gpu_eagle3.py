"""Train the EAGLE-3 head further on a lent GPU, in one timed call (issue 56).

The CPU build (``build-draft --head eagle3``) ran its schedule on the committed teacher text, nearly all of it the
target's greedy output. What the head lacks is text, above all the target's answers sampled at T = 1 (the
overlap target), and a GPU writes that a thousand times faster than 2 cores. So, as ``tools/gpu_distill.py`` did
for v4, the GPU writes its own teacher text and trains on it, starting from the committed head:

1. for the first ``--gen-share`` of ``--seconds``: answers to every instruction that is not held out, sampled at
   T = 1 (no top-k / top-p cut), one round of seeds after another;
2. then training: the head from the committed checkpoint (``checkpoints/eagle3/v8k.pt``, fp32), the library's own
   step (``train.eagle3``: teacher pass, training-time test, soft targets) on windows drawn from the committed
   teacher text and the sampled answers, ``--seqs-per-step`` windows a step, bf16 autocast, linear warm-up then
   cosine to the time left; the held-out shards' first-token agreement before and after.

It writes to ``--out``: the head (fp32, its log and the run's record) as ``head.pt`` in pieces of at most 15 MiB
(``device_payload.split``: files come back 16 MiB each at most), ``result.json``, ``log.txt`` and the sampled text
(``sampled_text.pt``, ``gpu_distill.save_teacher``'s format, when it fits one file). Here, ``finish`` joins the
pieces and exports the head where the CPU build exports it; ``build-draft --head eagle3 --publish`` then calibrates
it and writes its card.

A session with a lent GPU, step by step (each device call sends the tree and what it carries, 64 MiB at most,
so the GGUF goes in two pieces; the three calls must follow one another while the machine is warm, or the pieces
kept in ``.keep/`` there are lost; G stands for SmolLM2-135M-Instruct.Q4_1.gguf):

    here:    python tools/gpu_eagle3.py prepare --out .xfer/eagle3
             python -m pip download --no-deps gguf==0.19.0 -d .whl
             python tools/device_payload.py split <harness.setup.weights.smollm2_gguf()>
             python tools/device_payload.py slim
    call 1,  carry [.xfer/G.1]:        mkdir -p .keep && cp .xfer/G.1/* .keep/
    call 2,  carry [.xfer/G.2]:        cp .xfer/G.2/* .keep/ && python3 tools/device_payload.py join .keep/G
    call 3,  carry [.xfer/eagle3, .whl]:  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
             && PYTHONPATH=/tmp/site python3 tools/gpu_eagle3.py run --bundle .xfer/eagle3/bundle.pt --gguf .keep/G
             --out $OUT --seconds 300     (run with timeout_s 480: a session has 15 device minutes in all, the
             start and the two calls before it included, so keep time for one more try)
    here:    python tools/device_payload.py restore
             python tools/gpu_eagle3.py finish <the folder the files came back to>
             python -m dynatree_lib build-draft --head eagle3 --publish && python -m dynatree_lib bench --experiment
             head_records

``run`` needs torch, transformers, llama.cpp's ``gguf`` package (pure Python, carried as a wheel) and this tree's
``dynatree_lib`` (it travels with the tree; its training imports torch and tqdm alone). On a CPU the same command
runs, for as long as ``--seconds`` allows (the tests run it on a tiny model).
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

TOOLS = Path(__file__).resolve().parent
sys.path[:0] = [str(TOOLS), str(TOOLS.parent)]

import device_payload  # noqa: E402
import gpu_distill  # noqa: E402
from dynatree_lib.train import eagle3 as E  # noqa: E402

PIECE_MIB = 15
HEAD_FILE = "head.pt"


# ---------------------------------------------------------------- prepare (here)

def prepare(out: Path, checkpoint: Path | None = None) -> Path:
    """The bundle: every instruction that is not held out through the chat template, the target's config, and the
    committed head (fp32 weights, their log length) with the spec it was trained under."""
    from dynatree_lib.train import instructions
    from dynatree_lib.train.head_checkpoints import committed_checkpoint
    from dynatree_lib.train.teacher import InstructionSpec, SampledAnswerSpec, load_target
    from dynatree_lib.harness.setup.data import chat_prompt
    from dynatree_lib.harness.setup.weights import smollm2_folder

    checkpoint = checkpoint or committed_checkpoint(E.HeadSpec())
    if not checkpoint.exists():
        raise FileNotFoundError(f"{checkpoint}: no committed head to start from (build-draft --head eagle3 first)")
    kept = torch.load(checkpoint)
    _, tok = load_target()
    held = heldout_instruction_ids()
    rows = [r for r in instructions.load() if r["id"] not in held]
    ispec, sspec = InstructionSpec(), SampledAnswerSpec()
    bundle = {"instr": [chat_prompt(tok, r["text"])[-ispec.max_prompt:] for r in rows],
              "instr_ids": [r["id"] for r in rows],
              "config": json.loads((smollm2_folder() / "config.json").read_text()),
              "eos": tok.eos_token_id, "pad": tok.pad_token_id, "max_new": sspec.max_new,
              "temperature": sspec.temperature, "head": kept["head"], "cpu_steps": len(kept["log"]),
              "spec": kept["spec"], "checkpoint": str(checkpoint.name)}
    out.mkdir(parents=True, exist_ok=True)
    torch.save(bundle, out / "bundle.pt")
    print(f"{len(rows)} instructions ({len(held)} held out), the head at step {len(kept['log'])} -> {out}/bundle.pt")
    return out / "bundle.pt"


def heldout_instruction_ids() -> set[str]:
    """Instructions of every held-out shard, v3's (``gpu_distill``) and the sampled answers' (``train.is_heldout``):
    the GPU samples none of them, so the held-out check stays unseen."""
    from dynatree_lib.train.teacher import SAMPLED_TEXT
    from dynatree_lib.train.train import DraftSpec, is_heldout

    held = gpu_distill.heldout_instruction_ids()
    for f in sorted(SAMPLED_TEXT.glob("sampled-*.json.gz")):
        if is_heldout(f.name, DraftSpec()):
            held |= set(E.read_gz(f)["ids"])
    return held


# ---------------------------------------------------------------- run (device)

def sampled_jobs(bundle: dict, rounds: int | None = None):
    """``gpu_distill.teacher_text``'s jobs (as ``v4_jobs``): round r of every instruction sampled at the bundle's
    temperature with seeds of its own, ids ``<instruction id>#<r>``; endless unless ``rounds``."""
    for r in itertools.count() if rounds is None else range(rounds):
        yield (f"instruction_t{bundle['temperature']:g}", bundle["instr"], [f"{i}#{r}" for i in bundle["instr_ids"]],
               bundle["max_new"], bundle["temperature"], 1_000_003 * r)


def agreement(head, target, spec, held: list[tuple[str, E.Sequence]], dev) -> dict:
    """First-token agreement with the target's greedy token on the held-out shards' loss rows, per kind of text and
    in all (``train.eagle3.heldout_rows``: the rows the head's temperature is fitted on, as the pair report counts)."""
    hits: dict[str, list[int]] = {}
    for _, agree, kind in E.heldout_rows(head, target, spec, held, device=dev):
        h = hits.setdefault(kind, [0, 0])
        h[0], h[1] = h[0] + int(agree.sum()), h[1] + agree.numel()
    out = {kind: round(a / max(n, 1), 4) for kind, (a, n) in sorted(hits.items())}
    total = [sum(h[i] for h in hits.values()) for i in (0, 1)]
    return out | {"all": round(total[0] / max(total[1], 1), 4), "rows": total[1]}


def run(args, target=None, committed: list[E.Sequence] | None = None,
        held: list[tuple[str, E.Sequence]] | None = None) -> dict:
    """The device's whole run (module docstring). In place of the GGUF's target and the committed text (tests):
    ``target``, the ``committed`` training sequences and the ``held`` (kind, sequence) pairs."""
    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = gpu_distill.run_log(out, t0)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    bundle = torch.load(args.bundle)
    target = target if target is not None else gpu_distill.build_target(Path(args.gguf), bundle["config"])
    target = target.to(dev).to(torch.bfloat16 if dev.type == "cuda" else torch.float32).requires_grad_(False)
    spec = E.HeadSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in bundle["spec"].items()})
    draws = replace(spec, seqs_per_step=args.seqs_per_step, seed=args.seed)  # the held-out windows keep spec's seed
    log(f"device {torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}; target loaded; {spec}")
    examples = gpu_distill.teacher_text(target, bundle, t0 + args.seconds * args.gen_share, args.gen_batch, log,
                                        sampled_jobs(bundle, args.rounds))
    sampled = [E.Sequence(tuple(e["tokens"]), e["start"]) for e in examples]
    if not gpu_distill.save_teacher(examples, out / "sampled_text.pt"):
        log(f"sampled_text.pt not written: {len(sampled)} answers do not fit one file that comes back")
    committed = committed if committed is not None else [] if args.no_committed_text else E.teacher_text(spec)
    held = first_of_each_kind(held if held is not None else E.shard_text(spec, heldout=True), args.heldout)
    train = committed + sampled
    if not train:
        raise ValueError("no training text: the time for sampling ended before one batch, and --no-committed-text")
    head = head_from(bundle, target, spec).to(dev)
    before = agreement(head, target, spec, held, dev)
    log(f"train on {len(committed)} committed and {len(sampled)} sampled sequences; held-out agreement {before}")
    history = train_loop(head, target, train, draws, deadline=t0 + args.seconds - args.reserve, dev=dev, lr=args.lr,
                         log=log, steps=args.steps)
    after = agreement(head, target, spec, held, dev)
    result = {"gpu_steps": len(history), "cpu_steps": bundle["cpu_steps"], "spec": asdict(draws),
              "heldout_agreement": {"before": before, "after": after}, "heldout_sequences": len(held),
              "train_sequences": {"committed": len(committed), "sampled": len(sampled)},
              "sampled_tokens": sum(len(s.tokens) - s.start for s in sampled), "args": {
                  k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool))},
              "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "torch": str(torch.__version__),
              "seconds": round(time.time() - t0, 1)}
    save_head(head, history, result, out)
    (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    log(f"held-out agreement {before} -> {after}; {len(history)} steps")
    return result


def first_of_each_kind(held: list[tuple[str, E.Sequence]], n: int | None) -> list[tuple[str, E.Sequence]]:
    """The first ``n`` (kind, sequence) pairs of each kind (all where ``n`` is None)."""
    kinds = dict.fromkeys(kind for kind, _ in held)
    return [p for k in kinds for p in [p for p in held if p[0] == k][:n]]


def head_from(bundle: dict, target, spec) -> torch.nn.Module:
    """The committed head (fp32) on ``target``'s embedding."""
    state = bundle["head"]
    vocab = torch.arange(state["d2t"].numel()) + state["d2t"]
    head = E.new_head(target, spec, vocab).float()
    head.load_state_dict(state)
    return head


def train_loop(head, target, train: list[E.Sequence], spec, deadline: float, dev, lr: float, log,
               steps: int | None = None) -> list[dict]:
    """Steps of the library's loss until ``deadline`` (or ``steps``): warm-up over 20 steps, then cosine to a tenth
    over the steps left: ``steps``, or as many as the pace of steps 10-19 (past the device's start-up) fits in the
    time left."""
    opt = torch.optim.AdamW(head.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=spec.weight_decay)
    history, total, start, tenth = [], steps, time.time(), None
    for step in range(steps if steps is not None else 10**9):
        now = time.time()
        if now > deadline:
            break
        tenth = now if step == 10 else tenth
        if step == 20 and steps is None:
            total = 20 + int((deadline - now) / ((now - tenth) / 10))
            log(f"cosine over {total} steps")
        frac = min(step / total, 1.0) if total else 0.0
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 20) * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))
        batch = E.teacher_pass(target, E.batch_of(E.draw(train, spec, step), dev), spec.feature_layers(head),
                               head.vocab())
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            loss, agree = spec.losses(head, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        history.append({"step": step, "loss": round(loss.item(), 4),
                        **{f"agree{i}": round(a, 4) for i, a in enumerate(agree)},
                        "seconds": round(time.time() - start, 1)})
        if step % 100 == 0:
            log(f"step {step} loss {loss.item():.3f} agree {[round(a, 3) for a in agree]}")
    return history


def save_head(head, history: list[dict], result: dict, out: Path) -> None:
    """The head's fp32 state, the GPU log and the record, as ``head.pt`` in pieces of at most ``PIECE_MIB``."""
    whole = out / "whole" / HEAD_FILE
    whole.parent.mkdir(exist_ok=True)
    torch.save({"head": {k: v.detach().float().cpu() for k, v in head.state_dict().items()}, "log": history,
                "result": result}, whole)
    device_payload.split(whole, out, PIECE_MIB, flat=True)
    whole.unlink()
    whole.parent.rmdir()


# ---------------------------------------------------------------- finish (here)

def finish(folder: Path, target=None, out: Path | None = None) -> Path:
    """The GPU's head (``head.pt``'s pieces in ``folder``, which may be read-only) as the committed checkpoint
    (``checkpoints/eagle3/v8k.pt``: a rebuild resumes from it) and exported to ``out`` (default: where
    ``build-draft --head eagle3`` exports), its log the committed CPU run's followed by the GPU's steps, its
    training record with the GPU run's record added (``gpu``: the model card describes it)."""
    import tempfile

    from dynatree_lib.core.drafts.heads.eagle3 import read_config
    from dynatree_lib.train.head_checkpoints import committed_checkpoint, spec_record
    from dynatree_lib.train.train import load_bf16_target, save_atomically

    with tempfile.TemporaryDirectory() as tmp:
        state = torch.load(device_payload.join(folder / HEAD_FILE, Path(tmp) / HEAD_FILE))
    spec, result = E.HeadSpec(), state["result"]
    kept = committed_checkpoint(spec)
    cpu_log = torch.load(kept)["log"]
    if len(cpu_log) != result["cpu_steps"]:
        raise ValueError(f"{kept} holds {len(cpu_log)} steps; the GPU run started from {result['cpu_steps']}: "
                         "finish with the checkpoint the bundle was prepared from")
    done = cpu_log[-1]["seconds"] if cpu_log else 0.0
    log = cpu_log + [r | {"step": len(cpu_log) + r["step"], "seconds": round(done + r["seconds"], 1), "where": "gpu"}
                     for r in state["log"]]
    result = result | {"cpu_seconds": done}
    save_atomically({"head": state["head"], "log": log, "spec": spec_record(spec), "optimizer_since": len(log),
                     "gpu": result}, kept)
    target = target if target is not None else load_bf16_target()
    dest = out or spec.folder() / "head"
    E.export(head_from({"head": state["head"]}, target, spec), dest, spec, log)
    _, cfg = read_config(dest)
    cfg[E.OUR_KEY]["training"]["gpu"] = result
    (dest / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    print(f"{dest}: held-out agreement {state['result']['heldout_agreement']}; publish with "
          "`python -m dynatree_lib build-draft --head eagle3 --publish`")
    return dest


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("run")
    r.add_argument("--bundle", required=True)
    r.add_argument("--gguf", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--seconds", type=float, default=300, help="the whole run's budget (sampling, training)")
    r.add_argument("--gen-share", type=float, default=0.4, help="share of the budget that samples teacher text")
    r.add_argument("--gen-batch", type=int, default=1024)
    r.add_argument("--seqs-per-step", type=int, default=64)
    r.add_argument("--lr", type=float, default=1e-4)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--reserve", type=float, default=40, help="seconds kept for the held-out check and saving")
    r.add_argument("--no-committed-text", action="store_true", help="train on the sampled answers alone")
    r.add_argument("--rounds", type=int, default=None, help="stop sampling after that many rounds")
    r.add_argument("--steps", type=int, default=None, help="stop training after that many steps")
    r.add_argument("--heldout", type=int, default=None, help="check on the first that many held-out sequences of "
                   "each kind")
    f = sub.add_parser("finish")
    f.add_argument("folder", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        prepare(args.out)
    elif args.cmd == "run":
        run(args)
    else:
        finish(args.folder)


if __name__ == "__main__":
    main()
