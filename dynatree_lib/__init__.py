"""dynatree: an exact, measured reproduction of DynaTree (confidence-aware adaptive tree speculative decoding).

Layers, each a sub-package importing only the ones before it (``tests/test_structure.py``):
``core`` (trees, policies, runners, the drafter and the decoding loop) < ``baselines`` and ``extensions`` <
``methods`` (the registry and ``generate``) < ``harness`` (setup, measurement, peers, the authors' code,
experiments: rooms of their own) < ``train`` (the draft model and the heads) and ``reporting`` (tables, plots,
RESULTS.md) < ``cli``. Importing the package registers every method, the peer engines' included
(``harness.peers.register_peers``), and every experiment (``harness.experiments``, and ``train.reports``: those that
read the training text), so both registries are the same whatever is imported next.
"""
from .baselines.hf_generate import HFARConfig, HFAssistedConfig
from .baselines.streaming import StreamingConfig
from .core.policies.eagle_tree import Eagle3TreeConfig
from .core.policies.opt_tree import OptTreeConfig
from .core.policies.base import DraftPolicy
from .core.policies.dynatree import DynaTreeConfig
from .core.policies.static import FixedTreeConfig, LinearConfig
from .core.policies.talon import TalonConfig
from .core.result import GenerationResult
from .core.sampling import Sampling
from .extensions.control import ControlConfig
from .extensions.cost_aware import CostAwareConfig
from .harness.peers import register_peers
from .harness.peers.llamacpp import LlamaCppConfig
from .methods import REGISTRY, Display, Method, Study, generate, method_names, register

register_peers()

from .harness import experiments as _experiments  # noqa: E402,F401  (registers every experiment of the harness)
from .train import reports as _reports  # noqa: E402,F401  (registers the reports that read the training text)

__all__ = ["generate", "GenerationResult", "Sampling", "REGISTRY", "Method", "Display", "Study", "register", "method_names", "DraftPolicy",
           "LinearConfig", "FixedTreeConfig", "DynaTreeConfig", "TalonConfig", "HFAssistedConfig", "HFARConfig", "StreamingConfig",
           "CostAwareConfig", "ControlConfig", "LlamaCppConfig", "Eagle3TreeConfig", "OptTreeConfig"]
