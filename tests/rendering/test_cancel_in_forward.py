"""Cancel inside the transformer's forward pass: the cancel callback is asked before every
transformer block, so a cancel that arrives during a denoising step stops it within one block;
without a cancel nothing changes, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from videogen import RenderSpec, render
from videogen.errors import RenderCancelled
from videogen.io.video import VideoReader
from videogen.sampling.loop import StepProgress, denoise_segment


def _steps(model, cancel=None, steps=3):
    return denoise_segment(model, cond=model.prompt_encoder.encode(["a blue square moving left"]), uncond=None,
                           latent_frames=3, latent_size=(16, 16), prefix=None, steps=steps, guidance=1.0,
                           flow_shift=3.0, seed=11, segment=0, cancel=cancel)  # fmt: skip


def _run(gen) -> tuple[list[StepProgress], torch.Tensor]:
    events = []
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return events, stop.value


class BlockLog:
    """Forward hooks that record (step, block) for every transformer block that runs."""

    def __init__(self, transformer) -> None:
        self.calls: list[int] = []
        self.handles = [b.register_forward_hook(lambda *_, i=i: self.calls.append(i))
                        for i, b in enumerate(transformer.blocks)]  # fmt: skip

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def test_a_cancel_during_a_step_stops_the_forward_before_the_next_block(builtin_model):
    blocks = len(builtin_model.transformer.blocks)
    assert blocks >= 3
    log = BlockLog(builtin_model.transformer)
    asked = {"cancel": False}

    def flip_after_block_1(module, args, output):  # block 1 of the second step ends: the cancel arrives
        if len(log.calls) == blocks + 2:
            asked["cancel"] = True

    flip = builtin_model.transformer.blocks[1].register_forward_hook(flip_after_block_1)
    events = []
    try:
        with pytest.raises(RenderCancelled, match="block 2 of step 2 of segment 0"):
            gen = _steps(builtin_model, cancel=lambda: asked["cancel"])
            for event in gen:
                events.append(event)
    finally:
        flip.remove()
        log.close()
    assert log.calls == list(range(blocks)) + [0, 1]  # step 1 whole; step 2 stopped before block 2
    assert [e.step for e in events] == [1]  # the second step never completed
    assert all(not b._forward_pre_hooks for b in builtin_model.transformer.blocks)  # nothing left behind


def test_without_a_cancel_the_latents_are_bit_identical(builtin_model):
    _, plain = _run(_steps(builtin_model))
    events, checked = _run(_steps(builtin_model, cancel=lambda: False))
    assert [e.step for e in events] == [1, 2, 3]
    assert torch.equal(plain, checked)
    assert all(not b._forward_pre_hooks for b in builtin_model.transformer.blocks)


def test_a_render_asked_to_cancel_but_never_cancelled_writes_the_same_video(builtin_model, tmp_path):
    spec = RenderSpec.single("a red circle moving right", 1.5, steps=2, segment_seconds=1.0, overlap_frames=5)
    list(render(spec, tmp_path / "plain.mp4", model=builtin_model))
    asked = []
    list(render(spec, tmp_path / "checked.mp4", model=builtin_model, cancel=lambda: asked.append(1) or False))
    assert len(asked) > 4 * len(builtin_model.transformer.blocks)  # asked between blocks, not only per step
    assert np.array_equal(
        VideoReader(tmp_path / "plain.mp4").read_all(), VideoReader(tmp_path / "checked.mp4").read_all()
    )
    assert (tmp_path / "plain.mp4").read_bytes() == (tmp_path / "checked.mp4").read_bytes()
