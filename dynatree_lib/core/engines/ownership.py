"""One copy of every weight: a runner that lays a transformers model's weights out its own way takes them over, and
the model keeps views of the runner's tensors, or nothing it could compute with.

A fast-path runner (``static.StaticRunner``) reads every matmul weight fused (q/k/v; gate/up) and stacked over the
layers, and in bf16 on a CPU with AVX512-BF16 packed for the kernels (``kernels.pack``): new tensors, beside which
the model's own parameters would be a second copy of every weight. So when it is built, the runner takes them over
(``hand_over``), parameter by parameter:

- where the runner holds the parameter as the model does ([n, d] rows of a stacked unpacked weight, a norm, the
  embedding or head it reads as they are, an embedding it borrows plain from another runner), the model's parameter
  becomes a view of the runner's tensor: the model computes as before, from the runner's memory (fp32; bf16
  without the kernels);
- where it does not (a packed weight, a tied embedding among them: it is read from the packed head; the output layer
  of a draft head over a token subset, whose rows the runner gathered), the parameter is released: a
  ``ReleasedWeight`` takes its place, which keeps its shape, dtype and device (configs, ``vocab_rows``, a
  generator's device, ``weight_bytes`` still read them) and raises ``ReleasedWeightError`` at any use of its values
  (a forward, ``.to()``, ``state_dict()``, ``data_ptr()``), naming the parameter, the runner that took it and what
  to do instead. Never a silent result.

Every copy the served pair still makes is named: the subset head's gathered rows (a draft head over a token subset
reads only those) and the caches (KV caches, RoPE tables, an EAGLE-3 runner's per-slot buffers); the test
``test_one_copy.py`` adds up the storages a served pair holds. An EAGLE-3 head reads the target runner's embedding
tensor, and on the fused engine its runner packs the head's weights, releasing their plain ones
(``eagle3_fused.PackedHead``).

What still needs a model's own weights is served apart: transformers' own loop (HF's AR and assisted generation)
runs on models loaded without a runner (``harness.setup.profiles.Models.load_pair`` with ``models_for="transformers"``), or
beside runners built with ``keep_model=True`` (``models_for="both"``: the main table interleaves both loops in one
process, two copies there, and the forward-cost run builds a second draft runner from its model); everything else
reads the runner (``harness.measure.cell.divergence_gap``) or the model's config.
"""
from __future__ import annotations

import gc
import types

import torch
from torch import Tensor, nn
from torch.utils._pytree import tree_leaves


class ReleasedWeightError(RuntimeError):
    """A transformers model's weight was used after a runner took it over (see module docstring)."""


class ReleasedWeight(Tensor):
    """A released parameter: the shape, dtype and device of ``like`` and no values (see module docstring).
    ``what``: the parameter's name in its model; ``holder``: the runner that took it over."""

    @staticmethod
    def __new__(cls, like: Tensor, what: str, holder: str):
        t = Tensor._make_wrapper_subclass(cls, like.shape, dtype=like.dtype, device=like.device, requires_grad=False)
        t.what, t.holder = what, holder
        return t

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        released = next(a for a in tree_leaves((args, kwargs)) if isinstance(a, ReleasedWeight))
        raise released.error(str(func))

    def error(self, use: str) -> ReleasedWeightError:
        return ReleasedWeightError(
            f"{self.what} ({tuple(self.shape)}, {self.dtype}) was released: {self.holder} took this model's weights "
            f"over and holds them in its own layout (one copy of every weight), so the model is a shell now (config "
            f"and shapes only) and cannot compute ({use}). Run the runner instead, or build it with keep_model=True "
            "(keep_head=True for a head's runner) to keep the model's own weights beside it (two copies); "
            "harness.setup.models.load_pair with engine='eager' gives the transformers models alone")

    def data_ptr(self) -> int:
        raise self.error("data_ptr()")

    def untyped_storage(self):
        raise self.error("untyped_storage()")

    def __repr__(self, *, tensor_contents=None) -> str:
        return f"ReleasedWeight({self.what}, shape={tuple(self.shape)}, dtype={self.dtype}, taken by {self.holder})"


def hand_over(model: nn.Module, held: dict[int, Tensor | None], holder: str) -> None:
    """``holder`` (a runner's description) takes ``model``'s weights over: every parameter whose ``id`` is a key of
    ``held`` becomes a view of the runner's tensor ``held[id]`` (its shape and dtype, the runner's storage) or,
    where that is None, a ``ReleasedWeight``. A parameter shared by several modules (a tied head) gets one
    replacement, so it stays shared."""
    keep = list(model.parameters())  # every original stays alive (its id unique) until done
    new: dict[int, Tensor] = {}
    for path, module in model.named_modules():
        for name, p in list(module._parameters.items()):
            if p is None or id(p) not in held:
                continue
            if id(p) not in new:
                what = f"{path}.{name}" if path else name
                new[id(p)] = ReleasedWeight(p, what, holder) if held[id(p)] is None else view(p, held[id(p)], what)
            module._parameters[name] = new[id(p)]
    del keep


def view(p: Tensor, t: Tensor, what: str) -> nn.Parameter:
    """A parameter like ``p`` over the runner's tensor ``t`` (the same values, laid out as ``p``)."""
    if t.shape != p.shape or t.dtype != p.dtype:
        raise ValueError(f"{what}: the runner's view is {tuple(t.shape)} {t.dtype}, the parameter "
                         f"{tuple(p.shape)} {p.dtype}")
    return nn.Parameter(t.detach(), requires_grad=p.requires_grad)


OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.FrameType,
          types.CodeType)  # what ``reachable_storages`` does not look into: code, not data


def reachable_storages(*roots) -> dict[int, int]:
    """Every storage of a tensor reachable from ``roots`` through objects' attributes and containers (not through
    classes, modules or functions): data pointer -> bytes, each storage once. A released weight holds none."""
    seen, out, todo = set(), {}, list(roots)
    while todo:
        o = todo.pop()
        if id(o) in seen or isinstance(o, OPAQUE + (ReleasedWeight,)):
            continue
        seen.add(id(o))
        if isinstance(o, torch.Tensor):
            s = o.untyped_storage()
            out[s.data_ptr()] = s.nbytes()
        else:
            todo.extend(gc.get_referents(o))
    return out
