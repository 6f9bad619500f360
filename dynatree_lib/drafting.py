"""The level-batched tree drafter: one draft forward per tree level, never one per node."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .lookup import MAX_MATCH
from .policies import DraftPolicy
from .runners import Runner
from .tree import Tree, bit_matrix


@dataclass
class DraftState:
    """How many committed tokens the draft has consumed (its cache may hold fewer: StreamingLLM evicts)."""

    consumed: int = 0


@torch.no_grad()
def draft_tree(draft: Runner, state: DraftState, ids: Tensor, policy: DraftPolicy, max_depth: int) -> tuple[Tree, int]:
    """Grow a draft tree rooted at the last committed token ``ids[-1]``; returns it and the number of
    draft forwards.

    Level 0 feeds the committed tokens the draft has not consumed yet (causal, one forward); every later
    level feeds all nodes chosen for expansion at once, each seeing the committed prefix plus its own
    ancestors. Leaves are never fed to the draft. On return the draft cache holds the committed prefix only.

    The tree grows in Python lists and becomes a ``Tree`` once, at the end: a level has a few nodes, and as
    tensors its bookkeeping was ~40 small tensor ops (the cpu profile's drafting level, ``costmodel.loop_costs``:
    0.26 ms with tensors, 0.16 with lists). Path log-probs are summed in fp32, as the tree stores them.

    A policy with a ``lookup_skip`` weight, over a draft with a context lookup (``LookupRunner.copy``), skips
    the draft forward of a level whose every frontier node has a copy token of at least that weight: each gets
    that one child, scored log(weight) (a lower bound on its mixture probability), and waits unfed; the next
    level that does run the draft feeds the waiting nodes with its frontier, in the same forward. Level 0 too:
    there the committed tokens' feed waits for the first level that runs the draft, or for the next tree.
    The tree lists every node to expand (the root included) with such a strong copy (``Tree.copies``), skipped or not, so that the
    loop can tell the policy how often the target took them (``observe_copies``); a policy with
    ``copies_trusted`` skips only while that returns True.
    """
    device = ids.device
    max_depth = min(max_depth, policy.max_depth)
    if max_depth <= 0:
        return Tree.new(ids[-1], device), 0

    skip = getattr(policy, "lookup_skip", None)  # optional: copy weight at which a level needs no draft forward
    copy = getattr(draft, "copy", None) if skip is not None else None
    trusted = getattr(policy, "copies_trusted", None)  # optional: whether the generation's record allows skipping
    strong: list[tuple[int, int]] = []  # (node, its copy token) for every node to expand whose copy weighs >= skip
    context = ids[-MAX_MATCH:].tolist() if copy is not None else []  # committed tail: the longest match there is
    copies = _copies(copy, [0], [context], skip, strong, trusted) if copy is not None else None  # the root's
    logits, n_fwd = (None, 0) if copies is not None else (_catch_up(draft, state, ids), 1)
    prefix = draft.length
    # the tree so far: node 0 is the root; masks[i] has bit j set when node j is node i or its ancestor
    tokens, parents, depth, logp, cum, masks = [int(ids[-1])], [-1], [0], [0.0], [0.0], [1]
    chain, root_conf = True, float("nan")
    frontier: list[int] = [0]   # nodes whose next-token logits we hold
    processed: list[int] = []   # drafted nodes in the draft cache, in cache order
    waiting: list[int] = []     # drafted nodes not fed to the draft yet (levels skipped by the lookup)
    more = getattr(policy, "more", None)  # optional: whether a further level is worth its draft forward
    vocab = getattr(draft, "vocab", None)  # a head over a token subset scores columns, not token ids
    while True:
        if copies is not None:  # a skipped level: each frontier node's one child is its copy token
            lp = [[math.log(w)] for _, w in copies]
            tok = [[x] for x, _ in copies]
            cc = [[cum[u] + math.log(w)] for u, (_, w) in zip(frontier, copies)]
        else:
            breadth = min(policy.max_breadth, logits.shape[-1])
            top_lp, top_tok = torch.log_softmax(logits.float(), dim=-1).topk(breadth, dim=-1)  # [f, breadth], sorted
            if vocab is not None:
                top_tok = vocab[top_tok]
            child_cum = torch.tensor([cum[u] for u in frontier], device=top_lp.device)[:, None] + top_lp
            lp, tok, cc = top_lp.tolist(), top_tok.tolist(), child_cum.tolist()
            if len(tokens) == 1:
                root_conf = math.exp(lp[0][0])
        keep = policy.select(lp, cc, [depth[u] for u in frontier])
        picked = [(r, j) for r, row in enumerate(keep) for j, k in enumerate(row) if k]
        room = policy.n_max - (len(tokens) - 1)
        if len(picked) > room:  # budget: keep the most probable children (ties: the first), in BFS order
            best = sorted(range(len(picked)), key=lambda i: -cc[picked[i][0]][picked[i][1]])[:room]
            picked = [picked[i] for i in sorted(best)]
        if not picked:
            break
        added = list(range(len(tokens), len(tokens) + len(picked)))
        chain = chain and len(picked) == 1 and frontier[picked[0][0]] == len(tokens) - 1
        for i, (r, j) in zip(added, picked):
            u = frontier[r]
            tokens.append(tok[r][j]), parents.append(u), depth.append(depth[u] + 1)
            logp.append(lp[r][j]), cum.append(cc[r][j]), masks.append(masks[u] | 1 << i)
        if len(tokens) - 1 >= policy.n_max:
            break
        frontier = [i for i in added if depth[i] < max_depth and policy.expandable(depth[i], cum[i])]
        if not frontier:
            break
        if copy is not None:
            copies = _copies(copy, frontier, [context + _path(u, tokens, parents) for u in frontier], skip, strong,
                             trusted)
            if copies is not None:
                waiting += frontier
                continue
        if more is not None and not more(cum, frontier, n_fwd):
            break
        if state.consumed < ids.numel():  # level 0 came from the lookup: the committed tokens go in first
            _catch_up(draft, state, ids)
            prefix, n_fwd = draft.length, n_fwd + 1
        fed = waiting + frontier
        cols = processed + fed
        # A chain is plain causal attention over the draft cache: no mask (the fast SDPA path).
        visible = None if chain else bit_matrix([masks[u] for u in fed], len(tokens), device)[:, cols]
        logits = draft.forward(torch.tensor([tokens[u] for u in fed], device=device),
                               torch.tensor([prefix - 1 + depth[u] for u in fed], device=device), visible, prefix)
        logits = logits[len(waiting):]
        processed, waiting = cols, []
        n_fwd += 1
    draft.truncate(prefix)
    return Tree.build(tokens, parents, logp, cum, device, root_conf, tuple(strong)), n_fwd


def _catch_up(draft: Runner, state: DraftState, ids: Tensor) -> Tensor:
    """Feed the draft the committed tokens it has not consumed (causal); logits [1, V] after the last."""
    new = ids[state.consumed:]
    logits = draft.forward(new, draft.length + torch.arange(new.numel(), device=ids.device), last_only=True)
    state.consumed = ids.numel()
    return logits


def _copies(copy, nodes: list[int], contexts: list[list[int]], skip: float, strong: list[tuple[int, int]],
            trusted) -> list[tuple[int, float]] | None:
    """The copy (token, weight) after each node's context if the level is skipped: each has a weight of at
    least ``skip`` and the policy trusts such copies now (``trusted``, if given); else None. Appends the nodes
    with a strong copy to ``strong``."""
    out = [copy(c) for c in contexts]
    ok = [c is not None and c[1] >= skip for c in out]
    strong += [(u, c[0]) for u, c, s in zip(nodes, out, ok) if s]
    return out if all(ok) and (trusted is None or trusted()) else None


def _path(u: int, tokens: list[int], parents: list[int]) -> list[int]:
    """Tokens of node ``u``'s ancestors below the root, then ``u``'s (the root is the last committed token)."""
    out = []
    while u > 0:
        out.append(tokens[u])
        u = parents[u]
    return out[::-1]
