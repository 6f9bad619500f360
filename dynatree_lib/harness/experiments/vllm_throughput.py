"""Notebook 12's serving experiment (issues 79 and 90): vLLM's aggregate throughput under load, with our EAGLE-3 head
drafting a fixed k or the k that ``peers.vllm_serving`` predicts per batch size.

One document, ``vllm_throughput.json``, measured in one process:

1. **Calibration**, on the Spec-Bench tuning and dev questions (never the test ones): vLLM's AR step at
   ``FORWARD_ROWS`` sequences, and its EAGLE-3 step at k = 1 and k = ``K_MAX`` at each load, ``CALIBRATION_ROUNDS``
   times; the acceptance per draft position from the k = ``K_MAX`` runs. From these, the batch cost model and the
   schedule it predicts.
2. **Rounds**, on the first Spec-Bench test questions: at 1, 2, 4, 8, 16 and 32 concurrent requests, vLLM's AR, its
   EAGLE-3 at k = 1..``K_MAX`` and the schedule, ``THROUGHPUT_TOKENS`` tokens per request (EOS ignored, so every
   mode decodes the same work), ``THROUGHPUT_REPEATS`` rounds, the modes interleaved at each load in an order that
   rotates round by round. A load below ``LOAD_QUESTIONS`` serves that many questions, ``c`` at a time, so that no
   load rests on one or two questions. Each engine starts once and serves an untimed call at every load before the
   rounds; it is paused (SIGSTOP) while another runs.
   The schedule runs with our plugin that skips the head at k = 0 (``SCHEDULE``, what ``serve-plan`` prints).
3. **The plugin's effect**: the fixed-k engines released (seven engines do not fit in 24 GiB), ``PLUGIN_REPEATS``
   rounds of AR, the schedule, the same schedule in vLLM as released (``SCHEDULE_VLLM``) and a second AR engine
   (``AR_TWIN``), as in 2. The twin runs what AR runs: its ratio to AR is the spread between two engine processes of
   one configuration, against which the schedule's gap to AR where it drafts nothing is read.
4. **A load drop**, untimed, for both schedules: ``DROP_FROM`` requests of which all but ``DROP_TO`` stop after
   ``DROP_SHORT`` tokens, the rest going on to ``THROUGHPUT_TOKENS``. Where the schedule drafts nothing at the high
   load and drafts at the low one, the plugin's head has skipped the survivors' first tokens: their acceptance,
   against vLLM's with a complete head cache, is what the skip costs.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from ..measure.cell import tokens_hash
from ..peers import vllm as P
from ..peers.vllm_serving import (FORWARD_ROWS, K_MAX, LOADS, MAX_NUM_SEQS, BatchCosts, calibration_noise,
                                  plan_schedule, schedule_config)
from ..setup.profiles import Profile
from ..setup.workloads import SPEC_BENCH
from .catalog import Document, experiment
from .vllm import runs_vllm, vllm_profile

VLLM_THROUGHPUT = "vllm_throughput"
THROUGHPUT_TOKENS = 128         # per request, EOS ignored: every request decodes the same length
THROUGHPUT_REPEATS = 12         # a multiple of the six modes: each sits at each place in the order equally often
LOAD_QUESTIONS = 8              # below this load, the same first questions, served ``c`` at a time
WARM_UP_TOKENS = 8              # per request in the untimed call per engine and load
CALIBRATION_SPLITS = (("tuning", 2), ("dev", 5))  # Spec-Bench questions per category of each split
CALIBRATION_PROMPT_TOKENS = 256  # a calibration prompt's first tokens: 160 of them fit vLLM's KV cache
CALIBRATION_TOKENS = 64         # tokens per calibration request; a step's time is (wall(64) - wall(1)) / steps
CALIBRATION_ROUNDS = 3
STEP_TRIES = 3                  # measurements of one calibration point before it is refused
SCHEDULE = "schedule"            # the schedule with our plugin (at k = 0 the head does not run)
SCHEDULE_VLLM = "schedule_vllm"  # the same schedule in vLLM as released
AR_TWIN = "ar_twin"              # a second engine of vLLM's AR, in the plugin's rounds
DROP_FROM, DROP_TO, DROP_SHORT = 8, 2, 32
PLUGIN_REPEATS = 5
# per row, besides its times: the engine's CPU while paused, its untimed wake-up calls, the major page faults over
# its calls, and after them its memory (proportional set size) and what of it sits on 2 MiB pages (``tree_memory``)
MEMORY_FIELDS = ("idle_cpu_s", "wake_s", "major_faults", "pss_kib", "huge_kib")


def mode_configs() -> dict:
    """The fixed modes measured: vLLM's AR and EAGLE-3 with our head at k = 1..``K_MAX``."""
    return {P.AR_MODE: P.AR_PEER.config} | {f"k{k}": P.VllmConfig(P.EAGLE3_MODE, k=k) for k in range(1, K_MAX + 1)}


def throughput_prompts(p: Profile, n: int) -> list:
    """The first ``n`` Spec-Bench test questions (through the chat template), in the split's order."""
    from ..setup.models import load_tokenizer
    from ..setup.prompts import load_prompts
    from ..setup.splits import CATEGORIES

    per = -(-n // len(set(CATEGORIES.values())))
    return load_prompts(SPEC_BENCH, load_tokenizer(p.models.target), n=per, split="test",
                        seed=p.prompt_seed("test"))[:n]


def calibration_prompts(p: Profile) -> list:
    """The Spec-Bench tuning and dev questions (``CALIBRATION_SPLITS``), in their splits' order."""
    from ..setup.models import load_tokenizer
    from ..setup.prompts import load_prompts

    tok = load_tokenizer(p.models.target)
    return [q for split, n in CALIBRATION_SPLITS
            for q in load_prompts(SPEC_BENCH, tok, n=n, split=split, seed=p.prompt_seed(split))]


def cycled(prompts: list, n: int) -> list[list[int]]:
    """``n`` calibration prompts' ids, cycling through ``prompts``, each cut to ``CALIBRATION_PROMPT_TOKENS``."""
    return [prompts[i % len(prompts)].ids.tolist()[:CALIBRATION_PROMPT_TOKENS] for i in range(n)]


def plausible_steps(steps: float, k: int) -> bool:
    """Whether ``steps`` decoding steps can produce ``CALIBRATION_TOKENS - 1`` tokens at draft length ``k`` (each
    step commits 1 to k + 1 tokens; one step of slack)."""
    return (CALIBRATION_TOKENS - 1) / (k + 1) - 1 <= steps <= CALIBRATION_TOKENS


def step_ms(w, prompts: list[list[int]], k: int = 0) -> tuple[float, dict]:
    """One engine's decoding step at ``len(prompts)`` sequences in ms, from a one-token and a
    ``CALIBRATION_TOKENS`` generation (their difference holds no prefill), and the longer one's counters. A pair
    whose time or step count cannot be (a call stalled by vLLM's idle queue readers) is measured again,
    ``STEP_TRIES`` times at most, then refused with an error naming it."""
    b, seen = len(prompts), []
    for _ in range(STEP_TRIES):
        one, full = w.generate(prompts, 1), w.generate(prompts, CALIBRATION_TOKENS)
        drafts = full["spec"]["drafts"] - one["spec"]["drafts"]
        steps = drafts / b if k else CALIBRATION_TOKENS - 1
        ms = (full["wall_s"] - one["wall_s"]) / steps * 1000 if steps > 0 else float("nan")
        if ms > 0 and plausible_steps(steps, k):
            return ms, full["spec"]
        seen.append(f"{ms:.1f} ms over {steps:.1f} steps")
    raise P.VllmFailed(f"vLLM's step at {b} sequences, k = {k}, could not be measured: {'; '.join(seen)} "
                       f"(a step must take a positive time, and {CALIBRATION_TOKENS - 1} tokens take "
                       f"{(CALIBRATION_TOKENS - 1) / (k + 1):.0f}-{CALIBRATION_TOKENS - 1} steps)")


def calibrate(forward_worker, workers: dict, prompts: list, bar) -> dict:
    """The cost model's measured inputs, each point the mean of ``CALIBRATION_ROUNDS``: vLLM's AR step per row count
    (``forward_worker``: an AR engine taking ``max(FORWARD_ROWS)`` sequences), EAGLE-3's step at k = 1 and
    ``K_MAX`` per load, and the acceptance per position at k = ``K_MAX``."""
    forward = {n: [] for n in FORWARD_ROWS}
    spec = {k: {b: [] for b in LOADS} for k in (1, K_MAX)}
    longest = []  # vLLM's counters over each k = K_MAX point
    for _ in range(CALIBRATION_ROUNDS):
        for n in FORWARD_ROWS:
            forward[n].append(step_ms(forward_worker, cycled(prompts, n), k=0)[0])
            bar.update(1)
        for b in LOADS:
            for k in (1, K_MAX):
                ms, counts = step_ms(workers[f"k{k}"], cycled(prompts, b), k=k)
                spec[k][b].append(ms)
                if k == K_MAX:
                    longest.append(counts)
                bar.update(1)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    total = summed_counters(longest)
    return {"forward_ms": {n: mean(v) for n, v in forward.items()},
            "spec_step_ms": {k: {b: mean(v) for b, v in by_b.items()} for k, by_b in spec.items()},
            "accepted_at": [a / total["drafts"] for a in (total["per_pos"] + [0] * K_MAX)[:K_MAX]],
            "raw_forward_ms": forward, "raw_spec_step_ms": spec}


def costs_of(calibration: dict) -> BatchCosts:
    """The cost model from a record's calibration (JSON keys are strings), its margin the means' standard error."""
    num = lambda d: {int(x): v for x, v in d.items()}  # noqa: E731
    rounds = list(calibration.get("raw_forward_ms", {}).values()) + \
        [xs for by_b in calibration.get("raw_spec_step_ms", {}).values() for xs in by_b.values()]
    return BatchCosts.from_steps(num(calibration["forward_ms"]),
                                 {int(k): num(v) for k, v in calibration["spec_step_ms"].items()},
                                 calibration["accepted_at"], margin=calibration_noise(rounds))


def summed_counters(counters: list[dict]) -> dict:
    """vLLM's speculative counters over consecutive calls (``per_pos`` as long as the longest)."""
    width = max(len(c["per_pos"]) for c in counters)
    return {k: sum(c[k] for c in counters) for k in counters[0] if k != "per_pos"} | \
        {"per_pos": [sum(c["per_pos"][i] for c in counters if i < len(c["per_pos"])) for i in range(width)]}


def serve_load(w, prompts: list, c: int, tokens: int = THROUGHPUT_TOKENS) -> dict:
    """The work of load ``c``: the first ``max(c, LOAD_QUESTIONS)`` questions, ``c`` at a time (one call each), as
    one reply: outputs and times per request in order, wall time and counters summed."""
    ids = [q.ids.tolist() for q in prompts[:max(c, LOAD_QUESTIONS)]]
    replies = [w.generate(ids[i:i + c], tokens, ignore_eos=True) for i in range(0, len(ids), c)]
    total = lambda key: sum(r[key] for r in replies)  # noqa: E731
    return {"outputs": [o for r in replies for o in r["outputs"]], "tpot_s": [t for r in replies for t in r["tpot_s"]],
            "wall_s": total("wall_s"), "idle_cpu_s": total("idle_cpu_s"), "wake_s": total("wake_s"),
            "major_faults": total("major_faults"), "pss_kib": max(r["pss_kib"] for r in replies),
            "huge_kib": min(r["huge_kib"] for r in replies), "spec": summed_counters([r["spec"] for r in replies])}


def warm_up(workers: dict, prompts: list) -> None:
    """An untimed call per engine and load, so that no timed round pays for a first batch shape."""
    for w in workers.values():
        for c in LOADS:
            w.generate([q.ids.tolist() for q in prompts[:c]], WARM_UP_TOKENS, ignore_eos=True)


def measure_round(workers: dict, prompts: list, rep: int, bar) -> list[dict]:
    """One round: every load, the modes in an order rotated by the round and the load."""
    rows, names = [], list(workers)
    for i, c in enumerate(LOADS):
        shift = (rep + i) % len(names)
        for name in names[shift:] + names[:shift]:
            reply = serve_load(workers[name], prompts, c)
            tokens = sum(map(len, reply["outputs"]))
            rows.append({"mode": name, "concurrency": c, "repeat": rep, "tokens": tokens, "wall_s": reply["wall_s"],
                         "tps": tokens / reply["wall_s"], "spec": reply["spec"], "tpot_s": reply["tpot_s"],
                         "outputs_sha": [tokens_hash(o) for o in reply["outputs"]]}
                        | {key: reply[key] for key in MEMORY_FIELDS})
            bar.update(1)
    return rows


def load_drop(w, prompts: list, lengths: list[int]) -> dict:
    """The load drop (module docstring, 4) on one engine: vLLM's counters over the call (where the schedule drafts
    nothing at ``DROP_FROM``, every draft comes after the drop) and the outputs' hashes."""
    reply = w.generate([q.ids.tolist() for q in prompts[:DROP_FROM]], lengths, ignore_eos=True)
    return {"spec": reply["spec"], "outputs_sha": [tokens_hash(o) for o in reply["outputs"]]}


def mode_info(cfg: P.VllmConfig, engine: P.VllmWorker | None = None) -> dict:
    """A mode's configuration and its engine's description (``engine``, or the running worker of ``cfg``)."""
    info = P.worker_info(engine, cfg) if engine is not None else P.describe(cfg, MAX_NUM_SEQS)
    return {"config": vars(cfg) | {"type": type(cfg).__name__}, "engine_info": info}


def plugin_rounds(workers: dict, prompts: list) -> list[dict]:
    """The plugin's ``PLUGIN_REPEATS`` rounds over ``workers``, the engines started for them warmed first."""
    from tqdm.auto import tqdm

    warm_up({name: workers[name] for name in (SCHEDULE_VLLM, AR_TWIN)}, prompts)
    rows = []
    with tqdm(total=PLUGIN_REPEATS * len(LOADS) * len(workers), desc="plugin", unit="batch") as bar:
        for rep in range(PLUGIN_REPEATS):
            rows += measure_round(workers, prompts, rep, bar)
    return rows


def plugin_effect(configs: dict, workers: dict, prompts: list) -> dict:
    """The module docstring's 3 and 4: the fixed-k engines released, the schedule in vLLM as released and a second
    AR engine started, the rounds of AR, its twin and both schedules, and the load drop on both schedules."""
    from ..setup.weights import smollm2_folder

    for name in [m for m in workers if m not in (P.AR_MODE, SCHEDULE)]:
        P.release(configs[name], MAX_NUM_SEQS)
    released = replace(configs[SCHEDULE], skip_idle_head=False)
    # the twin outside ``P.worker``'s one engine per configuration, ended here
    with P.VllmWorker(smollm2_folder(), P.speculative_config(P.AR_PEER.config), max_num_seqs=MAX_NUM_SEQS) as twin:
        engines = {P.AR_MODE: workers[P.AR_MODE], SCHEDULE: workers[SCHEDULE],
                   SCHEDULE_VLLM: P.worker(released, MAX_NUM_SEQS), AR_TWIN: twin}
        rows = plugin_rounds(engines, prompts)
        modes = {SCHEDULE_VLLM: mode_info(released), AR_TWIN: mode_info(P.AR_PEER.config, twin)}
    lengths = [DROP_SHORT] * (DROP_FROM - DROP_TO) + [THROUGHPUT_TOKENS] * DROP_TO
    drop = {name: load_drop(engines[name], prompts, lengths) for name in (SCHEDULE, SCHEDULE_VLLM)}
    return {"repeats": PLUGIN_REPEATS, "modes": modes, "rows": rows,
            "load_drop": {"from": DROP_FROM, "to": DROP_TO, "short_tokens": DROP_SHORT,
                          "long_tokens": THROUGHPUT_TOKENS, "modes": drop}}


def throughput_record(p: Profile) -> dict:
    from tqdm.auto import tqdm

    from ..measure.environment import environment
    from ..setup.weights import record_weights

    configs = mode_configs()
    workers = {name: P.worker(cfg, MAX_NUM_SEQS) for name, cfg in configs.items()}
    cal_prompts, prompts = calibration_prompts(p), throughput_prompts(p, max(LOADS))
    forward_worker = P.worker(P.AR_PEER.config, max(FORWARD_ROWS))
    with tqdm(total=CALIBRATION_ROUNDS * (len(FORWARD_ROWS) + 2 * len(LOADS)), desc="calibration",
              unit="batch") as bar:
        calibration = calibrate(forward_worker, workers, cal_prompts, bar)
    P.release(P.AR_PEER.config, max(FORWARD_ROWS))
    costs = costs_of(calibration)
    schedule = plan_schedule(costs)
    if (cfg := schedule_config(schedule)) is not None:
        configs[SCHEDULE] = cfg
        workers[SCHEDULE] = P.worker(cfg, MAX_NUM_SEQS)
    modes = {name: mode_info(c) for name, c in configs.items()}
    warm_up(workers, prompts)
    rows, plugin = [], None
    with tqdm(total=THROUGHPUT_REPEATS * len(LOADS) * len(workers), desc=VLLM_THROUGHPUT, unit="batch") as bar:
        for rep in range(THROUGHPUT_REPEATS):
            rows += measure_round(workers, prompts, rep, bar)
    if cfg is not None:
        plugin = plugin_effect(configs, workers, prompts)
    return {"what": "vLLM's aggregate throughput under load: its AR, EAGLE-3 with our head at a fixed k, and the k "
                    "per batch size that the batch cost model predicts from a calibration on tuning and dev questions",
            "experiment": VLLM_THROUGHPUT,
            "modes": modes,
            "calibration": calibration | {"prompt_ids": [q.id for q in cal_prompts],
                                          "prompt_tokens": CALIBRATION_PROMPT_TOKENS, "tokens": CALIBRATION_TOKENS,
                                          "rounds": CALIBRATION_ROUNDS},
            "model": {"predicted_tps": {b: {k: costs.throughput(b, k) for k in range(K_MAX + 1)} for b in LOADS},
                      "margin": costs.margin,
                      "schedule": [list(e) for e in schedule]},
            "settings": {"concurrency": list(LOADS), "tokens_per_request": THROUGHPUT_TOKENS, "ignore_eos": True,
                         "repeats": THROUGHPUT_REPEATS, "max_num_seqs": MAX_NUM_SEQS,
                         "questions_per_load": {c: max(c, LOAD_QUESTIONS) for c in LOADS},
                         "warm_up_tokens": WARM_UP_TOKENS,
                         "order": "repeat, concurrency, mode (rotated by repeat + load)"},
            "plugin": plugin, "prompt_ids": [q.id for q in prompts], "rows": rows, "weights": record_weights(p, None),
            "environment": environment(p.models.device), "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}


def run_vllm_throughput(profile: Profile, rerun: bool = False, root: Path | None = None,
                        render_only: bool = False) -> Path:
    """``vllm_throughput.json`` (module docstring). Without the vLLM environment the committed file stays and
    nothing is measured."""
    from ..measure.store import needs_run, results_path, write_report

    path = results_path(VLLM_THROUGHPUT, profile, root)
    if not runs_vllm(profile) or not needs_run(path, rerun, render_only, profile):
        return path
    if (why := P.unavailable()) is not None:
        print(f"{VLLM_THROUGHPUT}: not measured on this machine: {why}")
        return path
    write_report(path, throughput_record(vllm_profile(profile)), replace=rerun)
    return path


@experiment
class VllmThroughput(Document):
    """vLLM's aggregate throughput under load, with the schedule of k per batch size."""
    name = VLLM_THROUGHPUT
    notebook = "12_peers"
    make = run_vllm_throughput
