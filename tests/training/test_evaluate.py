"""`videogen eval builtin`: the full path (render or stream -> detector -> JSON line) runs and reports
every figure; a block-causal preset is scored on its streamed output."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

KEYS = {"prompts", "adherence", "adherence_seen", "adherence_unseen", "colour_acc", "shape_acc", "motion_acc",
        "background_acc", "temporal_consistency", "motion_smoothness", "continuation_segments", "continuation_consistency"}  # fmt: skip


@pytest.mark.parametrize("model", ["builtin", "builtin-causal"])
def test_eval_builtin_prints_a_final_json_line(model):
    cmd = [sys.executable, "-m", "videogen.cli", "eval", "builtin", "--model", model, "--json",
           "--seen", "1", "--unseen", "1", "--continuation", "1", "--steps", "1"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(result) == KEYS
    assert result["prompts"] == 2 and result["continuation_segments"] == 8
    assert all(0.0 <= result[k] <= 1.0 for k in KEYS - {"prompts", "continuation_segments"})


def test_eval_with_only_continuations_still_prints_strict_json(builtin_model):
    from videogen.training.evaluate import evaluate_builtin

    result = evaluate_builtin(builtin_model, n_seen=0, n_unseen=0, n_continuation=0)
    json.dumps(result, allow_nan=False)  # NaN is not JSON: an empty prompt set must not produce one
    assert result["prompts"] == 0 and result["temporal_consistency"] == 0.0 and result["motion_smoothness"] == 0.0
