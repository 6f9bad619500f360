"""Memory of AR, DynaTree with the committed v4 draft and DynaTree with the committed EAGLE-3 head on the cpu profile,
measured as notebook 08 measures it (``harness.memory``: one generation's footprint above the runtime, each cell in a
fresh process) on the first WikiText-2 test prompt: issue 56's target "DynaTree with the head within 5% of AR".
Each cell is measured in ``--repeats`` fresh processes, one row each (how alike they are shows the measurement's
spread), the record's aggregate their mean. Appends the missing records to ``--out`` (default
``results/cpu/memory_head.json``; the record store never overwrites one) and prints each footprint and its excess
over AR's.

    python tools/memory_head.py [--head eagle3:weights/smollm2-eagle3] [--repeats 3] [--rerun]
                                [--out results/cpu/memory_head.json]

``--rerun`` moves the JSON aside (``*.bak.json``) and measures every cell again (a head published since).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dynatree_lib import methods as registry  # noqa: E402
from dynatree_lib.harness.experiments import cell_key, memory_cells  # noqa: E402
from dynatree_lib.harness.memory import run_memory  # noqa: E402
from dynatree_lib.harness.paths import REPO  # noqa: E402
from dynatree_lib.harness.profiles import get_profile  # noqa: E402
from dynatree_lib.harness.store import ResultStore  # noqa: E402

WORKLOAD = "wikitext2"


def cells(profile, methods: tuple[str, ...]) -> list:
    """(cell, key) of notebook 08's cells of ``methods`` on the workload."""
    return [(c, cell_key("memory", profile, c)) for c in memory_cells(profile)
            if c.dataset == WORKLOAD and c.method in methods]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--head", default="eagle3:weights/smollm2-eagle3")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "cpu" / "memory_head.json")
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per cell")
    ap.add_argument("--rerun", action="store_true", help="move --out aside and measure every cell again")
    args = ap.parse_args()
    if args.rerun and (old := ResultStore(args.out).archive()):
        print(f"rerun: previous records kept at {old}")
    v4, head = get_profile("cpu"), get_profile("cpu", draft=args.head, draft_vocab=None)
    for name, prof, methods in (("v4", v4, (registry.AR, registry.DYNATREE)), ("head", head, (registry.DYNATREE,))):
        store = ResultStore(args.out)
        todo = [(c, k) for c, k in cells(prof, methods) if store.get(k) is None]
        print(f"{name}: {len(todo)} cell(s) to measure")
        run_memory(prof, todo, args.out, args.repeats)
    records = json.loads(args.out.read_text())["records"]
    ar = next(r for r in records if r["method"] == registry.AR)["aggregate"]["footprint_mb"]["mean"]
    for r in records:
        mb, rows = r["aggregate"]["footprint_mb"]["mean"], [round(x["footprint_mb"], 1) for x in r["rows"]]
        print(f"{r['method']:10s} draft {r['draft']:32s} footprint {mb:7.1f} MB {rows}  {100 * (mb / ar - 1):+6.1f}% "
              "over AR")


if __name__ == "__main__":
    main()
