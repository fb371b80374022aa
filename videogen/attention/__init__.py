"""Self-attention for the Wan transformer: one processor (`processor`), its per-call context
(`call`), the tile-sparse backend (`sparse`), block-causal attention and the KV cache (`causal`)."""
