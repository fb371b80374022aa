"""Block-sparse spatio-temporal attention kernels for video diffusion transformers.

Standalone: this package never imports ``videogen``. See ``docs/kernels.md``.

>>> out = sparse_video_attention(q, k, v, grid=(F, H, W), tile=(4, 4, 4), density=0.125)
"""

if __name__ == "kernels":  # pragma: no cover - exercised in a subprocess (tests/kernels/test_package_name.py)
    # This folder imported by its own name: a checkout's root is on sys.path (`python -m ...` run
    # there) and whoever imports `kernels` wants Hugging Face's package (transformers 5 and
    # diffusers import it when it is installed). The package is `videogen.kernels`; hand over.
    from ._shadow import hand_over

    hand_over(__name__)
else:
    from .attention import BACKENDS, block_sparse_attention, resolve_backend, sparse_video_attention
    from .tile_layout import TileLayout
    from .tile_selection import num_selected_tiles, select_topk_tiles, tile_scores

__all__ = [
    "BACKENDS",
    "TileLayout",
    "block_sparse_attention",
    "num_selected_tiles",
    "resolve_backend",
    "select_topk_tiles",
    "sparse_video_attention",
    "tile_scores",
]
