"""dynatree: an exact, measured reproduction of DynaTree (confidence-aware adaptive tree speculative decoding).

Layers, each a sub-package importing only the ones before it (``tests/test_structure.py``):
``core`` (trees, policies, runners, the drafter and the decoding loop) < ``baselines`` and ``extensions`` <
``methods`` (the registry and ``generate``) < ``harness`` (profiles, data, models, measurement, experiments) <
``draft`` (building the cpu profile's draft) < ``reporting`` (tables, plots, RESULTS.md) < ``cli``.
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
from .harness.peers import LlamaCppConfig  # llama.cpp (a peer engine, greedy only): registered where declared
from .methods import REGISTRY, Display, Method, Study, generate, method_names, register

__all__ = ["generate", "GenerationResult", "Sampling", "REGISTRY", "Method", "Display", "Study", "register", "method_names", "DraftPolicy",
           "LinearConfig", "FixedTreeConfig", "DynaTreeConfig", "TalonConfig", "HFAssistedConfig", "HFARConfig", "StreamingConfig",
           "CostAwareConfig", "ControlConfig", "LlamaCppConfig", "Eagle3TreeConfig", "OptTreeConfig"]
