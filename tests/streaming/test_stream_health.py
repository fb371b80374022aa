"""The health gate in a stream: a chunk is judged before its K/V are committed, a planted
collapse is re-generated (deterministically), and a stream whose chunks all pass is the
gate-off stream, frame for frame."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from videogen.streaming import StreamSpec, stream

stream_module = importlib.import_module("videogen.streaming.stream")  # the package's `stream` is the function

PROMPT = "a green square moving up on a gray background"


@pytest.fixture(scope="module")
def causal_model():
    import warnings

    from videogen.models.loader import load_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_model("builtin-causal", device="cpu", dtype="float32", attention="dense")


def _frames(chunks):
    return np.concatenate([c.frames for c in chunks])


def _plant_black(monkeypatch, chunk: int):
    """Chunk `chunk`'s first attempt decodes to black."""
    real = stream_module._decode
    calls: dict[int, int] = {}

    def decode(model, state, latents, **how):  # a preview's glance comes through here too
        frames = real(model, state, latents, **how)
        calls[state.chunk] = calls.get(state.chunk, 0) + 1
        return np.zeros_like(frames) if state.chunk == chunk and calls[state.chunk] == 1 else frames

    monkeypatch.setattr(stream_module, "_decode", decode)


def test_a_black_chunk_is_regenerated_before_it_enters_the_cache(causal_model, monkeypatch):
    spec = StreamSpec(PROMPT, seconds=2.0, steps=4, health_checks=["black"])
    clean = list(stream(spec, causal_model))
    assert all(c.attempts == 1 for c in clean)
    off = list(stream(StreamSpec(PROMPT, seconds=2.0, steps=4, health_checks=[]), causal_model))
    assert np.array_equal(_frames(clean), _frames(off))  # all pass: the gate changes nothing
    _plant_black(monkeypatch, chunk=2)
    a = list(stream(spec, causal_model))
    assert (a[2].attempts, a[2].reasons[0], a[2].failed_checks) == (2, ("black",), ())
    assert a[2].frames.max() > 0  # the black attempt was never emitted
    assert np.array_equal(_frames(a[:2]), _frames(clean[:2]))
    assert not np.array_equal(a[2].frames, clean[2].frames)  # the retry's own noise
    monkeypatch.undo()
    _plant_black(monkeypatch, chunk=2)
    assert np.array_equal(_frames(list(stream(spec, causal_model))), _frames(a))  # deterministic


def _plant_black_always(monkeypatch, chunks: set[int], first_only: set[int] = frozenset()):
    """Every attempt of `chunks`, and the first attempt of `first_only`, decode to black."""
    real = stream_module._decode
    calls: dict[int, int] = {}

    def decode(model, state, latents, **how):  # a preview's glance comes through here too
        frames = real(model, state, latents, **how)
        calls[state.chunk] = calls.get(state.chunk, 0) + 1
        black = state.chunk in chunks or (state.chunk in first_only and calls[state.chunk] == 1)
        return np.zeros_like(frames) if black else frames

    monkeypatch.setattr(stream_module, "_decode", decode)


def test_after_give_up_after_failing_chunks_the_next_is_judged_but_not_regenerated(causal_model, monkeypatch):
    import copy
    import dataclasses

    def with_give_up(n):
        model = copy.copy(causal_model)
        model.preset = dataclasses.replace(causal_model.preset,
                                           health=dataclasses.replace(causal_model.preset.health, give_up_after=n))  # fmt: skip
        return model

    model = with_give_up(1)
    spec = StreamSpec(PROMPT, seconds=3.0, steps=4, health_checks=["black"], retries=2)
    _plant_black_always(monkeypatch, chunks={1}, first_only={2, 3})
    chunks = list(stream(spec, model))
    # Chunk 1 fails all three attempts; chunk 2 fails its only one (given up); chunk 3, after a
    # failing run again, gets one attempt too: the run ends only when a chunk passes.
    assert [(c.attempts, c.failed_checks) for c in chunks[:4]] == [(1, ()), (3, ("black",)), (1, ("black",)),
                                                                    (1, ("black",))]  # fmt: skip
    assert len(chunks) > 4 and all(c.attempts == 1 and not c.failed_checks for c in chunks[4:])
    monkeypatch.undo()
    _plant_black_always(monkeypatch, chunks={1}, first_only={2, 3})
    always = list(stream(spec, with_give_up(0)))  # 0: every failing chunk re-generated
    assert [(c.attempts, c.failed_checks) for c in always[1:4]] == [(3, ("black",)), (2, ()), (2, ())]


def test_a_stream_spends_no_more_retries_than_its_budget(causal_model, monkeypatch):
    import copy
    import dataclasses

    model = copy.copy(causal_model)
    model.preset = dataclasses.replace(causal_model.preset, health=dataclasses.replace(
        causal_model.preset.health, give_up_after=0, retry_budget=0.0))  # fmt: skip
    spec = StreamSpec(PROMPT, seconds=3.0, steps=4, health_checks=["black"], retries=2)
    _plant_black_always(monkeypatch, chunks={1}, first_only={2, 3})
    chunks = list(stream(spec, model))
    # A budget of 0: the stream's 2 retries in all, which chunk 1 spends; 2 and 3 are kept black.
    assert [(c.attempts, c.failed_checks) for c in chunks[:4]] == [(1, ()), (3, ("black",)), (1, ("black",)),
                                                                    (1, ("black",))]  # fmt: skip


def test_a_stream_with_previews_keeps_the_chunks_it_kept_without(causal_model, monkeypatch):
    import copy
    import dataclasses

    # Chunk 1 black in every decode, chunk 2 in its first (attempt 0's preview): with previews
    # at noise level 0.885 (after 2 of 4 steps), chunk 1's attempts stop there and the first runs on and is kept, chunk 2's
    # retry passes; without, every attempt runs in full and the same ones are kept.
    spec = StreamSpec(PROMPT, seconds=2.0, steps=4, health_checks=["black"], retries=2)
    made = {}
    for preview in (0.0, 0.885):
        model = copy.copy(causal_model)
        model.preset = dataclasses.replace(causal_model.preset, health=dataclasses.replace(
            causal_model.preset.health, give_up_after=0, preview=preview))  # fmt: skip
        with monkeypatch.context() as patch:
            _plant_black_always(patch, chunks={1}, first_only={2})
            made[preview] = list(stream(spec, model))
    for chunks in made.values():
        assert [(c.attempts, c.failed_checks) for c in chunks[:3]] == [(1, ()), (3, ("black",)), (2, ())]
    assert np.array_equal(_frames(made[0.885]), _frames(made[0.0]))
    # Chunk 1: three attempts of 4 steps, or three previews after 2 steps and the first run on (2 + 2 + 2 + 2);
    # chunk 2: 4 + 4, or 2 + 4. Every other chunk: one attempt of 4 either way.
    assert [c.evals for c in made[0.0][:4]] == [4, 12, 8, 4] and [c.evals for c in made[0.885][:4]] == [4, 8, 6, 4]


def test_a_regenerated_chunk_samples_at_the_retry_guidance(causal_model, monkeypatch):
    import copy
    import dataclasses

    model = copy.copy(causal_model)
    model.preset = dataclasses.replace(causal_model.preset, health=dataclasses.replace(
        causal_model.preset.health, give_up_after=0, retry_guidance=5.0))  # fmt: skip
    seen: list[tuple[int, float | None]] = []  # (chunk, guidance) per attempt
    real = stream_module.DenoiseRequest

    def request(noise, forward, steps, guidance, *rest, **kw):
        seen.append((kw["index"], guidance))
        return real(noise, forward, steps, guidance, *rest, **kw)

    monkeypatch.setattr(stream_module, "DenoiseRequest", request)
    _plant_black(monkeypatch, chunk=2)
    chunks = list(stream(StreamSpec(PROMPT, seconds=2.0, steps=4, health_checks=["black"]), model))
    assert [c.attempts for c in chunks] == [1, 1, 2] + [1] * (len(chunks) - 3)
    assert seen == [(0, 3.0), (1, 3.0), (2, 3.0), (2, 5.0)] + [(i, 3.0) for i in range(3, len(chunks))]
    monkeypatch.undo()
    _plant_black(monkeypatch, chunk=2)
    monkeypatch.setattr(stream_module, "DenoiseRequest", request)
    seen.clear()
    unguided = list(stream(StreamSpec(PROMPT, seconds=2.0, steps=4, guidance=1.0, health_checks=["black"]), model))
    assert unguided[2].attempts == 2 and all(g is None for _, g in seen)  # an unguided stream stays unguided
