"""Smoke runs of every llama.cpp mode (uncontrolled timings: they check that everything runs, nothing more), and
the logs that ``tests/harness/test_llamacpp_run.py`` parses, recorded again with ``--record tests/data/llamacpp``.

    python tools/llamacpp_run.py [--n-new 32] [--record tests/data/llamacpp] [--only NAME ...] [--json FILE]
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dynatree_lib.harness.peers.eagle3_gguf import mode_draft  # noqa: E402
from dynatree_lib.harness.peers.llamacpp_server import LlamaServer, binary, find_llamacpp, how_to_get, root_of, target_gguf  # noqa: E402
from dynatree_lib.harness.peers.llamacpp_cli import prompt_text, run, tokenize_command  # noqa: E402

SMOKE = (  # (name, mode, options, prompt): one run of each mode; "chat" runs stop at EOS
    ("ar-bf16", "ar", {"target": "bf16"}, "text"),
    ("ar-q4_1", "ar", {"target": "q4_1"}, "text"),
    ("draft-chain-3", "draft-chain", {"n_draft": 3}, "text"),
    ("draft-chain-8", "draft-chain", {"n_draft": 8}, "text"),
    ("draft-eagle3-3", "draft-eagle3", {"n_draft": 3}, "text"),
    ("draft-tree-8x4", "draft-tree", {"n_draft": 8, "branches": 4, "p_split": 0.1}, "text"),
    ("ngram-simple", "ngram-simple", {"n_draft": 8, "ngram_n": 4}, "text"),
    ("ngram-map-k", "ngram-map-k", {"n_draft": 8, "ngram_n": 4}, "text"),
    ("ngram-map-k4v", "ngram-map-k4v", {"n_draft": 8, "ngram_n": 4}, "text"),
    ("ngram-mod", "ngram-mod", {"n_draft": 8, "ngram_n": 4}, "text"),
    ("ngram-cache", "ngram-cache", {}, "text"),
    ("lookup-8", "lookup", {"n_draft": 8}, "text"),
    ("lookahead", "lookahead", {}, "text"),
    ("chat-ar-eos", "ar", {"ignore_eos": False}, "chat"),
    ("chat-draft-chain-3-eos", "draft-chain", {"n_draft": 3, "ignore_eos": False}, "chat"),
)
SERVER_SMOKE = (  # the same through llama-server, prompts as token ids
    ("server-ar-bf16", "ar", {}),
    ("server-draft-chain-3", "draft-chain", {"n_draft": 3}),
    ("server-draft-eagle3-3", "draft-eagle3", {"n_draft": 3}),
    ("server-ngram-simple", "ngram-simple", {"n_draft": 8, "ngram_n": 4}),
)


def smoke_prompts(L_max: int = 64) -> dict:
    """One WikiText-2 dev prompt of ``L_max`` tokens and one chat prompt, as (text, our ids)."""
    from transformers import AutoTokenizer

    from dynatree_lib.harness.setup.data import chat_prompt
    from dynatree_lib.harness.setup.prompts import load_prompts
    from dynatree_lib.harness.setup.weights import smollm2_folder

    tok = AutoTokenizer.from_pretrained(smollm2_folder())
    p = load_prompts("wikitext2", tok, n=1, L_max=L_max, split="dev")[0]
    chat = chat_prompt(tok, "Name three primary colors.")
    return {"text": (prompt_text(p.ids.tolist(), tok), p.ids.tolist(), p.id),
            "chat": (prompt_text(chat, tok), chat, "chat:Name three primary colors.")}


def smoke(n_new: int = 32, record: Path | str | None = None, only: tuple = (), draft: str | None = None) -> list[dict]:
    """Run ``SMOKE`` (or the names in ``only``) on one short prompt each and print a line per run (a background load
    makes these timings uncontrolled: they check that everything runs, nothing more). ``record``: save every run's
    logs there as test fixtures (with llama-tokenize's output for the prompts)."""
    prompts = smoke_prompts()
    bin_dir = find_llamacpp()
    binary("llama-completion", bin_dir)
    rows, ar_text = [], {}
    if record:
        for key, (text, ids, _) in prompts.items():
            r = subprocess.run(tokenize_command(bin_dir, target_gguf("q4_1")), input=text.encode(), capture_output=True)
            (Path(record) / f"tokenize-{key}.stdout").parent.mkdir(parents=True, exist_ok=True)
            (Path(record) / f"tokenize-{key}.stdout").write_bytes(r.stdout)
    for name, mode, opts, which in SMOKE:
        if only and name not in only:
            continue
        text, ids, pid = prompts[which]
        row = run(mode, text, n_new, draft=draft, expect_ids=ids, save_logs=record, log_name=name, bin_dir=bin_dir,
                  **opts)
        if record:  # the fixture's command line without this machine's paths
            f = Path(record) / f"{name}.json"
            meta = json.loads(f.read_text())
            meta["argv"] = [a.replace(str(root_of(bin_dir)), "$LLAMACPP").replace(str(target_gguf("q4_1")), "$Q4_1")
                            for a in meta["argv"]]
            meta.update({"name": name, "prompt_id": pid, "note": "uncontrolled timing (background load)"})
            f.write_text(json.dumps(meta, indent=1))
        row["name"], row["prompt_id"] = name, pid
        ref = ar_text.setdefault(which, row["text"]) if mode == "ar" and opts.get("target", "bf16") == "bf16" else \
            ar_text.get(which)
        n = min(len(ref or ""), len(row["text"]))
        row["same_text_as_ar"] = None if ref is None else row["text"][:n] == ref[:n]
        rows.append(row)
        _print(row)
    for name, mode, opts in SERVER_SMOKE:
        if only and name not in only:
            continue
        text, ids, pid = prompts["text"]
        with LlamaServer(mode, draft=mode_draft(mode, draft, bin_dir), bin_dir=bin_dir, **opts) as srv:
            row = srv.complete(ids, n_new, keep_response=bool(record))
        row["name"], row["prompt_id"], row["tokens_match"] = name, pid, True
        ref = ar_text.get("text")
        n = min(len(ref or ""), len(row["text"]))
        row["same_text_as_ar"] = None if ref is None else row["text"][:n] == ref[:n]
        if record:
            resp = row.pop("response")
            resp.pop("generation_settings", None)
            (Path(record) / f"{name}.response.json").write_text(json.dumps(resp, indent=1))
        rows.append(row)
        _print(row)
    return rows


def _print(row: dict):
    print(f"{row['name']:24s} tokens={row['tokens']:3d} prefill={row['prefill_s']:.3f}s decode={row['decode_s']:.3f}s "
          f"tps={row['tps']:6.2f} drafted={row.get('n_drafted')} accepted={row.get('n_accepted')} "
          f"L_bar={row.get('L_bar') or float('nan'):.2f} tokens_match={row.get('tokens_match')} "
          f"same_text_as_ar={row['same_text_as_ar']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python tools/llamacpp_run.py",
                                 description="Smoke runs of every llama.cpp mode (uncontrolled timings).")
    ap.add_argument("--n-new", type=int, default=32)
    ap.add_argument("--record", help="save the logs as test fixtures in this folder (tests/data/llamacpp)")
    ap.add_argument("--only", nargs="*", default=(), help=f"names among {[s[0] for s in SMOKE + SERVER_SMOKE]}")
    ap.add_argument("--draft", help="draft folder or GGUF (default: weights/smollm2-draft)")
    ap.add_argument("--json", help="write the rows to this file")
    a = ap.parse_args(argv)
    if find_llamacpp() is None:
        print(how_to_get())
        return 1
    rows = smoke(a.n_new, a.record, tuple(a.only), a.draft)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
