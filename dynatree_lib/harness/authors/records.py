"""The ``authors_code`` experiments' records: per-iteration logs of their generators (observed through wrapped
methods, never changed) and ours, tree digests that compare their trees with ours, the summary and its headline,
and the JSON writer that keeps one line per iteration.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from ... import methods as registry

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
    if kind == registry.LINEAR:
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
    if method == registry.LINEAR:
        return int(settings["K"])
    if method == registry.FIXED_TREE:
        return int(settings["levels"]) + 1  # their tree_depth + 2, with levels = tree_depth + 1
    if method == registry.DYNATREE:
        return int(settings["D0"]) + 2
    raise ValueError(f"no authors' acceptance for method {method!r}")


def make_run(impl: str, method: str, dataset: str, settings: dict, history: bool, *, prompt_id: str,
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
        if method != registry.AR:
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
        if not r["impl"].startswith("authors") or r["method"] not in (registry.FIXED_TREE, registry.DYNATREE):
            continue
        o = ours.get((r["dataset"], r["method"], r["history"], r["prompt_id"]))
        if o is None:
            continue
        vs_ours.append(dict({"dataset": r["dataset"], "impl": r["impl"], "method": r["method"],
                             "history": r["history"], "prompt_id": r["prompt_id"],
                             "same_tokens": r["tokens_sha"] == o["tokens_sha"]}, **compare_trees(r, o)))
    linear = [r for r in runs if r["impl"] == "authors" and r["method"] == registry.LINEAR]
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
        if g["method"] == registry.AR:
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
