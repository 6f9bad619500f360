"""The exactness matrix over architectures: small random models of several families, every decoder, both KV
modes, against our AR and transformers' generate; and clear refusals for what a tree cannot serve.
The fast tier runs two short prompts per architecture; the full tier (``--full``) runs more and longer ones."""
import pytest
import torch
import transformers as tf

from dynatree_lib import StreamingConfig, generate
from dynatree_lib.core.loop import KV_MODES
from dynatree_lib.harness.setup.tiny import perturb

from ..conftest import prompts, reference

V, POS = 96, 128
COMMON = dict(vocab_size=V, num_hidden_layers=2, initializer_range=0.3, eos_token_id=0, bos_token_id=0, pad_token_id=0)
ARCHS = {
    "llama": lambda: tf.LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                                    max_position_embeddings=POS, **COMMON),
    "llama_tied": lambda: tf.LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                         max_position_embeddings=POS, tie_word_embeddings=True, **COMMON),
    "qwen2": lambda: tf.Qwen2Config(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                                    max_position_embeddings=POS, **COMMON),
    "qwen3": lambda: tf.Qwen3Config(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                                    head_dim=8, max_position_embeddings=POS, **COMMON),
    "mistral": lambda: tf.MistralConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                                        max_position_embeddings=POS, sliding_window=None, **COMMON),
    "gemma": lambda: tf.GemmaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=1,
                                    head_dim=8, max_position_embeddings=POS, **COMMON),
    "phi": lambda: tf.PhiConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, max_position_embeddings=POS,
                                **COMMON),
    "gpt2": lambda: tf.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=POS, initializer_range=0.3,
                                  eos_token_id=0, bos_token_id=0),
    "opt": lambda: tf.OPTConfig(hidden_size=32, ffn_dim=64, num_attention_heads=4, max_position_embeddings=POS,
                                word_embed_proj_dim=32, init_std=0.3, **{k: v for k,
                                                                         v in COMMON.items() if k != "initializer_range"}),
    "gpt_neox": lambda: tf.GPTNeoXConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                         max_position_embeddings=POS, **COMMON),
    "gpt_neox_serial": lambda: tf.GPTNeoXConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                                max_position_embeddings=POS, use_parallel_residual=False, rotary_pct=0.5,
                                                **COMMON),
}
ROTARY = {"llama", "llama_tied", "qwen2", "qwen3", "mistral", "gemma", "phi", "gpt_neox", "gpt_neox_serial"}
METHODS = ["linear", "fixed_tree", "dynatree", "talon", "hf_assisted", "streaming"]


def build(cfg, seed: int):
    torch.manual_seed(seed)
    return tf.AutoModelForCausalLM.from_config(cfg).eval()


def pair(name):
    cfg = ARCHS[name]()
    target = build(cfg, 0)
    draft = perturb(build(cfg, 0), 0.02, seed=1)
    return target, draft


def run_matrix(name, n_prompts, T):
    target, draft = pair(name)
    for p in prompts(n_prompts, seed=11, lo=1, hi=30):
        ar = generate(target, p, T).tokens
        assert ar == reference(target, p, T), f"{name}: AR differs from transformers' generate"
        for m in METHODS:
            if m == "streaming" and name not in ROTARY:
                continue
            method = StreamingConfig(K=3, cache_size=96, n_sink=4) if m == "streaming" else m
            for kv in KV_MODES:
                res = generate(target, p, T, draft=draft, method=method, kv_mode=kv)
                assert res.tokens == ar, f"{name}: {m}/{kv} differs from AR"


@pytest.mark.parametrize("name", list(ARCHS))
def test_every_decoder_on_every_architecture(name):
    run_matrix(name, n_prompts=2, T=12)


@pytest.mark.full
@pytest.mark.parametrize("name", list(ARCHS))
def test_every_decoder_on_every_architecture_long(name):
    run_matrix(name, n_prompts=8, T=60)


def test_sliding_window_exact_inside_refused_beyond():
    cfg = tf.MistralConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=POS, sliding_window=16, **COMMON)
    target, draft = build(cfg, 0), perturb(build(cfg, 0), 0.02, seed=1)
    p = prompts(1, seed=3, lo=5, hi=6)[0]
    inside = generate(target, p, 10).tokens
    assert inside == reference(target, p, 10)
    for m in ("linear", "fixed_tree", "dynatree"):
        assert generate(target, p, 10, draft=draft, method=m).tokens == inside
    long = prompts(1, seed=4, lo=20, hi=21)[0]
    assert generate(target, long, 20).tokens == reference(target, long, 20)  # AR keeps the model's own masks
    with pytest.raises(ValueError, match="sliding-window attention \\(window 16\\)"):
        generate(target, long, 20, draft=draft, method="dynatree")


def test_alibi_models_are_refused_for_trees():
    cfg = tf.BloomConfig(vocab_size=V, hidden_size=32, n_layer=2, n_head=4, initializer_range=0.3)
    target, draft = build(cfg, 0), perturb(build(cfg, 0), 0.02, seed=1)
    p = prompts(1, seed=3)[0]
    assert generate(target, p, 8).tokens == reference(target, p, 8)  # AR is fine
    for m in ("linear", "fixed_tree", "dynatree", "talon"):
        with pytest.raises(ValueError, match="\\(bloom\\) uses ALiBi"):
            generate(target, p, 8, draft=draft, method=m)


def test_streaming_needs_rotary_positions():
    target, draft = pair("gpt2")
    with pytest.raises(ValueError, match="rotary position embeddings; 'gpt2' has none"):
        generate(target, prompts(1, lo=50, hi=51)[0], 40, draft=draft, method=StreamingConfig(K=3, cache_size=48))
