"""`--threads`: torch's CPU threads for `videogen render` and `videogen stream`, by default one per
physical core; OpenMP's waiting threads sleep (OMP_WAIT_POLICY=PASSIVE)."""

import os
import subprocess
import sys

import pytest

from videogen.cli.main import main
from videogen.config.threads import available_cores, default_threads, physical_cores
from videogen.io.video import VideoReader


def videogen(*args, env=None):
    return subprocess.run([sys.executable, "-m", "videogen.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)  # fmt: skip


@pytest.mark.parametrize("command", ["render", "stream"])
@pytest.mark.parametrize("value", ["0", "-2"])
def test_threads_below_one_is_one_line_naming_threads_and_exit_2(command, value, capsys):
    assert main([command, "a red circle", "-o", "x.mp4", "--threads", value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1  # one line
    assert err.startswith(f"videogen: error: --threads={value}: must be a whole number >= 1")


def test_use_threads_sets_the_count_and_a_passive_wait_policy_before_torch_loads():
    code = (
        "from videogen.config.threads import use_threads\n"
        "n = use_threads(1)\n"
        "import os, torch\n"
        "print(n, torch.get_num_threads(), os.environ['OMP_WAIT_POLICY'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"})  # fmt: skip
    assert out.stdout.split() == ["1", "1", "PASSIVE"], out.stderr
    mine = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_WAIT_POLICY": "ACTIVE"})  # fmt: skip
    assert mine.stdout.split() == ["1", "1", "ACTIVE"], mine.stderr  # the user's own setting wins


def test_the_default_is_one_thread_per_physical_core_of_this_process():
    cpus = available_cores()
    assert 1 <= default_threads() == physical_cores(cpus) <= len(cpus)
    # hyperthread siblings (same package and core id) count once; CPUs outside the affinity not at all
    cpuinfo = "".join(f"processor : {cpu}\nphysical id : 0\ncore id : {cpu % 2}\n\n" for cpu in range(4))
    assert physical_cores([0, 1, 2, 3], cpuinfo) == 2
    assert physical_cores([0], cpuinfo) == physical_cores([0, 2], cpuinfo) == 1  # 0 and 2: one core's siblings


def test_render_with_one_thread_makes_the_same_video_as_with_two(tmp_path):
    outs = []
    for n in ("1", "2"):
        out = tmp_path / f"t{n}.mp4"
        r = videogen("render", "a red circle moving right on a black background", "--seconds", "1", "--steps", "2",
                     "--threads", n, "-o", str(out), "-q")  # fmt: skip
        assert r.returncode == 0, r.stderr
        outs.append(VideoReader(out).read_all())
    assert outs[0].shape == (16, 64, 64, 3) and (outs[0] == outs[1]).all()
