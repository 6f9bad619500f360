"""The level-batched tree drafter: one draft forward per tree level, never one per node."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .drafts.lookup import MAX_MATCH
from .policies.base import COPY, STOP, DraftPolicy, Level
from .engines.runner import Runner
from .sampling import Sampling
from .tree import Tree, bit_matrix

GREEDY = Sampling()


@dataclass
class DraftState:
    """How many committed tokens the draft has consumed (its cache may hold fewer: StreamingLLM evicts)."""

    consumed: int = 0


@torch.no_grad()
def draft_tree(draft: Runner, state: DraftState, ids: Tensor, policy: DraftPolicy, max_depth: int,
               *, sampling: Sampling = GREEDY, generator: torch.Generator | None = None) -> tuple[Tree, int]:
    """Grow a draft tree rooted at the last committed token ``ids[-1]``; returns it and the number of
    draft forwards.

    Level 0 feeds the committed tokens the draft has not consumed yet (causal, one forward); every later
    level feeds all nodes chosen for expansion at once, each seeing the committed prefix plus its own
    ancestors. Leaves are never fed to the draft. On return the draft cache holds the committed prefix only.
    Before each level the policy says how it comes (``next_level``): drafted, taken from the context lookup's copies
    without a forward (``Copies``; those nodes wait, unfed, for the next drafted level) or not at all. The tree grows
    in Python lists (``Growth``) and becomes a ``Tree`` once, at the end: a level has a few nodes, and as tensors its
    bookkeeping would cost more than the rule itself. Children are ranked by the draft's probabilities at
    ``sampling.draft_temperature``; the policy picks how many each node gets (``select``) and which new nodes grow
    (``expand``); when ``sampling`` is not greedy, a ``sampled`` policy's children at levels the network drafted are
    then drawn, that many, without replacement from those probabilities (with ``generator``).
    A draft with a ``depth_limit`` (one head per level) gets no node deeper than it.
    """
    policy.begin()
    max_depth = min(max_depth, policy.max_depth, max_depth if draft.depth_limit is None else draft.depth_limit)
    if max_depth <= 0:
        return Tree.new(ids[-1], ids.device), 0
    sampled = policy.sampled and not sampling.greedy
    grow, copies = Growth(int(ids[-1])), Copies(draft, ids)
    feed = Feed(draft, state, ids, sampling.draft_temperature)
    frontier, strong = [0], []
    while True:
        level = Level(grow.cum, frontier, feed.forwards, lambda: copies.of(grow, frontier))
        how = policy.next_level(level)
        strong += level.strong
        if how == STOP:
            break
        copied = copies.taken(grow, frontier) if how == COPY else None
        if copied is not None:  # these nodes wait, unfed, for the next drafted level (the root: for the catch-up)
            children, logp = grow.copy_children(frontier, copied), None
            feed.wait([u for u in frontier if u != 0])
        else:
            logp = feed.catch_up() if frontier == [0] else feed.level(grow, frontier)
            children = grow.top_children(frontier, logp, policy.max_breadth, draft.vocab)
        picked = pick(policy, grow, frontier, children)
        if sampled and logp is not None and picked:
            children, picked = grow.drawn_children(frontier, picked, logp, draft.vocab, generator)
        if not picked:
            break
        added = grow.add(frontier, picked, children)
        if grow.n_drafted >= policy.n_max:
            break
        frontier = policy.expand([i for i in added if grow.depth[i] < max_depth], grow.depth, grow.cum)
        if not frontier:
            break
    draft.truncate(feed.prefix)
    return grow.tree(ids.device, tuple(strong)), feed.forwards


class Growth:
    """A tree being drafted, as Python lists in BFS order: node 0 is the root; ``masks[i]`` has bit j set when
    node j is node i or one of its ancestors. Path log-probs are summed in fp32, as the tree stores them."""

    def __init__(self, root: int):
        self.tokens, self.parents, self.depth = [root], [-1], [0]
        self.logp, self.cum, self.masks = [0.0], [0.0], [1]
        self.chain, self.root_conf = True, float("nan")
        self.q: list[Tensor] = []  # when sampling: the laws children were drawn from
        self.q_row: dict[int, int] = {}  # node -> row of q its children were drawn from

    @property
    def n_drafted(self) -> int:
        return len(self.tokens) - 1

    def top_children(self, frontier: list[int], logp: Tensor, breadth: int, vocab: Tensor | None) -> "Children":
        """Each frontier node's ``breadth`` most probable children (sorted), from the draft's log-probabilities
        [f, V'] after each. ``vocab``: a head over a token subset scores columns, not ids."""
        top_lp, top_col = logp.topk(min(breadth, logp.shape[-1]), dim=-1)
        return self._children(frontier, logp, top_lp, top_col, vocab)

    def drawn_children(self, frontier: list[int], picked: list[tuple[int, int]], logp: Tensor,
                       vocab: Tensor | None, generator: torch.Generator | None) -> tuple["Children", list[tuple[int,
                                                                                                          int]]]:
        """As many children per frontier node as ``picked`` gives it, drawn without replacement from the
        draft's law there (Gumbel top-k: keys log q + Gumbel noise, the largest first, is the order of
        successive draws), at most as many as the law has tokens; the laws are kept for verification."""
        count = [0] * len(frontier)
        for r, _ in picked:
            count[r] += 1
        noise = -torch.empty_like(logp).exponential_(generator=generator).log()
        keys = (logp + noise).masked_fill(logp == float("-inf"), float("-inf")).topk(max(count), dim=-1)
        support = (logp > float("-inf")).sum(-1).tolist()
        for r, k in enumerate(count):
            count[r] = min(k, support[r])
            if count[r]:
                self.q_row[frontier[r]] = len(self.q)
                self.q.append(logp[r])
        children = self._children(frontier, logp, logp.gather(1, keys.indices), keys.indices, vocab)
        return children, [(r, j) for r, k in enumerate(count) for j in range(k)]

    def _children(self, frontier: list[int], logp: Tensor, child_lp: Tensor, col: Tensor, vocab: Tensor | None):
        tokens = col if vocab is None else vocab[col]
        child_cum = torch.tensor([self.cum[u] for u in frontier], device=child_lp.device)[:, None] + child_lp
        if len(self.tokens) == 1:
            self.root_conf = math.exp(float(logp[0].max()))
        return Children(child_lp.tolist(), tokens.tolist(), child_cum.tolist())

    def copy_children(self, frontier: list[int], copies: list[tuple[int, float]]) -> "Children":
        """One child per frontier node, its copy token, scored log(weight): a lower bound on its mixture
        probability."""
        logp = [[math.log(w)] for _, w in copies]
        return Children(logp, [[x] for x, _ in copies], [[self.cum[u] + row[0]] for u, row in zip(frontier, logp)])

    def add(self, frontier: list[int], picked: list[tuple[int, int]], children: "Children") -> list[int]:
        """Append the picked children ``(row, candidate)`` in order; returns their node indices."""
        n = len(self.tokens)
        added = list(range(n, n + len(picked)))
        self.chain = self.chain and len(picked) == 1 and frontier[picked[0][0]] == n - 1
        for i, (r, j) in zip(added, picked):
            u = frontier[r]
            self.tokens.append(children.tokens[r][j]), self.parents.append(u), self.depth.append(self.depth[u] + 1)
            self.logp.append(children.logp[r][j]), self.cum.append(children.cum[r][j])
            self.masks.append(self.masks[u] | 1 << i)
        return added

    def path(self, u: int) -> list[int]:
        """Tokens of node ``u``'s ancestors below the root, then ``u``'s (the root is the last committed token)."""
        out = []
        while u > 0:
            out.append(self.tokens[u])
            u = self.parents[u]
        return out[::-1]

    def tree(self, device, copies: tuple = ()) -> Tree:
        q = torch.stack(self.q) if self.q else None
        q_row = [self.q_row.get(i, -1) for i in range(len(self.tokens))] if self.q else None
        return Tree.build(self.tokens, self.parents, self.logp, self.cum, device=device, root_conf=self.root_conf,
                          copies=tuple(copies), q=q, q_row=q_row)


@dataclass
class Children:
    """A level's candidate children, one row per frontier node: draft log-probs, tokens, path log-probs."""

    logp: list[list[float]]
    tokens: list[list[int]]
    cum: list[list[float]]


def pick(policy: DraftPolicy, grow: Growth, frontier: list[int], children: Children) -> list[tuple[int, int]]:
    """The children the policy keeps, as (frontier row, candidate) in BFS order; past the node budget, the
    most probable (ties: the first)."""
    keep = policy.select(children.logp, children.cum, [grow.depth[u] for u in frontier])
    picked = [(r, j) for r, row in enumerate(keep) for j, k in enumerate(row) if k]
    room = policy.n_max - grow.n_drafted
    if len(picked) > room:
        best = sorted(range(len(picked)), key=lambda i: -children.cum[picked[i][0]][picked[i][1]])[:room]
        picked = [picked[i] for i in sorted(best)]
    return picked


class Feed:
    """What the draft's cache has been fed during one tree: the committed prefix (``prefix`` slots), the drafted
    nodes in cache order (``processed``) and the nodes whose level came from the lookup and wait to be fed
    with the next level that runs the draft (``waiting``); ``forwards`` counts draft forwards."""

    def __init__(self, draft: Runner, state: DraftState, ids: Tensor, temperature: float = 1.0):
        self.draft, self.state, self.ids, self.temperature = draft, state, ids, temperature
        self.prefix, self.forwards = draft.length, 0
        self.processed: list[int] = []
        self.waiting: list[int] = []

    def catch_up(self) -> Tensor:
        """Feed the committed tokens the draft has not consumed (causal); log-probs [1, V'] after the last."""
        new = self.ids[self.state.consumed:]
        logp = self.draft.logprobs(new, self.draft.length + torch.arange(new.numel(), device=self.ids.device),
                                   last_only=True, temperature=self.temperature)
        self.state.consumed = self.ids.numel()
        self.prefix, self.forwards = self.draft.length, self.forwards + 1
        return logp

    def wait(self, nodes: list[int]) -> None:
        self.waiting += nodes

    def level(self, grow: Growth, frontier: list[int]) -> Tensor:
        """One draft forward over the waiting nodes and the frontier (each seeing the prefix and its
        ancestors; a chain is plain causal attention over the cache: no mask); the frontier's log-probs."""
        if self.state.consumed < self.ids.numel():  # level 0 came from the lookup: the committed tokens go in first
            self.catch_up()
        fed = self.waiting + frontier
        cols = self.processed + fed
        dev = self.ids.device
        visible = None if grow.chain else bit_matrix([grow.masks[u] for u in fed], len(grow.tokens), dev)[:, cols]
        logp = self.draft.logprobs(torch.tensor([grow.tokens[u] for u in fed], device=dev),
                                   torch.tensor([self.prefix - 1 + grow.depth[u] for u in fed], device=dev),
                                   visible, self.prefix, temperature=self.temperature)
        self.processed, self.waiting, self.forwards = cols, [], self.forwards + 1
        return logp[len(fed) - len(frontier):]


class Copies:
    """The context lookup's copy after each node of a level (``Level.copies``), looked up once a level and only where
    the policy asks: a level taken from them gives each node that one child (scored by its weight) without a draft
    forward (at the root the committed tokens' feed waits too, so a tree may cost no draft forward at all)."""

    def __init__(self, draft: Runner, ids: Tensor):
        self.draft, self.seen = draft, {}
        self.context = ids[-MAX_MATCH:].tolist()  # the committed tail: the longest match there is

    def of(self, grow: Growth, nodes: list[int]) -> list[tuple[int, float] | None] | None:
        """(token, weight) after each node, None for a node without one; None where the draft has no lookup."""
        if not self.draft.has_lookup:
            return None
        key = tuple(nodes)
        if key not in self.seen:
            self.seen = {key: [self.draft.lookup(self.context + grow.path(u)) for u in nodes]}
        return self.seen[key]

    def taken(self, grow: Growth, nodes: list[int]) -> list[tuple[int, float]] | None:
        """The level's copies where every node has one (``COPY``), else None (the level is drafted)."""
        out = self.of(grow, nodes)
        return out if out is not None and all(c is not None for c in out) else None
