"""Dense SDPA vs ``kernels.sparse_video_attention``, side by side in one run.

Defaults are the Wan 2.1 480p latent grid (21x30x52 = 32,760 tokens), d=128, density
0.125: on CPU 1 batch x 2 heads in fp32 against PyTorch's fused CPU SDPA; on CUDA 12
heads (Wan-1.3B) in bf16 against SDPA's flash backend. Dense and sparse runs are
interleaved so that load from other processes hits both alike; medians are reported.
The last line is one JSON object for scripts.

    python benchmarks/attention.py                       # CPU defaults
    python benchmarks/attention.py --d 64 --heads 4      # other shapes
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

# OpenMP threads that spin between parallel regions burn the CPU share that their
# partner thread needs when other processes load the machine (the shared 2-core dev
# box): measured there under load, the CPU sparse path took 12-22 s with the default
# policy and 3.0 s with PASSIVE, dense SDPA (one long region) ~12-17 s either way.
# Must be set before torch loads OpenMP; an explicit setting in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from videogen.kernels import TileLayout, resolve_backend, select_topk_tiles, sparse_video_attention
from videogen.kernels.reference import reference_sparse_video_attention

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _triple(text: str) -> tuple[int, int, int]:
    parts = tuple(int(p) for p in text.replace("x", ",").split(","))
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"expected F,H,W (or FxHxW) but got {text!r}")
    return parts  # type: ignore[return-value]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grid", type=_triple, default=(21, 30, 52), help="F,H,W token grid (default 21,30,52)")
    p.add_argument("--tile", type=_triple, default=(4, 4, 4))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=None, help="default: 12 on CUDA, 2 on CPU")
    p.add_argument("--d", type=int, default=128, help="head dim")
    p.add_argument("--density", type=float, default=0.125)
    p.add_argument("--backend", default="auto", choices=["auto", "triton", "cpu", "reference"])
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="default: bf16 on CUDA, fp32 on CPU")
    p.add_argument("--repeats", type=int, default=None, help="timed runs of each (default: 20 CUDA, 3 CPU)")
    p.add_argument("--device", default=None, help="default: cuda if available else cpu")
    p.add_argument("--ref-tiles", type=int, default=32, help="query tiles checked against the fp32 reference")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _timed(fn, device: torch.device, cpu_ms: list[float] | None = None) -> tuple[float, torch.Tensor]:
    """Wall time of one call in ms (synchronised on CUDA) and its result.

    ``cpu_ms`` collects this process's CPU time too: on a shared CPU, wall time depends
    on other processes, CPU time much less so.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if cpu_ms is not None:
        cpu_ms.append((time.process_time() - c0) * 1e3)
    return (time.perf_counter() - t0) * 1e3, out


def _dense_fn(q, k, v, device: torch.device):
    if device.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def run():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v)

        return run
    return lambda: F.scaled_dot_product_attention(q, k, v)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    on_cuda = device.type == "cuda"
    heads = args.heads or (12 if on_cuda else 2)
    dtype = DTYPES[args.dtype or ("bf16" if on_cuda else "fp32")]
    repeats = args.repeats or (20 if on_cuda else 3)
    backend = resolve_backend(args.backend, device)
    F_, H_, W_ = args.grid
    n = F_ * H_ * W_

    gen = torch.Generator().manual_seed(args.seed)
    q, k, v = (torch.randn(args.batch, heads, n, args.d, generator=gen).to(device, dtype) for _ in range(3))
    sparse = lambda: sparse_video_attention(
        q, k, v, grid=args.grid, tile=args.tile, density=args.density, backend=backend
    )
    dense = _dense_fn(q, k, v, device)

    # Cold calls: first-call costs (Triton compile + autotune, layout build, allocator).
    sparse_cold_ms, _ = _timed(sparse, device)
    dense_cold_ms, _ = _timed(dense, device)
    dense_ms, sparse_ms, dense_cpu_ms, sparse_cpu_ms = [], [], [], []
    for _ in range(repeats):
        dense_ms.append(_timed(dense, device, dense_cpu_ms)[0])
        t, out = _timed(sparse, device, sparse_cpu_ms)
        sparse_ms.append(t)
    layout = TileLayout.build(args.grid, args.tile, device)
    select_ms = statistics.median(
        _timed(lambda: select_topk_tiles(q, k, layout, args.density), device)[0] for _ in range(repeats)
    )

    # Reference error on a spread of query tiles (always including the last, ragged one):
    # the full fp32 masked reference at 32k tokens would need an N x N mask per head.
    kv_indices = select_topk_tiles(q, k, layout, args.density)
    n_ref = min(args.ref_tiles, layout.num_tiles)
    ref_tiles = torch.linspace(0, layout.num_tiles - 1, n_ref, device=device).round().long().unique()
    tokens = torch.nonzero(torch.isin(layout.tile_of_token, ref_tiles)).squeeze(1)
    ref = reference_sparse_video_attention(q, k, v, layout, kv_indices, query_tokens=tokens)
    max_err = (out[:, :, tokens].float() - ref).abs().max().item()

    # Useful FLOPs (QK^T and PV, valid tokens only).
    counts = layout.valid_counts.to(device=device, dtype=torch.float64)
    sel_keys = counts[kv_indices].sum(-1)  # (B, heads, n_tiles) keys seen by each query tile
    sparse_flops = 4.0 * args.d * float((counts * sel_keys).sum())
    dense_flops = 4.0 * args.batch * heads * n * n * args.d
    d_ms, s_ms = statistics.median(dense_ms), statistics.median(sparse_ms)
    dense_name = "SDPA (flash)" if on_cuda else "SDPA (CPU fused)"

    print(
        f"grid {args.grid} = {n} tokens, tile {args.tile} ({layout.num_tiles} tiles), "
        f"B={args.batch} heads={heads} d={args.d} {str(dtype).replace('torch.', '')} on {device}, "
        f"density {args.density} ({kv_indices.shape[-1]} key tiles per query tile), median of {repeats}"
    )
    if device.type == "cpu":
        print(
            f"CPU threads {torch.get_num_threads()}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, "
            f"load average {os.getloadavg()[0]:.1f} (other processes share these cores)"
        )
    d_cpu, s_cpu = statistics.median(dense_cpu_ms), statistics.median(sparse_cpu_ms)
    rows = [
        ("dense " + dense_name, d_ms, dense_cold_ms, d_cpu, dense_flops),
        (f"sparse ({backend})", s_ms, sparse_cold_ms, s_cpu, sparse_flops),
    ]
    print(f"{'':28s} {'median ms':>10s} {'first ms':>10s} {'CPU ms':>10s} {'useful TFLOP/s':>15s}")
    for name, ms, cold, cpu, flops in rows:
        print(f"{name:28s} {ms:10.1f} {cold:10.1f} {cpu:10.1f} {flops / ms / 1e9:15.3f}")
    print(f"{'  of which tile selection':28s} {select_ms:10.1f}")
    print(
        f"speedup {d_ms / s_ms:.2f}x wall, {d_cpu / s_cpu:.2f}x process CPU time "
        f"(useful FLOPs ratio {dense_flops / sparse_flops:.2f}x)"
    )
    subset = "" if ref_tiles.numel() == layout.num_tiles else "; a subset: the full N x N reference is too heavy"
    print(
        f"max |sparse - fp32 reference| = {max_err:.3g}, on {ref_tiles.numel()} of {layout.num_tiles} "
        f"query tiles ({tokens.numel()} tokens{subset})"
    )
    result = {
        "grid": list(args.grid),
        "heads": heads,
        "d": args.d,
        "density": args.density,
        "backend": backend,
        "device": str(device),
        "dense_ms": round(d_ms, 2),
        "sparse_ms": round(s_ms, 2),
        "speedup": round(d_ms / s_ms, 3),
        "max_abs_err_vs_reference": max_err,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
