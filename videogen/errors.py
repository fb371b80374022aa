"""Error types shared by the library, the CLI, the server and the workers.

`InvalidOption` carries the option's name and the offending value so that each front end can
report it its own way: the CLI as `videogen: error: ...` with exit status 2, the API as an
OpenAI-style error body whose `param` is the field.
"""

from __future__ import annotations

from typing import Any


class VideogenError(Exception):
    """Base class of the errors videogen raises on purpose."""


class InvalidOption(VideogenError, ValueError):
    """A user-supplied option has a value the model or the service cannot take."""

    def __init__(self, option: str, value: Any, reason: str) -> None:
        self.option = option
        self.value = value
        self.reason = reason
        super().__init__(f"{option}={value!r}: {reason}")


class ModelLoadError(VideogenError):
    """A preset or model folder is unknown, missing or incomplete."""

    def __init__(self, message: str, option: str = "model") -> None:
        self.option = option
        super().__init__(message)


class NonFiniteLatents(VideogenError):
    """The denoiser produced NaN or Inf: the segment fails instead of writing garbage."""


class RenderCancelled(VideogenError):
    """The caller asked the render to stop; raised at the next denoising step."""
