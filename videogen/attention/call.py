"""What one transformer call asks of its self-attention: a typed, immutable per-call context.

Diffusers' `WanTransformer3DModel.forward` passes no keyword arguments through to its attention
processors, so the facts that change from call to call (the post-patch token grid and the
denoising step for the sparsity policy; for a block-causal call its mode, chunk plan and KV cache)
travel in a frozen `AttentionCall` held by a `contextvars.ContextVar`: the sampling layer wraps
each transformer call in `with attention_call(AttentionCall(...)):`, and the value is reset when
the block exits. A ContextVar is private to its thread and asyncio task, so concurrent renders in
one process never see each other's call, and nothing is left behind on shared objects (FastVideo
builds typed attention metadata per step the same way). Outside any `attention_call`, processors
run their load-time backend densely.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from videogen.attention.causal import ChunkPlan, KVCache


@dataclass(frozen=True)
class CausalCall:
    """A block-causal call (CausVid / Self-Forcing; see `videogen.attention.causal`).

    mode "full":  the whole sequence under a block-causal mask (training, and the reference the
                  cache must reproduce): every token sees its own chunk and earlier ones
    mode "cache": the call holds one chunk (`plan`); it attends to the frames cached in `cache`
                  plus itself and, when `write` is set (the clean-context pass), stores its
                  keys/values in `cache` afterwards
    """

    mode: Literal["full", "cache"]
    chunk_frames: int = 3  # latent frames per chunk ("full")
    first_chunk_frames: int = 1  # the first chunk's length (1: the first frame alone, as Wan's VAE has it)
    tokens_per_frame: int = 0  # post-patch tokens of one latent frame ("full")
    plan: ChunkPlan | None = None  # ("cache")
    cache: KVCache | None = None  # ("cache")
    write: bool = False  # ("cache") store this chunk's keys/values

    def __post_init__(self) -> None:
        if self.mode == "full" and self.tokens_per_frame < 1:
            raise ValueError(f"a 'full' CausalCall needs tokens_per_frame >= 1, got {self.tokens_per_frame}")
        if self.mode == "cache" and (self.plan is None or self.cache is None):
            raise ValueError("a 'cache' CausalCall needs a plan and a cache")
        if self.mode not in ("full", "cache"):
            raise ValueError(f"CausalCall.mode must be 'full' or 'cache', got {self.mode!r}")


@dataclass(frozen=True)
class AttentionCall:
    """Per-call facts for every self-attention processor of one transformer call."""

    grid: tuple[int, int, int] | None = None  # (F, H, W) tokens after patching; None: not known (dense)
    step: int = 0  # denoising step, 0-based
    num_steps: int = 1
    causal: CausalCall | None = None  # None: the load-time backend over the whole sequence


_CURRENT: ContextVar[AttentionCall | None] = ContextVar("videogen_attention_call", default=None)


@contextmanager
def attention_call(call: AttentionCall) -> Iterator[AttentionCall]:
    """Make `call` the current attention call for the transformer calls inside the block."""
    token = _CURRENT.set(call)
    try:
        yield call
    finally:
        _CURRENT.reset(token)


def current_attention_call() -> AttentionCall | None:
    """The call set by the innermost enclosing `attention_call`, or None."""
    return _CURRENT.get()
