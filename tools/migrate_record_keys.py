"""Rekey the committed result records: from the old key, which hashed a cell's label, to the current one (method,
variant, configuration, tags and the rest of ``experiments.key_parts``; no label), and give every record its
``variant``.

    python tools/migrate_record_keys.py [results/]        # every results/<profile>/*.json holding records

A record of a current cell (any experiment of its profile) gets that cell's key and variant; partial checkpoints
(``partial``, keyed like records) of current cells are rekeyed the same way. Any other record (an archived run, an
older protocol's) gets its variant from its tags and method, and a key computed from its own fields the way
``key_parts`` computes a cell's. Either way the label the registry now gives the record (``variants.label``) must
equal the label it was written with, or the script stops, naming the record: rendering from the migrated files shows
exactly what it showed before.

Idempotent: a record that has a ``variant`` is left as it is, so the script can run again after new records
arrive (a rebase onto runs measured with the old key). Files are rewritten only where something changed, in the
store's own format (``ResultStore``).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dynatree_lib import methods as registry  # noqa: E402
from dynatree_lib.harness import peers, variants as v  # noqa: E402
from dynatree_lib.harness.experiments import EXPERIMENTS, key_parts  # noqa: E402
from dynatree_lib.harness.measure import Cell  # noqa: E402
from dynatree_lib.harness.paths import RESULTS  # noqa: E402
from dynatree_lib.harness.profiles import PROFILES, Profile, get_profile  # noqa: E402
from dynatree_lib.harness.store import record_key  # noqa: E402
from dynatree_lib.harness.tuning import NotTuned  # noqa: E402
from dynatree_lib.core.sampling import Sampling  # noqa: E402

STEPS = {0: v.ABLATION_FIXED, 0.5: v.ABLATION_MATCHED, 1: v.ABLATION_DYNAMIC, 2: v.ABLATION_HISTORY}
SWEEPS = {"thresholds": v.SWEEP_THRESHOLDS, "breadth": v.SWEEP_BREADTH, "depth": v.SWEEP_DEPTH}


def old_key(parts: dict, label: str) -> str:
    """The key a cell had before variants: the same parts, its label in the variant's place."""
    return record_key(**{k: x for k, x in parts.items() if k != "variant"}, label=label)


def current_keys(p: Profile, root: Path) -> dict[str, tuple[str, str]]:
    """{old key: (new key, variant)} of every current cell of profile ``p`` (an experiment whose cells cannot be
    built from what is committed, e.g. without its costs, is said and skipped)."""
    out = {}
    for name, cells in EXPERIMENTS.items():
        try:
            todo = cells(p, root)
        except (NotTuned, KeyError, FileNotFoundError) as e:
            print(f"{p.name}/{name}: cells not built ({type(e).__name__}: {e}); its records are rekeyed from their "
                  "own fields")
            continue
        for c in todo:
            parts = key_parts(name, p, c)
            out[old_key(parts, c.label)] = (record_key(**parts), c.variant)
    return out


def infer_variant(r: dict) -> str:
    """A record's variant from what it logged: its tags, method and lookup."""
    tags = r.get("tags", {})
    if not r.get("lookup", True) or tags.get("control"):
        return v.NETWORK_ALONE
    if tags.get("paper_settings"):
        return v.PAPER_SETTINGS
    if tags.get("lookup_skip") is False:
        return v.EVERY_LEVEL_DRAFTED
    if tags.get("skip_window") == 0:
        return v.NO_COPY_RECORD
    if "candidate" in tags:
        return v.CANDIDATE
    if "step" in tags:
        return STEPS[tags["step"]]
    if tags.get("sweep") in SWEEPS:
        return SWEEPS[tags["sweep"]]
    if r["method"] == registry.FIXED_TREE and "D" in tags:
        return v.FIXED_GRID
    if r["method"] == peers.METHOD:
        return next(peer.variant for peer in peers.PEERS if peer.label == r["label"])
    return v.MAIN


def own_parts(r: dict, variant: str, name: str, p: Profile) -> dict:
    """A record's key parts from its own fields (the profile's where the record did not log one)."""
    s = Sampling(r.get("temperature", 0.0), r.get("top_k"), r.get("top_p"))
    cell = Cell(dataset=r["dataset"], method=r["method"], variant=variant, config=None, T=r["T"], L_max=r["L_max"],
                dtype=r["dtype"], tags=r.get("tags", {}), sampling=s, lookup=r.get("lookup", True),
                split=r.get("split", "test"))
    parts = key_parts(name, p, cell)
    parts |= {"config": r["config"], "lookup": r.get("draft_lookup", parts["lookup"])}
    for field, part in (("target", "target"), ("draft", "draft"), ("engine", "engine"), ("kv_mode", "kv"),
                        ("warmup", "warmup")):
        if field in r:
            parts[part] = r[field]
    if name != "tuning" and "seed" in r:
        parts["seed"] = r["seed"]
    parts.pop("draft_vocab", None)
    if r.get("draft_vocab"):
        parts["draft_vocab"] = r["draft_vocab"]
    parts["profile"] = r.get("profile", p.name)
    return parts


def check_label(r: dict, variant: str, where: str) -> None:
    shown = v.label(r["method"], variant, r["config"], r.get("tags", {}))
    if shown != r["label"]:
        raise SystemExit(f"{where}: record {r['key']} ({r['method']}) was written as {r['label']!r}, but its variant "
                         f"{variant!r} shows {shown!r}; fix the variant's label (harness/variants.py) first")


def with_variant(r: dict, key: str, variant: str) -> dict:
    """The record with its new key and ``variant`` right after ``method`` (``measure.make_record``'s order)."""
    out = {}
    for k, x in r.items():
        out[k] = key if k == "key" else x
        if k == "method":
            out["variant"] = variant
    return out


def migrate_file(path: Path, p: Profile, keys: dict) -> tuple[int, int, int]:
    """Rekey one experiment file; (records rekeyed from current cells, from their own fields, partials rekeyed)."""
    data = json.loads(path.read_text())
    name = re.sub(r"_v\d+$", "", path.stem)  # main_v3.json: an earlier draft's main run
    cells = own = 0
    records = []
    for r in data["records"]:
        if "variant" in r:
            records.append(r)
            continue
        if r["key"] in keys:
            key, variant = keys[r["key"]]
            cells += 1
        else:
            variant = infer_variant(r)
            key = record_key(**own_parts(r, variant, name, p))
            own += 1
        check_label(r, variant, str(path))
        records.append(with_variant(r, key, variant))
    partial = data.get("partial", {})
    rekeyed = {keys[k][0] if k in keys else k: rows for k, rows in partial.items()}
    moved = sum(k in keys for k in partial)
    if cells or own or moved:
        data["records"] = records
        if "partial" in data:
            data["partial"] = rekeyed
        path.write_text(json.dumps(data, indent=1, default=float))
    return cells, own, moved


def main(root: Path = RESULTS) -> int:
    peers.register()  # the peers experiment's records name llama.cpp's modes
    for folder in sorted(d for d in root.iterdir() if d.is_dir() and d.name in PROFILES):
        p = get_profile(folder.name)
        keys = current_keys(p, root)
        for path in sorted(folder.glob("*.json")):
            if path.name.endswith(".bak.json") or "records" not in json.loads(path.read_text()):
                continue
            cells, own, moved = migrate_file(path, p, keys)
            if cells or own or moved:
                print(f"{path}: {cells} record(s) rekeyed as current cells, {own} from their own fields, "
                      f"{moved} partial checkpoint(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS))
