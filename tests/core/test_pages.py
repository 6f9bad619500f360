"""core.engines.pages: huge pages under the engine's weights change no value, and can be turned off."""
import pytest
import torch

from dynatree_lib.core.engines import pages


def test_huge_pages_keep_every_value():
    x = torch.rand(6 << 18)  # 6 MiB: at least two whole 2 MiB stretches wherever it lies
    before = x.clone()
    got = pages.back_with_huge_pages([x, x])  # the same tensor twice: asked once
    assert torch.equal(x, before)
    assert got % pages.HUGE_PAGE == 0 and got <= x.numel() * 4  # whole stretches, each once


def test_small_tensors_and_the_switch(monkeypatch):
    assert pages.back_with_huge_pages([torch.zeros(16)]) == 0  # no whole stretch
    monkeypatch.setenv("DYNATREE_HUGE_PAGES", "0")
    assert not pages.enabled() and pages.back_with_huge_pages([torch.rand(6 << 18)]) == 0


@pytest.mark.skipif(not pages.enabled() or pages.huge_page_kib() is None, reason="Linux with madvise only")
def test_huge_page_kib_is_reported():
    assert pages.huge_page_kib() >= 0
    assert pages.rollup_kib(names=("Pss", "AnonHugePages"))["Pss"] > 0 and pages.rollup_kib(2 ** 22 + 1) is None
