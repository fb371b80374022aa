"""End-to-end render of a real-size Wan 2.1 1.3B architecture with random weights: dense vs sparse
attention vs sparse + step cache (and, on CUDA, sparse under model and group offload).

    python benchmarks/gpu_e2e.py                 # CUDA: 832x480, 33 frames, 4 steps, bf16
    python benchmarks/gpu_e2e.py --tiny          # any machine: the tests' tiny Wan, 64x64, 9 frames, fp32

The folder is built in code (no weights to download): `WanTransformer3DModel` with Wan 2.1 1.3B's
config (30 layers, 12 heads x 128, ffn 8960, 16 latent channels, 4096-wide text), a one-layer
random UMT5 of width 4096 (the text encoder's size does not change the transformer's timing), and
Wan 2.1's VAE config (`AutoencoderKLWan()`'s defaults) with random weights. Every variant renders
the same prompt, seed and noise through `videogen.render()` with the health gate off. Per variant
one JSON line: seconds per denoising step (median; the list too), wall seconds, peak device memory
(`torch.cuda.max_memory_allocated`) beside the estimates (`videogen.models.memory`,
`videogen.config.estimate`), and PSNR of the decoded video against the dense render. Random weights
make the video noise-like; the PSNR still measures how far sparse attention moves the output.
Called by benchmarks/gpu_check.sh.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Not the checkout's root: videogen comes installed (`pip install -e .`), and a root on sys.path
# lets transformers 5 find kernels/ as Hugging Face's `kernels` package and fail importing it.
sys.path.insert(0, str(ROOT / "tests"))  # tiny_wan.py: the tokenizer and the tiny configs

# Wan 2.1 T2V 1.3B's transformer config (Wan-AI/Wan2.1-T2V-1.3B-Diffusers, transformer/config.json).
WAN_13B_CONFIG = dict(
    patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16, out_channels=16,
    text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30, cross_attn_norm=True,
    qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024,
)  # fmt: skip


def build_folder(path: Path, tiny: bool, device: str) -> Path:
    """A diffusers `WanPipeline` folder: the tests' tiny Wan, or the 1.3B architecture (random weights)."""
    if tiny:
        from tiny_wan import save_tiny_wan

        return save_tiny_wan(path, "wan2.1")
    import torch
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from tiny_wan import build_tokenizer
    from transformers import UMT5Config, UMT5EncoderModel

    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    text_encoder = UMT5EncoderModel(
        UMT5Config(vocab_size=len(tokenizer), d_model=4096, d_kv=64, d_ff=1024, num_layers=1, num_heads=8,
                   relative_attention_num_buckets=32, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    )  # fmt: skip
    with torch.device(device):  # initialising 1.3B parameters is minutes on a CPU, a second on a GPU
        transformer = WanTransformer3DModel(**WAN_13B_CONFIG)
    transformer = transformer.to(torch.bfloat16).cpu()
    vae = AutoencoderKLWan()  # Wan 2.1's VAE: base_dim 96, z_dim 16, dim_mult [1, 2, 4, 4], 2 res blocks
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
    pipe = WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, transformer=transformer,
                       scheduler=scheduler)  # fmt: skip
    pipe.save_pretrained(path, safe_serialization=True)
    return path


def psnr(a_path: Path, b_path: Path) -> float:
    import numpy as np

    from videogen.io.video import VideoReader

    a = VideoReader(a_path).read_all().astype(np.float64)
    b = VideoReader(b_path).read_all().astype(np.float64)
    mse = float(((a - b) ** 2).mean())
    return float("inf") if mse == 0 else round(10 * float(np.log10(255.0**2 / mse)), 2)


def variants(cuda: bool) -> list[dict]:
    """(name, attention, cache, offload) of each render; the cache and offload ones only where they exist."""
    from videogen.config.spec import RenderSpec

    found = [dict(name="dense", attention="dense"), dict(name="sparse", attention="sparse")]
    if "cache" in RenderSpec.__dataclass_fields__:
        found.append(dict(name="sparse+cache", attention="sparse", cache="first-block"))
    else:
        print("skipping sparse+cache: this checkout's RenderSpec has no `cache` option", file=sys.stderr)
    if cuda:
        found += [dict(name="sparse+offload=model", attention="sparse", offload="model"),
                  dict(name="sparse+offload=group", attention="sparse", offload="group")]  # fmt: skip
    else:
        print("skipping the offload variants: offloading needs a CUDA device", file=sys.stderr)
    return found


def run_variant(variant: dict, folder: Path, out: Path, args, device: str, dtype: str) -> dict:
    import torch

    from videogen import RenderSpec, render
    from videogen.config.estimate import render_cost, transformer_shape
    from videogen.config.geometry import geometry_for
    from videogen.config.presets import resolve_preset
    from videogen.config.resolve import resolve_render
    from videogen.models.loader import load_model
    from videogen.models.memory import GIB, estimate_memory
    from videogen.sampling.loop import StepProgress

    cuda = device == "cuda"
    width, height = args.size
    seconds = args.frames / args.fps
    options = dict(model=str(folder), size=(width, height), fps=args.fps, steps=args.steps, seed=0,
                   segment_seconds=seconds, overlap_frames=5, health_checks=[], device=device, dtype=dtype)  # fmt: skip
    if "cache" in variant:
        options["cache"] = variant["cache"]
    spec = RenderSpec.single("a red cat moving left", seconds, **options)
    resolved = resolve_render(spec)
    preset = resolve_preset(str(folder))
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = load_model(str(folder), device=device, dtype=dtype, attention=variant["attention"],
                           offload=variant.get("offload"))  # fmt: skip
    offload = model.extras.get("offload", "none")
    estimate = estimate_memory(model, offload, width=width, height=height,
                               latent_frames=resolved.plan.segments[0].latent_frames)  # fmt: skip
    cost = render_cost(resolved, transformer_shape(preset), geometry_for(preset), device, torch.get_num_threads())
    stamps, start = [], time.perf_counter()
    for event in render(spec, out, model=model):
        if isinstance(event, StepProgress):
            if cuda:
                torch.cuda.synchronize()
            stamps.append(time.perf_counter())
    wall = time.perf_counter() - start
    steps = [round(b - a, 4) for a, b in zip([start, *stamps[:-1]], stamps, strict=True)]
    result = dict(
        bench="gpu_e2e", variant=variant["name"], size=f"{width}x{height}", frames=args.frames, steps=args.steps,
        dtype=dtype, seconds_per_step=round(statistics.median(steps), 4), step_seconds=steps,
        wall_seconds=round(wall, 2), estimate_seconds=round(cost.seconds, 2), estimate_peak_gib=round(estimate.peak / GIB, 3),
    )  # fmt: skip
    if cuda:
        result["peak_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 3)
    del model
    gc.collect()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="the tests' tiny Wan at 64x64 and 9 frames (any device)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--frames", type=int, help="4k+1 frames (default 33; --tiny 9)")
    ap.add_argument("--size", help="WIDTHxHEIGHT (default 832x480; --tiny 64x64)")
    ap.add_argument("--fps", type=float, default=16.0)
    ap.add_argument("--keep", help="build the model folder here and keep it (default: a temporary folder)")
    args = ap.parse_args()
    import torch

    from videogen.config.presets import parse_size

    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", "bfloat16") if cuda else ("cpu", "float32")
    if not cuda and not args.tiny:
        print("gpu_e2e.py: no CUDA device; the 1.3B architecture needs one (use --tiny on a CPU)", file=sys.stderr)
        return 2
    args.frames = args.frames or (9 if args.tiny else 33)
    args.size = parse_size(args.size or ("64x64" if args.tiny else "832x480"))
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpu_e2e-"))
    try:
        folder = work / ("tiny-wan2.1" if args.tiny else "wan2.1-1.3b-random")
        if not (folder / "model_index.json").is_file():
            t0 = time.perf_counter()
            build_folder(folder, args.tiny, device)
            print(f"built {folder} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        results = []
        for variant in variants(cuda):
            out = work / f"{variant['name'].replace('+', '_').replace('=', '-')}.mp4"
            try:
                result = run_variant(variant, folder, out, args, device, dtype)
            except Exception as exc:  # one variant's failure must not hide the others' numbers
                traceback.print_exc()
                result = dict(bench="gpu_e2e", variant=variant["name"], error=f"{type(exc).__name__}: {exc}"[:500])
            else:
                db = psnr(work / "dense.mp4", out)  # inf: identical frames (JSON has no infinity)
                result.update(
                    psnr_vs_dense_db=None if db == float("inf") else db, identical_to_dense=db == float("inf")
                )
            results.append(result)
            print(json.dumps(result), flush=True)
        return 0 if all("error" not in r for r in results) else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
