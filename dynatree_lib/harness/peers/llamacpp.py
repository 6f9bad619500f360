"""llama.cpp as a registered method: each of its modes decodes the cpu profile's prompts through one
``llama-server`` (``harness.peers.llamacpp_server.LlamaServer``: prompts passed as our token ids, exactly), so the runner
interleaves it with our methods prompt by prompt and logs it in our record schema.

A generation's time is llama.cpp's own (``timings.prompt_ms`` + ``predicted_ms``: prefill + decode, HTTP and
JSON excluded), the same definition as ours (new tokens over prefill + decode). llama.cpp is optional: without a
build, ``unavailable()`` says how to get it, the peers experiment measures none of its cells and its committed
records still render.
"""
from __future__ import annotations

import atexit
from dataclasses import dataclass
from typing import ClassVar

import torch

from ... import methods as registry
from ..setup import variants
from ...core.loop import Options
from ...core.result import GenerationResult, Totals
from ...core.validate import check_field_types, require
from . import llamacpp_server as llamacpp
from ..setup.paths import portable, portable_text
from .eagle3_gguf import mode_draft


@dataclass(frozen=True)
class LlamaCppConfig:
    """One llama.cpp mode (``llamacpp.SERVER_MODES``) on the target GGUF ``quant`` ("bf16": the shipped Q4_1
    requantized to BF16; "q4_1": as shipped); ``n_draft``: tokens per draft (draft model or n-gram);
    ``ngram_n``: the n-gram modes' key length (None: llama.cpp's default)."""

    method: ClassVar[str] = "llamacpp"

    mode: str = "ar"
    quant: str = "bf16"
    n_draft: int = 8
    ngram_n: int | None = None

    def __post_init__(self) -> None:
        check_field_types(self)
        require(self.mode in llamacpp.SERVER_MODES, f"mode must be one of {llamacpp.SERVER_MODES}, got {self.mode!r}")
        require(self.quant in ("bf16", "q4_1"), f"quant must be 'bf16' or 'q4_1', got {self.quant!r}")
        require(self.n_draft >= 1, f"n_draft must be >= 1, got {self.n_draft}")


METHOD = LlamaCppConfig.method


@dataclass(frozen=True, kw_only=True)
class Peer:
    """One llama.cpp mode the peers experiment runs: its variant (its cells' and records' name), what tables call it
    and its configuration."""

    variant: str
    label: str
    config: LlamaCppConfig


# what the peers experiment runs; the first is llama.cpp's own AR (its speedups' reference)
PEERS = (
    Peer(variant="llamacpp_ar_bf16", label="llama.cpp AR (BF16)", config=LlamaCppConfig("ar", "bf16")),
    Peer(variant="llamacpp_ar_q4_1", label="llama.cpp AR (Q4_1)", config=LlamaCppConfig("ar", "q4_1")),
    Peer(variant="llamacpp_draft_chain_3", label="llama.cpp draft chain, our draft (n=3)",
         config=LlamaCppConfig("draft-chain", n_draft=3)),
    Peer(variant="llamacpp_draft_chain_8", label="llama.cpp draft chain, our draft (n=8)",
         config=LlamaCppConfig("draft-chain", n_draft=8)),
    Peer(variant="llamacpp_ngram_simple_8", label="llama.cpp ngram-simple (n=8)",
         config=LlamaCppConfig("ngram-simple", n_draft=8, ngram_n=4)),
    Peer(variant="llamacpp_ngram_mod_8", label="llama.cpp ngram-mod (n=8)",
         config=LlamaCppConfig("ngram-mod", n_draft=8, ngram_n=4)),
)
# the talon experiment's peer row: llama.cpp's EAGLE-3 speculative mode with our head (``paths.HEAD_DIR``, converted by
# llama.cpp's own converter), beside llama.cpp's AR, at llama.cpp's defaults (a chain of 3 drafted tokens, p-min 0)
EAGLE3_PEERS = (PEERS[0], Peer(variant="llamacpp_eagle3_3", label="llama.cpp EAGLE-3, our head (n=3)",
                               config=LlamaCppConfig("draft-eagle3", n_draft=3)))


def available() -> bool:
    """Whether a llama.cpp build with ``llama-server`` is found (``llamacpp.find_llamacpp``)."""
    found = llamacpp.find_llamacpp()
    return found is not None and (found / "llama-server").is_file()


def unavailable() -> str | None:
    """None where llama.cpp can be measured, else what is missing and how to get it."""
    return None if available() else "llama.cpp (llama-server) is not built here. " + llamacpp.how_to_get()


_SERVERS: dict[LlamaCppConfig, llamacpp.LlamaServer] = {}


def server(cfg: LlamaCppConfig) -> llamacpp.LlamaServer:
    """One running server per config for the whole process (models loaded once, outside any timing)."""
    if cfg not in _SERVERS:
        _SERVERS[cfg] = llamacpp.LlamaServer(cfg.mode, target=cfg.quant, draft=mode_draft(cfg.mode),
                                             n_draft=cfg.n_draft, ngram_n=cfg.ngram_n).__enter__()
    return _SERVERS[cfg]


@atexit.register
def close_servers() -> None:
    while _SERVERS:
        _SERVERS.popitem()[1].__exit__(None, None, None)


def result_of(row: dict, eos: int | None) -> GenerationResult:
    """Our result from a server row: its token ids (EOS kept, as our decoders keep it), its own times, and its
    draft counts (drafted = accepted + rejected draft tokens; a chain's depth is its length)."""
    tokens = list(row["token_ids"] or [])
    if eos is not None and row.get("stop_type") == "eos" and (not tokens or tokens[-1] != eos):
        tokens.append(eos)
    drafted, accepted = row.get("n_drafted") or 0, row.get("n_accepted") or 0
    counted = Totals(iterations=max(len(tokens) - accepted, 1), accepted=accepted, drafted_nodes=drafted,
                     drafted_depth=drafted)
    return GenerationResult(tokens, wall_s=row["wall_s"], prefill_s=row["prefill_s"],
                            target_forwards=counted.iterations + 1, engine=row["version"], counted=counted)


def generate_llamacpp(target, draft, prompt, T: int, cfg: LlamaCppConfig,
                      *, opts: Options = Options()) -> GenerationResult:
    """``T`` new tokens (or up to ``opts.eos_token_id``) of ``prompt`` from llama.cpp: greedy, or drawn at the
    temperature alone (no top-k or top-p: TALON's T = 1), seeded by the cell's generator (llama.cpp draws with its own
    generator, so a sampled output is not ours token for token). ``target`` and ``draft`` are ours and unused:
    llama.cpp runs its own GGUF conversions of the same weights."""
    s = opts.sampling
    require(s.top_k is None and s.top_p is None,
            "the llama.cpp peer samples at a temperature alone (no top-k or top-p)")
    seed = 0 if s.greedy else int(torch.randint(2**31, (1,), generator=opts.rng(torch.device("cpu"))))
    row = server(cfg).complete(prompt.tolist(), int(T), ignore_eos=opts.eos_token_id is None,
                               temperature=s.temperature, seed=seed)
    return result_of(row, opts.eos_token_id)


def describe(cfg: LlamaCppConfig) -> dict:
    """What a record logs about llama.cpp: its version, build flags, the server's command line and the GGUFs."""
    info, srv = llamacpp.build_info(), server(cfg)
    return {"version": llamacpp.version_string(info), "build_flags": info.get("cmake_flags"),
            "command": portable_text(llamacpp.shell(srv.argv)), "target_gguf": portable(srv.target),
            "draft_gguf": portable(srv.draft) if srv.draft else None,
            "timing": "llama-server timings: prompt_ms + predicted_ms (prefill + decode)"}


def register() -> None:
    """Register llama.cpp as a method and its modes as variants, once (``peers.register_peers`` calls it when the
    package is imported; ``unregister`` and this again restore them in a test that changes the registry)."""
    if METHOD in registry.REGISTRY:
        return
    study = registry.Study(role="peer", setting_from="it decodes in llama.cpp's own server, one mode per setting: "
                                                     "`python -m dynatree_lib bench --experiment peers` measures them")
    registry.register(registry.Method(name=METHOD, config=LlamaCppConfig,
                                      display=registry.Display(label="llama.cpp", color="#17becf"),
                                      study=study, decode=generate_llamacpp, drafts=False,
                                      impl="llama.cpp", describe=describe, unavailable=unavailable))
    for peer in PEERS + EAGLE3_PEERS[1:]:
        variants.register(variants.Variant(name=peer.variant, label=variants.fixed(peer.label)))

