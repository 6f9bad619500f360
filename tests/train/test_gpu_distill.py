"""tools/gpu_distill.py, the v4 draft's distillation (it runs where dynatree_lib is not installed): its target is
the one the harness loads, its draft starts as the target's first layers, and its loss is the library's."""
import json

import pytest

import torch

from dynatree_lib.train.train import distill_loss
from dynatree_lib.harness.setup.paths import REPO
from dynatree_lib.harness.setup.tiny import tiny_llama
from dynatree_lib.harness.setup.weights import smollm2_folder, smollm2_gguf

from ..conftest import load_tool


def gpu_distill():
    return load_tool("gpu_distill")


@pytest.mark.full
def test_its_dequantization_is_the_harness_target():
    """Its own GGUF reader (no transformers GGUF support there) gives the tensors of the cached fp32 target."""
    from safetensors.torch import load_file

    folder = smollm2_folder()
    ours = gpu_distill().gguf_state_dict(smollm2_gguf(), json.loads((folder / "config.json").read_text()))
    ref = load_file(str(folder / "model.safetensors"))
    assert ours.keys() == ref.keys()
    assert all(torch.equal(ours[k], ref[k]) for k in ref)


def test_the_untrained_draft_is_the_targets_prefix():
    g = gpu_distill()
    target = tiny_llama(seed=0, vocab_size=64, hidden_size=32, layers=3, max_positions=32).eval()
    draft = g.draft_from(target, layers=2).eval()
    x = torch.randint(64, (1, 9))
    with torch.no_grad():
        prefix = target.model(input_ids=x, output_hidden_states=True).hidden_states[2]
        ours = draft.model.norm(prefix) @ target.lm_head.weight.T
        assert torch.allclose(draft(input_ids=x).logits, ours, atol=1e-5)
    assert not draft.get_input_embeddings().weight.requires_grad
    tied = draft.lm_head.weight.data_ptr() == draft.get_input_embeddings().weight.data_ptr()
    assert tied == bool(target.config.tie_word_embeddings)  # SmolLM2 ties them: the head stays its embedding


def test_its_loss_is_the_librarys():
    g = gpu_distill()
    torch.manual_seed(0)
    logits = torch.randn(7, 40)
    lp, ids = torch.log_softmax(torch.randn(7, 60) * 2, -1).topk(5, -1)
    lp[0, 1] = float("-inf")  # a token outside the head
    assert torch.equal(g.distill_loss(logits, lp, ids.clamp(max=39)), distill_loss(logits, lp, ids.clamp(max=39)))
    assert g.distill_loss.__code__.co_filename == str(REPO / "dynatree_lib" / "train" / "loss.py")


def test_loss_rows_are_the_answer_or_the_continuation_and_prompt_tail():
    g = gpu_distill()
    examples = [{"tokens": [5, 6, 7, 8, 9], "start": 2}, {"tokens": [1, 2, 3], "start": 0}]
    x, rows = g.batch_rows(examples, "cpu")
    assert x.tolist() == [[5, 6, 7, 8], [1, 2, 0, 0]]
    assert rows.tolist() == [2, 3, 4, 5]  # example 0 rows 2, 3 (next tokens 8, 9); example 1 rows 0, 1
    flat = x.flatten()[rows]
    assert flat.tolist() == [7, 8, 1, 2]


def test_bad_inputs_name_the_file(tmp_path):
    import pytest

    from dynatree_lib.train.early_exit import load_distilled
    from dynatree_lib.harness.setup.weights import assembled_draft_folder

    with pytest.raises(FileNotFoundError, match="result.json is missing"):
        load_distilled(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"dynatree_embedding_from": "hub:someone/else"}))
    with pytest.raises(ValueError, match="config.json: dynatree_embedding_from='hub:someone/else'"):
        assembled_draft_folder(tmp_path)
