"""Every method, registered once, and the one entry point ``generate``.

    generate(target, prompt, T)                                   greedy AR (our cached loop)
    generate(target, prompt, T, draft=d, method="dynatree")       a method by name, default settings
    generate(target, prompt, T, draft=d, method=DynaTreeConfig(tau_h=0.8))
    generate(target, prompt, T, draft=d, method="dynatree", sampling=Sampling(1.0, top_p=0.9), generator=g)

``target`` and ``draft`` are transformers models (run eagerly) or runners (``core.engines.static.StaticRunner``).

A method is its frozen config class plus one ``Method`` entry in ``REGISTRY`` (``register``): how it decodes
(``Method``), how reports show it (``Display``) and what experiments do with it (``Study``: its role, the paper's
setting, its tuning candidates). Profiles, experiments, tables, plots and the plan read the registry, so a new
method needs nothing else.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
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
from .extensions.control import ControlConfig
from .extensions.cost_aware import CostAwareConfig

ROLES = ("paper", "seed", "extension", "peer", "opt_in")


def tree_decoder(target, draft, prompt, T, cfg, *, opts: Options) -> GenerationResult:
    """A method whose config has ``policy()``: our speculative loop with that drafting policy."""
    return speculative_decode(target, draft, prompt, T, cfg.policy(opts.session), opts=opts)


@dataclass(frozen=True, kw_only=True)
class Display:
    """How tables and plots show a method (display only: records, cells and code key on ``Method.name``)."""

    label: str
    color: str


@dataclass(frozen=True, kw_only=True)
class Study:
    """What the experiments do with a method.

    ``role``: "paper" (the paper's Table 1 methods: every experiment runs them), "seed" (the other seed systems:
    the main table and memory), "extension" (ours, never in a paper method's place), "peer" (another engine on the
    same weights: its own experiment only) or "opt_in" (decoded and tested everywhere, measured only by an
    experiment that names it). ``paper(settings, workload)``: its setting from a profile's ``PaperSettings``.
    ``candidates``: its tuning candidates per tuning scale ("cpu", "tiny": a profile's ``Tuning`` takes one scale's,
    ``tuning_candidates``), the same number for every method; a method with none runs its paper setting, or adopts ``tuning_from``'s tuned setting through
    ``adopt(own, theirs)``. ``family``: the method it is a variant of in comparisons. ``controls``: its main rows
    are also run with the draft network alone. ``trees``: it drafts trees worth drawing (notebook 09).
    ``reported``, ``reported_v1``, ``reported_talon``: its keys in the papers' transcribed tables.
    ``budget(published, n)``: its setting at a budget of ``n`` verified draft nodes, its own budget knob turned from
    its published setting (the budget frontier, ``harness.experiments.frontier``); None: it has no such knob. ``setting_from``:
    where a method without a paper setting takes its settings (said to whoever asks a profile for one).
    ``test_config``: a small setting of it for tiny models (trees at least 3 deep and a dozen nodes at most), which the
    exactness and sampling tests run every registered method with; every method with a config but the peers
    declares one (a test says so)."""

    role: str
    paper: Callable | None = None
    candidates: dict[str, tuple] = field(default_factory=dict)
    tuning_from: str | None = None
    adopt: Callable | None = None
    family: str | None = None
    controls: bool = False
    trees: bool = False
    reported: str | None = None
    reported_v1: str | None = None
    reported_talon: str | None = None
    budget: Callable | None = None
    setting_from: str = "it has no default setting"
    test_config: object | None = None


@dataclass(frozen=True, kw_only=True)
class Method:
    """One decoding method: its name and config class, how it decodes, and beside that how it is shown and studied.

    ``decode(target, draft, prompt, T, cfg, opts)`` runs it; ``drafts``: it needs a draft (HF's AR does not);
    ``impl``: whose implementation decodes it ("ours", "transformers", "llama.cpp", "vllm"), and ``impl_ar``: it is
    that implementation's own AR, which its other rows are also divided by; ``exact``: greedy, it emits AR's
    tokens and sampled it keeps the target's law (StreamingLLM's window does not); ``for_heads``: its paper drafts
    with a feature head, and on a draft model it drafts the same trees on purpose. ``describe(cfg)``: what its
    records log about another engine; ``unavailable()``: what this machine lacks to measure it (None: nothing),
    which decides what is measured, never what is rendered."""

    name: str
    config: type | None
    display: Display
    study: Study
    decode: Callable | None = tree_decoder
    drafts: bool = True
    impl: str = "ours"
    impl_ar: bool = False
    exact: bool = True
    for_heads: bool = False
    describe: Callable | None = None
    unavailable: Callable[[], str | None] = lambda: None


REGISTRY: dict[str, Method] = {}
AR = "ar"  # greedy autoregressive decoding with our engine: every speedup's reference; it has no config
LINEAR, FIXED_TREE, DYNATREE, TALON = LinearConfig.method, FixedTreeConfig.method, DynaTreeConfig.method, TalonConfig.method
DYNATREE_COST = CostAwareConfig.method
EAGLE3_TREE, OPT_TREE = Eagle3TreeConfig.method, OptTreeConfig.method


def register(method: Method) -> Method:
    """Add a method (its position in the registry is its order in tables and plots)."""
    if method.name in REGISTRY or method.name == AR and method.config is not None:
        raise ValueError(f"method {method.name!r} is already registered")
    if method.study.role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {method.study.role!r}")
    if method.config is not None and getattr(method.config, "method", None) != method.name:
        raise ValueError(f"{method.config.__name__}.method must be {method.name!r} (the registry's name)")
    if method.study.tuning_from is not None and method.study.adopt is None:
        raise ValueError(f"method {method.name!r} names tuning_from={method.study.tuning_from!r} but no adopt function")
    REGISTRY[method.name] = method
    return method


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)


def _tuning(cpu: tuple, tiny: tuple) -> dict[str, tuple]:
    """Candidates per tuning scale: "cpu" (five: the paper's or its authors' setting first, then four around what
    suits a small draft; the tree methods at the same node budgets, 12 to 60) and "tiny" (two, for tiny models)."""
    return {"cpu": cpu, "tiny": tiny}


for _m in (
    Method(name=AR, config=None, display=Display(label="AR", color="#7f7f7f"), decode=None, drafts=False,
           study=Study(role="paper", reported=AR, reported_v1=AR)),
    Method(name=LINEAR, config=LinearConfig, display=Display(label="Linear Spec", color="#1f77b4"),
           study=Study(role="paper", paper=lambda s, ds: LinearConfig(K=s.linear_K[ds]), controls=True,
                       reported="linear_spec", reported_v1="linear_spec_K6", reported_talon="SD",
                       budget=lambda c, n: dataclasses.replace(c, K=n),
                       candidates=_tuning(tuple(LinearConfig(K=k) for k in (8, 3, 4, 5, 6)),
                                          tuple(LinearConfig(K=k) for k in (3, 4))),
                       test_config=LinearConfig(K=3))),
    Method(name=FIXED_TREE, config=FixedTreeConfig, display=Display(label="Fixed Tree", color="#ff7f0e"),
           study=Study(role="paper", paper=lambda s, ds: s.fixed, reported=FIXED_TREE, controls=True, trees=True,
                       budget=lambda c, n: dataclasses.replace(c, tau=0.0, n_max=n),  # its size, unpruned
                       candidates=_tuning(
                           (FixedTreeConfig(D=8, B=3, tau=0.1, n_max=256), FixedTreeConfig(D=4, B=2, tau=0.0, n_max=16),
                            FixedTreeConfig(D=5, B=2, tau=0.05, n_max=24), FixedTreeConfig(D=6, B=2, tau=0.02, n_max=32),
                            FixedTreeConfig(D=4, B=3, tau=0.05, n_max=24)),
                           (FixedTreeConfig(D=4, B=2, tau=0.05, n_max=32), FixedTreeConfig(D=3, B=2, tau=0.0, n_max=16))),
                       test_config=FixedTreeConfig(D=3, B=2, tau=0.0, n_max=10))),
    Method(name=DYNATREE, config=DynaTreeConfig, display=Display(label="DynaTree", color="#2ca02c"),
           study=Study(role="paper", paper=lambda s, ds: s.dynatree[ds], reported=DYNATREE, reported_v1="dynatree_v1",
                       controls=True, trees=True, budget=lambda c, n: dataclasses.replace(c, n_max=n), candidates=_tuning(
                           (DynaTreeConfig(),
                            DynaTreeConfig(D0=4, D_max=8, tau_h=0.8, tau_l=0.3, rho_stop=0.02, rho_deep=0.3, n_max=24),
                            DynaTreeConfig(D0=5, D_max=10, tau_h=0.7, tau_l=0.2, rho_stop=0.01, rho_deep=0.3, tau=0.0,
                                           n_max=24),
                            DynaTreeConfig(D0=4, D_max=8, B_max=2, tau_h=0.8, tau_l=0.4, rho_stop=0.02, rho_deep=0.4,
                                           n_max=16),
                            DynaTreeConfig(D0=6, D_max=10, tau_h=0.6, tau_l=0.2, rho_stop=0.02, rho_deep=0.2, n_max=32)),
                           (DynaTreeConfig(D_max=6, n_max=32),
                            DynaTreeConfig(D0=3, D_max=6, tau_h=0.7, tau_l=0.2, n_max=16))),
                       test_config=DynaTreeConfig(D0=3, D_max=4, n_max=12))),
    Method(name=DYNATREE_COST, config=CostAwareConfig,
           display=Display(label="DynaTree + cost budget (ext.)", color="#98df8a"),
           # no budget knob on the frontier: its cut prices each tree on the machine's curves (counts of the machine)
           study=Study(role="extension", family=DYNATREE, controls=True,
                       setting_from="its trees are cut by the forward costs the profile measured (costs.json; "
                                     "harness.experiments.tuning.cost_aware)",
                       test_config=CostAwareConfig(DynaTreeConfig(D0=3, D_max=4, n_max=12)))),
    Method(name=HFAssistedConfig.method, config=HFAssistedConfig, display=Display(label="HF Assisted", color="#9467bd"),
           decode=generate_hf, impl="transformers",
           study=Study(role="seed", reported_v1="hf_assisted",
                       paper=lambda s, ds: HFAssistedConfig(num_assistant_tokens=s.linear_K[ds], schedule=s.hf_schedule),
                       candidates=_tuning(
                           (HFAssistedConfig(num_assistant_tokens=5, schedule="heuristic"),
                            *(HFAssistedConfig(num_assistant_tokens=k) for k in (3, 4, 5, 6))),
                           (HFAssistedConfig(num_assistant_tokens=3),
                            HFAssistedConfig(num_assistant_tokens=4, schedule="heuristic"))),
                       test_config=HFAssistedConfig(num_assistant_tokens=3))),
    Method(name=HFARConfig.method, config=HFARConfig, display=Display(label="HF AR", color="#bcbd22"),
           decode=generate_hf, drafts=False, impl="transformers", impl_ar=True,
           study=Study(role="seed", paper=lambda s, ds: HFARConfig(), test_config=HFARConfig())),
    Method(name=StreamingConfig.method, config=StreamingConfig,
           display=Display(label="StreamingLLM + Spec", color="#8c564b"), decode=generate_streaming_spec, exact=False,
           study=Study(role="seed", paper=lambda s, ds: StreamingConfig(s.linear_K[ds], s.streaming_cache, 4),
                       tuning_from=LINEAR, adopt=lambda own, chain: dataclasses.replace(own, K=chain.K),
                       reported_v1="streamingllm_spec_cache1024", test_config=StreamingConfig(3, 32, 2))),
    Method(name=TALON, config=TalonConfig, display=Display(label="TALON", color="#d62728"), for_heads=True,
           study=Study(role="seed", paper=lambda s, ds: s.talon, reported_talon="TALON", trees=True,
                       budget=lambda c, n: dataclasses.replace(c, N=n),
                       candidates=_tuning(
                           (TalonConfig(mu=0.03, N=60, K=10), TalonConfig(mu=0.05, N=16, K=3),
                            TalonConfig(mu=0.1, N=24, K=4), TalonConfig(mu=0.05, N=32, K=5),
                            TalonConfig(mu=0.2, N=12, K=2)),
                           (TalonConfig(mu=0.1, N=16, K=4), TalonConfig(mu=0.2, N=8, K=2))),
                       test_config=TalonConfig(mu=0.1, N=8, K=3))),
    Method(name=EAGLE3_TREE, config=Eagle3TreeConfig, display=Display(label="EAGLE-3 tree", color="#e377c2"),
           for_heads=True,
           study=Study(role="opt_in", paper=lambda s, ds: Eagle3TreeConfig(), reported_talon="EAGLE-3", trees=True,
                       budget=lambda c, n: dataclasses.replace(c, total_tokens=n + 1),  # the root is one of them
                       candidates=_tuning(
                           (Eagle3TreeConfig(), *(Eagle3TreeConfig(depth=d, top_k=k, total_tokens=n)
                                                  for d, k, n in ((4, 4, 17), (5, 4, 25), (6, 6, 33), (3, 3, 13)))),
                           (Eagle3TreeConfig(depth=3, top_k=3, total_tokens=17),
                            Eagle3TreeConfig(depth=2, top_k=2, total_tokens=9))),
                       test_config=Eagle3TreeConfig(depth=3, top_k=3, total_tokens=10))),
    Method(name=OPT_TREE, config=OptTreeConfig, display=Display(label="OPT-Tree", color="#7b4173"), for_heads=True,
           study=Study(role="opt_in", paper=lambda s, ds: OptTreeConfig(), reported_talon="OPT-Tree", trees=True,
                       budget=lambda c, n: dataclasses.replace(c, n=n),
                       candidates=_tuning(
                           (OptTreeConfig(), *(OptTreeConfig(n=n, delta=delta, D=d)
                                               for n, delta, d in ((16, 0.1, 8), (24, 0.1, 10), (32, 0.05, 10),
                                                                   (12, 0.0, 8)))),
                           (OptTreeConfig(n=16, delta=0.1, D=6), OptTreeConfig(n=8, delta=0.0, D=6))),
                       test_config=OptTreeConfig(n=8, delta=0.0, D=4))),
    Method(name=HardwareTalonConfig.method, config=HardwareTalonConfig, for_heads=True,
           display=Display(label="TALON, machine budget", color="#ad494a"),
           study=Study(role="opt_in", paper=lambda s, ds: HardwareTalonConfig(), trees=True,
                       test_config=HardwareTalonConfig(((1, 1.0), (16, 1.2)), mu=0.1, K=3))),
):
    register(_m)


def tuning_candidates(scale: str) -> dict[str, tuple]:
    """{method: its candidates} at one tuning scale, for the registered methods that declare any."""
    return {n: m.study.candidates[scale] for n, m in REGISTRY.items() if scale in m.study.candidates}


def method_names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def names(role: str) -> tuple[str, ...]:
    """The registered methods of one role, in registry order."""
    return tuple(n for n, m in REGISTRY.items() if m.study.role == role)


def family(name: str) -> tuple[str, ...]:
    """``name`` and the registered methods declared of its family (``Study.family``), in registry order."""
    return tuple(n for n, m in REGISTRY.items() if n == name or m.study.family == name)


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


def generate(target, prompt, T: int, *, draft=None, method=None, sampling: Sampling = Sampling(),
             kv_mode: str = "gather", eos_token_id: int | None = None, record_trees: int = 0,
             generator: torch.Generator | None = None, session: Session | None = None,
             control: ControlConfig | None = None) -> GenerationResult:
    """``T`` new tokens with ``method`` (see module docstring): greedy (``Sampling()``, the default), else sampled
    from the target's law that ``sampling`` gives (its temperature, top-k and top-p), every draw from ``generator``
    (a run is reproducible from its seed), the law kept exactly by every method but StreamingLLM (whose window
    changes what the target sees). ``record_trees``: keep the first that many drafted trees of a tree method in
    ``result.trees`` (tokens are unchanged). ``session``: a ``Session`` kept across a run's generations, for a policy
    that adapts across prompts (``DynaTreeConfig.history_scope="prompt"``). ``control``: a ``ControlConfig`` that
    sizes each tree of a tree method from the acceptance it observes, down to a plain AR step
    (``extensions.control``; ``result.decisions`` says what it chose and why)."""
    if not isinstance(sampling, Sampling):
        raise TypeError(f"sampling must be a Sampling (e.g. Sampling(temperature=1.0, top_p=0.9)), got "
                        f"{type(sampling).__name__}")
    cfg = method_config(method)
    opts = Options(kv_mode=kv_mode, eos_token_id=eos_token_id, record_trees=record_trees, sampling=sampling,
                   generator=generator, session=session)
    if cfg is None:
        return generate_ar(target, prompt, T, opts)
    m = of_config(cfg)
    if draft is None and m.drafts:
        raise ValueError(f"{type(cfg).__name__} needs a draft model (draft=...)")
    if control is not None:
        return controlled(target, draft, prompt, T, cfg=cfg, opts=opts, control=control)
    return m.decode(target, draft, prompt, T, cfg, opts=opts)


def controlled(target, draft, prompt, T, *, cfg, opts: Options, control: ControlConfig) -> GenerationResult:
    """A tree method with each tree's budget chosen by ``control`` (refused for a method that drafts no tree of
    our loop)."""
    if not isinstance(control, ControlConfig):
        raise TypeError(f"control must be a ControlConfig or None, got {type(control).__name__}")
    m = of_config(cfg)
    if m.decode is not tree_decoder:
        raise ValueError(f"control= sizes the trees of our speculative loop; method {m.name!r} decodes through "
                         f"{m.impl}'s own loop, so there is no tree to size. Use one of {controllable()}")
    return speculative_decode(target, draft, prompt, T, control.wrap(cfg.policy(opts.session)), opts=opts)


def controllable() -> tuple[str, ...]:
    """The registered methods whose trees a controller can size (they draft through our loop)."""
    return tuple(n for n, m in REGISTRY.items() if m.decode is tree_decoder and m.config is not None)
