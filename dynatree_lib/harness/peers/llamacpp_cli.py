"""llama.cpp's command-line examples: build their command lines, run them, and parse their logs into rows shaped like
the server's (``harness.peers.llamacpp_server.timed_row``). The peers experiment uses the server client
(``harness.peers.llamacpp_server.LlamaServer``), which takes our token ids exactly; these examples take text. The
``llamacpp_eagle3`` experiment runs them beside the server; ``tools/llamacpp_run.py`` runs every mode once (smoke).

Modes (``MODES``; every one greedy: ``--temp 0 --top-k 1``, 2 threads, a fixed number of new tokens with EOS ignored,
or stopping at EOS with ``ignore_eos=False``):

- ``ar``: plain decoding, ``llama-completion -no-cnv``. Times from llama.cpp's perf counters (``common_perf_print``):
  prefill = prompt eval time, decode = eval time + sampling time.
- ``draft-chain``: a chain of ``n_draft`` tokens from our draft model, verified by the target,
  ``llama-speculative-simple --spec-type draft-simple --spec-draft-n-max N``.
- ``draft-tree``: ``llama-speculative`` with ``-np B`` branches split where the draft's next candidate has probability
  above ``--spec-draft-p-split`` (at most ``n_draft`` tree tokens per verification; ``B=1`` is a chain).
- ``ngram-simple``, ``ngram-map-k``, ``ngram-map-k4v``, ``ngram-mod``, ``ngram-cache``: draft-free self-speculation
  from n-grams of the context (``llama-speculative-simple --spec-type <mode>``; ``ngram-cache`` drafts 8 tokens, a
  constant of the vendored version).
- ``lookup``: prompt-lookup decoding from an n-gram cache of the context (n = 1..4), ``llama-lookup``.
- ``lookahead``: lookahead (Jacobi) decoding, ``llama-lookahead`` (window 15, n-gram 5, 15 verified n-grams:
  constants of the vendored version).

The speculative examples time themselves (``encoded ... in X seconds``, ``decoded ... in Y seconds``, wall clock
around the prompt and the generation loop, model loading excluded): prefill = X, decode = Y. They stop once they
have *more* than ``-n`` tokens, after a whole verification: we pass ``n_new - 1``, so they make at least ``n_new``
and at most ``n_new`` + a draft (``tokens`` says how many; ``tps`` counts them all; the last verification's draft is
not shortened to the budget, not even by ``llama-speculative-simple``, whose budget cap is dropped at 0).

Prompts are given as exact text, passed as one argument (``-p TEXT --no-escape``; ``-f`` would drop a final newline),
and llama.cpp tokenizes them itself (special tokens parsed, no BOS: SmolLM2's GGUF says ``add_bos_token = false``).
When the caller has our token ids, ``run(..., expect_ids=ids)`` first checks with ``llama-tokenize`` that llama.cpp's
ids of the text are the same (``tokens_match`` in the row; ``strict=True`` raises on a mismatch). They are the same
whenever our tokenizer gives our ids back for the decoded text; a continuation prompt cut at ``L_max`` tokens can end
inside a merge (e.g. ``"\\n","\\n"`` where the whole text has ``"\\n\\n"``), and then no text gives llama.cpp our ids:
``LlamaServer`` (``llama-server``, modes ``SERVER_MODES``) takes the prompt as token ids, exactly, returns the new
token ids, stops at exactly ``n_new`` tokens, and times prefill and decode itself (``timings.prompt_ms``,
``predicted_ms``).
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from .eagle3_gguf import mode_draft
from .llamacpp_server import CTX, MODES, THREADS, binary, build_info, draft_file, find_llamacpp, mode_args, run_fields, \
    target_gguf, timed_row, version_string


def common_args(model: Path | str, prompt: str, n_predict: int, threads: int = THREADS, ctx: int = CTX,
                *, ignore_eos: bool = True, seed: int = 0) -> list[str]:
    """The arguments every mode shares: model, the exact prompt text, greedy sampling, threads, context."""
    args = ["-m", str(model), "-p", prompt, "--no-escape", "-n", str(n_predict), "-t", str(threads),
            "-tb", str(threads), "-c", str(ctx), "--temp", "0", "--top-k", "1", "-s", str(seed)]
    return args + (["--ignore-eos"] if ignore_eos else [])


def command(mode: str, bin_dir: Path | str, target: Path | str, prompt: str, n_new: int, *,
            draft: Path | str | None = None, n_draft: int = 3, threads: int = THREADS, ctx: int = CTX,
            ignore_eos: bool = True, branches: int = 4, p_split: float = 0.1, ngram_n: int | None = None,
            verbosity: int | None = 4, extra: tuple = ()) -> list[str]:
    """The full argv of one run (pure: nothing is checked on disk). ``verbosity=4`` (``-lv 4``, trace) makes the
    ``llama-speculative-simple`` modes print their per-position acceptance statistics (after the timed loop; nothing
    is logged inside it at this level). Only ``llama-completion`` prints ``system_info`` (the CPU features ggml
    uses)."""
    m = MODES.get(mode)
    if m is None:
        raise ValueError(f"unknown llama.cpp mode {mode!r}; choose one of {sorted(MODES)}")
    if n_new < 1:
        raise ValueError(f"n_new must be >= 1, got {n_new}")
    n_predict = n_new - 1 if m.self_timed else n_new  # the examples stop once they have more than -n tokens
    argv = [str(Path(bin_dir) / m.binary)] + common_args(target, prompt, n_predict, threads, ctx, ignore_eos=ignore_eos)
    argv += mode_args(mode, n_draft, draft, threads, branches=branches, p_split=p_split, ngram_n=ngram_n)
    if verbosity is not None:
        argv += ["-lv", str(verbosity)]
    return argv + [str(a) for a in extra]


def tokenize_command(bin_dir: Path | str, model: Path | str) -> list[str]:
    """``llama-tokenize`` reading the text from stdin (exact bytes, no escapes), printing ``[id, ...]``."""
    return [str(Path(bin_dir) / "llama-tokenize"), "-m", str(model), "--stdin", "--ids", "--no-escape",
            "--log-disable"]


# ---- parsing ------------------------------------------------------------------------------------------------------

_NUM = r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|nan|inf|-nan|-inf)"
_PERF = {
    "load_ms": re.compile(r"load time =\s*" + _NUM + r" ms"),
    "prompt_eval": re.compile(r"prompt eval time =\s*" + _NUM + r" ms /\s*(\d+) tokens"),
    "eval": re.compile(r"(?<!prompt )eval time =\s*" + _NUM + r" ms /\s*(\d+) runs"),
    "total": re.compile(r"total time =\s*" + _NUM + r" ms /\s*(\d+) tokens"),
    "sampling_ms": re.compile(r"sampling time =\s*" + _NUM + r" ms"),
    "samplers": re.compile(r"samplers time =\s*" + _NUM + r" ms /\s*(\d+) (?:tokens|runs)"),
    "unaccounted_ms": re.compile(r"unaccounted time =\s*" + _NUM + r" ms"),
    "graphs_reused": re.compile(r"graphs reused =\s*(\d+)"),
}


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ [A-Z] ", re.M)


def strip_prefixes(log: str) -> str:
    """The log without the ``0.04.941.996 I `` timestamp-and-level prefix this version puts on every log line."""
    return _PREFIX.sub("", log)


def _f(x: str) -> float:
    return float(x.replace("-nan", "nan"))


def parse_perf(log: str) -> dict:
    """llama.cpp's perf counters (``llama_perf_context_print`` / ``common_perf_print`` lines), per block: a block
    starts at its ``load time`` line and is named by the ``draft:`` / ``target:`` header before it (the speculative
    examples print both models'), else ``target``. Times in ms; counts as printed."""
    blocks, cur, name = {}, None, "target"
    for line in strip_prefixes(log).splitlines():
        s = line.strip()
        if s in ("draft:", "target:"):
            name, cur = s[:-1], None
            continue
        for key, rx in _PERF.items():
            m = rx.search(line)
            if not m:
                continue
            field = {"prompt_eval": "prompt_eval_ms", "eval": "eval_ms", "total": "total_ms",
                     "samplers": "samplers_ms"}.get(key, key)
            if cur is None or field in cur:  # a new print
                cur = blocks[name if name not in blocks else f"{name}{len(blocks)}"] = {}
            if key == "prompt_eval":
                cur["prompt_eval_ms"], cur["prompt_tokens"] = _f(m.group(1)), int(m.group(2))
            elif key == "eval":
                cur["eval_ms"], cur["eval_runs"] = _f(m.group(1)), int(m.group(2))
            elif key == "total":
                cur["total_ms"], cur["total_tokens"] = _f(m.group(1)), int(m.group(2))
            elif key == "samplers":
                cur["samplers_ms"], cur["samplers_n"] = _f(m.group(1)), int(m.group(2))
            elif key == "graphs_reused":
                cur[key] = int(m.group(1))
            else:
                cur[key] = _f(m.group(1))
            break
    return blocks


_SPEC_KV = re.compile(r"^\s*(n_draft|n_predict|n_drafted|n_accept|accept|W|N|G|t_draft_flat|t_draft)\s*=\s*"
                      + _NUM, re.M)
_ENC = re.compile(r"encoded\s+(\d+) tokens in\s+" + _NUM + r" seconds")
_DEC = re.compile(r"decoded\s+(\d+) tokens in\s+" + _NUM + r" seconds")
_STATS = re.compile(r"statistics\s+([\w-]+):\s*#calls\(b,g,a\) =\s*(\d+)\s+(\d+)\s+(\d+), #gen drafts =\s*(\d+), "
                    r"#acc drafts =\s*(\d+), #gen tokens =\s*(\d+), #acc tokens =\s*(\d+)(.*)$", re.M)


def parse_spec(log: str) -> dict:
    """What the speculative examples print at the end: ``encoded``/``decoded`` (tokens, seconds), ``n_draft``,
    ``n_predict``, ``n_drafted``, ``n_accept``, ``accept`` (%), lookup's ``t_draft*`` (ms), lookahead's ``W N G``, and
    the per-implementation ``statistics`` lines of ``common_speculative`` (``-lv 4``): calls, drafts, tokens, mean
    acceptance length and acceptance rate per draft position."""
    out: dict = {}
    log = strip_prefixes(log)
    if m := _ENC.search(log):
        out["encoded_tokens"], out["encoded_s"] = int(m.group(1)), _f(m.group(2))
    if m := _DEC.search(log):
        out["decoded_tokens"], out["decoded_s"] = int(m.group(1)), _f(m.group(2))
    for m in _SPEC_KV.finditer(log):
        k, v = m.group(1), _f(m.group(2))
        out.setdefault(k, v if k in ("accept", "t_draft_flat", "t_draft") else int(v))
    for m in _STATS.finditer(log):
        s = {"calls_begin": int(m.group(2)), "calls_draft": int(m.group(3)), "calls_accept": int(m.group(4)),
             "gen_drafts": int(m.group(5)), "acc_drafts": int(m.group(6)), "gen_tokens": int(m.group(7)),
             "acc_tokens": int(m.group(8))}
        tail = m.group(9)
        if t := re.search(r"#mean acc len =\s*" + _NUM, tail):
            s["mean_acc_len"] = _f(t.group(1))
        if t := re.search(r"#acc rate/pos = \(([^)]*)\)", tail):
            s["acc_rate_per_pos"] = [_f(x) for x in t.group(1).split(",") if x.strip()]
        if t := re.search(r"dur\(b,g,a\) =\s*" + _NUM + r",\s*" + _NUM + r",\s*" + _NUM + " ms", tail):
            s["dur_ms"] = {"begin": _f(t.group(1)), "draft": _f(t.group(2)), "accept": _f(t.group(3))}
        out.setdefault("stats", {})[m.group(1)] = s
    return out


def parse_system_info(log: str) -> str | None:
    m = re.search(r"^system_info: (.*)$", strip_prefixes(log), re.M)
    return m.group(1).strip() if m else None


def generated_text(stdout: str, prompt: str, mode: str) -> str:
    """The new text in a run's stdout. ``ar`` prints only it (``--no-display-prompt``), then `` [end of text]\\n`` if
    it stopped at EOS, then two newlines; the speculative examples print two newlines, the prompt's tokens, the new
    tokens, then two newlines and two more at exit."""
    stdout = _ANSI.sub("", stdout)  # llama-lookahead colours the tokens it accepted, whatever --color says
    if MODES[mode].binary == "llama-completion":
        return stdout.removesuffix("\n\n").removesuffix(" [end of text]\n")
    out = stdout.removeprefix("\n\n")
    out = out.removeprefix(prompt)
    return out.removesuffix("\n\n\n\n") if out.endswith("\n\n\n\n") else out.removesuffix("\n\n")


def parse_run(mode: str, stdout: str, stderr: str, prompt: str = "", n_new: int | None = None) -> dict:
    """One run's row fields from its stdout and stderr (see the module docstring for the time definitions):
    tokens, prefill_s, decode_s, wall_s, tps, iterations, L_bar, ell_bar, accept_rate, n_drafted, n_accepted, the
    per-position acceptance where printed, the text, the perf blocks and the system info."""
    if mode not in MODES:
        raise ValueError(f"unknown llama.cpp mode {mode!r}")
    perf, spec = parse_perf(stderr), parse_spec(stderr)  # the logs go to stderr, the text alone to stdout
    tgt = perf.get("target", {})
    row: dict = {}  # how it was timed and the prompt's tokens (``timed_row`` adds the rest)
    if MODES[mode].self_timed:
        if "decoded_s" not in spec:
            raise ValueError(f"no 'decoded ... seconds' line in the {mode} log: the run failed or the format changed")
        tokens = spec.get("n_predict", spec["decoded_tokens"])
        if mode == "lookahead":
            tokens += 1  # it samples (and prints) the first token before its loop and does not count it
        prefill, decode = spec.get("encoded_s", float("nan")), spec["decoded_s"]
        n_acc = spec.get("n_accept")
        n_dr = spec.get("n_drafted")
        row["timing_source"] = "example wall clock (encoded/decoded lines)"
        row["prompt_tokens"] = spec.get("encoded_tokens")
    else:
        if "eval_ms" not in tgt or "prompt_eval_ms" not in tgt:
            raise ValueError(f"no perf counters (prompt eval / eval time) in the {mode} log: the run failed or the "
                             "format changed")
        tokens = tgt["eval_runs"] + 1  # the last token sampled (the n-th, or EOS) is never evaluated
        prefill = tgt["prompt_eval_ms"] / 1e3
        decode = (tgt["eval_ms"] + tgt.get("sampling_ms", tgt.get("samplers_ms", 0.0))) / 1e3
        n_acc, n_dr = None, None
        row["timing_source"] = "perf counters: prompt eval; eval + sampling"
        row["prompt_tokens"] = tgt.get("prompt_tokens")
    row = timed_row(mode, tokens, prefill, decode, n_dr, accepted=n_acc, **row)
    if n_acc is not None:
        for name, s in spec.get("stats", {}).items():
            if "acc_rate_per_pos" in s:
                row["acc_rate_per_pos"] = s["acc_rate_per_pos"]
            if "mean_acc_len" in s:
                row["mean_acc_len"] = s["mean_acc_len"]
    row["text"] = generated_text(stdout, prompt, mode)
    row["token_ids"] = None  # the binaries print text, not ids
    row["perf"] = perf
    row["spec"] = spec  # everything the example printed (with common_speculative's statistics under "stats")
    row["system_info"] = parse_system_info(stderr)
    return row


# ---- running ------------------------------------------------------------------------------------------------------

def tokenize(text: str, model: Path | str | None = None, bin_dir: Path | None = None,
             timeout: float = 120) -> list[int]:
    """llama.cpp's token ids of ``text`` (special tokens parsed, no BOS added: what the modes feed the target)."""
    bin_dir = bin_dir or find_llamacpp()
    exe = binary("llama-tokenize", bin_dir)
    model = model or target_gguf("q4_1")
    r = subprocess.run(tokenize_command(bin_dir, model), input=text.encode(), capture_output=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{exe} failed ({r.returncode}): {r.stderr.decode(errors='replace')[-2000:]}")
    return parse_tokenize(r.stdout.decode())


def parse_tokenize(stdout: str) -> list[int]:
    m = re.search(r"\[([\d,\s]*)\]", stdout)
    if not m:
        raise ValueError(f"no [ids] in llama-tokenize's output: {stdout[:200]!r}")
    return [int(x) for x in m.group(1).split(",") if x.strip()]


def compare_ids(ours: list[int], theirs: list[int]) -> dict:
    """Whether llama.cpp's tokenization equals ours, and where it first differs."""
    ours, theirs = [int(x) for x in ours], [int(x) for x in theirs]
    first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
    if first is None and len(ours) != len(theirs):
        first = min(len(ours), len(theirs))
    return {"tokens_match": first is None, "first_mismatch": first, "n_ours": len(ours), "n_llamacpp": len(theirs),
            **({"ours_at": ours[first:first + 5], "llamacpp_at": theirs[first:first + 5]} if first is not None else {})}


def run(mode: str, prompt: str, n_new: int, *, target: str | Path = "bf16", draft: str | Path | None = None,
        n_draft: int = 3, threads: int = THREADS, ctx: int | None = None, ignore_eos: bool = True, branches: int = 4,
        p_split: float = 0.1, ngram_n: int | None = None, bin_dir: Path | None = None,
        expect_ids: list[int] | None = None, strict: bool = False, extra: tuple = (), timeout: float = 600,
        save_logs: Path | str | None = None, log_name: str | None = None) -> dict:
    """Run one mode on one prompt (exact text) for ``n_new`` new tokens and return its row. ``target``: ``bf16``,
    ``q4_1`` or a GGUF path; ``draft``: a draft folder (its converted GGUF is looked up) or a GGUF path, default the
    committed draft; ``expect_ids``: our token ids of ``prompt``, checked against llama.cpp's first; ``ctx``: the
    context (and batch) size, by default ``CTX`` or enough for the prompt and ``n_new`` + a draft; ``save_logs``: a
    folder to keep stdout, stderr and the command in (``<log_name or mode>.stdout``, ``.stderr``, ``.json``)."""
    if mode not in MODES:
        raise ValueError(f"unknown llama.cpp mode {mode!r}; choose one of {sorted(MODES)}")
    bin_dir = bin_dir or find_llamacpp()
    exe = binary(MODES[mode].binary, bin_dir)
    tgt = target_gguf(str(target), bin_dir)
    dft = draft_file(mode, mode_draft(mode, draft, bin_dir), bin_dir)
    if len(prompt.encode()) > 120_000:
        raise ValueError("the prompt is too long for one command-line argument (120 kB)")
    info = build_info(bin_dir)
    check = None
    if expect_ids is not None:
        check = compare_ids(expect_ids, tokenize(prompt, tgt, bin_dir))
        if strict and not check["tokens_match"]:
            raise ValueError(f"llama.cpp tokenizes the prompt differently from our ids: {check}")
    if ctx is None:  # the prompt's tokens (or at most one per byte) + the new ones + a draft's overshoot
        need = (len(expect_ids) if expect_ids is not None else len(prompt.encode())) + n_new + 64
        ctx = max(CTX, -(-need // 256) * 256)
    if ctx > 2048:  # the speculative examples need the whole prompt in one batch (default 2048)
        extra = ("-b", str(ctx), *extra)
    argv = command(mode, bin_dir, tgt, prompt, n_new, draft=dft, n_draft=n_draft, threads=threads, ctx=ctx,
                   ignore_eos=ignore_eos, branches=branches, p_split=p_split, ngram_n=ngram_n, extra=extra)
    r = subprocess.run(argv, capture_output=True, timeout=timeout)
    stdout, stderr = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
    if save_logs:
        d, name = Path(save_logs), log_name or mode
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{name}.stdout").write_text(stdout)
        (d / f"{name}.stderr").write_text(stderr)
        (d / f"{name}.json").write_text(json.dumps({"argv": argv, "mode": mode, "prompt": prompt, "n_new": n_new,
                                                    "ignore_eos": ignore_eos, "returncode": r.returncode,
                                                    "version": version_string(info), "expect_ids": expect_ids},
                                                   indent=1))
    if r.returncode != 0:
        raise RuntimeError(f"{exe.name} exited with {r.returncode}:\n{stderr[-3000:]}")
    row = parse_run(mode, stdout, stderr, prompt, n_new)
    row.update(run_fields(mode, argv, info, tgt, draft=dft, n_new=n_new, ignore_eos=ignore_eos, threads=threads,
               n_draft=n_draft))
    if mode == "draft-tree":
        row.update({"branches": branches, "p_split": p_split})
    if check is not None:
        row.update(check)
    return row


def prompt_text(ids: list[int], tokenizer) -> str:
    """The exact text of our prompt ids for llama.cpp (special tokens kept as text, no cleanup of spaces)."""
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
