"""Training the EAGLE-3 head (``core.drafts.heads.eagle3``) on SmolLM2's own features: ``build-draft --head eagle3``.

The EAGLE-3 way (SafeAILab/EAGLE ``eagle/traineagle3``):

- features on the fly: each step runs the target teacher-forced over its sequences (bf16, as it is timed; its
  bf16 weights in fp32 arithmetic on a CPU without native bf16: ``train.teacher_here``) and keeps the hidden states
  entering the head's layers and the logits, from that one forward;
- soft targets: at each row, the target's softmax restricted to the draft vocabulary; the loss is their cross
  entropy with the head's log-softmax, on rows whose predicted token is text the teacher wrote (answers,
  continuations) and whose target argmax the draft vocabulary holds;
- training-time test: ``ttt_steps`` unrolled steps; step i feeds, at every row, the head's own output of step
  i - 1 in place of the target's features, with the true token i positions further on, attending to the committed
  pairs (causal) and to its own earlier steps at that row, as a tree node attends to its ancestors; step i's loss
  weighs ``step_decay ** i``.

Data: the target's own text, committed: v4's ``data/draft_teacher_v4`` (greedy answers and continuations), v3's
shard texts (``data/draft_teacher``) and the sampled answers (``data/draft_teacher_sampled``) where committed. Shards
``train.is_heldout`` holds out are never trained on (the held-out check). The draft vocabulary is the ``draft_vocab``
most frequent tokens the loss sees (ties by id).

Initialisation (``init``): ``last-layer`` (default) starts the decoder layer as the target's last layer reading the
fused input's hidden half (q/k/v of the token-embedding half at zero), ``fc`` passing the high feature through,
the final norm and the head as the target's (its tied embedding's rows over the draft vocabulary); ``tied`` keeps
only the norm and head from the target. Everything is seeded by ``seed`` and the step; checkpoints every
``ckpt_every`` steps under ``models/`` (git-ignored) and at the end of a run's budget; a rerun resumes from the
newest. ``build-draft --head`` also keeps a committed copy (``head_checkpoints.committed_checkpoint``: the fp32
weights and the log, no optimizer state, small enough for git); where it is further on than the ``models/``
checkpoints (a new machine has none), a rerun resumes from it with a fresh optimizer, warmed up again over
``warmup`` steps. The head folder (the speculators format vLLM serves; its matmul weights on int8 rows) is written
at the end of every run. Its first-token agreement, overlap and ECE beside v4's, teacher-forced as trained:
``harness.experiments.pair.run_pair(get_profile("cpu", draft="eagle3:<folder>"), name="pair_eagle3")``.

The pipeline (text, draft vocabulary, seeded windows, the teacher pass, the loop, checkpoints, resuming) serves any
head on the target's features: a ``HeadRecipe`` (a spec of its training) says how a head of its kind starts, which
target layers it reads, its losses and its export; ``HeadSpec`` is EAGLE-3's, ``train.mlp_heads`` declares Medusa's
and Hydra's. On a lent GPU, ``tools/gpu_eagle3.py`` continues the committed head on answers sampled there.
"""
from __future__ import annotations

import gzip
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..core.engines import int8_rows
from ..core.drafts.heads.base import OUR_KEY
from ..core.drafts.heads.eagle3 import (Eagle3Config, Eagle3Head, fused_features, load_head, read_config, save_head,
                                        ttt_outputs)
from ..harness.setup.paths import REPO, written_whole
from .calibrate import fit_on_rows
from .teacher import SAMPLED_TEXT, TEXT
from .head_checkpoints import check_folder, checkpoint, resume
from .train import DraftSpec, autocast, dtype_name, is_heldout, load_bf16_target, native, teacher_here

BUILD = REPO / "models" / "eagle3"  # git-ignored: checkpoints and the exported head, one folder per spec
V4_TEXT = REPO / "data" / "draft_teacher_v4" / "teacher_text.json.gz"
VERIFIER = "HuggingFaceTB/SmolLM2-135M-Instruct"


class HeadRecipe:
    """What a kind of head adds to the shared pipeline (module docstring). A recipe is a frozen dataclass of the
    head's training, whose fields a checkpoint folder must match (``check_folder``); each kind writes every method
    but ``calibrate`` (by default nothing).
    ``kind``: its name in ``core.drafts.heads.kinds.HEAD_KINDS``."""

    kind = "head"

    def folder(self) -> Path:
        """Where checkpoints and the exported head go by default."""
        raise NotImplementedError

    def new_head(self, target, vocab: torch.Tensor) -> torch.nn.Module:
        """An fp32 head on ``target``'s features and embedding over the draft vocabulary ``vocab``, seeded."""
        raise NotImplementedError

    def feature_layers(self, head) -> tuple[int, ...]:
        """The target layers (``core.engines.runner``'s ids) whose hidden states the teacher pass keeps for ``head``."""
        raise NotImplementedError

    def losses(self, head, batch: "Batch") -> tuple[torch.Tensor, list[float]]:
        """The loss of ``batch`` and the agreement of each unrolled step or head with the target's argmax."""
        raise NotImplementedError

    def export(self, head, folder: Path, log: list[dict]) -> Path:
        """Write the trained head (bf16, its format, its training record) to ``folder``."""
        raise NotImplementedError

    def calibrate(self, folder: Path) -> None:
        """Fit what a published head of this kind needs beyond its export, in ``folder`` (default: nothing)."""

    def command(self) -> str:
        """The command that rebuilds or resumes this head (fields beyond the draft vocabulary add options)."""
        return f"python -m dynatree_lib build-draft --head {self.kind} --draft-vocab {self.draft_vocab}"


@dataclass(frozen=True)
class HeadSpec(HeadRecipe):
    """The head's training. ``steps``: the schedule's length (a run stops earlier at its ``--seconds`` or
    ``--steps`` budget and a rerun resumes). ``seq_len``: tokens per sequence window; ``seqs_per_step`` windows a
    step. ``prompt_tail``: a continuation's loss covers its last that many prompt tokens too (human text)."""

    kind = "eagle3"  # a class attribute, not a field: the checkpoints' spec is unchanged
    draft_vocab: int = 8192
    aux_layers: tuple[int, ...] | None = None  # None: EAGLE-3's (2, N // 2, N - 3)
    ttt_steps: int = 3
    step_decay: float = 0.8
    steps: int = 6000
    seqs_per_step: int = 4
    seq_len: int = 512
    lr: float = 3e-4
    warmup: int = 50
    weight_decay: float = 0.0
    ckpt_every: int = 25
    prompt_tail: int = 64
    init: str = "last-layer"
    sampled: bool = True  # train on the sampled answers too, where committed
    seed: int = 0
    threads: int = 2
    matmul_dtype: str = "bfloat16"  # the matmuls under autocast where the CPU has it (``train.native``); rest fp32

    def __post_init__(self):
        if self.init not in ("last-layer", "tied"):
            raise ValueError(f"HeadSpec.init must be 'last-layer' or 'tied', got {self.init!r}")
        if self.draft_vocab < 1 or self.ttt_steps < 1:
            raise ValueError(f"HeadSpec.draft_vocab and ttt_steps must be >= 1, got {self.draft_vocab}, "
                             f"{self.ttt_steps}")

    def folder(self) -> Path:
        return BUILD / f"v{self.draft_vocab // 1024}k"

    def new_head(self, target, vocab: torch.Tensor) -> Eagle3Head:
        return new_head(target, self, vocab)

    def feature_layers(self, head: Eagle3Head) -> tuple[int, ...]:
        return head.cfg.aux_layers

    def losses(self, head: Eagle3Head, batch: "Batch") -> tuple[torch.Tensor, list[float]]:
        return ttt_losses(head, batch, self)

    def export(self, head: Eagle3Head, folder: Path, log: list[dict]) -> Path:
        return export(head, folder, self, log)

    def calibrate(self, folder: Path) -> None:
        calibrate_export(folder, self)


# ---- data --------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sequence:
    """A token sequence whose tokens after index ``start`` carry a loss (the teacher wrote them)."""

    tokens: tuple[int, ...]
    start: int


def read_gz(path: Path) -> dict:
    try:
        return json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a teacher text file (gzip'd JSON): {e}") from e


def shard_sequences(row: dict, prompt_tail: int) -> list[Sequence]:
    """The sequences of one v3 or sampled shard text: answers after their prompt, continuations after the last
    ``prompt_tail`` prompt tokens."""
    if row["kind"] in ("instruction", "sampled"):
        return [Sequence(tuple(p + a), len(p) - 1) for p, a in zip(row["prompts"], row["answers"])]
    start = max(0, row["prompt_len"] - 1 - prompt_tail)
    return [Sequence(tuple(t), start) for t in row["tokens"]]


def teacher_text(spec: HeadSpec, heldout: bool = False) -> list[Sequence]:
    """The training sequences (or the held-out ones: v3's and the sampled shards' held-out groups)."""
    out = []
    if not heldout:
        v4 = read_gz(V4_TEXT)
        out += [Sequence(tuple(t), s) for t, s in zip(v4["tokens"], v4["starts"])]
    return out + [s for _, s in shard_text(spec, heldout)]


def shard_text(spec: HeadSpec, heldout: bool) -> list[tuple[str, Sequence]]:
    """The sequences of v3's and the sampled shard texts that ``train.is_heldout`` holds out (or keeps), each with
    its shard's kind (``instruction``, ``continuation``, ``sampled``)."""
    marker = DraftSpec()
    folders = [TEXT] + ([SAMPLED_TEXT] if spec.sampled and SAMPLED_TEXT.is_dir() else [])
    out = []
    for f in sorted(p for folder in folders for p in folder.glob("*.json.gz")):
        if is_heldout(f.name, marker) == heldout:
            row = read_gz(f)
            out += [(row["kind"], s) for s in shard_sequences(row, spec.prompt_tail)]
    return out


def frequent_tokens(seqs: list[Sequence], n: int, vocab: int) -> torch.Tensor:
    """The ``n`` most frequent tokens that the loss predicts (ties by id)."""
    counts = torch.zeros(vocab, dtype=torch.long)
    for s in seqs:
        counts += torch.bincount(torch.tensor(s.tokens[s.start + 1:], dtype=torch.long), minlength=vocab)
    order = sorted(range(vocab), key=lambda t: (-int(counts[t]), t))
    return torch.tensor(order[:n])


def window(s: Sequence, length: int, g: torch.Generator) -> Sequence:
    """At most ``length`` tokens of ``s``: the whole of it, else a seeded window that keeps loss tokens."""
    n = len(s.tokens)
    if n <= length:
        return s
    lo = max(0, min(s.start + 1, n - length) - length // 2)
    a = lo + int(torch.randint(n - length - lo + 1, (1,), generator=g))
    return Sequence(s.tokens[a:a + length], max(0, s.start - a))


def draw(seqs: list[Sequence], spec: HeadSpec, step: int) -> list[Sequence]:
    """A step's windows, seeded by the step alone (a resumed run draws what an uninterrupted one would)."""
    g = torch.Generator().manual_seed(spec.seed * 1_000_003 + step)
    picks = torch.randint(len(seqs), (spec.seqs_per_step,), generator=g).tolist()
    return [window(seqs[i], spec.seq_len, g) for i in picks]


# ---- one step ------------------------------------------------------------------------------------------------------

@dataclass
class Batch:
    """Right-padded windows: ``tokens`` [B, T]; ``valid`` [B, T] marks real tokens and ``loss`` [B, T] the tokens
    whose prediction carries a loss; from the target: ``features`` [B, T, 3h] (entering the head's layers),
    ``soft`` [B, T, V'] (its logits over the draft vocabulary at each position) and ``in_vocab`` [B, T] (its argmax
    is a draft token)."""

    tokens: torch.Tensor
    valid: torch.Tensor
    loss: torch.Tensor
    features: torch.Tensor | None = None
    soft: torch.Tensor | None = None
    in_vocab: torch.Tensor | None = None


def batch_of(seqs: list[Sequence], device=None) -> Batch:
    """``seqs`` right-padded into one batch on ``device`` (default: the CPU)."""
    T = max(len(s.tokens) for s in seqs)
    tokens = torch.zeros(len(seqs), T, dtype=torch.long)
    valid = torch.zeros(len(seqs), T, dtype=torch.bool)
    loss = torch.zeros_like(valid)
    for b, s in enumerate(seqs):
        tokens[b, :len(s.tokens)] = torch.tensor(s.tokens)
        valid[b, :len(s.tokens)] = True
        loss[b, s.start + 1:len(s.tokens)] = True
    return Batch(tokens.to(device), valid.to(device), loss.to(device))


@torch.no_grad()
def teacher_pass(target, batch: Batch, layers: tuple[int, ...], vocab: torch.Tensor, rows: int = 1024) -> Batch:
    """The target's features and draft-vocabulary logits for ``batch``, from one teacher-forced forward (the
    full-vocabulary argmax taken in chunks of ``rows``, never the whole [B, T, V] at once)."""
    out = target.model(input_ids=batch.tokens, output_hidden_states=True)
    batch.features = fused_features(out.hidden_states, layers)
    last = out.last_hidden_state.flatten(0, 1)
    w, vocab = target.lm_head.weight, vocab.to(target.lm_head.weight.device)
    batch.soft = (last @ w[vocab].T).float().view(*batch.tokens.shape, -1)
    in_vocab = torch.zeros(w.shape[0], dtype=torch.bool, device=w.device)
    in_vocab[vocab] = True
    top = torch.cat([(last[r:r + rows] @ w.T).argmax(-1) for r in range(0, last.shape[0], rows)])
    batch.in_vocab = in_vocab[top].view(batch.tokens.shape)
    return batch


def ttt_losses(head: Eagle3Head, batch: Batch, spec: HeadSpec) -> tuple[torch.Tensor, list[float]]:
    """The weighted loss of ``spec.ttt_steps`` unrolled steps and each step's agreement (the head's argmax is the
    target's) on its loss rows."""
    total, agree = 0.0, []
    for i, out in enumerate(ttt_outputs(head, batch.features, batch.tokens, spec.ttt_steps)):
        loss, acc = step_loss(head, out[:, :-1], batch, i)
        total = total + spec.step_decay ** i * loss
        agree.append(acc)
    return total, agree


def step_loss(head: Eagle3Head, out: torch.Tensor, batch: Batch, i: int) -> tuple[torch.Tensor, float]:
    """``soft_loss`` of step ``i``'s rows ``out`` [B, r, h] (the layer's outputs)."""
    return soft_loss(head.logits(out), batch, i)


def step_rows(batch: Batch, i: int, r: int) -> tuple[torch.Tensor, slice]:
    """For ``r`` rows of unrolled step ``i`` (row t predicts token t + 2 + i): which rows predict a token that carries
    a loss [B, r], and the positions of the target's logits they are scored against (t + 1 + i)."""
    pred = slice(2 + i, 2 + i + r)
    return batch.loss[:, pred] & batch.valid[:, pred], slice(1 + i, 1 + i + r)


def soft_loss(logits: torch.Tensor, batch: Batch, i: int) -> tuple[torch.Tensor, float]:
    """Soft cross entropy of rows ``logits`` [B, r, V'] (row t predicts token t + 2 + i from the target's logits at
    position t + 1 + i: EAGLE-3's unrolled step i, Medusa's and Hydra's head i) on rows whose predicted token
    carries a loss and whose target argmax is a draft token; and the head's agreement with the target's argmax
    there."""
    rows, pos = step_rows(batch, i, logits.shape[1])
    mask = rows & batch.in_vocab[:, pos]
    logq = F.log_softmax(logits.float(), -1)
    p = F.softmax(batch.soft[:, pos], -1)
    n = mask.sum().clamp(min=1)
    loss = -((p * logq).sum(-1) * mask).sum() / n
    agree = ((logq.argmax(-1) == p.argmax(-1)) & mask).sum().item() / n.item()
    return loss, agree


# ---- the head, its initialisation and the loop ----------------------------------------------------------------------

def new_head(target, spec: HeadSpec, vocab: torch.Tensor) -> Eagle3Head:
    """An fp32 head on ``target``'s embedding, seeded, initialised as ``spec.init`` says (module docstring)."""
    cfg = Eagle3Config.for_target(target.config, spec.draft_vocab, spec.aux_layers)
    torch.manual_seed(spec.seed)
    head = Eagle3Head(cfg, target.get_input_embeddings().weight)
    with torch.no_grad():
        for m in head.modules():
            if isinstance(m, torch.nn.Linear):
                torch.nn.init.normal_(m.weight, std=0.02)
        head.set_vocab(vocab)
        head.lm_head.weight.copy_(target.lm_head.weight[head.vocab()].float())
        head.norm.weight.copy_(target.model.norm.weight.float())
        if spec.init == "last-layer":
            copy_last_layer(head, target)
    return head


def copy_last_layer(head: Eagle3Head, target) -> None:
    """The decoder layer as the target's last, on the hidden half; ``fc`` passing the high feature through."""
    src, L, h = target.model.layers[-1], head.layer, head.cfg.hidden
    for name in ("q_proj", "k_proj", "v_proj"):
        w = getattr(L.self_attn, name).weight
        w.zero_()
        w[:, h:] = getattr(src.self_attn, name).weight.float()
    L.self_attn.o_proj.weight.copy_(src.self_attn.o_proj.weight.float())
    for name in ("gate_proj", "up_proj", "down_proj"):
        getattr(L.mlp, name).weight.copy_(getattr(src.mlp, name).weight.float())
    L.hidden_norm.weight.copy_(src.input_layernorm.weight.float())
    L.post_attention_layernorm.weight.copy_(src.post_attention_layernorm.weight.float())
    head.fc.weight.zero_()
    head.fc.weight[:, -h:] = torch.eye(h)


def learning_rate(spec: HeadSpec, step: int, since: int = 0) -> float:
    """Linear warm-up over ``spec.warmup`` steps from ``since`` (the step its optimizer started), then cosine decay
    to a tenth over ``spec.steps``."""
    warm = min(1.0, (step - since + 1) / spec.warmup)
    return spec.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / spec.steps)))


def train_head(spec: HeadRecipe = HeadSpec(), target=None, seconds: float | None = None, steps: int | None = None,
               out: Path | None = None, *, seqs: list[Sequence] | None = None, committed: Path | None = None) -> Path:
    """Train (or resume) the head of ``spec``'s kind in ``out`` (default ``spec.folder()``) for at most ``seconds``
    / ``steps`` more steps of this run, then checkpoint and export it to ``out / "head"``; returns that folder.
    ``target``: the transformers target (default: the cpu profile's, bf16); ``seqs``: the training text (default
    ``teacher_text``); ``committed``: a file kept beside every checkpoint with the weights and log alone, resumed
    from where it is further on than ``out``'s checkpoints (``committed_checkpoint``)."""
    from tqdm.auto import tqdm

    torch.set_num_threads(spec.threads)
    out = Path(out or spec.folder())
    check_folder(out, spec, committed)
    target = teacher_here(target if target is not None else load_bf16_target())
    seqs = seqs if seqs is not None else teacher_text(spec)
    vocab = frequent_tokens(seqs, spec.draft_vocab, target.config.vocab_size)
    head = spec.new_head(target, vocab)
    opt = torch.optim.AdamW(head.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=spec.weight_decay)
    log, since = resume(out, head, opt, committed)
    end = min(spec.steps, len(log) + (steps if steps is not None else spec.steps))
    bar = tqdm(range(len(log), end), desc=f"train {spec.kind} head", initial=len(log), total=spec.steps)
    t0, clock = time.time(), time.time() - (log[-1]["seconds"] if log else 0.0)
    for step in bar:
        batch = draw(seqs, spec, step)
        log.append(train_step(head, opt, target, batch, spec=spec, step=step, clock=clock, since=since))
        bar.set_postfix(loss=f"{mean(log, 'loss'):.3f}", agree=f"{mean(log, 'agree0'):.3f}")
        if (step + 1) % spec.ckpt_every == 0:
            checkpoint(out, head, opt, log, spec=spec, since=since, committed=committed)
        if seconds is not None and time.time() - t0 >= seconds:
            break
    checkpoint(out, head, opt, log, spec=spec, since=since, committed=committed)
    return spec.export(head, out / "head", log)


def train_step(head, opt, target, seqs: list[Sequence], spec: HeadRecipe, *, step: int, clock: float,
               since: int = 0) -> dict:
    batch = teacher_pass(target, batch_of(seqs), spec.feature_layers(head), head.vocab())
    for grp in opt.param_groups:
        grp["lr"] = learning_rate(spec, step, since)
    matmuls = native(getattr(torch, spec.matmul_dtype))
    with autocast(matmuls):
        loss, agree = spec.losses(head, batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return {"step": step, "loss": round(loss.item(), 4), **{f"agree{i}": round(a, 4) for i, a in enumerate(agree)},
            "seconds": round(time.time() - clock, 1), "matmuls": dtype_name(matmuls),
            "teacher": dtype_name(target.dtype)}


def mean(log: list[dict], key: str, n: int = 20) -> float:
    rows = [r[key] for r in log[-n:] if key in r]
    return sum(rows) / max(1, len(rows))


# ---- calibration ---------------------------------------------------------------------------------------------------

@torch.no_grad()
def heldout_rows(head: Eagle3Head, target, spec: HeadSpec, held: list[tuple[str, Sequence]], per_batch: int = 4,
                 *, device=None):
    """Per batch of the held-out sequences ``held`` (``shard_text``'s (kind, sequence) pairs; one seeded window of at
    most ``spec.seq_len`` tokens each, one kind a batch): the logits of the first drafted token at every loss row,
    teacher-forced as training's step 0, whether its argmax is the target's greedy token, and the kind of text
    (``calibrate.fit_on_rows``' rows). ``device``: where the batches go (the target's and head's device)."""
    g = torch.Generator().manual_seed(spec.seed)
    by_kind: dict[str, list[Sequence]] = {}
    for kind, s in held:
        by_kind.setdefault(kind, []).append(window(s, spec.seq_len, g))
    for kind, seqs in sorted(by_kind.items()):
        for b in range(0, len(seqs), per_batch):
            batch = teacher_pass(target, batch_of(seqs[b:b + per_batch], device), spec.feature_layers(head),
                                 head.vocab())
            out = ttt_outputs(head, batch.features.to(head.fc.weight.dtype), batch.tokens, 1)[0][:, :-1]
            logits = head.logits(out).float()
            rows, pos = step_rows(batch, 0, logits.shape[1])
            agree = batch.in_vocab[:, pos] & (logits.argmax(-1) == batch.soft[:, pos].argmax(-1))
            yield logits[rows], agree[rows], kind


def calibrate_export(folder: Path, spec: HeadSpec, target=None) -> dict:
    """Fit one temperature for the head in ``folder`` on the held-out text (``heldout_rows``: never a dev or test
    prompt; ``calibrate.fit_on_rows``, as v4's is fitted) and bake it into the final norm's weight: the logits are
    ``lm_head(norm(out))``, so dividing that weight by T divides them by T (up to the bf16 rounding of the weight),
    and the folder stays a plain speculators Eagle3 head. Its ``config.json`` records the fit
    (``dynatree_lib.calibration``); a folder already calibrated is refused. ``target``: the transformers target
    (default: the cpu profile's, bf16)."""
    cfg_path = Path(folder) / "config.json"
    _, cfg = read_config(folder)
    ours = cfg.get(OUR_KEY)
    if ours is None:
        raise ValueError(f"{cfg_path} has no '{OUR_KEY}' section: not a head this library exported")
    if "calibration" in ours:
        raise ValueError(f"{cfg_path}: already calibrated (temperature {ours['calibration']['temperature']}); "
                         "calibrate the uncalibrated export it was copied from")
    if not (held := shard_text(spec, heldout=True)):
        raise FileNotFoundError(f"no held-out teacher shards in {TEXT}: nothing to fit the temperature on")
    target = teacher_here(target if target is not None else load_bf16_target())
    torch.set_num_threads(spec.threads)
    head = load_head(folder, target.get_input_embeddings().weight, torch.float32)
    temp, fit = fit_on_rows(heldout_rows(head, target, spec, held))
    ours["calibration"] = {"temperature": temp, "fitted_on": "held-out teacher shards (train.eagle3.shard_text)",
                           **fit}
    bake_temperature(cfg_path.with_name("model.safetensors"), temp)
    cfg_path.write_text(json.dumps(cfg, indent=1) + "\n")
    return ours["calibration"]


def bake_temperature(weights: Path, temp: float) -> None:
    """Divide ``norm.weight`` in a head's safetensors file by ``temp`` (written whole, then renamed over it)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(weights))
    norm = tensors["norm.weight"]
    tensors["norm.weight"] = (norm.float() / temp).to(norm.dtype)
    with written_whole(weights) as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})


def export(head: Eagle3Head, folder: Path, spec: HeadSpec, log: list[dict]) -> Path:
    """The head in bf16 on int8 rows (``core.engines.int8_rows``: the fused engine holds it in half the bytes) in the
    speculators Eagle3 format, with its training record and v4's context lookup (the ``head_lookup`` experiment)."""
    extra = {"training": training_record(spec, log), "embedding_from": "embedded:target", "weights": int8_rows.NAME}
    save_head(int8_rows.snap_linears(bf16_copy(head)), folder, VERIFIER, spec.ttt_steps, extra)
    return with_lookup(folder)


def bf16_copy(head: torch.nn.Module) -> torch.nn.Module:
    """A bf16 copy of a head that borrows the target's embedding (the borrowed tensor itself is not copied)."""
    import copy

    return copy.deepcopy(head, memo={id(head.embed_tokens): head.embed_tokens}).to(torch.bfloat16)


def training_record(spec: HeadRecipe, log: list[dict]) -> dict:
    """What an export says of its training: the spec, steps and seconds so far, the last log rows, the command
    that rebuilds or resumes it."""
    return {"spec": asdict(spec), "steps": len(log), "seconds": log[-1]["seconds"] if log else 0.0,
            "last": log[-20:], "rebuild": spec.command()}


def with_lookup(folder: Path) -> Path:
    """``folder`` with v4's context lookup beside the head (``lookup.json``), where it is committed."""
    import shutil

    from ..harness.setup.paths import DRAFT_DIR

    if (DRAFT_DIR / "lookup.json").exists():
        shutil.copyfile(DRAFT_DIR / "lookup.json", folder / "lookup.json")
    return folder
