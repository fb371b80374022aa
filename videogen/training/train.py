"""Training the built-in model on procedural scenes (`videogen train builtin`).

Flow matching as in Wan: x_sigma = (1 - sigma) * x0 + sigma * noise, the loss is on the velocity
(noise - x0), sigma drawn uniformly then shifted (shift 3, as the sampler uses) so the high-noise
steps that fix the layout get enough training. Unlike Wan (which predicts the velocity in a VAE's
16-channel latent space), the built-in model works on raw pixels: one token is 4x8x8x3 = 768
pixel values through a 128-wide transformer, which cannot reproduce 768-dimensional white noise
(measured: a velocity-predicting model stalled at the predict-nothing loss). So it predicts the
clean sample and the velocity is derived from it (x-prediction with a v-loss, as in "Back to
Basics: Let Denoising Generative Models Denoise", Li & He 2025): clean pixels lie on a
low-dimensional manifold a narrow model can represent. Noise levels are per latent frame:

    35%  continuation: the first P in 1..4 latent frames clean (timestep 0), the rest at one sigma
    25%  diffusion forcing: an independent sigma for every latent frame
    40%  one sigma for the whole clip (as every still image), 40% of them in [0.85, 1]

so one model generates from scratch and continues from a clean prefix (the chained-segment
handoff). 10% of captions are dropped (empty prompt) so classifier-free guidance works.
The optimiser is Muon for the hidden weight matrices and AdamW for the rest (`build_optimizer`):
it reaches the adherence that AdamW needed ~20,000 steps for in ~10,000 (docs/architecture.md).

Every batch is a pure function of (seed, step): a resumed run sees exactly the data the
uninterrupted run would. `minutes` fits a run into a wall-time budget on whatever CPU it meets:
the step count is set from the speed of the first steps, which are still warm-up (whose learning
rate does not depend on the step count; a step that compiles a new clip shape is not timed), so
the run is exactly `--steps N` for the N it logs.
Checkpoints (model, EMA, optimiser, step, step count) are written atomically every
`checkpoint_every` steps; the shipped weights are the EMA weights.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from videogen.errors import InvalidOption
from videogen.models.builtin import TRANSFORMER_CONFIG, WEIGHTS_FILE, build_fresh, load_weights
from videogen.models.codec import PixelCodec, uint8_to_video
from videogen.training.scenes import canonical_start, random_scene, render_scene


@dataclass
class TrainConfig:
    # The shipped recipe: what `--minutes 60` set on the 2-core CPU the shipped weights were trained
    # on (3.27 steps/s over its first steps). With Muon it scores adherence 1.0 on 24 held-out
    # prompts (0.96 on 72); its EMA weights every 2,000 steps scored 0.13 / 0.50 / 0.79 / 0.79 / 1.0.
    steps: int = 11739
    # Clips of 5 and 9 latent frames (17 and 33 frames; 64 tokens per latent frame). The built-in
    # preset renders 2 s segments (9 latent frames) and chains them, so training never needs the
    # quadratic cost of long clips; 2,048 tokens per batch is ~0.2-0.5 s per step on 2 cores (by CPU).
    batch_tokens: int = 2048
    # Clip lengths in latent frames, drawn uniformly per batch. 1 = a still image (as Wan trains on
    # images too): 32 scenes per batch teach shapes and colours fast; 9 = the preset's segment.
    latent_frames: tuple[int, ...] = (1, 1, 3, 5, 9, 9)
    # "v": the velocity implied by the predicted sample vs the true one (x0 error / sigma^2; sharp
    # detail); "x0": the clean sample (layout at high noise); "hybrid": both (x0 error weighted
    # 1/sigma^2 + 4), which keeps the v-loss's detail and weights high noise 5x more.
    loss: str = "hybrid"
    # The v-loss's 1/sigma^2 weight is capped at 1/v_floor^2: uncapped (floor 0.05, up to 400x) the
    # near-clean samples outweighed the high-noise ones ~20:1, and the model learned sharp detail
    # but never where a caption puts its object (measured: every motion word drew a centred blob).
    v_floor: float = 0.5
    # Weight of the temporal-difference term (`flow_matching_loss`): the error of each frame's
    # change from the frame before, within a latent frame's 4 video frames. 0: off (the recipe).
    # Measured as a fine-tune of the shipped weights: W 64 raised `motion_smoothness` 0.05 -> 0.22
    # but by eye the motion still steps and edges get notches (docs/architecture.md, stutter).
    motion_weight: float = 0.0
    causal_chunk: int = 0  # > 0: block-causal attention over chunks of this many latent frames
    init: str = ""  # weights file to start from (fine-tuning, e.g. the causal variant from the base)
    # "muon": Muon (`videogen.training.optim`) for the hidden weight matrices, AdamW for embeddings, the
    # input and output layers, norms, biases and tables; "adamw": AdamW for everything. Measured
    # (benchmarks/optimizer.py, 1,500 steps, held-out x0 error): AdamW at 1e-3 0.0399, Muon at 1e-3
    # 0.0342, 2e-3 0.0291, 4e-3 0.0282, 8e-3 0.0268 (less stable at pure noise); ~45 ms of a ~314 ms step.
    optimizer: str = "muon"
    lr: float = 2e-3
    muon_momentum: float = 0.95
    warmup: int = 200
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    ema: float = 0.999
    caption_dropout: float = 0.1
    layout_frac: float = 0.4  # fresh clips drawn at sigma in [0.85, 1] (see `_fresh_sigma`)
    shift: float = 3.0
    seed: int = 0
    checkpoint_every: int = 250
    # > 0: also keep the EMA weights every this many steps (`workdir/ema-STEP.safetensors`), so one
    # run gives its adherence-vs-steps curve (`VIDEOGEN_BUILTIN_WEIGHTS=... videogen eval builtin`)
    snapshot_every: int = 0
    size: int = 64
    # > 0: ignore `steps` and run as many as fit in about this many minutes (see `_budget_steps`)
    minutes: float = 0.0
    # torch.compile the transformer (inductor, one static graph per clip shape): fuses the
    # element-wise ops (per-token modulation, RoPE, norms; about a quarter of this small model's
    # eager step). Falls back to eager where it cannot build (no C compiler); the block-causal
    # variant stays eager.
    compile: bool = True


BUDGET_PROBE = 50  # steps timed to set a time-budgeted run's step count (within the warm-up)


def _shifted(u: torch.Tensor, shift: float) -> torch.Tensor:
    return shift * u / (1 + (shift - 1) * u)


def _fresh_sigma(cfg: TrainConfig, g: torch.Generator) -> torch.Tensor:
    """One noise level for a clip made from scratch: the shifted-uniform draw, or with probability
    `cfg.layout_frac` one in [0.85, 1], where the input holds almost nothing and the prediction
    must come from the caption alone (which object goes where): that is the only place the model
    learns the layout a caption implies, and a plain draw puts only ~1 sample in 15 there."""
    u = torch.rand(2, generator=g)
    if u[0] < cfg.layout_frac:
        return 0.85 + 0.15 * u[1:]
    return _shifted(u[1:], cfg.shift)


def make_batch(cfg: TrainConfig, step: int, codec: PixelCodec):
    """(latents (B,C,F,h,w), sigmas (B,F), noise, captions, frames (B,F)) for `step`, deterministic
    from (seed, step). `frames`: each clip's latent frames' indices in its video (0..F-1; for the
    causal variant, a clip that continues a clean first frame sits anywhere in a long stream)."""
    rng = random.Random(cfg.seed * 1_000_003 + step)
    frames_lat = rng.choice(cfg.latent_frames)
    if cfg.causal_chunk:  # the first frame alone, then whole chunks (at least two: context + generated)
        frames_lat = 1 + cfg.causal_chunk * max(2, -(-(frames_lat - 1) // cfg.causal_chunk))
    tokens_per_clip = frames_lat * (cfg.size // 8) ** 2
    batch = max(1, cfg.batch_tokens // tokens_per_clip)
    num_frames = 4 * (frames_lat - 1) + 1
    g = torch.Generator().manual_seed(cfg.seed * 7_919 + step)
    sigmas = torch.empty(batch, frames_lat)
    clips, captions = [], []
    frames = torch.arange(frames_lat, dtype=torch.float64).repeat(batch, 1)
    for b in range(batch):
        mode = rng.random()
        if cfg.causal_chunk:
            # Independent noise per chunk; each earlier chunk is clean (the KV cache's clean-context
            # pass) with probability 1/2, so both teacher-forced and diffusion-forced contexts occur.
            n_chunks = 1 + (frames_lat - 1) // cfg.causal_chunk
            per_chunk = _shifted(torch.rand(n_chunks, generator=g), cfg.shift)
            clean = torch.tensor([rng.random() < 0.5 for _ in range(n_chunks - 1)] + [False])
            sizes = torch.tensor([1] + [cfg.causal_chunk] * (n_chunks - 1))
            sigmas[b] = torch.where(clean, 0.0, per_chunk).repeat_interleave(sizes)
        elif frames_lat == 1 or mode >= 0.6:
            sigmas[b] = _fresh_sigma(cfg, g)
        elif mode < 0.35:
            p = rng.randint(1, min(4, frames_lat - 1))
            sigmas[b] = _shifted(torch.rand(1, generator=g), cfg.shift)
            sigmas[b, :p] = 0.0
        else:
            sigmas[b] = _shifted(torch.rand(frames_lat, generator=g), cfg.shift)
        scene = random_scene(rng)
        if sigmas[b, 0] > 0:  # made from scratch (no clean first frame): the canonical layout
            scene, start = canonical_start(scene, rng), 0.0
        elif rng.random() < 0.5:
            # Continues a clean prefix, later in a video that began with the canonical layout: the
            # clock (`frames`, what the moving frames see) is the video's, as when rendering
            # chains segments (`videogen.rendering.render.segment_times`) or streaming, so prefix and
            # moving frames agree.
            scene, start = canonical_start(scene, rng), rng.uniform(0, 400)
            frames[b] += start / 4
        else:
            # Continues a prefix that is anywhere at any time (an extended video, a start image,
            # a prompt switch): the clock says nothing, so only the prefix can tell where it is.
            start = rng.uniform(0, 400)
            frames[b] += rng.uniform(0, 100)
        clips.append(render_scene(scene, num_frames, cfg.size, start=start))
        captions.append("" if rng.random() < cfg.caption_dropout else scene.caption())
    video = torch.cat([uint8_to_video(c) for c in clips])  # (B, 3, T, H, W)
    latents = codec.encode(video)
    noise = torch.randn(latents.shape, generator=g)
    return latents, sigmas, noise, captions, frames


def flow_matching_loss(transformer, encoder, latents, sigmas, noise, captions, loss: str = "hybrid",
                       causal_chunk: int = 0, v_floor: float = 0.5, frames=None,
                       motion_weight: float = 0.0) -> torch.Tensor:  # fmt: skip
    """x-prediction: the transformer predicts the clean latents. `loss="x0"` compares them with
    the true ones; `loss="v"` compares the velocity they imply with the true one (see
    `videogen.sampling.loop.velocity_from_sample`), i.e. the x0 error weighted by 1/sigma^2 (capped at
    1/v_floor^2); "hybrid" is their sum with the x0 term weighted 4.

    `motion_weight` > 0 adds, under the same per-sample weight, the squared error of the
    frame-to-frame change inside each latent frame (the codec's 4 video frames of one token): an
    error shared by all 4 frames (a shape drawn a little off) adds nothing, while drawing the 4
    frames alike where the object moves (4 Hz stutter) is an error on every moving edge in
    every frame step."""
    b, c, f, h, w = latents.shape
    s = sigmas.view(b, 1, f, 1, 1)
    noisy = (1 - s) * latents + s * noise
    tokens_per_frame = (h // 2) * (w // 2)
    timestep = (sigmas * 1000).repeat_interleave(tokens_per_frame, dim=1)  # (B, N) per-token timesteps
    text = encoder.encode_train(captions)
    inputs = encoder.condition(noisy, None, text, frames)
    if causal_chunk:
        from videogen.streaming.stream import block_causal_forward

        x0 = block_causal_forward(transformer, inputs, timestep, text, causal_chunk)
    else:
        x0 = transformer(hidden_states=inputs, timestep=timestep, encoder_hidden_states=text, return_dict=False)[0]
    weight = (sigmas > 0).float().view(b, 1, f, 1, 1)  # clean prefix frames carry no loss
    # The velocity error is the x0 error / sigma (x_sigma - sigma v = x0 exactly), so the v-loss is
    # the x0 loss weighted 1/sigma^2; only that weight is capped, at 1/v_floor^2 (flooring sigma
    # inside the implied velocity instead would move the target below the floor, not just weight it).
    v_weight = 1 / s.clamp_min(v_floor) ** 2
    if loss == "v":
        per_sample = v_weight
    elif loss == "x0":
        per_sample = torch.ones_like(v_weight)
    elif loss == "hybrid":
        per_sample = v_weight + 4
    else:
        raise ValueError(f"loss must be 'x0', 'v' or 'hybrid', got {loss!r}")
    err = x0 - latents
    err2 = err**2
    if motion_weight:
        err2 = err2 + motion_weight * _frame_step_err2(err)
    err2 = per_sample * err2
    return (err2 * weight).sum() / (weight.sum() * c * h * w).clamp_min(1)


def _frame_step_err2(err: torch.Tensor) -> torch.Tensor:
    """Per latent channel, the squared error of the change between consecutive video frames of
    one latent frame (`PixelCodec` layout: channels are (3, tf, s, s)); the first frame of each
    group has no earlier frame in its token and gets 0. Same shape as `err`."""
    b, c, f, h, w = err.shape
    tf = PixelCodec().temporal_factor
    e = err.view(b, 3, tf, c // (3 * tf), f, h, w)
    step = torch.cat([torch.zeros_like(e[:, :, :1]), e[:, :, 1:] - e[:, :, :-1]], dim=2)
    return (step**2).view(b, c, f, h, w)


VALIDATION_SEED = 515151  # disjoint from training's (seed * 1_000_003 + step) and the evaluator's


@torch.no_grad()
def validation_error(transformer, encoder, *, sigmas=(0.3, 0.6, 0.9, 1.0), clips: int = 16,
                     latent_frames: int = 9, size: int = 64) -> dict[str, dict[float, float]]:  # fmt: skip
    """x0 error (mean squared, in [-1, 1] pixel units) of fresh clips of held-out scenes at each
    noise level, for colour/shape pairs seen in training and the never-shown `HELD_OUT` pairs:
    {"seen": {sigma: error}, "unseen": {...}}. The same clips and noise every call, so two models
    (or two points of a run) compare on equal terms; cheaper and less noisy than adherence, which
    needs a rendered, detected video per prompt. High noise levels measure the layout a caption
    implies, low ones the object's shape and edges."""
    codec = PixelCodec(4, 4)
    num_frames = 4 * (latent_frames - 1) + 1
    was_training = transformer.training, encoder.training
    transformer.eval()
    encoder.eval()
    out = {}
    for group in ("seen", "unseen"):
        rng = random.Random(VALIDATION_SEED + (group == "unseen"))
        held_out = "only" if group == "unseen" else "exclude"
        scenes = [canonical_start(random_scene(rng, held_out=held_out, max_objects=1), rng) for _ in range(clips)]
        latents = codec.encode(torch.cat([uint8_to_video(render_scene(s, num_frames, size)) for s in scenes]))
        noise = torch.randn(latents.shape, generator=torch.Generator().manual_seed(VALIDATION_SEED))
        captions = [s.caption() for s in scenes]
        out[group] = {}
        for sigma in sigmas:
            err = 0.0
            for i in range(0, clips, 4):  # 4 clips (2,304 tokens) a forward pass
                sl = slice(i, i + 4)
                sig = torch.full((latents[sl].shape[0], latent_frames), float(sigma))
                loss = flow_matching_loss(transformer, encoder, latents[sl], sig, noise[sl], captions[sl], "x0")
                err += loss.item() * sig.shape[0]
            out[group][float(sigma)] = err / clips
    transformer.train(was_training[0])
    encoder.train(was_training[1])
    return out


def _lr(cfg: TrainConfig, step: int, total: int | None = None) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    total = cfg.steps if total is None else total
    progress = (step - cfg.warmup) / max(1, total - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


# Layers that stay with AdamW under Muon: the input (patch embedding) and output (proj_out) layers,
# word embeddings, and the caption layout (its only matrix is the 5 x 64 gate, a row per moving frame).
ADAMW_ONLY = ("patch_embedding", "proj_out", "embed.weight", "layout.")


def build_optimizer(cfg: TrainConfig, transformer, encoder):
    """AdamW, or Muon for the hidden matrices + AdamW for the rest (`cfg.optimizer`)."""
    from videogen.training.optim import Muon, Optimizers, muon_split

    adamw = dict(lr=cfg.lr, betas=(0.9, 0.99), weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW([p for m in (transformer, encoder) for p in m.parameters()], **adamw)
    if cfg.optimizer != "muon":
        raise ValueError(f"optimizer must be 'adamw' or 'muon', got {cfg.optimizer!r}")
    named = [(f"transformer.{n}", p) for n, p in transformer.named_parameters()]
    named += [(f"text.{n}", p) for n, p in encoder.named_parameters()]
    hidden, fused, rest = muon_split(named, exclude=ADAMW_ONLY)
    groups = [{"params": hidden}] + [{"params": [p], "blocks": k} for p, k in fused]
    muon = Muon(groups, lr=cfg.lr, momentum=cfg.muon_momentum, weight_decay=cfg.weight_decay)
    return Optimizers(muon, torch.optim.AdamW(rest, **adamw))


def _budget_steps(cfg: TrainConfig, step: int, rate: float, elapsed: float) -> int:
    """A time-budgeted run's step count, at `step` after `elapsed` seconds at `rate` steps/s: what
    fits in the rest of `cfg.minutes` (at least one step past the warm-up)."""
    return max(step, cfg.warmup + 1, step + int(rate * (cfg.minutes * 60 - elapsed)))


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
    transformer, encoder = build_fresh(cfg.seed)
    if cfg.init:
        load_weights(transformer, encoder, cfg.init)
    ema = {k: v.detach().clone() for k, v in _named_state(transformer, encoder).items()}
    params = [p for m in (transformer, encoder) for p in m.parameters()]
    opt = build_optimizer(cfg, transformer, encoder)
    start = 0
    # A time-budgeted run's step count is unknown until some steps are timed; they are warm-up steps,
    # whose learning rate does not depend on it (a checkpoint from before that holds no count).
    total = None if cfg.minutes > 0 else cfg.steps
    ckpt = workdir / "checkpoint.pt"
    if ckpt.is_file():
        state = torch.load(ckpt, weights_only=False)
        if state["config"] != asdict(cfg):
            log(f"note: {ckpt} was written with another config; resuming anyway with the new one")
        if (was := state["config"].get("optimizer", "adamw")) != cfg.optimizer:
            raise InvalidOption("--optimizer", cfg.optimizer, f"{ckpt} was trained with {was!r}: resume with "
                                f"--optimizer {was}, or start a new --workdir")  # fmt: skip
        transformer.load_state_dict(state["transformer"])
        encoder.load_state_dict(state["text"])
        opt.load_state_dict(state["optimizer"])
        ema = state["ema"]
        start = state["step"]
        total = state.get("total_steps", total) if cfg.minutes > 0 else total
        log(f"resumed from step {start}")
    codec = PixelCodec(4, 4)
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
    shapes, timed, timed_s = set(), 0, 0.0
    while total is None or step < total:
        if total is None and (timed == BUDGET_PROBE or step >= cfg.warmup):
            elapsed = time.perf_counter() - began
            rate = timed / timed_s if timed else (step - start) / max(elapsed, 1e-9)
            total = _budget_steps(cfg, step, rate, elapsed)
            log(f"time budget {cfg.minutes:g} min: {total} steps at {rate:.2f} steps/s (the same run: --steps {total})")
        t_step = time.perf_counter()
        batch = make_batch(cfg, step, codec)
        for group in opt.param_groups:
            group["lr"] = _lr(cfg, step, total)
        try:
            loss = _backward(forward, encoder, opt, batch, cfg)
        except Exception as exc:  # a compiler that cannot build here; the eager rerun raises real errors
            if forward is transformer:
                raise
            log(f"torch.compile failed ({type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}); training eagerly")
            forward = transformer
            loss = _backward(forward, encoder, opt, batch, cfg)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        shape = tuple(batch[0].shape)  # the latents' shape: one compiled graph each
        if shape in shapes:
            timed, timed_s = timed + 1, timed_s + time.perf_counter() - t_step
        shapes.add(shape)
        with torch.no_grad():
            decay = min(cfg.ema, (1 + step) / (10 + step))
            for k, v in _named_state(transformer, encoder).items():
                ema[k].mul_(decay).add_(v.detach(), alpha=1 - decay)
        losses.append(loss.item())
        if (step + 1) % 50 == 0:
            rate = 50 / (time.perf_counter() - t0)
            log(f"step {step + 1}/{total or '?'} loss {np.mean(losses):.4f} lr {_lr(cfg, step, total):.2e} {rate:.2f} steps/s")
            t0, losses = time.perf_counter(), []
        step += 1
        if step % cfg.checkpoint_every == 0 or step == total:
            tmp = ckpt.with_suffix(".tmp")
            torch.save({"transformer": transformer.state_dict(), "text": encoder.state_dict(), "ema": ema,
                        "optimizer": opt.state_dict(), "step": step, "total_steps": total, "config": asdict(cfg)}, tmp)  # fmt: skip
            os.replace(tmp, ckpt)
        if cfg.snapshot_every and step % cfg.snapshot_every == 0:
            export_weights(ema, workdir / f"ema-{step:06d}.safetensors")
    return export_weights(ema, output)


def _backward(transformer, encoder, opt, batch, cfg: TrainConfig) -> torch.Tensor:
    latents, sigmas, noise, captions, frames = batch
    loss = flow_matching_loss(transformer, encoder, latents, sigmas, noise, captions, cfg.loss, cfg.causal_chunk,
                              cfg.v_floor, frames, cfg.motion_weight)  # fmt: skip
    opt.zero_grad(set_to_none=True)
    loss.backward()
    return loss


def _named_state(transformer, encoder) -> dict[str, torch.Tensor]:
    out = {f"transformer.{k}": v for k, v in transformer.state_dict().items()}
    out.update({f"text.{k}": v for k, v in encoder.state_dict().items()})
    return out


def export_weights(state: dict[str, torch.Tensor], output: str | os.PathLike) -> Path:
    from safetensors.torch import save_file

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_suffix(".tmp")
    save_file({k: v.detach().float().contiguous() for k, v in state.items()}, str(tmp),
              metadata={"config": repr(TRANSFORMER_CONFIG)})  # fmt: skip
    os.replace(tmp, output)
    return output
