"""Profiles: one place that says which models, data, sizes and method settings an experiment uses.

- ``paper``: Pythia-2.8B target / Pythia-70M draft from the hub, GPU, fp16, the paper's protocol.
- ``paper-dryrun``: the paper profile's code path on a CPU (bf16, every notebook and experiment, sweeps
  scaled down) with tiny random models in the Pythia-2.8B / 70M shape family and the local data.
- ``cpu`` (default): SmolLM2-135M-Instruct target and our distilled draft, offline, 2 CPU cores, timed
  in bf16 on the fast path (plus an fp32 exactness run).
- ``smoke``: tiny random models and short runs (seconds): tests and notebook regression.

A profile is a frozen ``Profile`` of named parts, each a frozen dataclass: ``models`` (the pair, precision and
engine), ``protocol`` (prompts, lengths, repetitions), ``paper`` (the paper's method settings, Appendix A),
``tuning`` (equal-budget candidates per method family, measured on tuning prompts; ``experiments.tuned`` picks
each family's fastest from the logged JSON), ``sweeps`` (notebooks 04-08) and ``extras`` (notebooks 00 and 09,
the cost-aware extension). ``get_profile(name, T=128)`` overrides a field by its name (the first part that has it)
or as ``part.field`` (``**{"tuning.n": 1}``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from ...core.loop import KV_MODES
from ...core.policies.dynatree import DynaTreeConfig
from ...core.policies.static import FixedTreeConfig
from ...core.policies.talon import TalonConfig
from ...core.validate import is_int, is_real, require
from ... import methods as registry
from .models import Engine, load_pair
from .workloads import HUMANEVAL, ULTRACHAT_EVAL, WORKLOADS

DTYPES = ("float32", "bfloat16", "float16")
KINDS = {"int": is_int, "float": is_real, "bool": lambda x: isinstance(x, bool), "str": lambda x: isinstance(x, str),
         "tuple": lambda x: isinstance(x, tuple), "dict": lambda x: isinstance(x, dict), "None": lambda x: x is None}
KIND_NAMES = {"int": "an integer", "float": "a number", "bool": "True or False", "str": "a string", "tuple": "a tuple",
              "dict": "a dict", "None": "None"}
EXAMPLES = {"L_max": "{'wikitext2': 200, 'pg19': 250}", "temperatures": "(1.0,)", "workloads": "('wikitext2', 'pg19')"}
# counts that must be >= 1 (every other count >= 0)
POSITIVE = {"T", "n_prompts", "n_questions", "replicates", "n", "streaming_cache", "draft_vocab", "threads"}


def check_part(part, positive: frozenset | set = POSITIVE) -> None:
    """Every field of a profile part holds a value of its annotated kind (``int``, ``str | None``, ``tuple``, ...; a
    field of another class is its class's to check), and every count is >= 0, or >= 1 where ``POSITIVE`` names it: a
    ``--set`` typo fails here, before anything loads, naming the field and the value."""
    for f in dataclasses.fields(part):
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))  # a class: its name
        value, kinds = getattr(part, f.name), [k.strip() for k in kind.split("|")]
        where = f"{part.part}.{f.name}"
        if all(k in KINDS for k in kinds) and not any(KINDS[k](value) for k in kinds):
            example = f" such as {EXAMPLES[f.name]}" if f.name in EXAMPLES else ""
            raise ValueError(f"{where} must be {' or '.join(KIND_NAMES[k] for k in kinds)}{example}, got {value!r}")
        least = 1 if f.name in positive else 0
        require(not is_int(value) or value >= least, f"{where} must be an integer >= {least}, got {value!r}")


@dataclass(frozen=True)
class Models:
    """The pair and how it runs. ``exact_dtype``: an extra main-table run in this precision, asserted equal to
    AR. ``context_override`` raises both models' declared context (rotary models run past it on purpose: the
    paper's PG-19 setting). ``draft_vocab``: the draft scores only its that many most frequent tokens (FR-Spec;
    the target verifies every token, so exactness is untouched). ``draft_lookup``: the draft mixes in its context
    lookup (``core.drafts.lookup``). Both serve every method drafting with our loop; HF assisted drafts with
    transformers' own loop (full head, no lookup). ``machine``: the machine kind whose records these are
    (``harness.setup.machine``): None for the profile's reference machine (``results/<profile>/``), else a kind such as
    ``intel-amx``, whose records live in ``results/<profile>@<kind>/`` beside the reference machine's."""

    target: str            # hub id, local path, "embedded:target", "tiny:target", ...
    draft: str
    device: str = "cpu"
    dtype: str = "float32"               # precision of the timed runs
    engine: Engine = Engine()
    exact_dtype: str | None = None
    context_override: int | None = None
    draft_vocab: int | None = None
    draft_lookup: bool = False
    threads: int | None = None
    machine: str | None = None
    part: ClassVar[str] = "models"

    def __post_init__(self) -> None:
        check_part(self)
        for name in ("dtype", "exact_dtype"):
            value = getattr(self, name)
            require(value is None and name == "exact_dtype" or value in DTYPES,
                    f"models.{name} must be one of {DTYPES}, got {value!r}")

    def load_pair(self, dtype: str | None = None, max_len: int = 2048, with_draft: bool = True,
                  models_for: str = "ours"):
        """Target, draft and tokenizer on this profile's device and engine, in ``dtype`` (default: the timed
        precision), with static caches of ``max_len`` slots; ``with_draft=False``: the draft is None. ``models_for``:
        whose loop runs them (``Method.impl``): "ours" (runners holding the only copy of every weight, on a static
        engine), "transformers" (the transformers models alone: no runner) or "both" (runners beside models that
        keep their own weights: two copies, for a process that runs both loops)."""
        if models_for not in ("ours", "transformers", "both"):
            raise ValueError(f"models_for must be 'ours', 'transformers' or 'both', got {models_for!r}")
        engine = Engine() if models_for == "transformers" else self.engine
        return load_pair(self.target, self.draft if with_draft else None, self.device, dtype or self.dtype,
                         context_override=self.context_override, engine=engine, max_len=max_len, draft_vocab=self.draft_vocab, draft_lookup=self.draft_lookup,
                         keep_models=models_for == "both")


def models_for(methods) -> str:
    """Whose loop runs the models of ``methods`` (registered names), as ``Models.load_pair`` takes it: "ours",
    "transformers", or "both" where the methods mix the two (the main table); methods of another engine (llama.cpp)
    load nothing of ours."""
    engines = {registry.REGISTRY[m].impl for m in methods} & {"ours", "transformers"}
    return "both" if len(engines) == 2 else next(iter(engines), "ours")


@dataclass(frozen=True)
class Protocol:
    """How prompts are drawn and decoded. ``workloads``: the continuation datasets (prompts of ``L_max`` tokens
    each, continued for ``T`` tokens) and ``spec_bench`` (questions through the chat template, answered to EOS or
    ``T`` tokens; longer than ``max_prompt`` tokens, where set, cut to their last ``max_prompt``). Per main-table
    cell: ``n_prompts`` test prompts per continuation dataset and ``n_questions`` per Spec-Bench category
    (``n_exact`` and one per category in the exactness run; a ``slow_share`` of them for methods on transformers'
    engine), after ``warmup`` discarded runs, in an order seeded by ``seed``; the main table is measured
    ``replicates`` times, each in its own process; the sampling experiment runs at ``temperatures``. ``idle_machine``:
    its timings back claims, so a run waits for nothing else to compute (False: the tiny profiles, whose timings
    only show that the pipeline measures)."""

    workloads: tuple = ("wikitext2", "pg19")
    L_max: dict = field(default_factory=lambda: {"wikitext2": 800, "pg19": 1000})
    T: int = 1500
    n_prompts: int = 10
    n_questions: int = 10
    n_exact: int = 0
    slow_share: float = 1 / 3
    warmup: int = 2
    seed: int = 0
    replicates: int = 2
    temperatures: tuple = (1.0,)
    max_prompt: int = 0
    kv_mode: str = "gather"
    data_source: str = "local"           # "hub" or "local"
    prompt_style: str = "splits"         # "authors": the authors' character-cut prompts (``prompts.authors_prompts``)
    idle_machine: bool = True            # timed runs refuse a busy machine and hold its lock (``load.guard``)
    part: ClassVar[str] = "protocol"

    def __post_init__(self) -> None:
        check_part(self)
        unknown = [w for w in self.workloads if w not in WORKLOADS]
        require(not unknown, f"protocol.workloads: unknown {unknown}; choose from {sorted(WORKLOADS)}")
        require(all(w in WORKLOADS and is_int(n) and n >= 1 for w, n in self.L_max.items()),
                f"protocol.L_max must map workloads to prompt tokens >= 1, e.g. {{'wikitext2': 200}}, got {self.L_max!r}")
        require(all(is_real(t) and t > 0 for t in self.temperatures),
                f"protocol.temperatures must be numbers > 0, e.g. (1.0,), got {self.temperatures!r}")
        require(0 < self.slow_share <= 1, f"protocol.slow_share must be in (0, 1], got {self.slow_share!r}")
        for name, allowed in (("kv_mode", KV_MODES), ("data_source", ("hub", "local")),
                              ("prompt_style", ("splits", "authors"))):
            require(getattr(self, name) in allowed, f"protocol.{name} must be one of {allowed}, got "
                                                    f"{getattr(self, name)!r}")


@dataclass(frozen=True)
class PaperSettings:
    """The paper's method settings (Appendix A; ``methods.Study.paper`` reads them). HF assisted drafts
    ``linear_K`` tokens with ``hf_schedule``; StreamingLLM + spec keeps ``streaming_cache`` slots."""

    linear_K: dict = field(default_factory=lambda: {"wikitext2": 8, "pg19": 5})
    fixed: FixedTreeConfig = FixedTreeConfig(D=8, B=3, tau=0.1, n_max=256)
    dynatree: dict = field(default_factory=lambda: {"wikitext2": DynaTreeConfig(D_max=8),
                                                    "pg19": DynaTreeConfig(D_max=9)})
    talon: TalonConfig = TalonConfig(mu=0.03, N=60, K=10)
    hf_schedule: str = "constant"
    streaming_cache: int = 1024
    part: ClassVar[str] = "paper"

    def __post_init__(self) -> None:
        check_part(self)


@dataclass(frozen=True)
class Tuning:
    """Equal-budget tuning: ``candidates`` per method family (the same number each, as each method declares them:
    ``methods.tuning_candidates``; None: no tuning), measured
    on ``n`` tuning prompts per continuation dataset and ``n_questions`` per Spec-Bench category (the tuning
    split, never a test prompt) in an order seeded by ``seed``, decoding ``T`` tokens (None: the protocol's);
    greedy, and again at the first of the protocol's temperatures for the sampling experiment."""

    candidates: dict | None = None
    seed: int = 99
    n: int = 3
    n_questions: int = 1
    T: int | None = None
    part: ClassVar[str] = "tuning"

    def __post_init__(self) -> None:
        check_part(self)


@dataclass(frozen=True)
class Sweeps:
    """Notebooks 04-07: the ablation, the sweeps and 06's grids, each on ``n_prompts`` prompts of ``workload``
    (WikiText-2, as the paper's)."""

    T_list: tuple = (100, 200, 300, 500, 1000, 1500)
    L_max_list: tuple = (100, 200, 400, 800)
    fixed_grid: dict = field(default_factory=lambda: {"D": (3, 4, 5, 6, 7, 8), "B": (2, 3, 4),
                                                      "tau": (0.01, 0.02, 0.03, 0.05, 0.1)})
    threshold_pairs: tuple = ((0.95, 0.5), (0.9, 0.4), (0.9, 0.2), (0.8, 0.3), (0.7, 0.2), (0.6, 0.1))
    breadth_list: tuple = ((1, 1, 2), (1, 2, 3), (1, 2, 4), (2, 2, 3), (2, 3, 4))
    depth_list: tuple = ((3, 6), (4, 7), (5, 8), (6, 10), (8, 12))
    n_prompts: int = 10
    workload: str = "wikitext2"
    part: ClassVar[str] = "sweeps"

    def __post_init__(self) -> None:
        check_part(self)


@dataclass(frozen=True)
class Extras:
    """What several experiments share: the profile's feature head (``head``: a draft reference such as
    ``eagle3:<folder>``, None: the profile has none), whether the tables add the cost-aware extension (built from this
    profile's measured forward costs, ``results/<profile>/costs.json``; tuned over DynaTree's candidates with the cut
    on where the profile tunes), and the seconds over which ``costs.json`` spreads its paired rounds of the
    draft/target one-token cost (``cost_span_s``: on a machine whose memory bandwidth drifts, the rounds then meet its
    phases). An experiment's own settings live in its module (``Experiment.settings``; a profile sets them in
    ``Profile.settings``, a user with ``--set <experiment>.<field>=...``)."""

    cost_aware: bool = True
    cost_span_s: float = 0.0
    head: str | None = None
    part: ClassVar[str] = "extras"

    def __post_init__(self) -> None:
        check_part(self)


PARTS = ("models", "protocol", "paper", "tuning", "sweeps", "extras")


@dataclass(frozen=True)
class Profile:
    name: str
    models: Models
    protocol: Protocol = Protocol()
    paper: PaperSettings = PaperSettings()
    tuning: Tuning = Tuning()
    sweeps: Sweeps = Sweeps()
    extras: Extras = Extras()
    settings: tuple = ()  # an experiment's own settings: ((experiment, ((field, value), ...)), ...); ``settings_for``
    # ((kind, settings), ...): the settings another machine kind's committed records were measured at, where they
    # differ from ``settings`` (records that predate a change of the defaults); reading that kind applies them
    kind_settings: tuple = ()

    def settings_for(self, experiment: str) -> dict:
        """The fields this profile sets of ``experiment``'s own settings (``Experiment.settings``; its defaults
        fill the rest)."""
        return dict(dict(self.settings).get(experiment, ()))

    def method(self, name: str, dataset: str):
        """A registered method configured with the paper's settings for ``dataset`` (None for AR). A method without
        a setting of its own here (a peer engine's, the cost-aware extension built from measured costs) is refused
        by name: None would decode AR in its place."""
        if name not in registry.REGISTRY:
            raise ValueError(f"unknown method {name!r}; choose one of {registry.method_names()}")
        if name == registry.AR:
            return None
        paper = registry.REGISTRY[name].study.paper
        if paper is None:
            raise ValueError(f"method {name!r} has no setting of its own in profile {self.name!r}: "
                             f"{registry.REGISTRY[name].study.setting_from}")
        try:
            return paper(self.paper, dataset)
        except KeyError:
            raise ValueError(f"profile {self.name!r} has no paper setting of {name!r} for workload {dataset!r}; "
                             "give one in its PaperSettings") from None

    @property
    def workloads(self) -> tuple[str, ...]:
        return tuple(self.protocol.workloads)

    @property
    def results_folder(self) -> str:
        """The folder under ``results/`` of this profile's records on its machine (``Models.machine``)."""
        return self.name if self.models.machine is None else f"{self.name}@{self.models.machine}"

    def on_reference_machine(self) -> "Profile":
        """This profile with its reference machine's records (``results/<profile>/``)."""
        return dataclasses.replace(self, models=dataclasses.replace(self.models, machine=None))

    def L_max(self, workload: str) -> int:
        """Prompt tokens of a continuation workload (0 for Spec-Bench, whose prompts are whole questions)."""
        return self.protocol.L_max.get(workload, 0)

    def prompt_seed(self, split: str) -> int:
        """The seed that draws a split's prompts: the tuning's for the tuning split, the protocol's for the others."""
        return self.tuning.seed if split == "tuning" else self.protocol.seed

    @property
    def max_len(self) -> int:
        """Static-cache slots for the committed tokens of the longest run of this profile (Spec-Bench prompts
        run to a few thousand tokens)."""
        L, s = self.protocol.L_max, self.sweeps
        longest = max(max(L.values()) + max(self.protocol.T, *s.T_list), max(s.L_max_list) + self.protocol.T)
        if "spec_bench" in self.protocol.workloads:
            longest = max(longest, (self.protocol.max_prompt or 2048) + self.protocol.T)
        return longest

    def load_pair(self, dtype: str | None = None, with_draft: bool = True, models_for: str = "ours"):
        """The profile's models (``Models.load_pair``) with caches for its longest run."""
        return self.models.load_pair(dtype, self.max_len, with_draft, models_for)


def experiment_settings(**by_experiment: dict) -> tuple:
    """A profile's ``settings`` from ``experiment={field: value}`` keywords (hashable, as a frozen profile is)."""
    return tuple((name, tuple(sorted(fields.items()))) for name, fields in sorted(by_experiment.items()))


def with_setting(settings: tuple, experiment: str, field_name: str, value) -> tuple:
    """``settings`` with ``experiment``'s ``field_name`` set to ``value``."""
    by = {name: dict(fields) for name, fields in settings}
    by.setdefault(experiment, {})[field_name] = tuple(value) if isinstance(value, list) else value  # JSON's tuple
    return experiment_settings(**by)


def _authors_settings(**over) -> PaperSettings:
    """The authors' code's settings (their Table 1 scripts; ``docs/fidelity.md``): a top-1 root, tau on parents,
    rho_stop 0.1 and tau 0.05 for DynaTree, the per-prompt history controller; their fixed tree "D = 8" drafts a
    top-1 root plus 8 branching levels, 9 in all."""
    dt = dict(D0=5, B_min=1, B_mid=2, B_max=3, tau_h=0.9, tau_l=0.4, rho_stop=0.1, rho_deep=0.5, tau=0.05, n_max=256,
              W=10, a_star=0.7, root_siblings=False, tau_on_parent=True, history_scope="prompt")
    return PaperSettings(
        linear_K={"wikitext2": 8, "pg19": 5},
        fixed=FixedTreeConfig(D=9, B=3, tau=0.1, n_max=256, root_siblings=False, tau_on_parent=True),
        dynatree={"wikitext2": DynaTreeConfig(D_max=8, **dt), "pg19": DynaTreeConfig(D_max=9, **dt)}, **over)


# The paper profile reads L_max (800 / 1000) as tokens, the paper's text giving no unit: its prompts are about four
# times the authors' (who cut characters) and PG-19 runs past Pythia's 2048 positions (context_override). The
# authors profile follows their code instead: character-cut prompts, their settings, the rebuild commit.
PROFILES: dict[str, Profile] = {
    "paper": Profile(
        "paper", Models("EleutherAI/pythia-2.8b", "EleutherAI/pythia-70m", device="cuda", dtype="float16",
                        exact_dtype="float32", context_override=2560),
        Protocol(n_exact=2, data_source="hub")),
    "authors": Profile(
        "authors", Models("EleutherAI/pythia-2.8b", "EleutherAI/pythia-70m", device="cuda", dtype="float16",
                          exact_dtype="float32"),
        Protocol(n_exact=2, replicates=1, data_source="hub", prompt_style="authors", kv_mode="rebuild"),
        _authors_settings(), extras=Extras(cost_aware=False)),
    "authors-dryrun": Profile(
        "authors-dryrun", Models("tiny-pythia:target", "tiny-pythia:draft", dtype="bfloat16", exact_dtype="float32",
                                 threads=2),
        Protocol(L_max={"wikitext2": 200, "pg19": 250}, T=40, n_prompts=2, n_exact=1, warmup=1, replicates=1,
                 prompt_style="authors", kv_mode="rebuild", temperatures=(), idle_machine=False),
        _authors_settings(streaming_cache=102),
        sweeps=Sweeps(T_list=(10, 40), L_max_list=(100, 200), n_prompts=1, fixed_grid={"D": (3,), "B": (2,), "tau": (0.1,)},
                      threshold_pairs=((0.9, 0.4),), breadth_list=((1, 2, 3),), depth_list=((5, 8),)),
        extras=Extras(cost_aware=False), settings=experiment_settings(trees=dict(n_prompts=1, per_prompt=8))),
    "paper-dryrun": Profile(
        "paper-dryrun",
        Models("tiny-pythia:target", "tiny-pythia:draft", dtype="bfloat16", exact_dtype="float32", context_override=2560,
               threads=2),
        Protocol(L_max={"wikitext2": 80, "pg19": 100}, T=150, n_prompts=2, n_exact=2, warmup=1, idle_machine=False),
        PaperSettings(streaming_cache=102),
        sweeps=Sweeps(T_list=(10, 20, 30, 50, 100, 150), L_max_list=(10, 20, 40, 80), n_prompts=1,
                      fixed_grid={"D": (3, 8), "B": (2, 4), "tau": (0.01, 0.1)}, threshold_pairs=((0.95, 0.5), (0.6,
                                                                                                  0.1)),
                      breadth_list=((1, 1, 2), (2, 3, 4)), depth_list=((3, 6), (8, 12))),
        settings=experiment_settings(trees=dict(n_prompts=1, per_prompt=8))),
    # cpu: T=256 (the paper decodes 1500): at T=128 a 200-token prompt's prefill is a large share of AR's wall
    # time and its greedy loops have barely begun. Tuning decodes the test's T: acceptance grows along a
    # generation, so settings tuned on short runs would be tuned for another regime.
    # Sampling at T = 1 only (TALON's Table 3 setting): each temperature is another ~640 generations a replicate,
    # some of them on transformers' slow engine; add one with --set "temperatures=(1.0, 0.7)".
    # The timed experiments' prompt counts (peers, heads, talon, vllm, sampling, ablation, memory) are the claims
    # rule's minimums: 20 prompts per workload, two replicates for timing rows, 5 prompts for memory's bytes.
    # HumanEval and UltraChat (notebook 14's TALON experiment) take Spec-Bench's settings: questions to EOS. The
    # TALON experiment stops at 256 new tokens (TALON's 1,024 would make it hours on 2 cores).
    "cpu": Profile(
        "cpu",
        Models("embedded:target", "embedded:draft", dtype="bfloat16", engine=Engine("static+fused"),
               exact_dtype="float32", draft_vocab=8192, draft_lookup=True, threads=2),
        Protocol(workloads=("wikitext2", "pg19", "spec_bench"), L_max={"wikitext2": 200, "pg19": 250}, T=256,
                 n_prompts=24, n_questions=10, n_exact=2, warmup=1, temperatures=(1.0,)),
        PaperSettings(linear_K={"wikitext2": 8, "pg19": 5, "spec_bench": 5, HUMANEVAL: 5, ULTRACHAT_EVAL: 5},
                      streaming_cache=256,
                      dynatree={"wikitext2": DynaTreeConfig(D_max=8), "pg19": DynaTreeConfig(D_max=9),
                                "spec_bench": DynaTreeConfig(D_max=8), HUMANEVAL: DynaTreeConfig(D_max=8),
                                ULTRACHAT_EVAL: DynaTreeConfig(D_max=8)}),
        tuning=Tuning(registry.tuning_candidates("cpu"), n=3, n_questions=1),
        sweeps=Sweeps(T_list=(32, 64, 128, 256), L_max_list=(50, 100, 200, 400), n_prompts=2,
               fixed_grid={"D": (3, 4, 6), "B": (2, 3), "tau": (0.0, 0.05)},
               threshold_pairs=((0.9, 0.4), (0.7, 0.2), (0.5, 0.1), (0.3, 0.05)),
               breadth_list=((1, 1, 2), (1, 2, 3), (2, 2, 3)), depth_list=((3, 6), (4, 8), (6, 10))),
        extras=Extras(cost_span_s=180.0, head="eagle3:weights/smollm2-eagle3"),
        settings=experiment_settings(
            trees=dict(n_prompts=1), pair=dict(T=256, n_prompts=10, n_questions=4),
            peers=dict(n_prompts=20, n_questions=4), heads=dict(n_prompts=20, n_questions=4),
            talon=dict(T_cap=256, tuning_T=128, heads=("medusa:weights/smollm2-medusa", "hydra:weights/smollm2-hydra"),
                       peers=True, extension=True, n_prompts=20, n_questions=4),
            vllm=dict(n_prompts=20, n_questions=4),
            sampling=dict(min_prompts=20, min_questions=4, replicates=2), ablation=dict(min_prompts=20, replicates=2),
            memory=dict(n_prompts=5),
            frontier=dict(n_prompts=12, n_questions=2, heads=("medusa:weights/smollm2-medusa",
                                                              "hydra:weights/smollm2-hydra"),
                          draft="embedded:draft", draft_vocab=8192),
            control=dict(n_prompts=20, n_questions=2)),
        kind_settings=(("intel-amx", experiment_settings(heads=dict(n_prompts=4, n_questions=1),
                                                         talon=dict(n_prompts=4, n_questions=1))),)),
    "smoke": Profile(
        "smoke",
        Models("tiny:target", "tiny:draft", dtype="bfloat16", exact_dtype="float32", threads=1),
        Protocol(workloads=("wikitext2", "pg19", "spec_bench"), L_max={"wikitext2": 24, "pg19": 24}, T=24,
                 n_prompts=2, n_questions=1, n_exact=1, slow_share=0.5, warmup=1, temperatures=(1.0,), max_prompt=48,
                 idle_machine=False),
        PaperSettings(linear_K={"wikitext2": 4, "pg19": 3, "spec_bench": 3, HUMANEVAL: 3, ULTRACHAT_EVAL: 3},
                      fixed=FixedTreeConfig(D=4, B=2, tau=0.05, n_max=32),
                      dynatree={w: DynaTreeConfig(D_max=6, n_max=32)
                                for w in ("wikitext2", "pg19", "spec_bench", HUMANEVAL, ULTRACHAT_EVAL)},
                      talon=TalonConfig(mu=0.1, N=16, K=4), streaming_cache=32),
        tuning=Tuning(registry.tuning_candidates("tiny"), n=1, n_questions=1, T=16),
        sweeps=Sweeps(T_list=(8, 16, 24), L_max_list=(8, 16), n_prompts=1,
               fixed_grid={"D": (2, 4), "B": (2,), "tau": (0.05, 0.1)}, threshold_pairs=((0.9, 0.4), (0.7, 0.2)),
               breadth_list=((1, 2, 3),), depth_list=((3, 6),)),
        settings=experiment_settings(trees=dict(n_prompts=1, per_prompt=6), pair=dict(n_questions=1),
                                     control=dict(n_prompts=1), roofline=dict(phase_rounds=2))),
}


def _part_of(name: str) -> tuple[str, str]:
    """(part, field) of an override key: ``part.field``, or a bare field name: the first part that has it, in
    the order of ``PARTS`` (``T`` is the protocol's; the tuning's is ``tuning.T``)."""
    if "." in name:
        part, fld = name.split(".", 1)
        if part in PARTS and fld in {f.name for f in dataclasses.fields(PROFILE_PARTS[part])}:
            return part, fld
        raise ValueError(f"unknown profile field {name!r}; valid fields: {sorted(FIELDS)}")
    owners = [p for p in PARTS if name in {f.name for f in dataclasses.fields(PROFILE_PARTS[p])}]
    if not owners:
        raise ValueError(f"unknown profile field {name!r}; valid fields: {sorted(FIELDS)}")
    return owners[0], name


PROFILE_PARTS = {"models": Models, "protocol": Protocol, "paper": PaperSettings, "tuning": Tuning,
                 "sweeps": Sweeps, "extras": Extras}
FIELDS = {f.name for cls in PROFILE_PARTS.values() for f in dataclasses.fields(cls)}


def get_profile(name: str, **overrides) -> Profile:
    """A named profile with field overrides (e.g. ``T=64``, ``engine="eager"`` or ``**{"tuning.n": 1}``);
    unknown names or fields raise ValueError."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    prof, parts, settings = PROFILES[name], {}, PROFILES[name].settings
    for key, value in overrides.items():
        if "." in key and key.split(".", 1)[0] not in PARTS:  # an experiment's own setting (``experiment.field``):
            settings = with_setting(settings, *key.split(".", 1), value)  # the experiment checks it (``catalog``)
            continue
        part, fld = _part_of(key)
        if fld == "engine" and isinstance(value, str):
            value = Engine(value)
        if isinstance(value, list) and isinstance(getattr(getattr(prof, part), fld), tuple):
            value = tuple(value)  # a notebook's parameters come as JSON, where a tuple is a list
        parts.setdefault(part, {})[fld] = value
    return dataclasses.replace(prof, settings=settings,
                               **{p: dataclasses.replace(getattr(prof, p), **kw) for p, kw in parts.items()})
