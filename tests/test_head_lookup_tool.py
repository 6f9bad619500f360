"""``tools/head_lookup.py``'s scoring: the network alone is its own top-1 agreement, and a lookup that copies the
right token lifts both agreement and the target token's likelihood."""
import importlib.util
import math

import torch

from dynatree_lib.harness.paths import REPO

spec = importlib.util.spec_from_file_location("head_lookup", REPO / "tools" / "head_lookup.py")
head_lookup = importlib.util.module_from_spec(spec)
spec.loader.exec_module(head_lookup)


def repeating(n_vocab: int = 8):
    """A text that repeats itself, the target's greedy token of every row its next token, and a draft that puts
    most of its mass on the wrong token (token 0) everywhere (rows 0..n-2, each predicting the next token)."""
    ids = [1, 2, 3] * 4
    lp = torch.full((len(ids) - 1, n_vocab), math.log(0.1 / (n_vocab - 1)))
    lp[:, 0] = math.log(0.9)
    return [(ids, 0, torch.tensor(ids[1:]), lp)]


def test_the_network_alone_scores_its_own_agreement():
    vocab, col_of = torch.arange(8), torch.arange(8)
    s = head_lookup.score(repeating(), [0.0] * 4, vocab, col_of)
    assert s["agreement"] == 0 and s["rows"] == 11
    assert math.isclose(s["log_likelihood"], math.log(0.1 / 7), rel_tol=1e-5)


def test_a_lookup_that_copies_the_right_token_lifts_agreement_and_likelihood():
    vocab, col_of = torch.arange(8), torch.arange(8)
    alone = head_lookup.score(repeating(), [0.0] * 4, vocab, col_of)
    mixed = head_lookup.score(repeating(), [0.95] * 4, vocab, col_of)
    assert mixed["agreement"] == 8 / 11  # rows 3.. match (the first repeat on) and copy the next token
    assert mixed["log_likelihood"] > alone["log_likelihood"]
