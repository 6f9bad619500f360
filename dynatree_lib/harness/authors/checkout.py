"""The authors' checkout (github.com/cny123222/DynaTree) for the ``authors_code`` experiments: recognised by what its
four core modules must hold, its commit read without git, scratch copies patched with one of their two bugs fixed,
imported by file path under a private package name, and run under the shims that let their code run on transformers
5.x (``authors_code``'s docstring says each one and why).
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
import types
import warnings
from pathlib import Path

REPO_NAME = "cny123222/DynaTree"
AUTHORS_TRANSFORMERS = ((5, 17), (5, 40))  # the transformers releases their code runs on with our shims: [lo, hi)
THEIR_DEPRECATION = r"`past_key_values` is deprecated"  # transformers' warning about their calls (5.24 on)
CORE = "spec_decode/core"
MODULES = ("token_tree", "speculative_generator", "tree_speculative_generator", "tree_speculative_generator_adaptive")
REQUIRED = {  # file -> names that must appear in it: how a checkout of theirs is recognised
    "token_tree.py": ("class TokenTree", "def flatten_for_verification"),
    "speculative_generator.py": ("class SpeculativeGenerator",),
    "tree_speculative_generator.py": ("class TreeSpeculativeGeneratorV2", "def _verify_tree_tokens"),
    "tree_speculative_generator_adaptive.py": ("class TreeSpeculativeGeneratorV2AdaptiveV3",),
}


class NotAuthorsCheckout(ValueError):
    """The path given is not a checkout of the authors' repository."""



# ----------------------------------------------------------------------------------------------------------------
# Their checkout: recognise it, read its commit, patch a scratch copy, import it by file path
# ----------------------------------------------------------------------------------------------------------------

def check_checkout(path: str | os.PathLike) -> Path:
    """The checkout's root, or NotAuthorsCheckout naming the path and what is missing."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise NotAuthorsCheckout(f"{str(path)!r} is not a checkout of {REPO_NAME}: no such directory")
    missing = []
    for name, needles in REQUIRED.items():
        f = root / CORE / name
        if not f.is_file():
            missing.append(f"{CORE}/{name}")
            continue
        text = f.read_text(encoding="utf-8", errors="replace")
        missing += [f"{needle!r} in {CORE}/{name}" for needle in needles if needle not in text]
    if missing:
        raise NotAuthorsCheckout(f"{str(path)!r} is not a checkout of {REPO_NAME}: missing " + ", ".join(missing))
    return root.resolve()


def read_commit(root: Path) -> str | None:
    """HEAD's commit read from the checkout's .git (a ref, a packed ref or a detached sha), without git."""
    git = root / ".git"
    if git.is_file():  # a worktree: "gitdir: <path>"
        line = git.read_text().strip()
        if line.startswith("gitdir:"):
            git = (root / line.split(":", 1)[1].strip()).resolve()
    try:
        head = (git / "HEAD").read_text().strip()
    except OSError:
        return None
    if not head.startswith("ref:"):
        return head or None
    ref = head.split(":", 1)[1].strip()
    bases = [git]
    if (git / "commondir").is_file():  # a linked worktree keeps its refs in the common directory
        bases.append((git / (git / "commondir").read_text().strip()).resolve())
    for base in bases:
        if (base / ref).is_file():
            return (base / ref).read_text().strip()
        if (base / "packed-refs").is_file():
            for line in (base / "packed-refs").read_text().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
    return None


def file_digests(root: Path) -> dict:
    """sha256 (first 16 hex) of each core file imported, so a record says exactly which code ran."""
    return {f"{CORE}/{m}.py": hashlib.sha256((root / CORE / f"{m}.py").read_bytes()).hexdigest()[:16]
            for m in MODULES}


CACHE_OLD = "past_key_values=leaf_cache,"
CACHE_NEW = "past_key_values=copy.deepcopy(leaf_cache),  # authors_code: cache_fix (each node its own copy)"
POS_OLD = ("                input_ids=tree_tokens_input,\n"
           "                past_key_values=self.target_cache,\n"
           "                attention_mask=attention_mask_4d,\n")
POS_NEW = ("                input_ids=tree_tokens_input,\n"
           "                position_ids=(prefix_len + torch.tensor([tree.nodes[i].depth for i in node_indices],\n"
           "                    dtype=torch.long, device=self.device)).unsqueeze(0),  # authors_code: position_fix\n"
           "                past_key_values=self.target_cache,\n"
           "                attention_mask=attention_mask_4d,\n")
PATCHES = {  # fix -> [(file, old, new, expected occurrences)]
    "cache": [("tree_speculative_generator.py", CACHE_OLD, CACHE_NEW, 4),
              ("tree_speculative_generator.py", "\nimport torch\n", "\nimport copy\nimport torch\n", 1),
              ("tree_speculative_generator_adaptive.py", CACHE_OLD, CACHE_NEW, 2),
              ("tree_speculative_generator_adaptive.py", "\nimport torch\n", "\nimport copy\nimport torch\n", 1)],
    "position": [("tree_speculative_generator.py", POS_OLD, POS_NEW, 1)],
}


def patch_text(text: str, old: str, new: str, expected: int, where: str) -> str:
    n = text.count(old)
    if n != expected:
        raise NotAuthorsCheckout(f"cannot patch {where}: expected {expected} occurrence(s) of {old!r}, found {n} "
                                 f"(their code differs from commit a8a25af)")
    return text.replace(old, new)


def scratch_copy(root: Path, fixes: tuple[str, ...], scratch: Path) -> Path:
    """A copy of their four core modules under ``scratch``, with the fixes applied; returns its directory."""
    out = scratch / ("-".join(fixes) or "original") / CORE
    out.mkdir(parents=True, exist_ok=True)
    texts = {f"{m}.py": (root / CORE / f"{m}.py").read_text(encoding="utf-8") for m in MODULES}
    for fix in fixes:
        for name, old, new, n in PATCHES[fix]:
            texts[name] = patch_text(texts[name], old, new, n, f"{CORE}/{name}")
    for name, text in texts.items():
        (out / name).write_text(text, encoding="utf-8")
    return out


def import_core(core_dir: Path, tag: str) -> types.SimpleNamespace:
    """Their core modules from ``core_dir`` by file path, as the package ``_authors_diff_<tag>`` (their
    ``__init__`` is never executed), so that several patched variants live side by side."""
    pkg = f"_authors_diff_{tag}"
    package = types.ModuleType(pkg)
    package.__path__ = [str(core_dir)]
    sys.modules[pkg] = package
    mods = {}
    for name in MODULES:
        spec = importlib.util.spec_from_file_location(f"{pkg}.{name}", core_dir / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # before exec: dataclasses and relative imports look it up
        spec.loader.exec_module(mod)
        mods[name] = mod
    return types.SimpleNamespace(
        linear=mods["speculative_generator"].SpeculativeGenerator,
        fixed=mods["tree_speculative_generator"].TreeSpeculativeGeneratorV2,
        dynatree=mods["tree_speculative_generator_adaptive"].TreeSpeculativeGeneratorV2AdaptiveV3,
        core_dir=str(core_dir))


# ----------------------------------------------------------------------------------------------------------------
# Shims
# ----------------------------------------------------------------------------------------------------------------

def check_transformers(version: str) -> None:
    """Refuse, by name, a transformers release their code does not run on with our shims (``AUTHORS_TRANSFORMERS``)."""
    (lo, hi), have = AUTHORS_TRANSFORMERS, tuple(int(x) for x in version.split(".")[:2])
    if not lo <= have < hi:
        raise RuntimeError(f"authors_code: the authors' code runs on transformers {lo[0]}.{lo[1]} to "
                         f"{hi[0]}.{hi[1] - 1} (crop's 5.x convention; `past_key_values=` removed in {hi[0]}.{hi[1]}), "
                         f"this Python has {version}: install one in that range in a venv of its own")


@contextlib.contextmanager
def compat_shims():
    """transformers 4.x ``DynamicCache.crop(length_to_keep)`` on transformers 5.x, for the duration, and their
    ``past_key_values=`` calls without transformers' deprecation warning (theirs, not ours)."""
    import transformers
    from transformers.cache_utils import DynamicCache

    check_transformers(transformers.__version__)

    had_own = "crop" in DynamicCache.__dict__
    original = DynamicCache.crop

    def crop(self, n: int) -> None:
        if n >= 0:  # their convention: the length to keep
            n = -max(self.get_seq_length() - n, 0)
        return original(self, n)

    DynamicCache.crop = crop
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=THEIR_DEPRECATION, category=FutureWarning)
            yield
    finally:
        if had_own:
            DynamicCache.crop = original
        else:
            del DynamicCache.crop


class IdsTokenizer:
    """What their generators need of a tokenizer, over token ids we built: ``tok(key).input_ids`` gives the ids
    registered under ``key``; no truncation (it refuses instead); EOS disabled (``eos_token_id = 999999``)."""

    def __init__(self):
        self.table: dict[str, object] = {}
        self.eos_token_id = 999999
        self.eos_token = "<eos-disabled>"
        self.pad_token = "<pad>"

    def register(self, key: str, ids) -> str:
        self.table[key] = ids
        return key

    def __call__(self, text: str, return_tensors=None, truncation: bool = False, max_length: int | None = None):
        ids = self.table[text]
        if truncation and max_length is not None and ids.numel() > max_length:
            raise ValueError(f"prompt {text!r} has {ids.numel()} tokens; their generator would cut it to {max_length}")
        return types.SimpleNamespace(input_ids=ids[None].clone())

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return ""
