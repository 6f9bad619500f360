"""Tiny GPT-NeoX fixtures built from configs: no downloads, fp32 on CPU, seconds to build."""
import pytest
import torch

from dynatree_lib.models import perturb, tiny_gpt_neox

VOCAB = 96
MAX_POS = 160


@pytest.fixture(scope="session")
def target():
    return tiny_gpt_neox(seed=0, vocab_size=VOCAB, hidden_size=64, layers=3, max_positions=MAX_POS)


@pytest.fixture(scope="session")
def draft():
    """The target with noisy weights: agrees often but not always, so trees see both outcomes."""
    m = tiny_gpt_neox(seed=0, vocab_size=VOCAB, hidden_size=64, layers=3, max_positions=MAX_POS)
    return perturb(m, 0.03, seed=123)


@pytest.fixture(scope="session")
def small_draft():
    """An unrelated one-layer draft: mostly rejected."""
    return tiny_gpt_neox(seed=7, vocab_size=VOCAB, hidden_size=32, layers=1, heads=2, max_positions=MAX_POS)


@pytest.fixture(scope="session")
def wrong_draft(target):
    """The target with its output rows rolled by one: the draft's top-1 is never the target's top-1."""
    m = tiny_gpt_neox(seed=0, vocab_size=VOCAB, hidden_size=64, layers=3, max_positions=MAX_POS)
    with torch.no_grad():
        w = m.get_output_embeddings().weight
        w.copy_(torch.roll(w, shifts=1, dims=0))
    return m


def prompts(n: int, seed: int = 0, lo: int = 1, hi: int = 40):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi, (n,), generator=g).tolist()
    return [torch.randint(1, VOCAB, (k,), generator=g) for k in lens]
