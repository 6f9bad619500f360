"""Tiny random models built from configs (no download): the tests' and the smoke profiles' fixtures."""
from __future__ import annotations

import torch


def tiny_gpt_neox(seed: int = 0, vocab_size: int = 96, hidden_size: int = 64, layers: int = 2,
                  heads: int = 4, *, max_positions: int = 256, init_range: float = 0.3):
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
    out = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    # a minimal chat template, so that the instruction workload runs on the tiny fixtures too
    out.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}")
    return out


def tiny_pythia(seed: int = 0, vocab_size: int = 50304, hidden_size: int = 128, layers: int = 4, heads: int = 4,
                *, max_positions: int = 2048, init_range: float = 0.3):
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
               *, kv_heads: int = 2, max_positions: int = 256, init_range: float = 0.3):
    """A small random Llama (the fast path's architecture) in fp32, built from a config."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=3 * hidden_size,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      max_position_embeddings=max_positions, initializer_range=init_range, eos_token_id=0,
                      bos_token_id=0, pad_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval()


def tiny_eagle3(target, draft_vocab: int | None = None, seed: int = 0, init_range: float = 0.3):
    """A random EAGLE-3 head (``core.drafts.heads.eagle3``) on a tiny Llama ``target``'s features and embedding: the
    target's
    layer shape, EAGLE-3's layers, a draft vocabulary of ``draft_vocab`` random token ids (default: all)."""
    from ...core.drafts.heads.eagle3 import Eagle3Config, Eagle3Head

    V = target.config.vocab_size
    cfg = Eagle3Config.for_target(target.config, draft_vocab or V)
    g = torch.Generator().manual_seed(seed)
    head = Eagle3Head(cfg, target.get_input_embeddings().weight)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * init_range if p.dim() > 1 else 1 + 0.1 * torch.randn(p.shape,
                    generator=g))
    head.set_vocab(torch.randperm(V, generator=g)[:cfg.draft_vocab])
    return head.to(target.dtype).eval()


def tiny_mlp_heads(target, kind: str, heads: int = 3, draft_vocab: int | None = None, seed: int = 0,
                   *, init_range: float = 0.05, layers: int = 1):
    """Random Medusa or Hydra heads (``core.drafts.heads.mlp``, ``kind``) on a tiny ``target``'s last hidden state and
    embedding: ``heads`` levels, a draft vocabulary of ``draft_vocab`` random token ids (default: all). Their output
    layers are the target's rows at those ids plus noise (Medusa's initialisation, so that the heads' drafts are
    sometimes accepted), every other weight is noise of scale ``init_range``."""
    from ...core.drafts.heads.mlp import MLPHeadConfig, MLPHeads

    V = target.config.vocab_size
    cfg = MLPHeadConfig.for_target(target.config, kind, heads, draft_vocab or V, layers)
    g = torch.Generator().manual_seed(seed)
    out = MLPHeads(cfg, target.get_input_embeddings().weight)
    out.set_vocab(torch.randperm(V, generator=g)[:cfg.draft_vocab])
    with torch.no_grad():
        for p in out.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * init_range)
        for lm in out.lm_heads:
            lm.weight.add_(target.get_output_embeddings().weight[out.vocab()].float())
    return out.to(target.dtype).eval()
