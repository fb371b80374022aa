"""What `videogen render` says before it starts: the render's estimated time (asking for `--yes`
when it runs past an hour) and the loaded model's peak-memory estimate.

The arithmetic is elsewhere: `videogen.config.estimate` (time, torch-free) and
`videogen.models.memory` (memory); this module only applies them to a resolved render.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from videogen.cli.options import UsageError
from videogen.config.estimate import render_cost, transformer_shape
from videogen.config.geometry import geometry_for
from videogen.config.presets import resolve_preset

if TYPE_CHECKING:
    from videogen.config.resolve import ResolvedRender
    from videogen.models.loader import VideoModel


def confirm_render_cost(resolved: ResolvedRender, model: str, device: str, yes: bool, quiet: bool = False) -> None:
    """Raise UsageError naming --yes when `resolved` (of `model`, a preset name or folder) is
    estimated to run past `CONFIRM_SECONDS` on `device` and `yes` is not given; print the
    estimate when it does and `yes` is given (unless quiet)."""
    import torch

    from videogen.models.loader import resolve_device

    dev = resolve_device(device)
    preset = resolve_preset(model)
    cost = render_cost(resolved, transformer_shape(preset), geometry_for(preset), dev.type, torch.get_num_threads())
    if cost.needs_confirmation and not yes:
        raise UsageError(f"this render is {cost.describe()}; add --yes to start it anyway")
    if cost.needs_confirmation and not quiet:
        print(f"videogen: {cost.describe()}", file=sys.stderr)


def print_memory_estimate(model: VideoModel, resolved: ResolvedRender) -> None:
    """The peak-memory line for `resolved`'s largest segment on the loaded `model` (stderr)."""
    from videogen.models.memory import estimate_memory, vae_tiling_on

    s = resolved.settings
    tiling = getattr(model.codec, "tiling", "off")
    estimate = estimate_memory(
        model, model.extras.get("offload", "none"), width=s.width, height=s.height,
        latent_frames=max(seg.latent_frames for seg in resolved.plan.segments), batch=2 if s.guidance > 1.0 else 1,
        vae_tiling=vae_tiling_on(tiling, s.width, s.height),
    )  # fmt: skip
    print(f"videogen: {estimate.describe()}", file=sys.stderr)
