"""What every draft head on the target's hidden states shares (EAGLE-3, Medusa, Hydra): ``HeadRunner``, the per-slot
and per-position state of its draft runner; ``waves``, a tree's rows in the order a head must run them; and the two
pieces of its folder's format, ``OUR_KEY`` and ``draft_columns``."""
from __future__ import annotations

import torch
from torch import Tensor

from ...engines.runner import Draft, first_moved

OUR_KEY = "dynatree_lib"  # config.json: what this library adds to the speculators format (ignored by vLLM)


class HeadRunner(Draft):
    """What every draft runner on the target's hidden states keeps per slot and per position (EAGLE-3, Medusa and
    Hydra heads): ``target``, the target's features of positions ``base .. known - 1`` (handed over by
    ``observe_target``), ``pos``, each slot's token position, and the slot rows of ``slot_rows`` that ``commit``
    moves with their slots. ``what`` names the head in errors.

    Features are kept only while a forward may still read them, not for the whole context. A committed row at
    position p reads the features of p - 1 (and Medusa's and Hydra's tree nodes those of the position before their
    root, the last committed token), so once committed rows up to position P are fed (``fed``), no later read goes
    below P - 1 and ``observe_target`` drops the rows before it. The loops never truncate a head below the rows it
    was fed; a read of a dropped position is refused with the positions held, never served from other rows."""

    what: str = "the head"

    def init_slots(self, max_len: int, feature_width: int, dtype: torch.dtype, device) -> None:
        self.max_len, self.width, self.dtype, self.device = max_len, feature_width, dtype, device
        self.pos = torch.zeros(max_len, dtype=torch.long, device=device)  # each slot's token position
        self.reset()

    def reset(self) -> None:
        self.length = self.known = self.base = 0
        self.floor = self.last_read = 0  # no read goes below floor; last_read: the highest of the last read
        self.target = torch.zeros(0, self.width, dtype=self.dtype, device=self.device)  # positions base .. known - 1

    def observe_target(self, features: Tensor, start: int) -> None:
        n = features.shape[0]
        if not self.base <= start <= self.known or start + n > self.max_len:
            raise ValueError(f"target features for positions {start}..{start + n - 1} do not follow the "
                             f"{self.base}..{self.known - 1} held (or exceed the {self.max_len} slots of {self.what})")
        lo = max(min(self.floor, start), self.base)
        kept, features = self.target[lo - self.base:start - self.base], features.to(self.device, self.dtype)
        self.target = torch.cat([kept, features]) if kept.numel() else features  # read only: no copy needed
        self.base, self.known = lo, start + n

    def fed(self) -> None:
        """A committed forward ran: its rows' reads (``last_read``: the position before its last row) bound every
        later read from below."""
        self.floor = max(self.floor, self.last_read)

    def feature_rows(self, before: Tensor) -> Tensor:
        """Rows of ``target`` holding the features of positions ``before`` (-1: none, kept -1); one host read."""
        hi, lo = torch.stack([before.max(), torch.where(before >= 0, before, self.known).min()]).tolist()
        if hi >= self.known or lo < self.base:
            raise ValueError(f"{self.what} holds the target's features of positions {self.base}..{self.known - 1}, "
                             f"and a row needs those of position {hi if hi >= self.known else lo}")
        self.last_read = hi
        return torch.where(before >= 0, before - self.base, -1)

    def features_of(self, before: Tensor) -> Tensor:
        """The target's features of positions ``before`` [n, width] (zeros for -1)."""
        rows = self.feature_rows(before)
        if not self.target.shape[0]:
            return self.target.new_zeros(rows.numel(), self.width)
        return torch.where((rows >= 0)[:, None], self.target[rows.clamp(min=0)], 0.0)

    def new_slots(self, positions: Tensor) -> Tensor:
        """The slots of new rows at ``positions`` (recorded), refused past the slots."""
        q = positions.numel()
        if self.length + q > self.max_len:
            raise ValueError(f"the {self.max_len} slots of {self.what} are full ({self.length} used, {q} more asked)")
        self.pos[self.length:self.length + q] = positions
        return torch.arange(self.length, self.length + q, device=positions.device)

    def slot_rows(self) -> list[Tensor]:
        """The per-slot tensors (slot first) that move with their slots."""
        return [self.pos]

    def move(self, src: Tensor, dst: slice) -> None:
        """Slots ``src`` to ``dst`` (``commit``'s copy)."""
        for t in self.slot_rows():
            t[dst] = t[src]

    def truncate(self, length: int) -> None:
        self.length = length

    def commit(self, start: int, keep: Tensor) -> None:
        n, m = keep.numel(), first_moved(keep)
        if m < n:
            self.move(keep[m:] + start, slice(start + m, start + n))
        self.length = start + n


def waves(parents: list[int], length: int) -> list[list[int]]:
    """Rows (new slot ``length + r``) in waves: a row runs once its parent's slot has run (slots below ``length``
    ran before this forward). Rows of one tree level form one wave."""
    done, left, out = set(), list(range(len(parents))), []
    while left:
        wave = [r for r in left if parents[r] < length or parents[r] in done]
        done |= {length + r for r in wave}
        left = [r for r in left if r not in wave]
        out.append(wave)
    return out


def draft_columns(ids, size: int) -> Tensor:
    """A head's draft columns: the target ids ``ids`` sorted ascending, refused unless ``size`` distinct ids."""
    ids = torch.as_tensor(ids, dtype=torch.long).sort().values
    if ids.numel() != size or ids.unique().numel() != ids.numel():
        raise ValueError(f"the draft vocabulary needs {size} distinct token ids, got {ids.numel()}")
    return ids
