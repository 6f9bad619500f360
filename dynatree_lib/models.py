"""Model loading, the one cached forward we use everywhere, and draft/target compatibility checks."""
from __future__ import annotations

import torch
from torch import Tensor


def forward(model, input_ids: Tensor, cache, position_ids: Tensor, mask: Tensor | None = None,
            last_only: bool = False) -> Tensor:
    """One cached forward of a HF causal LM on a single sequence; returns logits [q, V] ([1, V] if last_only).

    Positions are always explicit: tree nodes share positions with their siblings.
    """
    kw = {"logits_to_keep": 1} if last_only else {}
    out = model(input_ids=input_ids[None], attention_mask=mask, position_ids=position_ids[None],
                past_key_values=cache, use_cache=True, **kw)
    return out.logits[0, -1:] if last_only else out.logits[0]


def context_limit(model) -> int | None:
    """Longest sequence the model's positions support (``max_position_embeddings``), if it declares one."""
    return getattr(model.config, "max_position_embeddings", None)


def vocab_rows(model) -> int:
    """Number of logits the model produces (rows of its output embedding)."""
    out = model.get_output_embeddings()
    return out.weight.shape[0] if out is not None else model.config.vocab_size


def check_pair(target, draft, target_tokenizer=None, draft_tokenizer=None) -> None:
    """Refuse a draft/target pair that does not share one vocabulary.

    Speculative decoding compares token ids across the two models, so the ids must mean the same
    strings: equal logit dimensions, and equal tokenizer vocabularies when tokenizers are given.
    """
    vt, vd = vocab_rows(target), vocab_rows(draft)
    if vt != vd:
        raise ValueError(f"draft and target vocabularies differ: target has {vt} logits, draft has {vd}. "
                         "Use a draft from the same model family / tokenizer as the target.")
    if target_tokenizer is not None and draft_tokenizer is not None:
        if target_tokenizer.get_vocab() != draft_tokenizer.get_vocab():
            raise ValueError("draft and target tokenizers differ (different token-to-id maps). "
                             "Use a draft trained with the target's tokenizer.")


def tiny_gpt_neox(seed: int = 0, vocab_size: int = 96, hidden_size: int = 64, layers: int = 2,
                  heads: int = 4, max_positions: int = 256, init_range: float = 0.3):
    """A small random GPT-NeoX (Pythia architecture) in fp32, built from a config (no download).

    A large ``init_range`` makes next-token distributions peaked, so greedy argmaxes are far from ties.
    """
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    cfg = GPTNeoXConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=4 * hidden_size,
                        max_position_embeddings=max_positions, initializer_range=init_range,
                        eos_token_id=0, bos_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(seed)
    return GPTNeoXForCausalLM(cfg).eval()


def perturb(model, scale: float, seed: int):
    """Add seeded Gaussian noise to every weight, in place: a draft that genuinely differs from its source."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return model


def _tiny_tokenizer():
    """A byte-level tokenizer with no merges (257 ids): instant, deterministic, offline (smoke profile)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<|endoftext|>": 0, **{ch: i + 1 for i, ch in enumerate(sorted(alphabet))}}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


def resolve(ref: str) -> str:
    """Map ``embedded:target`` / ``embedded:draft`` to local folders (building them if needed)."""
    if ref.startswith("embedded:"):
        from . import embedded

        return str(embedded.build()[ref.split(":", 1)[1]])
    return ref


def load_model(ref: str, device: str = "cpu", dtype: str = "float32"):
    """(model, tokenizer) for a hub id or a local folder, through ``from_pretrained`` either way."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if ref.startswith("tiny:"):
        tok = _tiny_tokenizer()
        base = tiny_gpt_neox(seed=0, vocab_size=len(tok), hidden_size=64, layers=2, max_positions=512)
        if ref == "tiny:draft":  # the target with noisy weights: a draft that agrees often, not always
            perturb(base, 0.03, seed=1)
        return base.to(device), tok
    path = resolve(ref)
    torch_dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).to(device).eval()
    return model, AutoTokenizer.from_pretrained(path)


def load_pair(target_ref: str, draft_ref: str, device: str = "cpu", dtype: str = "float32",
              context_override: int | None = None):
    """Target, draft and their shared tokenizer; refuses pairs whose vocabularies differ.

    ``context_override`` raises both models' declared context (``max_position_embeddings``), for
    rotary-position models run past it on purpose (the paper's PG-19 setting); it is logged by the caller.
    """
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available; use the 'cpu' profile")
    target, tt = load_model(target_ref, device, dtype)
    draft, dt = load_model(draft_ref, device, dtype)
    check_pair(target, draft, tt, dt)
    if context_override is not None:
        for m in (target, draft):
            m.config.max_position_embeddings = max(context_override, context_limit(m) or 0)
    return target, draft, tt
