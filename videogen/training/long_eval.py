"""Long-video evaluation (`videogen eval builtin --long SECONDS`, `benchmarks/long.py`): does a
render or a stream hold its prompt for minutes?

Held-out prompts (the `videogen.training.scenes` grammar, seen and `HELD_OUT` colour/shape pairs,
bouncing and two-object prompts among them) are rendered (`videogen.rendering.render`) and
streamed (`videogen.streaming.stream`) for the asked length, and every 10-second window is judged
by the scene detector, independently of anything the pipeline itself measured:

    present      fraction of frames in which each prompted object's colour blob is found
    shape        the blob's median radial profile -> nearest generator shape (`classify_shape`)
    split        fraction of frames showing an object as more than one copy: connected components
                 of its colour on the frame's torus, so an object wrapping round the edge (the
                 scenes wrap) is one copy; pixels of the other prompted objects join components,
                 so an object cut in two by one passing in front is one copy too
    motion       centroid track -> direction (`classify_motion`); reported, not a pass criterion
    background   median of the non-object pixels, CIEDE2000 against the first window's
    seam jump    the largest colour step at a seam in the window over in-segment steps
                 (`videogen.stitch.metrics.seam_jumps`); reported
    retries      `SegmentRetried` events (the segment health gate) in the window; reported

A window passes when every object is present in >= 90% of its frames with the right shape, is
split or doubled in <= 5% of them, and the background is within dE2000 2.3 (a just-noticeable
difference) of the first window's: issue 20's targets. The training scenes themselves pass every
window (tests/training/test_long_eval.py); the measured baseline is in docs/builtin-model.md,
"Long videos".
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from videogen.config.spec import MAX_SECONDS
from videogen.errors import InvalidOption
from videogen.sampling.health import torus_components
from videogen.stitch.colour import delta_e2000, rgb_to_lab
from videogen.stitch.metrics import seam_jumps
from videogen.stitch.stats import frame_lab_stats
from videogen.training.scenes import (
    PALETTE,
    Scene,
    classify_motion,
    classify_shape,
    colour_mask,
    random_scene,
    track_colour,
)

LONG_EVAL_SEED = 525252  # prompts: disjoint from training's scene seeds and from `evaluate.EVAL_SEED`
DEFAULT_PROMPTS = 6
WINDOW_SECONDS = 10.0
MIN_PRESENT = 0.9  # issue 20's pass thresholds per window
MAX_SPLIT = 0.05
MAX_BACKGROUND_DE = 2.3
# A copy is at least 1% of the frame (41 px at 64x64; the scenes' objects cover 9-13%), so
# compression fringes and stray pixels of the object's colour are not copies.
MIN_COPY_FRACTION = 0.01
# First-object motions in prompt order: the first three prompts already hold a straight move, a
# bounce and (every third prompt) two objects.
MOTION_ORDER = ("right", "bouncing", "down", "left", "bouncing", "up", "still")
RETRY_EVENT = "SegmentRetried"  # the health gate's event class, matched by name


def check_long_seconds(seconds: float, option: str = "seconds", max_seconds: float = MAX_SECONDS) -> float:
    """`seconds` if it is a length the evaluation can judge: at least one window, at most an hour."""
    if not isinstance(seconds, int | float) or not np.isfinite(seconds):
        raise InvalidOption(option, seconds, "must be a finite number of seconds")
    if not WINDOW_SECONDS <= seconds <= max_seconds:
        raise InvalidOption(option, seconds, f"must be between {WINDOW_SECONDS:g} (one window) and {max_seconds:g}")
    return float(seconds)


def long_prompts(count: int = DEFAULT_PROMPTS, seed: int = LONG_EVAL_SEED) -> list[Scene]:
    """`count` held-out scenes: odd ones use only `HELD_OUT` colour/shape pairs, every third has
    two objects, first-object motions follow `MOTION_ORDER`; no lighting change (a dimming
    scene is drift by design, which the background criterion would count against it)."""
    rng = random.Random(seed)
    scenes = []
    for i in range(count):
        objects, held_out = 2 if i % 3 == 2 else 1, "only" if i % 2 else "exclude"
        motion = MOTION_ORDER[i % len(MOTION_ORDER)]
        while True:
            s = random_scene(rng, held_out=held_out, max_objects=objects)
            if len(s.objects) == objects and s.objects[0].motion == motion:
                break
        scenes.append(Scene(s.objects, s.background, "none"))
    return scenes


def window_bounds(num_frames: int, fps: float, seconds: float = WINDOW_SECONDS) -> list[tuple[int, int]]:
    """[start, end) frames of each window; a tail shorter than half a window joins the last one."""
    n = max(1, round(seconds * fps))
    starts = list(range(0, num_frames, n))
    if len(starts) > 1 and num_frames - starts[-1] < n / 2:
        starts.pop()
    return [(a, b) for a, b in zip(starts, [*starts[1:], num_frames])]


# ---------------------------------------------------------------- the detector


def copies_per_frame(frames: np.ndarray, colour: str, others: Sequence[str] = ()) -> np.ndarray:
    """How many separate copies of the `colour` object each frame `(T, H, W, 3)` shows: `(T,)`.
    Components join the `others` objects' pixels (an occluder does not cut an object in two) and
    count when they hold `MIN_COPY_FRACTION` of the frame in `colour`."""
    own = colour_mask(frames, PALETTE[colour])  # (T, H, W)
    body = own.copy()
    for other in others:
        body |= colour_mask(frames, PALETTE[other])
    labels = torus_components(body)
    t, h, w = own.shape
    frame_of = np.nonzero(own)[0].astype(np.int64)
    keys, counts = np.unique(frame_of * (h * w + 1) + labels[own], return_counts=True)
    big = keys[counts >= MIN_COPY_FRACTION * h * w] // (h * w + 1)
    return np.bincount(big, minlength=t)


def object_copies(frames: np.ndarray, scene: Scene) -> list[np.ndarray]:
    """`copies_per_frame` of each of `scene`'s objects, in its order, the others' pixels joining
    its components: `(T,)` each."""
    colours = [o.colour for o in scene.objects]
    return [copies_per_frame(frames, c, [x for x in colours if x != c]) for c in colours]


def background_lab(frames: np.ndarray, colours: Sequence[str], stride: int = 4) -> np.ndarray:
    """CIELAB `(3,)` of the median non-object pixel over every `stride`-th frame."""
    sample = frames[::stride]
    keep = np.ones(sample.shape[:3], bool)
    for colour in colours:
        keep &= ~colour_mask(sample, PALETTE[colour])
    pixels = sample[keep] if keep.any() else sample.reshape(-1, 3)
    return rgb_to_lab(np.median(pixels, axis=0) / 255.0)


@dataclass(frozen=True)
class ObjectVerdict:
    """One prompted object in one window."""

    colour: str
    shape: str  # prompted
    motion: str  # prompted
    present: float  # fraction of the window's frames with the object's colour blob
    shape_seen: str  # `classify_shape` ("none": never present)
    motion_seen: str  # `classify_motion`
    split: float  # fraction of the window's frames with more than one copy

    @property
    def name(self) -> str:
        return f"{self.colour} {self.shape}"


@dataclass(frozen=True)
class WindowVerdict:
    """One window of one video, judged."""

    path: str  # "render" or "stream"
    prompt: str
    index: int
    start_s: float
    end_s: float
    objects: tuple[ObjectVerdict, ...]
    background_de: float  # dE2000 of the background against the first window's
    seam_jump: float  # largest seam jump in the window (0: no seam)
    retries: int  # segments re-sampled by the health gate in the window

    @property
    def missing(self) -> float:
        return max(1.0 - o.present for o in self.objects)

    @property
    def split(self) -> float:
        return max(o.split for o in self.objects)

    @property
    def motion_ok(self) -> bool:
        return all(o.motion_seen == o.motion for o in self.objects)

    def failures(self) -> list[str]:
        """Why the window fails, worst kind first (empty: it passes)."""
        out = [f"{o.name} missing in {1 - o.present:.0%} of frames" for o in self.objects if o.present < MIN_PRESENT]
        out += [f"{o.name} reads as {o.shape_seen}" for o in self.objects if o.shape_seen != o.shape]
        out += [f"{o.name} split/doubled in {o.split:.0%} of frames" for o in self.objects if o.split > MAX_SPLIT]
        if self.background_de > MAX_BACKGROUND_DE:
            out.append(f"background dE2000 {self.background_de:.1f} from the first window")
        return out

    @property
    def passed(self) -> bool:
        return not self.failures()


def _judge_objects(frames: np.ndarray, scene: Scene) -> tuple[ObjectVerdict, ...]:
    size = frames.shape[1]
    out = []
    for obj, copies in zip(scene.objects, object_copies(frames, scene)):
        track = track_colour(frames, obj.colour)
        out.append(ObjectVerdict(obj.colour, obj.shape, obj.motion, float(track.present.mean()), classify_shape(track),
                                 classify_motion(track, size), float((copies > 1).mean())))  # fmt: skip
    return tuple(out)


def judge_video(frames: np.ndarray, scene: Scene, fps: float, *, path: str = "render",
                seams: Sequence[tuple[int, int]] = (), retry_frames: Sequence[int] = ()) -> list[WindowVerdict]:  # fmt: skip
    """Every window of `frames` `(T, H, W, 3)` uint8 judged against `scene`'s prompt. `seams`:
    [start, end) of each seam (start == end: a hard cut); `retry_frames`: where each re-sampled
    segment starts."""
    colours = [o.colour for o in scene.objects]
    jumps = seam_jumps(frame_lab_stats(frames)[:, :3], seams, [0])[0] if seams else []
    windows = window_bounds(len(frames), fps)
    anchor = background_lab(frames[slice(*windows[0])], colours)
    out = []
    for i, (a, b) in enumerate(windows):
        clip = frames[a:b]
        de = float(delta_e2000(background_lab(clip, colours), anchor))
        seam = max((j for (s, _), j in zip(seams, jumps) if a <= s < b), default=0.0)
        retries = sum(a <= f < b for f in retry_frames)
        out.append(WindowVerdict(path, scene.caption(), i, a / fps, b / fps, _judge_objects(clip, scene), de,
                                 float(seam), int(retries)))  # fmt: skip
    return out


# ---------------------------------------------------------------- making the videos


@dataclass(frozen=True)
class LongVideo:
    """A generated video with what the judge needs of its making."""

    frames: np.ndarray  # (T, H, W, 3) uint8
    fps: float
    seams: tuple[tuple[int, int], ...]
    retry_frames: tuple[int, ...]  # first output frame of each re-sampled segment or chunk
    compute_s: float  # wall seconds spent generating (and, for a render, encoding)
    # (transformer evaluations of the attempts not kept, of those kept): what the gate's retries
    # cost (a render's from its drift report, a stream's from its chunks)
    sampling_evals: tuple[int, int] = (0, 0)


def render_long(model, prompt: str, seconds: float, seed: int, steps: int | None, guidance: float | None,
                workdir: Path) -> LongVideo:  # fmt: skip
    """`prompt` rendered through `render()`; seams from its drift report, retries from its events."""
    from videogen.config.spec import RenderSpec
    from videogen.io.video import VideoReader
    from videogen.rendering.events import RenderFinished, SegmentFinished
    from videogen.rendering.render import render

    spec = RenderSpec.single(prompt, seconds, model=model.preset.name, seed=seed, steps=steps, guidance=guidance)
    out, retried, report = workdir / "long.mp4", [], None
    start = time.perf_counter()
    ends: dict[int, int] = {}  # a segment's last frame written (with `backtrack` it is written one segment late)
    for ev in render(spec, out, model=model, thumbnail=False):
        if type(ev).__name__ == RETRY_EVENT:
            retried.append(ev.index)
        elif isinstance(ev, SegmentFinished):
            ends[ev.index] = ev.frames_written
        elif isinstance(ev, RenderFinished):
            report = ev.report
    compute = time.perf_counter() - start
    drift = json.loads(Path(report).read_text()) if report else {}
    records = (drift.get("health") or {}).get("segments", [])
    retries = [ends.get(i - 1, 0) for i in retried]  # the segment being made starts where the last one ended
    retried_evals = sum(int(r["retry_evals"]) for r in records)
    dropped = sum(int(r.get("backtrack_evals", 0)) for r in records)  # chains a backtrack did not keep
    sampling = (retried_evals + dropped, sum(int(r["evals"]) for r in records) - retried_evals)
    frames = VideoReader(out).read_all()
    seams = tuple((int(a), int(b)) for a, b in drift.get("seams", []))
    return LongVideo(frames, model.preset.fps, seams, tuple(retries), compute, sampling)


def stream_long(model, prompt: str, seconds: float, seed: int, steps: int | None,
                guidance: float | None) -> LongVideo:  # fmt: skip
    """`prompt` streamed through `stream()`; each chunk boundary is a hard-cut seam. A chunk the
    health gate re-generated says so in its `attempts` (1 where the field does not exist)."""
    from videogen.streaming.stream import StreamSpec, stream

    spec = StreamSpec(prompt, seconds=seconds, model=model.preset.name, seed=seed, steps=steps, guidance=guidance)
    chunks, start = [], time.perf_counter()
    for chunk in stream(spec, model):
        chunks.append(chunk)
    compute = time.perf_counter() - start
    seams = tuple((c.first_frame, c.first_frame) for c in chunks[1:])
    retries = tuple(c.first_frame for c in chunks for _ in range(int(getattr(c, "attempts", 1)) - 1))
    retried = sum(c.retry_evals for c in chunks)
    sampling = (retried, sum(c.evals for c in chunks) - retried)
    return LongVideo(np.concatenate([c.frames for c in chunks]), model.preset.fps, seams, retries, compute, sampling)


# ---------------------------------------------------------------- the evaluation


@dataclass
class LongEvaluation:
    """Every judged window, and the compute each path spent per second of video."""

    seconds: float
    prompts: list[Scene]
    windows: list[WindowVerdict]
    compute_s: dict[str, float]  # path -> wall seconds generating
    video_s: dict[str, float]  # path -> seconds of video made
    # path -> [transformer evaluations of the attempts not kept, of those kept] (`GateResult.evals`)
    evals: dict[str, list[int]] = field(default_factory=dict)

    def summary(self) -> dict:
        """The figures of the JSON line."""
        out: dict = {"seconds": self.seconds, "prompts": len(self.prompts)}
        for path in ("render", "stream"):
            ws = [w for w in self.windows if w.path == path]
            if not ws:
                continue
            out[f"{path}_windows"] = len(ws)
            out[f"{path}_pass_rate"] = round(sum(w.passed for w in ws) / len(ws), 4)
            out[f"{path}_motion_acc"] = round(sum(w.motion_ok for w in ws) / len(ws), 4)
            out[f"{path}_max_missing"] = round(max(w.missing for w in ws), 4)
            out[f"{path}_max_split"] = round(max(w.split for w in ws), 4)
            out[f"{path}_max_background_de"] = round(max(w.background_de for w in ws), 2)
            out[f"{path}_max_seam_jump"] = round(max(w.seam_jump for w in ws), 2)
            out[f"{path}_retries"] = sum(w.retries for w in ws)
            retried, kept = self.evals.get(path, [0, 0])
            if kept:  # the transformer work the retries added, as a share of the video's own
                out[f"{path}_retry_evals"] = round(retried / kept, 4)
            out[f"{path}_compute_s_per_s"] = round(self.compute_s[path] / max(self.video_s[path], 1e-9), 3)
        out["max_missing"] = round(max((w.missing for w in self.windows), default=0.0), 4)
        out["worst_window"] = _worst(self.windows)
        return out


def _worst(windows: Sequence[WindowVerdict]) -> dict | None:
    """The failing window with the most frames missing, then split, then background drift."""
    if not windows:
        return None
    w = max(windows, key=lambda w: (not w.passed, w.missing, w.split, w.background_de))
    return {"path": w.path, "prompt": w.prompt, "start_s": round(w.start_s, 2), "end_s": round(w.end_s, 2),
            "reason": "; ".join(w.failures()) or "passes"}  # fmt: skip


def evaluate_long(render_model, stream_model, *, seconds: float, prompts: int = DEFAULT_PROMPTS, seed: int = 0,
                  steps: int | None = None, guidance: float | None = None, first: int = 0,
                  log: Callable[[str], None] | None = None) -> LongEvaluation:  # fmt: skip
    """Render (with `render_model`) and stream (with `stream_model`) `prompts` held-out prompts
    from the `first` (0-based) for `seconds`, prompt i with seed `seed + i`, and judge every
    window. Either model may be None to skip its path. `first` lets one prompt of a run too long
    for one sitting be measured alone, with the prompt and seed it has in the whole run."""
    seconds = check_long_seconds(seconds)
    if not isinstance(prompts, int) or prompts < 1:
        raise InvalidOption("prompts", prompts, "must be a whole number >= 1")
    if not isinstance(first, int) or first < 0:
        raise InvalidOption("first", first, "must be a whole number >= 0")
    scenes = long_prompts(first + prompts)[first:]
    result = LongEvaluation(seconds, scenes, [], {}, {})
    with tempfile.TemporaryDirectory() as tmp:
        for i, scene in enumerate(scenes, start=first):
            for path, model in (("render", render_model), ("stream", stream_model)):
                if model is None:
                    continue
                if path == "render":
                    video = render_long(model, scene.caption(), seconds, seed + i, steps, guidance, Path(tmp))
                else:
                    video = stream_long(model, scene.caption(), seconds, seed + i, steps, guidance)
                windows = judge_video(video.frames, scene, video.fps, path=path, seams=video.seams,
                                      retry_frames=video.retry_frames)  # fmt: skip
                result.windows += windows
                result.compute_s[path] = result.compute_s.get(path, 0.0) + video.compute_s
                result.video_s[path] = result.video_s.get(path, 0.0) + len(video.frames) / video.fps
                counted = result.evals.setdefault(path, [0, 0])
                counted[0], counted[1] = counted[0] + video.sampling_evals[0], counted[1] + video.sampling_evals[1]
                if log:  # each video's windows as soon as they are judged: a cut-short run still tells
                    passed = sum(w.passed for w in windows)
                    retried, kept = video.sampling_evals
                    cost = f", retries +{100 * retried / kept:.0f}% transformer evaluations" if kept else ""
                    log(
                        f"{path} {scene.caption()}: {passed}/{len(windows)} windows pass ({video.compute_s:.0f} s{cost})"
                    )
                    for w in windows:
                        log(f"  {w.start_s:4.0f}-{w.end_s:<4.0f} s: " + ("; ".join(w.failures()) or "pass"))
    return result


def format_table(windows: Sequence[WindowVerdict]) -> str:
    """One line per window: path, prompt number, time span, the figures and the verdict."""
    prompts: dict[str, int] = {}
    lines = [f"{'path':<6} {'#':>2} {'window':>11} {'present':>8} {'split':>6} {'shape':>5} {'motion':>6} "
             f"{'bg dE':>6} {'seam':>5} {'retry':>5}  verdict"]  # fmt: skip
    for w in windows:
        n = prompts.setdefault(w.prompt, len(prompts))
        present = min(o.present for o in w.objects)
        shape = "ok" if all(o.shape_seen == o.shape for o in w.objects) else "WRONG"
        verdict = "pass" if w.passed else "FAIL: " + "; ".join(w.failures())
        lines.append(f"{w.path:<6} {n:>2} {w.start_s:>5.0f}-{w.end_s:<5.0f} {present:>8.0%} {w.split:>6.0%} {shape:>5} "
                     f"{'ok' if w.motion_ok else 'wrong':>6} {w.background_de:>6.2f} {w.seam_jump:>5.1f} {w.retries:>5}  {verdict}")  # fmt: skip
    legend = [f"#{n}: {p}" for p, n in prompts.items()]
    return "\n".join(lines + legend)
