"""What every `videogen` command shares: the one-line-error parser, the spec-field → option map
that error messages use, and the printing of the library's own warnings."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import NoReturn

from videogen.errors import VideogenError

EXIT_BAD_INPUT = 2

SPEC_FIELD_OPTIONS = {  # a spec field -> the CLI's name for it, where the two differ
    "prompt": "PROMPT",
    "health_checks": "--checks",
    "loras": "--lora",
    "size": "--size",
    "seconds": "--seconds",
    "fps": "--fps",
    "steps": "--steps",
    "guidance": "--guidance",
    "flow_shift": "--flow-shift",
    "seed": "--seed",
    "segment_seconds": "--segment-seconds",
    "overlap_frames": "--overlap-frames",
    "attention": "--attention",
    "device": "--device",
    "dtype": "--dtype",
    "model": "--model",
    "checkpoint": "--checkpoint",
    "image": "--image",
    "drift_correction.mode": "--drift-mode",
    "drift_correction.strength": "--drift-strength",
}


class UsageError(VideogenError):
    """Bad command-line usage detected by the CLI itself."""


class CliParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line and exit 2 (argparse's own prints the whole usage)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def option_name(field: str) -> str:
    """The command-line name of the option an `InvalidOption` names (a spec field or an option)."""
    if field.startswith("shots["):
        return "--shot " + field
    if field in SPEC_FIELD_OPTIONS or field.startswith("-") or field.isupper():
        return SPEC_FIELD_OPTIONS.get(field, field)
    return "--" + field.replace("_", "-")  # a spec field of the same name as its option


def print_library_warnings(caught: list[warnings.WarningMessage], quiet: bool) -> None:
    """Print the warnings videogen itself raised (not its dependencies') as `videogen: warning:` lines."""
    for w in caught:
        if "videogen" in str(w.filename) and not quiet:
            print(f"videogen: warning: {w.message}", file=sys.stderr)
