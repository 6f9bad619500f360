"""dynatree: an exact, measured reproduction of DynaTree (confidence-aware adaptive tree speculative decoding)."""
from .baselines import HFAssistedConfig, StreamingConfig
from .decoders import GenerationResult
from .methods import METHOD_NAMES, generate
from .policies import CostAwareConfig, DraftPolicy, DynaTreeConfig, FixedTreeConfig, LinearConfig, TalonConfig

__all__ = ["generate", "GenerationResult", "METHOD_NAMES", "DraftPolicy", "LinearConfig", "FixedTreeConfig",
           "DynaTreeConfig", "TalonConfig", "HFAssistedConfig", "StreamingConfig", "CostAwareConfig"]
