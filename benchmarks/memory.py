"""Peak activation memory of a Wan VAE decode and a Wan transformer forward, measured beside the
estimate `videogen.models.memory` prints at load.

    python benchmarks/memory.py            # Wan 2.1 / 2.2 VAEs and 1.3B / 14B blocks at their real widths
    python benchmarks/memory.py --tiny     # narrow models, seconds (what tests/models/test_memory.py runs)

Each case runs in a fresh process with random weights at the real architecture's widths (one
transformer block: the live activations of a forward do not grow with the depth) and measures
what the forward adds to the device: on CUDA `torch.cuda.max_memory_allocated` over what was
allocated before; on a CPU the process's resident high-water mark (VmHWM, reset through
/proc/self/clear_refs) over its resident size before, with glibc's mmap threshold held at 64 KiB
(MALLOC_MMAP_THRESHOLD_) so that a freed tensor leaves the resident size at once. The VAE decodes
through `WanVAECodec.decode` and the transformer runs our dense self-attention processor, as a
render does. Prints one line per case (measured, estimated, their ratio) and a JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

GIB = 1024**3
# name: (kind, model config, shape). VAE shape: (width, height, latent frames); transformer:
# (latent frames, latent height, latent width, batch).
WAN21_VAE: dict = {}  # AutoencoderKLWan()'s defaults are Wan 2.1's VAE
WAN22_VAE = dict(base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                 temperal_downsample=[False, True, True], is_residual=True, in_channels=12, out_channels=12,
                 patch_size=2, scale_factor_spatial=16, latents_mean=[0.0] * 48, latents_std=[1.0] * 48)  # fmt: skip
BLOCK = dict(patch_size=(1, 2, 2), attention_head_dim=128, in_channels=16, out_channels=16, text_dim=4096,
             freq_dim=256, num_layers=1, cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6)  # fmt: skip
CASES = {
    "vae-wan2.1": ("vae", WAN21_VAE, (208, 128, 2)),
    "vae-wan2.2": ("vae", WAN22_VAE, (256, 128, 2)),
    "block-1.3b": ("transformer", dict(BLOCK, num_attention_heads=12, ffn_dim=8960), (9, 30, 52, 2)),
    "block-14b": ("transformer", dict(BLOCK, num_attention_heads=40, ffn_dim=13824), (9, 30, 52, 2)),
}
TINY = {
    "tiny-vae": ("vae", dict(base_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=1), (256, 256, 2)),
    "tiny-vae-residual": (
        "vae",
        dict(WAN22_VAE, base_dim=16, decoder_base_dim=32, dim_mult=[1, 2, 2, 2], num_res_blocks=1),
        (256, 256, 2),
    ),
    "tiny-block-ffn": ("transformer", dict(BLOCK, num_attention_heads=2, ffn_dim=2048, text_dim=64), (9, 64, 64, 2)),
    "tiny-block-attention": (
        "transformer",
        dict(BLOCK, num_attention_heads=4, ffn_dim=512, text_dim=64),
        (9, 48, 48, 2),
    ),
}


def _resident(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


class Meter:
    """What a block of work adds to the device's peak (CUDA) or the process's resident peak (CPU)."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"

    def start(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            self.base = _resident("VmRSS:")
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset VmHWM to the current resident size

    def added(self) -> int:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - self.base
        return _resident("VmHWM:") - self.base


def measure(name: str, device: str) -> dict:
    """Run case `name` here; {"measured": bytes, "estimate": bytes}."""
    import torch

    torch.manual_seed(0)
    kind, config, shape = {**CASES, **TINY}[name]
    meter = Meter(device)
    with torch.no_grad():
        if kind == "vae":
            from diffusers import AutoencoderKLWan

            from videogen.models.codec import WanVAECodec
            from videogen.models.memory import vae_decode_bytes

            codec = WanVAECodec(AutoencoderKLWan(**config).to(device).eval(), tiling="off")
            width, height, latent_frames = shape
            s = codec.spatial_factor
            codec.decode(torch.randn(1, codec.latent_channels, 1, 2, 2, device=device))  # lazy set-up out of the count
            z = torch.randn(1, codec.latent_channels, latent_frames, height // s, width // s, device=device)
            meter.start()
            video = codec.decode(z)
            measured = meter.added()
            estimate = vae_decode_bytes(codec, width, height, video.shape[2], tiling=False)
        else:
            from diffusers import WanTransformer3DModel

            from videogen.attention.processor import ensure_self_attention
            from videogen.models.memory import transformer_token_values

            dtype = torch.bfloat16
            model = WanTransformer3DModel(**config).to(dtype)  # as loaded: Wan's norms and time embedder in fp32
            for name_, module in model.named_modules():
                if any(k in name_ for k in model._keep_in_fp32_modules):
                    module.to(torch.float32)
            model = model.to(device).eval()
            ensure_self_attention(model)
            frames, h, w, batch = shape
            text = torch.randn(batch, 64, config["text_dim"], dtype=dtype, device=device)
            t = torch.full((batch,), 500.0, device=device)
            model(torch.randn(batch, 16, 1, 4, 4, dtype=dtype, device=device), t, text, return_dict=False)
            x = torch.randn(batch, 16, frames, h, w, dtype=dtype, device=device)
            meter.start()
            model(x, t, text, return_dict=False)
            measured = meter.added()
            tokens = frames * (h // 2) * (w // 2)
            estimate = batch * tokens * transformer_token_values(model.config) * 2
    return {"measured": int(measured), "estimate": int(estimate)}


def run_case(name: str, device: str) -> dict:
    """`measure(name)` in a fresh process (its own allocator state and resident size)."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", PYTHONWARNINGS="ignore")
    env.setdefault("OMP_NUM_THREADS", "2")
    out = subprocess.run([sys.executable, __file__, "--case", name, "--device", device], env=env,
                         capture_output=True, text=True, check=False)  # fmt: skip
    if out.returncode:
        raise RuntimeError(f"case {name} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="narrow models (seconds on a CPU)")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when there is one)")
    ap.add_argument("--case", help=argparse.SUPPRESS)  # run one case here (the child process)
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    args = ap.parse_args()
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.case:
        print(json.dumps(measure(args.case, args.device)))
        return 0
    if args.device == "cpu" and not os.access("/proc/self/clear_refs", os.W_OK):
        print("memory.py: error: a CPU measurement needs Linux's /proc/self/clear_refs", file=sys.stderr)
        return 2
    results = {}
    for name in TINY if args.tiny else CASES:
        r = run_case(name, args.device)
        r["ratio"] = round(r["estimate"] / r["measured"], 3)
        results[name] = r
        if not args.json:
            print(f"{name:22s} measured {r['measured'] / GIB:7.3f} GiB   estimate {r['estimate'] / GIB:7.3f} GiB"
                  f"   estimate/measured {r['ratio']:.2f}", flush=True)  # fmt: skip
    print(json.dumps({"bench": "memory", "device": args.device, "cases": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
