"""The cpu profile's one-token target forward against its bandwidth bound, one engine beside the other.

    python tools/forward_bench.py                  # 90 s: the one-call forward and the compiled graph
    python tools/forward_bench.py --seconds 600    # long enough to see both of the VM's memory phases

Each round probes the read bandwidth (``environment.BandwidthProbe``: torch's ``sum`` over 512 MiB), then times
a one-token forward over 300 cached tokens on each engine (``runner.argmax``, as AR calls it: logits and
argmax; best of 10 after a warm call) and prints both
against the bound (weight bytes / probed bandwidth). The rounds alternate the engines within seconds, so a
change of the VM's memory speed hits both alike. Nothing else should run meanwhile.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from dynatree_lib.harness.measure import environment
from dynatree_lib.harness.setup import models
from dynatree_lib.harness.experiments.matmul_costs import timed
from dynatree_lib.harness.setup.profiles import get_profile

ENGINES = ("static+fused", "static+compile")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=90)
    args = ap.parse_args()
    p = get_profile("cpu")
    torch.set_num_threads(p.models.threads)
    runners = {e: models.load_pair(p.models.target, p.models.draft, p.models.device, "bfloat16", context_override=p.models.context_override, engine=e, max_len=p.max_len)[0]
               for e in ENGINES}
    nbytes, probe = environment.weight_bytes(runners[ENGINES[0]].model), environment.BandwidthProbe("cpu")
    ids = torch.randint(0, 1000, (301,), generator=torch.Generator().manual_seed(0))
    for r in runners.values():
        r.reset()
        r.forward(ids[:300], torch.arange(300), last_only=True)

    def step(r):
        r.truncate(300)
        r.argmax(ids[300:], torch.tensor([300])).tolist()

    print(f"weights {nbytes / 1e6:.1f} MB; engines as the runners name them: "
          + ", ".join(r.engine for r in runners.values()))
    end, rounds = time.time() + args.seconds, []
    while time.time() < end:
        bw = probe.read_gbs()
        bound = nbytes / bw / 1e6
        ms = {e: timed(lambda: step(r), reps=10) for e, r in runners.items()}
        rounds.append((bw, {e: m / bound for e, m in ms.items()}))
        print(f"probe {bw:5.1f} GB/s  bound {bound:5.2f} ms  "
              + "  ".join(f"{e} {m:5.2f} ms ({m / bound:.2f}x)" for e, m in ms.items()), flush=True)
    # the VM's two memory phases apart: below / above 45 GB/s
    for name, keep in (("slow phase (< 45 GB/s)", lambda bw: bw < 45), ("fast phase", lambda bw: bw >= 45)):
        sel = [x for bw, x in rounds if keep(bw)]
        if sel:
            print(f"{name}, {len(sel)} rounds, forward / bound, median [min, max]: " + "; ".join(
                f"{e} {statistics.median(v):.2f}x [{min(v):.2f}, {max(v):.2f}]"
                for e in ENGINES for v in [[x[e] for x in sel]]))


if __name__ == "__main__":
    main()
