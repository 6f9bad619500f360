"""The level-batched tree drafter: one draft forward per tree level, never one per node."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .policies import DraftPolicy
from .runners import Runner
from .tree import Tree


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
    """
    device = ids.device
    tree = Tree.new(ids[-1], min(policy.n_max, 64) + 1, device)
    max_depth = min(max_depth, policy.max_depth)
    if max_depth <= 0:
        return tree, 0

    new = ids[state.consumed:]
    logits = draft.forward(new, draft.length + torch.arange(new.numel(), device=device), last_only=True)
    state.consumed = ids.numel()
    prefix = draft.length
    n_fwd = 1
    frontier = torch.zeros(1, dtype=torch.long, device=device)  # tree indices whose next-token logits we hold
    processed: Tensor = frontier[:0]                              # drafted nodes in the draft cache, in cache order
    breadth = min(policy.max_breadth, logits.shape[-1])
    vocab = getattr(draft, "vocab", None)  # a head over a token subset scores columns, not token ids
    while True:
        logp = torch.log_softmax(logits.float(), dim=-1)
        top_lp, top_tok = logp.topk(breadth, dim=-1)               # [f, breadth], sorted
        if vocab is not None:
            top_tok = vocab[top_tok]
        if n_fwd == 1:
            tree.root_conf = float(top_lp[0, 0].exp())
        child_cum = tree.cum_logp[frontier, None] + top_lp
        keep = policy.select(top_lp, child_cum, tree.depth[frontier])
        rows, cols = keep.nonzero(as_tuple=True)
        room = policy.n_max - tree.n_drafted
        if rows.numel() > room:  # budget: keep the most probable children, in BFS order
            best = child_cum[rows, cols].topk(room).indices.sort().values
            rows, cols = rows[best], cols[best]
        if rows.numel() == 0:
            break
        added = tree.add(frontier[rows], top_tok[rows, cols], top_lp[rows, cols])
        if tree.n_drafted >= policy.n_max:
            break
        depth = tree.depth[added]
        frontier = added[policy.expandable(depth, tree.cum_logp[added]) & (depth < max_depth)]
        if frontier.numel() == 0:
            break
        cols_idx = torch.cat([processed, frontier])
        # A chain is plain causal attention over the draft cache: no mask (the fast SDPA path).
        visible = None if tree.is_chain else tree.anc[frontier][:, cols_idx]
        logits = draft.forward(tree.tokens[frontier], prefix - 1 + tree.depth[frontier], visible, prefix)
        processed = cols_idx
        n_fwd += 1
    draft.truncate(prefix)
    return tree, n_fwd
