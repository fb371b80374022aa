"""The `videogen` command: a real render, and one-line errors with exit status 2 for bad input."""

import json
import subprocess
import sys

import pytest

from videogen.io.video import probe
from videogen.models.builtin import WEIGHTS_FILE


def videogen(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "videogen.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_render_with_the_builtin_model_writes_mp4_and_thumbnail(tmp_path):
    out = tmp_path / "out.mp4"
    r = videogen(
        "render", "a red circle moving right on a black background", "--seconds", "6", "--steps", "2", "-o", str(out)
    )
    assert r.returncode == 0, r.stderr
    info = probe(out)
    assert (info.width, info.height, info.fps, info.num_frames) == (64, 64, 16.0, 96)
    assert (tmp_path / "out.thumb.png").is_file()
    assert "segments" in r.stderr  # progress bars


def test_models_lists_presets_and_presence():
    r = videogen("models", "--json")
    assert r.returncode == 0
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert rows["builtin"]["available"] and rows["builtin"]["default"]
    assert "wan2.1-t2v-1.3b" in rows and "wan2.2-ti2v-5b" in rows


def test_render_from_a_local_diffusers_folder(tmp_path, tiny_wan21):
    out = tmp_path / "w.mp4"
    r = videogen("render", "a cat", "--model", str(tiny_wan21), "--size", "32x32", "--fps", "8", "--seconds", "1",
                 "--steps", "2", "-o", str(out), "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert probe(out).num_frames == 8


@pytest.mark.parametrize(
    "args, message",
    [
        (["render", "x", "--size", "65x64"], "--size=65x64"),
        (["render", "x", "--size", "big"], "--size=big"),
        (["render", "x", "--seconds", "0"], "--seconds=0.0"),
        (["render", "x", "--seconds", "-3"], "--seconds=-3.0"),
        (["render", "x", "--seconds", "100000"], "--seconds=100000.0"),
        (["render", "x", "--fps", "0"], "--fps=0.0"),
        (["render", "x", "--fps", "1000"], "--fps=1000.0"),
        (["render", "x", "--steps", "0"], "--steps=0"),
        (["render", "x", "--steps", "99999"], "--steps=99999"),
        (["render", "x", "--overlap-frames", "6"], "--overlap-frames=6"),
        (["render", "x", "--model", "no-such-preset"], "no-such-preset"),
        (["render", "x", "--model", "/no/such/folder"], "/no/such/folder"),
        (["render", "   "], "PROMPT"),
        (["render", "x", "--attention", "fast"], "--attention=fast"),
        (["render", "x", "--dtype", "int8"], "--dtype=int8"),
        (["render", "x", "--steps", "two"], "--steps"),
        (["render", "x", "--drift-mode", "magic"], "--drift-mode=magic"),
        (["render", "x", "--drift-strength", "1.5"], "--drift-strength=1.5"),
    ],
)
def test_bad_input_is_one_line_naming_the_option_with_exit_2_and_no_output(tmp_path, capsys, args, message):
    from videogen.cli import main

    out = tmp_path / "out.mp4"
    assert main([*args, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("videogen: error:"), err
    assert message in lines[0]
    assert not list(tmp_path.iterdir())


def test_the_installed_command_reports_bad_input_the_same_way(tmp_path):
    r = videogen("render", "x", "--size", "65x64", "-o", str(tmp_path / "o.mp4"))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "videogen: error: --size=65x64: width must be a multiple of 8 and height of 8 for this model"
    ]


def test_incomplete_model_folder_is_named(tmp_path, tiny_wan21):
    import shutil

    broken = tmp_path / "m"
    shutil.copytree(tiny_wan21, broken)
    shutil.rmtree(broken / "transformer")
    r = videogen("render", "x", "--model", str(broken), "-o", str(tmp_path / "o.mp4"))
    assert r.returncode == 2 and "missing transformer" in r.stderr
    assert not (tmp_path / "o.mp4").exists()


def test_unwritable_output_is_rejected(tmp_path):
    r = videogen("render", "x", "-o", str(tmp_path / "missing-dir" / "o.mp4"))
    assert r.returncode == 2 and "--output" in r.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["--steps", "0"], "--steps=0"),
        (["--minutes", "0"], "--minutes=0.0"),
        (["--minutes", "30", "--steps", "100"], "not both"),
        (["--init", "/no/such/weights.safetensors"], "/no/such/weights.safetensors"),
        (["--snapshot-every", "0"], "--snapshot-every=0"),
        (["--motion-weight", "-1"], "--motion-weight=-1.0"),
        (["--blank-bounce"], "--blank-bounce=True: needs --exact-layout"),
        (["--rollout-frac", "0.5"], "needs --rollouts FILE"),
        (["--rollouts", "p.npz", "--rollout-frac", "1.5"], "--rollout-frac=1.5"),
        (["--rollouts", "p.npz", "--rollout-frac", "0.5", "--rollout-chains", "0"], "--rollout-chains=0"),
        (["--rollouts", "p.npz", "--rollout-frac", "0.5", "--rollout-seconds", "1"], "--rollout-seconds=1.0"),
        (["--anchor-frac", "-0.1"], "--anchor-frac=-0.1"),
        (["--rollout-anchor", "9"], "--rollout-anchor=9"),
        (["--rollout-two-objects", "1.2"], "--rollout-two-objects=1.2"),
        (["--two-objects", "1.5"], "--two-objects=1.5"),
        (["--lost-object", "-0.2"], "--lost-object=-0.2"),
        (["--broken-object", "2"], "--broken-object=2.0"),
        (["--rollout-lookback", "-1"], "--rollout-lookback=-1"),
        (["--occluded", "1.5"], "--occluded=1.5"),
        (["--layers", "0"], "--layers=0: must be in 1..16"),
        (
            ["--layers", "3", "--init", str(WEIGHTS_FILE)],
            "--layers=3: must be >= the 4 transformer blocks --init holds",
        ),
        (["--heads", "0"], "--heads=0: must be in 1..32"),
        (
            ["--heads", "6", "--init", str(WEIGHTS_FILE)],
            "--heads=6: must be a whole multiple of the 4 attention heads --init holds",
        ),
        (["--causal-chunk", "2", "--rollouts", "p.npz", "--rollout-frac", "0.5"], "--causal-chunk=2"),
        (
            ["--causal-chunk", "3", "--rollouts", "p.npz", "--rollout-frac", "0.5", "--rollout-seconds", "30"],
            "--rollout-seconds=30.0: must be <= 15.8125",
        ),
        (
            ["--causal-chunk", "3", "--rollouts", "p.npz", "--rollout-frac", "0.5", "--rollout-anchor", "6"],
            "--rollout-anchor=6: applies to rendered pools",
        ),
    ],
)
def test_bad_train_options_are_one_line_with_exit_2_and_nothing_written(tmp_path, capsys, args, message):
    from videogen.cli import main

    assert (
        main(["train", "builtin", *args, "--workdir", str(tmp_path / "w"), "--output", str(tmp_path / "o.safetensors")])
        == 2
    )
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("videogen: error:") and message in lines[0], lines
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "what,args,message",
    [
        ("decoder", ["--steps", "1"], "--steps=1"),
        ("decoder", ["--clips", "4"], "--clips=4"),
        ("decoder", ["--transformer", "/no/such/weights.safetensors"], "/no/such/weights.safetensors"),
        ("decoder", ["--minutes", "5"], "--minutes=5.0: is not a decoder option"),
        ("decoder", ["--rollouts", "p.npz"], "--rollouts=p.npz: is not a decoder option"),
        ("builtin", ["--clips", "100"], "--clips=100: is a decoder option"),
    ],
)
def test_bad_decoder_training_options_are_one_line_with_exit_2_and_nothing_written(
    tmp_path, capsys, what, args, message
):
    from videogen.cli import main

    assert (
        main(["train", what, *args, "--workdir", str(tmp_path / "w"), "--output", str(tmp_path / "o.safetensors")]) == 2
    )
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("videogen: error:") and message in lines[0], lines
    assert not list(tmp_path.iterdir())
