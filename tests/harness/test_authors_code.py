"""The authors_code experiments (``harness.authors.code``) without the authors' repository: records, summary, JSON,
patches, shims and the refusal of a checkout that is missing or not theirs (their code is not available in CI)."""
import json
from pathlib import Path

import pytest
import torch

from dynatree_lib.harness.authors import checkout as ac
from dynatree_lib.harness.authors import code as ad
from dynatree_lib.harness.authors import records as ar
from dynatree_lib.harness.setup.profiles import get_profile

AR = [5, 6, 7, 8, 9, 10]
FIXED = {"tree_depth": 8, "levels": 9}
DYN = {"D0": 5}


def it(nodes, depth, accepted, committed, tree=None):
    d = {"nodes": nodes, "depth": depth, "accepted": accepted, "committed": committed}
    if tree is not None:
        d["tree"] = tree
    return d


def runs():
    """Two prompts of one dataset: AR, their fixed tree (diverges on p1), ours (equal), their linear."""
    out = []
    for pid in ("w:p0", "w:p1"):
        out.append(ar.make_run("ours", "ar", "w", {}, history=False, prompt_id=pid, tokens=AR, ar_tokens=AR,
                   iterations=[]))
    out.append(ar.make_run("authors", "fixed_tree", "w", FIXED, history=False, prompt_id="w:p0", tokens=AR, ar_tokens=AR,
                           iterations=[it(10, 3, 2, 3, "a"), it(4, 3, 2, 3, "b")], sequential_fallbacks=0,
                           authors_reported_acceptance=6 / 20))
    out.append(ar.make_run("authors", "fixed_tree", "w", FIXED, history=False, prompt_id="w:p1", tokens=[5, 6, 0, 8, 9, 10], ar_tokens=AR,
                           iterations=[it(12, 4, 1, 2, "c"), it(3, 2, 1, 2, "x"), it(1, 1, 1, 2,
                                       "y")], sequential_fallbacks=1))
    out.append(ar.make_run("ours", "fixed_tree", "w", FIXED, history=False, prompt_id="w:p0", tokens=AR, ar_tokens=AR,
                           iterations=[it(10, 3, 2, 3, "a"), it(2, 2, 2, 3, "b2")]))
    out.append(ar.make_run("ours", "fixed_tree", "w", FIXED, history=False, prompt_id="w:p1", tokens=AR, ar_tokens=AR,
                           iterations=[it(12, 4, 1, 2, "c"), it(5, 2, 1, 2, "z"), it(1, 1, 1, 2, "w")]))
    out.append(ar.make_run("authors", "linear", "w", {"K": 4}, history=False, prompt_id="w:p0", tokens=AR, ar_tokens=AR,
                           iterations=[it(4, 4, 4, 5), it(4, 4, 0, 1)]))
    return out


def test_first_divergence_and_run_record():
    assert ar.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert ar.first_divergence([1, 9, 3], [1, 2, 3]) == 1
    assert ar.first_divergence([1, 2], [1, 2, 3]) == 2
    r = runs()[3]
    assert r["equals_ar"] is False and r["first_divergence"] == 2
    assert r["rounds"] == 3 and r["mean_nodes"] == pytest.approx(16 / 3)
    assert r["mean_committed"] == pytest.approx(2.0)
    assert r["acceptance"] == pytest.approx(3 / 7)  # accepted / drafted levels
    assert r["acceptance_authors_def"] == pytest.approx(6 / (3 * 10))  # their fixed tree: / (D + 2) per round
    assert r["tokens_sha"] == ar.tokens_sha([5, 6, 0, 8, 9, 10]) != ar.tokens_sha(AR)
    lin = runs()[-1]
    assert lin["acceptance_authors_def"] == pytest.approx(6 / 8)  # committed / (K x rounds)
    assert ar.authors_denominator("dynatree", DYN) == 7


def test_summary_groups_vs_ours_and_checks():
    s = ar.summarize(runs())
    g = {(x["impl"], x["method"]): x for x in s["groups"]}
    fx = g[("authors", "fixed_tree")]
    assert fx["prompts"] == 2 and fx["equal_to_ar"] == 1
    assert fx["first_divergence"] == {"w:p0": None, "w:p1": 2}
    assert fx["rounds"] == 5 and fx["mean_nodes"] == pytest.approx(30 / 5)
    assert fx["mean_committed"] == pytest.approx(12 / 5)  # pooled: tokens / rounds
    assert fx["acceptance"] == pytest.approx(7 / 13, abs=1e-4)
    assert fx["sequential_fallbacks"] == 1
    assert g[("ours", "ar")]["equal_to_ar"] == 2 and "rounds" not in g[("ours", "ar")]
    vs = {v["prompt_id"]: v for v in s["vs_ours"]}
    # p0: the second tree differs, but with 3 tokens of room left ours drafts at most 2 levels, theirs 3: skipped
    assert vs["w:p0"]["trees_identical"] and vs["w:p0"]["capped_near_T"] == 1
    assert vs["w:p0"]["same_context_compared"] == 1
    # p1: the second tree (same context, room 4, their depth 2) differs; the third has another context
    assert vs["w:p1"]["first_tree_mismatch"] == 1 and vs["w:p1"]["tree_mismatches"] == 1
    assert vs["w:p1"]["same_context_compared"] == 2 and not vs["w:p1"]["same_tokens"]
    assert s["checks"]["authors_linear_equals_ar"] == "1/1"
    assert s["checks"]["authors_both_fixes_equals_ar"] == "0/0"
    assert s["checks"]["reported_acceptance_matches"] is True
    bad = runs()
    bad[2]["authors_reported_acceptance"] = 0.5
    assert ar.summarize(bad)["checks"]["reported_acceptance_matches"] is False
    lines = ar.headline(s)
    assert any("authors" in ln and "fixed_tree" in ln and "= AR 1/2" in ln and "p1@2" in ln for ln in lines)


def test_write_json_round_trip_one_line_per_iteration(tmp_path):
    doc = {"runs": runs(), "summary": ar.summarize(runs()), "T": 6, "nested": {"a": [[1, 2], {"b": None}]}}
    path = ar.write_json(doc, tmp_path / "sub" / "out.json")
    text = path.read_text()
    assert json.loads(text) == json.loads(json.dumps(doc))
    lines = [line.strip().rstrip(",") for line in text.splitlines()]
    assert '{"nodes": 10, "depth": 3, "accepted": 2, "committed": 3, "tree": "a"}' in lines
    assert json.dumps(AR) in [ln.split(": ", 1)[-1] for ln in lines]  # token lists on one line too
    assert not (tmp_path / "sub" / "out.json.tmp").exists()


def test_tree_digests_agree_across_representations():
    # ours: node 0 is the committed root; theirs: node paths from their drafted root (our depth 1)
    ours = {"parents": [-1, 0, 1, 1, 2], "tokens": [99, 4, 5, 6, 7]}
    theirs = [[4], [4, 6], [4, 5], [4, 5, 7]]
    assert ar.our_tree_digest(ours) == ar.tree_digest(theirs)
    assert ar.tree_digest([[4], [4, 5]]) != ar.tree_digest([[4], [4, 6]])


def fake_checkout(root: Path) -> Path:
    core = root / ac.CORE
    core.mkdir(parents=True)
    leaf = "                    past_key_values=leaf_cache,\n"
    (core / "token_tree.py").write_text("class TokenTree:\n    def flatten_for_verification(self): pass\n")
    (core / "speculative_generator.py").write_text("class SpeculativeGenerator: pass\n")
    (core / "tree_speculative_generator.py").write_text(
        '"""doc"""\nimport torch\nclass TreeSpeculativeGeneratorV2:\n    def _verify_tree_tokens(self):\n'
        + ac.POS_OLD + leaf * 4)
    (core / "tree_speculative_generator_adaptive.py").write_text(
        "import math\nimport torch\nclass TreeSpeculativeGeneratorV2AdaptiveV3: pass\n" + leaf * 2)
    return root


def test_checkout_recognised_and_patched(tmp_path):
    root = ac.check_checkout(fake_checkout(tmp_path / "theirs"))
    git = root / ".git"
    git.mkdir()
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "packed-refs").write_text("# pack-refs\n" + "ab" * 20 + " refs/heads/main\n")
    assert ac.read_commit(root) == "ab" * 20
    out = ac.scratch_copy(root, ("cache", "position"), tmp_path / "scratch")
    f = (out / "tree_speculative_generator.py").read_text()
    assert f.count("copy.deepcopy(leaf_cache)") == 4 and "import copy\nimport torch" in f
    assert "position_ids=(prefix_len + torch.tensor([tree.nodes[i].depth" in f
    a = (out / "tree_speculative_generator_adaptive.py").read_text()
    assert a.count("copy.deepcopy(leaf_cache)") == 2
    assert "leaf_cache" in (ac.scratch_copy(root, (), tmp_path / "s2") / "tree_speculative_generator.py").read_text()
    with pytest.raises(ad.NotAuthorsCheckout, match="expected 1 occurrence"):
        ac.patch_text("nothing here", ac.POS_OLD, ac.POS_NEW, 1, "x.py")


@pytest.mark.parametrize("make", [lambda p: p / "missing", lambda p: p])
def test_experiment_refuses_a_path_that_is_not_their_checkout(tmp_path, monkeypatch, make):
    path = make(tmp_path)
    monkeypatch.setenv(ad.AUTHORS_ENV, str(path))
    with pytest.raises(ad.NotAuthorsCheckout, match="is not a checkout of cny123222/DynaTree") as e:
        ad.run_authors_code(get_profile("cpu"), root=tmp_path / "results")
    assert str(path) in str(e.value)
    assert not (tmp_path / "results").exists()


def test_experiment_without_their_checkout_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv(ad.AUTHORS_ENV, raising=False)
    with pytest.raises(ad.NotAuthorsCheckout, match=r"clone cny123222/DynaTree .* set \$DYNATREE_AUTHORS"):
        ad.run_authors_code_history(get_profile("cpu"), root=tmp_path)
    with pytest.raises(ValueError, match="authors_code runs on the profiles"):
        ad.run_authors_code(get_profile("paper-dryrun"), root=tmp_path)


def test_committed_records_are_the_experiments_runs():
    """Each committed record is what its ``RECORDS`` entry makes: its pair, T, prompts, implementations, warm-up."""
    for name, run in ad.RECORDS.items():
        doc = json.loads((Path(__file__).resolve().parents[2] / "results" / "cpu" / f"{name}.json").read_text())
        assert doc["pair"]["name"] == ad.PAIRS["cpu"] and doc["T"] == run.T
        assert len(doc["prompts"]) == run.prompts * len(ad.WORKLOADS)
        assert {r["impl"] for r in doc["runs"]} == set(run.impls)
        warm = {len(r["settings"].get("history_warmup", [])) for r in doc["runs"] if r["history"]}
        assert warm == {run.history_warmup}


def test_crop_shim_keeps_length_like_transformers_4():
    from transformers.cache_utils import DynamicCache

    before = DynamicCache.__dict__.get("crop")
    c = DynamicCache()
    c.update(torch.zeros(1, 2, 7, 4), torch.zeros(1, 2, 7, 4), 0)
    with ac.compat_shims():
        c.crop(7)  # keep all
        assert c.get_seq_length() == 7
        c.crop(5)  # keep 5
        assert c.get_seq_length() == 5
        c.crop(-2)  # the 5.x convention passes through
        assert c.get_seq_length() == 3
    assert DynamicCache.__dict__.get("crop") is before  # restored on exit
    with pytest.raises(ValueError):
        c.crop(2)  # outside the shim, 5.x refuses a positive count


def test_ids_tokenizer():
    tok = ac.IdsTokenizer()
    key = tok.register("p", torch.tensor([1, 2, 3]))
    assert tok(key, return_tensors="pt").input_ids.tolist() == [[1, 2, 3]]
    assert tok.eos_token_id == 999999 and tok.decode([1]) == ""
    with pytest.raises(ValueError, match="would cut"):
        tok(key, truncation=True, max_length=2)


def test_their_code_runs_only_on_the_transformers_it_was_shimmed_for():
    ac.check_transformers("5.24.0")
    ac.check_transformers("5.17.1")
    for outside in ("5.16.2", "5.40.0", "6.0.0"):
        with pytest.raises(RuntimeError, match=f"this Python has {outside}"):
            ac.check_transformers(outside)
