"""A differential test of the authors' DynaTree code (github.com/cny123222/DynaTree, MIT) against greedy AR and ours.

    OMP_NUM_THREADS=1 python tools/authors_diff.py --authors /tmp/dynatree-authors --pair tiny --T 32 --prompts 1 \\
    --out /tmp/authors_tiny.json OMP_NUM_THREADS=1 python tools/authors_diff.py --authors /tmp/dynatree-authors --pair
    cpu --T 64 --prompts 2
        # writes results/cpu/authors_code.json

Nothing of theirs is copied into this repository. Their four core modules (``spec_decode/core/``:
``token_tree.py``, ``speculative_generator.py``, ``tree_speculative_generator.py``,
``tree_speculative_generator_adaptive.py``) are imported at run time from the checkout given, by file path
(``importlib``), under a private package name, so that their package ``__init__`` (which imports ``kvcompress``)
never runs. They run on CPU in fp32, with ``use_compile=False`` and ``device="cpu"``, as their Table 1 scripts
construct them (``papers/benchmark_main_D8B3.py``, ``papers/benchmark_adaptive_pg19.py``).

Runs, per workload (WikiText-2 and PG-19, ``--prompts`` of each from ``harness.prompts:authors_prompts``: their
prompts, cut at 800 and 1000 characters), EOS disabled (exactly T tokens), as their benchmark runs them:

- ``ours / ar``: greedy AR (``dynatree_lib.generate(target, ids, T)``), the reference for every other run;
- ``authors / linear``: ``SpeculativeGenerator`` with K = 8 (WikiText-2) or 5 (PG-19);
- ``authors / fixed_tree``: ``TreeSpeculativeGeneratorV2`` with D = 8, B = 3, tau = 0.1, 256 nodes;
- ``authors / dynatree``: ``TreeSpeculativeGeneratorV2AdaptiveV3`` with their Table 1 settings (D0 = 5,
  D_max = 8 or 9, B = 1/2/3, tau_h = 0.9, tau_l = 0.4, tau = 0.05, rho_stop = 0.1, rho_deep = 0.5, 256 nodes,
  window 10, a* = 0.7, step 0.05), history on (``enable_auto_adjust``) and off. One generator per workload and
  setting serves all its prompts in order, so the history carries across prompts as in their benchmark
  (it needs 5 generations before it acts: ``--history-warmup N`` first runs N discarded generations over the
  prompts, cycled, in every history run, theirs and ours);
- the fixed tree and DynaTree (history on) again from patched scratch copies of their code (a temporary
  directory under /tmp, made at run time, deleted at exit): ``authors+cache_fix`` (every node's draft forward
  gets its own ``copy.deepcopy`` of its parent's draft cache, instead of the one shared, mutable cache: bug 1
  of ``docs/fidelity.md``), ``authors+position_fix`` (tree verification passes ``position_ids`` = prefix length +
  node depth, as their unused ``tree_speculative_generator_position_aware.py`` does: bug 2), and
  ``authors+both_fixes``;
- ``ours``: ``LinearConfig(K)``, ``FixedTreeConfig(D=9, B=3, tau=0.1, n_max=256, root_siblings=False,
  tau_on_parent=True)`` (their D = 8 drafts 9 levels: a top-1 root plus 8) and ``DynaTreeConfig`` with their
  settings (``root_siblings=False, tau_on_parent=True, history_scope="prompt"``, W = 10, a* = 0.7), history off
  and on (one ``session`` dict across a workload's prompts), ``kv_mode="rebuild"`` (their commit), on the eager
  path (the plain transformers models).

Each run records its tokens (and whether they equal AR's, and where they first differ) and, per iteration
(verification round), ``nodes`` (drafted nodes: their tree's size, root included, which is ours without the
committed root), ``depth`` (drafted levels: their deepest node's depth + 1), ``accepted`` (draft tokens accepted
before the bonus or correction token), ``committed`` (tokens committed, after the cut at T) and ``tree`` (a
12-hex digest of the tree as the set of its root-to-node token paths, the same for their trees and ours, so
``summary.vs_ours`` can say from which iteration a tree differs from ours). ``acceptance`` is ours (accepted
draft tokens / drafted levels); ``acceptance_authors_def`` is theirs (committed tokens / (rounds x K) for linear,
/ (rounds x (D + 2)) for their fixed tree, / (rounds x (D0 + 2)) for DynaTree: ``docs/fidelity.md``);
``authors_reported_acceptance`` is what their ``get_stats()`` reports, as a check of this instrumentation.
Near the end of a generation ours drafts at most (tokens left - 1) levels, theirs full trees whose commit is
then cut at T: ours' mean node counts are slightly lower for that reason alone, and ``summary.vs_ours``
compares trees only where both were drafted from the same committed tokens and ours was not capped.

Compatibility shims (transformers 5.24 and this harness; nothing else of theirs is changed):

1. ``DynamicCache.crop``: their code passes the length to keep (the transformers 4.x convention); 5.x takes a
   negative number of tokens to remove and refuses a positive one. While their code runs, ``crop(n)`` with
   ``n >= 0`` is turned into ``crop(-(length - n))``; negative arguments are passed through.
2. Tokenizer: their ``generate(prompt)`` tokenizes a string. They get an ``IdsTokenizer`` that returns the
   token ids we built for that prompt (the same ids AR and ours decode from; it refuses to truncate), a
   ``decode`` that returns an empty string (their final detokenisation is not used), and
   ``eos_token_id = 999999``, as their benchmark's ``_disable_eos``.
3. Instrumentation: the generator's own methods are wrapped on the instance to observe, never to change, what
   they return (``_draft_k_tokens``, ``_update_cache_and_logits``, ``_draft_tree_tokens``, ``_update_tree_cache``);
   the generated tokens are read from ``current_ids`` after ``generate``.
4. The silent fallback to sequential verification (bug 3, ``tree_speculative_generator.py:298-301``) is
   counted (``sequential_fallbacks``, with the exception's text); ``--strict`` raises instead.
5. Prompt length (``--pair tiny`` only): the tiny Llama's 512 positions do not hold the character prompts of
   the byte tokenizer, so its prompts are cut to their first ``max_positions - T - 32`` tokens (recorded as
   ``prompt_tokens`` and ``truncated``). The cpu pair's prompts are never cut.

Their code passes ``past_key_values=`` everywhere: transformers 5.24 renamed it ``cache`` and warns (removal announced
for 5.40), and ``DynamicCache.crop``'s 5.x convention dates from 5.17, so their code runs here on transformers
5.17-5.39 only (``AUTHORS_TRANSFORMERS``; another release is refused by name). That warning is theirs, not ours, and
is silenced while their code runs (``compat_shims``).
The 4-D float attention mask of their tree verification is accepted unchanged by transformers 5.24
(``masking_utils`` returns a 4-D mask as it is) and ``position_ids`` left out still default to the cache
position, i.e. the BFS index (bug 2 reproduced as in their version). Their linear decoder reproducing greedy AR
exactly, and the doubly patched tree decoders reproducing it too, check these shims (``summary.checks``).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
import types
import warnings
from dataclasses import asdict
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
IMPLS = ("authors", "authors+cache_fix", "authors+position_fix", "authors+both_fixes", "ours")
FIXES = {"authors": (), "authors+cache_fix": ("cache",), "authors+position_fix": ("position",),
         "authors+both_fixes": ("cache", "position")}
WORKLOADS = {  # their Table 1 settings per dataset: prompt characters, linear K, DynaTree's D_max
    "wikitext2": {"chars": 800, "K": 8, "D_max": 8},
    "pg19": {"chars": 1000, "K": 5, "D_max": 9},
}
FIXED = {"tree_depth": 8, "branch_factor": 3, "probability_threshold": 0.1, "max_tree_nodes": 256}
DYNATREE = {"tree_depth": 5, "branch_factor": 2, "probability_threshold": 0.05, "max_tree_nodes": 256,
            "high_conf_threshold": 0.9, "low_conf_threshold": 0.4, "min_branch": 1, "max_branch": 3,
            "early_stop_threshold": 0.1, "deep_expand_threshold": 0.5, "history_window": 10,
            "target_acceptance_rate": 0.7, "adjustment_rate": 0.05}
SHIMS = [
    "DynamicCache.crop(n) with n >= 0 (their 'length to keep', transformers 4.x) is run as crop(-(length - n)) "
    "while their code runs (transformers 5.24 takes a negative count to remove and refuses a positive one)",
    "IdsTokenizer: their generate(prompt) gets our token ids for that prompt (no truncation), decode returns '', "
    "eos_token_id = 999999 (EOS disabled as their benchmark's _disable_eos)",
    "instrumentation: _draft_k_tokens, _update_cache_and_logits, _draft_tree_tokens and _update_tree_cache are "
    "wrapped on the instance to observe their arguments and results, unchanged; tokens read from current_ids",
    "the silent sequential-verification fallback (tree_speculative_generator.py:298-301) is counted "
    "(sequential_fallbacks), or raised with --strict",
    "device='cpu', use_compile=False, fp32 models; the 4-D float tree mask is passed to transformers 5.24 unchanged",
]


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
CACHE_NEW = "past_key_values=copy.deepcopy(leaf_cache),  # authors_diff: cache_fix (each node its own copy)"
POS_OLD = ("                input_ids=tree_tokens_input,\n"
           "                past_key_values=self.target_cache,\n"
           "                attention_mask=attention_mask_4d,\n")
POS_NEW = ("                input_ids=tree_tokens_input,\n"
           "                position_ids=(prefix_len + torch.tensor([tree.nodes[i].depth for i in node_indices],\n"
           "                    dtype=torch.long, device=self.device)).unsqueeze(0),  # authors_diff: position_fix\n"
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
        raise SystemExit(f"authors_diff: the authors' code runs on transformers {lo[0]}.{lo[1]} to "
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


# ----------------------------------------------------------------------------------------------------------------
# Records: per-iteration logs of their generators and ours
# ----------------------------------------------------------------------------------------------------------------

def tree_digest(paths) -> str:
    """12 hex of the set of root-to-node token paths: the same tree gives the same digest whatever the order."""
    canon = sorted(tuple(int(t) for t in p) for p in paths)
    return hashlib.sha1(json.dumps(canon).encode()).hexdigest()[:12]


def authors_tree_digest(tree) -> str:
    return tree_digest(tree.get_path_tokens(i) for i in range(len(tree.nodes)))


def our_tree_digest(rec: dict) -> str:
    """Digest of one of our recorded trees (``Tree.record``): node 0 is the committed root, left out."""
    parents, tokens = rec["parents"], rec["tokens"]
    paths = []
    for i in range(1, len(tokens)):
        path, j = [], i
        while j > 0:
            path.append(tokens[j])
            j = parents[j]
        paths.append(path[::-1])
    return tree_digest(paths)


def instrument(gen, kind: str, strict: bool = False) -> dict:
    """Wrap ``gen``'s methods on the instance to log every round (they return what they returned)."""
    log = {"iterations": [], "sequential_fallbacks": 0, "fallback_errors": [], "_draft": None, "_tree": None}
    if kind == "linear":
        draft_k, update = gen._draft_k_tokens, gen._update_cache_and_logits

        def draft_k_tokens():
            tokens, logits = draft_k()
            log["_draft"] = tokens[0].tolist()
            return tokens, logits

        def update_cache(num_accepted, accepted_tokens, all_accepted, original_len, verify_outputs=None):
            acc, d = accepted_tokens[0].tolist(), log["_draft"]
            a = 0
            while a < min(len(acc), len(d)) and acc[a] == d[a]:
                a += 1
            log["iterations"].append({"nodes": len(d), "depth": len(d), "accepted": a, "committed": len(acc)})
            return update(num_accepted, accepted_tokens, all_accepted, original_len, verify_outputs=verify_outputs)

        gen._draft_k_tokens, gen._update_cache_and_logits = draft_k_tokens, update_cache
        return log
    draft_tree, update_tree, sequential = gen._draft_tree_tokens, gen._update_tree_cache, gen._verify_tree_sequential

    def draft_tree_tokens():
        log["_tree"] = draft_tree()
        return log["_tree"]

    def verify_sequential(tree):
        err = sys.exc_info()[1]
        if strict:
            raise RuntimeError("their tree verification fell back to the sequential path") from err
        log["sequential_fallbacks"] += 1
        if err is not None and len(log["fallback_errors"]) < 3:
            log["fallback_errors"].append(f"{type(err).__name__}: {err}"[:300])
        return sequential(tree)

    def update_tree_cache(accepted_path, accepted_tokens, original_cache_len):
        tree = log["_tree"]
        committed = int(accepted_tokens.shape[1])
        log["iterations"].append({"nodes": len(tree.nodes), "depth": max(n.depth for n in tree.nodes) + 1,
                                  "accepted": min(len(accepted_path), committed), "committed": committed,
                                  "tree": authors_tree_digest(tree)})
        return update_tree(accepted_path, accepted_tokens, original_cache_len)

    gen._draft_tree_tokens, gen._update_tree_cache = draft_tree_tokens, update_tree_cache
    gen._verify_tree_sequential = verify_sequential
    return log


def first_divergence(tokens: list[int], reference: list[int]) -> int | None:
    """Index of the first token that differs from the reference (a length difference counts); None if equal."""
    for i, (a, b) in enumerate(zip(tokens, reference)):
        if a != b:
            return i
    return None if len(tokens) == len(reference) else min(len(tokens), len(reference))


def tokens_sha(tokens: list[int]) -> str:
    return hashlib.sha256(json.dumps([int(t) for t in tokens]).encode()).hexdigest()[:16]


def authors_denominator(method: str, settings: dict) -> int:
    """Their acceptance statistic's per-round denominator (``docs/fidelity.md``, bug 5)."""
    if method == "linear":
        return int(settings["K"])
    if method == "fixed_tree":
        return int(settings["levels"]) + 1  # their tree_depth + 2, with levels = tree_depth + 1
    if method == "dynatree":
        return int(settings["D0"]) + 2
    raise ValueError(f"no authors' acceptance for method {method!r}")


def make_run(impl: str, method: str, dataset: str, settings: dict, history: bool, prompt_id: str,
             tokens: list[int], ar_tokens: list[int] | None, iterations: list[dict], **extra) -> dict:
    """One run record: tokens against AR's, per-iteration log and its means (``acceptance``: ours)."""
    its = [dict(it) for it in iterations]
    rec = {"impl": impl, "method": method, "dataset": dataset, "settings": settings, "history": bool(history),
           "prompt_id": prompt_id, "tokens_sha": tokens_sha(tokens), "n_tokens": len(tokens),
           "equals_ar": None if ar_tokens is None else tokens == ar_tokens,
           "first_divergence": None if ar_tokens is None else first_divergence(tokens, ar_tokens),
           "rounds": len(its), "iterations": its}
    if its:
        rec["mean_nodes"] = sum(it["nodes"] for it in its) / len(its)
        rec["mean_depth"] = sum(it["depth"] for it in its) / len(its)
        rec["mean_committed"] = sum(it["committed"] for it in its) / len(its)
        depth = sum(it["depth"] for it in its)
        rec["acceptance"] = sum(it["accepted"] for it in its) / depth if depth else None
        if method != "ar":
            rec["acceptance_authors_def"] = (sum(it["committed"] for it in its)
                                             / (len(its) * authors_denominator(method, settings)))
    rec.update(extra)
    rec["tokens"] = [int(t) for t in tokens]
    return rec


# ----------------------------------------------------------------------------------------------------------------
# Summary
# ----------------------------------------------------------------------------------------------------------------

def _group_key(run: dict) -> tuple:
    return run["dataset"], run["impl"], run["method"], run["history"]


def summarize(runs: list[dict]) -> dict:
    """Per (dataset, impl, method, history): tokens against AR per prompt, and pooled means over all rounds
    (``mean_nodes``, ``mean_committed`` = tokens / rounds, ``acceptance`` = accepted / drafted levels);
    ``vs_ours``: per authors' tree run, against ours with the same settings, the trees drafted from the same
    context (``compare_trees``); ``checks``: the shims' validation (their linear and their doubly fixed trees
    equal AR)."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault(_group_key(r), []).append(r)
    out = []
    for (dataset, impl, method, history), rs in groups.items():
        its = [it for r in rs for it in r["iterations"]]
        g = {"dataset": dataset, "impl": impl, "method": method, "history": history, "prompts": len(rs),
             "equal_to_ar": sum(bool(r["equals_ar"]) for r in rs),
             "first_divergence": {r["prompt_id"]: r["first_divergence"] for r in rs}}
        if its:
            depth = sum(it["depth"] for it in its)
            g.update(rounds=len(its), mean_nodes=round(sum(it["nodes"] for it in its) / len(its), 3),
                     mean_depth=round(sum(it["depth"] for it in its) / len(its), 3),
                     mean_committed=round(sum(it["committed"] for it in its) / len(its), 3),
                     acceptance=round(sum(it["accepted"] for it in its) / depth, 4) if depth else None)
            auth = [r["acceptance_authors_def"] for r in rs if r.get("acceptance_authors_def") is not None]
            if auth:
                g["acceptance_authors_def"] = round(sum(auth) / len(auth), 4)
        if any("sequential_fallbacks" in r for r in rs):
            g["sequential_fallbacks"] = sum(r.get("sequential_fallbacks", 0) for r in rs)
        out.append(g)
    ours = {(r["dataset"], r["method"], r["history"], r["prompt_id"]): r for r in runs if r["impl"] == "ours"}
    vs_ours = []
    for r in runs:
        if not r["impl"].startswith("authors") or r["method"] not in ("fixed_tree", "dynatree"):
            continue
        o = ours.get((r["dataset"], r["method"], r["history"], r["prompt_id"]))
        if o is None:
            continue
        vs_ours.append(dict({"dataset": r["dataset"], "impl": r["impl"], "method": r["method"],
                             "history": r["history"], "prompt_id": r["prompt_id"],
                             "same_tokens": r["tokens_sha"] == o["tokens_sha"]}, **compare_trees(r, o)))
    linear = [r for r in runs if r["impl"] == "authors" and r["method"] == "linear"]
    fixed = [r for r in runs if r["impl"] == "authors+both_fixes"]
    checks = {"authors_linear_equals_ar": f"{sum(bool(r['equals_ar']) for r in linear)}/{len(linear)}",
              "authors_both_fixes_equals_ar": f"{sum(bool(r['equals_ar']) for r in fixed)}/{len(fixed)}",
              "reported_acceptance_matches": all(
                  r.get("authors_reported_acceptance") is None
                  or abs(r["authors_reported_acceptance"] - r["acceptance_authors_def"]) < 1e-9
                  for r in runs if r["impl"].startswith("authors"))}
    return {"groups": out, "vs_ours": vs_ours, "checks": checks}


def compare_trees(a: dict, b: dict) -> dict:
    """Iteration by iteration, the trees of two runs drafted from the same context (the same committed tokens
    before the iteration): how many were compared, how many differ, the first that does. An iteration is left
    out where ``b`` (ours) had to draft fewer levels than ``a`` because of the room left before T (ours drafts
    at most room - 1 levels; theirs drafts full trees and cuts the commit): ``capped_near_T``."""
    compared, capped, mismatches, first = 0, 0, 0, None
    done_a = done_b = 0
    for i, (x, y) in enumerate(zip(a["iterations"], b["iterations"])):
        same = done_a == done_b and a["tokens"][:done_a] == b["tokens"][:done_b]
        room = a["n_tokens"] - done_a
        done_a, done_b = done_a + x["committed"], done_b + y["committed"]
        if not same:
            continue
        if x["depth"] > room - 1:
            capped += 1
            continue
        compared += 1
        if x.get("tree") != y.get("tree"):
            mismatches += 1
            first = i if first is None else first
    return {"trees_identical": mismatches == 0, "same_context_compared": compared, "tree_mismatches": mismatches,
            "first_tree_mismatch": first, "capped_near_T": capped,
            "rounds": [len(a["iterations"]), len(b["iterations"])]}


def headline(summary: dict) -> list[str]:
    """One line per group: what a reader wants first."""
    lines = []
    for g in summary["groups"]:
        if g["method"] == "ar":
            continue
        hist = " history" if g["history"] else ""
        div = ", ".join(f"{k.split(':', 1)[1]}@{v}" for k, v in g["first_divergence"].items() if v is not None)
        nan = float("nan")
        lines.append(f"{g['dataset']:9s} {g['impl']:20s} {g['method'] + hist:18s} = AR "
                     f"{g['equal_to_ar']}/{g['prompts']}{' (first divergence ' + div + ')' if div else ''}; "
                     f"nodes {g.get('mean_nodes', nan):.1f}, tokens/round {g.get('mean_committed', nan):.2f}, "
                     f"acceptance {(g.get('acceptance') or 0):.3f}")
    return lines


# ----------------------------------------------------------------------------------------------------------------
# JSON
# ----------------------------------------------------------------------------------------------------------------

def _flat(x) -> bool:
    scalar = (str, int, float, bool, type(None))
    if isinstance(x, scalar):
        return True
    if isinstance(x, list):
        return all(isinstance(v, scalar) for v in x)
    if isinstance(x, dict):
        return all(isinstance(v, scalar) for v in x.values())
    return False


def dumps(x, indent: int = 0) -> str:
    """JSON with one line per scalar list or flat dict (token lists, iteration entries), nested elsewhere."""
    if _flat(x):
        return json.dumps(x)
    pad, end = " " * (indent + 1), " " * indent
    if isinstance(x, dict):
        body = ",\n".join(f"{pad}{json.dumps(str(k))}: {dumps(v, indent + 1)}" for k, v in x.items())
        return "{\n" + body + "\n" + end + "}"
    if isinstance(x, (list, tuple)):
        body = ",\n".join(pad + dumps(v, indent + 1) for v in x)
        return "[\n" + body + "\n" + end + "]"
    raise TypeError(f"not JSON-serialisable: {type(x).__name__}")


def write_json(doc: dict, path: str | os.PathLike) -> Path:
    """Write ``doc`` to ``path`` (parents made; written to a temporary file, then renamed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps(doc) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


# ----------------------------------------------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------------------------------------------

def load_pair(pair: str):
    from dynatree_lib.harness.models import load_model

    refs = {"cpu": ("embedded:target", "embedded:draft"), "tiny": ("tiny-llama:target", "tiny-llama:draft")}[pair]
    target, tok = load_model(refs[0], dtype="float32")
    draft, _ = load_model(refs[1], dtype="float32")
    return target.eval(), draft.eval(), tok, refs


def load_prompts(tok, n: int, T: int, max_positions: int | None) -> list[dict]:
    from dynatree_lib.harness.prompts import authors_prompts

    out = []
    for dataset, w in WORKLOADS.items():
        for p in authors_prompts(dataset, tok, n, w["chars"]):
            ids, cut = p.ids, False
            if max_positions is not None and ids.numel() + T + 32 > max_positions:
                ids, cut = ids[: max_positions - T - 32], True
            out.append({"dataset": dataset, "id": p.id, "ids": ids.long(), "truncated": cut})
    return out


def authors_generator(cls, kind: str, target, draft, tok, dataset: str, history: bool):
    common = dict(target_model=target, draft_model=draft, tokenizer=tok, device="cpu", use_compile=False)
    if kind == "linear":
        return cls(K=WORKLOADS[dataset]["K"], **common), {"K": WORKLOADS[dataset]["K"], "max_len": 2048}
    if kind == "fixed_tree":
        settings = dict(FIXED, levels=FIXED["tree_depth"] + 1)
        return cls(**FIXED, **common), settings
    kw = dict(DYNATREE, max_depth=WORKLOADS[dataset]["D_max"], enable_auto_adjust=history)
    settings = dict(kw, D0=kw["tree_depth"])
    return cls(**kw, **common), settings


def our_configs(dataset: str) -> dict:
    from dynatree_lib import DynaTreeConfig, FixedTreeConfig, LinearConfig

    dyn = dict(D0=5, D_max=WORKLOADS[dataset]["D_max"], B_min=1, B_mid=2, B_max=3, tau_h=0.9, tau_l=0.4,
               rho_stop=0.1, rho_deep=0.5, tau=0.05, n_max=256, W=10, a_star=0.7, root_siblings=False,
               tau_on_parent=True, history_scope="prompt")
    return {("linear", False): LinearConfig(K=WORKLOADS[dataset]["K"]),
            ("fixed_tree", False): FixedTreeConfig(D=9, B=3, tau=0.1, n_max=256, root_siblings=False,
                                                   tau_on_parent=True),
            ("dynatree", False): DynaTreeConfig(**dyn, history=False),
            ("dynatree", True): DynaTreeConfig(**dyn, history=True)}


def plan(impls: list[str]) -> list[tuple[str, str, bool]]:
    """(impl, method, history) in the order they run."""
    out = []
    for impl in impls:
        if impl == "authors":
            out += [(impl, "linear", False), (impl, "fixed_tree", False), (impl, "dynatree", True),
                    (impl, "dynatree", False)]
        elif impl == "ours":
            out += [(impl, "linear", False), (impl, "fixed_tree", False), (impl, "dynatree", False),
                    (impl, "dynatree", True)]
        else:
            out += [(impl, "fixed_tree", False), (impl, "dynatree", True)]
    return out


def run_all(args, root: Path) -> dict:
    import torch

    from dynatree_lib import generate
    from dynatree_lib.harness.environment import environment
    from dynatree_lib.harness.paths import portable

    torch.manual_seed(0)
    target, draft, tok, refs = load_pair(args.pair)
    max_pos = target.config.max_position_embeddings if args.pair == "tiny" else None
    prompts = load_prompts(tok, args.prompts, args.T, max_pos)
    T = args.T
    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if not args.quiet else (lambda *a: None)
    runs, ar = [], {}
    for p in prompts:  # greedy AR: the reference
        t0 = time.perf_counter()
        res = generate(target, p["ids"], T)
        ar[p["id"]] = list(res.tokens)
        runs.append(make_run("ours", "ar", p["dataset"], {}, history=False, prompt_id=p["id"], tokens=ar[p["id"]], ar_tokens=ar[p["id"]], iterations=[],
                             prompt_tokens=int(p["ids"].numel()), truncated=p["truncated"],
                             seconds=round(time.perf_counter() - t0, 2)))
        log(f"[ar] {p['id']}: {p['ids'].numel()} prompt tokens, {time.perf_counter() - t0:.1f}s")
    impls = [i for i in IMPLS if i in args.impls]
    scratch = Path(tempfile.mkdtemp(prefix="authors_diff_", dir="/tmp"))
    variants = {}
    try:
        for impl in impls:
            if impl != "ours":
                core = scratch_copy(root, FIXES[impl], scratch)
                variants[impl] = import_core(core, impl.replace("+", "_"))
        for impl, method, history in plan(impls):
            for dataset in WORKLOADS:
                ps = [p for p in prompts if p["dataset"] == dataset]
                runs += (run_ours if impl == "ours" else run_authors)(
                    impl, method, history, dataset, ps, target, draft, T, ar, log, variants, args)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summary = summarize(runs)
    summary["headline"] = headline(summary)
    return {"source": {"repo": REPO_NAME, "commit": args.commit or read_commit(root), "path_given": portable(args.authors),
                       "files": file_digests(root)},
            "pair": {"name": args.pair, "target": refs[0], "draft": refs[1], "dtype": "float32"},
            "T": T, "environment": dict(environment("cpu"), omp_num_threads=os.environ.get("OMP_NUM_THREADS")),
            "shims": SHIMS, "prompts": [p["id"] for p in prompts],
            "prompt_tokens": {p["id"]: int(p["ids"].numel()) for p in prompts},
            "runs": runs, "summary": summary}


def warmup_prompts(prompts: list[dict], n: int) -> list[dict]:
    """The first ``n`` generations of a history run that are thrown away: the prompts in order, cycled (their
    benchmark's warm-up runs prompts 0 and 1 before the measured ones, with the history kept)."""
    return [prompts[i % len(prompts)] for i in range(n)] if prompts else []


def run_authors(impl, method, history, dataset, prompts, target, draft, T, ar, log, variants, args) -> list[dict]:
    mod = variants[impl]
    tok = IdsTokenizer()
    cls = {"linear": mod.linear, "fixed_tree": mod.fixed, "dynatree": mod.dynatree}[method]
    gen, settings = authors_generator(cls, method, target, draft, tok, dataset, history)
    probe = instrument(gen, method, strict=args.strict)
    warm = warmup_prompts(prompts, args.history_warmup if history else 0)
    for p in warm:  # discarded generations that feed the history before the measured ones
        with compat_shims():
            gen.generate(tok.register(p["id"], p["ids"]), max_new_tokens=T)
    if warm:
        settings["history_warmup"] = [p["id"] for p in warm]
    out = []
    for p in prompts:
        key = tok.register(p["id"], p["ids"])
        n0 = len(probe["iterations"])
        f0 = probe["sequential_fallbacks"]
        t0 = time.perf_counter()
        with compat_shims():
            gen.generate(key, max_new_tokens=T)
        secs = time.perf_counter() - t0
        tokens = gen.current_ids[0, p["ids"].numel():].tolist()
        stats = gen.get_stats()
        extra = {"sequential_fallbacks": probe["sequential_fallbacks"] - f0,
                 "authors_reported_acceptance": stats.get("acceptance_rate"),
                 "seconds": round(secs, 2)}
        if probe["fallback_errors"]:
            extra["fallback_errors"] = list(probe["fallback_errors"])
        if method == "dynatree":
            extra["history_state"] = {"window": [round(x, 4) for x in getattr(gen, "acceptance_history", [])],
                                      "D0": gen.current_base_depth, "tau_h": gen.current_high_conf_threshold,
                                      "rho_deep": gen.current_deep_expand_threshold}
        r = make_run(impl, method, dataset, settings, history=history, prompt_id=p["id"], tokens=tokens, ar_tokens=ar[p["id"]],
                     iterations=probe["iterations"][n0:], **extra)
        out.append(r)
        log(f"[{impl} {method}{' history' if history else ''}] {p['id']}: equal={r['equals_ar']} "
            f"div={r['first_divergence']} rounds={r['rounds']} nodes={r.get('mean_nodes', 0):.1f} "
            f"fallbacks={extra['sequential_fallbacks']} {secs:.1f}s")
    return out


def run_ours(impl, method, history, dataset, prompts, target, draft, T, ar, log, variants, args) -> list[dict]:
    from dynatree_lib import generate
    from dynatree_lib.core.policies.base import Session

    cfg = our_configs(dataset)[(method, history)]
    session = Session() if history else None
    warm = warmup_prompts(prompts, args.history_warmup if history else 0)
    for p in warm:  # discarded generations that feed the history before the measured ones
        generate(target, p["ids"], T, draft=draft, method=cfg, kv_mode="rebuild", session=session)
    out = []
    for p in prompts:
        t0 = time.perf_counter()
        res = generate(target, p["ids"], T, draft=draft, method=cfg, kv_mode="rebuild", record_trees=T + 1,
                       session=session)
        secs = time.perf_counter() - t0
        lg = res.log
        its = [{"nodes": n, "depth": d, "accepted": a, "committed": c}
               for n, d, a, c in zip(lg.nodes, lg.depth, lg.accepted, lg.committed)]
        if method != "linear":
            for it, tree in zip(its, res.trees):
                it["tree"] = our_tree_digest(tree)
        settings = dict(asdict(cfg), kv_mode="rebuild")
        if warm:
            settings["history_warmup"] = [q["id"] for q in warm]
        if method == "fixed_tree":
            settings["levels"] = cfg.D
        r = make_run(impl, method, dataset, settings, history=history, prompt_id=p["id"], tokens=list(res.tokens), ar_tokens=ar[p["id"]], iterations=its,
                     seconds=round(secs, 2))
        if history:
            state = session.states.get(cfg)
            if state is not None:
                r["history_state"] = {"window": [round(x, 4) for x in state.window], "D0": state.D0,
                                      "tau_h": state.tau_h, "rho_deep": state.rho_deep}
        out.append(r)
        log(f"[ours {method}{' history' if history else ''}] {p['id']}: equal={r['equals_ar']} "
            f"div={r['first_divergence']} rounds={r['rounds']} nodes={r.get('mean_nodes', 0):.1f} {secs:.1f}s")
    return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--authors", required=True, help=f"a checkout of {REPO_NAME} (e.g. at a8a25af)")
    ap.add_argument("--pair", choices=("cpu", "tiny"), default="cpu")
    ap.add_argument("--T", type=int, default=64, help="new tokens per generation (EOS disabled)")
    ap.add_argument("--prompts", type=int, default=2, help="prompts per workload (WikiText-2 and PG-19)")
    ap.add_argument("--out", default="results/cpu/authors_code.json")
    ap.add_argument("--commit", default=None, help="their commit, if the checkout has no .git to read it from")
    ap.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS, help="which implementations to run")
    ap.add_argument("--history-warmup", type=int, default=0, metavar="N",
                    help="history runs (theirs and ours) first run N discarded generations over the workload's "
                         "prompts, cycled, so that the controller (5 generations before it acts) can act")
    ap.add_argument("--strict", action="store_true", help="raise where their verification falls back to sequential")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.T < 1 or args.prompts < 1 or args.history_warmup < 0:
        ap.error("--T and --prompts must be >= 1, --history-warmup >= 0")
    try:
        root = check_checkout(args.authors)
    except NotAuthorsCheckout as e:
        ap.error(str(e))
    return args, root


def main(argv=None) -> int:
    args, root = parse_args(argv)
    doc = run_all(args, root)
    path = write_json(doc, args.out)
    print("\n".join(doc["summary"]["headline"]))
    print("checks:", json.dumps(doc["summary"]["checks"]))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
