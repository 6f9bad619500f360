"""bf16 matmul, attention and a whole Llama forward for a few rows at memory speed on CPUs with AVX512-BF16
(``csrc/linear_bf16.cpp``).

Decoding a token reads every weight once, so verifying a tree of k <= 16 tokens should cost about what one
token costs. With library matmuls it does not: oneDNN's bf16 matmul re-lays a plain weight out on every
call, and inductor's matrix-vector loops serve one row only. ``pack`` lays each weight out once
([n/16, d/2, 32]: two input features for 16 outputs per 64 bytes) and ``linear`` multiplies by it with
VDPBF16PS, fp32 sums in a fixed order: a row's result is the same bits whatever rows come with it.
``attention`` reads a layer's cache slices in place (ATen's batched matmul copies them first) and keeps the
same property for a tree: a node's row is computed from its query and its visible slots only, in slot order,
so it gets the bits the same token gets in a plain sequence.
``embedding`` reads rows of an embedding held packed (a tied model keeps its embedding and its output layer as one
packed tensor: ``static``), as ``forward`` does.
``forward`` runs a whole Llama forward (embedding, every layer, the head) in one call and one parallel region,
with these matmuls and this attention: the per-kernel start-up a layered forward pays a dozen times a layer is
paid once (see ``static``; what each engine costs is measured in ``results/<profile>/costs.json``).
``eagle3_step`` runs an EAGLE-3 head's step (its one layer, norm and head) by the same code in one call
(``eagle3_fused``).

Two instruction sets multiply (``isa``): AVX512-BF16 (``AVX512``: VDPBF16PS over 64-byte lines) everywhere the
kernels run, and AMX tiles (``AMX``: TDPBF16PS over the same packed weights, 16 rows a tile) where the CPU has
``amx_bf16``, the build has AMX and Linux grants the process the tile state. Each is batch-invariant on its own;
they differ from each other in rounding, so a process runs one (``default_isa``: AMX where it can, ``DYNATREE_AMX=0``
to refuse it; ``using_isa`` for a test that compares both) and its records name it (``environment``'s "kernels").
Under AMX, attention's scores go through tiles too; its softmax and weighted sums stay on AVX512.

The kernel is built with torch's C++ extension loader on first use (once; cached in
``~/.cache/torch_extensions`` under a name that hashes the source, so every checkout of the same kernel shares the
build; a lock that a killed build left there is removed once it is ``STALE_LOCK_S`` old),
with AMX where the compiler has it, else without. Where the CPU lacks AVX512-BF16, the build fails, or
``DYNATREE_KERNELS=0`` is set, ``available()`` is False and the fast path keeps its plain matmuls and attention
(the engine name says which ran).
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

SOURCE = Path(__file__).with_name("csrc") / "linear_bf16.cpp"
NAME = "dynatree_linear_bf16"  # the extension's name: its build folder under torch's extensions root
STALE_LOCK_S = 600  # a build takes a minute at most; a lock older than this outlived the build that made it
FLAGS = ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-fopenmp"]
AMX_FLAGS = ["-mamx-tile", "-mamx-bf16"]  # the tile intrinsics; a compiler without them builds the AVX512 path only
AVX512, AMX = "avx512-bf16", "amx-bf16"  # the instruction sets the matmuls run on (``isa``)


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``, read once a process; empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    return frozenset(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")),
                     []))


def cpu_has_avx512_bf16() -> bool:
    return "avx512_bf16" in cpu_flags()


def cpu_has_amx() -> bool:
    return {"amx_bf16", "amx_tile"} <= cpu_flags()


@functools.cache
def available() -> bool:
    """Whether ``linear`` and ``attention`` can run here (built once per process; a failed build warns and
    returns False)."""
    if os.environ.get("DYNATREE_KERNELS", "1") == "0" or not cpu_has_avx512_bf16():
        return False
    from torch.utils.cpp_extension import load

    errors = []
    for flags in (FLAGS + AMX_FLAGS, FLAGS):
        try:
            clear_stale_lock()
            if not (build_folder() / f"{build_name()}.so").exists():
                print(f"dynatree: building the bf16 kernels (once; cached in {build_folder()})", file=sys.stderr,
                      flush=True)
            load(build_name(), [str(staged_source())], extra_cflags=flags, is_python_module=False, verbose=False)
            return True
        except Exception as e:  # no compiler, no ninja, an old compiler without -mavx512bf16 or -mamx-tile, ...
            errors.append(f"{type(e).__name__}: {str(e)[:200]}")
    warnings.warn(f"the bf16 kernels did not build ({errors[-1]}); the fast path uses plain matmuls and attention")
    return False


@functools.cache
def why_no_amx() -> str | None:
    """Why the matmuls cannot run on AMX tiles here (None: they can). Warns once where the CPU has AMX but the
    kernels cannot use it (the build, or Linux, refused)."""
    if not cpu_has_amx():
        return "the CPU has no amx_bf16"
    if os.environ.get("DYNATREE_AMX", "1") == "0":
        return "DYNATREE_AMX=0"
    if not available():
        return "the bf16 kernels are not available"
    why = None
    if not torch.ops.dynatree.amx_built():
        why = "the kernels were built without AMX (the compiler lacks -mamx-tile -mamx-bf16)"
    elif (errno := torch.ops.dynatree.amx_grant()) != 0:
        why = f"Linux refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM: errno {errno})"
    if why:
        warnings.warn(f"this CPU has AMX, but {why}: the matmuls run on AVX512-BF16")
    return why


_chosen_isa: list[str] = []  # ``using_isa``'s choice, innermost last


def default_isa() -> str | None:
    """The instruction set a runner built now multiplies with: AMX where ``why_no_amx`` says it can, else AVX512
    (None where the kernels do not run), unless ``using_isa`` chose one."""
    if not available():
        return None
    if _chosen_isa:
        return _chosen_isa[-1]
    return AMX if why_no_amx() is None else AVX512


def isas() -> tuple[str, ...]:
    """The instruction sets this machine can run the kernels on."""
    return () if not available() else (AVX512,) + ((AMX,) if why_no_amx() is None else ())


@contextlib.contextmanager
def using_isa(isa: str):
    """Runners built inside the block multiply with ``isa`` (one of ``isas()``): a test compares the two paths."""
    if isa not in isas():
        raise ValueError(f"isa {isa!r} cannot run here (this machine runs {isas()}; {why_no_amx() or ''})")
    _chosen_isa.append(isa)
    try:
        yield
    finally:
        _chosen_isa.pop()


@functools.cache
def build_name() -> str:
    """The extension's name, and so its build folder: ``NAME`` and a hash of the source and the flags. Checkouts
    with the same kernel share one build; a changed kernel builds beside the old one."""
    import hashlib

    h = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS + AMX_FLAGS).encode()).hexdigest()[:10]
    return f"{NAME}_{h}"


def build_folder() -> Path:
    from torch.utils.cpp_extension import _get_build_directory  # the loader's own build folder (no public accessor)

    return Path(_get_build_directory(build_name(), verbose=False))


def staged_source() -> Path:
    """The source copied into the build folder, where every checkout finds it at one path: the build's ninja file
    names the source's path, and a build from another checkout's path would compile again."""
    staged = build_folder() / SOURCE.name
    if not staged.exists() or staged.read_bytes() != SOURCE.read_bytes():
        tmp = staged.with_name(f".{SOURCE.name}.{os.getpid()}")
        tmp.write_bytes(SOURCE.read_bytes())
        os.replace(tmp, staged)
    return staged


def clear_stale_lock() -> None:
    """Remove a build lock that a build killed midway left behind (Ctrl-C during the first kernel build): torch's
    loader waits for as long as the lock exists, so every later process would hang at its first kernel call
    without a word."""
    lock = build_folder() / "lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return
    if age > STALE_LOCK_S:
        warnings.warn(f"removing {lock}: a kernel build that did not finish left it {age:.0f} s ago")
        lock.unlink(missing_ok=True)


def packable(w: Tensor) -> bool:
    """A weight [n, d] the kernel takes: bf16 on the CPU, n a multiple of 16, d even."""
    return (w.dim() == 2 and w.dtype == torch.bfloat16 and w.device.type == "cpu"
            and w.shape[0] % 16 == 0 and w.shape[1] % 2 == 0)


def pack(w: Tensor) -> Tensor:
    """[n, d] weight -> [n/16, d/2, 32] for ``linear`` (element [b, c, 2i + e] is w[16b + i, 2c + e]); an int8
    weight (``core.engines.int8_rows``) packs the same way, for ``eagle3_step``."""
    n, d = w.shape
    return w.reshape(n // 16, 16, d // 2, 2).transpose(1, 2).contiguous().reshape(n // 16, d // 2, 32)


def int8_rows(w: Tensor) -> tuple[Tensor, Tensor] | None:
    """(int8 values [n, d], powers of two [n] fp32) of a bf16 CPU weight on int8 rows (``core.engines.int8_rows``),
    whose
    product is the weight exactly; None where it is not on them. One C++ pass: no fp32 copy, no other kernel run."""
    q, s = torch.ops.dynatree.int8_rows(w)
    return (q, s) if q.numel() else None


def unpacked_shape(w: Tensor) -> tuple[int, int]:
    """[n, d] of a weight held plain or packed by ``pack``."""
    return tuple(w.shape) if w.dim() == 2 else (w.shape[0] * 16, w.shape[1] * 2)


def embedding(tokens: Tensor, w: Tensor) -> Tensor:
    """Rows ``tokens`` ([...] ids) of an embedding held plain [V, d] or packed by ``pack`` (a tied model's output
    layer, its one copy: the rows gathered from their blocks, the same values); [..., d]."""
    if w.dim() == 2:
        return F.embedding(tokens, w)
    blocks, half, _ = w.shape
    return w.view(blocks, half, 16, 2)[tokens // 16, :, tokens % 16].reshape(*tokens.shape, 2 * half)


def linear(x: Tensor, w_packed: Tensor, isa: str = AVX512) -> Tensor:
    """``x @ w.T`` for bf16 ``x`` [k, d] and ``w_packed = pack(w)``; [k, n] in bf16, on ``isa``'s instructions."""
    return torch.ops.dynatree.linear_bf16(x, w_packed, isa == AMX)


def attention_takes(head_dim: int) -> bool:
    """Whether ``attention`` serves this head size (a multiple of 32, at most 256)."""
    return head_dim % 32 == 0 and 0 < head_dim <= 256


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, isa: str = AVX512) -> Tensor:
    """Grouped-query attention in bf16: ``q`` [H, n, hd] over ``k``, ``v`` [KV, kv, hd] (strided views of a
    cache are read in place) with an additive ``mask`` [n, kv] (entries <= -1e30 hide a slot; query head h
    reads KV head h // (H / KV)); returns [n, H * hd]. Scores, softmax and sums in fp32; a row's bits do not
    depend on the other rows or on hidden slots. On ``AMX`` the scores go through tiles (the rest is the same)."""
    return torch.ops.dynatree.attention_bf16(q, k, v, mask, isa == AMX)


class CallClock:
    """Seconds spent inside the one-call forwards (``forward``, ``greedy_decode``, ``eagle3_step``: from the Python
    call to its return) since the process started. What a generation spends outside them is the host's work
    between forwards (``measure.cell``'s ``host_s``): on a CPU it runs on caches the forwards' weight streams have
    just emptied, so it costs more than its size suggests."""

    seconds = 0.0

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        CallClock.seconds += time.perf_counter() - self.start


def forward_takes(hidden: int, intermediate: int) -> bool:
    """Whether ``forward`` serves these sizes (multiples of 16; the head size as ``attention_takes``)."""
    return hidden % 16 == 0 and intermediate % 16 == 0


def forward(tokens: Tensor, positions: Tensor, slots: Tensor, mask: Tensor, net, *, last_only: bool = False,
            greedy: bool = False, features: Tensor | None = None, feature_layers: tuple[int, ...] = ()) -> Tensor:
    """A whole Llama forward in one call (``static.StaticLlama`` ``net`` with packed weights, its embedding plain or
    packed): logits [q, V] ([1, V] if ``last_only``) of ``tokens`` at ``positions``, keys and values written to cache
    ``slots``,
    attending through the additive bf16 ``mask`` [q, kv] to slots [0, kv). ``greedy``: each row's argmax
    instead (int64 [q] or [1]; the first index of the largest logit, as ``logits.float().argmax(-1)``).
    ``features`` [q, len(feature_layers), d]: filled with the residual stream entering each of ``feature_layers``
    for every row (the hidden states an EAGLE-3 head reads; id L, the number of layers: the last layer's output
    after the final norm, which Medusa and Hydra heads read), by the same call. The matmuls run on ``net.isa``."""
    with CallClock():
        return torch.ops.dynatree.forward_bf16(tokens, positions, slots, mask, *model_arguments(net), last_only,
                                              greedy, features, list(feature_layers), net.isa == AMX)


def model_arguments(net) -> tuple:
    """A ``static.StaticLlama``'s weights, cache, RoPE tables and sizes in the order forward_bf16 and greedy_bf16
    take them (csrc: LlamaWeights)."""
    return (net.embed, net.wqkv, net.wo, net.w13, net.w2, net.ln1, net.ln2, net.norm, net.head, net.k, net.v, net.cos,
            net.sin, net.H, net.KV, net.eps)


def greedy_decode(token: Tensor, start: int, steps: int, eos: int | None, net) -> Tensor:
    """Greedy decoding by ``forward`` in one call: from ``token`` ([1], not yet cached) at slot and position
    ``start``, each forward's argmax is the next one's token, for ``steps`` tokens or up to and including ``eos``;
    the tokens, int64 [n <= steps]. The host does nothing between two forwards (csrc: greedy_bf16)."""
    with CallClock():
        return torch.ops.dynatree.greedy_bf16(token, start, steps, -1 if eos is None else eos,
                                              *model_arguments(net), net.isa == AMX)


# The steps of a fused forward that ``forward_profile`` times, in the order of its columns (csrc: ProfileStep); a wait
# is the time a thread stood at the barrier after the step before it.
PROFILE_STEPS = ("embedding", "norms", "q, k, v + RoPE", "wait after q, k, v", "attention", "wait after attention",
                 "o", "wait after o", "gate, up + silu", "wait after gate, up", "down", "wait after down",
                 "final norm + head", "argmax")


def forward_profile(on: bool) -> Tensor:
    """Seconds the fused forwards spent per thread and step (``PROFILE_STEPS``) since the last call, [threads,
    steps], then the profile's clock on (``on``) or off."""
    return torch.ops.dynatree.forward_profile(on)


def eagle3_step(tokens: Tensor, positions: Tensor, slots: Tensor, mask: Tensor, inputs: Tensor, *, input_rows: Tensor,
                net, fc: Tensor | None = None, last_only: bool = False) -> Tensor:
    """An EAGLE-3 head's step in one call (``eagle3_fused.PackedHead`` ``net``, ``core/drafts/heads/eagle3.py``'s
    layer), by the code of ``forward``: row r's residual stream is row ``input_rows[r]`` of ``inputs`` (-1: zeros),
    through the
    packed ``fc`` where given (the target's fused features) or as it is (a parent's output); q, k and v read the
    token's embedding and that stream, each RMS-normalised alone; the layer's outputs go to the ring ``net.out``
    (slot s in row s mod its rows) and its keys and values to rows ``slots`` of ``net.k``, ``net.v``. Returns the
    draft vocabulary's logits [q, V'] ([1, V'] if ``last_only``); the RoPE tables are read at row ``positions - 1``
    (the first token's at 0). ``net.scales``: the powers of two of those of its matmul weights packed as int8 rows
    (``core.engines.int8_rows``), else None (all bf16). The matmuls run on ``net.isa``."""
    with CallClock():
        return torch.ops.dynatree.eagle3_bf16(tokens, positions, slots, mask, inputs, input_rows, fc, net.out,
                                              net.embed, net.wqkv, net.wo, net.w13, net.w2, net.ln1, net.ln2, net.norm,
                                              net.head, net.k, net.v, net.cos, net.sin, net.H, net.KV, net.eps,
                                              last_only, net.scales, net.isa == AMX)
