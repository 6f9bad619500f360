"""Tiny models built from configs: no downloads, fp32 on CPU, seconds to build.

GPT-NeoX (Pythia's architecture) on the eager transformers path, and Llama (SmolLM2's architecture) on
both the eager path and the fast path (``static.StaticRunner``)."""
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from dynatree_lib.core.engines.static import StaticRunner
from dynatree_lib.core.engines.runner import Draft
from dynatree_lib.core.tree import Tree
from dynatree_lib.harness.setup.tiny import perturb, tiny_gpt_neox, tiny_llama

VOCAB = 96
MAX_POS = 160
REPO = Path(__file__).resolve().parents[1]


def load_tool(name: str):
    """``tools/<name>.py`` as a module (the tools are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def why_no_git_checkout() -> str | None:
    """Why a test that reads the repository through git cannot run here; None where it can."""
    if shutil.which("git") is None:
        return "needs the git binary (reads the repository's tracked files)"
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=REPO, capture_output=True, text=True)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != REPO:
        return f"needs {REPO} to be a git checkout (reads the repository's tracked files)"
    return None


NO_KERNEL = "needs a CPU with AVX512-BF16 and a C++ toolchain (g++, ninja) to build dynatree_lib/core/csrc"


def why_no_amx() -> str | None:
    from dynatree_lib.core.engines import kernels

    why = kernels.why_no_amx() if kernels.available() else "the bf16 kernels are not available"
    return None if why is None else f"needs AMX tiles ({why}; grep -o -m1 amx_bf16 /proc/cpuinfo)"


def isa_params() -> list:
    """The kernels' instruction sets as test parameters: the machine's default one (AMX where it has the tiles)
    in every tier, the other only in the full tier (``tests/tiers.py``); AMX skipped, with its reason, where the CPU
    lacks it."""
    why = why_no_amx()
    default = "avx512-bf16" if why is not None else "amx-bf16"
    tier = lambda name: [] if name == default else [pytest.mark.full]
    return [pytest.param("avx512-bf16", id="avx512", marks=tier("avx512-bf16")),
            pytest.param("amx-bf16", id="amx", marks=[pytest.mark.skipif(why is not None, reason=why or ""),
                                                      *tier("amx-bf16")])]


ISAS = isa_params()


KERNEL_THREADS = 2  # the cpu profile's: the one-call forward's threads meet at barriers, which one thread never tests


@pytest.fixture(scope="module", params=ISAS)
def isa(request):
    """Each instruction set the bf16 kernels run on here (AMX skips, with its reason, where the CPU lacks it):
    runners built while it is active multiply with it (``kernels.using_isa``), on ``KERNEL_THREADS`` threads even
    where a test worker runs on one (``conftest.pytest_configure``)."""
    from dynatree_lib.core.engines import kernels

    if not kernels.available():
        pytest.skip(NO_KERNEL)
    threads = torch.get_num_threads()
    torch.set_num_threads(KERNEL_THREADS)
    with kernels.using_isa(request.param):
        yield request.param
    torch.set_num_threads(threads)


NO_GIT_CHECKOUT = why_no_git_checkout()
needs_git_checkout = pytest.mark.skipif(NO_GIT_CHECKOUT is not None, reason=NO_GIT_CHECKOUT or "")


@pytest.fixture(autouse=True)
def torch_settings_restored():
    """torch's process-wide settings as they were before each test: a test, or the harness it runs (a profile sets
    its thread count), must not leave later tests running under its own."""
    threads, dtype, grad = torch.get_num_threads(), torch.get_default_dtype(), torch.is_grad_enabled()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    torch.set_default_dtype(dtype)
    torch.set_grad_enabled(grad)


def reference(model, prompt, T: int, eos: int | None = None) -> list[int]:
    """transformers' own greedy generate (nothing inherited from the model's generation config)."""
    out = model.generate(prompt[None], max_new_tokens=T, do_sample=False, eos_token_id=eos, pad_token_id=0)
    return out[0, prompt.numel():].tolist()


@pytest.fixture
def no_model_loads(monkeypatch):
    """Any model load fails the test: what it checks must be refused before anything loads."""
    from dynatree_lib.harness.setup import models
    from dynatree_lib.harness.setup.profiles import Profile

    def loaded(*_args, **_kw):
        raise AssertionError("a model was loaded before the command line was checked")

    monkeypatch.setattr(models, "load_model", loaded)
    monkeypatch.setattr(Profile, "load_pair", loaded)


@pytest.fixture(scope="session")
def target():
    return tiny_gpt_neox(seed=0, vocab_size=VOCAB, hidden_size=64, layers=3, max_positions=MAX_POS)


@pytest.fixture(scope="session")
def draft():
    """The target with noisy weights: agrees often but not always, so trees see both outcomes."""
    m = tiny_gpt_neox(seed=0, vocab_size=VOCAB, hidden_size=64, layers=3, max_positions=MAX_POS)
    return perturb(m, 0.03, seed=123)


@pytest.fixture(scope="session")
def small_draft():
    """An unrelated one-layer draft: mostly rejected."""
    return tiny_gpt_neox(seed=7, vocab_size=VOCAB, hidden_size=32, layers=1, heads=2, max_positions=MAX_POS)


@pytest.fixture(scope="session")
def wrong_draft(target):
    """The target with its output rows rolled by one: the draft's top-1 is never the target's top-1."""
    m = tiny_gpt_neox(seed=0, vocab_size=VOCAB, hidden_size=64, layers=3, max_positions=MAX_POS)
    with torch.no_grad():
        w = m.get_output_embeddings().weight
        w.copy_(torch.roll(w, shifts=1, dims=0))
    return m


@pytest.fixture(scope="session")
def llama_target():
    return tiny_llama(seed=0, vocab_size=VOCAB, hidden_size=64, layers=3, max_positions=MAX_POS)


@pytest.fixture(scope="session")
def llama_draft():
    return perturb(tiny_llama(seed=0, vocab_size=VOCAB, hidden_size=64, layers=3, max_positions=MAX_POS), 0.03, 5)


@pytest.fixture(scope="session")
def eagle3_head(llama_target):
    """A random EAGLE-3 head on the Llama target's features and embedding, over 80 of its 96 tokens."""
    from dynatree_lib.harness.setup.tiny import tiny_eagle3

    return tiny_eagle3(llama_target, draft_vocab=80, seed=2)


@pytest.fixture(scope="session")
def fast_pair(llama_target, llama_draft):
    """The fast path over the Llama pair (eager static runners; the compiled graphs are tested apart)."""
    return StaticRunner(llama_target), StaticRunner(llama_draft)


def prompts(n: int, seed: int = 0, lo: int = 1, hi: int = 40):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi, (n,), generator=g).tolist()
    return [torch.randint(1, VOCAB, (k,), generator=g) for k in lens]


def add_level(tree: Tree, parent, token, logp) -> tuple[Tree, torch.Tensor]:
    """``tree`` with one level of children appended (parents at its deepest level, in BFS order), and their
    indices: hand-built trees for tests (the drafter builds its trees in one go)."""
    parent, token, logp = (torch.as_tensor(x) for x in (parent, token, logp))
    cum = tree.cum_logp[parent] + logp.float()  # in fp32, as the drafter sums path log-probs
    grown = Tree.build(tree.tokens.tolist() + token.tolist(), tree.parents.tolist() + parent.tolist(),
                       tree.logp.tolist() + logp.tolist(), tree.cum_logp.tolist() + cum.tolist(),
                       tree.tokens.device, root_conf=tree.root_conf)
    return grown, torch.arange(tree.size, grown.size)


def tiny_mlp_head_folder(folder: Path, kind: str) -> Path:
    """A saved random Medusa or Hydra head (``kind``, three levels) on ``tiny-llama:target``."""
    from dynatree_lib.core.drafts.heads.mlp import save_heads
    from dynatree_lib.harness.setup.models import load_model
    from dynatree_lib.harness.setup.tiny import tiny_mlp_heads

    target, _ = load_model("tiny-llama:target")
    return save_heads(tiny_mlp_heads(target, kind, heads=3, draft_vocab=64, seed=1), folder, "tiny-llama:target")


def tiny_head_folder(folder: Path) -> Path:
    """A saved random EAGLE-3 head on ``tiny-llama:target`` with a context lookup beside it: the feature head of the
    tiny profiles the heads and talon experiments run on."""
    import json

    from dynatree_lib.core.drafts.heads.eagle3 import save_head
    from dynatree_lib.harness.setup.models import load_model
    from dynatree_lib.harness.setup.tiny import tiny_eagle3

    target, _ = load_model("tiny-llama:target")
    folder = save_head(tiny_eagle3(target, draft_vocab=80, seed=5), folder, "tiny-llama:target")
    (folder / "lookup.json").write_text(json.dumps({"weights": [0.5, 0.6, 0.7]}))
    return folder


class FannedRunner(Draft):
    """Several draft runners of one head fed every call the loop makes, the first one's results returned (a test's
    ``forward`` compares the others' with them); ``runner`` in order, the first one leading."""

    def __init__(self, head, *runners):
        self.runners = runners
        self.model, self.vocab, self.reads_features = head, runners[0].vocab, head.cfg.aux_layers

    length = property(lambda self: self.runners[0].length)

    def each(self, name, *args):
        return [getattr(r, name)(*args) for r in self.runners]

    def reset(self):
        self.each("reset")

    def truncate(self, n):
        self.each("truncate", n)

    def commit(self, start, keep):
        self.each("commit", start, keep)

    def observe_target(self, features, start):
        for r in self.runners:
            r.observe_target(features.to(r.target.dtype), start)


class SameBits(FannedRunner):
    """Two runners of one head fed every call, which must give the same bits at each: the logits, the keys and values,
    and the outputs rings where ``rings`` (both of one size); ``calls`` counts the calls."""

    def __init__(self, head, first, second, rings=True):
        super().__init__(head, first, second)
        self.rings, self.calls = rings, 0

    def forward(self, tokens, positions, visible=None, tree_start=None, last_only=False):
        a, b = self.each("forward", tokens, positions, visible, tree_start, last_only)
        first, second = self.runners
        held = [(first.k, second.k), (first.v, second.v)] + ([(first.out, second.out)] if self.rings else [])
        assert torch.equal(a, b) and all(torch.equal(x, y) for x, y in held)
        self.calls += 1
        return a
