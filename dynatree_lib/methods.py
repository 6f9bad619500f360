"""Every method by name, and the one entry point ``generate``.

    generate(target, prompt, T)                                   greedy AR (our cached loop)
    generate(target, prompt, T, draft=d, method="dynatree")       a method by name, default settings
    generate(target, prompt, T, draft=d, method=DynaTreeConfig(tau_h=0.8))

``target`` and ``draft`` are transformers models (run eagerly) or runners (``fastpath.StaticRunner``).
"""
from __future__ import annotations

from .baselines import HFAssistedConfig, StreamingConfig, generate_hf_assisted, generate_streaming_spec
from .decoders import KV_MODES, GenerationResult, generate_ar, speculative_decode
from .policies import CostAwareConfig, DynaTreeConfig, FixedTreeConfig, LinearConfig, TalonConfig

CONFIGS = {c.method: c for c in (LinearConfig, FixedTreeConfig, DynaTreeConfig, TalonConfig, HFAssistedConfig,
                                 StreamingConfig, CostAwareConfig)}
METHOD_NAMES = ("ar",) + tuple(CONFIGS)
MethodConfig = (LinearConfig | FixedTreeConfig | DynaTreeConfig | TalonConfig | HFAssistedConfig | StreamingConfig
                | CostAwareConfig)


def method_config(method) -> MethodConfig | None:
    """A method given by name (default settings), config object, or None (AR)."""
    if method is None or method == "ar":
        return None
    if isinstance(method, str):
        if method not in CONFIGS:
            raise ValueError(f"unknown method {method!r}; choose one of {METHOD_NAMES} or pass a config object")
        return CONFIGS[method]()
    if type(method) not in CONFIGS.values():
        raise TypeError(f"method must be a name in {METHOD_NAMES} or one of {[c.__name__ for c in CONFIGS.values()]}, "
                        f"got {type(method).__name__}")
    return method


def generate(target, prompt, T: int, draft=None, method=None, kv_mode: str = "gather",
             eos_token_id: int | None = None, record_trees: int = 0) -> GenerationResult:
    """Greedy decoding of ``T`` new tokens with ``method`` (see module docstring). ``record_trees``: keep
    the first that many drafted trees of a tree method in ``result.trees`` (tokens are unchanged)."""
    cfg = method_config(method)
    if kv_mode not in KV_MODES:
        raise ValueError(f"kv_mode must be one of {KV_MODES}, got {kv_mode!r}")
    if cfg is None:
        return generate_ar(target, prompt, T, eos_token_id, kv_mode)
    if draft is None:
        raise ValueError(f"{type(cfg).__name__} needs a draft model (draft=...)")
    if isinstance(cfg, HFAssistedConfig):
        return generate_hf_assisted(target, draft, prompt, T, cfg, eos_token_id, kv_mode)
    if isinstance(cfg, StreamingConfig):
        return generate_streaming_spec(target, draft, prompt, T, cfg, eos_token_id, kv_mode, record_trees)
    return speculative_decode(target, draft, prompt, T, cfg.policy(), kv_mode, eos_token_id, None, record_trees)
