"""Token trees as flat tensors: BFS layout, ancestor matrix, greedy path selection.

A tree is stored in BFS order. Index 0 is the *root*: the last committed token, which the target has
not yet seen (its KV entry is produced by the verification forward). Drafted nodes are 1..n, each with
a parent index smaller than its own, so ancestors always precede descendants. A tree's tensors are made
once, from Python lists of its nodes (``Tree.build``): trees are a few nodes, and the drafter grows them in
lists, so the tensors hold exactly the tree, never room for the node budget.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Tree:
    """A draft token tree in BFS order: ``size`` nodes."""

    tokens: Tensor    # [size] long: token id of each node (node 0 = root / pending token)
    parents: Tensor   # [size] long: parent index, -1 for the root
    depth: Tensor     # [size] long: 0 for the root, 1 for its children, ...
    logp: Tensor      # [size] float: draft log-prob of the node given its parent's context (0 at root)
    cum_logp: Tensor  # [size] float: sum of logp along the root-to-node path
    anc: Tensor       # [size, size] bool: anc[i, j] = j is an ancestor of i or i itself
    size: int = 1
    is_chain: bool = True  # every node's parent is the node before it (a linear draft)
    levels: int = 0        # depth of the deepest node
    root_conf: float = float("nan")  # the draft's top-1 probability at the root (set by the drafter)
    copies: tuple = ()     # (node, token): nodes to expand whose context-lookup copy was strong (set by the drafter)
    q: Tensor | None = None  # [m, V'] draft log-probs: the laws some nodes' children were drawn from (sampling)
    q_row: Tensor | None = None  # [size] long: row of q node i's children were drawn from, -1: chosen (top-k, copy)

    @staticmethod
    def new(root_token: Tensor | int, device: torch.device | str = "cpu") -> "Tree":
        """A tree holding only the root (an AR step of the loop: built without Python lists, from tensors made
        once per device)."""
        parents, zero, logp, anc = root_parts(torch.device(device))
        tokens = root_token.reshape(1).to(device) if isinstance(root_token, Tensor) else torch.tensor([root_token],
                                                                                                       device=device)
        return Tree(tokens, parents, zero, logp, cum_logp=logp, anc=anc)

    @staticmethod
    def build(tokens: list[int], parents: list[int], logp: list[float], cum_logp: list[float],
              device: torch.device | str = "cpu", *, root_conf: float = float("nan"), copies: tuple = (),
              q: Tensor | None = None, q_row: list[int] | None = None) -> "Tree":
        """The tree of the given nodes (BFS order, node 0 the root with parent -1), built in one go: the
        drafter grows a tree of a few nodes in Python lists and makes its tensors once. ``q``, ``q_row``: where
        children were drawn from the draft's law (``sampling``), the laws and which node's children each drew."""
        n = len(tokens)
        depth, masks = [0] * n, [1] + [0] * (n - 1)
        for i in range(1, n):
            depth[i], masks[i] = depth[parents[i]] + 1, masks[parents[i]] | 1 << i
        chain = all(parents[i] == i - 1 for i in range(1, n))
        t = lambda xs, dt: torch.tensor(xs, dtype=dt, device=device)
        return Tree(t(tokens, torch.long), t(parents, torch.long), t(depth, torch.long), t(logp, torch.float32),
                    cum_logp=t(cum_logp, torch.float32), anc=bit_matrix(masks, n,
                                                                        device), size=n, is_chain=chain, levels=max(depth), root_conf=root_conf, copies=copies, q=q,
                    q_row=None if q_row is None else t(q_row, torch.long))

    @property
    def n_drafted(self) -> int:
        return self.size - 1

    def subset(self, keep: Tensor) -> "Tree":
        """The tree of nodes ``keep`` (ascending indices, the root first, closed under ancestors). Only for trees
        whose children were chosen, not drawn: dropping drawn children would leave a set verification cannot
        account for (``sampling``)."""
        if self.q_row is not None and bool((self.q_row >= 0).any()):
            raise ValueError("a tree whose children were drawn from the draft's law cannot be cut (DraftPolicy.trim): "
                             "its verification needs every draw; a policy that trims must set sampled = False")
        remap = torch.full((self.size,), -1, dtype=torch.long, device=keep.device)
        remap[keep] = torch.arange(keep.numel(), device=keep.device)
        parents = self.parents[keep]
        parents = torch.where(parents >= 0, remap[parents.clamp(min=0)], parents)
        depth = self.depth[keep]
        levels = int(depth[-1])  # BFS order: the last node is the deepest
        copies = ()
        if self.copies:
            at = {u: i for i, u in enumerate(keep.tolist())}
            copies = tuple((at[u], c) for u, c in self.copies if u in at)
        return Tree(self.tokens[keep], parents, depth, self.logp[keep], cum_logp=self.cum_logp[keep], anc=self.anc[keep][:, keep],
                    size=keep.numel(), is_chain=self.is_chain or levels == keep.numel() - 1, levels=levels, root_conf=self.root_conf, copies=copies)

    def most_probable(self, n: int) -> "Tree":
        """The root and the ``n`` drafted nodes of highest path probability (ties: the node drafted first), a
        set closed under ancestors: each node is ranked by the least path log-prob on its way from the root,
        which is its own wherever the draft's log-probs are <= 0, so a parent always ranks before its child."""
        if self.n_drafted <= n:
            return self
        score = self.cum_logp.masked_fill(~self.anc, float("inf")).min(dim=1).values[1:]
        best = score.sort(descending=True, stable=True).indices[:n]
        return self.subset(torch.cat([best.new_zeros(1), best.sort().values + 1]))

    def record(self, path: Tensor, position: int) -> dict:
        """A JSON-ready picture of this tree and its verification (a few hundred bytes per node)."""
        return {"position": position, "root_conf": round(self.root_conf, 4), "parents": self.parents.tolist(),
                "tokens": self.tokens.tolist(), "depth": self.depth.tolist(),
                "prob": [round(x, 4) for x in self.logp.exp().tolist()], "accepted": path.tolist()}


_ROOT_PARTS: dict = {}


def root_parts(device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A root-only tree's parents, depth (also its path), log-probs and ancestor matrix, made once per device (trees
    never write into their tensors)."""
    if device not in _ROOT_PARTS:
        _ROOT_PARTS[device] = (torch.full((1,), -1, dtype=torch.long, device=device),
                               torch.zeros(1, dtype=torch.long, device=device),
                               torch.zeros(1, device=device), torch.ones(1, 1, dtype=torch.bool, device=device))
    return _ROOT_PARTS[device]


def bit_matrix(masks: list[int], n: int, device: torch.device | str = "cpu") -> Tensor:
    """[len(masks), n] bool: entry [i, j] is bit j of the Python int ``masks[i]`` (a few tensor ops for any n,
    where a nested list of n * n bools would cost Python time quadratic in the tree)."""
    words = -(-n // 62)
    w = torch.tensor([[m >> 62 * k & (1 << 62) - 1 for k in range(words)] for m in masks], dtype=torch.long)
    bits = (w[:, :, None] >> torch.arange(62)) & 1
    return bits.reshape(len(masks), words * 62)[:, :n].bool().to(device)


def select_path(tree: Tree, target_next: Tensor) -> Tensor:
    """Longest greedy-consistent root-to-node path (Section 3.5), as node indices starting at 0.

    ``target_next[i]`` is the target's argmax after consuming the path to node i. A node is accepted when
    its token equals its parent's target prediction and every ancestor is accepted. Siblings carry
    distinct tokens, so the deepest accepted node is unique. The bonus token is ``target_next[path[-1]]``.
    """
    if tree.size == 1:  # an AR step: the root alone
        return tree.depth
    correct = tree.tokens == target_next[tree.parents.clamp(min=0)]
    correct[0] = True
    ok = ~(tree.anc & ~correct[None, :]).any(dim=1)
    best = torch.where(ok, tree.depth, -1).argmax()
    return tree.anc[best].nonzero().squeeze(1)


def copy_outcomes(tree: Tree, path: Tensor, new_tokens: list[int]) -> tuple[int, int]:
    """Of the tree's strong-copy nodes (``Tree.copies``) on the accepted ``path``: how many there were, and after
    how many the committed next token (``new_tokens[i]`` follows ``path[i]``) was the copy, whether or not the
    drafter skipped the draft for it."""
    if not tree.copies:
        return 0, 0
    nxt = dict(zip(path.tolist(), new_tokens))
    taken = [nxt[u] == c for u, c in tree.copies if u in nxt]
    return len(taken), sum(taken)
