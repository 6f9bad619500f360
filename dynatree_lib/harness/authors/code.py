"""A differential test of the authors' DynaTree code (github.com/cny123222/DynaTree, MIT) against greedy AR and ours.

    DYNATREE_AUTHORS=<clone of theirs> OMP_NUM_THREADS=1 python -m dynatree_lib bench --experiment authors_code
        # writes results/cpu/authors_code.json; authors_code_history: the history runs after 5 generations

Nothing of theirs is copied into this repository. Their four core modules (``spec_decode/core/``:
``token_tree.py``, ``speculative_generator.py``, ``tree_speculative_generator.py``,
``tree_speculative_generator_adaptive.py``) are imported at run time from the checkout given, by file path
(``importlib``), under a private package name, so that their package ``__init__`` (which imports ``kvcompress``)
never runs. They run on CPU in fp32, with ``use_compile=False`` and ``device="cpu"``, as their Table 1 scripts
construct them (``papers/benchmark_main_D8B3.py``, ``papers/benchmark_adaptive_pg19.py``).

Runs, per workload (WikiText-2 and PG-19, ``AuthorsRun.prompts`` of each from ``harness.setup.prompts:authors_prompts``: their
prompts, cut at 800 and 1000 characters), EOS disabled (exactly T tokens), as their benchmark runs them:

- ``ours / ar``: greedy AR (``dynatree_lib.generate(target, ids, T)``), the reference for every other run;
- ``authors / linear``: ``SpeculativeGenerator`` with K = 8 (WikiText-2) or 5 (PG-19);
- ``authors / fixed_tree``: ``TreeSpeculativeGeneratorV2`` with D = 8, B = 3, tau = 0.1, 256 nodes;
- ``authors / dynatree``: ``TreeSpeculativeGeneratorV2AdaptiveV3`` with their Table 1 settings (D0 = 5,
  D_max = 8 or 9, B = 1/2/3, tau_h = 0.9, tau_l = 0.4, tau = 0.05, rho_stop = 0.1, rho_deep = 0.5, 256 nodes,
  window 10, a* = 0.7, step 0.05), history on (``enable_auto_adjust``) and off. One generator per workload and
  setting serves all its prompts in order, so the history carries across prompts as in their benchmark
  (it needs 5 generations before it acts: ``AuthorsRun.history_warmup`` = N first runs N discarded generations over the
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
   counted (``sequential_fallbacks``, with the exception's text); ``AuthorsRun.strict`` raises instead.
5. Prompt length (the ``tiny`` pair, the smoke profile's, only): the tiny Llama's 512 positions do not hold the character prompts of
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

import dataclasses
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ... import methods as registry
from .checkout import REPO_NAME, IdsTokenizer, NotAuthorsCheckout, check_checkout, compat_shims, \
    file_digests, import_core, read_commit, scratch_copy
from .records import headline, instrument, make_run, our_tree_digest, summarize, write_json
from ..setup.workloads import PG19, WIKITEXT2

IMPLS = ("authors", "authors+cache_fix", "authors+position_fix", "authors+both_fixes", "ours")
FIXES = {"authors": (), "authors+cache_fix": ("cache",), "authors+position_fix": ("position",),
         "authors+both_fixes": ("cache", "position")}
WORKLOADS = {  # their Table 1 settings per dataset: prompt characters, linear K, DynaTree's D_max
    WIKITEXT2: {"chars": 800, "K": 8, "D_max": 8},
    PG19: {"chars": 1000, "K": 5, "D_max": 9},
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



# ----------------------------------------------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------------------------------------------

def load_pair(pair: str):
    from ..setup.models import load_model

    refs = {"cpu": ("embedded:target", "embedded:draft"), "tiny": ("tiny-llama:target", "tiny-llama:draft")}[pair]
    target, tok = load_model(refs[0], dtype="float32")
    draft, _ = load_model(refs[1], dtype="float32")
    return target.eval(), draft.eval(), tok, refs


def load_prompts(tok, n: int, T: int, max_positions: int | None) -> list[dict]:
    from ..setup.prompts import authors_prompts

    out = []
    for dataset, w in WORKLOADS.items():
        for p in authors_prompts(dataset, tok, n, w["chars"]):
            ids, cut = p.ids, False
            if max_positions is not None and ids.numel() + T + 32 > max_positions:
                ids, cut = ids[: max_positions - T - 32], True
            out.append({"dataset": dataset, "id": p.id, "ids": ids.long(), "truncated": cut})
    return out


def authors_generator(cls, kind: str, *, target, draft, tok, dataset: str, history: bool):
    """Their generator class ``cls`` for decoder ``kind`` on the pair at the workload's settings, and those settings."""
    common = dict(target_model=target, draft_model=draft, tokenizer=tok, device="cpu", use_compile=False)
    if kind == registry.LINEAR:
        return cls(K=WORKLOADS[dataset]["K"], **common), {"K": WORKLOADS[dataset]["K"], "max_len": 2048}
    if kind == registry.FIXED_TREE:
        settings = dict(FIXED, levels=FIXED["tree_depth"] + 1)
        return cls(**FIXED, **common), settings
    kw = dict(DYNATREE, max_depth=WORKLOADS[dataset]["D_max"], enable_auto_adjust=history)
    settings = dict(kw, D0=kw["tree_depth"])
    return cls(**kw, **common), settings


def our_configs(dataset: str) -> dict:
    from ...core.policies.dynatree import DynaTreeConfig
    from ...core.policies.static import FixedTreeConfig, LinearConfig

    dyn = dict(D0=5, D_max=WORKLOADS[dataset]["D_max"], B_min=1, B_mid=2, B_max=3, tau_h=0.9, tau_l=0.4,
               rho_stop=0.1, rho_deep=0.5, tau=0.05, n_max=256, W=10, a_star=0.7, root_siblings=False,
               tau_on_parent=True, history_scope="prompt")
    return {(registry.LINEAR, False): LinearConfig(K=WORKLOADS[dataset]["K"]),
            (registry.FIXED_TREE, False): FixedTreeConfig(D=9, B=3, tau=0.1, n_max=256, root_siblings=False,
                                                   tau_on_parent=True),
            (registry.DYNATREE, False): DynaTreeConfig(**dyn, history=False),
            (registry.DYNATREE, True): DynaTreeConfig(**dyn, history=True)}


def plan(impls: list[str]) -> list[tuple[str, str, bool]]:
    """(impl, method, history) in the order they run."""
    out = []
    for impl in impls:
        if impl == "authors":
            out += [(impl, registry.LINEAR, False), (impl, registry.FIXED_TREE, False),
                    (impl, registry.DYNATREE, True), (impl, registry.DYNATREE, False)]
        elif impl == "ours":
            out += [(impl, registry.LINEAR, False), (impl, registry.FIXED_TREE, False),
                    (impl, registry.DYNATREE, False), (impl, registry.DYNATREE, True)]
        else:
            out += [(impl, registry.FIXED_TREE, False), (impl, registry.DYNATREE, True)]
    return out


@dataclass(frozen=True)
class AuthorsRun:
    """One differential run: the pair (``cpu``: the cpu profile's; ``tiny``: a tiny Llama), new tokens per
    generation (EOS disabled), prompts per workload, the implementations, discarded history generations first
    (``warmup_prompts``), whether their sequential fallback raises, and their commit where the checkout has no
    .git to read it from."""
    pair: str = "cpu"
    T: int = 64
    prompts: int = 2
    impls: tuple[str, ...] = IMPLS
    history_warmup: int = 0
    strict: bool = False
    quiet: bool = False
    commit: str | None = None


# the records this module makes, by name: the plain run and the one whose history acts (5 generations first)
RECORDS = {"authors_code": AuthorsRun(),
           "authors_code_history": AuthorsRun(history_warmup=5, impls=("authors", "authors+both_fixes", "ours"))}
PAIRS = {"cpu": "cpu", "smoke": "tiny"}  # profile -> the pair its record runs
AUTHORS_ENV = "DYNATREE_AUTHORS"  # a checkout of theirs: github.com/cny123222/DynaTree


@dataclass
class Job:
    """What every run of one differential test shares: the models, the prompts, greedy AR's tokens, the log, and
    the imported variants of their code."""
    run: AuthorsRun
    target: object
    draft: object
    prompts: list[dict]
    ar: dict
    variants: dict

    def log(self, text: str) -> None:
        if not self.run.quiet:
            print(text, file=sys.stderr, flush=True)

    def of(self, dataset: str) -> list[dict]:
        return [p for p in self.prompts if p["dataset"] == dataset]


def checkout_from_env() -> Path:
    """Their checkout, named by ``$DYNATREE_AUTHORS``; refused by name when unset or not theirs."""
    where = os.environ.get(AUTHORS_ENV)
    if not where:
        raise NotAuthorsCheckout(f"the authors_code experiments run the authors' code: clone {REPO_NAME} (e.g. at "
                                 f"a8a25af) and set ${AUTHORS_ENV} to its path")
    return check_checkout(where)


def run_authors_code(profile, rerun: bool = False, root: Path | None = None, render_only: bool = False,
                     name: str = "authors_code") -> Path:
    """The record ``name`` of ``RECORDS`` for the profile's pair (``PAIRS``), against ``$DYNATREE_AUTHORS``."""
    from ..measure.store import check_clean, needs_run, results_path

    path = results_path(name, profile, root)
    if not needs_run(path, rerun, render_only):
        return path
    if profile.name not in PAIRS:
        raise ValueError(f"{name} runs on the profiles {sorted(PAIRS)}, not {profile.name!r}")
    checkout = checkout_from_env()
    doc = run_all(dataclasses.replace(RECORDS[name], pair=PAIRS[profile.name]), checkout)
    check_clean(path, doc)
    write_json(doc, path)
    print("\n".join(doc["summary"]["headline"]))
    return path


def run_authors_code_history(profile, rerun: bool = False, root: Path | None = None,
                             render_only: bool = False) -> Path:
    return run_authors_code(profile, rerun=rerun, root=root, render_only=render_only, name="authors_code_history")


def run_all(run: AuthorsRun, root: Path) -> dict:
    """Greedy AR on every prompt, then every (impl, method, history) of ``plan`` on each workload."""
    import torch

    from ...methods import generate
    from ..measure.environment import environment
    from ..setup.paths import portable

    torch.manual_seed(0)
    target, draft, tok, refs = load_pair(run.pair)
    max_pos = target.config.max_position_embeddings if run.pair == "tiny" else None
    job = Job(run, target, draft, load_prompts(tok, run.prompts, run.T, max_pos), ar={}, variants={})
    runs = []
    for p in job.prompts:  # greedy AR: the reference
        t0 = time.perf_counter()
        job.ar[p["id"]] = list(generate(target, p["ids"], run.T).tokens)
        runs.append(make_run("ours", registry.AR, p["dataset"], {}, history=False, prompt_id=p["id"],
                             tokens=job.ar[p["id"]], ar_tokens=job.ar[p["id"]], iterations=[],
                             prompt_tokens=int(p["ids"].numel()), truncated=p["truncated"],
                             seconds=round(time.perf_counter() - t0, 2)))
        job.log(f"[ar] {p['id']}: {p['ids'].numel()} prompt tokens, {time.perf_counter() - t0:.1f}s")
    impls = [i for i in IMPLS if i in run.impls]
    scratch = Path(tempfile.mkdtemp(prefix="authors_code_"))
    try:
        for impl in impls:
            if impl != "ours":
                job.variants[impl] = import_core(scratch_copy(root, FIXES[impl], scratch), impl.replace("+", "_"))
        for impl, method, history in plan(impls):
            for dataset in WORKLOADS:
                runs += (run_ours if impl == "ours" else run_authors)(job, impl, method, history, dataset)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summary = summarize(runs)
    summary["headline"] = headline(summary)
    return {"source": {"repo": REPO_NAME, "commit": run.commit or read_commit(root), "path_given": portable(root),
                       "files": file_digests(root)},
            "pair": {"name": run.pair, "target": refs[0], "draft": refs[1], "dtype": "float32"},
            "T": run.T, "environment": dict(environment("cpu"), omp_num_threads=os.environ.get("OMP_NUM_THREADS")),
            "shims": SHIMS, "prompts": [p["id"] for p in job.prompts],
            "prompt_tokens": {p["id"]: int(p["ids"].numel()) for p in job.prompts},
            "runs": runs, "summary": summary}


def warmup_prompts(prompts: list[dict], n: int) -> list[dict]:
    """The first ``n`` generations of a history run that are thrown away: the prompts in order, cycled (their
    benchmark's warm-up runs prompts 0 and 1 before the measured ones, with the history kept)."""
    return [prompts[i % len(prompts)] for i in range(n)] if prompts else []


def run_authors(job: Job, impl: str, method: str, history: bool, dataset: str) -> list[dict]:
    """One of their decoders (``impl``: their code or a patched copy) on the workload's prompts, in order."""
    T, prompts, tok = job.run.T, job.of(dataset), IdsTokenizer()
    mod = job.variants[impl]
    cls = {registry.LINEAR: mod.linear, registry.FIXED_TREE: mod.fixed, registry.DYNATREE: mod.dynatree}[method]
    gen, settings = authors_generator(cls, method, target=job.target, draft=job.draft, tok=tok,
                                     dataset=dataset, history=history)
    probe = instrument(gen, method, strict=job.run.strict)
    warm = warmup_prompts(prompts, job.run.history_warmup if history else 0)
    for p in warm:  # discarded generations that feed the history before the measured ones
        with compat_shims():
            gen.generate(tok.register(p["id"], p["ids"]), max_new_tokens=T)
    if warm:
        settings["history_warmup"] = [p["id"] for p in warm]
    out = []
    for p in prompts:
        key = tok.register(p["id"], p["ids"])
        n0, f0 = len(probe["iterations"]), probe["sequential_fallbacks"]
        t0 = time.perf_counter()
        with compat_shims():
            gen.generate(key, max_new_tokens=T)
        secs = time.perf_counter() - t0
        tokens = gen.current_ids[0, p["ids"].numel():].tolist()
        extra = {"sequential_fallbacks": probe["sequential_fallbacks"] - f0,
                 "authors_reported_acceptance": gen.get_stats().get("acceptance_rate"), "seconds": round(secs, 2)}
        if probe["fallback_errors"]:
            extra["fallback_errors"] = list(probe["fallback_errors"])
        if method == registry.DYNATREE:
            extra["history_state"] = {"window": [round(x, 4) for x in getattr(gen, "acceptance_history", [])],
                                      "D0": gen.current_base_depth, "tau_h": gen.current_high_conf_threshold,
                                      "rho_deep": gen.current_deep_expand_threshold}
        r = make_run(impl, method, dataset, settings, history=history, prompt_id=p["id"], tokens=tokens,
                     ar_tokens=job.ar[p["id"]], iterations=probe["iterations"][n0:], **extra)
        out.append(r)
        job.log(f"[{impl} {method}{' history' if history else ''}] {p['id']}: equal={r['equals_ar']} "
                f"div={r['first_divergence']} rounds={r['rounds']} nodes={r.get('mean_nodes', 0):.1f} "
                f"fallbacks={extra['sequential_fallbacks']} {secs:.1f}s")
    return out


def run_ours(job: Job, impl: str, method: str, history: bool, dataset: str) -> list[dict]:
    """Our decoder with their settings (``our_configs``) on the workload's prompts, one session across them."""
    from ...methods import generate
    from ...core.policies.base import Session

    T, prompts = job.run.T, job.of(dataset)
    cfg = our_configs(dataset)[(method, history)]
    session = Session() if history else None
    common = dict(draft=job.draft, method=cfg, kv_mode="rebuild", session=session)
    warm = warmup_prompts(prompts, job.run.history_warmup if history else 0)
    for p in warm:  # discarded generations that feed the history before the measured ones
        generate(job.target, p["ids"], T, **common)
    out = []
    for p in prompts:
        t0 = time.perf_counter()
        res = generate(job.target, p["ids"], T, record_trees=T + 1, **common)
        secs = time.perf_counter() - t0
        lg = res.log
        its = [{"nodes": n, "depth": d, "accepted": a, "committed": c}
               for n, d, a, c in zip(lg.nodes, lg.depth, lg.accepted, lg.committed)]
        if method != registry.LINEAR:
            for it, tree in zip(its, res.trees):
                it["tree"] = our_tree_digest(tree)
        settings = dict(asdict(cfg), kv_mode="rebuild")
        if warm:
            settings["history_warmup"] = [q["id"] for q in warm]
        if method == registry.FIXED_TREE:
            settings["levels"] = cfg.D
        r = make_run(impl, method, dataset, settings, history=history, prompt_id=p["id"], tokens=list(res.tokens),
                     ar_tokens=job.ar[p["id"]], iterations=its, seconds=round(secs, 2))
        if history and (state := session.states.get(cfg)) is not None:
            r["history_state"] = {"window": [round(x, 4) for x in state.window], "D0": state.D0,
                                  "tau_h": state.tau_h, "rho_deep": state.rho_deep}
        out.append(r)
        job.log(f"[ours {method}{' history' if history else ''}] {p['id']}: equal={r['equals_ar']} "
                f"div={r['first_divergence']} rounds={r['rounds']} nodes={r.get('mean_nodes', 0):.1f} {secs:.1f}s")
    return out
