"""Calibrate and check the render-time estimate (`videogen.config.estimate`).

    python benchmarks/cost_estimate.py                 # measure FLOP/s of one CPU core on a Wan block
    python benchmarks/cost_estimate.py --threads 2     # the same with two torch threads

Times a 1-layer `WanTransformer3DModel` at Wan-1.3B width (12 heads x 128, ffn 8960) over a
3x30x52 latent grid (1,170 tokens) in fp32, divides the FLOPs `TransformerShape.flops_per_forward`
counts by the best of three forwards, and prints the effective FLOP/s per core next to the figure
the estimate assumes (`CPU_FLOPS_PER_CORE`), then the estimates of a few reference renders. One
JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import time


def measure(threads: int) -> float:
    import torch
    from diffusers import WanTransformer3DModel

    from videogen.config.estimate import TransformerShape

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16,
               out_channels=16, text_dim=64, freq_dim=256, ffn_dim=8960, num_layers=1, cross_attn_norm=True,
               qk_norm="rms_norm_across_heads")  # fmt: skip
    model = WanTransformer3DModel(**cfg).eval()
    x = torch.randn(1, 16, 3, 30, 52)  # (B, C, F, h, w): 3 x 15 x 26 = 1,170 tokens after 1x2x2 patches
    t, text = torch.tensor([500.0]), torch.randn(1, 64, 64)  # 64 text tokens of width 64
    times = []
    with torch.no_grad():
        model(x, t, text, return_dict=False)  # warm-up
        for _ in range(3):
            start = time.perf_counter()
            model(x, t, text, return_dict=False)
            times.append(time.perf_counter() - start)
    flops = TransformerShape(layers=1, width=1536, ffn=8960, text_tokens=64).flops_per_forward(3 * 15 * 26)
    return flops / min(times) / threads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    from videogen.config.estimate import CPU_FLOPS_PER_CORE, TransformerShape, format_duration

    per_core = measure(args.threads)
    print(f"measured {per_core / 1e9:.1f} GFLOP/s per core with {args.threads} thread(s); "
          f"the estimate assumes {CPU_FLOPS_PER_CORE / 1e9:.0f}")  # fmt: skip
    wan13 = TransformerShape(layers=30, width=1536, ffn=8960, text_tokens=512)
    # 5 s of 832x480 at 16 fps: 81 frames -> 21 latent frames of 30x52 tokens; 50 steps, guidance batch 2
    flops = wan13.flops_per_forward(21 * 30 * 52, batch=2) * 50
    cpu_s = flops / (CPU_FLOPS_PER_CORE * 2)
    print(f"Wan 2.1 1.3B, 5 s 832x480, 50 steps: {flops:.3g} FLOPs, {format_duration(cpu_s)} on 2 CPU cores")
    print(json.dumps({"bench": "cost_estimate", "threads": args.threads, "gflops_per_core": round(per_core / 1e9, 1),
                      "assumed_gflops_per_core": CPU_FLOPS_PER_CORE / 1e9, "wan13_5s_480p_flops": flops,
                      "wan13_5s_480p_cpu2_seconds": round(cpu_s)}))  # fmt: skip


if __name__ == "__main__":
    main()
