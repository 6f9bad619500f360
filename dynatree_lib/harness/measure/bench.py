"""The measurement loop: every missing cell of an experiment, interleaved prompt by prompt, checkpointed per row."""
from __future__ import annotations

import dataclasses
import zlib

import torch

from ...core.policies.base import Session
from ...core.engines.hf import as_runner
from ... import methods as registry
from . import load
from . import cell as measure
from .environment import BandwidthProbe, bound
from ..setup.profiles import Profile, models_for
from ..setup.prompts import authors_prompts, load_prompts
from ..setup.splits import CATEGORIES
from .store import ResultStore
from ..setup.weights import record_weights
from ..setup.workloads import eos as workload_eos, workload


def prompt_seed(profile_seed: int, prompt_id: str, replicate: int) -> int:
    """The seed of a sampled generation: the same for every method on a prompt in a replicate."""
    return zlib.crc32(f"{profile_seed}:{prompt_id}:{replicate}".encode())


def unmeasurable(cells: list) -> dict[str, str]:
    """{method: what this machine lacks to measure it} for the cells' methods that cannot run here."""
    methods = dict.fromkeys(c.method for c in cells)
    return {m: why for m in methods if (why := registry.REGISTRY[m].unavailable()) is not None}


def measurable(name: str, todo: list, profile: Profile) -> list:
    """The missing (cell, key) pairs this machine can measure; says which it cannot, and why."""
    lacking = unmeasurable([c for c, _ in todo])
    for method, why in lacking.items():
        n = sum(c.method == method for c, _ in todo)
        print(f"{name}: {n} cell(s) of {method!r} not measured on this machine: {why}")
    return [(c, k) for c, k in todo if c.method not in lacking]


def measure_cells(name: str, p, todo: list, path, counts: dict) -> None:
    """Measure ``todo`` ((cell, key) pairs), ``counts[key]`` prompts each, one model load per precision."""
    store = ResultStore(path)
    for dtype in dict.fromkeys(c.dtype for c, _ in todo):
        _measure(name, p, [(c, k) for c, k in todo if c.dtype == dtype], store, dtype, counts=counts)


def _measure(name: str, p, todo: list, store: ResultStore, dtype: str, *, counts: dict) -> None:
    from tqdm.auto import tqdm

    if p.models.threads:
        torch.set_num_threads(p.models.threads)
    target, draft, tok = p.load_pair(dtype, models_for=models_for(c.method for c, _ in todo))
    drafts = own_drafts(p, target, todo, dtype) | {None: draft}
    probe = BandwidthProbe(p.models.device)
    weights = {ref: record_weights(p, ref) for ref in drafts}
    bound_ = bound(as_runner(target).model, probe)
    todo.sort(key=lambda ck: ck[0].config is not None)  # AR first: every other cell is compared with it
    rows = {k: store.partial(k) for _, k in todo}
    prompts = Prompts(p, tok)
    refs = ar_references(store, todo, rows, dtype)
    runs = {k: measure.CellRun(c, target, drafts[c.draft], kv_mode=p.protocol.kv_mode,
                               eos=workload_eos(c.dataset, tok), session=Session()) for c, k in todo}
    watches = {k: load.Watch() for _, k in todo}
    bar = tqdm(total=sum(counts[k] * prompts.per_cell(c) for c, k in todo), initial=sum(map(len, rows.values())),
               desc=f"{p.name}/{name} {dtype}", unit="gen")
    # Interleaved: round i measures prompt i for every cell (AR first), so slow drifts of machine speed hit all
    # methods alike instead of whichever cells happen to run during a slow spell.
    for i in range(max(counts[k] * prompts.per_cell(c) for c, k in todo)):
        for c, k in todo:
            ps = prompts.of(c, counts[k])
            if len(rows[k]) > i or i >= len(ps):
                continue
            bar.set_postfix_str(f"{c.dataset} {c.label[:40]} T={c.T}")
            if not runs[k].warmed:  # in every process that measures the cell, a resumed one's included
                runs[k].warm_up(ps, p.protocol.warmup)
            ref = refs.setdefault(ref_key(c), {})
            seed = prompt_seed(p.protocol.seed, ps[i].id, c.tags.get("replicate", 0))
            before = watches[k].start()
            row = measure.measure(runs[k], ps[i], ar_tokens=ref.get(ps[i].id), probe=probe, seed=seed,
                                  record_trees=c.tags.get("record_trees", 0))
            row["outside_cpu_s"] = watches[k].stop(before)
            if c.config is None and c.sampling.greedy:
                ref[ps[i].id] = row["output_ids"]
            rows[k].append(row)
            store.save_partial(k, rows[k])
            bar.update(1)
    for c, k in todo:
        extra = {"weights": weights[c.draft], "bound": bound_, "load": watches[k].summary(rows[k])}
        store.add(measure.make_record(c, k, p, prompts.of(c, counts[k]), rows=rows[k], extra=extra,
                  replicate=c.tags.get("replicate", 0)))
    bar.close()


def own_drafts(p, target, todo: list, dtype: str) -> dict:
    """{reference: draft runner} of the cells that draft with a draft of their own (``Cell.draft``), each loaded
    once, without its lookup: a head over ``target`` (its embedding borrowed), as the profile loads its own; a draft
    model as ``load_pair`` pairs it, on the profile's engine (scoring the cell's ``draft_vocab`` tag's most frequent
    tokens where set), beside a copy of the target that lends it the embedding."""
    from ..setup.models import load_head_draft
    from ..setup.weights import is_head

    def load(ref: str, vocab: int | None):
        if is_head(ref):
            return load_head_draft(ref, target, p.max_len, None, False, fused=p.models.engine.fused)
        pair = dataclasses.replace(p.models, draft=ref, draft_vocab=vocab, draft_lookup=False)
        return pair.load_pair(dtype, p.max_len)[1]

    vocabs = {c.draft: c.tags.get("draft_vocab") for c, _ in todo if c.draft}
    return {ref: load(ref, vocab) for ref, vocab in vocabs.items()}


def ref_key(c) -> tuple:
    return (c.dataset, c.T, c.L_max, c.split)


def ar_references(store: ResultStore, todo: list, rows: dict, dtype: str) -> dict:
    """AR's greedy tokens per (workload, T, L_max, split) and prompt, from finished records or checkpointed rows."""
    refs: dict = {}
    pending = [{"method": registry.AR, "dataset": c.dataset, "T": c.T, "L_max": c.L_max, "split": c.split,
                "dtype": c.dtype, "temperature": c.sampling.temperature, "rows": rows[k]}
               for c, k in todo if c.config is None]
    for r in store.records + pending:
        if r["method"] == registry.AR and r["dtype"] == dtype and r.get("temperature", 0.0) == 0.0:
            key = (r["dataset"], r["T"], r["L_max"], r.get("split", "test"))
            refs.setdefault(key, {}).update({row["prompt_id"]: row["output_ids"] for row in r["rows"]})
    return refs


class Prompts:
    """Prompts of a run, loaded once per (workload, L_max, split, count)."""

    def __init__(self, p, tok):
        self.p, self.tok, self.cache = p, tok, {}

    def per_cell(self, c) -> int:
        """Prompts a cell's count stands for: one per category for a workload with categories."""
        return len(set(CATEGORIES.values())) if workload(c.dataset).per_category else 1

    def of(self, c, n: int) -> list:
        key = (c.dataset, c.L_max, c.split, n)
        if key not in self.cache:
            if self.p.protocol.prompt_style == "authors":
                ps = authors_prompts(c.dataset, self.tok, n, c.L_max, self.p.protocol.data_source)
            else:
                ps = load_prompts(c.dataset, self.tok, n, c.L_max, split=c.split, seed=self.p.prompt_seed(c.split),
                                  source=self.p.protocol.data_source)
            cap = self.p.protocol.max_prompt
            for q in ps:
                if cap and q.ids.numel() > cap:
                    q.ids = q.ids[-cap:]
            self.cache[key] = ps
        return self.cache[key]
