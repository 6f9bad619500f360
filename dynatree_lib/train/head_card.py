"""The committed EAGLE-3 head's model card (``weights/smollm2-eagle3/README.md``), written from its ``config.json``
(the training log the export carries), the pair reports: the head's (``results/cpu/pair_eagle3.json``) beside
v4's (``results/cpu/pair.json``), on the same dev prompts and the same target outputs, and the check of its context
lookup (``results/cpu/head_lookup.json``). ``./run_all.sh`` runs it
after the cpu notebooks, so the card quotes the committed JSON and nothing else."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

from ..harness.setup.paths import HEAD_DIR, REPO
from ..harness.setup.weights import sha256_file
from ..harness.setup.workloads import POOLED, WORKLOADS

PAIRS = REPO / "results" / "cpu"
QUESTIONS = next(n for n, w in WORKLOADS.items() if w.per_category)  # the instruction workload (Spec-Bench)
# issue 56's targets for the head's first drafted token (network alone), on the dev prompts
TARGETS = ((f"agreement on {WORKLOADS[QUESTIONS].label} answers", QUESTIONS, "agreement", ">=", 0.75),
           ("agreement on continuations", POOLED, "agreement", ">=", 0.80),
           ("overlap on the target's T = 1 samples (all)", "all", "overlap", ">=", 0.55),
           ("ECE (all)", "all", "ece", "<=", 0.05))


def training_section(cfg: dict) -> str:
    ours = cfg["dynatree_lib"]
    t = ours["training"]
    s, gpu = t["spec"], t.get("gpu")
    steps, seconds = (gpu["cpu_steps"], gpu["cpu_seconds"]) if gpu else (t["steps"], t["seconds"])
    last = t["last"]
    agree = " / ".join(f"{sum(r[f'agree{i}'] for r in last) / len(last):.3f}" for i in range(s["ttt_steps"]))
    return f"""## Training
{steps} steps of the schedule's {s['steps']} ({seconds / 60:.0f} min on 2 CPU cores), each on
{s['seqs_per_step']} windows of at most {s['seq_len']} tokens of the target's own text (v4's teacher text, v3's
shard texts and the sampled answers; held-out shards excluded): at most {steps * s['seqs_per_step'] * s['seq_len']:,}
tokens. Initialisation `{s['init']}`; training-time test over {s['ttt_steps']} unrolled steps (weights
{s['step_decay']} ** i); soft targets from the target's distribution over the {s['draft_vocab']}-token draft
vocabulary; AdamW, lr {s['lr']}, warm-up {s['warmup']}, cosine decay. Agreement on the last {len(last)} training
batches, per unrolled step: {agree}. Rebuild or resume: `{t['rebuild']}` (checkpoints under `models/eagle3/`;
where they are missing it resumes from the newest weights and log committed in `checkpoints/eagle3/`).
{gpu_section(gpu)}{weights_section(ours.get("weights"))}{calibration_section(ours.get("calibration"))}"""


def weights_section(form: str | None) -> str:
    """The form of the matmul weights, where the export put them on int8 rows (``core.engines.int8_rows``)."""
    if form is None:
        return ""
    return "\n" + textwrap.fill(
        f"Its matmul weights are on {form} (each row int8 values times a power of two, `core.engines.int8_rows`): the fused "
        "engine holds them as those int8 values, half the bytes of bf16, and computes from them bit for bit what it "
        "computes from the bf16 weights in `model.safetensors`.", 118) + "\n"


def gpu_section(gpu: dict | None) -> str:
    """What ``tools/gpu_eagle3.py`` added, where it continued the head on a GPU (the training batches above are
    then the GPU's)."""
    if gpu is None:
        return ""
    s, held, n = gpu["spec"], gpu["heldout_agreement"], gpu["gpu_steps"]
    return "\n" + textwrap.fill(
        f"Then {n} step{'' if n == 1 else 's'} on {gpu['device']} (`tools/gpu_eagle3.py`, {gpu['seconds']:.0f} s in all): "
        f"{gpu['train_sequences']['sampled']:,} answers ({gpu['sampled_tokens']:,} tokens) sampled there at T = 1 "
        f"from the instructions that are not held out, drawn with the committed text, {s['seqs_per_step']} windows "
        f"a step, lr {gpu['args']['lr']} (warm-up, cosine); first-token agreement on {held['after']['rows']:,} "
        f"held-out rows {held['before']['all']:.4f} before, {held['after']['all']:.4f} after.", 118) + "\n"


def calibration_section(fit: dict | None) -> str:
    if fit is None:
        return "\nNot calibrated: its probabilities are the network's own.\n"
    kinds = ", ".join(f"{k} {v['positions']:,}" for k, v in fit["heldout_by_kind"].items())
    return f"""
## Calibration
One temperature, T = {fit['temperature']}, divides the network's logits (baked into the final norm's weight, so the
folder stays a plain Eagle3 head; the context lookup's weights are v4's: see below), fitted as v4's is: the
lowest expected calibration error of the first drafted token's top-1 probability as a predictor of agreement with
the target's greedy token, on {fit['heldout_positions']:,} positions
of the held-out teacher shards ({kinds}; never a dev or test prompt): ECE {fit['ece_by_temperature']['1.0']:.3f}
at T = 1, {fit['ece_by_temperature'][str(fit['temperature'])]:.3f} at T = {fit['temperature']}.
"""


def lookup_section(folder: Path) -> str:
    """The context lookup the folder carries, and what weights fitted to this head's own probabilities would score
    (the ``head_lookup`` experiment), where that report measured these weights and this lookup."""
    path = PAIRS / "head_lookup.json"
    rep = json.loads(path.read_text()) if path.exists() else None
    if rep is None or (rep["weights"]["sha256"], rep["weights"]["lookup_sha256"]) != \
            (sha256_file(folder / "model.safetensors"), sha256_file(folder / "lookup.json")):
        return ("\n## Context lookup\n`lookup.json` is v4's (fitted to v4's probabilities); not checked against these "
                "weights.\n")
    halves = sorted(rep["scores"])
    cell = lambda row, m: " / ".join(f"{rep['scores'][h][row][m]:.4f}" for h in halves)  # noqa: E731
    table = "\n".join(f"| {row} | {cell(row, 'agreement')} | {cell(row, 'log_likelihood')} |"
                      for row in rep["scores"][halves[0]])
    data = textwrap.fill(f"on {rep['data']}, each half scored with the weights fitted on the other:", 118)
    return f"""
## Context lookup
`lookup.json` is v4's: its weights were fitted to v4's probabilities. Fitted again to this head's probabilities
(the `head_lookup` experiment, `results/cpu/head_lookup.json`)
{data}

| first drafted token | agreement with the target's greedy token (A / B) | log-likelihood of the target's token (A / B) |
|---|---|---|
{table}
"""


def evaluation_section(head: dict, v4: dict) -> str:
    def cell(report: dict, key: str, row: str, metric: str) -> str:
        v = report.get(key, {}).get(row)
        return f"{v[metric]:.3f}" if v and metric in v else "–"

    texts = [k for k in head["agreement_no_lookup"] if not k.endswith("_human")]  # the report's own rows, in order
    rows = "\n".join(
        f"| {row} | {cell(head, 'agreement_no_lookup', row, 'agreement')} | {cell(head, 'agreement', row, 'agreement')} | "
        f"{cell(v4, 'agreement_no_lookup', row, 'agreement')} | {cell(v4, 'agreement', row, 'agreement')} | "
        f"{cell(head, 'agreement_no_lookup', row, 'ece')} | {cell(head['sampled'], 'agreement_no_lookup', row, 'overlap')} | "
        f"{cell(v4['sampled'], 'agreement_no_lookup', row, 'overlap')} |" for row in texts)
    return f"""## Held-out evaluation, beside v4
The `cpu` profile's dev prompts (no training text, no test prompt), teacher-forced on SmolLM2's greedy output
(`results/cpu/pair_eagle3.json`; v4's: `results/cpu/pair.json`; definitions as in v4's card): agreement of the first
drafted token with the target's greedy token, for the network alone and with the context lookup (v4's
`lookup.json`); the head's ECE; Σ min(p, q) on the target's output sampled at T = 1 (network alone).

| text | head alone | head + lookup | v4 alone | v4 + lookup | head ECE | head overlap, T = 1 | v4 overlap, T = 1 |
|---|---|---|---|---|---|---|---|
{rows}
"""


def targets_section(head: dict) -> str:
    def value(row: str, metric: str) -> float:
        src = head["sampled"] if metric == "overlap" else head
        return src["agreement_no_lookup"][row][metric]

    lines = [f"| {what} | {op} {bar} | {value(row, m):.3f} | {'met' if (value(row, m) >= bar if op == '>=' else value(row, m) <= bar) else 'missed'} |"
             for what, row, m, op, bar in TARGETS]
    return """## Issue 56's targets (first drafted token, network alone)
| target | bar | measured | |
|---|---|---|---|
""" + "\n".join(lines) + "\n"


def measured_on(report: dict, folder: Path) -> bool:
    """Whether a pair report measured the head of ``folder`` (the sha256 of its weights)."""
    return report["models"]["draft"]["weights"]["sha256"] == sha256_file(folder / "model.safetensors")


def pending_section(folder: Path) -> str:
    return f"""## Held-out evaluation
Not measured for these weights yet: `results/cpu/pair_eagle3.json` measured other weights than
`{folder.name}/model.safetensors`. `python -m dynatree_lib bench --experiment head_records` measures it and every other record of the head.
"""


def card(folder: Path = HEAD_DIR) -> str:
    """The card of the head in ``folder`` from its ``config.json`` and the two pair reports (the head's quoted only
    where it measured these weights)."""
    cfg = json.loads((folder / "config.json").read_text())
    pair = PAIRS / "pair_eagle3.json"
    head = json.loads(pair.read_text()) if pair.exists() else None
    if head is not None and measured_on(head, folder):
        v4 = json.loads((PAIRS / "pair.json").read_text())
        evaluation = f"{evaluation_section(head, v4)}\n{targets_section(head)}"
    else:
        evaluation = pending_section(folder)
    base = cfg["speculators_config"]["verifier"]["name_or_path"]
    return f"""---
license: apache-2.0
base_model: {base}
tags: [speculative-decoding, eagle3, speculators]
---
# EAGLE-3 head for {base}

One Llama decoder layer over the target's hidden states entering layers
{', '.join(map(str, cfg['eagle_aux_hidden_state_layer_ids']))} (fused by `fc`) and its token embedding (borrowed, not
stored), a norm and a {cfg['draft_vocab_size']}-token head with `d2t`/`t2d` maps, in the speculators format that
vLLM serves (`config.json`, `model.safetensors`). In this library: the draft reference `eagle3:weights/smollm2-eagle3`
(`dynatree_lib/core/drafts/heads/eagle3.py`); every tree method drafts with it and stays exact.

{training_section(cfg)}{lookup_section(folder)}
{evaluation}"""


def refresh(folder: Path = HEAD_DIR) -> Path | None:
    """The card again from the committed JSON; None where the head is not committed."""
    if not (folder / "config.json").exists():
        return None
    out = folder / "README.md"
    out.write_text(card(folder))
    return out


if __name__ == "__main__":
    print(refresh())
