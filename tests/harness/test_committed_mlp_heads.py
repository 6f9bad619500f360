"""The committed Medusa and Hydra heads (issue 57's rows; ``weights/smollm2-medusa``, ``weights/smollm2-hydra``):
documented by a card written from their training record, named by the cpu profile, and drafts like any other: on the
cpu target, Medusa's tree over them commits exactly AR's tokens in fp32."""
import json

import pytest
import torch

from dynatree_lib import generate
from dynatree_lib.train.mlp_card import card
from dynatree_lib.train.publish import published_folder
from dynatree_lib.harness.setup.models import load_pair
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.harness.experiments.talon import MEDUSA_TREE

KINDS = ("medusa", "hydra")


@pytest.mark.parametrize("kind", KINDS)
def test_the_committed_heads_are_documented_and_named_by_the_cpu_profile(kind):
    folder = published_folder(kind)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["model_type"] == kind and cfg["num_heads"] == 4 and cfg["truncated_vocab_size"] == 8192
    assert (folder / "README.md").read_text() == card(cfg)  # the card is the training record's, as published
    assert f"{kind}:weights/smollm2-{kind}" in get_profile("cpu").settings_for("talon")["heads"]
    assert (folder / "model.safetensors").stat().st_size <= 60 * 2 ** 20


@pytest.mark.full
@pytest.mark.parametrize("kind", KINDS)
def test_medusas_tree_over_the_committed_heads_is_exact_on_the_cpu_target(kind):
    target, heads, tok = load_pair("embedded:target", f"{kind}:{published_folder(kind)}", dtype="float32")
    ids = torch.tensor(tok("The history of the printing press").input_ids)
    out = generate(target, ids, 24, draft=heads, method=MEDUSA_TREE)
    assert out.tokens == generate(target, ids, 24).tokens and out.iterations < 24
