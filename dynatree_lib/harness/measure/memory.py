"""Memory of one generation, measured so that the order of cells cannot matter: each cell runs in a fresh Python
process. The process first prepares the prompt (tokenizer, data, the models' code) and notes what that runtime
holds, then loads only the models the method uses (AR and HF's AR no draft; transformers' own loop its models
alone, ours the runners, which hold the only copy of every weight: ``core.engines.ownership``), runs one warm-up
generation, returns freed memory to the system and measures the next generation:

- ``footprint_mb``: the generation's peak above that runtime (weights, caches and the generation's own tensors):
  what serving the method costs, the number the paper's Table 5 compares with AR's;
- ``above_start_mb``: the generation's peak above what the process held right before it (its own tensors);
- ``peak_mem_mb``, ``start_mem_mb``, ``runtime_mb``: the absolute figures behind them;
- ``target_tensors_mb``, ``draft_tensors_mb``: what the loaded models hold in tensors, before any generation
  (``core.engines.ownership.reachable_storages``): the target runner's weights, caches and tables, and what the draft
  holds beyond them (its own weights and caches; an embedding it borrows counts once, as the target's): the
  part of a footprint that is the models' and their caches', the rest being the generation's own tensors and
  the allocator's.

On GPU the memory is CUDA's allocated bytes and its peak; on CPU the process's RSS and its high-water mark, reset
at the start of the generation after ``malloc_trim`` hands the allocator's free pages back (without it the
generation reuses pages the warm-up left and seems to need nothing). The process runs with glibc's mmap threshold
fixed (``FIXED_MMAP_THRESHOLD``): by default glibc raises it to the largest block freed so far, so after a load that
frees large blocks (a runner taking its model's weights over) later blocks come from the heap, whose holes stay in
the RSS by 10-30 MB from one process to the next; with it fixed, every block above it is mapped on its own and
unmapped when freed, and the RSS is what is live (the same to 1 MB from process to process)."""
from __future__ import annotations

import ctypes
import gc
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import torch


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def in_use_mb(device: str) -> float:
    """Memory in use now (MB), after a collection and, on CPU, after the allocator's free pages go back."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated() / 2**20
    trim_heap()
    return rss_mb()


def trim_heap() -> None:
    """glibc's ``malloc_trim(0)``: free heap pages back to the system (a no-op elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def reset_peak(device: str) -> float:
    """Start a peak measurement; returns the memory in use now (MB)."""
    now = in_use_mb(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        return now
    try:  # Linux: writing 5 to clear_refs resets VmHWM (peak RSS) to the current RSS
        Path(f"/proc/{os.getpid()}/clear_refs").write_text("5")
    except OSError:
        pass
    return now


def read_peak(device: str) -> float:
    """The peak (MB) since ``reset_peak``."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return rss_mb()


def measure_here(profile, cell, prompt_index: int = 0) -> dict:
    """In this process: prepare the prompt (tokenizer, data, imports), note what that runtime holds, load the models
    the method uses, warm up once and measure one generation (fields: module docstring)."""
    from ...methods import REGISTRY
    from .cell import CellRun
    from ..setup.models import import_model_code, load_tokenizer
    from ..setup.profiles import models_for
    from .bench import Prompts, prompt_seed
    from ..setup.workloads import eos as workload_eos

    if profile.models.threads:
        torch.set_num_threads(profile.models.threads)
    device, refs = profile.models.device, (profile.models.target, profile.models.draft)
    drafts = REGISTRY[cell.method].drafts
    tok = load_tokenizer(refs[0])
    prompt = Prompts(profile, tok).of(cell, prompt_index + 1)[prompt_index]
    eos = workload_eos(cell.dataset, tok)
    del tok  # the pair brings its own
    for ref in refs[: 2 if drafts else 1]:
        import_model_code(ref)
    runtime = in_use_mb(device)
    target, draft, _ = profile.load_pair(cell.dtype, with_draft=drafts, models_for=models_for([cell.method]))
    held = tensors_mb(target, draft)
    seed = prompt_seed(profile.protocol.seed, prompt.id, 0)
    # warm: allocators, kernels
    run = CellRun(cell, target, draft, kv_mode=profile.protocol.kv_mode, eos=eos)
    run.generate(prompt, seed=seed)
    start = reset_peak(device)
    res = run.generate(prompt, seed=seed)
    peak = read_peak(device)
    return {"prompt_id": prompt.id, "tokens": len(res.tokens), "models": ["target", "draft"] if drafts else ["target"],
            "runtime_mb": runtime, "start_mem_mb": start, "peak_mem_mb": peak, "footprint_mb": peak - runtime,
            "above_start_mb": peak - start, "engine": res.engine, **held}


def tensors_mb(target, draft) -> dict:
    """MB of the storages the target holds, and of those the draft holds beyond the target's (module docstring)."""
    from ...core.engines.ownership import reachable_storages

    held = reachable_storages(target)
    own = {k: v for k, v in reachable_storages(draft).items() if k not in held} if draft is not None else {}
    return {"target_tensors_mb": sum(held.values()) / 2**20, "draft_tensors_mb": sum(own.values()) / 2**20}


FIXED_MMAP_THRESHOLD = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}  # glibc's default start, kept (module docstring)


def measure_in_process(profile, cell, prompt_index: int = 0) -> dict:
    """``measure_here`` in a fresh Python process (glibc's mmap threshold fixed: module docstring)."""
    with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as f:
        pickle.dump((profile, cell, prompt_index), f)
    r = subprocess.run([sys.executable, "-m", "dynatree_lib.harness.measure.memory", f.name], capture_output=True, text=True,
                       env={**os.environ, **FIXED_MMAP_THRESHOLD})
    Path(f.name).unlink(missing_ok=True)
    if r.returncode != 0:
        raise RuntimeError(f"memory cell {cell.label!r} on {cell.dataset} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_memory(profile, todo: list, path, prompts: dict, repeats: int = 1) -> None:
    """Every missing memory cell ``todo`` (cell, key) into the experiment's JSON, one row per prompt (the cell's first
    ``prompts[key]``) and repeat, each row in a process of its own."""
    from tqdm.auto import tqdm

    from .environment import environment
    from .cell import make_record
    from .metrics import aggregate
    from .store import ResultStore
    from ..setup.weights import record_weights

    store = ResultStore(path)
    for c, k in tqdm(todo, desc=f"{profile.name}/memory", unit="cell"):
        rows = [measure_in_process(profile, c, i) for i in range(prompts[k]) for _ in range(repeats)]
        rec = make_record(c, k, profile, [], rows=rows, extra={}, replicate=0)
        rec |= {"prompt_ids": list(dict.fromkeys(r["prompt_id"] for r in rows)), "aggregate": aggregate(rows),
                "environment": environment(profile.models.device),
                "weights": record_weights(profile, c.draft)}
        store.add(rec)


if __name__ == "__main__":  # one memory cell, in its own process (``measure_in_process``)
    _profile, _cell, _index = pickle.loads(Path(sys.argv[1]).read_bytes())
    print(json.dumps(measure_here(_profile, _cell, _index)))
