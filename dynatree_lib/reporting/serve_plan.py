"""``python -m dynatree_lib serve-plan``: the vLLM configuration that serves our EAGLE-3 head on this machine, with
the draft length per batch size that the batch cost model predicts (``harness.peers.vllm_serving``) from this
machine kind's committed calibration (``results/<profile>[@<kind>]/vllm_throughput.json``)."""
from __future__ import annotations

import json
from pathlib import Path

from ..harness.peers.vllm import HEAD_DIR, VERSION, speculative_config
from ..harness.peers.vllm_serving import (K_MAX, LOADS, MAX_NUM_SEQS, k_by_batch, plan_schedule, schedule_config,
                                          serve_command)
from ..harness.setup.machine import here, kind_of_record
from ..harness.setup.paths import RESULTS


def find_record(kind: str, profile: str = "cpu") -> Path:
    """This machine kind's calibrated ``vllm_throughput.json``, or a ``FileNotFoundError`` saying how to measure one."""
    for path in sorted(RESULTS.glob(f"{profile}*/vllm_throughput.json")):
        doc = json.loads(path.read_text())
        if "calibration" in doc and kind_of_record(doc["environment"]) == kind:
            return path
    raise FileNotFoundError(f"no calibrated vLLM record for this machine kind ({kind}) under {RESULTS}/{profile}*/: "
                            "measure one with `python -m dynatree_lib bench --experiment vllm_throughput` (it needs "
                            "`bash tools/setup_vllm.sh`), or name a record with --record")


def load_costs(path: Path):
    from ..harness.experiments.vllm_throughput import costs_of

    try:
        doc = json.loads(Path(path).read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not a JSON record ({e})") from None
    if "calibration" not in doc:
        raise ValueError(f"{path}: no calibration in this record (measured before the schedule); measure it again "
                         "with `python -m dynatree_lib bench --experiment vllm_throughput --rerun`")
    return doc, costs_of(doc["calibration"])


def serve_plan(record: Path | None = None, max_num_seqs: int = MAX_NUM_SEQS, model: str | None = None, *,
               profile: str = "cpu") -> dict:
    """The plan: the record it rests on, the predicted tokens/s per load and k, the schedule and vLLM's config."""
    from ..harness.setup.weights import smollm2_folder

    path = Path(record) if record else find_record(here(), profile)
    if not path.is_file():
        raise FileNotFoundError(f"--record {path}: no such file")
    doc, costs = load_costs(path)
    schedule = plan_schedule(costs, max_num_seqs)
    cfg = schedule_config(schedule)
    model = model or str(smollm2_folder())
    return {"record": str(path), "machine": kind_of_record(doc["environment"]), "commit": doc["environment"]["git_commit"],
            "vllm_version": VERSION, "max_num_seqs": max_num_seqs, "accepted_at": list(costs.accepted_at),
            "margin": costs.margin,
            "predicted_tps": {b: [costs.throughput(b, k) for k in range(K_MAX + 1)] for b in LOADS if b <= max_num_seqs},
            "schedule": [list(e) for e in schedule], "measured": measured(doc),
            "speculative_config": None if cfg is None else speculative_config(cfg, HEAD_DIR),
            "plugins": [] if cfg is None else list(cfg.plugins()),
            "command": serve_command(schedule, model, max_num_seqs=max_num_seqs)}


def measured(doc: dict) -> dict:
    """The record's own rounds, per load: the measured schedule's and the best fixed mode's median tokens/s over
    vLLM AR's (``serving.schedule_ratios``; empty where the record measured no schedule)."""
    import pandas as pd

    from .serving import schedule_ratios

    return {int(c): {"schedule_over_ar": r["over_ar"], "best_fixed_over_ar": r["best_over_ar"]}
            for c, r in schedule_ratios(doc, pd.DataFrame(doc["rows"])).items()}


def format_serve_plan(plan: dict) -> str:
    head = "  ".join(f"k={k:<6}" for k in range(K_MAX + 1))
    lines = [f"vLLM {plan['vllm_version']} serving plan for {plan['machine']} (calibration: {plan['record']}, commit "
             f"{plan['commit'][:10]}); our EAGLE-3 head accepts a_1..a_{K_MAX} = "
             + " / ".join(f"{a:.2f}" for a in plan["accepted_at"]),
             "", "predicted aggregate tokens/s (k = 0: no speculation; *: the schedule's k)", f"  batch  {head}"]
    scheduled = k_by_batch(plan["schedule"])
    for b, tps in plan["predicted_tps"].items():
        lines.append(f"  {b:>5}  " + "  ".join(f"{t:6.1f}{'*' if k == scheduled[b] else ' '}"
                                             for k, t in enumerate(tps)))
    lines += ["", f"schedule, (first batch size, last, k): {json.dumps(plan['schedule'])} (at each batch size the "
                  f"best k >= 1 where it is predicted to beat k = 0 by more than {plan['margin']:.1%}, the standard "
                  "error of the calibration's means; else k = 0)", "",
              "speculative_config (LLM(..., speculative_config=...) or --speculative-config):",
              json.dumps(plan["speculative_config"]) if plan["speculative_config"] else
              "none: speculation pays at no batch size here; serve without it", "", "serve it:", plan["command"]]
    if plan["measured"]:
        lines += ["", "measured in this record's rounds, over vLLM AR (median): the schedule / the best of AR and "
                      "fixed k"]
        lines += [f"  batch {c:>3}: {m['schedule_over_ar']:.2f}x / {m['best_fixed_over_ar']:.2f}x"
                  for c, m in plan["measured"].items()]
    if plan["plugins"]:
        lines.append("(the variables before `vllm serve` load our plugin, tools/vllm_plugin: at k = 0 vLLM would still "
                     "run the head over every prefill and decoded token to keep its cache in sync; the plugin skips "
                     "that pass)")
    if plan["max_num_seqs"] > max(LOADS):
        lines.append(f"(batch sizes above {max(LOADS)} are extrapolated from the calibration's curves)")
    return "\n".join(lines)
