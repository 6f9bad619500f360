"""The pair report with an EAGLE-3 head as the draft: its teacher-forced rows are what the head drafts first when
decoding (the report's path against the decoder's), read over its draft vocabulary as the -inf-padded full law
reads; the cost of its one-token step is measured with the features the target's forward leaves; ``run_pair``
writes a head's report that the versions table sets beside another draft's."""
import json

import pytest
import torch

from dynatree_lib import DynaTreeConfig, LinearConfig, generate
from dynatree_lib.core.drafts.heads.eagle3 import first_drafts, save_head
from dynatree_lib.core.drafts.heads.eagle3_runner import Eagle3Runner
from dynatree_lib.core.engines.static import StaticRunner
from dynatree_lib.core.engines.hf import HFRunner
from dynatree_lib.core.sampling import full_logrow
from dynatree_lib.harness.experiments.costs import forward_costs, hand_features, loop_costs, one_token_ratio
from dynatree_lib.harness.experiments.pair import sequence_flags, teacher_forced, teacher_forced_head
from dynatree_lib.harness.setup.tiny import tiny_eagle3

from ..conftest import prompts
from ..core.test_eagle3 import target_features


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny forwards run fastest on one thread (conftest's autouse fixture restores the count)."""
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def head(llama_target):
    return tiny_eagle3(llama_target, draft_vocab=64, seed=4)


class FirstDrafts(Eagle3Runner):
    """The runner, recording what it drafts first in each tree (the catch-up's last row: the root's law) and the
    committed prefix it drafted it after."""

    def __init__(self, head):
        super().__init__(head)
        self.tokens, self.first = [], []

    def forward(self, tokens, positions, visible=None, tree_start=None, last_only=False):
        before = self.length
        out = super().forward(tokens, positions, visible, tree_start, last_only)
        if tree_start is None:
            self.tokens = self.tokens[:before] + tokens.tolist()
            self.first.append((list(self.tokens), torch.log_softmax(out[-1].float(), -1)))
        return out


@pytest.mark.parametrize("method", [DynaTreeConfig(n_max=10), LinearConfig(K=3)], ids=["dynatree", "linear"])
def test_the_reports_rows_are_what_the_head_drafts_first(llama_target, head, method):
    """Differential: every first draft of a decoding (a one-token prompt's included) equals the report's
    teacher-forced row after the same prefix of the finished text."""
    checked = 0
    for p in [torch.tensor([7])] + prompts(2, seed=6, lo=3, hi=15):
        drf = FirstDrafts(head)
        out = generate(HFRunner(llama_target), p, 12, draft=drf, method=method)
        assert out.tokens == generate(llama_target, p, 12).tokens
        seq = torch.cat([p, torch.tensor(out.tokens)])
        t_lp, d_lp = teacher_forced_head(llama_target, head, seq)
        torch.testing.assert_close(t_lp, teacher_forced(llama_target, seq))
        assert d_lp.shape == (seq.numel(), 64)
        for prefix, row in drf.first:
            assert prefix == seq[:len(prefix)].tolist()
            torch.testing.assert_close(d_lp[len(prefix) - 1], row, rtol=1e-4, atol=1e-4)
            checked += 1
    assert checked > 10


@torch.no_grad()
def test_the_heads_columns_read_as_its_full_law(llama_target, head):
    """The head's rows over its draft vocabulary give the measures the -inf-padded full law gives (its argmax,
    top-1 probability and overlap), so agreement, ECE and overlap keep v4's definitions; a row whose target argmax
    lies outside the draft vocabulary never agrees."""
    seq = prompts(1, seed=8, lo=30, hi=31)[0]
    drf = Eagle3Runner(head)
    flags = sequence_flags(llama_target, drf, seq, 2, {"agreement": (drf.vocab, None)})["agreement"]
    t_lp, d_lp = teacher_forced_head(llama_target, head, seq)
    t_lp, full = t_lp[2:-1], torch.stack([full_logrow(r, head.vocab(), 96) for r in d_lp[2:-1]])
    conf, agree, over = flags
    assert conf.shape == agree.shape == over.shape == (seq.numel() - 3,)
    torch.testing.assert_close(conf, full.max(-1).values.exp())
    assert torch.equal(agree, full.argmax(-1) == t_lp.argmax(-1))
    torch.testing.assert_close(over, torch.minimum(t_lp.exp(), full.exp()).sum(-1))
    outside = ~torch.isin(t_lp.argmax(-1), head.vocab())
    assert outside.any() and not agree[outside].any()


@torch.no_grad()
def test_first_drafts_read_the_features_of_one_target_forward(llama_target, head):
    """``first_drafts`` on the features a plain forward keeps equals the runner fed the same features at once
    (rows after the first token; the runner's own row 0 is never drafted from in a longer prompt)."""
    ids = prompts(1, seed=3, lo=20, hi=21)[0]
    feats = target_features(llama_target, ids, head.cfg.aux_layers)
    drf = Eagle3Runner(head)
    drf.reset()
    drf.observe_target(feats, 0)
    rows = drf.forward(ids, torch.arange(ids.numel()))
    torch.testing.assert_close(first_drafts(head, ids, feats)[1:], rows[1:], rtol=1e-4, atol=1e-4)


@torch.no_grad()
@pytest.mark.parametrize("engine", [HFRunner, StaticRunner])
def test_the_cost_of_a_head_step_is_measured_on_the_targets_features(llama_target, head, engine):
    """``one_token_ratio`` (and the curves' ``forward_costs`` and ``loop_costs``) time a head whose cache holds the
    features a target forward left (``hand_features``), as decoding feeds it; without a target it is refused."""
    target, drf = engine(llama_target), Eagle3Runner(head)
    out = one_token_ratio(target, drf, context=16, rounds=2, reps=1)
    assert len(out["draft_ms"]) == 2 and out["median"] > 0 and target.features is not None
    assert set(forward_costs(drf, 16, ks=(1, 4), reps=1, target=target)) == {1, 4}
    assert set(loop_costs(target, drf, DynaTreeConfig(n_max=8).policy(), 80, reps=1)) == {"level", "commit"}
    ids = prompts(1, seed=2, lo=12, hi=13)[0]
    drf.reset()
    hand_features(drf, target, ids)
    assert drf.known == ids.numel() and target.length == ids.numel()
    torch.testing.assert_close(drf.target[:ids.numel()], target_features(llama_target, ids, head.cfg.aux_layers),
                               rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="reads the target's hidden states: time it with its target runner"):
        forward_costs(drf, 16, ks=(1,), reps=1)


def test_run_pair_reports_a_head_beside_another_draft(tmp_path):
    """``run_pair`` with ``eagle3:<folder>`` as the draft: agreement, ECE and overlap per workload and Spec-Bench
    category on the greedy and the sampled output, with and without the lookup of its folder; no bits/byte of
    the head; the versions table reads it beside another report."""
    from dynatree_lib.harness.setup.models import load_model
    from dynatree_lib.harness.experiments.pair import run_pair
    from dynatree_lib.harness.setup.profiles import get_profile
    from dynatree_lib.reporting.pair_tables import draft_versions_table, pair_table

    target, _ = load_model("tiny-llama:target")
    folder = save_head(tiny_eagle3(target, draft_vocab=80, seed=5), tmp_path / "head", "tiny-llama:target")
    (folder / "lookup.json").write_text(json.dumps({"weights": [0.5, 0.6, 0.7]}))
    prof = get_profile("smoke", target="tiny-llama:target", draft=f"eagle3:{folder}", draft_vocab=None,
                       draft_lookup=True, workloads=("wikitext2", "spec_bench"), T=8, **{"pair.n_questions": 1})
    path = run_pair(prof, root=tmp_path, name="pair_eagle3")
    assert path == tmp_path / "smoke" / "pair_eagle3.json"
    rep = json.loads(path.read_text())
    assert rep["draft_vocab"] == 80 and rep["models"]["draft"]["layers"] == 1
    assert set(rep["bits_per_byte"]) == {"target"} and "agreement_full_vocab" not in rep
    for part in (rep, rep["sampled"]):
        for key in ("agreement", "agreement_no_lookup"):
            scopes = part[key]
            assert "wikitext2" in scopes and "all" in scopes and any(k.startswith("spec_bench/") for k in scopes)
            assert all(0 <= a["agreement"] <= 1 and 0 <= a["overlap"] <= 1 and a["ece"] >= 0 for a in scopes.values())
    t = draft_versions_table(rep, {"eagle3": rep}, now="again", overlap=True)
    col = ("Σ min(p, q), T = 1 samples (network alone)", "eagle3")
    assert col in t.columns and t[col].tolist() == t[(col[0], "again")].tolist() and "–" not in t[col].tolist()
    assert pair_table(rep).loc["draft"].filter(like="bits/byte").eq("–").all()
