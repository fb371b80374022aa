"""The one place where videogen's library reads environment variables.

VIDEOGEN_CONFIG_DIR   folder holding models.yaml (default: the presets shipped in the package)
VIDEOGEN_MODELS_DIR   where relative preset paths are looked up (default ~/.cache/videogen/models)
VIDEOGEN_BUILTIN_WEIGHTS  weights file of the built-in model (default: the one shipped in the package)
VIDEOGEN_BUILTIN_CAUSAL_WEIGHTS  the same for the causal (streaming) built-in model
VIDEOGEN_BUILTIN_DECODER_WEIGHTS  the built-in codec's temporal decoder (a preset's `decoder:`)
VIDEOGEN_TRUST_CHECKPOINTS  1: unpickle --checkpoint files that hold more than tensors (can run code)
VIDEOGEN_OFFLOAD      none | model | group: where a model's components live (`videogen worker/serve --offload`)
VIDEOGEN_VAE_TILING   auto | on | off: tiled VAE decode (`videogen worker/serve --vae-tiling`)
"""

from __future__ import annotations

import os
from pathlib import Path


def config_dir() -> Path:
    """The folder holding models.yaml: $VIDEOGEN_CONFIG_DIR, else `configs/` as installed package
    data (`videogen.configs`), which works from a wheel as from a checkout."""
    env = os.environ.get("VIDEOGEN_CONFIG_DIR")
    if env:
        return Path(env).expanduser()
    from importlib.resources import files

    return Path(str(files("videogen.configs")))


def models_dir() -> Path:
    return Path(os.environ.get("VIDEOGEN_MODELS_DIR", "~/.cache/videogen/models")).expanduser()


# The built-in models' shipped weights files (package data, in a wheel as in a checkout).
BUILTIN_WEIGHTS_DIR = Path(__file__).resolve().parents[1] / "models" / "weights"


def builtin_weights(name: str, variant: str = "builtin") -> Path:
    """The weights file of a built-in `variant`: "builtin" reads VIDEOGEN_BUILTIN_WEIGHTS,
    "builtin-causal" VIDEOGEN_BUILTIN_CAUSAL_WEIGHTS, "builtin-decoder" (the codec's temporal
    decoder) VIDEOGEN_BUILTIN_DECODER_WEIGHTS; unset: `name` in BUILTIN_WEIGHTS_DIR."""
    env = "VIDEOGEN_" + variant.upper().replace("-", "_") + "_WEIGHTS"
    return Path(os.environ.get(env, BUILTIN_WEIGHTS_DIR / name)).expanduser()


def trust_checkpoints() -> bool:
    return os.environ.get("VIDEOGEN_TRUST_CHECKPOINTS", "") == "1"


def offload() -> str | None:
    """$VIDEOGEN_OFFLOAD (set by `videogen worker/serve --offload`); None: unset."""
    return os.environ.get("VIDEOGEN_OFFLOAD") or None


def vae_tiling() -> str | None:
    """$VIDEOGEN_VAE_TILING (set by `videogen worker/serve --vae-tiling`); None: unset."""
    return os.environ.get("VIDEOGEN_VAE_TILING") or None
