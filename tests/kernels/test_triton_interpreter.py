"""Runs the Triton backend tests on CPU through Triton's interpreter, in a subprocess.

``TRITON_INTERPRET=1`` must be set before a kernel is decorated and switches every
Triton kernel in the process to the interpreter, so it is set only in a child pytest
that collects ``test_sparse_attention_triton.py`` alone. With CUDA present (or the variable
already set here) that module runs in this process instead and this test is skipped.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: test_sparse_attention_triton.py runs on the GPU")
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="already interpreting in this process")
def test_triton_backend_passes_under_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    module = str(HERE / "test_sparse_attention_triton.py")
    cmd = [sys.executable, "-m", "pytest", module, "-q", "-p", "no:cacheprovider"]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, f"interpreter run failed:\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"
    assert "skipped" not in summary, f"interpreter run skipped tests: {summary}"
