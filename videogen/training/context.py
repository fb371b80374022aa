"""Training against the model's own errors: the context a continuation sees, made by the model.

A chained segment continues the previous segment's last latent frames, and a stream chunk the
chunks before it: at run time that context is the model's *own* output (ragged edges, objects in
4-frame steps, small colour offsets), while the base recipe only ever shows it clean training
clips. The model then copies and compounds its own artefacts, segment after segment, until an
object frays, splits or vanishes (issue 20's 2-minute measurements).

`own_context` closes that gap the way Self-Forcing and diffusion forcing do, without their
cost: for a fraction of the clips that have a clean context, the context frames are replaced by
the model's own one-step prediction of the clip from its noised version (`self_context_sigma`),
computed without gradients by the weights being trained. The prediction keeps the ground
truth's layout (at those noise levels the input still shows where the object is), so the target
(the rest of the ground-truth clip) stays consistent with the context, and the model learns to
continue its own kind of output cleanly instead of amplifying it. A full multi-step rollout per
clip would cost ~10 forward passes; this costs one, on the chosen clips only.
"""

from __future__ import annotations

from typing import Any

import torch

from videogen.training.config import TrainConfig
from videogen.training.data import Batch
from videogen.training.loss import predict_clean


@torch.no_grad()
def own_context(transformer: Any, encoder: Any, batch: Batch, cfg: TrainConfig, step: int) -> Batch:
    """`batch` with the context frames of a `cfg.self_context` fraction of its clips replaced by
    the model's prediction of them; deterministic from (seed, step) given the weights. Pass the
    eager transformer: the chosen subset's batch size varies from step to step."""
    if cfg.self_context <= 0 or not bool(batch.context.any()):
        return batch
    g = torch.Generator().manual_seed(cfg.seed * 7_919 + step + 2_000_000_011)
    b, f = batch.sigmas.shape
    pick = (torch.rand(b, generator=g) < cfg.self_context) & batch.context.any(dim=1)
    lo, hi = cfg.self_context_sigma
    level = lo + (hi - lo) * torch.rand(b, generator=g)
    noise = torch.randn(batch.latents.shape, generator=g)
    idx = pick.nonzero().squeeze(1)
    if not len(idx):
        return batch
    clean = batch.latents[idx]
    s = level[idx].view(-1, 1, 1, 1, 1)
    noisy = (1 - s) * clean + s * noise[idx]
    text = encoder.encode([batch.captions[i] for i in idx.tolist()])
    was = transformer.training, encoder.training
    transformer.eval()
    encoder.eval()
    try:
        pred = predict_clean(transformer, encoder, noisy, level[idx].view(-1, 1).expand(-1, f), text,
                             batch.frames[idx], cfg.causal_chunk,
                             None if batch.positions is None else batch.positions[idx])  # fmt: skip
    finally:
        transformer.train(was[0])
        encoder.train(was[1])
    ctx = batch.context[idx].view(-1, 1, f, 1, 1)
    latents = batch.latents.clone()
    latents[idx] = torch.where(ctx, pred.float().clamp(-1, 1), clean)
    return batch._replace(latents=latents)
