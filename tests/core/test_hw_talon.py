"""The policy added after the house was built (issue 76's proof): TALON with the budget the machine's verification
curve allows. One module (``core/policies/hw_talon.py``) and its registration; exact as every tree method."""
import pytest
import torch

from dynatree_lib import generate
from dynatree_lib.core.policies.hw_talon import HardwareTalonConfig

from ..conftest import prompts

# the target's verification curves of two machines (ms of k tokens): a steep one and a nearly flat one
STEEP = ((1, 6.8), (2, 7.3), (4, 8.6), (8, 10.0), (16, 16.7), (32, 31.0), (64, 55.5))
FLAT = ((1, 13.6), (2, 14.0), (4, 14.7), (8, 15.9), (16, 17.7), (32, 23.1), (64, 39.7))


def test_the_budget_is_what_the_machine_verifies_within_the_overhead():
    assert HardwareTalonConfig(verify_ms=STEEP, overhead=0.25).budget() == 2    # 3 tokens: 7.95 ms <= 8.5, 4: 8.6
    assert HardwareTalonConfig(verify_ms=FLAT, overhead=0.25).budget() == 11    # 12 tokens within 17.0 ms
    assert HardwareTalonConfig(verify_ms=FLAT, overhead=2.0).budget() == 63     # the curve's last k bounds it
    assert HardwareTalonConfig(verify_ms=STEEP, overhead=0.0).budget() == 1     # at least one node
    assert HardwareTalonConfig(verify_ms=FLAT).policy().n_max == 11


@pytest.mark.parametrize("bad", [((2, 1.0), (4, 2.0)), ((1, 1.0),), ((1, 1.0), (1, 2.0)), ((1, 0.0), (2, 1.0))])
def test_a_bad_curve_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="verify_ms"):
        HardwareTalonConfig(verify_ms=bad)


@pytest.mark.parametrize("curve", [STEEP, FLAT], ids=["steep", "flat"])
def test_it_decodes_exactly(target, draft, curve):
    for p in prompts(3, seed=5):
        ar = generate(target, p, 24).tokens
        res = generate(target, p, 24, draft=draft, method=HardwareTalonConfig(verify_ms=curve, mu=0.05, K=3))
        assert res.tokens == ar


def test_it_decodes_by_name_from_the_registry(target, draft):
    p = torch.tensor([3, 9, 4])
    assert generate(target, p, 8, draft=draft, method="talon_hw").tokens == generate(target, p, 8).tokens
