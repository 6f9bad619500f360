"""The draft's teacher data: the target's text with its next-token distributions (soft targets).

Three kinds of shard, all resumable (shard ``s`` depends only on its spec and ``s``; existing shards are kept):

- continuations (``shard-NNNN.pt``, ``ContinuationSpec``): prompts cut from text no experiment uses (the PG-19
  books outside the test split and the WikiText-2 *validation* split), the target's greedy continuation of each,
  and its top-k next-token log-probabilities at every position;
- instruction answers (``instr-NNNN.pt``, ``InstructionSpec``): the committed instructions
  (``train.instructions``) through the chat template, the target's greedy answer to each (to EOS or
  ``max_new`` tokens, left-padded batches) and its top-k log-probabilities before every answer token;
- sampled answers (``sampled-GGGG-J.pt``, ``SampledAnswerSpec``): the same instructions in the same groups of
  ``batch`` (group ``GGGG`` holds the instructions of ``instr-GGGG``, so a held-out group is held out in both), the
  target's answer sampled from its own distribution at ``temperature`` (no top-k / top-p cut), ``samples`` answers
  per instruction (``J``: each its own seed), and its top-k log-probabilities at temperature 1 (the raw
  log-softmax) before every answer token. ``teacher_files`` (v3's training data) leaves them out;
  ``sampled_files`` lists them.

Generating the text is the slow part (hours on 2 cores), so each shard's text is committed
(``data/draft_teacher/<shard>.json.gz``, with the spec that made it) and the soft targets, a hundred times larger,
are not: a build that finds a shard's text recomputes them by one teacher-forced forward over it
(``soft_targets``, much less work than generating it). The text is the same; the log-probabilities equal those
recorded while generating up to bf16 rounding, so where two tokens nearly tie their order may differ.

The sampled answers' texts go to ``data/draft_teacher_sampled/`` (``python -m dynatree_lib build-draft
--sampled-teacher-only``; a rerun resumes, skipping every shard already in ``models/draft-build-v3/teacher/``). The
build rewrites that folder's ``SHA256SUMS`` after each shard, so committing a batch is
``git add data/draft_teacher_sampled/*.json.gz data/draft_teacher_sampled/SHA256SUMS`` (the texts with the
manifest that lists them; ``tests/harness/test_data.py`` checks every line of it).
"""
from __future__ import annotations

import gzip
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..harness.setup.data import chat_prompt, training_text, wikitext_valid_articles
from ..harness.setup.paths import REPO, written_whole
from ..harness.setup.weights import smollm2_folder
from . import instructions

BUILD = REPO / "models" / "draft-build-v3"  # git-ignored: teacher shards, checkpoints
TEACHER = BUILD / "teacher"
TEXT = REPO / "data" / "draft_teacher"  # committed: each shard's greedy text and the spec that made it
SAMPLED_TEXT = REPO / "data" / "draft_teacher_sampled"  # committed: each sampled shard's text and its spec


def load_target(dtype: str = "float32"):
    """The cpu profile's target (eager transformers) and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = smollm2_folder()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
    return model, AutoTokenizer.from_pretrained(folder)


def topk_logp(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-``k`` log-probabilities (fp16) and token ids (int32) of each row of logits."""
    v, i = torch.log_softmax(logits.float(), dim=-1).topk(k, dim=-1)
    return v.half(), i.int()


def corpora(tok) -> dict[str, list[list[int]]]:
    """The continuation teacher's source text, tokenized: documents of more than 300 tokens."""
    enc = lambda texts: [ids for ids in tok(texts, add_special_tokens=False)["input_ids"] if len(ids) > 300]
    return {"wiki_valid": enc(wikitext_valid_articles()), "wiki_valid_raw": enc(wikitext_valid_articles(raw=True)),
            "pg19_train": enc(training_text())}


@dataclass(frozen=True)
class ContinuationSpec:
    """What the continuation teacher generates: ``shards`` x ``batch`` sequences of a prompt of one of
    ``prompt_lens`` tokens plus ``cont`` greedy tokens, top-``k`` log-probs at every position.

    Shards from ``raw_from`` on (None: none) cut their WikiText prompts from the raw validation text
    (" @-@ ", " , " as in the experiment prompts) and draw WikiText with ``raw_wiki_share``; shards
    before it keep the detokenized text and ``wiki_share``, so adding raw shards leaves the old ones as
    they were built."""

    shards: int = 32
    batch: int = 48
    prompt_lens: tuple = (64, 128, 192, 256)
    cont: int = 192
    k: int = 32
    wiki_share: float = 0.4
    raw_from: int | None = 0
    raw_wiki_share: float = 0.6
    seed: int = 1234
    threads: int = 2
    dtype: str = "bfloat16"  # the target's precision while it writes (the timed runs decode in bf16)


@torch.no_grad()
def continuation_shard(model, texts: dict, spec: ContinuationSpec, s: int) -> dict:
    """One shard: ``batch`` prompts of one length, greedy continuations, top-k teacher log-probs."""
    from transformers import DynamicCache

    rng = random.Random(spec.seed * 100_003 + s)
    P = spec.prompt_lens[s % len(spec.prompt_lens)]
    if spec.raw_from is not None and s >= spec.raw_from:
        src = "wiki_valid_raw" if rng.random() < spec.raw_wiki_share else "pg19_train"
    else:
        src = "wiki_valid" if rng.random() < spec.wiki_share else "pg19_train"
    docs = [d for d in texts[src] if len(d) >= P]
    rows, ids_ = [], []
    for _ in range(spec.batch):
        d = rng.randrange(len(docs))
        off = rng.randrange(len(docs[d]) - P + 1)
        rows.append(torch.tensor(docs[d][off:off + P]))
        ids_.append(f"{src}:{d}@{off}")
    x = torch.stack(rows)
    cache = DynamicCache()
    hidden = model.model(input_ids=x, cache=cache, use_cache=True).last_hidden_state
    lps, tops = [], []
    for b in range(0, spec.batch, 8):  # the full [B, P, V] logits would take gigabytes
        v, i = topk_logp(model.lm_head(hidden[b:b + 8]), spec.k)
        lps.append(v)
        tops.append(i)
    lp, top = torch.cat(lps), torch.cat(tops)
    nxt = top[:, -1:, 0].long()
    seq, step_lp, step_top = [x, nxt], [lp], [top]
    for t in range(spec.cont - 1):
        logits = model(input_ids=nxt, cache=cache, use_cache=True,
                       position_ids=torch.full_like(nxt, P + t)).logits
        v, i = topk_logp(logits, spec.k)
        step_lp.append(v)
        step_top.append(i)
        nxt = i[:, -1:, 0].long()
        seq.append(nxt)
    return {"tokens": torch.cat(seq, 1).int(), "top_lp": torch.cat(step_lp, 1), "top_ids": torch.cat(step_top, 1),
            "prompt_len": P, "source": src, "prompt_ids": ids_, "shard": s}


def teacher_files(folder: Path = TEACHER) -> list[Path]:
    """The shards the specs define (continuation, then instruction), in order; shards past a spec's ``shards``
    (from an earlier, larger spec) are ignored, so training sees exactly what the specs describe. Sampled-answer
    shards are not among them (``sampled_files``)."""
    n_instr = InstructionSpec().shards
    cont = [folder / f"shard-{s:04d}.pt" for s in range(ContinuationSpec().shards)]
    instr = [f for f in sorted(folder.glob("instr-*.pt")) if n_instr is None or int(f.stem.split("-")[1]) < n_instr]
    return [f for f in cont if f.exists()] + instr


def build_continuation_teacher(spec: ContinuationSpec = ContinuationSpec(), out: Path = TEACHER,
                               text: Path = TEXT) -> Path:
    """The continuation shards (see module docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(asdict(spec)))
    texts = {}  # the source text, tokenized once, only if a shard must be generated

    def make(model, tok, s: int) -> dict:
        if not texts:
            texts.update(corpora(tok))
        return continuation_shard(model, texts, spec, s)

    names = [f"shard-{s:04d}" for s in range(spec.shards)]
    return build_shards(names, spec, make, out, text, desc="continuation teacher shards")


def build_shards(names: list[str], spec, make: Callable[[object, object, int], dict], out: Path, text: Path,
                 *, desc: str, on_text: Callable[[], object] | None = None) -> Path:
    """Write ``out/<name>.pt`` for each shard missing there: its soft targets recomputed from its committed text
    where ``text`` holds it, else ``make(model, tokenizer, s)`` (generation), whose text is then committed. A
    shard built before its text was committed gets its text written first. ``on_text`` runs after each text
    written (e.g. ``write_manifest``, so that the text folder's manifest never lags behind a long build)."""
    from tqdm.auto import tqdm

    torch.set_num_threads(spec.threads)
    out.mkdir(parents=True, exist_ok=True)
    text.mkdir(parents=True, exist_ok=True)
    for name in names:
        if (out / f"{name}.pt").exists() and not text_path(text, name).exists():
            save_text(torch.load(out / f"{name}.pt"), spec, text_path(text, name))
            if on_text:
                on_text()
    todo = [s for s, name in enumerate(names) if not (out / f"{name}.pt").exists()]
    if not todo:
        return out
    model, tok = load_target(spec.dtype)
    bar = tqdm(todo, desc=desc, unit="shard")
    for s in bar:
        t0, src = time.time(), text_path(text, names[s])
        if src.exists():
            shard, how = soft_targets(model, load_text(src, spec), spec.k), "recomputed"
        else:
            shard, how = make(model, tok, s), "generated"
            save_text(shard, spec, src)
            if on_text:
                on_text()
        with written_whole(out / f"{names[s]}.pt") as tmp:
            torch.save(shard, tmp)
        bar.set_postfix_str(f"{how} in {time.time() - t0:.0f} s")
    return out


def write_manifest(folder: Path = TEXT) -> Path:
    """``SHA256SUMS`` of the committed shard texts (``sha256sum -c`` format; ``data/README.md`` hashes this file)."""
    import hashlib

    lines = [f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}\n" for f in sorted(folder.glob("*.json.gz"))]
    (folder / "SHA256SUMS").write_text("".join(lines))
    return folder / "SHA256SUMS"


def text_path(folder: Path, name: str) -> Path:
    return folder / f"{name}.json.gz"


TEXT_KEYS = {"instruction": ("kind", "ids", "prompts", "answers", "shard"),
             "sampled": ("kind", "ids", "prompts", "answers", "shard", "sample", "seed"),
             "continuation": ("kind", "tokens", "prompt_len", "source", "prompt_ids", "shard")}
ANSWER_KINDS = ("instruction", "sampled")  # prompts and answers, a distribution before each answer token


def save_text(shard: dict, spec, path: Path) -> None:
    """A shard without its soft targets (what generating it cost), with its spec: gzip'd JSON, byte-stable."""
    kind = shard.get("kind", "continuation")  # continuation shards carry no kind
    row = {"spec": asdict(spec), "kind": kind, **{k: shard[k] for k in TEXT_KEYS[kind] if k != "kind"}}
    if kind == "continuation":
        row["tokens"] = shard["tokens"].tolist()
    data = json.dumps(row, separators=(",", ":")).encode()
    with written_whole(path) as tmp, open(tmp, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
            f.write(data)


# fields that change no shard's tokens: torch's threads, and how many shards (samples) a spec asks for, since
# shard s (sample j) is the same in a longer build
SPEC_FIELDS_KEEPING_TOKENS = ("threads", "shards", "samples")


def load_text(path: Path, spec) -> dict:
    """A committed shard text, refused when the spec that made it is not ``spec``."""
    try:
        row = json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a teacher text file (gzip'd JSON): {e}") from e
    content = lambda d: {k: v for k, v in (d or {}).items() if k not in SPEC_FIELDS_KEEPING_TOKENS}
    want = json.loads(json.dumps(asdict(spec)))
    if content(row.get("spec")) != content(want):
        raise ValueError(f"{path} was generated with {row.get('spec')}, not the current {type(spec).__name__} "
                         f"{want}: restore the spec or remove the file to generate it again")
    return row


@torch.no_grad()
def soft_targets(model, text: dict, k: int, rows: int = 8) -> dict:
    """The shard ``text`` was cut from: its soft targets recomputed by a teacher-forced forward (right-padded
    batches of ``rows`` sequences; a causal model's earlier rows never see the padding). A continuation has a
    distribution at every row but the last; an answer before each of its tokens."""
    if text["kind"] in ANSWER_KINDS:
        seqs = [(p + a[:-1], len(p) - 1) for p, a in zip(text["prompts"], text["answers"])]
    else:
        seqs = [(t[:-1], 0) for t in text["tokens"]]
    lps, ids = [], []
    for b in range(0, len(seqs), rows):
        chunk = seqs[b:b + rows]
        width = max(len(t) for t, _ in chunk)
        x = torch.tensor([t + [0] * (width - len(t)) for t, _ in chunk])
        hidden = model.model(input_ids=x).last_hidden_state
        for h, (t, first) in zip(hidden, chunk):
            v, i = topk_logp(model.lm_head(h[first:len(t)]), k)
            lps.append(v)
            ids.append(i)
    shard = {k_: text[k_] for k_ in TEXT_KEYS[text["kind"]]}
    if text["kind"] in ANSWER_KINDS:
        return {**shard, "top_lp": lps, "top_ids": ids}
    shard.pop("kind")
    return {**shard, "tokens": torch.tensor(text["tokens"], dtype=torch.int32), "top_lp": torch.stack(lps),
            "top_ids": torch.stack(ids)}


@dataclass(frozen=True)
class InstructionSpec:
    """The first ``shards`` (None: all) of ``batch`` instructions each (the committed instruction file, shuffled
    by ``seed``), answers of at most ``max_new`` tokens, top-``k`` log-probs, prompts cut to their last
    ``max_prompt`` tokens; the target in ``dtype`` (bf16: the precision the timed runs decode in, and faster than
    fp32 on CPUs with bf16 instructions). Instructions past the first ``shards`` stay in the file, unused."""

    shards: int | None = 88
    dtype: str = "bfloat16"
    batch: int = 32
    max_new: int = 256
    k: int = 32
    max_prompt: int = 1024
    seed: int = 4321
    threads: int = 2


class _TopK:
    """A logits processor that records each step's top-k log-probs and passes the scores on unchanged.
    transformers runs the processors passed to ``generate`` before its sampling warpers (temperature, top-k,
    top-p), so what it records is the model's own distribution (temperature 1) whatever the sampling."""

    def __init__(self, k: int):
        self.k, self.lp, self.ids = k, [], []

    def __call__(self, input_ids, scores):
        v, i = torch.log_softmax(scores.float(), dim=-1).topk(self.k, dim=-1)
        self.lp.append(v.half())
        self.ids.append(i.int())
        return scores


def generation_config(max_new: int, eos: int, pad: int, temperature: float = 0.0):
    """Greedy at ``temperature`` 0, else pure sampling at ``temperature``: top_k=0 and top_p=1 cut nothing
    (top_k is set because transformers fills an unset one with 50)."""
    from transformers import GenerationConfig

    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0: greedy), got {temperature}")
    if temperature == 0:
        return GenerationConfig(do_sample=False, max_new_tokens=max_new, eos_token_id=eos, pad_token_id=pad)
    return GenerationConfig(do_sample=True, temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new,
                            eos_token_id=eos, pad_token_id=pad)


@torch.no_grad()
def answer_batch(model, prompts: list[list[int]], max_new: int, eos: int, pad: int, *, k: int = 0,
                 temperature: float = 0.0, seed: int = 0) -> list[dict]:
    """Answers to ``prompts`` (token id lists), greedy or sampled at ``temperature`` from ``seed`` (the caller's
    random state is left as it was): for each, ``answer`` (ids, EOS included if reached) and, with ``k``,
    ``top_lp`` / ``top_ids`` [len(answer), k]: the target's distribution (temperature 1) before each answer token."""
    from transformers import LogitsProcessorList

    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    rec = _TopK(k) if k else None
    cfg = generation_config(max_new, eos, pad, temperature)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # sampling draws from the global generator; greedy draws nothing
        out = model.generate(ids, attention_mask=mask, generation_config=cfg,
                             logits_processor=LogitsProcessorList([rec] if rec else []))
    new = out[:, width:]
    rows = []
    for b in range(len(prompts)):
        ans = new[b].tolist()
        n = ans.index(eos) + 1 if eos in ans else len(ans)
        row = {"answer": ans[:n]}
        if rec:
            row["top_lp"] = torch.stack([x[b] for x in rec.lp[:n]])
            row["top_ids"] = torch.stack([x[b] for x in rec.ids[:n]])
        rows.append(row)
    return rows


def german(model, tok, sentences: list[str], batch: int = 32) -> list[str]:
    """The target's greedy German rendering of each sentence (one line, at most 80 tokens)."""
    prompts = [chat_prompt(tok, f"Translate to German: {s}") for s in sentences]
    out = []
    for i in range(0, len(prompts), batch):
        for row in answer_batch(model, prompts[i:i + batch], 80, tok.eos_token_id, tok.pad_token_id or 0):
            out.append(tok.decode(row["answer"], skip_special_tokens=True).strip().split("\n")[0])
    return out


def build_instruction_teacher(out: Path = TEACHER, spec: InstructionSpec = InstructionSpec(),
                              text: Path = TEXT) -> Path:
    """Shards ``instr-NNNN.pt`` of the target's answers to the committed instructions (resumable: shard ``s``
    depends only on ``spec`` and the instruction file, and existing shards are kept)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "instruction_spec.json").write_text(json.dumps(asdict(spec)))
    shards = instruction_groups(spec)

    def make(model, tok, s: int) -> dict:
        return {"kind": "instruction", **answer_group(model, tok, shards[s], spec), "shard": s}

    names = [f"instr-{s:04d}" for s in range(len(shards))]
    return build_shards(names, spec, make, out, text, desc="instruction teacher shards")


def instruction_groups(spec) -> list[list[dict]]:
    """The committed instructions shuffled by ``spec.seed``, in groups of ``spec.batch``, the first ``spec.shards``
    (None: all) of them."""
    rows = instructions.load()
    random.Random(spec.seed).shuffle(rows)
    return [rows[i:i + spec.batch] for i in range(0, len(rows), spec.batch)][:spec.shards]


def answer_group(model, tok, group: list[dict], spec, temperature: float = 0.0, *, seed: int = 0) -> dict:
    """The target's answers to one group of instructions as one batch, shortest first (less padding): ids,
    chat-template prompts (their last ``spec.max_prompt`` tokens), answers and their top-``spec.k`` log-probs."""
    group = sorted(group, key=lambda r: len(r["text"]))
    prompts = [chat_prompt(tok, r["text"])[-spec.max_prompt:] for r in group]
    answers = answer_batch(model, prompts, spec.max_new, tok.eos_token_id, pad=tok.pad_token_id or 0, k=spec.k,
                           temperature=temperature, seed=seed)
    return {"ids": [r["id"] for r in group], "prompts": prompts, "answers": [a["answer"] for a in answers],
            "top_lp": [a["top_lp"] for a in answers], "top_ids": [a["top_ids"] for a in answers]}


@dataclass(frozen=True)
class SampledAnswerSpec:
    """``samples`` answers to each instruction of the first ``shards`` of ``InstructionSpec``'s groups (same
    ``seed`` and ``batch``, so group ``s`` is ``instr-s``'s instructions; None: every group, past v3's too), each
    sampled at ``temperature`` with no top-k / top-p cut from its own seed (``sampled_seed``), at most ``max_new``
    tokens, the top-``k`` log-probs of the target's distribution at temperature 1 before each answer token,
    prompts cut to their last ``max_prompt`` tokens, the target in ``dtype`` (bf16, as the greedy answers and the
    timed runs)."""

    shards: int | None = None
    samples: int = 2
    temperature: float = 1.0
    dtype: str = "bfloat16"
    batch: int = 32
    max_new: int = 256
    k: int = 32
    max_prompt: int = 1024
    seed: int = 4321
    threads: int = 2

    def __post_init__(self):
        if not self.temperature > 0:
            raise ValueError(f"SampledAnswerSpec.temperature must be > 0 (sampling), got {self.temperature}")
        if self.samples < 1:
            raise ValueError(f"SampledAnswerSpec.samples must be >= 1, got {self.samples}")


def sampled_name(group: int, sample: int) -> str:
    """``sampled-GGGG-J``: the number after the first dash is the group, as in ``instr-GGGG`` (held-out tests
    read it)."""
    return f"sampled-{group:04d}-{sample}"


def sampled_seed(spec: SampledAnswerSpec, sample: int, group: int) -> int:
    """The torch seed of one sampled shard: distinct for every (sample, group) of a spec (groups < 100,003)."""
    return spec.seed * 1_000_003 + sample * 100_003 + group


def sampled_shard(model, tok, group_rows: list[dict], spec: SampledAnswerSpec, sample: int, *, group: int) -> dict:
    """One sampled-answer shard: the answers to ``group_rows`` (instruction group ``group``) of sample ``sample``."""
    seed = sampled_seed(spec, sample, group)
    return {"kind": "sampled", **answer_group(model, tok, group_rows, spec, spec.temperature, seed=seed), "shard": group,
            "sample": sample, "seed": seed}


def build_sampled_teacher(out: Path = TEACHER, spec: SampledAnswerSpec = SampledAnswerSpec(),
                          text: Path = SAMPLED_TEXT) -> Path:
    """Shards ``sampled-GGGG-J.pt`` of sampled answers (see module docstring), sample 0 of every group first, so an
    interrupted build has answered every instruction once before it answers any twice; resumable like the others.
    ``text``'s ``SHA256SUMS`` is rewritten after each shard."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "sampled_spec.json").write_text(json.dumps(asdict(spec)))
    groups = instruction_groups(spec)
    jobs = [(sample, group) for sample in range(spec.samples) for group in range(len(groups))]

    def make(model, tok, s: int) -> dict:
        sample, group = jobs[s]
        return sampled_shard(model, tok, groups[group], spec, sample, group=group)

    names = [sampled_name(group, sample) for sample, group in jobs]
    return build_shards(names, spec, make, out, text, desc="sampled teacher shards", on_text=lambda: write_manifest(text))


def sampled_files(folder: Path = TEACHER, spec: SampledAnswerSpec = SampledAnswerSpec()) -> list[Path]:
    """The sampled-answer shards ``spec`` defines that ``folder`` holds, by group then sample (the draft head's
    training chooses whether to read them; ``teacher_files`` does not)."""
    def defined(f: Path) -> bool:
        _, group, sample = f.name.split(".")[0].split("-")
        return (spec.shards is None or int(group) < spec.shards) and int(sample) < spec.samples

    return [f for f in sorted(folder.glob("sampled-*-*.pt")) if defined(f)]
