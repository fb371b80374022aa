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
