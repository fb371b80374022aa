"""Cancellation inside a transformer call: the cancel callback is asked before every transformer
block, so a cancelled job stops within one block rather than one denoising step (a step of a 14B
model at 720p takes minutes; a block a few seconds).

The sampling loop wraps each transformer call in `stop_between_blocks(transformer, cancel, ...)`,
which puts a forward pre-hook on each of `transformer.blocks` (diffusers' Wan transformers, the
built-in model) for the length of the call and removes it after. The hook calls `cancel()` and
raises `RenderCancelled`, the exception a cancel between steps raises, so the render unwinds the
same way (the partial video is deleted). The model code knows nothing of jobs: it is handed a
callable, and the worker's is a flag read (`workers.jobs.LeaseKeeper`), never a query, because
it is asked dozens of times per step. The callback travels in a `ContextVar` like the attention
call (`videogen.attention.call`), so two renders that share a model in one process's threads
each see only their own. Without a callback nothing is installed: a render's output is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import Any

from videogen.errors import RenderCancelled


@dataclass(frozen=True)
class _CancelCheck:
    cancel: Callable[[], bool]
    where: str  # the call, for the error: "step 3 of segment 1"


_CURRENT: ContextVar[_CancelCheck | None] = ContextVar("videogen_cancel_check", default=None)


def _before_block(index: int, module: Any, args: Any) -> None:
    check = _CURRENT.get()
    if check is not None and check.cancel():
        raise RenderCancelled(f"cancelled before transformer block {index} of {check.where}")


@contextmanager
def stop_between_blocks(transformer: Any, cancel: Callable[[], bool] | None, where: str) -> Iterator[None]:
    """Ask `cancel` before each block of `transformer` in the calls inside the `with`; True raises
    `RenderCancelled`. A transformer without `blocks` (or no `cancel`) runs unchanged."""
    blocks = getattr(transformer, "blocks", None)
    if cancel is None or blocks is None:
        yield
        return
    token = _CURRENT.set(_CancelCheck(cancel, where))
    handles = [block.register_forward_pre_hook(partial(_before_block, i)) for i, block in enumerate(blocks)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        _CURRENT.reset(token)
