"""The other seed systems: HuggingFace assisted generation (and HF's own AR, its engine's reference) and
StreamingLLM + linear speculative decoding. TALON is a drafting policy (``core.policies.talon.TalonConfig``)."""
