"""the ``head_lookup`` experiment's scoring: the network alone is its own top-1 agreement, and a lookup that copies the
right token lifts both agreement and the target token's likelihood."""
import math

import torch

from dynatree_lib.core.drafts.lookup import column_of
from dynatree_lib.train import reports as head_lookup


def repeating():
    """1 2 3 repeated from row s = 2, the draft over tokens 0..3 (columns 0..3) putting 0.9 on token 0 (always wrong)
    and 0.1 / 3 on each other; the target's greedy token is the next token but at row 6, where it is 5 (outside the
    draft's vocabulary)."""
    ids, s = [1, 2, 3] * 4, 2
    t_top = torch.tensor(ids[s + 1:])
    t_top[6 - s] = 5
    lp = torch.full((len(ids) - 1, 4), math.log(0.1 / 3))
    lp[:, 0] = math.log(0.9)
    vocab = torch.arange(4)
    return [(ids, s, t_top, lp)], vocab, column_of(vocab, 8)


def test_the_network_alone_scores_its_own_agreement():
    forced, vocab, col_of = repeating()
    s = head_lookup.score(forced, [0.0] * 4, vocab, col_of)
    assert s["agreement"] == 0 and s["rows"] == 9
    assert math.isclose(s["log_likelihood"], (8 * math.log(0.1 / 3) + math.log(1e-9)) / 9, rel_tol=1e-5)


def test_a_lookup_that_copies_the_right_token_lifts_agreement_and_likelihood():
    """Rows 3..10 match and copy the next token (right but at row 6); row 2 matches nothing."""
    forced, vocab, col_of = repeating()
    s = head_lookup.score(forced, [0.95] * 4, vocab, col_of)
    assert s["agreement"] == 7 / 9
    right = math.log(0.05 * 0.1 / 3 + 0.95)
    assert math.isclose(s["log_likelihood"], (7 * right + math.log(1e-9) + math.log(0.1 / 3)) / 9, rel_tol=1e-5)
