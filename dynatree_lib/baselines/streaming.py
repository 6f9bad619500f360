"""StreamingLLM + linear speculative decoding: the one speculative loop with a ``Window`` over both caches."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..core.loop import Options, Window, speculative_decode
from ..core.policies.static import LinearConfig
from ..core.result import GenerationResult
from ..core.validate import check_field_types, require


@dataclass(frozen=True)
class StreamingConfig:
    """StreamingLLM + linear speculative decoding: both caches keep ``n_sink`` attention-sink tokens plus
    the most recent tokens, ``cache_size`` in all (1024 in the paper's earlier version); kept keys are
    re-rotated to their cache positions. Not exact once the window slides (attention then sees fewer
    tokens than full greedy decoding): the harness measures its agreement with AR. While prompt +
    generated tokens fit in ``cache_size`` it equals AR token for token."""

    method: ClassVar[str] = "streaming_spec"

    K: int = 5
    cache_size: int = 1024
    n_sink: int = 4

    def __post_init__(self) -> None:
        check_field_types(self)
        require(self.K >= 1, f"K must be >= 1, got {self.K}")
        require(0 <= self.n_sink < self.cache_size,
                f"need 0 <= n_sink < cache_size, got {self.n_sink}, {self.cache_size}")
        require(self.cache_size > self.n_sink + self.K + 1, "cache_size must exceed n_sink + K + 1")


def generate_streaming_spec(target, draft, prompt, T: int, cfg: StreamingConfig = StreamingConfig(),
                            *, opts: Options = Options()) -> GenerationResult:
    """Linear speculative decoding over StreamingLLM caches: the speculative loop with a ``Window``. Sampled, it
    keeps the law of a target that sees only the window, not the full target's."""
    return speculative_decode(target, draft, prompt, T, policy=LinearConfig(cfg.K).policy(), opts=opts,
                              window=Window(cfg.cache_size, cfg.n_sink, cfg.K + 1))
