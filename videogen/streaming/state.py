"""What a stream carries: its settings, its state from chunk to chunk, its control handle, its output.

`StreamState` owns everything that changes as the stream runs (the KV cache, the clock base,
the prompt and counters); `StreamSettings` holds what was resolved once at the start.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from videogen.attention.causal import KVCache
from videogen.errors import InvalidOption
from videogen.sampling.health import SegmentStats


@dataclass(frozen=True)
class StreamChunk:
    index: int
    frames: np.ndarray  # (T, H, W, 3) uint8, new frames only
    first_frame: int  # stream index of frames[0]
    prompt: str
    fps: float
    attempts: int = 1  # samplings of this chunk (1: it passed the health gate, or the gate is off)
    failed_checks: tuple[str, ...] = ()  # checks the kept attempt still fails (none passed: the best is kept)
    reasons: tuple[tuple[str, ...], ...] = ()  # the checks each attempt failed, in order (gate on)
    # Transformer evaluations run for it over all attempts (`GateResult.evals`; a health-gate
    # preview stops an attempt early), and those of the attempts not kept.
    evals: int = 0
    retry_evals: int = 0

    @property
    def end_seconds(self) -> float:
        return (self.first_frame + len(self.frames)) / self.fps


@dataclass(frozen=True)
class StreamSettings:
    """What every chunk of one stream shares, resolved once when it starts."""

    steps: int
    guidance: float | None  # classifier-free guidance scale; None: none (the batch is cond only)
    flow_shift: float | None  # None: the scheduler's own (a model folder that sets none)
    seed: int
    chunk_frames: int  # latent frames per chunk
    first_chunk_frames: int
    latent_hw: tuple[int, int]  # (h, w) of a latent frame
    grid_hw: tuple[int, int]  # (H, W) tokens of a latent frame after patching


@dataclass
class StreamState:
    """Everything a stream carries from one chunk to the next."""

    cache: KVCache
    prompt: str
    embeds: torch.Tensor  # (B, L, D): cond[, uncond]
    # Frames at or past the sinks reach time-dependent conditioning as f - clock_base
    # (`videogen.streaming.recache.rebase_clock`).
    clock_base: int = 0
    chunk: int = 0  # chunks made
    latent_frames: int = 0  # latent frames made
    frames: int = 0  # pixel frames emitted
    last_latent: torch.Tensor | None = None  # (1, C, 1, h, w): the previous chunk's last latent frame
    recaches: int = 0  # prompt switches
    rebases: int = 0  # clock re-bases
    # The health gate's memory (`videogen.sampling.health`): the prompt's first and last chunks and
    # the last frame shown; a prompt switch starts afresh, as a new shot does in a render.
    health_anchor: SegmentStats | None = None
    health_previous: SegmentStats | None = None
    last_frame: np.ndarray | None = None  # (H, W, 3) uint8
    retries: int = 0  # re-generations so far
    retry_evals: int = 0  # their transformer evaluations (`videogen.sampling.health.retry_spare`)
    kept_evals: int = 0  # the kept attempts' transformer evaluations
    failing_run: int = 0  # the prompt's last chunks in a row that kept a failing attempt (`gate_for`)


class StreamControl:
    """Thread-safe handle on a running stream: switch its prompt or stop it. `cancel_check`, if
    given, is also asked before every denoising step (a job's "was I cancelled?" query), so a
    cancel stops the work within one step, as for `render(cancel=...)`. `state` is the running
    stream's `StreamState` once it has started (to inspect, not to change)."""

    def __init__(self, cancel_check: Callable[[], bool] | None = None) -> None:
        self._lock = threading.Lock()
        self._prompt: str | None = None
        self._cancel = False
        self._check = cancel_check
        self._state: StreamState | None = None

    def switch_prompt(self, prompt: str) -> None:
        if not prompt or not prompt.strip():
            raise InvalidOption("prompt", prompt, "must not be empty")
        with self._lock:
            self._prompt = prompt

    def cancel(self) -> None:
        with self._lock:
            self._cancel = True

    @property
    def cancelled(self) -> bool:
        with self._lock:
            if self._cancel:
                return True
        if self._check is not None and self._check():
            self.cancel()
            return True
        return False

    def take_prompt(self) -> str | None:
        with self._lock:
            prompt, self._prompt = self._prompt, None
            return prompt

    def attach(self, state: StreamState) -> None:
        """Called by `stream()` when it starts: the state this handle controls."""
        self._state = state

    @property
    def state(self) -> StreamState | None:
        return self._state
