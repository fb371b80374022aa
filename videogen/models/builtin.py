"""The built-in model: a small `WanTransformer3DModel` + `PixelCodec` + `VocabPromptEncoder`.

It runs through exactly the same pipeline code as real Wan checkpoints (with conditioning channels
concatenated to its input, the way Wan I2V concatenates its own: constant position channels, see
`position_channels`, and the caption's moving frames, see `MotionLayout`). Sizes (64x64 at 16 fps):
the pixel codec folds 4x4x4 pixel blocks into 192 channels, the transformer patches 1x2x2, so one
token covers 4 frames x 8x8 pixels; a 5 s segment (81 frames, 21 latent frames) is 21x8x8 = 1,344
tokens, which a 2-core CPU denoises in seconds.

Trained weights ship as `weights/builtin.safetensors` (and `builtin_causal.safetensors` for
streaming) beside this file, written by `videogen train builtin`; without the file the weights are a
fixed random initialisation (seed 0), so output is deterministic but not recognisable.
`is_trained()` tells which.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from einops import rearrange, repeat
from torch import nn

from videogen.config import environment
from videogen.config.geometry import BUILTIN_GEOMETRY, builtin_block_count, builtin_width, safetensors_shapes
from videogen.models.codec import PixelCodec
from videogen.models.text import VocabPromptEncoder

WEIGHTS_DIR = environment.BUILTIN_WEIGHTS_DIR
WEIGHTS_FILE = WEIGHTS_DIR / "builtin.safetensors"
CAUSAL_WEIGHTS_FILE = WEIGHTS_DIR / "builtin_causal.safetensors"  # the block-causal variant (streaming)

COLOURS = ["red", "green", "blue", "yellow", "white", "orange", "purple", "cyan", "black", "gray"]
SHAPES = ["circle", "square", "triangle"]
MOTIONS = ["moving", "left", "right", "up", "down", "bouncing", "still", "staying"]
GLUE = ["a", "an", "and", "on", "background", "with", "the", "slowly", "getting", "brighter", "darker", "light"]
VOCAB = COLOURS + SHAPES + MOTIONS + GLUE

TEXT_DIM = 64
LAYOUT_SLOTS = 2  # objects a caption can name
# Octaves of the moving frames' phases: periods of 64, 32, 16 and 8 px at 64 px. The low ones say
# where the object is; the high ones where its edges fall within a token (8x8 px), which a small
# MLP cannot compute from smooth features alone (spectral bias; Tancik et al. 2020).
LAYOUT_HARMONICS = (1, 2, 4, 8)
LAYOUT_SUBFRAMES = 4  # a latent frame's 4 video frames, each with its own phase (no 4 Hz stutter)
# per slot and sub-frame: sin/cos of each harmonic of the moving x and y phase
LAYOUT_CHANNELS = LAYOUT_SLOTS * LAYOUT_SUBFRAMES * len(LAYOUT_HARMONICS) * 4
HEAD_DIM = 32  # a wider model (`--heads`) has more heads of this size, and a feed-forward 4x its width
FFN_PER_HEAD = 4 * HEAD_DIM
TRANSFORMER_CONFIG = dict(
    patch_size=BUILTIN_GEOMETRY.patch_size,
    num_attention_heads=4,
    attention_head_dim=HEAD_DIM,
    # 192 pixel channels + x, y, t position channels (`position_channels`) + the caption's moving
    # coordinate frames (`MotionLayout`)
    in_channels=192 + 3 + LAYOUT_CHANNELS,
    out_channels=192,
    text_dim=TEXT_DIM,
    freq_dim=64,
    ffn_dim=4 * FFN_PER_HEAD,  # for its 4 heads
    num_layers=4,
    cross_attn_norm=True,
    qk_norm="rms_norm_across_heads",
    eps=1e-6,
    rope_max_seq_len=1024,
)


def position_channels(latents: torch.Tensor, frames: list[int] | torch.Tensor | None = None) -> torch.Tensor:
    """(B, 3, F, h, w): each latent cell's x and y in [-1, 1] and its latent frame's index in the
    clip (/ 8; `frames` gives them: a list, or (B, F) per sample; default 0..F-1; an anchor frame,
    a clean frame of the shot's first segment at its own time, sits at `SINK_POSITION`: the object's
    true size and shape, which a chain's prefix loses by compounding), concatenated to the noisy latents as
    conditioning channels (as Wan 2.1 I2V concatenates its mask and image latents). Wan has no
    absolute position embedding (RoPE is relative), so from a uniform background at high noise a
    Wan model can tell neither the middle of the frame from its edge nor the first frame from the
    last: a small one then cannot learn where a caption's object starts, nor move it (it draws a
    still blob). Big Wan models break that symmetry from the noise; these constant channels give
    the built-in model the position outright. Streaming passes the re-indexed window positions."""
    b, _, f, h, w = latents.shape
    dev, dt = latents.device, latents.dtype
    ys = torch.linspace(-1 + 1 / h, 1 - 1 / h, h, device=dev, dtype=dt)
    xs = torch.linspace(-1 + 1 / w, 1 - 1 / w, w, device=dev, dtype=dt)
    ts = torch.as_tensor(list(range(f)) if frames is None else frames, device=dev).to(dt) / 8
    ts = ts.expand(b, f) if ts.dim() == 1 else ts  # (B, F)
    space = torch.stack([repeat(xs, "w -> b f h w", b=b, f=f, h=h), repeat(ys, "h -> b f h w", b=b, f=f, w=w)], 1)
    return torch.cat([space, repeat(ts, "b f -> b 1 f h w", h=h, w=w)], dim=1)


# The moving coordinate frames `MotionLayout` starts from: (x0, y0, vx, vy) in frame widths and
# frame widths per latent frame, for staying still, moving right, left, up and down. They start at
# the generator's canonical layout and speed (`videogen.training.scenes.canonical_start`, SPEED px/frame at
# 64 px, 4 frames per latent frame) and are learned from there, or held there (`MotionLayout.lock`).
_V = 0.75 * 4 / 64
_FRAME_INIT = [
    [0.5, 0.5, 0.0, 0.0],
    [0.25, 0.5, _V, 0.0],
    [0.75, 0.5, -_V, 0.0],
    [0.5, 0.75, 0.0, -_V],
    [0.5, 0.25, 0.0, _V],
]
# The motion each of those frames is (a bouncing object starts at the centre, as a still one does,
# and no straight frame follows it further). A layout with a blank gate (`MotionLayout.add_blank`)
# has one more gate than frames, `BLANK_GATE`: no frame, its channels zero.
FRAME_MOTIONS = ("still", "right", "left", "up", "down")
BLANK_GATE = len(FRAME_MOTIONS)
BLANK_GATE_BIAS = -4.0  # a new blank gate's bias below the others': ~0.4% of the weight among 5 zero gates
LAYOUT_GAIN = 2.0


class MotionLayout(nn.Module):
    """The caption's objects as moving coordinate frames, given to the transformer as input channels.

    Wan's only text path is cross-attention, which adds the same thing to every token: enough for a
    small model to learn which *colour* to draw, not *where* (a start position and a velocity, i.e.
    a product of the caption and the token's position; docs/builtin-model.md has the figures).
    This path makes that product explicit and learned: for each of `LAYOUT_SLOTS` objects, a
    learned query pools the caption's embeddings, a linear gate mixes `frames` learned moving
    frames (x0, y0, vx, vy), and each token gets sin/cos of `LAYOUT_HARMONICS` of its phase in the
    mixed frames at each of its latent frame's video frames. In the right frame a moving object is
    still and always at the same phase, so drawing it is the same task at every time and place.
    The phases are periodic, as the scenes are (motion wraps around), so any clock is numerically
    fine; the shipped weights saw clocks up to ~110 latent frames, so streams re-base theirs
    (`videogen.streaming.recache.rebase_clock`).
    """

    def __init__(self, dim: int = TEXT_DIM, slots: int = LAYOUT_SLOTS, harmonics=LAYOUT_HARMONICS,
                 subframes: int = LAYOUT_SUBFRAMES) -> None:  # fmt: skip
        super().__init__()
        self.harmonics, self.subframes = tuple(harmonics), subframes
        self.queries = nn.Parameter(torch.randn(slots, dim) * 0.02)
        self.gate = nn.Linear(dim, len(_FRAME_INIT))
        nn.init.zeros_(self.gate.weight)
        nn.init.zeros_(self.gate.bias)
        self.frames = nn.Parameter(torch.tensor(_FRAME_INIT).repeat(slots, 1, 1))  # (S, J, 4)

    def lock(self) -> None:
        """Hold the moving frames at the scenes' own motions (`_FRAME_INIT`: each motion's canonical
        start and exact speed), no longer learned. Learned, they wander: the round-4 weights'
        moving frames run at 0.56-1.64x the scenes' speed and their still ones at the scenes'
        speed, some in another direction than their motion, so past the first seconds the
        channels no longer say where an object is (docs/builtin-model.md, "Exact moving frames")."""
        with torch.no_grad():
            self.frames.copy_(torch.tensor(_FRAME_INIT).expand_as(self.frames))
        self.frames.requires_grad_(False)

    @property
    def has_blank(self) -> bool:
        """Whether the gate has the blank output (`add_blank`) past the frames' outputs."""
        return self.gate.out_features > self.frames.shape[1]

    def add_blank(self) -> None:
        """Give the gate one more output, `BLANK_GATE`, that mixes no frame: a slot whose weight is
        on it gets zero channels. A bouncing object has no straight moving frame that stays true:
        the still frame says it is at the centre after its first bounce, and a blend of frames
        parts from it as fast (docs/builtin-model.md, "No frame for a bounce"). The new output
        starts with zero weights and `BLANK_GATE_BIAS` below the lowest bias, so the gates are
        nearly as they were. No-op when the gate has it."""
        if self.has_blank:
            return
        old = self.gate
        gate = nn.Linear(old.in_features, old.out_features + 1).to(old.weight)  # its device and dtype
        with torch.no_grad():
            gate.weight.zero_()
            gate.weight[:-1] = old.weight
            gate.bias[:-1] = old.bias
            gate.bias[-1] = old.bias.min() + BLANK_GATE_BIAS
        self.gate = gate

    def gate_logits(self, embeds: torch.Tensor) -> torch.Tensor:
        """(B, S, J) the gates before their softmax (`gates`)."""
        e = embeds.float()
        valid = e.abs().sum(-1) > 0  # (B, L)
        scores = torch.einsum("sd,bld->bsl", self.queries, e) / e.shape[-1] ** 0.5
        attn = torch.softmax(scores.masked_fill(~valid[:, None], float("-inf")), dim=-1).nan_to_num(0.0)
        pooled = torch.einsum("bsl,bld->bsd", attn, e)  # an empty prompt pools to 0: the gate's bias
        return self.gate(pooled)

    def gates(self, embeds: torch.Tensor) -> torch.Tensor:
        """(B, S, J) frame weights per slot from prompt embeddings (B, L, D) (zero past the prompt);
        with a blank gate, its weight last (J = frames + 1)."""
        return torch.softmax(self.gate_logits(embeds), dim=-1)

    def forward(self, latents: torch.Tensor, embeds: torch.Tensor, absolute=None) -> torch.Tensor:
        """(B, LAYOUT_CHANNELS, F, h, w), ordered (slot, sub-frame, harmonic, sin x/cos x/sin y/cos y).
        `absolute`: the latent frames' indices in the video (a list, or (B, F) per sample); default
        0..F-1. A latent frame's index is the time of its last video frame (the codec's groups end
        on frame 4i), so sub-frame k of latent frame t is at t - (3 - k) / 4. The first latent
        frame of a clip repeats one frame; the position channels tell the model which that is."""
        b, _, f, h, w = latents.shape
        dev = latents.device
        t = torch.arange(f, device=dev) if absolute is None else torch.as_tensor(absolute, device=dev)
        t = t.expand(b, f) if t.dim() == 1 else t  # (B, F)
        n = self.subframes
        sub = torch.arange(n, device=dev, dtype=torch.float64) - (n - 1)  # -(n-1)..0, in 1/n latent frames
        t = rearrange(t.double()[..., None] + sub / n, "b f n -> b (f n)")
        xs = (torch.arange(w, device=dev, dtype=torch.float32) + 0.5) / w
        ys = (torch.arange(h, device=dev, dtype=torch.float32) + 0.5) / h
        x0, y0, vx, vy = self.frames.unbind(-1)  # (S, J)

        def travelled(v):  # (B, S, J, F*n, 1): v * t in whole periods removed (float64: t may be huge)
            d = v.double()[None, :, :, None] * t[:, None, None, :]
            return (d - d.detach().floor()).float()[..., None]

        # phases (B, S, J, F*n, w|h): position minus the frame's origin at time t, on each axis
        px = xs.view(1, 1, 1, 1, w) - x0[None, :, :, None, None] - travelled(vx)
        py = ys.view(1, 1, 1, 1, h) - y0[None, :, :, None, None] - travelled(vy)
        gates = self.gates(embeds).to(dev)[..., : self.frames.shape[1]]  # a blank gate mixes nothing

        def mix(feat):  # the gates mix each frame's features (each depends on x or y only: mix, then expand)
            return torch.einsum("bsj,bsjtn->bstn", gates, feat)

        feats = []
        shape = (-1, -1, -1, h, w)
        for m in self.harmonics:
            ax, ay = 2 * torch.pi * m * px, 2 * torch.pi * m * py
            feats += [
                mix(torch.sin(ax))[..., None, :].expand(shape),
                mix(torch.cos(ax))[..., None, :].expand(shape),
                mix(torch.sin(ay))[..., :, None].expand(shape),
                mix(torch.cos(ay))[..., :, None].expand(shape),
            ]
        stacked = torch.stack(feats, dim=2)  # (B, S, 4H, F*n, h, w), k = harmonic x (sin/cos x/y)
        channels = rearrange(stacked, "b s k (f n) h w -> b (s n k) f h w", n=n)
        return (LAYOUT_GAIN * channels).to(latents.dtype)


class BuiltinPromptEncoder(VocabPromptEncoder):
    """The built-in vocabulary encoder plus its `MotionLayout` (saved with it, under `text.`)."""

    def __init__(self) -> None:
        super().__init__(VOCAB, TEXT_DIM)
        self.layout = MotionLayout(TEXT_DIM)

    def condition(self, latents: torch.Tensor, frames: list[int] | torch.Tensor | None = None,
                  embeds: torch.Tensor | None = None,
                  absolute=None) -> torch.Tensor:  # fmt: skip
        """The transformer's input: latents + position channels (at `frames`, a list or (B, F))
        + the caption's moving frames (at `absolute` frame indices, default `frames`)."""
        if embeds is None:
            raise ValueError("the built-in model's input needs the prompt embeddings")
        layout = self.layout(latents, embeds, frames if absolute is None else absolute)
        return torch.cat([latents, position_channels(latents, frames), layout], dim=1)


def build_fresh(init_seed: int = 0, layers: int | None = None, heads: int | None = None):
    """(transformer, prompt_encoder) with a seeded random initialisation: the start of training.
    `layers`, `heads`: transformer blocks and attention heads (default `TRANSFORMER_CONFIG`'s; a
    weights file's: `weights_size`)."""
    from diffusers import WanTransformer3DModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        transformer = WanTransformer3DModel(**transformer_config(layers, heads))
        encoder = BuiltinPromptEncoder()
        torch.nn.init.normal_(encoder.pos, std=0.02)
    return transformer, encoder


def build_builtin(init_seed: int = 0, variant: str = "builtin", weights: str = "builtin.safetensors",
                  decoder: str | None = None):  # fmt: skip
    """(transformer, codec, prompt_encoder) with shipped weights if present, else seeded random ones.
    `variant` names the preset ("builtin", "builtin-causal"), `weights` its file in `weights/`,
    `decoder` the codec's temporal decoder's file there (None: none; missing: none, with a warning)."""
    path = weights_file(variant, weights)
    transformer, encoder = build_fresh(init_seed, *(weights_size(path) if path.is_file() else ()))
    if path.is_file():
        load_weights(transformer, encoder, path)
    else:
        warnings.warn(
            f"the {variant} model has no trained weights ({path} is missing): using fixed random weights "
            "(output is not recognisable)",
            stacklevel=2,
        )
    transformer.eval()
    encoder.eval()
    refiner = None
    if decoder is not None:
        from videogen.models.refiner import load_refiner

        path = decoder_file(decoder)
        if path.is_file():
            refiner = load_refiner(path)
        else:
            warnings.warn(f"the {variant} model's decoder {path} is missing: decoding without it "
                          "(objects move in 4-frame steps)", stacklevel=2)  # fmt: skip
    codec = PixelCodec(BUILTIN_GEOMETRY.temporal_factor, BUILTIN_GEOMETRY.spatial_factor, refiner)
    return transformer, codec, encoder


def transformer_config(layers: int | None = None, heads: int | None = None) -> dict:
    """`TRANSFORMER_CONFIG` with `layers` transformer blocks and `heads` attention heads of its
    head size, the feed-forward 4x the width (None: its own 4 and 4)."""
    config = dict(TRANSFORMER_CONFIG)
    if layers is not None:
        config["num_layers"] = int(layers)
    if heads is not None:
        config["num_attention_heads"] = int(heads)
        config["ffn_dim"] = FFN_PER_HEAD * int(heads)
    return config


def weights_size(path) -> tuple[int, int]:
    """(transformer blocks, attention heads) of a built-in weights file, from its header: its
    `transformer.blocks.N.*` keys and its width."""
    return _size(safetensors_shapes(path))


def state_size(state: dict[str, torch.Tensor]) -> tuple[int, int]:
    """`weights_size` of a weights state in memory."""
    return _size({k: tuple(v.shape) for k, v in state.items()})


def _size(shapes: dict[str, tuple[int, ...]]) -> tuple[int, int]:
    width = builtin_width(shapes)
    heads = width // HEAD_DIM if width else TRANSFORMER_CONFIG["num_attention_heads"]
    return builtin_block_count(shapes) or int(TRANSFORMER_CONFIG["num_layers"]), int(heads)


# A block's outputs into the residual stream: self-attention, cross-attention, feed-forward.
_BLOCK_OUTPUTS = ("attn1.to_out.0.", "attn2.to_out.0.", "ffn.net.2.")


def grow_layers(state: dict[str, torch.Tensor], layers: int) -> dict[str, torch.Tensor]:
    """`state` (a built-in weights state) with `layers` transformer blocks: the new ones are copies
    of blocks spread evenly through the stack, each placed after the block it copies, with its
    three outputs into the residual stream (self-attention, cross-attention, feed-forward) zeroed,
    so the grown model computes exactly what the original did and training starts from it (block
    expansion, as LLaMA Pro grows a trained model). Fewer layers than `state` holds is an error."""
    head = "transformer.blocks."
    old = builtin_block_count(state) or 0
    if layers < old:
        raise ValueError(f"cannot grow {old} transformer blocks to {layers}")
    new = layers - old
    copy_after = [round((i + 1) * old / new) - 1 for i in range(new)] if new else []
    order: list[tuple[int, bool]] = []  # (source block, is a new copy)
    for b in range(old):
        order.append((b, False))
        order += [(b, True)] * copy_after.count(b)
    out = {k: v for k, v in state.items() if not k.startswith(head)}
    for dest, (src, fresh) in enumerate(order):
        for k, v in state.items():
            if k.startswith(f"{head}{src}."):
                rest = k[len(f"{head}{src}.") :]
                zero = fresh and rest.startswith(_BLOCK_OUTPUTS)
                out[f"{head}{dest}.{rest}"] = torch.zeros_like(v) if zero else v.clone()
    return out


def grow_width(state: dict[str, torch.Tensor], heads: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """`state` (a built-in weights state) with `heads` attention heads, a whole multiple k of its
    own, and the width and feed-forward k times theirs (Net2WiderNet, Chen et al. 2016): every
    unit of the residual stream and of the feed-forward is copied k times, so the wider model
    carries k copies of what the original computes, heads included, and each weight reading a
    copied unit is split over its k copies. LayerNorm and RMSNorm see the same mean and spread in
    k copies, so the wider model computes what the original did (to rounding). The split is
    random per weight (shares of U(0.5, 1.5), normalised; seeded by `seed`), which breaks the
    copies' symmetry: with an even split they would get the same gradients and stay copies."""
    have = state_size(state)[1]
    if heads < have or heads % have:
        raise ValueError(f"cannot widen {have} attention heads to {heads}: give a whole multiple of {have}")
    k = heads // have
    if k == 1:
        return dict(state)
    g = torch.Generator().manual_seed(seed)

    def rows(w: torch.Tensor, groups: int = 1) -> torch.Tensor:  # k copies of each output unit
        grouped = w.reshape(groups, w.shape[0] // groups, *w.shape[1:])
        return torch.cat([grouped] * k, dim=1).reshape(-1, *w.shape[1:])

    def split(w: torch.Tensor) -> torch.Tensor:  # each input weight shared out over its k copies
        shares = torch.rand((k, *w.shape), generator=g, dtype=torch.float64) + 0.5
        shares = shares / shares.sum(0)
        return torch.cat([(w.double() * s).to(w.dtype) for s in shares], dim=1)

    out = {}
    for name, v in state.items():
        if not name.startswith("transformer."):
            out[name] = v.clone()
        elif name.endswith("scale_shift_table"):  # (1, n, width)
            out[name] = torch.cat([v] * k, dim=-1)
        elif name.endswith("time_proj.weight"):  # six modulation vectors of the width, from the width
            out[name] = split(rows(v, 6))
        elif name.endswith("time_proj.bias"):
            out[name] = rows(v, 6)
        elif name.endswith("proj_out.weight"):  # pixels from the width
            out[name] = split(v)
        elif name.endswith("proj_out.bias"):
            out[name] = v.clone()
        elif name.endswith(("patch_embedding.weight", "embedder.linear_1.weight")) or v.dim() == 1:
            out[name] = rows(v)  # the width from pixels, a timestep or a caption; biases, norms
        else:  # the width (or the feed-forward) from the width (or the feed-forward)
            out[name] = split(rows(v))
    return out


def load_weights(transformer, encoder, path) -> None:
    """Load a built-in weights file (keys `transformer.*` and `text.*`, as `videogen.training.train`
    writes them). A file for another input width, block count or module layout is refused, naming
    the mismatch."""
    from safetensors.torch import load_file

    load_state(transformer, encoder, load_file(str(path)), str(path))


def load_state(transformer, encoder, state: dict[str, torch.Tensor], name: str) -> None:
    """`load_weights` from a state dict (`name` says where it came from in errors)."""
    key, want = "transformer.patch_embedding.weight", transformer.patch_embedding.weight.shape[1]
    if key in state and state[key].shape[1] != want:
        raise RuntimeError(f"{name}: the transformer takes {state[key].shape[1]} input channels; "
                           f"the built-in model takes {want}")  # fmt: skip
    blocks = builtin_block_count(state)
    if blocks is not None and blocks != len(transformer.blocks):
        raise RuntimeError(f"{name}: holds {blocks} transformer blocks; the model has {len(transformer.blocks)}")
    gate = state.get("text.layout.gate.weight")
    if gate is not None and gate.shape[0] == encoder.layout.frames.shape[1] + 1:
        encoder.layout.add_blank()  # weights trained with the blank gate (`MotionLayout.add_blank`)
    for prefix, module in (("transformer.", transformer), ("text.", encoder)):
        part = {k[len(prefix) :]: v.float() for k, v in state.items() if k.startswith(prefix)}
        missing, unexpected = module.load_state_dict(part, strict=False)
        if missing or unexpected:
            raise RuntimeError(f"{name}: {prefix[:-1]} keys do not match (missing {missing}, unexpected {unexpected})")


def cast_transformer(transformer, device: torch.device, dtype: torch.dtype):
    """Move to `device` and cast to `dtype`, keeping the modules Wan needs in fp32 (RoPE, time
    embedding, modulation tables, norms) in fp32, as `from_pretrained(torch_dtype=...)` does."""
    transformer.to(device)
    if dtype == torch.float32:
        return transformer
    keep = tuple(transformer._keep_in_fp32_modules or ())
    for name, module in transformer.named_modules():
        if any(part in keep for part in name.split(".")):
            continue
        for p in module.parameters(recurse=False):
            p.data = p.data.to(dtype)
    return transformer


def weights_file(variant: str = "builtin", weights: str = "builtin.safetensors") -> Path:
    return environment.builtin_weights(weights, variant)


def decoder_file(decoder: str) -> Path:
    """The codec's temporal decoder file: `decoder` in `weights/`, or $VIDEOGEN_BUILTIN_DECODER_WEIGHTS."""
    return environment.builtin_weights(decoder, "builtin-decoder")


def is_trained(variant: str = "builtin", weights: str = "builtin.safetensors") -> bool:
    return weights_file(variant, weights).is_file()
