"""One temperature for the draft, fitted so that its top-1 probability predicts agreement with the target."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..harness.experiments.pair import calibration_bins
from .teacher import BUILD, TEACHER
from .train import DraftSpec, Head, examples, forward_rows, shard_files, trained_draft

TEMPERATURES = tuple(round(0.5 + 0.05 * i, 2) for i in range(31))  # 0.5 .. 2.0


@torch.no_grad()
def fit_temperature(model, shards: list[dict], spec: DraftSpec, head: Head, temps=TEMPERATURES) -> tuple[float, dict]:
    """The temperature whose top-1 probabilities over ``head`` (the head drafting uses) best predict agreement
    with the target's greedy token (``fit_on_rows``) on the loss rows of held-out shards (continuations and
    answers, pooled)."""
    def rows():
        for shard in shards:
            ex = examples(shard, spec)
            for b in range(0, len(ex), 8):
                batch = ex[b:b + 8]
                logits = forward_rows(model, batch, head).float()
                agree = head.token(logits.argmax(-1)) == torch.cat([e.top_ids[:, 0] for e in batch])
                yield logits, agree, shard.get("kind", "continuation")

    return fit_on_rows(rows(), temps)


def fit_on_rows(rows, temps=TEMPERATURES) -> tuple[float, dict]:
    """The temperature of ``temps`` with the lowest expected calibration error (10 bins) of the top-1
    probabilities of ``rows`` ((logits [n, V], agreement with the target's greedy token [n], kind of text)) as
    predictors of agreement; the ECE at every temperature, and the agreement and ECE at the chosen one per kind."""
    confs = {t: [] for t in temps}
    correct, kinds = [], []
    for logits, agree, kind in rows:
        correct.append(agree)
        kinds += [kind] * logits.shape[0]
        top = logits.max(-1).values
        for t in temps:
            confs[t].append((top / t - torch.logsumexp(logits / t, -1)).exp())
    if not correct:
        raise ValueError("no rows to fit a temperature on")
    correct = torch.cat(correct)
    ece = {t: calibration_bins(torch.cat(confs[t]), correct)[1] for t in temps}
    best = min(ece, key=ece.get)
    conf, by_kind = torch.cat(confs[best]), {}
    for kind in sorted(set(kinds)):
        sel = torch.tensor([k == kind for k in kinds])
        by_kind[kind] = {"positions": int(sel.sum()), "agreement": float(correct[sel].float().mean()),
                         "ece": calibration_bins(conf[sel], correct[sel])[1]}
    return best, {"ece_by_temperature": {str(t): round(e, 4) for t, e in ece.items()},
                  "heldout_positions": int(correct.numel()), "heldout_agreement": float(correct.float().mean()),
                  "heldout_by_kind": by_kind}


def calibrate(final: Path = BUILD / "train" / "final.pt", teacher: Path = TEACHER, out: Path = BUILD / "calibrated") -> Path:
    """Fit the temperature on the held-out shards and bake it into the final norm's weight (the logits are
    tied-embedding @ (norm weight * normalised h), so scaling the weight by 1/T divides the logits by T): the
    result is a plain Llama again."""
    if (out / "model.safetensors").exists():
        return out
    model, st = trained_draft(final)
    spec = DraftSpec(**st["spec"])
    torch.set_num_threads(spec.threads)
    held = [torch.load(f) for f in shard_files(teacher, spec, heldout=True)]
    if not held:
        raise FileNotFoundError(f"no held-out teacher shards in {teacher} (every {spec.heldout_every}th shard)")
    temp, fit = fit_temperature(model, held, spec, Head.of(spec, model.config.vocab_size, teacher.parent / "token_counts.json"))
    with torch.no_grad():
        model.model.norm.weight.div_(temp)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    (out / "calibration.json").write_text(json.dumps({"temperature": temp, **fit}, indent=1))
    return out
