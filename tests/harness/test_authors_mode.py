"""The authors'-protocol mode: their code's rules where it departs from the paper's text (a top-1 root, tau on
parents, the per-prompt history controller), their character-cut prompts, and the mode end to end on tiny models."""
import dataclasses

import pytest

from dynatree_lib import DynaTreeConfig, FixedTreeConfig, generate
from dynatree_lib.core.policies.dynatree import AuthorsHistory
from dynatree_lib.core.policies.base import Session
from dynatree_lib import methods as registry
from dynatree_lib.harness.experiments import catalog as experiments
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.harness.setup.prompts import authors_prompts
from dynatree_lib.harness.setup.tiny import tiny_tokenizer

from ..conftest import prompts


def test_top1_root_and_tau_on_parents(target, draft):
    for cfg in (FixedTreeConfig(D=5, B=3, tau=0.1, n_max=64, root_siblings=False, tau_on_parent=True),
                DynaTreeConfig(rho_stop=0.1, tau=0.05, root_siblings=False, tau_on_parent=True)):
        res = generate(target, prompts(1, seed=3)[0], 24, draft=draft, method=cfg, record_trees=10)
        for t in res.trees:
            assert t["depth"].count(1) == 1  # the first drafted level is the draft's top-1 alone
            kids = {}
            for i, par in enumerate(t["parents"]):
                kids.setdefault(par, []).append(i)
            for u, cs in kids.items():  # an expanded node's path probability is at least tau
                if u > 0:
                    cum = 1.0
                    v = u
                    while v > 0:
                        cum, v = cum * t["prob"][v], t["parents"][v]
                    assert cum >= cfg.tau - 1e-3


def test_authors_history_is_bang_bang_with_a_dead_band():
    cfg = DynaTreeConfig(D0=5, D_max=8, rho_stop=0.1, W=10, a_star=0.7, history_scope="prompt")
    h = AuthorsHistory(cfg)
    for _ in range(4):
        h.observe(70, 10)  # 70 / (10 * 7) = 1.0: above the band, but fewer than 5 entries
    assert (h.D0, h.tau_h, h.rho_deep) == (5, 0.9, 0.5)
    h.observe(70, 10)
    assert (h.D0, round(h.tau_h, 2), round(h.rho_deep, 2)) == (6, 0.85, 0.45)
    for _ in range(10):
        h.observe(70, 10)
    assert (h.D0, h.tau_h, h.rho_deep) == (7, 0.5, 0.3)  # clipped at D_max - 1, 0.5 and 0.3
    for _ in range(10):
        h.observe(49, 10)  # 0.7: inside the dead band
    assert h.D0 == 7


def test_history_is_kept_across_a_runs_generations(target, draft):
    cfg = DynaTreeConfig(D0=3, D_max=8, W=10, a_star=0.1, history_scope="prompt")  # every prompt reads "above"
    session = Session()
    for p in prompts(6, seed=4):
        generate(target, p, 16, draft=draft, method=cfg, session=session)
    state = session.states[cfg]
    assert len(state.window) == 6 and state.D0 == 5  # two adjustments after the fifth and sixth prompts
    fresh = cfg.policy()
    assert fresh.D0 == 3  # without a session nothing carries over


def test_authors_prompts_are_character_cut():
    tok = tiny_tokenizer()  # bytes: a character is one to four tokens
    ps = authors_prompts("wikitext2", tok, 10, 800)
    assert len(ps) == 10 and all(len(tok.decode(p.ids)) <= 800 for p in ps)
    assert max(p.ids.numel() for p in ps) > 800  # the cut counts characters, not tokens
    assert tok.decode(ps[0].ids).startswith("Homarus gammarus")
    books = authors_prompts("pg19", tok, 10, 1000)
    assert len(books) == 4 and all(b.id.endswith("@head") for b in books)


@pytest.mark.full
def test_authors_dryrun_main_runs_and_equals_ar(tmp_path):
    """The mode end to end in fp32 (its cells in one precision, none apart for exactness): every exact method
    reproduces AR on every prompt; StreamingLLM, whose window slides inside the authors' prompts, is not exact."""
    prof = get_profile("authors-dryrun", T=12, n_prompts=2, n_exact=1)
    prof = dataclasses.replace(prof, models=dataclasses.replace(prof.models, dtype="float32", exact_dtype=None))
    path = experiments.run("main", prof, root=tmp_path)
    from dynatree_lib.reporting import tables

    df = tables.load(path, prof)
    assert set(df.label) >= {"AR", "Linear Spec", "Fixed Tree", "DynaTree", "TALON"} and (df.dtype == "float32").all()
    exact = df[df.method != "streaming_spec"]
    assert (exact.equals_ar == exact.n).all(), exact[["label", "dataset", "equals_ar", "n"]]
    ours = df.method.map(lambda m: registry.REGISTRY[m].impl == "ours")
    slow = max(1, round(2 * prof.protocol.slow_share))  # other engines' methods run on a share of the prompts
    assert (df.n[ours] == 2).all() and (df.n[~ours] == slow).all() and df.rows.map(lambda rs: all(r["prompt_id"].endswith(("@head",)) or "valid-block" in r["prompt_id"] for r in rs)).all()
    assert (df["T"] == 12).all()
