"""A finished render's tail: what a later render needs to continue its video (an extension).

The tail is the last segment's latents (the extension's clean prefix), the stitcher's state (seam
blend, colour anchor), the settings that must match, the number of segments so far (the
extension continues the noise stream after them), where the source's clock ended and its last
prompt (an extension with another prompt starts its own colour anchor), and its anchor frame
(a preset's `anchor_frame`: an extension under the same prompt stays anchored on it). It is one `torch.save`
file, written atomically.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from videogen.config.resolve import ResolvedSettings
from videogen.errors import InvalidOption
from videogen.sampling.loop import SegmentAnchor, anchor_from_dict, anchor_to_dict

# Settings a continuation must share with its source: the frames must join without a seam.
MATCHING_SETTINGS = ("width", "height", "fps", "overlap_frames")


@dataclass(frozen=True)
class RenderTail:
    handoff: torch.Tensor  # (1, C, F, h, w): the last segment's latents
    stitcher: dict[str, Any]  # `Stitcher.state_dict()` before its final flush
    settings: dict[str, Any]  # the source's `ResolvedSettings`, as a dict
    model: str  # the source's preset name
    segments: int  # segments of the source video (the extension's numbering continues after them)
    time_end: float | None  # where the source's clock ended, in latent frames (None: unknown)
    prompt: str | None = None  # the source's last segment's prompt (None: a tail saved before it was kept)
    anchor: SegmentAnchor | None = None  # the source's anchor frame (a preset's `anchor_frame`), for an extension

    def to_dict(self) -> dict[str, Any]:
        return {"handoff": self.handoff, "stitcher": self.stitcher, "settings": self.settings, "model": self.model,
                "segments": self.segments, "time_end": self.time_end, "prompt": self.prompt,
                "anchor": anchor_to_dict(self.anchor)}  # fmt: skip


def load_tail(path: str | os.PathLike, model_name: str, settings: ResolvedSettings) -> RenderTail:
    """The tail at `path`, checked to fit a render of `model_name` with `settings`."""
    p = Path(path)
    if not p.is_file():
        raise InvalidOption("continue_from", str(path), "no such render tail file")
    raw = torch.load(p, weights_only=False)
    tail = RenderTail(raw["handoff"], raw["stitcher"], raw["settings"], raw["model"], int(raw["segments"]),
                      raw.get("time_end"), raw.get("prompt"), anchor_from_dict(raw.get("anchor")))  # fmt: skip
    mine = asdict(settings)
    for key in MATCHING_SETTINGS:
        if tail.settings[key] != mine[key]:
            raise InvalidOption("continue_from", str(path),
                                f"the source video has {key}={tail.settings[key]}, this render {mine[key]}; they must match")  # fmt: skip
    if tail.model != model_name:
        raise InvalidOption(
            "continue_from", str(path), f"the source was rendered by {tail.model!r}, not {model_name!r}"
        )
    return tail


def save_tail(path: str | os.PathLike, tail: RenderTail) -> None:
    tmp = Path(path).with_suffix(".tmp")
    torch.save(tail.to_dict(), tmp)
    os.replace(tmp, path)  # atomic: a crash leaves no half-written tail
