"""The cpu profile's pair (issue 9): the committed draft shares the target's vocabulary, costs at most
1/8 of the target per one-token forward, and meets its held-out requirements; the build's pieces
(distillation loss, baked temperature) do what they say."""
import json
import math

import pytest
import torch

from dynatree_lib.costmodel import forward_costs
from dynatree_lib.distill import distill_loss
from dynatree_lib.models import DRAFT_DIR, REPO, load_pair, tiny_llama
from dynatree_lib.runners import check_pair


@pytest.fixture(scope="module")
def pair():
    return load_pair("embedded:target", "embedded:draft", dtype="bfloat16")


def test_committed_draft_is_small_and_documented():
    files = list(DRAFT_DIR.glob("*.safetensors"))
    assert files and sum(f.stat().st_size for f in files) <= 40 * 2 ** 20
    card = (DRAFT_DIR / "README.md").read_text()
    for word in ("Training", "Held-out evaluation", "ECE", "build-draft", "held out"):
        assert word in card
    training = json.loads((DRAFT_DIR / "training.json").read_text())
    assert training["steps"] > 0 and training["calibration"]["temperature"] > 0


def test_draft_shares_the_vocabulary(pair):
    target, draft, tok = pair
    check_pair(target, draft)
    assert draft.config.vocab_size == target.config.vocab_size == len(tok) == 49152


def test_draft_costs_about_an_eighth_logged():
    """Issue 9's cost requirement, on the committed measurement (results/cpu/costs.json: the profile's
    engine, median of back-to-back one-token forwards over a 250-token cache, target and draft in one process).
    Logged: 0.084 (1.28 / 15.25 ms, a slow spell), 0.129 after the attention kernel of 718146b made the target
    faster (1.23 / 9.55 ms), 0.083 after 7c57326 stacked the weights and flattened the cache, which cut the
    checks a compiled call makes on its input tensors (0.65 / 7.79 ms), 0.072 in the rerun on 3bd74da (0.76 / 10.54 ms,
    a slower spell of the VM), 0.073 on 914b460 (0.57 / 7.72 ms, two sums per output in the linear kernel)."""
    curves = json.loads((REPO / "results" / "cpu" / "costs.json").read_text())["curves"]["bfloat16"]
    ratio = curves["draft"]["1"] / curves["target"]["1"]
    assert ratio <= 1 / 8, f"logged draft/target one-token cost {ratio:.3f}"


def test_draft_costs_about_an_eighth_live():
    """The same ratio measured now, on the profile's engine (the compiled fast path; its first compile on a
    machine takes a few minutes, later ones hit inductor's disk cache). Shared runners are noisy (measured
    between 0.11 and 0.13 here for a logged 0.114), so the live check allows 1/6: it catches a draft that
    grew, not a noisy neighbour. On transformers' eager path the ratio is per-call overhead (0.17 measured
    on the 2-core EPYC), which is why the requirement is checked where the runs are timed."""
    from dynatree_lib.profiles import get_profile

    prof = get_profile("cpu")
    target, draft, _ = load_pair(prof.target, prof.draft, dtype=prof.dtype, engine=prof.engine, max_len=prof.max_len,
                                 draft_vocab=prof.draft_vocab)
    torch.set_num_threads(2)
    t = forward_costs(target, 200, ks=(1,), reps=9)[1]
    d = forward_costs(draft, 200, ks=(1,), reps=9)[1]
    assert d <= t / 6, f"draft {d:.2f} ms vs target {t:.2f} ms per one-token forward"


def test_held_out_requirements_logged():
    """From the committed evaluation (results/cpu/pair.json, written by the build's export phase)."""
    pair = json.loads((REPO / "results" / "cpu" / "pair.json").read_text())
    served = pair["agreement"]["all"]
    # Issue 9: agreement >= 0.6 and ECE <= 0.05 on the target's greedy continuations of the test prompts, for
    # the draft as it drafts (its 8192-token head and its context lookup); the network alone is logged beside.
    assert served["agreement"] >= 0.6, served["agreement"]
    assert served["ece"] <= 0.05, served["ece"]
    assert pair["agreement"]["all_human"]["agreement"] < served["agreement"]  # human text is harder
    alone = pair["agreement_no_lookup"]["all"]
    assert alone["positions"] == served["positions"] and alone["agreement"] < served["agreement"]


def test_distill_loss_is_cross_entropy_with_a_rest_bucket():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 50)
    teacher = torch.log_softmax(torch.randn(2, 3, 50) * 3, -1)
    top_lp, top_ids = teacher.topk(50, -1)  # k = V: the rest bucket is empty, plain cross-entropy
    ce = -(teacher.exp() * torch.log_softmax(logits, -1)).sum(-1).mean()
    assert torch.allclose(distill_loss(logits, top_lp, top_ids), ce, atol=1e-5)
    lp5, ids5 = teacher.topk(5, -1)
    q = torch.log_softmax(logits, -1)
    rest = 1 - lp5.exp().sum(-1)
    manual = -((lp5.exp() * q.gather(-1, ids5)).sum(-1) + rest * torch.log1p(-q.gather(-1, ids5).exp().sum(-1))).mean()
    assert torch.allclose(distill_loss(logits, lp5, ids5), manual, atol=1e-5)


def test_distill_loss_over_a_token_subset_moves_outside_mass_to_the_rest():
    from dynatree_lib.distill import columns

    torch.manual_seed(0)
    teacher = torch.log_softmax(torch.randn(2, 3, 50) * 3, -1)
    lp5, ids5 = teacher.topk(5, -1)
    full = torch.randn(2, 3, 50)
    everything = torch.arange(50).flip(0)  # a subset may list tokens in any order
    assert torch.allclose(distill_loss(full[..., everything], lp5, ids5, columns(everything, 50)),
                          distill_loss(full, lp5, ids5), atol=1e-6)
    sub = torch.tensor([3, 7, 11, 19, 23, 29, 31, 37, 41, 43])
    logits = torch.randn(2, 3, sub.numel())
    q = torch.log_softmax(logits, -1)
    cols = columns(sub, 50)
    total = 0.0
    for i in range(2):
        for j in range(3):
            inside = [(lp.exp(), int(cols[t])) for lp, t in zip(lp5[i, j], ids5[i, j]) if cols[t] >= 0]
            p_in = sum(float(p) for p, _ in inside)
            q_in = sum(float(q[i, j, c].exp()) for _, c in inside)
            total += sum(float(p * q[i, j, c]) for p, c in inside) + (1 - p_in) * math.log1p(-q_in)
    assert math.isclose(float(distill_loss(logits, lp5, ids5, cols)), -total / 6, rel_tol=1e-5)


def test_temperature_baked_into_the_final_norm_divides_the_logits():
    m = tiny_llama(seed=0, vocab_size=64, hidden_size=32, layers=1, max_positions=32)
    x = torch.randint(64, (1, 7))
    with torch.no_grad():
        before = m(input_ids=x).logits
        m.model.norm.weight.div_(1.7)
        after = m(input_ids=x).logits
    assert torch.allclose(after, before / 1.7, atol=1e-5, rtol=1e-4)
    assert math.isclose(float(after.std() * 1.7), float(before.std()), rel_tol=1e-4)


def test_raw_wikitext_shards_leave_the_earlier_shards_as_built():
    from dataclasses import replace

    from dynatree_lib.distill import TeacherSpec, teacher_shard

    m = tiny_llama(seed=0, vocab_size=64, hidden_size=32, layers=1, max_positions=64).eval()
    g = torch.Generator().manual_seed(0)
    corpora = {src: [torch.randint(64, (40,), generator=g).tolist() for _ in range(3)]
               for src in ("wiki_valid", "wiki_valid_raw", "pg19_train")}
    old = TeacherSpec(batch=2, prompt_lens=(8,), cont=3, k=4, wiki_share=0.5)
    new = replace(old, raw_from=2, raw_wiki_share=1.0)
    for s in (0, 1):
        a, b = teacher_shard(m, corpora, old, s), teacher_shard(m, corpora, new, s)
        assert a["source"] == b["source"] != "wiki_valid_raw" and torch.equal(a["tokens"], b["tokens"])
    assert teacher_shard(m, corpora, new, 2)["source"] == "wiki_valid_raw"


def test_training_refuses_a_folder_built_with_another_spec(tmp_path):
    from dataclasses import asdict

    from dynatree_lib.distill import DraftSpec, train_draft

    torch.save({"spec": asdict(DraftSpec())}, tmp_path / "final.pt")
    assert train_draft(DraftSpec(), teacher=tmp_path, out=tmp_path) == tmp_path / "final.pt"
    with pytest.raises(ValueError, match="holds a draft trained with"):
        train_draft(DraftSpec(steps=5), teacher=tmp_path, out=tmp_path)
