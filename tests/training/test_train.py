"""Training the built-in model: deterministic batches, resumable, exported weights load back."""

import random

import pytest
import torch
from safetensors.torch import load_file

from videogen.errors import InvalidOption
from videogen.models.codec import PixelCodec
from videogen.training.config import TrainConfig
from videogen.training.data import make_batch
from videogen.training.scenes import PALETTE, random_scene
from videogen.training.train import budget_steps, train_builtin

TINY = dict(latent_frames=(5,), batch_tokens=320, warmup=2, checkpoint_every=2, lr=1e-3, compile=False)


def test_batches_are_a_pure_function_of_seed_and_step():
    cfg = TrainConfig(**TINY)
    a, b = make_batch(cfg, 7, PixelCodec()), make_batch(cfg, 7, PixelCodec())
    assert all(torch.equal(x, y) for x, y in zip(a[:3], b[:3])) and a[3] == b[3]
    assert not torch.equal(a[0], make_batch(cfg, 8, PixelCodec())[0])
    sig = a[1]
    assert sig.shape == (a[0].shape[0], 5) and (sig >= 0).all() and (sig <= 1).all()


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["muon", "adamw"])
def test_an_interrupted_run_resumes_to_the_same_weights(tmp_path, optimizer):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # identical summation order in both runs
    try:
        _check_resume(tmp_path, dict(TINY, optimizer=optimizer))
    finally:
        torch.set_num_threads(threads)


def _check_resume(tmp_path, tiny):
    full = train_builtin(
        TrainConfig(steps=4, **tiny), tmp_path / "a", output=tmp_path / "a.safetensors", log=lambda m: None
    )
    train_builtin(TrainConfig(steps=2, **tiny), tmp_path / "b", output=tmp_path / "b2.safetensors", log=lambda m: None)
    resumed = train_builtin(TrainConfig(steps=4, **tiny), tmp_path / "b", output=tmp_path / "b.safetensors",
                            log=lambda m: None)  # fmt: skip
    wa, wb = load_file(str(full)), load_file(str(resumed))
    assert wa.keys() == wb.keys() and any(k.startswith("text.") for k in wa)
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=1e-6)


def test_resuming_with_another_optimizer_is_a_clear_error(tmp_path):
    train_builtin(TrainConfig(steps=2, **dict(TINY, optimizer="adamw")), tmp_path / "w", output=tmp_path / "o.safetensors",
                  log=lambda m: None)  # fmt: skip
    with pytest.raises(InvalidOption, match=r"--optimizer='muon'.*trained with 'adamw'"):
        train_builtin(TrainConfig(steps=4, **dict(TINY, optimizer="muon")), tmp_path / "w",
                      output=tmp_path / "o.safetensors", log=lambda m: None)  # fmt: skip


def test_a_time_budget_sets_the_steps_that_fit_in_what_is_left():
    cfg = TrainConfig(minutes=1.0, warmup=50)
    assert budget_steps(cfg, 50, rate=2.0, elapsed=25.0) == 50 + 70  # 35 s left at 2 steps/s
    assert budget_steps(cfg, 50, rate=2.0, elapsed=90.0) == 51  # over budget: just past the warm-up


@pytest.mark.slow
def test_a_time_budgeted_run_is_the_fixed_step_run_it_logs(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        logs = []
        budget = dict(TINY, warmup=4, checkpoint_every=1000)
        out = train_builtin(TrainConfig(minutes=0.04, **budget), tmp_path / "t", output=tmp_path / "t.safetensors",
                            log=logs.append)  # fmt: skip
        line = next(m for m in logs if m.startswith("time budget"))
        steps = int(line.split("--steps ")[1].rstrip(")"))
        assert steps > 4, line
        fixed = train_builtin(TrainConfig(steps=steps, **budget), tmp_path / "f", output=tmp_path / "f.safetensors",
                              log=lambda m: None)  # fmt: skip
        wa, wb = load_file(str(out)), load_file(str(fixed))
        for k in wa:
            torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=1e-6)
        # resuming the finished budgeted run keeps its step count: nothing more to do
        again = []
        train_builtin(
            TrainConfig(minutes=0.04, **budget), tmp_path / "t", output=tmp_path / "t2.safetensors", log=again.append
        )
        assert not any(m.startswith(("time budget", "step ")) for m in again), again
        for k, v in load_file(str(tmp_path / "t2.safetensors")).items():
            torch.testing.assert_close(v, wa[k], rtol=0, atol=0)
    finally:
        torch.set_num_threads(threads)


def test_snapshots_keep_the_ema_weights_along_the_run(tmp_path):
    """One run, its EMA weights every N steps (to evaluate adherence against steps): the last
    snapshot is the exported weights, the earlier ones differ from them."""
    out = train_builtin(TrainConfig(steps=4, snapshot_every=2, **TINY), tmp_path / "w", output=tmp_path / "o.safetensors",
                        log=lambda m: None)  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "w").glob("ema-*")) == [
        "ema-000002.safetensors",
        "ema-000004.safetensors",
    ]
    final, last, early = (load_file(str(p)) for p in (out, tmp_path / "w" / "ema-000004.safetensors",
                                                       tmp_path / "w" / "ema-000002.safetensors"))  # fmt: skip
    assert all(torch.equal(final[k], last[k]) for k in final)
    assert any(not torch.equal(final[k], early[k]) for k in final)


def test_training_falls_back_to_eager_where_compile_cannot_build(tmp_path, monkeypatch):
    """A machine without a C compiler fails at the first compiled call: the step reruns eagerly
    and the run is exactly the eager run."""
    import videogen.training.train as train

    def no_compiler(module, **kwargs):
        def fail(*a, **k):
            raise RuntimeError("InductorError: no C compiler found\nsecond line")

        return fail

    monkeypatch.setattr(train.torch, "compile", no_compiler)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        logs = []
        cfg = dict(TINY, compile=True)
        a = train_builtin(
            TrainConfig(steps=2, **cfg), tmp_path / "a", output=tmp_path / "a.safetensors", log=logs.append
        )
        b = train_builtin(TrainConfig(steps=2, **TINY), tmp_path / "b", output=tmp_path / "b.safetensors",
                          log=lambda m: None)  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    assert "torch.compile failed (RuntimeError: InductorError: no C compiler found); training eagerly" in logs, logs
    wa, wb = load_file(str(a)), load_file(str(b))
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=0)


@pytest.mark.slow
def test_the_compiled_transformer_computes_the_eager_loss_and_gradients():
    """The training step's compiled graph (fused element-wise ops) against eager fp32: the
    loss agrees to fp32 reordering error (~1e-6 relative) and so does every gradient."""
    from videogen.models.builtin import build_fresh
    from videogen.training.train import _backward

    cfg = TrainConfig(**TINY)
    transformer, encoder = build_fresh(0)
    opt = torch.optim.SGD([p for m in (transformer, encoder) for p in m.parameters()], lr=0.0)
    batch = make_batch(cfg, 3, PixelCodec())
    eager_loss = _backward(transformer, encoder, opt, batch, cfg).item()
    eager = {n: p.grad.clone() for n, p in transformer.named_parameters()}
    compiled_loss = _backward(torch.compile(transformer, dynamic=False), encoder, opt, batch, cfg).item()
    assert compiled_loss == pytest.approx(eager_loss, rel=1e-5)
    for n, p in transformer.named_parameters():
        err = (p.grad - eager[n]).norm() / eager[n].norm().clamp_min(1e-12)
        assert err < 1e-4, (n, float(err))


def test_causal_batches_have_whole_chunks_with_one_noise_level_each():
    cfg = TrainConfig(causal_chunk=3, latent_frames=(2, 5, 9), batch_tokens=640)
    seen_clean_context = False
    for step in range(12):
        latents, sig = make_batch(cfg, step, PixelCodec())[:2]
        f = sig.shape[1]
        assert f in (7, 10) and latents.shape[2] == f  # the first frame alone + 2 or 3 chunks of 3
        for row in sig:
            chunks = [row[:1], *row[1:].split(3)]
            assert all(torch.all(c == c[0]) for c in chunks)  # one sigma per chunk
            assert chunks[-1][0] > 0  # the last chunk is always generated
            seen_clean_context |= bool((row == 0).any())
    assert seen_clean_context


def test_causal_training_steps_run_and_lower_nothing_to_nan(tmp_path):
    cfg = TrainConfig(steps=2, causal_chunk=3, latent_frames=(5,), batch_tokens=448, warmup=1, checkpoint_every=2)
    out = train_builtin(cfg, tmp_path / "c", output=tmp_path / "c.safetensors", log=lambda m: None)
    w = load_file(str(out))
    assert all(torch.isfinite(v).all() for v in w.values())


def test_fresh_clips_spend_the_layout_fraction_at_near_pure_noise():
    from videogen.training.data import fresh_sigma

    cfg = TrainConfig()
    g = torch.Generator().manual_seed(0)
    s = torch.cat([fresh_sigma(cfg, g) for _ in range(4000)])
    assert (s >= 0).all() and (s <= 1).all()
    # layout_frac in [0.85, 1] plus the shifted draw's own share there (u >= 0.654: 0.346)
    expected = cfg.layout_frac + (1 - cfg.layout_frac) * 0.346
    assert abs(float((s >= 0.85).float().mean()) - expected) < 0.03
    plain = TrainConfig(layout_frac=0.0)
    s0 = torch.cat([fresh_sigma(plain, g) for _ in range(4000)])
    assert abs(float((s0 >= 0.85).float().mean()) - 0.346) < 0.03


def test_two_objects_sets_the_share_of_two_object_scenes_and_the_default_keeps_the_recipes_draws():
    import random

    from videogen.training.scenes import random_scene

    def share(two: float | None) -> float:
        rng = random.Random(3)
        kw = {} if two is None else {"two_objects": two}
        return sum(len(random_scene(rng, **kw).objects) == 2 for _ in range(3000)) / 3000

    assert abs(share(None) - 0.3) < 0.03 and abs(share(0.6) - 0.6) < 0.03
    assert share(0.0) == 0.0 and share(1.0) == 1.0
    # the default is the shipped recipes' draw: a second object when the first draw is >= 0.7
    for seed in range(300):
        assert len(random_scene(random.Random(seed)).objects) == (1 if random.Random(seed).random() < 0.7 else 2)
    cfg = TrainConfig(**TINY, two_objects=1.0)
    assert all(" and " in c for c in make_batch(cfg, 3, PixelCodec()).captions if c)


def test_a_lost_object_leaves_only_the_context_frames_and_the_draws_stay_as_they_were():
    import random

    import numpy as np

    from videogen.training.data import without_one_object
    from videogen.training.scenes import colour_mask, random_scene, render_scene

    rng = random.Random(0)
    while len((scene := random_scene(rng, two_objects=1.0)).objects) != 2:
        pass
    clip = render_scene(scene, 9, 64, start=40.0)
    out = without_one_object(clip, scene, torch.tensor([True, True, False]), 0, 40.0, 64)
    gone, kept = (PALETTE[o.colour] for o in scene.objects)
    assert colour_mask(out[:5], gone).sum() == 0 and (colour_mask(out[:5], kept).sum((1, 2)) > 50).all()
    assert np.array_equal(out[5:], clip[5:]) and (colour_mask(out[5:], gone).sum((1, 2)) > 50).all()

    _only_context_frames_change(lost_object=1.0)


def _only_context_frames_change(**option) -> None:
    """A recipe option that rewrites context frames: in a batch, the same noise levels, captions
    and noise as the recipe's; only context frames change, and some do."""
    base = TrainConfig(**TINY, causal_chunk=3, two_objects=1.0)
    changed = TrainConfig(**TINY, causal_chunk=3, two_objects=1.0, **option)
    frames = 0
    for step in range(4):
        a, b = make_batch(base, step, PixelCodec()), make_batch(changed, step, PixelCodec())
        assert torch.equal(a.sigmas, b.sigmas) and a.captions == b.captions and torch.equal(a.noise, b.noise)
        diff = (a.latents - b.latents).abs().amax(dim=(1, 3, 4))  # (B, F)
        assert (diff[~a.context] == 0).all()
        frames += int((diff[a.context] > 0).sum())
    assert frames > 0


def test_a_broken_object_is_cut_or_leaves_a_piece_in_the_context_frames_only():
    import random

    import numpy as np

    from videogen.training.data import with_a_broken_object
    from videogen.training.scenes import Scene, SceneObject, colour_mask, render_scene

    # one red circle moving right on black: every pixel of its colour is the object
    scene = Scene((SceneObject("red", "circle", "right", 0.5, 0.5),), "black")
    clip = render_scene(scene, 9, 64, start=40.0)
    context = torch.tensor([True, True, False])
    whole = colour_mask(clip[:5], PALETTE["red"]).sum((1, 2))
    kinds = set()
    for seed in range(12):
        out = with_a_broken_object(clip, scene, context, 0, 40.0, 64, random.Random(seed))
        assert np.array_equal(out[5:], clip[5:])  # the frames the loss sees: the scene as it is
        red = colour_mask(out[:5], PALETTE["red"]).sum((1, 2))
        if (red < whole).all():  # cut: 20-80% of it left, the rest drawn as background
            assert (red > 0.15 * whole).all() and (red < 0.85 * whole).all()
            kinds.add("cut")
        else:  # a piece left behind where it was 8-24 frames before: more red, all apart from it
            assert (red > whole).all() and (red < 1.6 * whole).all()
            assert np.array_equal(
                out[:5][colour_mask(clip[:5], PALETTE["red"])], clip[:5][colour_mask(clip[:5], PALETTE["red"])]
            )
            kinds.add("behind")
    assert kinds == {"cut", "behind"}

    _only_context_frames_change(broken_object=1.0)
    # a clip that lost an object is not also broken
    both = TrainConfig(**TINY, causal_chunk=3, two_objects=1.0, lost_object=1.0, broken_object=1.0)
    lost = TrainConfig(**TINY, causal_chunk=3, two_objects=1.0, lost_object=1.0)
    assert torch.equal(make_batch(both, 2, PixelCodec()).latents, make_batch(lost, 2, PixelCodec()).latents)


def test_hidden_clips_cut_where_one_object_is_behind_the_other_and_bring_it_out():
    import random

    from videogen.training.data import hidden_start, placed_beneath
    from videogen.training.scenes import Scene, SceneObject, colour_mask, render_scene

    cyan = PALETTE["cyan"]
    whole = colour_mask(
        render_scene(Scene((SceneObject("cyan", "circle", "still", 0.5, 0.5),), "green"), 1), cyan
    ).sum()
    # On a render's clock (the scene as it starts): the start is one where the two meet.
    scene = Scene((SceneObject("cyan", "circle", "down", 0.5, 0.2), SceneObject("white", "square", "left", 0.9, 0.5)),
                  "green")  # fmt: skip
    starts = {hidden_start(scene, 8, 64, random.Random(seed)) for seed in range(6)}
    assert None not in starts and len(starts) > 1  # drawn among all the times they meet
    for start in starts:
        clip = render_scene(scene, 33, 64, start=start)
        assert colour_mask(clip[8:9], cyan).sum() < 0.3 * whole  # behind the square as the context (frame 8) ends
        assert colour_mask(clip[-1:], cyan).sum() > 0.95 * whole  # out again, whole, by the clip's end
    apart = Scene((SceneObject("cyan", "circle", "still", 0.2, 0.2), SceneObject("white", "square", "still", 0.8, 0.8)),
                  "green")  # fmt: skip
    assert hidden_start(apart, 8, 64, random.Random(0)) is None
    # Anywhere at any time: the first object moved to meet the second there, moving as before.
    side = Scene((SceneObject("cyan", "circle", "up", 0.1, 0.3), SceneObject("white", "square", "up", 0.7, 0.3)),
                 "green")  # fmt: skip
    assert hidden_start(side, 8, 64, random.Random(0)) is None  # side by side, they never meet
    moved = placed_beneath(side, 130.0, 64, random.Random(0))
    assert moved.objects[1] == side.objects[1] and moved.objects[0].motion == "up"
    assert colour_mask(render_scene(moved, 1, 64, start=130.0), cyan).sum() < 0.3 * whole

    base = TrainConfig(**TINY, two_objects=1.0)
    hidden = TrainConfig(**TINY, two_objects=1.0, occluded=1.0)
    changed = 0
    for step in range(16):
        a, b = make_batch(base, step, PixelCodec()), make_batch(hidden, step, PixelCodec())
        assert torch.equal(a.sigmas, b.sigmas) and a.captions == b.captions and torch.equal(a.noise, b.noise)
        for i in range(len(a.captions)):
            if not bool(a.context[i].any()):  # clips made from scratch are the recipe's
                assert torch.equal(a.latents[i], b.latents[i]) and torch.equal(a.frames[i], b.frames[i])
            changed += not torch.equal(a.latents[i], b.latents[i])
    assert changed >= 3


def test_the_v_loss_weight_is_capped_by_v_floor():
    from videogen.models.builtin import build_fresh
    from videogen.training.loss import flow_matching_loss

    transformer, encoder = build_fresh(0)
    latents = torch.randn(1, 192, 1, 16, 16)
    noise = torch.randn(1, 192, 1, 16, 16)
    losses = {}
    for floor in (0.05, 0.5):
        with torch.no_grad():
            losses[floor] = float(flow_matching_loss(transformer, encoder, latents, torch.tensor([[0.02]]), noise, ["a red circle"],
                                                     "v", v_floor=floor))  # fmt: skip
    # the same x0 error, weighted 1/0.05^2 vs 1/0.5^2: exactly 100x apart
    assert losses[0.05] == pytest.approx(100 * losses[0.5], rel=1e-4)


def test_validation_error_is_repeatable_and_far_lower_for_trained_weights():
    from videogen.models.builtin import WEIGHTS_FILE, build_fresh, is_trained, load_weights
    from videogen.training.loss import validation_error

    fresh = build_fresh(0)
    kw = dict(sigmas=(0.5, 1.0), clips=4)
    a, b = validation_error(*fresh, **kw), validation_error(*fresh, **kw)
    assert a == b and set(a) == {"seen", "unseen"} and set(a["seen"]) == {0.5, 1.0}
    if not is_trained():
        pytest.skip("no trained built-in weights in this checkout")
    trained = build_fresh(0)
    load_weights(*trained, WEIGHTS_FILE)
    t = validation_error(*trained, **kw)
    for group in ("seen", "unseen"):
        for sigma in (0.5, 1.0):
            assert t[group][sigma] < 0.25 * a[group][sigma], (group, sigma, t[group][sigma], a[group][sigma])


def test_the_motion_term_is_the_frame_step_error_and_spares_a_shared_error():
    from videogen.training.loss import frame_step_err2

    codec = PixelCodec()
    g = torch.Generator().manual_seed(0)
    target = torch.rand(1, 3, 17, 16, 16, generator=g) * 2 - 1
    # the prediction draws each latent frame's 4 video frames alike (the stutter it must punish)
    stutter = target.clone()
    for k in range(1, 17, 4):
        stutter[:, :, k : k + 4] = target[:, :, k + 3 : k + 4]
    err_video = stutter - target
    err = codec.encode(stutter) - codec.encode(target)
    got = frame_step_err2(err)
    assert got.shape == err.shape
    # by hand on the video: squared change of the error between frames k-1 and k of each group
    want = sum(float(((err_video[:, :, k] - err_video[:, :, k - 1]) ** 2).sum())
               for start in range(1, 17, 4) for k in range(start + 1, start + 4))  # fmt: skip
    assert float(got.sum()) == pytest.approx(want, rel=1e-5) and want > 0
    # an error shared by a latent frame's 4 frames (a shape drawn a little off) adds nothing
    shifted = target.clone()
    offset = torch.rand(1, 3, 1, 16, 16, generator=g)
    for k in range(1, 17, 4):
        shifted[:, :, k : k + 4] += offset
    assert float(frame_step_err2(codec.encode(shifted) - codec.encode(target)).abs().max()) < 1e-6


def test_motion_weight_adds_its_term_linearly_and_zero_is_the_plain_loss():
    from videogen.models.builtin import build_fresh
    from videogen.training.loss import flow_matching_loss

    transformer, encoder = build_fresh(0)
    g = torch.Generator().manual_seed(1)
    latents, noise = torch.randn(1, 192, 3, 16, 16, generator=g), torch.randn(1, 192, 3, 16, 16, generator=g)
    sigmas = torch.tensor([[0.0, 0.3, 0.7]])
    with torch.no_grad():
        loss = {w: float(flow_matching_loss(transformer, encoder, latents, sigmas, noise, ["a red circle"],
                                            motion_weight=w)) for w in (0.0, 1.0, 8.0)}  # fmt: skip
        plain = float(flow_matching_loss(transformer, encoder, latents, sigmas, noise, ["a red circle"]))
    assert loss[0.0] == plain and loss[1.0] > plain
    assert loss[8.0] - plain == pytest.approx(8 * (loss[1.0] - plain), rel=1e-4)


def test_a_run_from_fewer_blocks_grows_them_and_starts_from_what_they_computed(tmp_path):
    from videogen.models.builtin import weights_size

    small = train_builtin(TrainConfig(steps=1, **TINY), tmp_path / "s", output=tmp_path / "s.safetensors",
                          log=lambda m: None)  # fmt: skip
    logs: list[str] = []
    grown = train_builtin(TrainConfig(steps=2, init=str(small), layers=6, **TINY), tmp_path / "g",
                          output=tmp_path / "g.safetensors", log=logs.append)  # fmt: skip
    assert weights_size(small) == (4, 4) and weights_size(grown) == (6, 4)
    assert any("growing" in m and "4 transformer blocks to 6" in m for m in logs)
    state = load_file(str(grown))
    # the copies trained: their zeroed outputs into the residual stream moved off zero
    assert state["transformer.blocks.2.ffn.net.2.weight"].abs().max() > 0
    # a run resumed from its checkpoint keeps the grown model
    again = train_builtin(TrainConfig(steps=3, init=str(small), layers=6, **TINY), tmp_path / "g",
                          output=tmp_path / "g3.safetensors", log=lambda m: None)  # fmt: skip
    assert weights_size(again) == (6, 4)
    with pytest.raises(ValueError, match="hold 6 transformer blocks"):
        train_builtin(TrainConfig(steps=1, init=str(grown), layers=4, **TINY), tmp_path / "x",
                      output=tmp_path / "x.safetensors", log=lambda m: None)  # fmt: skip
    # widened and grown in one run: twice the heads (and width), and two blocks more
    logs.clear()
    both = train_builtin(TrainConfig(steps=1, init=str(small), layers=6, heads=8, **TINY), tmp_path / "w",
                         output=tmp_path / "w.safetensors", log=logs.append)  # fmt: skip
    assert weights_size(both) == (6, 8)
    assert any("widening" in m and "4 attention heads to 8" in m for m in logs)


def test_exact_layout_holds_the_scenes_frames_and_trains_each_objects_gates_toward_its_motion(tmp_path):
    from videogen.models.builtin import _FRAME_INIT, FRAME_MOTIONS, build_fresh, load_weights
    from videogen.training.loss import layout_gate_loss

    _, encoder = build_fresh(0)
    captions = ["a red circle moving up and a blue square bouncing on a black background", "",
                "a green triangle moving left on a white background"]  # fmt: skip
    # per caption, the slots' cross-entropy against its objects' frames: two objects in the cheaper
    # order, one object in both slots; the empty caption has none
    logp = torch.log_softmax(encoder.layout.gate_logits(encoder.encode_train(captions)), dim=-1)
    up, still, left = (FRAME_MOTIONS.index(m) for m in ("up", "still", "left"))
    two = min(-(logp[0, 0, up] + logp[0, 1, still]) / 2, -(logp[0, 0, still] + logp[0, 1, up]) / 2)
    one = -(logp[2, 0, left] + logp[2, 1, left]) / 2
    torch.testing.assert_close(layout_gate_loss(encoder, captions), (two + one) / 2)
    assert layout_gate_loss(encoder, ["", ""]).item() == 0.0

    cfg = dict(TINY, lr=1e-2, warmup=1)
    plain = train_builtin(TrainConfig(steps=30, **cfg), tmp_path / "p", output=tmp_path / "p.safetensors",
                          log=lambda m: None)  # fmt: skip
    exact = train_builtin(TrainConfig(steps=30, exact_layout=True, **cfg), tmp_path / "e",
                          output=tmp_path / "e.safetensors", log=lambda m: None)  # fmt: skip
    frames = {k: load_file(str(f))["text.layout.frames"] for k, f in (("plain", plain), ("exact", exact))}
    held = torch.tensor(_FRAME_INIT).repeat(2, 1, 1)
    assert torch.equal(frames["exact"], held)  # held exactly, while learned ones move
    assert not torch.allclose(frames["plain"], held, atol=1e-4)

    # the gates learn each object's frame: the cross-entropy over fresh captions falls
    rng = random.Random(5)
    caps = [random_scene(rng, two_objects=0.5).caption() for _ in range(64)]

    def gate_loss(path) -> float:
        transformer, enc = build_fresh(0)
        load_weights(transformer, enc, path)
        with torch.no_grad():
            return float(layout_gate_loss(enc, caps))

    assert gate_loss(exact) < 0.8 * gate_loss(plain)


def test_blank_bounce_trains_a_bouncing_objects_gates_toward_the_blank_gate(tmp_path):
    from videogen.models.builtin import BLANK_GATE, FRAME_MOTIONS, build_fresh
    from videogen.training.loss import layout_gate_loss

    _, encoder = build_fresh(0)
    encoder.layout.add_blank()
    captions = ["a red circle moving up and a blue square bouncing on a black background",
                "a green triangle bouncing on a white background"]  # fmt: skip
    logp = torch.log_softmax(encoder.layout.gate_logits(encoder.encode_train(captions)), dim=-1)
    up = FRAME_MOTIONS.index("up")
    two = min(-(logp[0, 0, up] + logp[0, 1, BLANK_GATE]) / 2, -(logp[0, 0, BLANK_GATE] + logp[0, 1, up]) / 2)
    one = -(logp[1, 0, BLANK_GATE] + logp[1, 1, BLANK_GATE]) / 2
    torch.testing.assert_close(layout_gate_loss(encoder, captions), (two + one) / 2)

    # the loss alone takes a bounce's slots onto the blank gate (from ~0.4%) and a straight move's to its frame
    rng = random.Random(3)
    caps = [random_scene(rng, two_objects=0.3).caption() for _ in range(48)]
    opt = torch.optim.Adam(encoder.parameters(), lr=3e-3)
    for _ in range(60):
        opt.zero_grad()
        layout_gate_loss(encoder, caps).backward()
        opt.step()
    probe = ["a yellow square bouncing on a blue background", "a yellow square moving down on a blue background"]
    with torch.no_grad():
        gates = encoder.layout.gates(encoder.encode(probe))
    assert (gates[0, :, BLANK_GATE] > 0.5).all()
    assert (gates[1, :, FRAME_MOTIONS.index("down")] > 0.5).all() and (gates[1, :, BLANK_GATE] < 0.1).all()

    # training with it: the file holds the blank gate's row, trained from its start (zero weights)
    out = train_builtin(TrainConfig(steps=2, exact_layout=True, blank_bounce=True, **TINY), tmp_path / "b",
                        output=tmp_path / "b.safetensors", log=lambda m: None)  # fmt: skip
    gate = load_file(str(out))["text.layout.gate.weight"]
    assert gate.shape[0] == BLANK_GATE + 1 and gate[BLANK_GATE].abs().max() > 0
