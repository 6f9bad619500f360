"""Token trees as flat tensors: BFS layout, ancestor matrix, greedy path selection.

A tree is stored in BFS order. Index 0 is the *root*: the last committed token, which the target has
not yet seen (its KV entry is produced by the verification forward). Drafted nodes are 1..n, each with
a parent index smaller than its own, so ancestors always precede descendants. Storage grows with the
tree that is built (doubling), never with the node budget.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Tree:
    """A draft token tree in BFS order; tensors hold ``capacity`` rows, the first ``size`` are used."""

    tokens: Tensor    # [cap] long: token id of each node (node 0 = root / pending token)
    parents: Tensor   # [cap] long: parent index, -1 for the root
    depth: Tensor     # [cap] long: 0 for the root, 1 for its children, ...
    logp: Tensor      # [cap] float: draft log-prob of the node given its parent's context (0 at root)
    cum_logp: Tensor  # [cap] float: sum of logp along the root-to-node path
    anc: Tensor       # [cap, cap] bool: anc[i, j] = j is an ancestor of i or i itself
    size: int = 1
    is_chain: bool = True  # every node's parent is the node before it (a linear draft)
    levels: int = 0        # depth of the deepest node (each ``add`` appends one level)
    root_conf: float = float("nan")  # the draft's top-1 probability at the root (set by the drafter)

    @staticmethod
    def new(root_token: Tensor | int, capacity: int = 16, device: torch.device | str = "cpu") -> "Tree":
        """A tree holding only the root, with room for ``capacity - 1`` drafted nodes before it grows."""
        t = Tree(*_alloc(capacity, device))
        t.tokens[0] = root_token
        t.anc[0, 0] = True
        return t

    @staticmethod
    def build(tokens: list[int], parents: list[int], logp: list[float], cum_logp: list[float],
              device: torch.device | str = "cpu", root_conf: float = float("nan")) -> "Tree":
        """The tree of the given nodes (BFS order, node 0 the root with parent -1), built in one go: the
        drafter grows a tree of a few nodes in Python lists and makes its tensors once."""
        n = len(tokens)
        depth, masks = [0] * n, [1] + [0] * (n - 1)
        for i in range(1, n):
            depth[i], masks[i] = depth[parents[i]] + 1, masks[parents[i]] | 1 << i
        chain = all(parents[i] == i - 1 for i in range(1, n))
        t = lambda xs, dt: torch.tensor(xs, dtype=dt, device=device)
        return Tree(t(tokens, torch.long), t(parents, torch.long), t(depth, torch.long), t(logp, torch.float32),
                    t(cum_logp, torch.float32), bit_matrix(masks, n, device), n, chain, max(depth), root_conf)

    @property
    def n_drafted(self) -> int:
        return self.size - 1

    def _grow(self, need: int) -> None:
        cap = self.tokens.numel()
        if need <= cap:
            return
        new = _alloc(max(need, 2 * cap), self.tokens.device)
        for dst, src in zip(new[:5], (self.tokens, self.parents, self.depth, self.logp, self.cum_logp)):
            dst[:cap] = src
        new[5][:cap, :cap] = self.anc
        self.tokens, self.parents, self.depth, self.logp, self.cum_logp, self.anc = new

    def add(self, parent: Tensor, token: Tensor, logp: Tensor) -> Tensor:
        """Append one level of children (in BFS order, all parents at the current deepest level) and
        return their indices. One tensor op per field, no per-node Python."""
        k = parent.numel()
        self._grow(self.size + k)
        idx = torch.arange(self.size, self.size + k, device=self.tokens.device)
        self.tokens[idx] = token
        self.parents[idx] = parent
        self.depth[idx] = self.depth[parent] + 1
        self.logp[idx] = logp
        self.cum_logp[idx] = self.cum_logp[parent] + logp
        self.anc[idx] = self.anc[parent]
        self.anc[idx, idx] = True
        if self.is_chain:
            self.is_chain = k == 1 and int(parent) == self.size - 1
        self.size += k
        self.levels += 1
        return idx

    def view(self) -> "Tree":
        """The used part of the tree (no copies)."""
        n = self.size
        return Tree(self.tokens[:n], self.parents[:n], self.depth[:n], self.logp[:n], self.cum_logp[:n],
                    self.anc[:n, :n], n, self.is_chain, self.levels, self.root_conf)

    def subset(self, keep: Tensor) -> "Tree":
        """The tree of nodes ``keep`` (ascending indices, the root first, closed under ancestors)."""
        t = self.view()
        remap = torch.full((t.size,), -1, dtype=torch.long, device=keep.device)
        remap[keep] = torch.arange(keep.numel(), device=keep.device)
        parents = t.parents[keep]
        parents = torch.where(parents >= 0, remap[parents.clamp(min=0)], parents)
        depth = t.depth[keep]
        levels = int(depth[-1])  # BFS order: the last node is the deepest
        return Tree(t.tokens[keep], parents, depth, t.logp[keep], t.cum_logp[keep], t.anc[keep][:, keep],
                    keep.numel(), t.is_chain or levels == keep.numel() - 1, levels, t.root_conf)

    def record(self, path: Tensor, position: int) -> dict:
        """A JSON-ready picture of this tree and its verification (a few hundred bytes per node)."""
        t = self.view()
        return {"position": position, "root_conf": round(self.root_conf, 4), "parents": t.parents.tolist(),
                "tokens": t.tokens.tolist(), "depth": t.depth.tolist(),
                "prob": [round(x, 4) for x in t.logp.exp().tolist()], "accepted": path.tolist()}


def bit_matrix(masks: list[int], n: int, device: torch.device | str = "cpu") -> Tensor:
    """[len(masks), n] bool: entry [i, j] is bit j of the Python int ``masks[i]`` (a few tensor ops for any n,
    where a nested list of n * n bools would cost Python time quadratic in the tree)."""
    words = -(-n // 62)
    w = torch.tensor([[m >> 62 * k & (1 << 62) - 1 for k in range(words)] for m in masks], dtype=torch.long)
    bits = (w[:, :, None] >> torch.arange(62)) & 1
    return bits.reshape(len(masks), words * 62)[:, :n].bool().to(device)


def _alloc(capacity: int, device) -> tuple[Tensor, ...]:
    zl = torch.zeros(capacity, dtype=torch.long, device=device)
    zf = torch.zeros(capacity, dtype=torch.float32, device=device)
    return (zl, torch.full((capacity,), -1, dtype=torch.long, device=device), zl.clone(), zf, zf.clone(),
            torch.zeros(capacity, capacity, dtype=torch.bool, device=device))


def select_path(tree: Tree, target_next: Tensor) -> Tensor:
    """Longest greedy-consistent root-to-node path (Section 3.5), as node indices starting at 0.

    ``target_next[i]`` is the target's argmax after consuming the path to node i. A node is accepted when
    its token equals its parent's target prediction and every ancestor is accepted. Siblings carry
    distinct tokens, so the deepest accepted node is unique. The bonus token is ``target_next[path[-1]]``.
    """
    t = tree.view()
    correct = t.tokens == target_next[t.parents.clamp(min=0)]
    correct[0] = True
    ok = ~(t.anc & ~correct[None, :]).any(dim=1)
    best = torch.where(ok, t.depth, -1).argmax()
    return t.anc[best].nonzero().squeeze(1)
