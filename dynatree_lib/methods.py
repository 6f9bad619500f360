"""Every method, registered once, and the one entry point ``generate``.

    generate(target, prompt, T)                                   greedy AR (our cached loop)
    generate(target, prompt, T, draft=d, method="dynatree")       a method by name, default settings
    generate(target, prompt, T, draft=d, method=DynaTreeConfig(tau_h=0.8))

``target`` and ``draft`` are transformers models (run eagerly) or runners (``core.fastpath.StaticRunner``).

A method is its frozen config class plus one ``Method`` entry in ``REGISTRY`` (``register``): its name,
label, colour, role, whether it gets a tuning budget, the paper's setting and how it decodes. Profiles,
experiments, tables, plots and the plan read the registry, so a new method needs nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .baselines.hf_generate import HFARConfig, HFAssistedConfig, generate_hf
from .baselines.streaming import StreamingConfig, generate_streaming_spec
from .core.decoding import Options, generate_ar, speculative_decode
from .core.policies import DynaTreeConfig, FixedTreeConfig, LinearConfig, TalonConfig
from .core.result import GenerationResult
from .core.sampling import Sampling
from .extensions.cost_aware import CostAwareConfig

ROLES = ("paper", "seed", "extension", "peer")


def tree_decoder(target, draft, prompt, T, cfg, opts: Options) -> GenerationResult:
    """A method whose config has ``policy()``: our speculative loop with that drafting policy."""
    return speculative_decode(target, draft, prompt, T, cfg.policy(opts.session), opts)


@dataclass(frozen=True)
class Method:
    """One decoding method as the library and its reports know it.

    ``role``: "paper" (the paper's Table 1 methods: every experiment runs them), "seed" (the other seed
    systems: the main table and memory), "extension" (ours: the main table, never in a paper method's place) or
    "peer" (another engine on the same weights, ``harness.peers``: its own experiment only).
    ``paper(settings, dataset)``: the paper's setting from a profile's ``PaperSettings`` (the profile may
    override it). ``reported``: its key in ``data/paper_reported.json``'s Table 1 and 3, if the paper reports it.
    ``decode(target, draft, prompt, T, cfg, opts)`` runs it (``opts``: ``core.decoding.Options``); ``drafts``:
    whether it needs a draft (HF's AR does not); ``engine``: whose engine runs its forwards ("ours", or
    "transformers" for HF's own loop, "llama.cpp": its speedups are shown over that engine's AR as well as ours);
    ``engine_ar``: this method is its engine's own AR, the row the engine's other rows are also divided by (a
    method whose configs hold several modes, like llama.cpp's, tags that row ``own_ar`` instead);
    ``describe(cfg)``: a dict its records carry under ``engine_info``; ``unavailable()``: what this machine lacks to
    measure it (a message naming the missing tool and how to get it), None when nothing is missing. It decides
    what gets measured, never what gets rendered: committed records of a method render everywhere."""

    name: str
    config: type | None
    label: str
    color: str
    role: str
    tuned: bool
    paper: Callable | None
    decode: Callable | None = tree_decoder
    reported: str | None = None
    drafts: bool = True
    engine: str = "ours"
    engine_ar: bool = False
    describe: Callable | None = None  # config -> what its records log about another engine (version, build, command)
    unavailable: Callable[[], str | None] = lambda: None


REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add a method (its position in the registry is its order in tables and plots)."""
    if method.name in REGISTRY or method.name == "ar" and method.config is not None:
        raise ValueError(f"method {method.name!r} is already registered")
    if method.role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {method.role!r}")
    if method.config is not None and getattr(method.config, "method", None) != method.name:
        raise ValueError(f"{method.config.__name__}.method must be {method.name!r} (the registry's name)")
    REGISTRY[method.name] = method
    return method


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)


for _m in (
    Method("ar", None, "AR", "#7f7f7f", "paper", False, None, None, "ar", drafts=False),
    Method("linear", LinearConfig, "Linear Spec", "#1f77b4", "paper", True, lambda s, ds: LinearConfig(s.linear_K[ds]),
           reported="linear_spec"),
    Method("fixed_tree", FixedTreeConfig, "Fixed Tree", "#ff7f0e", "paper", True, lambda s, ds: s.fixed,
           reported="fixed_tree"),
    Method("dynatree", DynaTreeConfig, "DynaTree", "#2ca02c", "paper", True, lambda s, ds: s.dynatree[ds],
           reported="dynatree"),
    Method("dynatree_cost", CostAwareConfig, "DynaTree + cost budget (ext.)", "#98df8a", "extension", False, None),
    Method("hf_assisted", HFAssistedConfig, "HF Assisted", "#9467bd", "seed", True,
           lambda s, ds: HFAssistedConfig(s.linear_K[ds], s.hf_schedule, 0.0), generate_hf, engine="transformers"),
    Method("hf_ar", HFARConfig, "HF AR", "#bcbd22", "seed", False, lambda s, ds: HFARConfig(), generate_hf,
           drafts=False, engine="transformers", engine_ar=True),
    Method("streaming_spec", StreamingConfig, "StreamingLLM + Spec", "#8c564b", "seed", False,
           lambda s, ds: StreamingConfig(s.linear_K[ds], s.streaming_cache, 4), generate_streaming_spec),
    Method("talon", TalonConfig, "TALON", "#d62728", "seed", True, lambda s, ds: s.talon),
):
    register(_m)


def method_names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def names(role: str) -> tuple[str, ...]:
    """The registered methods of one role, in registry order."""
    return tuple(n for n, m in REGISTRY.items() if m.role == role)


def engine_ars() -> tuple[str, ...]:
    """The registered methods that are another engine's own AR."""
    return tuple(n for n, m in REGISTRY.items() if m.engine_ar)


def of_config(cfg) -> Method:
    """The registered method a config object belongs to."""
    m = REGISTRY.get(getattr(type(cfg), "method", None))
    if m is None or m.config is not type(cfg):
        raise TypeError(f"method must be a name in {method_names()} or a registered method's config "
                        f"({[m.config.__name__ for m in REGISTRY.values() if m.config]}), got {type(cfg).__name__}")
    return m


def method_config(method):
    """A method given by name (default settings), config object, or None (AR)."""
    if method is None or method == "ar":
        return None
    if isinstance(method, str):
        if method not in REGISTRY:
            raise ValueError(f"unknown method {method!r}; choose one of {method_names()} or pass a config object")
        return REGISTRY[method].config()
    of_config(method)
    return method


def generate(target, prompt, T: int, draft=None, method=None, kv_mode: str = "gather",
             eos_token_id: int | None = None, record_trees: int = 0, temperature: float = 0.0,
             top_k: int | None = None, top_p: float | None = None,
             generator: torch.Generator | None = None, session: dict | None = None) -> GenerationResult:
    """``T`` new tokens with ``method`` (see module docstring): greedy at ``temperature=0``, else sampled from the
    target's softmax at that temperature after ``top_k`` / ``top_p``, every draw from ``generator`` (a run is
    reproducible from its seed), the target's law kept exactly by every method but StreamingLLM (whose window
    changes what the target sees). ``record_trees``: keep the first that many drafted trees of a tree method in
    ``result.trees`` (tokens are unchanged). ``session``: a dict kept across a run's generations, for a policy that
    adapts across prompts (``DynaTreeConfig.history_scope="prompt"``)."""
    cfg = method_config(method)
    opts = Options(kv_mode, eos_token_id, record_trees, Sampling(temperature, top_k, top_p), generator, session)
    if cfg is None:
        return generate_ar(target, prompt, T, opts)
    m = of_config(cfg)
    if draft is None and m.drafts:
        raise ValueError(f"{type(cfg).__name__} needs a draft model (draft=...)")
    return m.decode(target, draft, prompt, T, cfg, opts)
