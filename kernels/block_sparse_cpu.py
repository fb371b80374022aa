"""CPU block-sparse attention: gather the selected key tiles, then batched GEMMs.

Measured on the 2-core AVX-512 dev box, PyTorch's fused CPU SDPA runs dense attention
at about 200 GFLOP/s, and a plain ``bmm`` runs at the same rate, so the sparse path
has to keep its GEMMs large and spend almost nothing around them:

* No FLOPs on padding. At Wan 480p (grid 21x30x52, 4x4x4 tiles) 18% of the padded
  slots are padding, which computed on both sides would cost 1.22^2 = 1.49x. Work items
  (batch*head, query tile) are grouped by the query tile's valid count (at most 8
  distinct values for 3-D tiles), so query rows carry no padding, and sorted by how
  many valid keys they select, so a chunk of items gathers key lists of nearly equal
  length; only the short tails are set to -inf before the softmax.
* No layout copies. Rows are gathered straight from wherever they live (raster order
  or padded tile order) through a ``tile_rows`` map, so ``sparse_video_attention``
  never permutes q, k, v into tile order on CPU.
* Few, reused buffers. ``index_select`` into a fresh 8 MB tensor runs at 3-9 GB/s (page
  faults), into a reused buffer at 40-90 GB/s. K and V are gathered side by side as
  2d-wide rows in one call; q once per index group; softmax runs in place.
* Few parallel regions. Every op is an OpenMP region; when other processes load the
  cores, each costs a scheduling delay, so per-chunk work is 4 ops (gather, bmm,
  softmax, bmm). Under load, the default OpenMP spin-wait policy makes this path 3-7x
  slower than ``OMP_WAIT_POLICY=PASSIVE`` (set by ``benchmarks/attention.py``).

Figures: ``docs/kernels.md`` and ``python benchmarks/attention.py``.

Computation runs in fp32 (bf16/fp16 inputs are upcast).
"""

from __future__ import annotations

import torch
from einops import rearrange

# Per chunk, gathered K (and as many V) elements: 256K fp32 = 1 MB each, cache-sized since each
# core runs its own chunks single-threaded; fastest of 128K-1M at Wan 480p (891 ms vs 923-931 ms,
# figures in docs/kernels.md).
CHUNK_ELEMENTS = 256 * 1024
# Items whose gather indices (and q rows) are built in one vectorised pass: 256 items
# x 64 rows x d=128 fp32 = 8 MB of gathered q.
INDEX_GROUP_ITEMS = 256


def gathered_block_sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kv_indices: torch.Tensor,
    tile_rows: torch.Tensor,
    valid_counts: torch.Tensor,
    scale: float,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> torch.Tensor:
    """Block-sparse attention on row tensors, reading tile ``t`` slot ``r`` at row ``tile_rows[t, r]``.

    Args:
        q, k, v: ``(BH, R, d)`` rows of each (batch*head); any dtype, computed in fp32.
        kv_indices: ``(..., T, k_sel)`` selected key tiles of each query tile, leading dims
            flattening to ``BH`` (e.g. ``(B, heads, T, k_sel)``).
        tile_rows: ``(T, V)`` int64 row of each tile slot; entries at ranks
            ``>= valid_counts[t]`` are never read.
        valid_counts: ``(T,)`` real tokens per tile.
        scale: softmax scale (``1/sqrt(d)``).

    Returns:
        ``(BH, R, d)`` fp32; rows not covered by any tile's valid slots are zero.
    """
    BH, R, d = q.shape
    T, V = tile_rows.shape
    dev = q.device
    q_flat = rearrange(q, "bh r d -> (bh r) d").float()
    # K and V side by side: one gather of 2d-wide rows fetches both (one index pass,
    # twice-longer contiguous copies); the GEMMs read the halves through strides.
    # (BH*R, 2d); torch.cat copies once where rearrange([k, v], ...) would stack, then copy again.
    kv_flat = torch.cat([k.reshape(BH * R, d), v.reshape(BH * R, d)], dim=-1).float()
    out = torch.zeros(BH * R, d, dtype=torch.float32, device=dev)

    counts = valid_counts.to(device=dev, dtype=torch.int64)  # (T,)
    tile_rows = tile_rows.to(device=dev, dtype=torch.int64)
    sel = rearrange(kv_indices, "... t s -> (... t) s").to(torch.int64)  # (items, k_sel), item = bh*T + t
    row_base = (torch.arange(BH, device=dev) * R).repeat_interleave(T)  # (items,)
    key_len = counts[sel].sum(-1)  # (items,) valid keys each item attends to
    q_count = counts.repeat(BH)  # (items,) valid query rows of each item
    q_tile = torch.arange(T, device=dev).repeat(BH)  # (items,)
    ranks = torch.arange(V, device=dev)

    # Reused buffers, sized for the largest chunk / index group (see module docstring).
    # A chunk of C items with key lists of length <= L has C*L*d <= max(chunk_elements, max_len*d).
    n_items = BH * T
    max_len = int(key_len.max())
    kv_elems = min(max(chunk_elements, max_len * d), n_items * max_len * d)
    group_rows = min(n_items, INDEX_GROUP_ITEMS) * V

    units = []  # (valid query rows c, items) in index groups
    for c in torch.unique(q_count).tolist():
        group = torch.nonzero(q_count == c).squeeze(1)
        group = group[torch.argsort(key_len[group], stable=True)]  # ascending key-list length
        units += [(c, group[g0 : g0 + INDEX_GROUP_ITEMS]) for g0 in range(0, group.numel(), INDEX_GROUP_ITEMS)]

    def run(my_units) -> None:
        kv_buf = torch.empty(2 * kv_elems, device=dev)
        s_buf = torch.empty(kv_elems // d * V, device=dev)  # scores: C*c*L <= (C*L)*V
        q_buf = torch.empty(group_rows * d, device=dev)
        o_buf = torch.empty_like(q_buf)
        for c, items in my_units:
            _index_group(c, items, q_flat, kv_flat, out, sel, tile_rows, counts, row_base, key_len, q_tile, ranks,
                         kv_buf, s_buf, q_buf, o_buf, scale, chunk_elements, d)  # fmt: skip

    workers = torch.get_num_threads() if dev.type == "cpu" and len(units) > 1 else 1
    if workers <= 1:
        run(units)
    else:
        # One Python thread per core, each running single-threaded torch ops on its own share of
        # the index groups (the ops release the GIL): the per-chunk Python work of one thread
        # overlaps the other's GEMMs, instead of every small op being an OpenMP region that
        # waits for the slowest thread (Wan 480p on 2 quiet cores: 891 ms split vs 995-1086 ms
        # one multi-threaded loop, docs/kernels.md). Torch's intra-op thread count is
        # process-wide, so it is 1 for the duration of this call.
        from concurrent.futures import ThreadPoolExecutor

        shares = [units[i::workers] for i in range(workers)]
        torch.set_num_threads(1)
        try:
            with ThreadPoolExecutor(workers) as pool:
                for f in [pool.submit(run, share) for share in shares]:
                    f.result()
        finally:
            torch.set_num_threads(workers)
    return rearrange(out, "(bh r) d -> bh r d", bh=BH)


def _index_group(c, items, q_flat, kv_flat, out, sel, tile_rows, counts, row_base, key_len, q_tile, ranks,
                 kv_buf, s_buf, q_buf, o_buf, scale, chunk_elements, d) -> None:  # fmt: skip
    """One index group: items (batch*head, query tile) with `c` valid query rows each.

    Reshapes here are torch views with shape comments, not einops: they run once per chunk,
    and einops adds ~5 us per call to a view's ~2 us."""
    dev = q_flat.device
    G = items.numel()
    l_max = int(key_len[items[-1]])
    # Key rows of every item, valid slots compacted to the front: (G, l_max).
    sel_g = sel[items]  # (G, k_sel)
    rows = tile_rows[sel_g] + row_base[items, None, None]  # (G, k_sel, V)
    cnt = counts[sel_g]  # (G, k_sel)
    # Destination column of slot r of the s-th selected tile: tiles' valid rows are
    # concatenated, so it is (valid rows of tiles before s) + r. Padding slots are
    # sent to one trash element past the end instead of being masked out (a
    # boolean-mask compaction cost ~50 ms more at Wan 480p).
    first_col = torch.cumsum(cnt, -1) - cnt  # (G, k_sel)
    dest = (torch.arange(G, device=dev) * l_max)[:, None, None] + first_col[..., None] + ranks
    dest = torch.where(ranks < cnt[..., None], dest, G * l_max)  # (G, k_sel, V)
    key_rows = torch.zeros(G * l_max + 1, dtype=torch.int64, device=dev)
    key_rows.scatter_(0, dest.view(-1), rows.view(-1))
    key_rows = key_rows[:-1].view(G, l_max)
    q_rows = (tile_rows[q_tile[items], :c] + row_base[items, None]).view(-1)  # (G*c,)
    q_g = torch.index_select(q_flat, 0, q_rows, out=q_buf[: G * c * d].view(G * c, d))
    q_g = q_g.mul_(scale).view(G, c, d)
    o_g = o_buf[: G * c * d].view(G, c, d)
    lens = key_len[items].tolist()

    n_per_chunk = max(1, chunk_elements // (l_max * d))
    for s0 in range(0, G, n_per_chunk):
        C = min(n_per_chunk, G - s0)
        L = lens[s0 + C - 1]  # longest key list in this chunk
        idx = key_rows[s0 : s0 + C, :L].reshape(-1)  # (C*L,)
        kv_g = torch.index_select(kv_flat, 0, idx, out=kv_buf[: C * L * 2 * d].view(C * L, 2 * d))
        kv_g = kv_g.view(C, L, 2 * d)  # [..., :d] keys, [..., d:] values
        scores = torch.bmm(  # (C, c, d) @ (C, d, L) -> (C, c, L)
            q_g[s0 : s0 + C], kv_g[..., :d].transpose(1, 2), out=s_buf[: C * c * L].view(C, c, L)
        )
        for j in range(C):  # mask the tails of shorter key lists (few: lists are sorted)
            if lens[s0 + j] < L:
                scores[j, :, lens[s0 + j] :] = float("-inf")
        probs = torch.softmax(scores, dim=-1, out=scores)
        torch.bmm(probs, kv_g[..., d:], out=o_g[s0 : s0 + C])  # (C, c, d)
    out.index_copy_(0, q_rows, o_g.view(G * c, d))
