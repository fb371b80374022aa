"""videogen: long-form video generation with open diffusion transformers.

    from videogen import RenderSpec, render
    for event in render(RenderSpec.single("a red circle moving right", 6), "out.mp4"):
        print(event)
"""

from videogen.render import render  # noqa: F401
from videogen.spec import RenderSpec, Shot  # noqa: F401

__version__ = "0.1.0"
