"""The kinds of draft head on the target's own hidden states, declared once: a draft reference ``<kind>:<folder>``
(``harness.setup.weights``) names one, and its folder loads and drafts as its entry here says."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

from ...engines.runner import Runner
from . import eagle3, mlp
from .eagle3_fused import head_runner
from .mlp_runner import MLPHeadRunner


@dataclass(frozen=True)
class HeadKind:
    """``load(folder, embedding, dtype=None)``: the head of a folder over the target's input embedding (refusing,
    with the file and field named, a folder that is not of this kind); ``runner(head, max_len, fused, rope=None)``:
    the draft runner that drafts with it (``fused``: the target runs the fused bf16 engine, so a kind with a one-call
    step takes it, reading the target's RoPE tables ``rope`` where they are its own); ``label``: how a table or an
    error names it; ``color``: how a figure draws a row drafted with a head of this kind beside the profile's own
    head's (display only)."""

    load: Callable
    runner: Callable[..., Runner]
    label: str
    color: str = "#333333"


def eager(runner: type) -> Callable[..., Runner]:
    """A kind without a one-call step: its runner whatever the target's engine."""
    return lambda head, max_len=None, fused=False, rope=None: runner(head, max_len)


HEAD_KINDS = {
    "eagle3": HeadKind(eagle3.load_head, head_runner, "EAGLE-3", "#e377c2"),
    "medusa": HeadKind(partial(mlp.load_heads, kind="medusa"), eager(MLPHeadRunner), "Medusa", "#000000"),
    "hydra": HeadKind(partial(mlp.load_heads, kind="hydra"), eager(MLPHeadRunner), "Hydra", "#8c6d31"),
}
