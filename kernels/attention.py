"""Public entry points: top-k block-sparse spatio-temporal attention for video DiTs.

Follows VSA (FastVideo, "Video Sparse Attention") without its trained gate: tokens are
cut into 4x4x4 tiles (``tile_layout``), mean-pooled tile scores pick a fixed number of
key tiles per query tile (``tile_selection``), and each query token attends, with an
ordinary 1/sqrt(d)-scaled softmax, to the tokens of its tile's selected key tiles only.

Backends (resolved once per call from ``backend``; all share layout and selection):

* ``"triton"``: hand-written Triton flash-attention kernel (CUDA; CPU tensors only
  under ``TRITON_INTERPRET=1``, which is how the tests run it without a GPU).
* ``"cpu"``: gather + batched GEMM (``block_sparse_cpu``), any head dim, fp32 compute.
* ``"reference"``: fp32 masked dense attention (``reference``), for tests.
* ``"auto"``: ``"triton"`` for CUDA tensors, ``"cpu"`` otherwise.

The fast backends are forward-only (inference): no autograd.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from einops import rearrange

from .block_sparse_cpu import gathered_block_sparse_attention
from .reference import reference_block_sparse_attention, reference_sparse_video_attention
from .tile_layout import TileLayout
from .tile_selection import select_topk_tiles

BACKENDS = ("auto", "triton", "cpu", "reference")
_TRITON_HEAD_DIMS = (16, 32, 64, 128, 256)
_TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def sparse_video_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grid: Sequence[int],
    tile: Sequence[int] = (4, 4, 4),
    density: float = 0.125,
    backend: str = "auto",
) -> torch.Tensor:
    """Top-k block-sparse attention over a ``grid = (F, H, W)`` video token grid.

    Args:
        q, k, v: ``(B, heads, N, d)`` with ``N == F*H*W``, tokens in raster order
            ``n = (f*H + h)*W + w``; same shape, dtype and device.
        grid: ``(F, H, W)`` token grid.
        tile: ``(tf, th, tw)`` tile box; edge tiles may be smaller (also along a
            dimension shorter than the tile), but the box must not exceed the whole grid.
        density: fraction of key tiles each query tile attends to, in ``(0, 1]``;
            exactly ``ceil(density * n_tiles)`` tiles. ``1.0`` is dense attention.
        backend: ``"auto"``, ``"triton"``, ``"cpu"`` or ``"reference"``.

    Returns:
        ``(B, heads, N, d)`` in raster order, with the dtype and device of ``q``.
    """
    _check_backend(backend)
    _check_qkv(q, k, v, names=("q", "k", "v"), ndim=4, layout_desc="(B, heads, N, d)")
    grid3 = _check_grid(grid, q.shape[2])
    tile3 = _check_tile(tile, grid3)
    _check_density(density)
    resolved = _resolve_backend(backend, q)
    _check_backend_inputs(resolved, q, all_inputs={"q": q, "k": k, "v": v})

    layout = TileLayout.build(grid3, tile3, q.device)
    kv_indices = select_topk_tiles(q, k, layout, density)  # (B, heads, n_tiles, k_sel)
    scale = q.shape[-1] ** -0.5
    if resolved == "reference":
        return reference_sparse_video_attention(q, k, v, layout, kv_indices).to(q.dtype)
    if resolved == "cpu":
        # Gather rows straight from raster order: no permutation into tile order on CPU.
        tile_rows = layout.tile_tokens.clamp(min=0)  # (n_tiles, tile_volume); padding never read
        q_rows, k_rows, v_rows = (rearrange(t, "b h n d -> (b h) n d") for t in (q, k, v))
        out = gathered_block_sparse_attention(
            q_rows, k_rows, v_rows, kv_indices, tile_rows, layout.valid_counts, scale
        )  # (B*heads, N, d) fp32
        return rearrange(out, "(b h) n d -> b h n d", b=q.shape[0]).to(q.dtype)
    from .block_sparse_triton import block_sparse_attention_triton

    out_tiles = block_sparse_attention_triton(
        layout.to_tiles(q),  # (B, heads, n_tiles, tile_volume, d)
        layout.to_tiles(k),
        layout.to_tiles(v),
        kv_indices,
        layout.valid_counts,
        scale,
    )
    return layout.from_tiles(out_tiles)  # (B, heads, N, d)


def block_sparse_attention(
    q_tiles: torch.Tensor,
    k_tiles: torch.Tensor,
    v_tiles: torch.Tensor,
    kv_indices: torch.Tensor,
    valid_counts: torch.Tensor,
    *,
    scale: float | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Attention of each query tile over the given key tiles, in padded tile order.

    Args:
        q_tiles, k_tiles, v_tiles: ``(B, heads, n_tiles, tile_volume, d)``, e.g. from
            ``TileLayout.to_tiles``; slot ``r`` of tile ``t`` is real iff
            ``r < valid_counts[t]``.
        kv_indices: integer ``(B, heads, n_tiles, k_sel)``, key tiles of each query tile,
            each in ``[0, n_tiles)`` (e.g. from ``select_topk_tiles``); duplicates not allowed.
        valid_counts: ``(n_tiles,)`` real tokens per tile, each in ``[1, tile_volume]``.
        scale: softmax scale, default ``1/sqrt(d)``.
        backend: as for :func:`sparse_video_attention`.

    Returns:
        ``(B, heads, n_tiles, tile_volume, d)`` in the dtype of ``q_tiles``; padding rows are zero.
    """
    _check_backend(backend)
    _check_qkv(
        q_tiles,
        k_tiles,
        v_tiles,
        names=("q_tiles", "k_tiles", "v_tiles"),
        ndim=5,
        layout_desc="(B, heads, n_tiles, tile_volume, d)",
    )
    B, Hd, T, Vol, d = q_tiles.shape
    if kv_indices.dim() != 4 or tuple(kv_indices.shape[:3]) != (B, Hd, T) or kv_indices.is_floating_point():
        raise ValueError(
            f"`kv_indices` must be an integer tensor of shape (B, heads, n_tiles, k_sel) = ({B}, {Hd}, {T}, k_sel) "
            f"but has shape {tuple(kv_indices.shape)} and dtype {kv_indices.dtype}"
        )
    if not 1 <= kv_indices.shape[-1] <= T:
        raise ValueError(f"`kv_indices` selects {kv_indices.shape[-1]} tiles per query tile; must be in [1, {T}]")
    if tuple(valid_counts.shape) != (T,):
        raise ValueError(f"`valid_counts` must have shape ({T},) but has shape {tuple(valid_counts.shape)}")
    if kv_indices.device.type == "cpu":  # checking values on the GPU would cost a sync per call
        lo, hi = int(kv_indices.min()), int(kv_indices.max())
        if lo < 0 or hi >= T:
            raise ValueError(f"`kv_indices` values must be in [0, {T}) but span [{lo}, {hi}]")
    if valid_counts.device.type == "cpu":
        lo, hi = int(valid_counts.min()), int(valid_counts.max())
        if lo < 1 or hi > Vol:
            raise ValueError(f"`valid_counts` values must be in [1, {Vol}] but span [{lo}, {hi}]")
    resolved = _resolve_backend(backend, q_tiles)
    _check_backend_inputs(
        resolved, q_tiles, name="q_tiles", all_inputs={"q_tiles": q_tiles, "k_tiles": k_tiles, "v_tiles": v_tiles}
    )
    scale = d**-0.5 if scale is None else float(scale)

    if resolved == "reference":
        out = reference_block_sparse_attention(q_tiles, k_tiles, v_tiles, kv_indices, valid_counts, scale)
        return out.to(q_tiles.dtype)
    if resolved == "cpu":
        rows = rearrange(torch.arange(T * Vol, device=q_tiles.device), "(t v) -> t v", t=T)  # slot -> row, identity
        q_rows, k_rows, v_rows = (rearrange(t, "b h t v d -> (b h) (t v) d") for t in (q_tiles, k_tiles, v_tiles))
        out = gathered_block_sparse_attention(
            q_rows, k_rows, v_rows, kv_indices, rows, valid_counts, scale
        )  # (B*heads, n_tiles*tile_volume, d) fp32
        return rearrange(out, "(b h) (t v) d -> b h t v d", b=B, t=T).to(q_tiles.dtype)
    from .block_sparse_triton import block_sparse_attention_triton

    return block_sparse_attention_triton(q_tiles, k_tiles, v_tiles, kv_indices, valid_counts, scale)


def resolve_backend(backend: str, device: torch.device | str) -> str:
    """The concrete backend ``backend`` means for tensors on ``device`` (``"auto"`` resolved)."""
    _check_backend(backend)
    if backend != "auto":
        return backend
    return "triton" if torch.device(device).type == "cuda" else "cpu"


# ----------------------------------------------------------------------------- validation


def _resolve_backend(backend: str, q: torch.Tensor) -> str:
    return resolve_backend(backend, q.device)


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"`backend` must be one of {BACKENDS} but is {backend!r}")


def _check_qkv(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, names: tuple[str, str, str], ndim: int, layout_desc: str
) -> None:
    for name, t in zip(names, (q, k, v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"`{name}` must be a torch.Tensor but is {type(t).__name__}")
        if t.dim() != ndim:
            raise ValueError(f"`{name}` must have shape {layout_desc} but has shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise ValueError(f"`{name}` must be a floating-point tensor but has dtype {t.dtype}")
    qn = names[0]
    for name, t in zip(names[1:], (k, v)):
        if t.shape != q.shape:
            raise ValueError(f"`{name}` shape {tuple(t.shape)} must equal `{qn}` shape {tuple(q.shape)}")
        if t.dtype != q.dtype:
            raise ValueError(f"`{name}` dtype {t.dtype} must equal `{qn}` dtype {q.dtype}")
        if t.device != q.device:
            raise ValueError(f"`{name}` device {t.device} must equal `{qn}` device {q.device}")


def _check_grid(grid: Sequence[int], n_tokens: int) -> tuple[int, int, int]:
    grid3 = _as_positive_triple("grid", grid)
    total = grid3[0] * grid3[1] * grid3[2]
    if total != n_tokens:
        raise ValueError(f"`grid` {grid3} has {total} tokens but q has N={n_tokens}")
    return grid3


def _check_tile(tile: Sequence[int], grid: tuple[int, int, int]) -> tuple[int, int, int]:
    tile3 = _as_positive_triple("tile", tile)
    # A tile may be longer than the grid along some dimensions (grid 3x5x9 with 4x4x4
    # tiles: the only tile along f is a ragged 3-frame one), but a tile box that holds
    # the whole grid and more leaves a single partial tile: nothing to be sparse over.
    if all(t >= g for t, g in zip(tile3, grid)) and tile3 != grid:
        raise ValueError(f"`tile` {tile3} is larger than `grid` {grid}: the whole grid would be one partial tile")
    return tile3


def _as_positive_triple(name: str, value: Sequence[int]) -> tuple[int, int, int]:
    try:
        items = tuple(value)
    except TypeError:
        raise ValueError(f"`{name}` must be 3 positive integers but is {value!r}") from None
    if len(items) != 3 or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in items):
        raise ValueError(f"`{name}` must be 3 positive integers but is {value!r}")
    return items


def _check_density(density: float) -> None:
    if not isinstance(density, (int, float)) or isinstance(density, bool) or not 0.0 < density <= 1.0:
        raise ValueError(f"`density` must be in (0, 1] but is {density!r}")


def _check_backend_inputs(
    backend: str, q: torch.Tensor, name: str = "q", all_inputs: dict[str, torch.Tensor] | None = None
) -> None:
    for input_name, t in (all_inputs or {name: q}).items():
        if backend in ("cpu", "triton") and torch.is_grad_enabled() and t.requires_grad:
            raise ValueError(
                f"`{input_name}` requires grad but backend {backend!r} is forward-only (inference); "
                "run under torch.no_grad() or use backend='reference'"
            )
    if backend != "triton":
        return
    from .block_sparse_triton import is_interpreting

    d = q.shape[-1]
    if d not in _TRITON_HEAD_DIMS:
        raise ValueError(
            f"`{name}` head dim d={d} is not supported by backend 'triton' (supported: {_TRITON_HEAD_DIMS}); "
            "use backend='cpu' or pad the head dim"
        )
    if q.dtype not in _TRITON_DTYPES:
        raise ValueError(f"`{name}` dtype {q.dtype} is not supported by backend 'triton' (supported: {_TRITON_DTYPES})")
    if q.device.type != "cuda" and not is_interpreting():
        raise ValueError(f"backend 'triton' needs CUDA tensors (or TRITON_INTERPRET=1) but `{name}` is on {q.device}")
