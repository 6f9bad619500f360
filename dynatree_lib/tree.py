"""Token trees as flat tensors: BFS layout, ancestor matrix, attention mask, greedy path selection.

A tree is stored in BFS order. Index 0 is the *root*: the last committed token, which the target has
not yet seen (its KV entry is produced by the verification forward). Drafted nodes are 1..n, each with
a parent index smaller than its own, so ancestors always precede descendants.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Tree:
    """A draft token tree in BFS order, preallocated to ``capacity`` nodes (root included)."""

    tokens: Tensor    # [cap] long: token id of each node (node 0 = root / pending token)
    parents: Tensor   # [cap] long: parent index, -1 for the root
    depth: Tensor     # [cap] long: 0 for the root, 1 for its children, ...
    logp: Tensor      # [cap] float: draft log-prob of the node given its parent's context (0 at root)
    cum_logp: Tensor  # [cap] float: sum of logp along the root-to-node path
    anc: Tensor       # [cap, cap] bool: anc[i, j] = j is an ancestor of i or i itself
    size: int = 1
    is_chain: bool = True  # every node's parent is the node before it (a linear draft)
    levels: int = 0        # depth of the deepest node (each ``add`` appends one level)

    @staticmethod
    def new(root_token: Tensor | int, capacity: int, device: torch.device | str = "cpu") -> "Tree":
        """A tree holding only the root, with room for ``capacity - 1`` drafted nodes."""
        tokens = torch.zeros(capacity, dtype=torch.long, device=device)
        tokens[0] = root_token
        anc = torch.zeros(capacity, capacity, dtype=torch.bool, device=device)
        anc[0, 0] = True
        parents = torch.full((capacity,), -1, dtype=torch.long, device=device)
        zeros_l = torch.zeros(capacity, dtype=torch.long, device=device)
        zeros_f = torch.zeros(capacity, dtype=torch.float32, device=device)
        return Tree(tokens, parents, zeros_l, zeros_f, zeros_f.clone(), anc)

    @property
    def n_drafted(self) -> int:
        return self.size - 1

    def add(self, parent: Tensor, token: Tensor, logp: Tensor) -> Tensor:
        """Append one level of children (in BFS order, all parents at the current deepest level) and
        return their indices. One tensor op per field, no per-node Python."""
        k = parent.numel()
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
        return Tree(self.tokens[:n], self.parents[:n], self.depth[:n], self.logp[:n],
                    self.cum_logp[:n], self.anc[:n, :n], n, self.is_chain, self.levels)


def attention_mask(anc_rows: Tensor, prefix_len: int, dtype: torch.dtype) -> Tensor:
    """4D additive mask [1, 1, q, prefix_len + k] for q query nodes over a cached prefix.

    Every query sees the whole prefix, and among the k tree columns only its ancestors and itself
    (``anc_rows`` is [q, k] bool). Additive float (0 / finfo.min) in the model dtype, because a boolean
    4D mask is silently misread on some attention paths of transformers.
    """
    q, k = anc_rows.shape
    mask = torch.zeros(1, 1, q, prefix_len + k, dtype=dtype, device=anc_rows.device)
    mask[0, 0, :, prefix_len:].masked_fill_(~anc_rows, torch.finfo(dtype).min)
    return mask


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
