"""`TrainConfig`: the built-in model's training recipe, one commented field per choice.

The figures behind each default (loss weighting, optimiser, step count) are in
docs/builtin-model.md ("The recipe" and "Experiments").
"""

from __future__ import annotations

from dataclasses import dataclass

from videogen.training.scenes import TWO_OBJECTS

LAYOUT_GATE_WEIGHT = 0.1  # `exact_layout`'s gate cross-entropy, beside a flow-matching loss of ~0.1-0.3


@dataclass
class TrainConfig:
    # The shipped weights' recipe: the step count `--minutes 60` sets on a 2-core CPU (3.27 steps/s);
    # it scores adherence 1.0 on 24 held-out prompts (docs/builtin-model.md).
    steps: int = 11739
    # Clips of 5 and 9 latent frames (17 and 33 frames; 64 tokens per latent frame). The built-in
    # preset renders 2 s segments (9 latent frames) and chains them, so training never needs the
    # quadratic cost of long clips; 2,048 tokens per batch is ~0.2-0.5 s per step on 2 cores (by CPU).
    batch_tokens: int = 2048
    # Clip lengths in latent frames, drawn uniformly per batch. 1 = a still image (as Wan trains on
    # images too): 32 scenes per batch teach shapes and colours fast; 9 = the preset's segment.
    latent_frames: tuple[int, ...] = (1, 1, 3, 5, 9, 9)
    # "v": the velocity implied by the predicted sample vs the true one (x0 error / sigma^2; sharp
    # detail); "x0": the clean sample (layout at high noise); "hybrid": both (x0 error weighted
    # 1/sigma^2 + 4), which keeps the v-loss's detail and weights high noise 5x more.
    loss: str = "hybrid"
    # The v-loss's 1/sigma^2 weight is capped at 1/v_floor^2 so that near-clean samples do not
    # outweigh the high-noise ones, where the model learns where a caption puts its object.
    v_floor: float = 0.5
    # Weight of the temporal-difference term (`flow_matching_loss`): the error of each frame's
    # change from the frame before, within a latent frame's 4 video frames. 0: off, as in the
    # recipe: it smooths the measured motion but not the picture (docs/builtin-model.md, "4 Hz stutter").
    motion_weight: float = 0.0
    causal_chunk: int = 0  # > 0: block-causal attention over chunks of this many latent frames
    # Robust continuation (docs/builtin-model.md, "Long videos"): a chained segment or stream chunk
    # continues the model's *own* earlier output, not a clean training clip, and copies and
    # compounds its artefacts. `self_context`: the fraction of clips with a clean context (a
    # continuation's prefix, the causal variant's clean chunks) whose context is replaced by the
    # model's own one-step prediction of it, from the clip noised to a sigma in `self_context_sigma`
    # (its ragged edges, 4-frame steps and colour offsets, at the ground truth's place, so the
    # target stays the ground truth: self-forcing without rollouts). `context_noise`: half of the
    # context frames are noised to a sigma drawn up to this (and told so through their timestep),
    # which rendering's `context_noise` uses to blur the prefix's pixel-level artefacts. Context
    # frames carry no loss either way. 0: off (the shipped base recipe).
    self_context: float = 0.0
    self_context_sigma: tuple[float, float] = (0.2, 0.7)
    context_noise: float = 0.0
    # Rollouts (`videogen.training.rollouts`): a pool of the model's own chained renders (`rollouts`,
    # an .npz made by `make_pool`, from `rollout_chains` videos of `rollout_seconds` rendered with
    # the `init` weights when the file is missing); `rollout_frac` of the segment-long clips then
    # continue a context cut from it at a seam, towards the scene redrawn clean from where the
    # rollout left each object. 0: off (the shipped base recipe). With `causal_chunk` the pool is the
    # causal variant's own streams and the clips are its 10-latent-frame ones (sink, window, chunk).
    rollouts: str = ""
    rollout_frac: float = 0.0
    # Anchored continuations (rendering's `anchor_frame`): this share of the continuations on a
    # render's clock, and of the rollout clips, see a frame of the video's first segment in place
    # of their prefix's first latent frame (`videogen.training.data.anchored`). 0: off.
    anchor_frac: float = 0.0
    rollout_chains: int = 24
    rollout_seconds: float = 30.0
    # The anchor frame a new pool is rendered with (a pool is the `init` weights' own output as
    # rendering makes it): None, the `builtin` preset's `anchor_frame`; 0, none (weights never
    # trained with anchors, e.g. the base recipe's).
    rollout_anchor: int | None = None
    # The share of a new pool's captions with two objects (None: the training mix's, ~30%).
    rollout_two_objects: float | None = None
    # Frames a rollout clip's target may look back at for an object the context's last frame does not
    # show whole (behind the other, or fading: `videogen.training.rollouts.corrected_scene` restarts
    # it where the rollout last showed it whole, moved on, not at its sliver). 0: the last frame
    # alone (the shipped recipes).
    rollout_lookback: int = 0
    # Lost objects: this share of the clips with clean context frames (a continuation's prefix, the
    # causal variant's clean chunks) show one of their objects (drawn at random) only outside that
    # context: the prefix lacks it, the frames the loss sees still hold it, where the scene puts it.
    # A chain that lost an object at one seam otherwise keeps it lost at every later one (docs/
    # builtin-model.md, "Known limits"); this shows the model the caption winning over the context.
    # 0: off (the shipped recipes).
    lost_object: float = 0.0
    # Broken objects: this share of the clips with clean context frames (and a caption; a clip that
    # lost an object is not also broken) show one object, in that context only, cut to a part of
    # itself or with a piece of itself left behind (`videogen.training.data.with_a_broken_object`):
    # what a chain's crossing leaves at a seam. The frames the loss sees hold the scene as it is, so
    # the model learns to complete what is cut and let the piece go, not to continue either. 0: off.
    broken_object: float = 0.0
    # Hidden objects: this share of the two-object clips with a clean context prefix are cut where
    # the first object (drawn beneath) is behind the second as the context ends
    # (`videogen.training.data.hidden_start`): the context shows a sliver of it or nothing, the
    # frames the loss sees bring it out on its way. A chain otherwise sees few crossings and can
    # lose an object that passes behind another at a seam. 0: off (the shipped recipes).
    occluded: float = 0.0
    # Exact moving frames: `MotionLayout`'s frames held at the scenes' own motions (`MotionLayout.lock`)
    # and each caption object's slot gates trained toward its motion's frame (`layout_gate_loss`, with
    # weight `LAYOUT_GATE_WEIGHT`), so the layout channels say where each object is at any clock, not
    # only in a video's first seconds. False: learned frames and gates (the shipped recipes).
    exact_layout: bool = False
    # With `exact_layout`: a bouncing object's slot gates are trained toward the layout's blank gate
    # (`MotionLayout.add_blank`: no frame, zero channels) rather than the still frame, which says it
    # is at the centre after its first bounce. False: the still frame.
    blank_bounce: bool = False
    # The share of training scenes with two objects (`scenes.random_scene`; the shipped recipes' 0.3).
    two_objects: float = TWO_OBJECTS
    init: str = ""  # weights file to start from (fine-tuning, e.g. the causal variant from the base)
    # Transformer blocks. 0: the `init` file's (or 4 from scratch). More than `init` holds grows it
    # (`videogen.models.builtin.grow_layers`: copies of its blocks added as identities, so training
    # starts from exactly what `init` computes).
    layers: int = 0
    # Attention heads (of 32 features each; the width and feed-forward follow). 0: the `init` file's
    # (or 4 from scratch). A whole multiple of what `init` holds widens it
    # (`videogen.models.builtin.grow_width`: its units copied, so training starts from what `init`
    # computes).
    heads: int = 0
    # "muon": Muon (`videogen.training.optim`) for the hidden weight matrices, AdamW for embeddings,
    # the input and output layers, norms, biases and tables; "adamw": AdamW for everything. Muon at
    # 2e-3 reaches a lower held-out x0 error than AdamW at 1e-3 (0.029 vs 0.040 after 1,500 steps,
    # benchmarks/optimizer.py) for ~45 ms of a ~314 ms step.
    optimizer: str = "muon"
    lr: float = 2e-3
    muon_momentum: float = 0.95
    warmup: int = 200
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    ema: float = 0.999
    caption_dropout: float = 0.1
    layout_frac: float = 0.4  # fresh clips drawn at sigma in [0.85, 1] (see `fresh_sigma`)
    shift: float = 3.0
    seed: int = 0
    checkpoint_every: int = 250
    # > 0: also keep the EMA weights every this many steps (`workdir/ema-STEP.safetensors`), so one
    # run gives its adherence-vs-steps curve (`VIDEOGEN_BUILTIN_WEIGHTS=... videogen eval builtin`)
    snapshot_every: int = 0
    size: int = 64
    # > 0: ignore `steps` and run as many as fit in about this many minutes (see `budget_steps`)
    minutes: float = 0.0
    # torch.compile the transformer (inductor, one static graph per clip shape): fuses the
    # element-wise ops (per-token modulation, RoPE, norms; about a quarter of this small model's
    # eager step). Falls back to eager where it cannot build (no C compiler); the block-causal
    # variant stays eager.
    compile: bool = True
