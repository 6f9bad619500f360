"""The committed EAGLE-3 head (issue 56; ``weights/smollm2-eagle3``): small, documented, in the speculators format,
and a draft like any other: on the cpu target its greedy trees and chains commit exactly AR's tokens in fp32, and in
bf16 on the fused engine (where its step is one C++ call, its logits the eager bf16 head's up to bf16 rounding)."""
import json

import pytest
import torch

from dynatree_lib import DynaTreeConfig, LinearConfig, generate
from dynatree_lib.core.engines import kernels
from dynatree_lib.core.drafts.heads.eagle3 import load_head, read_config
from dynatree_lib.harness.setup.models import input_embedding, load_pair
from dynatree_lib.harness.setup.paths import REPO

from ..conftest import NO_KERNEL
from ..core.test_eagle3_fused import Twin

HEAD = REPO / "weights" / "smollm2-eagle3"


def test_the_committed_head_is_small_and_documented():
    assert (HEAD / "model.safetensors").stat().st_size <= 60 * 2 ** 20
    cfg = json.loads((HEAD / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3" and cfg["draft_vocab_size"] == 8192
    assert cfg["speculators_config"]["verifier"]["name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    card = (HEAD / "README.md").read_text()
    steps = cfg["dynatree_lib"]["training"]["steps"]
    assert f"{steps} steps" in card and "pair_eagle3.json" in card and "build-draft --head eagle3" in card


def test_the_committed_checkpoint_resumes_the_published_heads_training():
    """``checkpoints/eagle3/v8k.pt`` (``train.head_checkpoints.committed_checkpoint``): the default spec's training,
    a log row per step, at least as far on as the published head, its weights the head's shape."""
    from dynatree_lib.train.eagle3 import HeadSpec
    from dynatree_lib.train.head_checkpoints import committed_checkpoint, spec_record

    spec = HeadSpec()
    st = torch.load(committed_checkpoint(spec))
    assert st["spec"] == spec_record(spec)
    assert [r["step"] for r in st["log"]] == list(range(len(st["log"]))) and st["optimizer_since"] <= len(st["log"])
    published = json.loads((HEAD / "config.json").read_text())["dynatree_lib"]["training"]["steps"]
    assert len(st["log"]) >= published
    cfg, _ = read_config(HEAD)
    head = load_head(HEAD, torch.zeros(cfg.target_vocab, cfg.hidden), torch.float32)
    assert {k: v.shape for k, v in head.state_dict().items()} == {k: v.shape for k, v in st["head"].items()}


@pytest.fixture(scope="module")
def fp32_pair():
    target, head, tok = load_pair("embedded:target", f"eagle3:{HEAD}", dtype="float32")
    return target, head, tok


@pytest.mark.parametrize("method", [LinearConfig(4), DynaTreeConfig(D0=3, D_max=5, n_max=16)], ids=["linear",
                         "dynatree"])
@pytest.mark.full
def test_the_committed_head_drafts_exactly_on_the_cpu_target(fp32_pair, method):
    target, head, tok = fp32_pair
    ids = torch.tensor(tok("The history of the printing press").input_ids)
    ar = generate(target, ids, 24).tokens
    assert generate(target, ids, 24, draft=head, method=method).tokens == ar


@pytest.fixture(scope="module")
def fused_pair(isa):
    if not kernels.available():
        pytest.skip(NO_KERNEL)
    return load_pair("embedded:target", f"eagle3:{HEAD}", dtype="bfloat16", engine="static+fused")


@pytest.mark.parametrize("method", [LinearConfig(4), DynaTreeConfig(D0=3, D_max=5, n_max=16)],
                         ids=["linear", "dynatree"])
@pytest.mark.full
def test_the_committed_head_on_the_fused_bf16_target(fused_pair, method):
    """The timed configuration: the head's step on the fused engine commits bf16 AR's tokens, each row it returns
    within bf16 rounding of the eager head's (``test_eagle3_fused``'s tolerance, against the head in fp32)."""
    target, head, tok = fused_pair
    assert target.engine == "static+fused" and head.engine == "eagle3+fused" and target.isa == head.isa
    ids = torch.tensor(tok("The history of the printing press").input_ids)
    ar = generate(target, ids, 24).tokens
    twin = Twin(load_head(HEAD, input_embedding(target)))  # a whole head: the served one gave its weights away
    assert generate(target, ids, 24, draft=twin, method=method).tokens == ar
    fused, eager = (torch.cat(e) for e in zip(*twin.errors))
    assert fused.max() <= 2 * eager.max() and fused.max() < 0.1, (fused.max(), eager.max())


def test_the_head_card_quotes_the_committed_json(tmp_path):
    """The card is written from the head's config.json and the two pair reports alone (``head_card.refresh``, which
    ``./run_all.sh`` runs): the committed card is what they give now."""
    import shutil

    from dynatree_lib.train.head_card import refresh

    folder = tmp_path / "head"
    shutil.copytree(HEAD, folder)
    assert refresh(folder).read_text() == (HEAD / "README.md").read_text()


def test_the_head_card_quotes_no_pair_report_of_other_weights(tmp_path):
    """A head published after its pair report (other weights) gets a card that says it is not measured yet, never the
    old head's numbers."""
    import shutil

    from dynatree_lib.train.head_card import card

    folder = tmp_path / "head"
    shutil.copytree(HEAD, folder)
    with open(folder / "model.safetensors", "ab") as f:
        f.write(b"\0")
    text = card(folder)
    assert "Not measured for these weights yet" in text and "bench --experiment head_records" in text
    assert "## Held-out evaluation, beside v4" not in text and "## Issue 56's targets" not in text


def test_the_vocabulary_report_reads_the_committed_heads_shape():
    """The ``head_vocab`` experiment's weight count for the committed head's vocabulary is the committed head's own
    (a head of another shape makes the report stale, loudly)."""

    from dynatree_lib.core.drafts.heads.eagle3 import read_config
    from dynatree_lib.train import reports as tool

    report = json.loads((REPO / "results" / "cpu" / "head_vocab.json").read_text())
    cfg, _ = read_config(HEAD)
    row = next(r for r in report["sizes"] if r["draft_vocab"] == cfg.draft_vocab)
    assert row["head_params"] == tool.head_matmul_params(cfg)
    assert all(0.5 < c <= 1.0 for r in report["sizes"] for c in r["coverage"].values())
    answers = [r["coverage"]["instruction"] for r in report["sizes"]]
    assert answers == sorted(answers)


def test_the_profiles_head_reference_resolves_from_any_directory(tmp_path, monkeypatch):
    """``eagle3:weights/smollm2-eagle3`` (the cpu profile's) names the repository's folder from a notebook's working
    directory too; a folder under the working directory wins, and a missing one is named."""
    from dynatree_lib.harness.setup.profiles import get_profile
    from dynatree_lib.harness.setup.weights import head_folder

    ref = get_profile("cpu").extras.head
    monkeypatch.chdir(tmp_path)
    assert head_folder(ref) == HEAD
    (tmp_path / "weights" / "smollm2-eagle3").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="weights/smollm2-eagle3/config.json is missing"):
        head_folder(ref)


def test_the_tree_depth_record_is_dev_only_exact_and_at_eagles_defaults():
    """``results/cpu/head_tree_depth.json`` (the ``head_tree_depth`` experiment): Spec-Bench dev questions only, every
    output equal to AR's, EAGLE-3's tree at SafeAILab/EAGLE's defaults, the committed head's weights."""
    from dynatree_lib.core.policies.eagle_tree import Eagle3TreeConfig
    from dynatree_lib.harness.setup.prompts import candidates

    rec = json.loads((REPO / "results" / "cpu" / "head_tree_depth.json").read_text())
    assert set(rec["prompt_ids"]) <= set(candidates("spec_bench", "dev")) and rec["split"] == "dev"
    assert all(r["equals_ar"] and r["prompt_id"] in rec["prompt_ids"] for r in rec["per_prompt"])
    cfg = Eagle3TreeConfig()
    assert rec["configs"]["eagle3_tree"] == {"type": "Eagle3TreeConfig", "depth": cfg.depth, "top_k": cfg.top_k,
                                             "total_tokens": cfg.total_tokens}
    assert rec["drafts"]["head"]["weights"]["file"] == "weights/smollm2-eagle3/model.safetensors"
