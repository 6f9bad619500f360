"""Sampling at temperature > 0: the target's law, and the verification rules that keep it exactly.

``Sampling`` says how the target samples: ``temperature`` (0: greedy), then ``top_k`` (keep the k most probable
tokens), then ``top_p`` (keep the smallest most-probable set whose mass reaches p), renormalized; the order of
transformers' logits warpers. Every random draw of a decoder comes from one ``torch.Generator``, so a run is
reproducible from its seed.

Two verification rules, each lossless for the way its trees are drafted (the committed tokens follow the target's
law exactly, whatever the draft proposes; ``tests/test_sampling.py`` checks both by their empirical laws):

- ``walk``, for trees whose children are chosen deterministically (the top-k children of the fixed tree,
  DynaTree, TALON and the cost-aware extension, and any level copied from the context lookup): at each node draw
  the next token from the target's distribution there and descend into the child holding it; the first token
  that no child holds is the bonus token. Every committed token is a draw from the target given the tokens before
  it, so the law is the target's. This is SpecInfer's verification for deterministic candidates (Miao et al.,
  2024, "naive sampling"), equivalently the sequential rule that accepts each sibling x with probability
  p(x) / (1 - mass of the siblings already rejected) and otherwise samples the target restricted to the tokens
  no sibling holds.
- ``chain_rejection``, for a chain whose tokens were sampled from the draft's distribution q (linear speculative
  decoding): accept x_i with probability min(1, p(x_i) / q(x_i)), at the first rejection draw the bonus from the
  normalized residual max(0, p - q), and after a fully accepted chain draw it from the target (Leviathan et al.,
  2023; Chen et al., 2023). q is exactly the distribution the drafter sampled from: the draft network's
  tempered softmax over its head's tokens, mixed with the context lookup's copy where it has one.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .tree import Tree
from .validate import is_int, is_real, require


@dataclass(frozen=True)
class Sampling:
    """How the target samples (see module docstring). ``temperature=0`` is greedy decoding."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        require(is_real(self.temperature) and self.temperature >= 0,
                f"temperature must be a number >= 0 (0: greedy), got {self.temperature!r}")
        require(self.top_k is None or (is_int(self.top_k) and self.top_k >= 1),
                f"top_k must be None or an integer >= 1, got {self.top_k!r}")
        require(self.top_p is None or (is_real(self.top_p) and 0 < self.top_p <= 1),
                f"top_p must be None or a number in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def draft_temperature(self) -> float:
        """The temperature of the draft's probabilities: the target's when sampling, else the draft's own (1)."""
        return float(self.temperature) if self.temperature > 0 else 1.0


def target_probs(logits: Tensor, s: Sampling) -> Tensor:
    """The target's sampling law [..., V] (fp32) from its logits: temperature, then top-k, then top-p."""
    x = logits.float() / s.temperature
    if s.top_k is not None and s.top_k < x.shape[-1]:
        kth = x.topk(s.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    p = torch.softmax(x, dim=-1)
    if s.top_p is not None and s.top_p < 1:
        sp, order = p.sort(dim=-1, descending=True)
        drop = sp.cumsum(-1) - sp >= s.top_p  # the mass before this token already reaches top_p
        p = p.scatter(-1, order, sp.masked_fill(drop, 0.0))
        p = p / p.sum(-1, keepdim=True)
    return p


def draw(p: Tensor, generator: torch.Generator) -> Tensor:
    """One token per row of probabilities [..., V] (long [...])."""
    flat = p.reshape(-1, p.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(p.shape[:-1])


def children_of(tree: Tree) -> dict[tuple[int, int], int]:
    """(parent node, token) -> child node (siblings carry distinct tokens)."""
    return {(par, tok): i for i, (par, tok) in enumerate(zip(tree.parents.tolist(), tree.tokens.tolist())) if i}


def walk(tree: Tree, p: Tensor, generator: torch.Generator) -> tuple[Tensor, int]:
    """The accepted path (node indices from the root) and the bonus token, for a tree of deterministic children
    verified against the target's law ``p`` [n+1, V] after each node (see module docstring). One draw per node is
    taken at once; only those along the path are used, each a fresh draw from its node's law."""
    drawn = draw(p, generator).tolist()
    child, path, node = children_of(tree), [0], 0
    while (node, drawn[node]) in child:
        node = child[(node, drawn[node])]
        path.append(node)
    return torch.tensor(path, device=tree.tokens.device), drawn[node]


def chain_rejection(tree: Tree, p: Tensor, q: Tensor, generator: torch.Generator) -> tuple[Tensor, int]:
    """The accepted path and the bonus token of a chain whose node i was drawn from ``q[i - 1]`` [n, V], verified
    against the target's law ``p`` [n+1, V] by the speculative-sampling rule (see module docstring)."""
    n = tree.n_drafted
    x = tree.tokens[1:]
    rows = torch.arange(n, device=x.device)
    ratio = p[rows, x] / q[rows, x]
    u = torch.rand(n, generator=generator, device=x.device)
    rejected = (u >= ratio).nonzero()
    if rejected.numel() == 0:
        return torch.arange(n + 1, device=x.device), int(draw(p[n], generator))
    j = int(rejected[0])
    residual = (p[j] - q[j]).clamp(min=0)
    if not residual.sum() > 0:  # p == q up to rounding: the rejection had probability 0
        residual = p[j]
    return torch.arange(j + 1, device=x.device), int(draw(residual / residual.sum(), generator))


def full_rows(logq: Tensor, vocab: Tensor | None, size: int) -> Tensor:
    """Probabilities [r, size] over the whole vocabulary from a draft head's log-probabilities over ``vocab``."""
    q = logq.float().exp()
    if vocab is None:
        return q
    out = q.new_zeros(q.shape[0], size)
    out[:, vocab] = q
    return out
