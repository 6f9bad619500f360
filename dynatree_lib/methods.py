"""Every method, registered once, and the one entry point ``generate``.

    generate(target, prompt, T)                                   greedy AR (our cached loop)
    generate(target, prompt, T, draft=d, method="dynatree")       a method by name, default settings
    generate(target, prompt, T, draft=d, method=DynaTreeConfig(tau_h=0.8))

``target`` and ``draft`` are transformers models (run eagerly) or runners (``core.engines.static.StaticRunner``).

A method is its frozen config class plus one ``Method`` entry in ``REGISTRY`` (``register``): its name,
label, colour, role, whether it gets a tuning budget, the paper's setting and how it decodes. Profiles,
experiments, tables, plots and the plan read the registry, so a new method needs nothing else.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch

from .baselines.hf_generate import HFARConfig, HFAssistedConfig, generate_hf
from .baselines.streaming import StreamingConfig, generate_streaming_spec
from .core.loop import Options, generate_ar, speculative_decode
from .core.policies.eagle_tree import Eagle3TreeConfig
from .core.policies.hw_talon import HardwareTalonConfig
from .core.policies.opt_tree import OptTreeConfig
from .core.policies.dynatree import DynaTreeConfig
from .core.policies.static import FixedTreeConfig, LinearConfig
from .core.policies.base import Session
from .core.policies.talon import TalonConfig
from .core.result import GenerationResult
from .core.sampling import Sampling
from .extensions.cost_aware import CostAwareConfig

ROLES = ("paper", "seed", "extension", "peer", "opt_in")


def tree_decoder(target, draft, prompt, T, cfg, opts: Options) -> GenerationResult:
    """A method whose config has ``policy()``: our speculative loop with that drafting policy."""
    return speculative_decode(target, draft, prompt, T, cfg.policy(opts.session), opts)


@dataclass(frozen=True, kw_only=True)
class Method:
    """One decoding method as the library and its reports know it.

    ``role``: "paper" (the paper's Table 1 methods: every experiment runs them), "seed" (the other seed
    systems: the main table and memory), "extension" (ours: the main table, never in a paper method's place),
    "peer" (another engine on the same weights, ``harness.peers``: its own experiment only) or "opt_in" (decoded
    by ``generate`` and covered by the exactness and sampling tests, with tuning candidates in the profiles that
    tune, but measured only by an experiment that names it: the EAGLE-3 and OPT-Tree trees, which the committed
    results predate, in the ``talon`` experiment).
    ``paper(settings, dataset)``: the paper's setting from a profile's ``PaperSettings`` (the profile may
    override it). ``reported``: its key in ``data/paper_reported.json``'s Table 1, 3 and 5, if the paper reports it;
    ``reported_v1``: its key in the earlier paper version's Table 1 (``earlier_version_500_tokens``);
    ``reported_talon``: its row in TALON's Tables 1 and 3 (``data/talon_reported.json``), if TALON reports it.
    ``decode(target, draft, prompt, T, cfg, opts)`` runs it (``opts``: ``core.loop.Options``); ``drafts``:
    whether it needs a draft (HF's AR does not); ``impl``: whose implementation decodes it ("ours", or
    "transformers" for HF's own loop, "llama.cpp": its speedups are shown over that implementation's AR as well as
    ours; "engine" names only how our runners compute, ``harness.models.Engine``); ``impl_ar``: this method is its
    implementation's own AR, the row its other rows are also divided by (a
    method whose configs hold several modes, like llama.cpp's, tags that row ``own_ar`` instead);
    ``describe(cfg)``: a dict its records carry under ``engine_info``; ``unavailable()``: what this machine lacks to
    measure it (a message naming the missing tool and how to get it), None when nothing is missing. It decides
    what gets measured, never what gets rendered: committed records of a method render everywhere.

    What tables and experiments ask of a method: ``exact``: greedy, it emits AR's tokens (sampled, it keeps the
    target's law); StreamingLLM's window changes what the target sees, so it is not. ``family``: the method it is a
    variant of in comparisons (the cost-aware extension is DynaTree's; None: its own). ``controls``: its main rows
    are also run with the draft network alone (the draft's context lookup off). ``trees``: it drafts trees worth
    drawing (notebook 09). ``tuning_from``: a method whose tuned setting it adopts (``adopt(own, theirs)``) where the
    profile tunes and it has no candidates of its own (StreamingLLM drafts a chain: linear's K). ``for_heads``: its
    paper drafts with a feature head (EAGLE-3's); on a draft model it drafts the same trees, on purpose: the
    comparison of policies on one draft."""

    name: str
    config: type | None
    label: str
    color: str
    role: str
    tuned: bool = False
    paper: Callable | None = None
    decode: Callable | None = tree_decoder
    reported: str | None = None
    reported_v1: str | None = None
    reported_talon: str | None = None
    drafts: bool = True
    impl: str = "ours"
    impl_ar: bool = False
    describe: Callable | None = None  # config -> what its records log about another engine (version, build, command)
    unavailable: Callable[[], str | None] = lambda: None
    exact: bool = True
    family: str | None = None
    controls: bool = False
    trees: bool = False
    tuning_from: str | None = None
    adopt: Callable | None = None  # (its own paper setting, tuning_from's tuned setting) -> its setting
    for_heads: bool = False  # designed for a feature head (EAGLE-3's tree, OPT-Tree, TALON); runs on a draft model too


REGISTRY: dict[str, Method] = {}
AR = "ar"  # greedy autoregressive decoding with our engine: every speedup's reference; it has no config
LINEAR, FIXED_TREE, DYNATREE, TALON = LinearConfig.method, FixedTreeConfig.method, DynaTreeConfig.method, TalonConfig.method
DYNATREE_COST = CostAwareConfig.method
EAGLE3_TREE, OPT_TREE = Eagle3TreeConfig.method, OptTreeConfig.method


def register(method: Method) -> Method:
    """Add a method (its position in the registry is its order in tables and plots)."""
    if method.name in REGISTRY or method.name == AR and method.config is not None:
        raise ValueError(f"method {method.name!r} is already registered")
    if method.role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {method.role!r}")
    if method.config is not None and getattr(method.config, "method", None) != method.name:
        raise ValueError(f"{method.config.__name__}.method must be {method.name!r} (the registry's name)")
    if method.tuning_from is not None and method.adopt is None:
        raise ValueError(f"method {method.name!r} names tuning_from={method.tuning_from!r} but no adopt function")
    REGISTRY[method.name] = method
    return method


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)


for _m in (
    Method(name=AR, config=None, label="AR", color="#7f7f7f", role="paper", decode=None, reported=AR, reported_v1=AR,
           drafts=False),
    Method(name=LINEAR, config=LinearConfig, label="Linear Spec", color="#1f77b4", role="paper", tuned=True,
           paper=lambda s, ds: LinearConfig(s.linear_K[ds]), reported="linear_spec", reported_v1="linear_spec_K6",
           reported_talon="SD", controls=True),
    Method(name=FIXED_TREE, config=FixedTreeConfig, label="Fixed Tree", color="#ff7f0e", role="paper", tuned=True,
           paper=lambda s, ds: s.fixed, reported=FIXED_TREE, controls=True, trees=True),
    Method(name=DYNATREE, config=DynaTreeConfig, label="DynaTree", color="#2ca02c", role="paper", tuned=True,
           paper=lambda s, ds: s.dynatree[ds], reported=DYNATREE, reported_v1="dynatree_v1", controls=True,
           trees=True),
    Method(name=DYNATREE_COST, config=CostAwareConfig, label="DynaTree + cost budget (ext.)", color="#98df8a",
           role="extension", family=DYNATREE, controls=True),
    Method(name=HFAssistedConfig.method, config=HFAssistedConfig, label="HF Assisted", color="#9467bd", role="seed",
           tuned=True, paper=lambda s, ds: HFAssistedConfig(s.linear_K[ds], s.hf_schedule, 0.0), decode=generate_hf,
           impl="transformers", reported_v1="hf_assisted"),
    Method(name=HFARConfig.method, config=HFARConfig, label="HF AR", color="#bcbd22", role="seed",
           paper=lambda s, ds: HFARConfig(), decode=generate_hf, drafts=False, impl="transformers", impl_ar=True),
    Method(name=StreamingConfig.method, config=StreamingConfig, label="StreamingLLM + Spec", color="#8c564b",
           role="seed", paper=lambda s, ds: StreamingConfig(s.linear_K[ds], s.streaming_cache, 4),
           decode=generate_streaming_spec, exact=False, tuning_from=LINEAR, reported_v1="streamingllm_spec_cache1024",
           adopt=lambda own, chain: dataclasses.replace(own, K=chain.K)),
    Method(name=TALON, config=TalonConfig, label="TALON", color="#d62728", role="seed", tuned=True,
           paper=lambda s, ds: s.talon, reported_talon="TALON", trees=True, for_heads=True),
    Method(name=EAGLE3_TREE, config=Eagle3TreeConfig, label="EAGLE-3 tree", color="#e377c2", role="opt_in",
           tuned=True, paper=lambda s, ds: Eagle3TreeConfig(), reported_talon="EAGLE-3", trees=True, for_heads=True),
    Method(name=OPT_TREE, config=OptTreeConfig, label="OPT-Tree", color="#393b79", role="opt_in", tuned=True,
           paper=lambda s, ds: OptTreeConfig(), reported_talon="OPT-Tree", trees=True,
           for_heads=True),
    Method(name=HardwareTalonConfig.method, config=HardwareTalonConfig, label="TALON, machine budget",
           color="#ad494a", role="opt_in", paper=lambda s, ds: HardwareTalonConfig(), trees=True, for_heads=True),
):
    register(_m)


def method_names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def names(role: str) -> tuple[str, ...]:
    """The registered methods of one role, in registry order."""
    return tuple(n for n, m in REGISTRY.items() if m.role == role)


def family(name: str) -> tuple[str, ...]:
    """``name`` and the registered methods declared of its family (``Method.family``), in registry order."""
    return tuple(n for n, m in REGISTRY.items() if n == name or m.family == name)


def inexact() -> tuple[str, ...]:
    """The registered methods that do not keep the target's law (greedy: AR's tokens)."""
    return tuple(n for n, m in REGISTRY.items() if not m.exact)


def impl_ars() -> tuple[str, ...]:
    """The registered methods that are another implementation's own AR."""
    return tuple(n for n, m in REGISTRY.items() if m.impl_ar)


def of_config(cfg) -> Method:
    """The registered method a config object belongs to."""
    m = REGISTRY.get(getattr(type(cfg), "method", None))
    if m is None or m.config is not type(cfg):
        raise TypeError(f"method must be a name in {method_names()} or a registered method's config "
                        f"({[m.config.__name__ for m in REGISTRY.values() if m.config]}), got {type(cfg).__name__}")
    return m


def method_config(method):
    """A method given by name (default settings), config object, or None (AR)."""
    if method is None or method == AR:
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
             generator: torch.Generator | None = None, session: Session | None = None) -> GenerationResult:
    """``T`` new tokens with ``method`` (see module docstring): greedy at ``temperature=0``, else sampled from the
    target's softmax at that temperature after ``top_k`` / ``top_p``, every draw from ``generator`` (a run is
    reproducible from its seed), the target's law kept exactly by every method but StreamingLLM (whose window
    changes what the target sees). ``record_trees``: keep the first that many drafted trees of a tree method in
    ``result.trees`` (tokens are unchanged). ``session``: a ``Session`` kept across a run's generations, for a policy
    that adapts across prompts (``DynaTreeConfig.history_scope="prompt"``)."""
    cfg = method_config(method)
    opts = Options(kv_mode, eos_token_id, record_trees, Sampling(temperature, top_k, top_p), generator, session)
    if cfg is None:
        return generate_ar(target, prompt, T, opts)
    m = of_config(cfg)
    if draft is None and m.drafts:
        raise ValueError(f"{type(cfg).__name__} needs a draft model (draft=...)")
    return m.decode(target, draft, prompt, T, cfg, opts)
