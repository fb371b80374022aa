"""The built-in codec's temporal decoder: spreads a latent frame's motion over its video frames.

The built-in transformer draws a latent frame's 4 video frames nearly alike, the object at about
the group's middle position, so objects move in 4-frame steps (the 4 Hz stutter,
docs/builtin-model.md). Wan's VAE turns one latent frame into 4 distinct frames with a learned,
causal 3D decoder; `TemporalRefiner` is the built-in codec's small counterpart. It reads a latent
frame's 4 decoded frames together with the 4 of the latent frame before it (causal: a stream
chunk or a chained segment decodes with its previous latent frame in front, so nothing waits for
the future) and adds a correction to the 4 frames: the object placed where its motion puts it in
each frame, its edges cleaned. It is trained on the transformer's own output against the clean
clips (`videogen train decoder`, `videogen.training.decoder`).

Padding is circular: objects wrap round the frame edge.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

GROUP = 4  # video frames per latent frame (the built-in codec's temporal factor)


def _conv(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, padding_mode="circular")


class TemporalRefiner(nn.Module):
    """(B, 3, 2*GROUP, H, W) -> (B, 3, GROUP, H, W): the previous latent frame's video frames and
    the current one's (in [-1, 1]) -> the current ones refined. A small U-Net over frames stacked
    as channels; its last layer starts at zero, so an untrained refiner is the identity."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        cin, cout = 3 * 2 * GROUP, 3 * GROUP
        self.width = width
        self.inp = _conv(cin, width)
        self.down = _conv(width, width, stride=2)
        self.mid = nn.ModuleList([_conv(width, width), _conv(width, width)])
        self.up = _conv(2 * width, width)
        self.out = _conv(width, cout)
        with torch.no_grad():
            self.out.weight.zero_()
            self.out.bias.zero_()  # type: ignore[union-attr]

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        b, c, t, h, w = frames.shape
        if t != 2 * GROUP or c != 3 or h % 2 or w % 2:
            raise ValueError(
                f"TemporalRefiner takes (B, 3, {2 * GROUP}, H, W) with even sides, got {tuple(frames.shape)}"
            )
        x = frames.transpose(1, 2).reshape(b, t * c, h, w)  # channels ordered (frame, rgb)
        skip = F.gelu(self.inp(x))
        y = F.gelu(self.down(skip))
        for layer in self.mid:
            y = y + F.gelu(layer(y))
        y = F.interpolate(y, scale_factor=2, mode="nearest")
        y = F.gelu(self.up(torch.cat([y, skip], dim=1)))
        delta = self.out(y).view(b, GROUP, c, h, w).transpose(1, 2)
        return frames[:, :, GROUP:] + delta

    def refine(self, groups: torch.Tensor) -> torch.Tensor:
        """(B, 3, GROUP*F, H, W), every latent frame's video frames (the first one's included, for
        context) -> the same, latent frames 1..F-1 refined each from its own and the one before;
        latent frame 0 is returned as it came (nothing precedes it)."""
        b, c, t, h, w = groups.shape
        f = t // GROUP
        if f < 2:
            return groups
        param = next(self.parameters())
        if param.device != groups.device:
            self.to(groups.device)
        pairs = torch.stack([groups[:, :, GROUP * (i - 1) : GROUP * (i + 1)] for i in range(1, f)], dim=1)
        with torch.no_grad():
            refined = self(pairs.reshape(b * (f - 1), c, 2 * GROUP, h, w).to(param.dtype))
        refined = refined.to(groups.dtype).view(b, f - 1, c, GROUP, h, w).permute(0, 2, 1, 3, 4, 5)
        out = torch.cat([groups[:, :, :GROUP], refined.reshape(b, c, (f - 1) * GROUP, h, w)], dim=2)
        return out.clamp(-1, 1)


def load_refiner(path: str | Path) -> TemporalRefiner:
    """A `TemporalRefiner` from a safetensors file (keys as `state_dict`, plus `width` in the
    metadata), in eval mode. A file for another layout is refused, naming the mismatch."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    refiner = TemporalRefiner(int(meta.get("width", 32)))
    state = {k: v.float() for k, v in load_file(str(path)).items()}
    try:
        refiner.load_state_dict(state, strict=True)
    except RuntimeError as exc:  # missing, unexpected or mis-shaped keys
        detail = " ".join(str(exc).split())
        raise RuntimeError(f"{path}: refiner keys do not match: {detail}") from None
    return refiner.eval()


def save_refiner(refiner: TemporalRefiner, path: str | Path) -> None:
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous() for k, v in refiner.state_dict().items()}
    save_file(state, str(path), metadata={"width": str(refiner.width)})
