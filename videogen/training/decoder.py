"""Training the built-in codec's temporal decoder (`videogen train decoder`;
`videogen.models.refiner.TemporalRefiner`).

The decoder learns to turn the transformer's own output into the clean clip: pairs are the
transformer's one-step clean prediction of a scene clip noised to a low sigma (its 4-frame steps,
ragged edges and colour offsets, with the objects at the clip's own places, as `benchmarks/stutter.py`
measures them) and the clip itself. The pairs are made once, up front, from the weights named
(default: the shipped `builtin.safetensors`); then two stages of AdamW on the pixel L1 error (L1:
a moving edge is either here or there, and the median keeps it sharp where a mean would smear
it), the second at half the learning rate. Everything is a function of the seed. The figures are in docs/builtin-model.md ("The temporal decoder").
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from videogen.models.refiner import GROUP, TemporalRefiner, save_refiner

FRAMES = 33  # a clip: the built-in preset's segment (9 latent frames)
SIZE = 64


@dataclass
class DecoderConfig:
    clips: int = 3200  # training pairs (clips of 33 frames)
    held_out: int = 96  # more, from another seed, for the log's held-out error
    # (steps, peak learning rate) per stage; each stage decays its rate on a cosine to 0
    stages: tuple[tuple[int, float], ...] = ((1050, 2e-3), (1800, 1e-3))
    batch: int = 32  # latent frames (each with the one before it) per step
    width: int = 32
    sigma: tuple[float, float] = (0.03, 0.43)  # the pairs' noise levels: low, where the output is drawn
    weights: str = ""  # the transformer weights whose output it learns ("": the shipped builtin.safetensors)
    seed: int = 0


def make_pairs(cfg: DecoderConfig, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(model, truth, captions): uint8 (n, FRAMES, SIZE, SIZE, 3) each; the transformer's one-step
    clean prediction of `n` random scene clips (any motion, one or two objects, anywhere on the
    clock), the clips, and their captions."""
    from videogen.models.builtin import WEIGHTS_FILE, build_fresh, load_weights, weights_size
    from videogen.models.codec import PixelCodec, uint8_to_video, video_to_uint8
    from videogen.training.loss import predict_clean
    from videogen.training.scenes import random_scene, render_scene

    path = cfg.weights or WEIGHTS_FILE
    transformer, encoder = build_fresh(0, *weights_size(path))
    load_weights(transformer, encoder, path)
    transformer.eval()
    codec = PixelCodec()
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    model = np.empty((n, FRAMES, SIZE, SIZE, 3), np.uint8)
    truth = np.empty_like(model)
    captions: list[str] = []
    lo, hi = cfg.sigma
    for i in range(0, n, 8):
        b = min(8, n - i)
        scenes = [random_scene(rng) for _ in range(b)]
        starts = [rng.uniform(0, 200) for _ in range(b)]
        clips = [render_scene(s, FRAMES, SIZE, start=t) for s, t in zip(scenes, starts)]
        latents = codec.encode(torch.cat([uint8_to_video(c) for c in clips]))
        captions += [s.caption() for s in scenes]
        text = encoder.encode_train(captions[-b:])
        f = latents.shape[2]
        clock = torch.arange(f, dtype=torch.float64)[None] + torch.tensor(starts, dtype=torch.float64)[:, None] / 4
        sigma = lo + (hi - lo) * torch.rand(b, 1, generator=g) ** 1.5  # more of them near clean
        noise = torch.randn(latents.shape, generator=g)
        s5 = sigma.view(b, 1, 1, 1, 1)
        with torch.no_grad():
            x0 = predict_clean(transformer, encoder, (1 - s5) * latents + s5 * noise, sigma.expand(b, f), text, clock)
        for j in range(b):
            model[i + j] = video_to_uint8(codec.decode(x0[j : j + 1]))
            truth[i + j] = clips[j]
    return model, truth, captions


def _groups(frames: np.ndarray) -> np.ndarray:
    """(n, 4k+1, ...) -> (n, 4(k+1), ...): the first frame stored GROUP times, as the codec does."""
    return np.concatenate([np.repeat(frames[:, :1], GROUP - 1, axis=1), frames], axis=1)


def _video(frames: np.ndarray) -> torch.Tensor:
    """uint8 (..., T, H, W, 3) -> float (..., 3, T, H, W) in [-1, 1]."""
    return (torch.from_numpy(np.ascontiguousarray(frames)).float() / 127.5 - 1).movedim(-1, -4)


def held_out_error(refiner: TemporalRefiner, model: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    """Mean |error| in 8-bit levels of the frames after the first latent frame: (as drawn, decoded)."""
    with torch.no_grad():
        out = refiner.eval().refine(_video(_groups(model)))
    decoded = ((out.movedim(-4, -1) + 1) * 127.5).round().clamp(0, 255).to(torch.uint8).numpy()[:, GROUP:]
    t = _groups(truth)[:, GROUP:].astype(np.int16)
    return float(np.abs(_groups(model)[:, GROUP:] - t).mean()), float(np.abs(decoded - t).mean())


def train_decoder(cfg: DecoderConfig, output: str | Path, log: Callable[[str], None] = print) -> Path:
    """Make the pairs, train, write the decoder to `output`; returns its path."""
    t0 = time.time()
    model, truth, _ = make_pairs(cfg, cfg.clips, cfg.seed)
    val_model, val_truth, _ = make_pairs(cfg, cfg.held_out, cfg.seed + 1_000_003)
    log(f"pairs: {cfg.clips} clips in {time.time() - t0:.0f} s")
    model, truth = _groups(model), _groups(truth)
    torch.manual_seed(cfg.seed)
    refiner = TemporalRefiner(cfg.width)
    rng = np.random.default_rng(cfg.seed)
    latent_frames = model.shape[1] // GROUP
    for stage, (steps, lr) in enumerate(cfg.stages):
        opt = torch.optim.AdamW(refiner.parameters(), lr=lr, weight_decay=0.0)
        refiner.train()
        for step in range(steps):
            for group in opt.param_groups:
                group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
            clip = rng.integers(0, len(model), cfg.batch)
            at = rng.integers(1, latent_frames, cfg.batch)
            inp = _video(np.stack([model[c, GROUP * (a - 1) : GROUP * (a + 1)] for c, a in zip(clip, at)]))
            target = _video(np.stack([truth[c, GROUP * a : GROUP * (a + 1)] for c, a in zip(clip, at)]))
            loss = (refiner(inp) - target).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if (step + 1) % 200 == 0 or step + 1 == steps:
                log(f"stage {stage + 1} step {step + 1}/{steps} loss {loss.item():.4f} ({time.time() - t0:.0f} s)")
        raw, refined = held_out_error(refiner, val_model, val_truth)
        log(f"stage {stage + 1}: held-out error {raw:.2f} -> {refined:.2f} (8-bit levels)")
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_refiner(refiner.eval(), out)
    return out
