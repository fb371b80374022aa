"""Step caching: skip transformer work on denoising steps whose output can be predicted from
earlier steps' (`--cache first-block|mag|taylor`; options in `videogen.config.step_cache`).

`first-block` and `mag` reuse a *residual*: what a run of blocks added to its input hidden states
at the last fully computed step. `taylor` forecasts the whole transformer output instead.

* `first-block` (FirstBlockCache, the ParaAttention / TeaCache family): every step runs block 0;
  if its residual moved by less than the threshold (relative mean absolute change) since the
  last fully computed step, blocks 1..n-1 are skipped and their cached residual is added to
  block 0's output.
* `mag` (MagCache, Ma et al. 2025): the ratio of the residual's per-token magnitude between
  successive steps stays near 1 for most of a trajectory; the product of those ratios since the
  last computed step predicts how far the cached residual is off, and |1 - product| summed over
  the skipped steps is the accumulated error. A step is skipped (all blocks) while that error
  stays under the threshold, at most `max_skips` in a row, never in the first `retention` share
  of steps. MagCache calibrates the ratios once per model; here they are estimated from the last
  two computed steps (the ratio changes smoothly), so any model works without a calibration file.
* `taylor` (after TaylorSeer, Liu et al. 2025, which forecasts features by finite differences):
  the loop asks `forecast` before each transformer call; from the last three computed outputs it
  estimates the error of the line through the last two (`forecast`'s docstring) and, when it is
  small enough, returns the line's value at this step's sigma and the transformer is not called
  at all (embeddings, blocks and head: on the built-in model a fifth of a step lies outside the
  blocks after block 0). A reused residual is a zeroth-order forecast that goes stale with every
  skipped step; the line follows the drift, so more steps can be skipped at the same error.

diffusers' `FirstBlockCacheConfig` / `MagCacheConfig` hooks keep their state in a registry on
the model and count steps by calls, with the step count fixed when the hook is applied; a worker
serves many requests of different step counts on one model, so these caches are our own. The
state is a `StepCache` made per denoising call (per segment, per attempt) and handed to the
blocks for the length of one transformer call through a `ContextVar`, like the attention call
(`videogen.attention.call`) and the cancel check (`videogen.sampling.interrupt`). The blocks get
a stateless dispatcher once (`_install`): without a current call it runs the block unchanged.
The cancel pre-hooks still fire on skipped blocks, so cancelling stays within one block.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from videogen.config.step_cache import StepCacheConfig

_ORIGINAL = "_videogen_step_cache_forward"  # a block's own forward, kept when the dispatcher is installed
_INSTALL_LOCK = threading.Lock()


@dataclass
class _Residuals:
    """What the last fully computed step left for the steps after it (one transformer)."""

    transformer: int  # id() of the transformer they came from (Wan 2.2's experts differ)
    step: int  # the step they were computed at
    residual: torch.Tensor  # (B, N, D): the skipped blocks' contribution (blocks 1..n-1, or all for mag)
    first: torch.Tensor | None  # (B, N, D): block 0's residual (first-block)
    magnitude: torch.Tensor | None  # (B, N) fp32: the per-token norm of `residual` (mag)


@dataclass
class _Output:
    """A fully computed step's transformer output (taylor): what the forecasts extrapolate."""

    sigma: float  # the step's noise level
    value: torch.Tensor  # the transformer's output for the whole batch (cond and uncond), fp32


@dataclass
class StepCache:
    """The step cache of one denoising call: its residuals, the MagCache accumulators and counts.
    Make one per `denoise` call; it must not outlive the call (it holds activations)."""

    config: StepCacheConfig
    steps: int
    computed: int = 0  # transformer calls that ran every block
    skipped: int = 0  # transformer calls that reused the cached residual
    _last: _Residuals | None = None
    _ratio: float = 1.0  # mag: the per-step magnitude ratio estimated from the last two computed steps
    _acc_ratio: float = 1.0  # mag: the product of ratios since the last computed step
    _acc_error: float = 0.0  # mag: the accumulated error since the last computed step
    _run: int = 0  # steps skipped in a row
    _retained: int = field(init=False)
    _outputs: list[_Output] = field(default_factory=list)  # taylor: the last three computed outputs, oldest first
    _transformer: int | None = None  # taylor: id() of the transformer the outputs came from

    def __post_init__(self) -> None:
        self._retained = int(self.config.retention * self.steps + 0.5)

    @contextmanager
    def step(self, transformer: Any, step: int) -> Iterator[None]:
        """The transformer calls inside the `with` are step `step` (0-based) of this cache."""
        blocks = getattr(transformer, "blocks", None)
        if not self.config.enabled or self.config.mode == "taylor" or blocks is None or len(blocks) == 0:
            yield
            return
        _install(blocks)
        if self._last is not None and self._last.transformer != id(transformer):
            self._reset()  # another expert: its residuals say nothing about this one's
        token = _CURRENT.set(_CachedCall(self, id(transformer), step, len(blocks)))
        try:
            yield
        finally:
            _CURRENT.reset(token)

    def _reset(self) -> None:
        self._last, self._ratio, self._acc_ratio, self._acc_error, self._run = None, 1.0, 1.0, 0.0, 0
        self._outputs = []

    def forecast(self, transformer: Any, step: int, sigma: float) -> torch.Tensor | None:
        """taylor: step `step`'s transformer output (at noise level `sigma`) forecast from the last
        computed ones, or None when the step must be computed (then pass its output to `observe`).

        The forecast is the line through the last two computed outputs, in sigma. Its error is
        estimated from the last three: the second divided difference D2 bounds the linear
        extrapolation's error at sigma by |D2| |(sigma - s1)(sigma - s2)| (Newton's remainder);
        the step is forecast while that error, relative to the last output's size, stays under the
        threshold."""
        if self.config.mode != "taylor" or not self.config.enabled:
            return None
        if self._transformer != id(transformer):
            self._reset()
            self._transformer = id(transformer)
        outputs = self._outputs
        if len(outputs) < 3 or not self._in_window(step):
            return None
        o0, o1, o2 = outputs
        d1 = (o2.value - o1.value) / (o2.sigma - o1.sigma)
        d0 = (o1.value - o0.value) / (o1.sigma - o0.sigma)
        d2 = (d1 - d0) / (o2.sigma - o0.sigma)
        scale = float(o2.value.abs().mean().clamp_min(1e-12))
        error = float(d2.abs().mean()) * abs((sigma - o2.sigma) * (sigma - o1.sigma)) / scale
        if error >= self.config.threshold:
            return None
        self.skipped += 1
        self._run += 1
        return o2.value + (sigma - o2.sigma) * d1

    def observe(self, sigma: float, output: torch.Tensor) -> None:
        """taylor: a computed step's transformer output (the step `forecast` declined)."""
        if self.config.mode != "taylor" or not self.config.enabled:
            return
        self.computed += 1
        self._run = 0
        self._outputs = [*self._outputs[-2:], _Output(sigma, output.detach().float())]

    def _in_window(self, step: int) -> bool:
        """Whether step `step` may be skipped at all: past retention, before the last steps, and
        not past `max_skips` in a row (every mode)."""
        return self._retained <= step < self.steps - self.config.keep_last and self._run < self.config.max_skips

    def _may_skip(self, step: int) -> bool:
        return self._last is not None and self._in_window(step)

    def skip_all(self, step: int) -> bool:
        """mag: whether step `step` reuses the cached residual of every block (decided before it)."""
        if self.config.mode != "mag" or not self._may_skip(step):
            return False
        acc_ratio = self._acc_ratio * self._ratio
        acc_error = self._acc_error + abs(1.0 - acc_ratio)
        if acc_error >= self.config.threshold:
            return False
        self._acc_ratio, self._acc_error = acc_ratio, acc_error
        return True

    def skip_rest(self, step: int, first: torch.Tensor) -> bool:
        """first-block: whether block 0's residual `first` (B, N, D) is close enough to the last
        computed step's for blocks 1..n-1 to be skipped."""
        if self.config.mode != "first-block" or not self._may_skip(step):
            return False
        assert self._last is not None and self._last.first is not None
        before = self._last.first.float()
        change = (first.float() - before).abs().mean() / before.abs().mean().clamp_min(1e-12)
        return float(change) < self.config.threshold

    def reuse(self, base: torch.Tensor) -> torch.Tensor:
        """A skipped step's output: `base` (the hidden states where skipping began) + the residual."""
        assert self._last is not None
        self.skipped += 1
        self._run += 1
        return base + self._last.residual

    def commit(self, transformer: int, step: int, residual: torch.Tensor, first: torch.Tensor | None) -> None:
        """A fully computed step's residuals become the cache."""
        self.computed += 1
        magnitude = None
        if self.config.mode == "mag":
            magnitude = residual.float().norm(dim=-1)  # (B, N)
            last = self._last
            if last is not None and last.magnitude is not None and step > last.step:
                ratio = float((magnitude / last.magnitude.clamp_min(1e-12)).mean())
                self._ratio = max(ratio, 1e-6) ** (1.0 / (step - last.step))  # per step
        self._last = _Residuals(transformer, step, residual, first, magnitude)
        self._acc_ratio, self._acc_error, self._run = 1.0, 0.0, 0


@dataclass
class _CachedCall:
    """One transformer call under a `StepCache`: what its blocks share while it runs."""

    cache: StepCache
    transformer: int
    step: int
    blocks: int
    skip: bool = False
    base: torch.Tensor | None = None  # (B, N, D): where the skipped or cached run of blocks starts
    first: torch.Tensor | None = None  # (B, N, D): block 0's residual (first-block)

    def run_block(self, index: int, forward: Callable[..., torch.Tensor], args: tuple, kwargs: dict) -> torch.Tensor:
        x = args[0]  # (B, N, D) hidden states: Wan blocks take (hidden, encoder_hidden, temb, rotary)
        if index == 0:
            out = self._first_block(forward, x, args, kwargs)
        elif self.skip:
            out = x
        else:
            out = forward(*args, **kwargs)
        return self._finish(out) if index == self.blocks - 1 else out

    def _first_block(self, forward: Callable[..., torch.Tensor], x: torch.Tensor, args: tuple,
                     kwargs: dict) -> torch.Tensor:  # fmt: skip
        cache = self.cache
        self.base, self.skip = x, cache.skip_all(self.step)
        if self.skip:
            return x
        out = forward(*args, **kwargs)
        if cache.config.mode == "first-block":
            self.first = out - x
            self.base, self.skip = out, cache.skip_rest(self.step, self.first)
        return out

    def _finish(self, out: torch.Tensor) -> torch.Tensor:
        assert self.base is not None
        if self.skip:
            return self.cache.reuse(self.base)
        self.cache.commit(self.transformer, self.step, out - self.base, self.first)
        return out


_CURRENT: ContextVar[_CachedCall | None] = ContextVar("videogen_step_cache_call", default=None)


def _dispatch(index: int, forward: Callable[..., torch.Tensor], *args: Any, **kwargs: Any) -> torch.Tensor:
    call = _CURRENT.get()
    if call is None:
        return forward(*args, **kwargs)
    return call.run_block(index, forward, args, kwargs)


def _install(blocks: Any) -> None:
    """Give each block the dispatcher once; it keeps no state (the current call is in `_CURRENT`)."""
    if all(_ORIGINAL in block.__dict__ for block in blocks):
        return
    with _INSTALL_LOCK:
        for index, block in enumerate(blocks):
            if _ORIGINAL not in block.__dict__:
                forward = block.forward
                block.__dict__[_ORIGINAL] = forward
                block.forward = partial(_dispatch, index, forward)
