"""Differential check of our EAGLE-3 head against the format's reference model code, in fp32.

    python tools/eagle3_diff.py --reference /path/to/EAGLE/eagle/model/cnets.py [--head models/eagle3/v8k/head]

The reference is SafeAILab/EAGLE's inference head (``eagle/model/cnets.py``, class ``Model``: ``fc``, ``midlayer``,
``norm``, ``lm_head``, ``d2t``), loaded from the given path with its folder on ``sys.path`` (its own ``configs``,
``choices``, ``utils_c`` and ``utils`` beside it): it is never copied into this repository nor installed as a
dependency. Both models get the same weights (ours renamed ``layers.0.`` -> ``midlayer.``; the reference's embedding
is the target's), the same target features and the same tokens, and compute:

1. the committed pairs (the target's features of token t, token t + 1) causally, as after prefill;
2. one drafted token below the last, on the head's own output (a deeper tree level), with the cache of step 1;

and our draft runner (``core.drafts.heads.eagle3_runner``) computes both through the drafter's calls. The tool prints
the largest absolute difference of the logits at each step and whether the draft vocabulary maps to the same target ids,
and exits 1 when a difference exceeds ``--tol``. Without ``--head`` it checks a random head on a tiny random Llama
target; with ``--head``, that folder on SmolLM2 (the cpu profile's target, fp32).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dynatree_lib.core.drafts.heads.eagle3 import load_head  # noqa: E402
from dynatree_lib.core.drafts.heads.eagle3_runner import Eagle3Runner  # noqa: E402


def load_reference(path: Path) -> types.ModuleType:
    """The reference module from ``path`` (its folder importable for its own sibling modules)."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: give the path of SafeAILab/EAGLE's eagle/model/cnets.py")
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("eagle3_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_config(head) -> types.SimpleNamespace:
    """What the reference ``Model`` reads of its config, from our head's."""
    c = head.cfg
    return types.SimpleNamespace(
        pad_token_id=None, vocab_size=c.target_vocab, hidden_size=c.hidden, draft_vocab_size=c.draft_vocab,
        num_attention_heads=c.heads, head_dim=c.head_dim, num_key_value_heads=c.kv_heads,
        max_position_embeddings=c.max_positions, rope_scaling=None, rope_theta=c.rope_theta, pretraining_tp=1,
        intermediate_size=c.intermediate, hidden_act="silu", rms_norm_eps=c.rms_eps, target_hidden_size=c.target_hidden)


def reference_model(module, head):
    """The reference head with our head's weights and the target's embedding."""
    ref = module.Model(reference_config(head))
    ours = {k.replace("layers.0.", "midlayer."): v for k, v in head.state_dict().items()}
    ours["embed_tokens.weight"] = head.embed_tokens.detach().float()
    missing, unexpected = ref.load_state_dict(ours, strict=False)
    if missing or unexpected:
        raise ValueError(f"the reference's tensors and ours differ: missing {missing}, unexpected {unexpected}")
    return ref.float().eval()


def tiny_pair(seed: int):
    """A random tiny Llama target and a random head over 80 of its 96 tokens."""
    from dynatree_lib.harness.setup.tiny import tiny_eagle3, tiny_llama

    target = tiny_llama(seed=seed, vocab_size=96, hidden_size=64, layers=4, heads=4, kv_heads=2, max_positions=256)
    return target, tiny_eagle3(target, draft_vocab=80, seed=seed, init_range=0.1)


def smollm2_pair(folder: Path):
    from dynatree_lib.harness.setup.models import load_model

    target, _ = load_model("embedded:target", dtype="float32")
    return target, load_head(folder, target.get_input_embeddings().weight, torch.float32)


@torch.no_grad()
def compare(ref, head, target, n: int, seed: int) -> dict:
    """Max abs logit differences: reference vs our head, and our runner vs our head, at both steps."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, head.cfg.target_vocab, (n,), generator=g)
    out = target(input_ids=ids[None], output_hidden_states=True)
    feats = torch.cat([out.hidden_states[i] for i in head.cfg.aux_layers], -1)[:, :-1]  # tokens 0..n-2
    pos = torch.arange(n - 1)
    ours, past = head(ids[1:], feats[0], pos)
    theirs, ref_past = ref(feats, input_ids=ids[None, 1:], position_ids=pos[None], use_cache=True)
    child = head.vocab()[int(head.logits(ours[-1]).argmax())]  # the head's own first draft, as a target id
    ours2, _ = head(child[None], ours[-1:], torch.tensor([n - 1]), past=past)
    theirs2, _ = ref(theirs[:, -1:], input_ids=child[None, None], past_key_values=ref_past,
                     position_ids=torch.tensor([[n - 1]]), use_cache=True)
    runner = Eagle3Runner(head)
    runner.observe_target(feats[0], 0)
    run1 = runner.forward(ids, torch.arange(n), last_only=True)
    run2 = runner.forward(child[None], torch.tensor([n]), tree_start=n)
    logits = lambda m, h: m.lm_head(m.norm(h))
    return {"reference_vs_ours_committed": (logits(ref, theirs)[0] - head.logits(ours)).abs().max().item(),
            "reference_vs_ours_drafted": (logits(ref, theirs2)[0] - head.logits(ours2)).abs().max().item(),
            "runner_vs_ours_committed": (run1[0] - head.logits(ours[-1])).abs().max().item(),
            "runner_vs_ours_drafted": (run2[0] - head.logits(ours2[0])).abs().max().item(),
            "same_target_ids": bool(torch.equal(head.vocab(), torch.arange(head.cfg.draft_vocab) + ref.d2t))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", type=Path, required=True, help="SafeAILab/EAGLE's eagle/model/cnets.py")
    ap.add_argument("--head", type=Path, default=None, help="a head folder (default: a tiny random head)")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args(argv)
    torch.manual_seed(a.seed)
    module = load_reference(a.reference)
    target, head = smollm2_pair(a.head) if a.head else tiny_pair(a.seed)
    head = head.float().eval()
    diffs = compare(reference_model(module, head), head, target.float().eval(), a.tokens, a.seed)
    for k, v in diffs.items():
        print(f"{k}: {v:.3e}" if isinstance(v, float) else f"{k}: {v}")
    worst = max(v for v in diffs.values() if isinstance(v, float))
    ok = worst <= a.tol and diffs["same_target_ids"]
    print(f"max abs diff {worst:.3e} ({'within' if ok else 'ABOVE'} {a.tol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
