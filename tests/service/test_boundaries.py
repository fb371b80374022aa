"""Boundaries of the service: the API stays free of torch, the CLI guards --no-auth, settings
keep keys hashed and nothing user-supplied becomes a path."""

from __future__ import annotations

import subprocess
import sys

import pytest

from videogen.api.settings import ServiceSettings, hash_key
from videogen.api.storage import OutputStorage

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_the_api_package_never_imports_torch(tmp_path):
    code = ("import sys; import api.app, api.videos, api.store, api.catalog, api.dispatch; "
            "from api.app import create_app; from api.settings import ServiceSettings; "
            "create_app(ServiceSettings(data_dir=sys.argv[1], no_auth=True)); "
            "assert 'torch' not in sys.modules, 'torch was imported'")  # fmt: skip
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True,
                   cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})  # fmt: skip


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.com"])
def test_no_auth_is_refused_off_loopback(host, tmp_path):
    r = subprocess.run([sys.executable, "-m", "videogen.cli", "serve", "--no-auth", "--host", host,
                        "--data-dir", str(tmp_path)], capture_output=True, text=True, cwd=REPO,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert r.returncode == 2 and "--no-auth is allowed only on a loopback host" in r.stderr


def test_serve_without_keys_or_no_auth_refuses_to_start(tmp_path):
    r = subprocess.run([sys.executable, "-m", "videogen.cli", "serve", "--data-dir", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert r.returncode == 2 and "VIDEOGEN_API_KEYS" in r.stderr


def test_api_keys_map_to_tenants_by_hash_only():
    s = ServiceSettings(api_keys="k1:alpha, k2:beta")
    assert s.tenant_by_key_hash == {hash_key("k1"): "alpha", hash_key("k2"): "beta"}
    assert "k1" not in repr(s)
    with pytest.raises(ValueError):
        _ = ServiceSettings(api_keys="no-tenant").tenant_by_key_hash


def test_storage_builds_paths_from_job_ids_only(tmp_path):
    storage = OutputStorage(tmp_path)
    assert storage.video("video_" + "a" * 32) == tmp_path / "outputs" / ("video_" + "a" * 32) / "video.mp4"
    for bad in ("../etc", "video_../../x", "/abs"):
        with pytest.raises(ValueError):
            storage.video(bad)
