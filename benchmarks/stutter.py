"""Where the built-in model's 4 Hz stutter comes from: `motion_smoothness` (videogen.training.scenes; 1 = the
motion spread evenly over frames, 0 = all of it once per latent frame) of

* the ground-truth clips (the ceiling),
* the clean tokens projected onto their own top 128 principal components, onto `proj_out`'s range
  (all the output layer can draw) and onto the patch embedding's row space (what its input layer
  lets through): what a 128-wide token could carry,
* the model's one-step x0 prediction from the clips noised to each sigma: what it does carry,
* the same decoded through the codec's temporal decoder (`videogen.models.refiner`; rows
  `decoded_sigma_*`): what the video shows.

    python benchmarks/stutter.py                     # the shipped weights and decoder
    python benchmarks/stutter.py A.safetensors B.safetensors --decoder D.safetensors

12 fresh one-object moving clips of 33 frames (fixed seed). Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import warnings

import numpy as np
import torch

SIGMAS = (0.2, 0.4, 0.6, 0.8, 0.95)


def _clips(n: int, size: int = 64):
    from videogen.training.scenes import canonical_start, random_scene, render_scene

    rng, out = random.Random(5), []
    while len(out) < n:
        scene = random_scene(rng, max_objects=1)
        if scene.objects[0].motion in ("still", "bouncing"):
            continue
        scene = canonical_start(scene, rng)
        out.append((scene, render_scene(scene, 33, size)))
    return out


def _tokens(lat: torch.Tensor) -> torch.Tensor:
    """(1, C, F, h, w) latents -> (F*h/2*w/2, C*4) patches in the patch embedding's (c, ph, pw) order."""
    _, c, f, h, w = lat.shape
    return lat.view(c, f, h // 2, 2, w // 2, 2).permute(1, 2, 4, 0, 3, 5).reshape(-1, c * 4)


def _untokens(t: torch.Tensor, shape) -> torch.Tensor:
    _, c, f, h, w = shape
    return t.view(f, h // 2, w // 2, c, 2, 2).permute(3, 0, 1, 4, 2, 5).reshape(shape)


def measure(weights: str, clips, decoder: str | None = None) -> dict:
    from videogen.models.builtin import build_fresh, load_weights
    from videogen.models.codec import PixelCodec, uint8_to_video, video_to_uint8
    from videogen.models.refiner import load_refiner
    from videogen.training.scenes import motion_smoothness, track_colour

    transformer, encoder = build_fresh(0)
    load_weights(transformer, encoder, weights)
    transformer.eval()
    codec = PixelCodec()
    decoding = PixelCodec(refiner=load_refiner(decoder)) if decoder else None
    ch = codec.latent_channels

    def smooth(video_or_latents, scene) -> float | None:
        frames = (
            video_or_latents
            if isinstance(video_or_latents, np.ndarray)
            else video_to_uint8(codec.decode(video_or_latents))
        )
        return motion_smoothness(track_colour(frames, scene.objects[0].colour), frames.shape[1])

    lats = [codec.encode(uint8_to_video(clip)) for _, clip in clips]
    every = torch.cat([_tokens(lat) for lat in lats])
    mean = every.mean(0)
    basis = torch.linalg.svd(every - mean, full_matrices=False)[2][:128]
    w_in = transformer.patch_embedding.weight.detach()[:, :ch].reshape(transformer.patch_embedding.weight.shape[0], -1)
    to_rows = w_in.T @ torch.linalg.pinv(w_in.T)  # projector onto the patch embedding's row space
    order = torch.arange(4 * ch).view(2, 2, ch).permute(2, 0, 1).reshape(-1)  # proj_out rows: (ph, pw, c)
    out_cols = torch.cat(
        [transformer.proj_out.weight.detach()[order], transformer.proj_out.bias.detach()[order, None]], 1
    )
    q = torch.linalg.qr(out_cols)[0]
    projections = {
        "pca128": lambda t: (t - mean) @ basis.T @ basis + mean,
        "proj_out_range": lambda t: t @ q @ q.T,
        "patch_embedding_rows": lambda t: t @ to_rows.T,
    }
    scores: dict[str, list[float]] = {"truth": [], **{k: [] for k in projections}, **{f"sigma_{s}": [] for s in SIGMAS}}
    if decoding is not None:
        scores.update({f"decoded_sigma_{s}": [] for s in SIGMAS})
    for i, ((scene, clip), lat) in enumerate(zip(clips, lats)):
        found = {"truth": smooth(clip, scene)}
        for name, project in projections.items():
            found[name] = smooth(_untokens(project(_tokens(lat)), lat.shape), scene)
        text = encoder.encode_train([scene.caption()])
        frames = torch.arange(lat.shape[2], dtype=torch.float64)[None]
        noise = torch.randn(lat.shape, generator=torch.Generator().manual_seed(i))
        for s in SIGMAS:
            inputs = encoder.condition((1 - s) * lat + s * noise, None, text, frames)
            timestep = torch.full((1, lat.shape[2] * lat.shape[3] * lat.shape[4] // 4), s * 1000.0)
            with torch.no_grad():
                x0 = transformer(
                    hidden_states=inputs, timestep=timestep, encoder_hidden_states=text, return_dict=False
                )[0]
            found[f"sigma_{s}"] = smooth(x0, scene)
            if decoding is not None:
                found[f"decoded_sigma_{s}"] = smooth(video_to_uint8(decoding.decode(x0)), scene)
        for k, v in found.items():
            if v is not None:
                scores[k].append(v)
    return {k: round(float(np.mean(v)), 3) if v else None for k, v in scores.items()}


def main() -> None:
    from videogen.models.builtin import WEIGHTS_DIR, WEIGHTS_FILE

    shipped = WEIGHTS_DIR / "builtin_decoder.safetensors"
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("weights", nargs="*", default=[str(WEIGHTS_FILE)])
    ap.add_argument("--clips", type=int, default=12)
    ap.add_argument("--decoder", default=str(shipped) if shipped.is_file() else None,
                    help="the temporal decoder to decode through as well (default: the shipped one)")  # fmt: skip
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    clips = _clips(args.clips)
    results = {w: measure(w, clips, args.decoder) for w in args.weights}
    keys = list(next(iter(results.values())))
    print(f"{'motion_smoothness':>22} " + " ".join(f"{w[-30:]:>30}" for w in results))
    for k in keys:
        print(f"{k:>22} " + " ".join(f"{r[k]!s:>30}" for r in results.values()))
    print(json.dumps({"benchmark": "stutter", "clips": args.clips, "decoder": args.decoder, "results": results}))


if __name__ == "__main__":
    main()
