import pytest
import torch

from dynatree_lib import LinearConfig, generate
from dynatree_lib.models import check_pair, tiny_gpt_neox

from .conftest import MAX_POS


def test_mismatched_vocabularies(target):
    other = tiny_gpt_neox(vocab_size=80, max_positions=MAX_POS)
    with pytest.raises(ValueError, match="vocabularies differ"):
        generate(target, torch.tensor([1, 2]), 5, draft=other, method=LinearConfig(2))


def test_mismatched_tokenizers(target, draft):
    class Tok:
        def __init__(self, v):
            self.v = v

        def get_vocab(self):
            return self.v

    check_pair(target, draft, Tok({"a": 0}), Tok({"a": 0}))
    with pytest.raises(ValueError, match="tokenizers differ"):
        check_pair(target, draft, Tok({"a": 0}), Tok({"b": 0}))


@pytest.mark.parametrize("T", [0, -3, 2.5])
def test_bad_T(target, T):
    with pytest.raises(ValueError, match="T must be an integer >= 1"):
        generate(target, torch.tensor([1, 2]), T)


def test_prompt_longer_than_context(target, draft):
    p = torch.ones(MAX_POS - 3, dtype=torch.long)
    with pytest.raises(ValueError, match="exceeds the target context"):
        generate(target, p, 4)
    with pytest.raises(ValueError, match="truncate the prompt"):
        generate(target, p, 10, draft=draft, method=LinearConfig(2))


def test_empty_prompt_and_bad_mode(target, draft):
    with pytest.raises(ValueError, match="non-empty 1-D"):
        generate(target, torch.tensor([], dtype=torch.long), 3)
    with pytest.raises(ValueError, match="kv_mode"):
        generate(target, torch.tensor([1]), 3, draft=draft, method=LinearConfig(2), kv_mode="copy")
    with pytest.raises(ValueError, match="needs a draft"):
        generate(target, torch.tensor([1]), 3, method=LinearConfig(2))
