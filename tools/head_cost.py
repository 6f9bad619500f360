"""One step of a draft (default: the committed EAGLE-3 head) over the target's one-token forward, on the cpu
profile's timed engine (bf16), in paired rounds (``harness.costs.one_token_ratio``: each round times the target and right after it the draft),
and the committed v4 draft the same way in the same process: issue 56's cost target (<= 0.08). Writes ``results/cpu/head_cost.json``,
each draft with the engine its step ran on (the head's: ``eagle3+fused``, one C++ call a step, where the kernels run).
Time it alone on the machine.

    python tools/head_cost.py [--head eagle3:weights/smollm2-eagle3] [--rounds 15] [--span 120] [--machine KIND]

``--machine``: another machine kind's folder (``results/cpu@KIND/head_cost.json``, ``Models.machine``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dynatree_lib.core.lookup import LookupRunner  # noqa: E402
from dynatree_lib.core.runners import as_runner  # noqa: E402
from dynatree_lib.harness.costs import one_token_ratio  # noqa: E402
from dynatree_lib.harness.environment import environment  # noqa: E402
from dynatree_lib.harness.profiles import get_profile  # noqa: E402
from dynatree_lib.harness.store import results_path, write_report  # noqa: E402
from dynatree_lib.harness.weights import weights_info  # noqa: E402


def network(runner):
    """The draft network a step runs (the context lookup's own work aside, as the cost curves count it)."""
    r = as_runner(runner)
    return r.inner if isinstance(r, LookupRunner) else r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--head", default="eagle3:weights/smollm2-eagle3")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--span", type=float, default=120.0, help="seconds the rounds are spread over")
    ap.add_argument("--machine", default=None, help="the machine kind whose folder the record goes to")
    args = ap.parse_args()
    base = get_profile("cpu", machine=args.machine)
    context = max(base.protocol.L_max.values())
    out = {"context": context, "dtype": base.models.dtype, "engine": str(base.models.engine), "drafts": {}}
    for name, prof in (("v4", base), ("head", get_profile("cpu", draft=args.head, draft_vocab=None,
                                                           machine=args.machine))):
        target, draft, _ = prof.models.load_pair(prof.models.dtype, prof.max_len)
        net = network(draft)
        ratio = one_token_ratio(as_runner(target), net, context, rounds=args.rounds, span_s=args.span)
        out["drafts"][name] = {"ref": prof.models.draft, "engine": net.engine,
                               "weights": weights_info(prof.models.draft), **ratio}
        print(f"{name} ({net.engine}): draft / target one-token cost, median {ratio['median']:.3f} "
              f"(quartiles {ratio['quartiles'][0]:.3f}-{ratio['quartiles'][1]:.3f})")
    out["environment"] = environment(base.models.device)
    path = results_path("head_cost", base)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_report(path, out)
    print(path)


if __name__ == "__main__":
    main()
