"""Model loading: the same ``from_pretrained`` code for hub ids, local folders, ``embedded:*`` and the tiny
fixtures, as eager transformers models or fast-path runners; a draft may also be a head on the target's features
(``eagle3:<folder>``, ``medusa:<folder>``, ``hydra:<folder>``: ``core.drafts.heads.kinds``), which borrows the target's
embedding. On the static engines the runners hold the only copy of every weight (``core.engines.ownership``)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ...core.drafts.heads.eagle3_fused import Rope
from ...core.engines.static import StaticRunner
from ...core.drafts.heads.kinds import HEAD_KINDS
from ...core.drafts.lookup import LookupRunner
from ...core.engines.hf import HFRunner, as_runner
from ...core.engines.runner import check_pair, context_limit
from . import tiny
from .weights import frequent_tokens, head_folder, head_kind, is_head, lookup_config, resolve



@dataclass(frozen=True)
class Engine:
    """How the models run: ``eager`` (transformers) or our static-cache Llama (``core.engines.static``), plain
    (``static``), compiled (``static+compile``), or as one C++ call per forward where the bf16 kernels run and
    the compiled graph elsewhere (``static+fused``)."""

    name: str = "eager"
    NAMES = ("eager", "static", "static+compile", "static+fused")

    def __post_init__(self) -> None:
        if self.name not in self.NAMES:
            raise ValueError(f"engine must be one of {self.NAMES}, got {self.name!r}")

    @property
    def static(self) -> bool:
        return self.name != "eager"

    @property
    def compile(self) -> bool:
        return self.name in ("static+compile", "static+fused")

    @property
    def fused(self) -> bool:
        return self.name == "static+fused"

    def __str__(self) -> str:
        return self.name


def is_tiny(ref: str) -> bool:
    """Whether ``ref`` names one of the random fixture pairs (``harness.setup.tiny``), not a model on disk or the hub."""
    return ref.split(":")[0] in ("tiny", "tiny-llama", "tiny-pythia")


def load_model(ref: str, device: str = "cpu", dtype: str = "float32"):
    """(model, tokenizer) for a hub id, a local folder or ``embedded:*``, through ``from_pretrained``;
    ``tiny:target`` / ``tiny:draft`` are random fixtures (GPT-NeoX, Pythia's architecture) with a byte
    tokenizer, ``tiny-llama:*`` the same in Llama shape (the fast path's architecture) and ``tiny-pythia:*``
    in Pythia-2.8B's shape family (the draft is the target with noisy weights in every tiny pair)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    torch_dtype = getattr(torch, dtype)
    if is_tiny(ref):
        kind, part = ref.split(":", 1)
        if part not in ("target", "draft"):
            raise ValueError(f"unknown tiny model {ref!r}; use {kind}:target or {kind}:draft")
        tok = tiny.tiny_tokenizer()
        if kind == "tiny-pythia":
            base = tiny.tiny_pythia()
        else:
            make = tiny.tiny_gpt_neox if kind == "tiny" else tiny.tiny_llama
            base = make(seed=0, vocab_size=len(tok), hidden_size=64, layers=2, max_positions=512)
        if part == "draft":  # the target with noisy weights: a draft that agrees often, not always
            tiny.perturb(base, 0.03, seed=1)
        return base.to(device=device, dtype=torch_dtype), tok
    path = resolve(ref)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).to(device).eval()
    return model, AutoTokenizer.from_pretrained(path)


def import_model_code(ref: str) -> None:
    """Import the transformers modules that ``load_model(ref)`` will use, without loading weights (so a memory
    measurement can count the runtime's code apart from the model)."""
    if is_tiny(ref) or is_head(ref):
        return
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    MODEL_FOR_CAUSAL_LM_MAPPING[type(AutoConfig.from_pretrained(resolve(ref)))]


def load_tokenizer(ref: str):
    """The tokenizer of a model reference, without loading the model."""
    if is_tiny(ref):
        return tiny.tiny_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve(ref))


def load_pair(target_ref: str, draft_ref: str | None, device: str = "cpu", dtype: str = "float32",
              context_override: int | None = None, *, engine: "Engine | str" = "eager", max_len: int = 2048,
              draft_vocab: int | None = None, draft_lookup: bool = False, keep_models: bool = False):
    """Target, draft and their shared tokenizer; refuses pairs whose vocabularies differ. ``draft_ref=None``: the
    target alone (the draft is None), for a run that measures what a method without a draft holds.

    ``engine`` (an ``Engine`` or its name): "eager" returns the transformers models; the static engines return
    fast-path runners (``core.engines.static.StaticRunner`` with a ``max_len``-slot cache) over them, for Llama models.
    The runners hold the only copy of every weight (``core.engines.ownership``): their transformers models (``.model``)
    keep views or released weights, and a draft (or an EAGLE-3 head) that borrows the target's embedding reads
    the target runner's tensor. ``keep_models=True`` leaves the models their own weights beside the runners' (two
    copies), for a process that also runs transformers' own loop on them (HF's AR and assisted generation).
    ``context_override`` raises both models' declared context (``max_position_embeddings``), for
    rotary-position models run past it on purpose (the paper's PG-19 setting); it is logged by the caller.
    ``draft_vocab``: the draft scores only its ``draft_vocab`` most frequent tokens (``frequent_tokens``);
    the draft is then a runner (an ``HFRunner`` on the eager engine) whose ``vocab`` says which.
    ``draft_lookup``: the draft runner mixes in its context lookup (``core.drafts.lookup.LookupRunner``, weights from
    ``lookup.json`` beside the draft's, ``lookup_config``).
    """
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available; use the 'cpu' profile")
    engine = Engine(engine) if isinstance(engine, str) else engine
    target, tt = load_model(target_ref, device, dtype)
    if draft_ref is None or is_head(draft_ref):
        override_context((target,), context_override)
        target = on_engine(target, engine, max_len, keep=keep_models)
        draft = draft_ref and load_head_draft(draft_ref, target, max_len, draft_vocab, draft_lookup, fused=engine.fused)
        return target, draft, tt
    draft, dt = load_model(draft_ref, device, dtype)
    check_pair(target, draft, tt, dt)
    override_context((target, draft), context_override)
    vocab = None if draft_vocab is None else frequent_tokens(draft_ref, draft_vocab)
    cfg = lookup_config(draft_ref) if draft_lookup else None
    target, draft = serve_pair(target, draft, engine, max_len, vocab, keep=keep_models)
    if cfg is not None:
        draft = LookupRunner(as_runner(draft), cfg)
    return target, draft, tt


def load_head_draft(ref: str, target, max_len: int, draft_vocab: int | None, draft_lookup: bool, *, fused: bool = False):
    """The head of ``<kind>:<folder>`` as its kind's draft runner (``core.drafts.heads.kinds``) over ``target``'s
    embedding (the same tensor: a runner's, plain or packed, or a transformers model's), in the target's dtype;
    ``draft_vocab``
    must be None or the head's own size; ``draft_lookup`` mixes in the ``lookup.json`` of its folder. ``fused`` (the
    target's engine is): a kind that has a one-call step takes it where the kernels do
    (``core.drafts.heads.eagle3_fused``; bf16),
    else it runs eagerly."""
    folder, kind = head_folder(ref), HEAD_KINDS[head_kind(ref)]
    head = kind.load(folder, input_embedding(target))
    if draft_vocab is not None and draft_vocab != head.cfg.draft_vocab:
        raise ValueError(f"draft_vocab={draft_vocab}, but the head {folder} scores its own {head.cfg.draft_vocab} "
                         "tokens; set draft_vocab to None (or to that size)")
    runner = kind.runner(head, max_len, fused, rope_tables(target))
    return LookupRunner(runner, lookup_config(ref)) if draft_lookup else runner


def rope_tables(target) -> Rope | None:
    """A fast-path target runner's RoPE tables, which a head may read as its own; None for a transformers model."""
    return Rope(target.net.cos, target.net.sin, target.net.inv_freq) if isinstance(target, StaticRunner) else None


def input_embedding(target) -> Tensor:
    """The tensor ``target``'s input embedding lives in: a fast-path runner's (``StaticRunner.embedding``: plain, or
    its packed tied head) or a transformers model's weight."""
    return target.embedding if isinstance(target, StaticRunner) else target.get_input_embeddings().weight


def serve_pair(target, draft, engine: Engine, max_len: int, vocab=None, *, keep: bool = False):
    """A loaded pair as ``engine`` serves it (``on_engine``; ``vocab``: the draft's subset head), the draft reading the
    target's embedding where the two hold the same values (``share_embedding``): on a static engine the target
    runner's tensor, plain or packed (one copy)."""
    shared = share_embedding(target, draft)
    target = on_engine(target, engine, max_len, keep=keep)
    return target, on_engine(draft, engine, max_len, vocab, input_embedding(target) if shared else None, keep=keep)


def share_embedding(target, draft) -> bool:
    """Point the draft's input embedding (and its output layer, where tied to it) at the target's tensor when
    the two hold the same values, as for a draft that borrows its target's embedding (the cpu profile's): one copy
    in memory instead of two, the same numbers. Whether the two share one tensor now."""
    t, d = target.get_input_embeddings().weight, draft.get_input_embeddings().weight
    if t is d:
        return True
    if t.shape != d.shape or t.dtype != d.dtype or t.device != d.device or not torch.equal(t, d):
        return False
    head = draft.get_output_embeddings()
    if head is not None and head.weight is d:
        head.weight = t
    draft.get_input_embeddings().weight = t
    return True


def override_context(models, context_override: int | None) -> None:
    """Raise each model's declared context (``max_position_embeddings``) to ``context_override``, if given."""
    if context_override is not None:
        for m in models:
            m.config.max_position_embeddings = max(context_override, context_limit(m) or 0)


def on_engine(model, engine: Engine, max_len: int, vocab=None, embedding: Tensor | None = None, *, keep: bool = False):
    """``model`` as ``engine`` serves it: the transformers model itself ("eager"; an ``HFRunner`` over it
    when ``vocab`` limits its logits) or a fast-path runner with a ``max_len``-slot cache, reading ``embedding``
    (another runner's) if given, holding the only copy of the model's weights unless ``keep``."""
    if not engine.static:
        return model if vocab is None else HFRunner(model, vocab)
    return StaticRunner(model, max_len, compile=engine.compile, vocab=vocab, fused=engine.fused, embedding=embedding,
                        keep_model=keep)
