"""Training the built-in model on procedural scenes (`videogen train builtin`): the loop,
checkpoints and the exported weights.

Batches come from `videogen.training.data` (a pure function of (seed, step)), the loss from
`videogen.training.loss`, the optimiser (Muon for the hidden weight matrices, AdamW for the rest)
from `videogen.training.optim`; it reaches AdamW's adherence in about half the steps
(docs/builtin-model.md). `minutes` fits a run into a wall-time budget on whatever CPU it meets:
the step count is set from the speed of the first steps, which are still warm-up (whose learning
rate does not depend on the step count; a step that compiles a new clip shape is not timed), so
the run is exactly `--steps N` for the N it logs. Checkpoints (model, EMA, optimiser, step, step
count) are written atomically every `checkpoint_every` steps; the shipped weights are the EMA
weights.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from videogen.errors import InvalidOption
from videogen.models.builtin import (
    WEIGHTS_FILE,
    build_fresh,
    grow_layers,
    grow_width,
    load_state,
    load_weights,
    state_size,
    transformer_config,
    weights_size,
)
from videogen.models.codec import PixelCodec
from videogen.training.config import LAYOUT_GATE_WEIGHT, TrainConfig
from videogen.training.context import own_context
from videogen.training.data import Batch, make_batch
from videogen.training.loss import flow_matching_loss, layout_gate_loss
from videogen.training.optim import build_optimizer
from videogen.training.rollouts import RolloutPool, make_pool, mix_rollouts

BUDGET_PROBE = 50  # steps timed to set a time-budgeted run's step count (within the warm-up)


def learning_rate(cfg: TrainConfig, step: int, total: int | None = None) -> float:
    """Linear warm-up over `cfg.warmup` steps, then cosine decay to `min_lr_ratio` at `total`."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    total = cfg.steps if total is None else total
    progress = (step - cfg.warmup) / max(1, total - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def budget_steps(cfg: TrainConfig, step: int, rate: float, elapsed: float) -> int:
    """A time-budgeted run's step count, at `step` after `elapsed` seconds at `rate` steps/s: what
    fits in the rest of `cfg.minutes` (at least one step past the warm-up)."""
    return max(step, cfg.warmup + 1, step + int(rate * (cfg.minutes * 60 - elapsed)))


def _rollout_pool(cfg: TrainConfig, log: Callable[[str], None]) -> RolloutPool | None:
    """The rollout pool `cfg.rollouts` names (made first, from the `init` weights, when missing)."""
    if not cfg.rollouts or cfg.rollout_frac <= 0:
        return None
    path = Path(cfg.rollouts)
    if not path.is_file():
        from videogen.models.loader import load_model

        made = "streaming" if cfg.causal_chunk else "rendering"
        log(f"rollouts: {made} {cfg.rollout_chains} chains of {cfg.rollout_seconds:g} s into {path}")
        preset = "builtin-causal" if cfg.causal_chunk else "builtin"  # the causal variant's pool is its own streams
        model = load_model(preset, device="cpu", dtype="float32", attention="dense")
        if cfg.init:  # the pool is the weights being fine-tuned's own output
            size = weights_size(cfg.init)
            if size != (len(model.transformer.blocks), model.transformer.config.num_attention_heads):  # grown, widened
                from videogen.attention.processor import install_attention

                model.transformer = build_fresh(cfg.seed, *size)[0].eval()
                model.attention = install_attention(model, "dense")
            load_weights(model.transformer, model.prompt_encoder, cfg.init)
        if cfg.rollout_anchor is not None and not cfg.causal_chunk:  # ... rendered as those weights are rendered
            model.preset = dataclasses.replace(model.preset, anchor_frame=cfg.rollout_anchor or None)
        make_pool(model, path, cfg.rollout_chains, cfg.rollout_seconds, cfg.seed, cfg.rollout_two_objects)
    pool = RolloutPool.load(path)
    if cfg.causal_chunk:
        log(f"rollouts: {len(pool.videos)} streams, {len(pool.chunk_starts)} chunks each, "
            f"in {cfg.rollout_frac:.0%} of 10-latent-frame clips")  # fmt: skip
    else:
        log(f"rollouts: {len(pool.videos)} videos, {pool.seams} seams each, "
            f"in {cfg.rollout_frac:.0%} of segment-long clips")  # fmt: skip
    return pool


def _initial_model(cfg: TrainConfig, log: Callable[[str], None]):
    """(transformer, encoder) to train: fresh, or `cfg.init`'s weights, widened to `cfg.heads`
    attention heads and grown to `cfg.layers` blocks."""
    if not cfg.init:
        return build_fresh(cfg.seed, cfg.layers or None, cfg.heads or None)
    from safetensors.torch import load_file

    state = load_file(cfg.init)
    have, have_heads = weights_size(cfg.init)
    layers, heads = cfg.layers or have, cfg.heads or have_heads
    if layers < have:
        raise ValueError(f"layers {layers}: the init weights {cfg.init} hold {have} transformer blocks")
    if heads != have_heads:
        log(f"init: widening {cfg.init}'s {have_heads} attention heads to {heads}")
        state = grow_width(state, heads, cfg.seed)
    if layers > have:
        log(f"init: growing {cfg.init}'s {have} transformer blocks to {layers}")
        state = grow_layers(state, layers)
    transformer, encoder = build_fresh(cfg.seed, layers, heads)
    load_state(transformer, encoder, state, cfg.init)
    return transformer, encoder


def train_builtin(
    cfg: TrainConfig,
    workdir: str | os.PathLike,
    *,
    output: str | os.PathLike = WEIGHTS_FILE,
    log: Callable[[str], None] = print,
) -> Path:
    """Train (resuming from `workdir/checkpoint.pt` if present) and write the EMA weights to `output`."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    transformer, encoder = _initial_model(cfg, log)
    if cfg.exact_layout:
        encoder.layout.lock()
    if cfg.blank_bounce:
        encoder.layout.add_blank()
    ema = {k: v.detach().clone() for k, v in _named_state(transformer, encoder).items()}
    params = [p for m in (transformer, encoder) for p in m.parameters()]
    opt = build_optimizer(cfg, transformer, encoder)
    ckpt = workdir / "checkpoint.pt"
    # A time-budgeted run's step count is unknown until some steps are timed; they are warm-up steps,
    # whose learning rate does not depend on it (a checkpoint from before that holds no count).
    start, total = 0, None if cfg.minutes > 0 else cfg.steps
    if ckpt.is_file():
        ema, start, total = _resume(ckpt, cfg, transformer, encoder, opt, total, log)
    codec = PixelCodec(4, 4)
    pool = _rollout_pool(cfg, log)
    transformer.train()
    encoder.train()
    forward = transformer
    if cfg.compile and not cfg.causal_chunk:
        forward = torch.compile(transformer, dynamic=False)
        log("torch.compile: the first step of each clip shape compiles it (about a minute each on 2 cores)")
    t0, losses = time.perf_counter(), []
    began, step = t0, start
    # The speed probe times only steps whose batch shape ran before, so compiling is not mistaken
    # for the step rate (it is still in the elapsed time the budget subtracts).
    shapes: set[tuple[int, ...]] = set()
    timed, timed_s = 0, 0.0
    while total is None or step < total:
        if total is None and (timed == BUDGET_PROBE or step >= cfg.warmup):
            elapsed = time.perf_counter() - began
            rate = timed / timed_s if timed else (step - start) / max(elapsed, 1e-9)
            total = budget_steps(cfg, step, rate, elapsed)
            log(f"time budget {cfg.minutes:g} min: {total} steps at {rate:.2f} steps/s (the same run: --steps {total})")
        t_step = time.perf_counter()
        batch = own_context(transformer, encoder, make_batch(cfg, step, codec), cfg, step)
        batch = mix_rollouts(batch, pool, cfg.rollout_frac, cfg.seed, step, cfg.shift, codec, cfg.anchor_frac,
                             cfg.causal_chunk, cfg.rollout_lookback)  # fmt: skip
        for group in opt.param_groups:
            group["lr"] = learning_rate(cfg, step, total)
        try:
            loss = _backward(forward, encoder, opt, batch, cfg)
        except Exception as exc:  # a compiler that cannot build here; the eager rerun raises real errors
            if forward is transformer:
                raise
            log(
                f"torch.compile failed ({type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}); training eagerly"
            )
            forward = transformer
            loss = _backward(forward, encoder, opt, batch, cfg)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        shape = tuple(batch[0].shape)  # the latents' shape: one compiled graph each
        if shape in shapes:
            timed, timed_s = timed + 1, timed_s + time.perf_counter() - t_step
        shapes.add(shape)
        _update_ema(ema, transformer, encoder, cfg.ema, step)
        losses.append(loss.item())
        if (step + 1) % 50 == 0:
            rate = 50 / (time.perf_counter() - t0)
            log(f"step {step + 1}/{total or '?'} loss {np.mean(losses):.4f} "
                f"lr {learning_rate(cfg, step, total):.2e} {rate:.2f} steps/s")  # fmt: skip
            t0, losses = time.perf_counter(), []
        step += 1
        if step % cfg.checkpoint_every == 0 or step == total:
            _save_checkpoint(ckpt, transformer, encoder, ema, opt, step, total, cfg)
        if cfg.snapshot_every and step % cfg.snapshot_every == 0:
            export_weights(ema, workdir / f"ema-{step:06d}.safetensors")
    return export_weights(ema, output)


def _resume(ckpt: Path, cfg: TrainConfig, transformer: torch.nn.Module, encoder: torch.nn.Module, opt: Any,
            total: int | None, log: Callable[[str], None]) -> tuple[dict[str, torch.Tensor], int, int | None]:  # fmt: skip
    """Load `ckpt` into the models and optimiser: (EMA weights, step reached, step count)."""
    state = torch.load(ckpt, weights_only=False)
    if state["config"] != asdict(cfg):
        log(f"note: {ckpt} was written with another config; resuming anyway with the new one")
    if (was := state["config"].get("optimizer", "adamw")) != cfg.optimizer:
        raise InvalidOption("--optimizer", cfg.optimizer, f"{ckpt} was trained with {was!r}: resume with "
                            f"--optimizer {was}, or start a new --workdir")  # fmt: skip
    transformer.load_state_dict(state["transformer"])
    encoder.load_state_dict(state["text"])
    opt.load_state_dict(state["optimizer"])
    if cfg.minutes > 0:  # a budgeted run keeps the step count it set (none if it stopped before)
        total = state.get("total_steps", total)
    log(f"resumed from step {state['step']}")
    return state["ema"], state["step"], total


def _save_checkpoint(ckpt: Path, transformer: torch.nn.Module, encoder: torch.nn.Module, ema: dict[str, torch.Tensor],
                     opt: Any, step: int, total: int | None, cfg: TrainConfig) -> None:  # fmt: skip
    """Write the whole training state to `ckpt` atomically (a crash leaves the previous one)."""
    tmp = ckpt.with_suffix(".tmp")
    torch.save({"transformer": transformer.state_dict(), "text": encoder.state_dict(), "ema": ema,
                "optimizer": opt.state_dict(), "step": step, "total_steps": total, "config": asdict(cfg)}, tmp)  # fmt: skip
    os.replace(tmp, ckpt)


@torch.no_grad()
def _update_ema(ema: dict[str, torch.Tensor], transformer: torch.nn.Module, encoder: torch.nn.Module,
                rate: float, step: int) -> None:  # fmt: skip
    """Move the EMA weights toward the current ones; the decay ramps up over the first steps."""
    decay = min(rate, (1 + step) / (10 + step))
    for k, v in _named_state(transformer, encoder).items():
        ema[k].mul_(decay).add_(v.detach(), alpha=1 - decay)


def _backward(transformer: Any, encoder: Any, opt: Any, batch: Batch, cfg: TrainConfig) -> torch.Tensor:
    """The loss of `batch`, its gradients computed (not yet applied)."""
    loss = flow_matching_loss(transformer, encoder, batch.latents, batch.sigmas, batch.noise, batch.captions, cfg.loss,
                              cfg.causal_chunk, cfg.v_floor, batch.frames, cfg.motion_weight, batch.context,
                              batch.positions)  # fmt: skip
    if cfg.exact_layout:
        loss = loss + LAYOUT_GATE_WEIGHT * layout_gate_loss(encoder, batch.captions)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    return loss


def _named_state(transformer: torch.nn.Module, encoder: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {f"transformer.{k}": v for k, v in transformer.state_dict().items()}
    out.update({f"text.{k}": v for k, v in encoder.state_dict().items()})
    return out


def export_weights(state: dict[str, torch.Tensor], output: str | os.PathLike) -> Path:
    """Write weights as fp32 safetensors (with the transformer config in the metadata), atomically."""
    from safetensors.torch import save_file

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_suffix(".tmp")
    save_file({k: v.detach().float().contiguous() for k, v in state.items()}, str(tmp),
              metadata={"config": repr(transformer_config(*state_size(state)))})  # fmt: skip
    os.replace(tmp, output)
    return output
