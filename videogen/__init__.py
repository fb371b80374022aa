"""videogen: long-form video generation with open diffusion transformers.

    from videogen import RenderSpec, render
    for event in render(RenderSpec.single("a red circle moving right", 6), "out.mp4"):
        print(event)

Imports are lazy so that torch-free parts (`videogen.config.spec`, `videogen.errors`, `videogen.config.presets`,
`videogen.stitch.config`) can be used by the API process without loading torch.
"""

__version__ = "0.1.0"
__all__ = ["RenderSpec", "Shot", "render"]


def __getattr__(name: str):
    if name == "render":
        from videogen.rendering import render

        return render
    if name in ("RenderSpec", "Shot"):
        from videogen.config import spec

        return getattr(spec, name)
    raise AttributeError(f"module 'videogen' has no attribute {name!r}")
