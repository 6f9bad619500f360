"""Distilling the draft on the teacher shards (``train.teacher``), resumable from its checkpoints.

Every shard becomes a list of ``Example``s: a token sequence, the first row whose next token carries a loss,
and the teacher's top-k distribution for each such row. A continuation's loss covers its continuation and the
last ``prompt_tail`` prompt tokens (human text); an instruction's covers its answer. A step draws one shard
(instruction shards with probability ``instruction_share``) and ``seqs_per_step`` of its examples, both seeded
by the step alone, so a resumed run draws what an uninterrupted one would.

The loss is taken over the head drafting uses: the ``head_vocab`` most frequent tokens of the teacher data
(``train.vocab``; the ``cpu`` profile's ``draft_vocab``, FR-Spec). The teacher's mass on tokens outside that head
joins the 'rest' bucket, so where the target's likely token is one the draft can never propose, the draft learns
to be unsure rather than confidently wrong. ``head_vocab=None`` trains the full head.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..harness.setup.paths import written_whole
from .loss import distill_loss
from .teacher import BUILD, TEACHER, load_target, teacher_files


@dataclass(frozen=True)
class DraftSpec:
    """The draft's shape and its distillation. Shards whose index ``s`` has ``s % heldout_every ==
    heldout_every - 1`` (of either kind) are never trained on: they calibrate the temperature."""

    layers: int = 6
    hidden: int = 320
    heads: int = 5
    intermediate: int = 1024
    steps: int = 3000
    seqs_per_step: int = 8
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.01
    ckpt_every: int = 100
    heldout_every: int = 16
    prompt_tail: int = 64
    max_context: int = 640        # an instruction example keeps at most this many tokens (its prompt cut from the left)
    instruction_share: float = 0.5
    seed: int = 0
    threads: int = 2
    head_vocab: int | None = 8192  # the drafting head's size (the cpu profile's draft_vocab); None: the full head
    matmul_dtype: str = "bfloat16"  # the matmuls' precision under autocast where the CPU has it (``native``); weights,
    # optimizer and loss stay fp32


@dataclass
class Example:
    """``tokens`` [L]; rows ``start .. L - 2`` predict the next token with the teacher's ``top_lp`` / ``top_ids``
    [L - 1 - start, k]."""

    tokens: torch.Tensor
    start: int
    top_lp: torch.Tensor
    top_ids: torch.Tensor


def native(dtype: torch.dtype) -> torch.dtype:
    """The dtype a training computes ``dtype``'s matmuls in on this CPU: bf16 only where the CPU has it (AVX512-BF16);
    elsewhere bf16 is emulated, several times slower than fp32, and fp32 computes the same products unrounded. Each
    log row records it (``matmuls``), so a run that moved between machines says which steps ran how."""
    from ..core.engines.kernels import cpu_has_avx512_bf16

    return torch.float32 if dtype == torch.bfloat16 and not cpu_has_avx512_bf16() else dtype


def autocast(dtype: torch.dtype):
    """Autocast to ``dtype`` for the matmuls (off for fp32)."""
    return torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32)


def teacher_here(target):
    """The teacher as this CPU runs it: a bf16 target moved to fp32 in place where bf16 is not native
    (``train.native``: the same bf16-valued weights, products unrounded), else as given."""
    return target.to(native(target.dtype))


def load_bf16_target():
    """The cpu profile's target in bf16: the heads' teacher."""
    return load_target("bfloat16")[0]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def examples(shard: dict, spec: DraftSpec) -> list[Example]:
    """A teacher shard as training examples (see module docstring)."""
    if shard.get("kind") == "instruction":
        out = []
        for prompt, answer, lp, ids in zip(shard["prompts"], shard["answers"], shard["top_lp"], shard["top_ids"]):
            prompt = prompt[-max(1, spec.max_context - len(answer)):]
            out.append(Example(torch.tensor(prompt + answer), len(prompt) - 1, lp, ids))
        return out
    s0 = max(0, shard["prompt_len"] - spec.prompt_tail)
    return [Example(x.long(), s0, lp[s0:], ids[s0:])
            for x, lp, ids in zip(shard["tokens"], shard["top_lp"], shard["top_ids"])]


def is_heldout(shard_name: str, spec: DraftSpec) -> bool:
    """Whether the teacher shard named ``shard-NNNN`` / ``instr-NNNN`` (any suffix) is held out (see ``DraftSpec``)."""
    return int(shard_name.split(".")[0].split("-")[1]) % spec.heldout_every == spec.heldout_every - 1


def shard_files(folder: Path, spec: DraftSpec, heldout: bool) -> list[Path]:
    """The teacher shards of both kinds, training or held out."""
    return [f for f in teacher_files(folder) if is_heldout(f.name, spec) == heldout]


def draft_config(target_cfg, spec: DraftSpec):
    """A plain Llama with the target's vocabulary, special tokens, rotary base and context."""
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=target_cfg.vocab_size, hidden_size=spec.hidden, intermediate_size=spec.intermediate,
                       num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.heads,
                       max_position_embeddings=target_cfg.max_position_embeddings, rms_norm_eps=target_cfg.rms_norm_eps,
                       rope_parameters=dict(target_cfg.rope_parameters), tie_word_embeddings=True,
                       bos_token_id=target_cfg.bos_token_id, eos_token_id=target_cfg.eos_token_id,
                       pad_token_id=target_cfg.pad_token_id)


def projected_embedding(target, dim: int) -> torch.Tensor:
    """The target's input embedding on its top ``dim`` right-singular directions: token geometry for free."""
    E = target.get_input_embeddings().weight.detach().float()
    _, _, Vh = torch.linalg.svd(E, full_matrices=False)
    return E @ Vh[:dim].T


class Head:
    """The token ids the draft's head scores (its ``head_vocab`` most frequent, in rank order; None: all), and
    the map from a token id to its row in that head (-1: not in it)."""

    def __init__(self, ids: torch.Tensor | None, vocab: int):
        self.ids, self.row = ids, None
        if ids is not None:
            self.row = torch.full((vocab,), -1, dtype=torch.long)
            self.row[ids] = torch.arange(ids.numel())

    @classmethod
    def of(cls, spec: DraftSpec, vocab: int, counts: Path | None = None) -> "Head":
        if spec.head_vocab is None:
            return cls(None, vocab)
        counts = counts or BUILD / "token_counts.json"
        if not counts.exists():
            raise FileNotFoundError(f"{counts} is missing: count the teacher data's tokens first "
                                    "(python -m dynatree_lib build-draft --vocab-only)")
        return cls(torch.tensor(json.loads(counts.read_text())["ids"][:spec.head_vocab]), vocab)

    def logits(self, model, hidden: torch.Tensor) -> torch.Tensor:
        w = model.lm_head.weight
        return hidden @ (w if self.ids is None else w[self.ids]).T

    def targets(self, top_lp: torch.Tensor, top_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The teacher's top-k as rows of this head: tokens outside it get log-probability -inf (row 0)."""
        if self.ids is None:
            return top_lp, top_ids
        rows = self.row[top_ids.long()]
        return top_lp.float().masked_fill(rows < 0, float("-inf")), rows.clamp(min=0)

    def token(self, rows: torch.Tensor) -> torch.Tensor:
        """Token ids of head rows."""
        return rows if self.ids is None else self.ids[rows]


def forward_rows(model, batch: list[Example], head: Head) -> torch.Tensor:
    """The draft's logits over ``head`` at every loss row of a batch (right-padded; padding is never attended to
    by rows before it), rows in batch order."""
    L = max(e.tokens.numel() for e in batch)
    x = torch.zeros(len(batch), L - 1, dtype=torch.long)
    for b, e in enumerate(batch):
        x[b, :e.tokens.numel() - 1] = e.tokens[:-1]
    hidden = model.model(input_ids=x).last_hidden_state
    rows = torch.cat([hidden[b, e.start:e.tokens.numel() - 1] for b, e in enumerate(batch)])
    return head.logits(model, rows)


def draw(pools: dict[str, list[list[Example]]], spec: DraftSpec, step: int) -> list[Example]:
    """The examples of one step (seeded by the step alone: resumable)."""
    g = torch.Generator().manual_seed(spec.seed * 1_000_003 + step)
    kind = "instruction" if pools["instruction"] and torch.rand(1, generator=g).item() < spec.instruction_share \
        else "continuation"
    shard = pools[kind][int(torch.randint(len(pools[kind]), (1,), generator=g))]
    return [shard[int(i)] for i in torch.randperm(len(shard), generator=g)[:spec.seqs_per_step]]


def new_draft(spec: DraftSpec):
    """The untrained draft: a Llama whose tied embedding starts from the target's, projected."""
    from transformers import LlamaForCausalLM

    target, _ = load_target()
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(draft_config(target.config, spec))
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(projected_embedding(target, spec.hidden))
    return model


def train_draft(spec: DraftSpec = DraftSpec(), teacher: Path = TEACHER, out: Path = BUILD / "train") -> Path:
    """Distil the draft on the training shards; resumes from the newest checkpoint in ``out``."""
    from tqdm.auto import tqdm

    torch.set_num_threads(spec.threads)
    final = out / "final.pt"
    check_folder(out, spec)
    if final.exists():
        return final
    files = shard_files(teacher, spec, heldout=False)
    if not files:
        raise FileNotFoundError(f"no teacher shards in {teacher}: run the teacher phase first")
    pools = {"continuation": [], "instruction": []}
    for f in files:
        pools["instruction" if f.name.startswith("instr") else "continuation"].append(examples(torch.load(f), spec))
    model = new_draft(spec)
    head = Head.of(spec, model.config.vocab_size, teacher.parent / "token_counts.json")
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=spec.weight_decay)
    log = resume(out, model, opt)
    model.train()
    bar = tqdm(range(len(log), spec.steps), desc="distil draft", initial=len(log), total=spec.steps)
    t0 = time.time() - (log[-1]["seconds"] if log else 0.0)
    matmuls = native(getattr(torch, spec.matmul_dtype))
    for step in bar:
        batch = draw(pools, spec, step)
        for grp in opt.param_groups:
            grp["lr"] = learning_rate(spec, step)
        with autocast(matmuls):
            logits = forward_rows(model, batch, head)
        top_lp, top_ids = torch.cat([e.top_lp for e in batch]), torch.cat([e.top_ids for e in batch])
        loss = distill_loss(logits, *head.targets(top_lp, top_ids))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        agree = (head.token(logits.argmax(-1)) == top_ids[:, 0]).float().mean().item()
        log.append({"step": step, "loss": round(loss.item(), 4), "agree": round(agree, 4),
                    "seconds": round(time.time() - t0, 1), "matmuls": dtype_name(matmuls)})
        bar.set_postfix(loss=f"{sum(r['loss'] for r in log[-20:]) / len(log[-20:]):.3f}",
                        agree=f"{sum(r['agree'] for r in log[-20:]) / len(log[-20:]):.3f}")
        if (step + 1) % spec.ckpt_every == 0:
            checkpoint(out, model, opt, log, spec)
    tokens = sum(e.tokens.numel() for pool in pools.values() for shard in pool for e in shard)
    torch.save({"model": model.state_dict(), "log": log, "spec": asdict(spec), "train_tokens": tokens,
                "shards": [f.name for f in files]}, final)
    return final


def learning_rate(spec: DraftSpec, step: int) -> float:
    """Linear warm-up, then cosine decay to a tenth."""
    return spec.lr * min(1.0,
                         (step + 1) / spec.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / spec.steps)))


def check_folder(out: Path, spec: DraftSpec) -> None:
    """Refuse a folder holding a draft trained with another spec."""
    out.mkdir(parents=True, exist_ok=True)
    done = [p for p in [out / "final.pt", *sorted(out.glob("ckpt-*.pt"))[-1:]] if p.exists()]
    if done and ((was := torch.load(done[0]).get("spec")) is None or DraftSpec(**was) != spec):
        raise ValueError(f"{out} holds a draft trained with {was}, not {spec}: choose another folder or remove it")


def resume(out: Path, model, opt) -> list[dict]:
    """Load the newest checkpoint into ``model`` and ``opt``; its log (empty if none)."""
    ckpts = sorted(out.glob("ckpt-*.pt"))
    if not ckpts:
        return []
    st = torch.load(ckpts[-1])
    model.load_state_dict(st["model"])
    opt.load_state_dict(st["opt"])
    return st["log"]


def checkpoint(out: Path, model, opt, log: list[dict], spec: DraftSpec) -> None:
    """Write ``ckpt-<steps>.pt`` atomically and keep the two newest."""
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "log": log, "spec": asdict(spec)}
    save_atomically(state, out / f"ckpt-{len(log):06d}.pt")
    for old in sorted(out.glob("ckpt-*.pt"))[:-2]:
        old.unlink()


def save_atomically(state: dict, path: Path) -> None:
    """``torch.save`` to a temporary file beside ``path``, then renamed over it: a killed run leaves no partial file."""
    with written_whole(path) as tmp:
        torch.save(state, tmp)


def trained_draft(final: Path):
    """The trained draft (fp32 LlamaForCausalLM) and its final checkpoint."""
    from transformers import AutoConfig, LlamaForCausalLM

    from ..harness.setup.weights import smollm2_folder

    st = torch.load(final)
    model = LlamaForCausalLM(draft_config(AutoConfig.from_pretrained(smollm2_folder()), DraftSpec(**st["spec"])))
    model.load_state_dict(st["model"])
    return model.eval(), st
