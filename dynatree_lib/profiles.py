"""Profiles: one place that says which models, data, sizes and method settings an experiment uses.

- ``paper``: Pythia-2.8B target / Pythia-70M draft from the hub, GPU, fp16, the paper's protocol.
- ``paper-dryrun``: the paper profile's code path on a CPU (bf16, every notebook and experiment, sweeps
  scaled down) with tiny random models in the Pythia-2.8B / 70M shape family and the local data.
- ``cpu`` (default): SmolLM2-135M-Instruct target and our distilled draft, offline, 2 CPU cores, timed
  in bf16 on the fast path (plus an fp32 exactness run).
- ``smoke``: tiny random models and short runs (seconds): tests and notebook regression.

Method settings. ``linear_K``, ``fixed``, ``dynatree``, ``talon`` and ``hf_schedule`` are the *paper's*
settings (Appendix A; for the cpu profile the paper's values as they are). Where ``tuning`` is set, every
method family also gets the best of an equal number of candidates measured on tuning prompts (seed
``tuning_seed``, disjoint from the test prompts): ``experiments.tuned`` picks them from the logged JSON.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .baselines import HFAssistedConfig, StreamingConfig
from .policies import DynaTreeConfig, FixedTreeConfig, LinearConfig, TalonConfig

METHODS = ("ar", "linear", "fixed_tree", "dynatree")           # the paper's Table 1
EXTRA_METHODS = ("hf_assisted", "streaming_spec", "talon")     # the other seed systems (main results only)
TUNED = ("linear", "fixed_tree", "dynatree", "talon", "hf_assisted")  # families with a tuning budget


@dataclass(frozen=True)
class Profile:
    name: str
    target: str            # hub id, local path, "embedded:target" or "tiny:target"
    draft: str
    device: str = "cpu"
    dtype: str = "float32"                # precision of the timed runs
    engine: str = "eager"                 # "eager" (transformers) or the fast path: "static", "static+compile", "static+fused"
    exact_dtype: str | None = None        # an extra main-table run in this precision, asserted equal to AR
    n_exact: int = 0                      # prompts per dataset in that run
    data_source: str = "local"            # "hub" or "local"
    L_max: dict = field(default_factory=lambda: {"wikitext2": 800, "pg19": 1000})
    T: int = 1500
    n_prompts: int = 10
    warmup: int = 2
    seed: int = 0
    kv_mode: str = "gather"
    threads: int | None = None
    # The paper runs PG-19 at 1000 + 1500 = 2500 tokens on Pythia (2048 positions; rotary extends past
    # it). Our decoders refuse prompts + T beyond a model's declared context unless the profile raises it.
    context_override: int | None = None
    # the paper's method settings (Appendix A)
    linear_K: dict = field(default_factory=lambda: {"wikitext2": 8, "pg19": 5})
    fixed: FixedTreeConfig = FixedTreeConfig(D=8, B=3, tau=0.1, n_max=256)
    dynatree: dict = field(default_factory=lambda: {"wikitext2": DynaTreeConfig(D_max=8),
                                                    "pg19": DynaTreeConfig(D_max=9)})
    talon: TalonConfig = TalonConfig(mu=0.03, N=60, K=10)
    hf_schedule: str = "constant"       # HF assisted: K = linear_K, this schedule, no confidence stop
    streaming_cache: int = 1024         # StreamingLLM + spec: sinks + window, K = linear_K
    # equal-budget tuning: candidates per family (the same number each), measured on tuning prompts
    tuning: dict | None = None
    tuning_seed: int = 99
    tuning_n: int = 3
    tuning_T: int | None = None
    # sweeps (notebooks 04-08)
    T_list: tuple = (100, 200, 300, 500, 1000, 1500)
    L_max_list: tuple = (100, 200, 400, 800)
    fixed_grid: dict = field(default_factory=lambda: {"D": (3, 4, 5, 6, 7, 8), "B": (2, 3, 4),
                                                      "tau": (0.01, 0.02, 0.03, 0.05, 0.1)})
    threshold_pairs: tuple = ((0.95, 0.5), (0.9, 0.4), (0.9, 0.2), (0.8, 0.3), (0.7, 0.2), (0.6, 0.1))
    breadth_list: tuple = ((1, 1, 2), (1, 2, 3), (1, 2, 4), (2, 2, 3), (2, 3, 4))
    depth_list: tuple = ((3, 6), (4, 7), (5, 8), (6, 10), (8, 12))
    sweep_n_prompts: int = 10
    trees_n_prompts: int = 2              # notebook 09: prompts whose trees are recorded
    trees_per_prompt: int = 64            # iterations recorded per prompt
    pair_T: int = 0                       # notebook 00's agreement: greedy continuation length (0: T)
    pair_n_prompts: int = 0               # ... and prompts per dataset (0: n_prompts)
    # the draft scores only its draft_vocab most frequent tokens (FR-Spec: its head reads a fraction of the
    # output embedding; the target still verifies over the whole vocabulary, so exactness is untouched).
    # Every method drafting with our loop gets it; HF assisted runs transformers' own (full-vocabulary) drafting.
    draft_vocab: int | None = None
    # the draft mixes in a context lookup (lookup.py: the token after the longest earlier match of the
    # suffix, weighted by match length; fitted on non-experiment text, lookup.json beside the draft): every
    # method drafting with our loop gets it; HF assisted does not (transformers' own drafting)
    draft_lookup: bool = False
    # the main table adds the cost-aware extension (``dynatree_cost``: DynaTree's trees cut by this profile's
    # measured forward costs, results/<profile>/costs.json; where the profile tunes, tuned over DynaTree's
    # candidates with the cut on), beside DynaTree, never for it
    cost_aware: bool = True

    def method(self, name: str, dataset: str):
        """A method family configured with the paper's settings for ``dataset`` (None for AR)."""
        if name == "ar":
            return None
        if name == "linear":
            return LinearConfig(self.linear_K[dataset])
        if name == "fixed_tree":
            return self.fixed
        if name == "dynatree":
            return self.dynatree[dataset]
        if name == "talon":
            return self.talon
        if name == "hf_assisted":
            return HFAssistedConfig(self.linear_K[dataset], self.hf_schedule, 0.0)
        if name == "streaming_spec":
            return StreamingConfig(self.linear_K[dataset], self.streaming_cache, 4)
        raise ValueError(f"unknown method {name!r}; choose one of {METHODS + EXTRA_METHODS}")

    @property
    def datasets(self) -> tuple[str, ...]:
        return tuple(self.L_max)

    @property
    def max_len(self) -> int:
        """Static-cache slots for the committed tokens of the longest run of this profile."""
        return max(max(self.L_max.values()) + max(self.T, *self.T_list), max(self.L_max_list) + self.T)


def _cpu_tuning() -> dict:
    """Five candidates per family: the paper's setting first, then four around what suits a small draft."""
    return {
        "linear": (LinearConfig(8), LinearConfig(3), LinearConfig(4), LinearConfig(5), LinearConfig(6)),
        "fixed_tree": (FixedTreeConfig(8, 3, 0.1, 256), FixedTreeConfig(4, 2, 0.0, 16), FixedTreeConfig(5, 2, 0.05, 24),
                       FixedTreeConfig(6, 2, 0.02, 32), FixedTreeConfig(4, 3, 0.05, 24)),
        "dynatree": (DynaTreeConfig(), DynaTreeConfig(D0=4, D_max=8, tau_h=0.8, tau_l=0.3, rho_stop=0.02, rho_deep=0.3, n_max=24),
                     DynaTreeConfig(D0=5, D_max=10, tau_h=0.7, tau_l=0.2, rho_stop=0.01, rho_deep=0.3, tau=0.0, n_max=24),
                     DynaTreeConfig(D0=4, D_max=8, B_max=2, tau_h=0.8, tau_l=0.4, rho_stop=0.02, rho_deep=0.4, n_max=16),
                     DynaTreeConfig(D0=6, D_max=10, tau_h=0.6, tau_l=0.2, rho_stop=0.02, rho_deep=0.2, n_max=32)),
        "talon": (TalonConfig(0.03, 60, 10), TalonConfig(0.05, 16, 3), TalonConfig(0.1, 24, 4),
                  TalonConfig(0.05, 32, 5), TalonConfig(0.2, 12, 2)),
        "hf_assisted": (HFAssistedConfig(5, "heuristic"), HFAssistedConfig(3), HFAssistedConfig(4),
                        HFAssistedConfig(5), HFAssistedConfig(6)),
    }


def _tiny_tuning() -> dict:
    return {"linear": (LinearConfig(3), LinearConfig(4)),
            "fixed_tree": (FixedTreeConfig(4, 2, 0.05, 32), FixedTreeConfig(3, 2, 0.0, 16)),
            "dynatree": (DynaTreeConfig(D_max=6, n_max=32), DynaTreeConfig(D0=3, D_max=6, tau_h=0.7, tau_l=0.2, n_max=16)),
            "talon": (TalonConfig(0.1, 16, 4), TalonConfig(0.2, 8, 2)),
            "hf_assisted": (HFAssistedConfig(3), HFAssistedConfig(4, "heuristic"))}


PROFILES: dict[str, Profile] = {
    "paper": Profile("paper", "EleutherAI/pythia-2.8b", "EleutherAI/pythia-70m", device="cuda", dtype="float16",
                     exact_dtype="float32", n_exact=2, data_source="hub", context_override=2560),
    "paper-dryrun": Profile(
        "paper-dryrun", "tiny-pythia:target", "tiny-pythia:draft", dtype="bfloat16", exact_dtype="float32", n_exact=2,
        context_override=2560,
        L_max={"wikitext2": 80, "pg19": 100}, T=150, n_prompts=2, warmup=1, threads=2,
        T_list=(10, 20, 30, 50, 100, 150), L_max_list=(10, 20, 40, 80), sweep_n_prompts=1, streaming_cache=102,
        fixed_grid={"D": (3, 8), "B": (2, 4), "tau": (0.01, 0.1)}, threshold_pairs=((0.95, 0.5), (0.6, 0.1)),
        breadth_list=((1, 1, 2), (2, 3, 4)), depth_list=((3, 6), (8, 12)), trees_n_prompts=1, trees_per_prompt=8),
    # cpu: T=256 (the paper decodes 1500): at T=128 a 200-token prompt's prefill is an eighth of AR's wall time
    # and its greedy loops have barely begun; a --rerun took 48 minutes on 2 cores (2899 s; ./run_all.sh --plan).
    # Tuning decodes the test's T: acceptance grows along a generation (PG-19's tokens per iteration: 2.5 at
    # T=96, 4.7 at 256), so settings tuned on short runs were tuned for another regime.
    "cpu": Profile(
        "cpu", "embedded:target", "embedded:draft", dtype="bfloat16", engine="static+fused", exact_dtype="float32",
        n_exact=2, L_max={"wikitext2": 200, "pg19": 250}, T=256, n_prompts=8, warmup=1, threads=2,
        linear_K={"wikitext2": 8, "pg19": 5}, streaming_cache=256, tuning=_cpu_tuning(), tuning_n=3,
        T_list=(32, 64, 128, 256), L_max_list=(50, 100, 200, 400), sweep_n_prompts=2, trees_n_prompts=1,
        pair_T=256, pair_n_prompts=10, draft_vocab=8192, draft_lookup=True,
        fixed_grid={"D": (3, 4, 6), "B": (2, 3), "tau": (0.0, 0.05)},
        threshold_pairs=((0.9, 0.4), (0.7, 0.2), (0.5, 0.1), (0.3, 0.05)),
        breadth_list=((1, 1, 2), (1, 2, 3), (2, 2, 3)), depth_list=((3, 6), (4, 8), (6, 10))),
    "smoke": Profile(
        "smoke", "tiny:target", "tiny:draft", L_max={"wikitext2": 24, "pg19": 24}, T=24, n_prompts=2, warmup=1,
        threads=1, dtype="bfloat16", exact_dtype="float32", n_exact=1, linear_K={"wikitext2": 4, "pg19": 3},
        fixed=FixedTreeConfig(D=4, B=2, tau=0.05, n_max=32),
        dynatree={"wikitext2": DynaTreeConfig(D_max=6, n_max=32), "pg19": DynaTreeConfig(D_max=6, n_max=32)},
        T_list=(8, 16, 24), L_max_list=(8, 16), streaming_cache=32, talon=TalonConfig(mu=0.1, N=16, K=4),
        tuning=_tiny_tuning(), tuning_n=1, tuning_T=16,
        fixed_grid={"D": (2, 4), "B": (2,), "tau": (0.05, 0.1)}, threshold_pairs=((0.9, 0.4), (0.7, 0.2)),
        breadth_list=((1, 2, 3),), depth_list=((3, 6),), sweep_n_prompts=1, trees_n_prompts=1, trees_per_prompt=6),
}


def get_profile(name: str, **overrides) -> Profile:
    """A named profile with field overrides (e.g. ``T=64``); unknown names or fields raise ValueError."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}")
    fields = {f.name for f in dataclasses.fields(Profile)}
    bad = set(overrides) - fields
    if bad:
        raise ValueError(f"unknown profile field(s) {sorted(bad)}; valid fields: {sorted(fields)}")
    return dataclasses.replace(PROFILES[name], **overrides)
