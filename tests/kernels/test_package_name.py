"""The `kernels/` folder is `videogen.kernels`; from a checkout's root it must not stand in for
Hugging Face's `kernels` (a transformers 5 dependency), or diffusers' Wan model fails to import
under `python -m pytest` and `python -m videogen.cli` run there."""

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_at_root(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def hf_kernels_installed() -> bool:
    try:
        importlib.metadata.distribution("kernels")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not hf_kernels_installed(), reason="Hugging Face's kernels package is not installed")
def test_import_kernels_at_the_root_gets_hugging_faces_package_and_ours_still_works():
    done = run_at_root(
        "import kernels, videogen.kernels as ours; from diffusers import WanTransformer3DModel; "
        "print(kernels.__file__); print(ours.__file__); print(hasattr(kernels, 'TileLayout'), ours.TileLayout.__name__)"
    )
    assert done.returncode == 0, done.stderr
    theirs, ours, names = done.stdout.split("\n")[:3]
    assert not Path(theirs).is_relative_to(ROOT), theirs
    assert Path(ours) == ROOT / "kernels" / "__init__.py"
    assert names == "False TileLayout"


def test_without_that_package_import_kernels_at_the_root_fails_and_says_why():
    done = run_at_root(  # the root on the path, site-packages (and so any other `kernels`) not
        "import sys; sys.path[:] = [''] + [p for p in sys.path if p and 'packages' not in p]; import kernels"
    )
    assert done.returncode != 0
    assert "ModuleNotFoundError: No module named 'kernels' outside" in done.stderr
    assert "videogen.kernels" in done.stderr
