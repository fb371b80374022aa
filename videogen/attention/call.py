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

from videogen.attention.causal import CausalCall


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
