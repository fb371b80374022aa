"""Shared fixtures: tiny Wan pipelines saved to disk (the real loading path, no hub)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_wan21(tmp_path_factory):
    from tiny_wan import save_tiny_wan

    return save_tiny_wan(tmp_path_factory.mktemp("models") / "tiny-wan2.1", "wan2.1")


@pytest.fixture(scope="session")
def tiny_wan22(tmp_path_factory):
    from tiny_wan import save_tiny_wan

    return save_tiny_wan(tmp_path_factory.mktemp("models") / "tiny-wan2.2-ti2v", "wan2.2-ti2v")


@pytest.fixture(scope="session")
def builtin_model():
    import warnings

    from videogen.models.loader import load_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_model("builtin", device="cpu", dtype="float32", attention="dense")


@pytest.fixture
def presets_file(tmp_path, monkeypatch):
    """`presets_file(TEXT)`: this test's presets are TEXT (a models.yaml in its own folder, named by
    VIDEOGEN_CONFIG_DIR); the presets cache is cleared then, and again when the test ends."""
    from videogen.config import presets

    def write(text: str) -> None:
        folder = tmp_path / "config"
        folder.mkdir(exist_ok=True)
        (folder / "models.yaml").write_text(text)
        monkeypatch.setenv("VIDEOGEN_CONFIG_DIR", str(folder))
        presets._load.cache_clear()

    yield write
    presets._load.cache_clear()
