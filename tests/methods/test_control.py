"""The controller (``extensions.control``): exact and lossless whatever budgets it chooses, down to AR steps; its
choices follow the acceptance it sees; bad settings are refused by name."""
import pytest
import torch

from dynatree_lib import (ControlConfig, CostAwareConfig, DynaTreeConfig, Eagle3TreeConfig, FixedTreeConfig,
                          HFAssistedConfig, LinearConfig, OptTreeConfig, TalonConfig, generate)
from dynatree_lib.core.engines.static import StaticRunner
from dynatree_lib.core.loop import KV_MODES
from dynatree_lib.core.policies.base import DraftPolicy, Outcome
from dynatree_lib.extensions.control import AR_BEST, BEST, CLIMB, PROBE, START, decision_ms
from dynatree_lib.methods import controllable

from ..conftest import MAX_POS, prompts
from ..core.test_exactness import CASES, KV_TIERED
from ..core.test_sampling import (N_MUTANT, OK, SETTINGS, bigram_pair, chi2_sf, no_residual, one_thread,  # noqa: F401
                            power, sample)

BASES = {"linear": LinearConfig(K=4), "fixed_tree": FixedTreeConfig(D=3, B=2, tau=0.0, n_max=12),
         "dynatree": DynaTreeConfig(n_max=24), "dynatree_cost": CostAwareConfig(DynaTreeConfig(n_max=24)),
         "talon": TalonConfig(mu=0.2, N=8, K=3), "eagle3_tree": Eagle3TreeConfig(depth=3, top_k=3, total_tokens=8),
         "opt_tree": OptTreeConfig(n=12, delta=0.0, D=6)}
CONTROLS = {
    "default": ControlConfig(),
    # drafting priced out: AR steps, with a probe of the smallest tree now and then
    "ar_mostly": ControlConfig(fixed_ms=50.0, explore=0.5),
    # drafting free: the largest tree, always
    "trees_free": ControlConfig(verify_ms=((1, 1.0), (64, 1.0)), draft_ms=0.0, fixed_ms=0.0),
    # every budget, one or two verifications each (little memory, a cheap verification curve)
    "restless": ControlConfig(verify_ms=((1, 1.0), (2, 1.3), (64, 9.0)), budgets=(1, 2, 3), decay=0.0, prior=0.5),
}


def test_every_method_that_drafts_in_our_loop_is_controllable_and_covered():
    assert set(controllable()) == set(BASES) | {"talon_hw"}


@pytest.fixture(scope="module")
def ar_out(target):
    return {i: generate(target, p, T).tokens for i, (p, T) in enumerate(CASES)}


@pytest.mark.parametrize("kv_mode", KV_TIERED)
@pytest.mark.parametrize("control", CONTROLS)
@pytest.mark.parametrize("name", BASES)
def test_controlled_equals_ar(target, draft, ar_out, name, control, kv_mode):
    budgets = set()
    for i, (p, T) in enumerate(CASES):
        res = generate(target, p, T, draft=draft, method=BASES[name], kv_mode=kv_mode, control=CONTROLS[control])
        assert res.tokens == ar_out[i], f"{name}/{control}/{kv_mode} diverged on case {i}"
        assert len(res.decisions) == res.iterations and sum(res.log.committed) == T
        assert all(n <= d["budget"] for n, d in zip(res.log.nodes, res.decisions)), "a tree over its budget"
        budgets |= {d["budget"] for d in res.decisions}
    if control == "ar_mostly":
        assert 0 in budgets and len(budgets) > 1  # AR steps, and probes
    if control == "trees_free":
        assert 0 not in budgets


@pytest.mark.parametrize("control", ["default", "ar_mostly", "restless"])
@pytest.mark.parametrize("name", ["linear", "dynatree", "dynatree_cost", "eagle3_tree"])
def test_controlled_on_the_fast_path_and_on_a_head_equals_ar(llama_target, fast_pair, eagle3_head, name, control):
    from dynatree_lib.core.drafts.heads.eagle3_runner import Eagle3Runner

    tgt, drf = fast_pair
    head = Eagle3Runner(eagle3_head)
    for p, T in CASES:
        ar = generate(tgt, p, T).tokens
        for d in (drf, head):
            assert generate(tgt, p, T, draft=d, method=BASES[name], control=CONTROLS[control]).tokens == ar


@pytest.mark.parametrize("kind", ["medusa", "hydra"])
def test_controlled_over_medusa_and_hydra_heads_equals_ar(llama_target, fast_pair, kind):
    """Heads one per level (no tree deeper than three) under a controller that keeps switching budgets."""
    from dynatree_lib.core.drafts.heads.mlp_runner import MLPHeadRunner
    from dynatree_lib.harness.setup.tiny import tiny_mlp_heads

    tgt, _ = fast_pair
    drf = MLPHeadRunner(tiny_mlp_heads(llama_target, kind, heads=3, draft_vocab=80, seed=2))
    for p, T in CASES:
        for control in ("restless", "ar_mostly"):
            assert generate(tgt, p, T, draft=drf, method=BASES["dynatree"], control=CONTROLS[control]).tokens \
                == generate(tgt, p, T).tokens


@pytest.mark.parametrize("control", ["default", "ar_mostly"])
def test_edge_cases(target, draft, fast_pair, control):
    """A one-token prompt, T = 1, a budget of one node, the context limit, EOS inside a draft."""
    c = CONTROLS[control]
    one = torch.tensor([5])
    for method in (BASES["dynatree"], DynaTreeConfig(n_max=1), BASES["linear"]):
        assert generate(target, one, 25, draft=draft, method=method, control=c).tokens == generate(target, one, 25).tokens
        p = prompts(1, seed=3)[0]
        assert generate(target, p, 1, draft=draft, method=method, control=c).tokens == generate(target, p, 1).tokens
    T = 20
    p = prompts(1, seed=4, lo=MAX_POS - T, hi=MAX_POS - T + 1)[0]
    tgt, drf = fast_pair
    for kv in KV_MODES:
        assert generate(tgt, p, T, draft=drf, method=BASES["dynatree"], kv_mode=kv, control=c).tokens \
            == generate(tgt, p, T).tokens
    p, T = prompts(1, seed=6)[0], 40
    full = generate(target, p, T).tokens
    eos = full[12]
    ar = generate(target, p, T, eos_token_id=eos).tokens
    for d in (draft, target):  # the target as its own draft: EOS inside an accepted draft
        assert generate(target, p, T, draft=d, method=BASES["dynatree"], eos_token_id=eos, control=c).tokens == ar


# ---- lossless sampling ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("control", ["default", "ar_mostly"])
@pytest.mark.parametrize("name", ["linear", "fixed_tree", "dynatree"])
def test_controlled_sampling_keeps_the_target_law(bigram_pair, one_thread, name, control):
    res, stat, df = sample(bigram_pair, name, SETTINGS["t1"], control=CONTROLS[control])
    assert chi2_sf(stat, df) > OK, (stat, df)
    assert control != "ar_mostly" or 0 in {d["budget"] for d in res.decisions}


@pytest.mark.parametrize("name", ["linear", "fixed_tree", "dynatree"])
def test_controlled_sampling_over_an_eagle3_head_keeps_the_target_law(bigram_pair, one_thread, name):
    from dynatree_lib.core.drafts.heads.eagle3_runner import Eagle3Runner
    from dynatree_lib.harness.setup.tiny import tiny_eagle3

    drf = Eagle3Runner(tiny_eagle3(bigram_pair[0], draft_vocab=6, seed=1, init_range=0.5))
    _, stat, df = sample(bigram_pair, name, SETTINGS["t0.7-top5-p0.9"], draft=drf, control=CONTROLS["restless"])
    assert chi2_sf(stat, df) > OK, (stat, df)


def test_the_controlled_sampling_test_catches_a_broken_rule(bigram_pair, one_thread, monkeypatch):
    """Its power: drawn children verified without the residual, through the controller, are rejected (with drafting
    free, so that it keeps drafting: on this pair the default controller takes mostly AR steps, which the broken rule
    never reaches)."""
    monkeypatch.setattr("dynatree_lib.core.loop.verify_sampled", no_residual)
    _, stat, df = sample(bigram_pair, "dynatree", SETTINGS["t1"], n=N_MUTANT, control=CONTROLS["trees_free"])
    assert chi2_sf(stat, df) < OK and power(df, stat - df) >= 0.9, (stat, df)


# ---- the choices ---------------------------------------------------------------------------------------------------

class Stub(DraftPolicy):
    """A policy the controller wraps in these unit tests (it drafts nothing: the tests feed outcomes)."""

    n_max, max_depth, max_breadth = 24, 6, 2


def run(policy, accept, steps: int) -> list[dict]:
    """``steps`` choices, each followed by a verification that accepts ``accept(depth)`` of a tree that deep."""
    for _ in range(steps):
        policy.begin()
        depth = policy.max_depth
        policy.last = (min(policy.n_max, 24) if depth else 0, depth)
        policy.observe(Outcome(accept(depth), depth))
    return policy.trace()


def test_it_starts_at_the_methods_own_budget_and_drafts_where_drafting_pays():
    """Every draft accepted: it keeps drafting trees as deep as the method allows (6 levels; 24 nodes where larger
    trees cost nothing more, fewer where they do)."""
    trace = run(ControlConfig().wrap(Stub()), lambda d: d, 40)
    assert trace[0] == {"budget": 24, "why": START, "rate": trace[0]["rate"]}
    assert all(t["budget"] >= 4 and t["why"] in (START, BEST, CLIMB) for t in trace[1:])
    assert all(t["budget"] == 24 for t in run(CONTROLS["trees_free"].wrap(Stub()), lambda d: d, 40))


def test_where_nothing_is_accepted_it_steps_down_to_ar_and_its_probes_lose_at_most_the_exploration_share():
    cfg = ControlConfig(explore=0.05)
    policy = cfg.wrap(Stub())
    trace = run(policy, lambda d: 0, 400)
    whys = [t["why"] for t in trace]
    assert AR_BEST in whys[-5:] and sum(t["budget"] == 0 for t in trace) > 300
    probes = [i for i, w in enumerate(whys) if w == PROBE]
    assert len(probes) >= 3 and all(trace[i]["budget"] > 0 for i in probes)
    assert 0 < policy.lost <= cfg.explore * policy.spent


def test_after_a_probe_that_wins_it_drafts_again():
    accept = {"now": 0}
    policy = ControlConfig(explore=0.1).wrap(Stub())
    run(policy, lambda d: accept["now"], 60)
    assert policy.trace()[-1]["budget"] == 0
    accept["now"] = 6
    trace = run(policy, lambda d: min(d, accept["now"]), 60)
    assert trace[-1]["budget"] > 1 and trace[-1]["why"] in (BEST, CLIMB)


def test_its_own_step_is_priced():
    """A slower decision lowers every arm's rate and AR's, so it is part of what the choice optimises."""
    cheap, dear = (ControlConfig(decide_ms=x).wrap(Stub()) for x in (0.0, 0.5))
    assert dear.rate(dear.arms[0]) < cheap.rate(cheap.arms[0]) and dear.ar_rate < cheap.ar_rate
    assert 0 < decision_ms(200) < 50  # a benchmark's number, bounded only to catch a hang


BAD = [(dict(verify_ms=((2, 1.0),)), "verify_ms must be"), (dict(draft_ms=-1.0), "draft_ms must be >= 0"),
       (dict(budgets=(4, 2)), "budgets must be ascending"), (dict(budgets=(0, 2)), "budgets must be ascending"),
       (dict(decay=1.0), "decay must be in"), (dict(prior=0.0), "prior must be > 0"),
       (dict(explore=1.0), "explore must be"), (dict(warmup=0), "warmup must be"), (dict(step_ms="fast"), "step_ms")]


@pytest.mark.parametrize("bad,match", BAD, ids=[m for _, m in BAD])
def test_bad_settings_are_refused(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        ControlConfig(**bad)


def test_a_method_without_our_tree_or_a_wrong_control_is_refused(target, draft):
    p = prompts(1)[0]
    with pytest.raises(ValueError, match="no tree to size"):
        generate(target, p, 4, draft=draft, method=HFAssistedConfig(), control=ControlConfig())
    with pytest.raises(TypeError, match="control must be a ControlConfig"):
        generate(target, p, 4, draft=draft, method="dynatree", control={"decay": 0.5})


def test_the_targets_table_reads_each_target_and_the_best_setting_found_afterwards():
    """Sampled: at least 0.98x AR with the interval not wholly below 1; greedy: at least 0.97x the uncontrolled
    setting; the best setting afterwards is the fastest uncontrolled row or AR on the same prompts."""
    import pandas as pd

    from dynatree_lib.harness.setup.variants import CONTROLLED, MAIN
    from dynatree_lib.reporting.control_tables import control_targets

    def row(method, variant, t, tps, speedup):
        spread = (0.9, 1.1) if variant == CONTROLLED else (1.1, 0.9)  # prompts differ: the interval has width
        return {"row": f"{method}:{variant}", "method": method, "variant": variant, "dataset": "wikitext2",
                "temperature": t, "replicate": 0, "label": method, "mark": "",
                "tps_by_prompt": {"a": tps * spread[0], "b": tps * spread[1]}, "speedup": speedup}

    df = pd.DataFrame([row("ar", MAIN, 1.0, 10.0, 1.0), row("dynatree", MAIN, 1.0, 9.0, 0.9),
                       row("dynatree", CONTROLLED, 1.0, 9.9, 0.99), row("linear", MAIN, 1.0, 10.5, 1.05),
                       row("ar", MAIN, 0.0, 10.0, 1.0), row("dynatree", MAIN, 0.0, 20.0, 2.0),
                       row("dynatree", CONTROLLED, 0.0, 19.0, 1.9)])
    t = control_targets(df)
    sampled, greedy = t.loc[("1", "WikiText-2", "draft model", "DynaTree")], t.loc[("0", "WikiText-2",
                                                                                     "draft model", "DynaTree")]
    assert sampled["met"] == "yes" and sampled["best afterwards"] == "linear" and sampled["over AR"].startswith("0.99×")
    assert sampled["over best afterwards"].startswith("0.94×") and sampled["over uncontrolled"].startswith("1.10×")
    assert greedy["met"] == "no" and greedy["over uncontrolled"].startswith("0.95×")  # 19 / 20 < 0.97
