"""dynatree: an exact, measured reproduction of DynaTree (confidence-aware adaptive tree speculative decoding)."""
from .decoders import GenerationResult, generate, generate_ar, generate_speculative
from .drafting import DynaTreeConfig, FixedTreeConfig, LinearConfig, TalonConfig

__all__ = ["generate", "generate_ar", "generate_speculative", "GenerationResult",
           "LinearConfig", "FixedTreeConfig", "DynaTreeConfig", "TalonConfig"]
