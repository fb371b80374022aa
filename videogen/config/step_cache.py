"""Step caching options (`--cache`, `--cache-threshold`, a preset's `cache:` block): plain data,
torch-free, so the API and the resolution step validate them. The caches themselves are in
`videogen.sampling.cache`.

* `first-block` (FirstBlockCache, after ParaAttention / TeaCache): every step runs the first
  transformer block; when its residual changed by less than `threshold` (relative L1) since the
  last fully computed step, the other blocks are skipped and their cached residual reused.
* `mag` (MagCache, Ma et al. 2025): the magnitude ratio of successive residuals predicts the
  error of reusing the last one; steps are skipped while the accumulated error stays under
  `threshold` (at most `max_skips` in a row), after the first `retention` share of steps.
* `taylor` (after TaylorSeer, Liu et al. 2025): a step's whole transformer output is forecast on
  the line through the last two computed ones (in sigma) while the error estimated from the last
  three, relative to the output's size, stays under `threshold`; the transformer is not called.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from videogen.errors import InvalidOption

CACHE_MODES = ("off", "first-block", "mag", "taylor")
MAX_CACHE_THRESHOLD = 1.0  # both thresholds are relative errors: beyond 1 every step would be skipped
# The threshold a mode runs with when neither the request nor the preset gives one (a model not yet
# measured): half the built-in model's safe first-block threshold (>= 35 dB on every prompt), the
# lowest mag one measured there (mean 37.7 dB, worst prompt 32.6 dB) and a third of its taylor one
# (0.01: mean 41.4 dB; docs/architecture.md "Step caching", benchmarks/cache.py).
FALLBACK_THRESHOLDS = {"first-block": 0.05, "mag": 0.005, "taylor": 0.01}


@dataclass(frozen=True)
class StepCacheConfig:
    """How one denoising loop caches transformer steps (resolved: a mode and its threshold)."""

    mode: str = "off"
    threshold: float = (
        0.0  # relative L1 change (first-block), accumulated error (mag), forecast error (taylor); 0: never skip
    )
    retention: float = 0.2  # the first share of steps always computed (they fix the layout; MagCache's 0.2)
    max_skips: int = 3  # most steps skipped in a row (MagCache's K)
    # The last steps always computed: they set the fine detail, and a sample-predicting model's last
    # step is its output (TeaCache's Wan recipe likewise computes the last steps).
    keep_last: int = 1

    def __post_init__(self) -> None:
        check_cache_options(self.mode, self.threshold)
        if not 0.0 <= self.retention <= 1.0:
            raise ValueError(f"cache retention must be in [0, 1], got {self.retention}")
        if self.max_skips < 1:
            raise ValueError(f"cache max_skips must be >= 1, got {self.max_skips}")

    @property
    def enabled(self) -> bool:
        return self.mode != "off"


@dataclass(frozen=True)
class CachePreset:
    """A preset's `cache:` block: the default mode and the threshold measured safe per mode
    (PSNR >= 35 dB to the uncached video); a mode without one uses `FALLBACK_THRESHOLDS`."""

    mode: str = "off"
    thresholds: dict[str, float] = field(default_factory=dict)
    retention: float = 0.2
    max_skips: int = 3

    def __post_init__(self) -> None:
        check_cache_options(self.mode, None)
        for mode, threshold in self.thresholds.items():
            if mode not in CACHE_MODES or mode == "off":
                raise ValueError(f"cache thresholds: unknown mode {mode!r}")
            check_cache_options(mode, threshold)
        if self.mode != "off" and self.mode not in self.thresholds:
            raise ValueError(f"cache mode {self.mode!r} needs a measured threshold in `thresholds`")

    @classmethod
    def from_yaml(cls, raw: dict[str, Any]) -> CachePreset:
        known = {"mode", "thresholds", "retention", "max_skips"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown cache key {unknown[0]!r}")
        thresholds = {str(k): float(v) for k, v in (raw.get("thresholds") or {}).items()}
        mode = raw.get("mode", "off")
        mode = "off" if mode is False else str(mode)  # YAML 1.1 reads a bare `off` as false
        return cls(mode, thresholds, float(raw.get("retention", 0.2)),
                   int(raw.get("max_skips", 3)))  # fmt: skip

    def resolve(self, mode: str | None, threshold: float | None) -> StepCacheConfig:
        """The request's mode and threshold (None: the preset's) as a `StepCacheConfig`."""
        mode = self.mode if mode is None else mode
        if mode == "off":
            if threshold is not None:
                raise InvalidOption("cache_threshold", threshold, "needs a cache mode (first-block or mag)")
            return StepCacheConfig()
        if threshold is None:
            threshold = self.thresholds.get(mode, FALLBACK_THRESHOLDS[mode])
        return StepCacheConfig(mode, float(threshold), self.retention, self.max_skips)


def check_cache_options(mode: Any, threshold: Any) -> None:
    """InvalidOption naming `cache` or `cache_threshold` (None: unset)."""
    if mode is not None and mode not in CACHE_MODES:
        raise InvalidOption("cache", mode, f"must be one of {', '.join(CACHE_MODES)}")
    if threshold is None:
        return
    try:
        x = float(threshold)
    except (TypeError, ValueError):
        raise InvalidOption("cache_threshold", threshold, "must be a number") from None
    if isinstance(threshold, bool) or not math.isfinite(x) or not 0.0 <= x <= MAX_CACHE_THRESHOLD:
        raise InvalidOption("cache_threshold", threshold, f"must be in [0, {MAX_CACHE_THRESHOLD:g}]")
