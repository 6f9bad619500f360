"""Timing and memory ratios that tests used to assert, measured and printed here instead (a loaded machine makes
any ratio fail at times; tests stay deterministic). Nothing is asserted: read the numbers against the targets.

    python tools/ratio_report.py              # all three, about a minute on an idle machine
    python tools/ratio_report.py budget draft # some of them

- ``budget``: an unused node budget costs nothing. Three short generations with n_max=16384 against n_max=256
  (target: about 1x; a budget that allocated for itself took 20x).
- ``draft``: the cpu profile's draft against its target, one-token forward on the profile's engine (target:
  at most 1/8, the requirement ``tests/train/test_draft.py`` checks on the committed measurement).
- ``memory``: each memory cell runs in a fresh process, so two methods measured in both orders give the same
  peaks (target: within 1%).
"""
from __future__ import annotations

import argparse
import time

import torch

def budget() -> None:
    from dynatree_lib import FixedTreeConfig, generate
    from dynatree_lib.harness.setup.tiny import perturb, tiny_gpt_neox

    target = tiny_gpt_neox(seed=0, vocab_size=96, hidden_size=64, layers=3, max_positions=160)
    draft = perturb(tiny_gpt_neox(seed=0, vocab_size=96, hidden_size=64, layers=3, max_positions=160), 0.03, 123)
    p = torch.tensor([1, 2, 3])

    def seconds(n_max: int) -> float:
        t0 = time.perf_counter()
        for _ in range(3):
            generate(target, p, 20, draft=draft, method=FixedTreeConfig(D=2, B=2, tau=0.0, n_max=n_max))
        return time.perf_counter() - t0

    seconds(256)  # warm
    small, large = seconds(256), seconds(16384)
    print(f"budget: n_max=256 {small:.3f} s, n_max=16384 {large:.3f} s, ratio {large / small:.2f} (target about 1)")


def draft() -> None:
    from dynatree_lib.harness.experiments.costs import one_token_ratio
    from dynatree_lib.harness.setup.models import load_pair
    from dynatree_lib.harness.setup.profiles import get_profile

    prof = get_profile("cpu")
    target, drf, _ = load_pair(prof.models.target, prof.models.draft, dtype=prof.models.dtype,
                               engine=prof.models.engine, max_len=prof.max_len, draft_vocab=prof.models.draft_vocab)
    one = one_token_ratio(target, drf, 200, rounds=3, reps=5)
    print(f"draft: draft/target one-token cost {one['median']:.3f} (median of paired rounds; target <= 0.125)")


def memory() -> None:
    from dynatree_lib import DynaTreeConfig
    from dynatree_lib.harness.measure.cell import Cell
    from dynatree_lib.harness.measure.memory import measure_in_process
    from dynatree_lib.harness.setup.profiles import get_profile

    prof = get_profile("smoke", T=16)
    at = dict(dataset="wikitext2", T=16, L_max=24, dtype="bfloat16", tags={"role": "memory"})
    cells = [Cell(method="ar", config=None, **at),
             Cell(method="dynatree", config=DynaTreeConfig(D_max=6, n_max=32), **at)]
    first = [measure_in_process(prof, c) for c in cells]
    second = [measure_in_process(prof, c) for c in reversed(cells)][::-1]
    for c, a, b in zip(cells, first, second):
        gap = abs(a["peak_mem_mb"] - b["peak_mem_mb"]) / a["peak_mem_mb"]
        print(f"memory: {c.label} peak {a['peak_mem_mb']:.1f} MB measured first, {b['peak_mem_mb']:.1f} MB "
              f"measured second: {100 * gap:.2f}% apart (target <= 1%)")


CHECKS = {"budget": budget, "draft": draft, "memory": memory}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checks", nargs="*", choices=list(CHECKS), default=list(CHECKS))
    args = ap.parse_args()
    torch.set_num_threads(2)  # the profiles' thread count
    for name in args.checks:
        CHECKS[name]()


if __name__ == "__main__":
    main()
