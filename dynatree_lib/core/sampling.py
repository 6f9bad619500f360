"""Sampling at temperature > 0: the target's law, and the verification rules that keep it exactly.

``Sampling`` says how the target samples: ``temperature`` (0: greedy), then ``top_k`` (keep the k most probable
tokens), then ``top_p`` (keep the smallest most-probable set whose mass reaches p), renormalized; the order of
transformers' logits warpers. Every random draw of a decoder comes from one ``torch.Generator``, so a run is
reproducible from its seed.

One verification rule, lossless for every way our trees are drafted (the committed tokens follow the target's
law exactly, whatever the draft proposes; ``tests/core/test_sampling.py`` checks it by its empirical laws and shows that
the same tests reject broken variants). ``verify_sampled`` walks down from the root; at each node the children
were either

- *drawn* from the draft's law q there (a policy with ``sampled``: the network's tempered softmax, mixed with the
  context lookup's copy where it has one; k children drawn without replacement, k fixed by the policy from q
  before the draw): recursive rejection sampling (Jeon et al., 2024, "Recursive Speculative Decoding"; for
  k = 1 the speculative-sampling rule of Leviathan et al., 2023 and Chen et al., 2023). Sibling i is accepted
  with probability min(1, p_i(x_i) / q_i(x_i)); after a rejection p_{i+1} = normalized max(0, p_i - q_i) and
  q_{i+1} = q_i without x_i, renormalized (the law the next sibling was drawn from); when every sibling is
  rejected the bonus token is drawn from the last residual, which holds none of them. At every step the token
  committed follows p_i given the siblings before, so it follows p;
- *chosen* deterministically (the top-k children of a policy without ``sampled``, and every level copied from
  the context lookup): draw the next token from the target's law and descend into the child holding it, the
  first token no child holds being the bonus token (SpecInfer's "naive sampling", Miao et al., 2024; the same
  rule as above with point-mass proposals). Its acceptance, the target's mass on the children, is the most any
  rule can get from a fixed set; drawing children from q gets more where q and p are flat and close.

Lossless needs the number of children of a node to be decided before they are drawn: a policy that cuts a tree
by its nodes' own probabilities (``DraftPolicy.trim``) drafts top-k children instead (``Tree.subset`` refuses a
tree with drawn children).
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


def children_of(tree: Tree) -> list[list[int]]:
    """Each node's children, in the order they were drafted (drawn)."""
    out: list[list[int]] = [[] for _ in range(tree.size)]
    for i, par in enumerate(tree.parents.tolist()[1:], 1):
        out[par].append(i)
    return out


def verify_sampled(tree: Tree, p: Tensor, generator: torch.Generator, vocab: Tensor | None = None) -> tuple[Tensor, int]:
    """The accepted path (node indices from the root) and the bonus token of ``tree`` verified against the
    target's law ``p`` [n+1, V] after each node (see module docstring). ``vocab``: the draft head's token ids
    when ``tree.q``'s rows score a subset of the vocabulary."""
    kids, tokens, path, node = children_of(tree), tree.tokens.tolist(), [0], 0
    q_row = tree.q_row.tolist() if tree.q_row is not None else [-1] * tree.size
    while kids[node]:
        candidates = [tokens[c] for c in kids[node]]
        if q_row[node] < 0:  # chosen children
            x = int(draw(p[node], generator))
            hit = candidates.index(x) if x in candidates else None
        else:
            logq = full_logrow(tree.q[q_row[node]], vocab, p.shape[-1])
            hit, x = sibling_rejection(p[node], logq, candidates, generator)
        if hit is None:
            return torch.tensor(path, device=tree.tokens.device), x
        node = kids[node][hit]
        path.append(node)
    return torch.tensor(path, device=tree.tokens.device), int(draw(p[node], generator))


def sibling_rejection(p: Tensor, logq: Tensor, drawn: list[int], generator: torch.Generator) -> tuple[int | None, int]:
    """Recursive rejection sampling of siblings ``drawn`` in order without replacement from the law with
    log-probabilities ``logq`` [V], against the target's law ``p`` [V]: the index of the accepted sibling (None:
    every one rejected) and the token committed. Each q_i is renormalized from log-probabilities in fp64: after
    a confident draft's first sibling, the next ones may lie a hundred nats down, where fp32 probabilities are 0."""
    u = torch.rand(len(drawn), generator=generator, device=p.device).tolist()
    p, logq = p.double(), logq.double()
    for i, x in enumerate(drawn):
        q = torch.softmax(logq, dim=-1)  # q_i: the law sibling i was drawn from
        if u[i] * float(q[x]) < float(p[x]):  # probability min(1, p(x) / q(x))
            return i, x
        residual = (p - q).clamp(min=0)
        p = residual / residual.sum() if residual.sum() > 0 else p  # p == q up to rounding: rejection had probability 0
        logq = logq.index_fill(0, torch.tensor([x], device=logq.device), float("-inf"))
    return None, int(draw(p, generator))


def full_logrow(logq: Tensor, vocab: Tensor | None, size: int) -> Tensor:
    """Log-probabilities [size] over the whole vocabulary (-inf outside ``vocab``) from a draft head's over ``vocab``."""
    if vocab is None:
        return logq
    return logq.new_full((size,), float("-inf")).index_copy(0, vocab, logq)
