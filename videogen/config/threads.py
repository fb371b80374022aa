"""How many CPU threads torch computes with, and how they wait, set once per process
(`--threads`, the workers' `torch_threads`).

On a busy machine what hurts is how OpenMP threads wait, not how many there are: torch's parallel
regions end in a barrier, and a thread that arrives first spins there by default, burning the core
that the thread it waits for (descheduled by another process) needs. Waiting threads here sleep
(`OMP_WAIT_POLICY=PASSIVE`), and the count is torch's own, one per physical core: beside 2 or 4
busy loops on the 2-core dev box that default was within 1.16x of the fastest count, torch's
default 3-13x slower (docs/architecture.md, "Threads"; `benchmarks/render.py --threads-sweep`).

OpenMP reads the wait policy when torch loads its runtime, so `use_threads` sets it only while
torch is not yet imported (the CLI calls it before loading the model), and never over a value the
user set.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from videogen.errors import InvalidOption


def available_cores() -> list[int]:
    """The CPUs this process may run on (its affinity mask; every CPU where there is none)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def physical_cores(cpus: list[int], cpuinfo: str | None = None) -> int:
    """Distinct physical cores among `cpus` (hyperthread siblings share one), from `cpuinfo`
    (default: /proc/cpuinfo); len(cpus) where that is unreadable or names no cores."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return len(cpus)
    cores, cpu, package = set(), None, "0"
    for line in cpuinfo.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "processor":
            cpu, package = int(value), "0"
        elif key == "physical id":
            package = value
        elif key == "core id" and cpu in cpus:
            cores.add((package, value))
    return len(cores) or len(cpus)


def default_threads() -> int:
    """One thread per physical core this process may run on (module docstring)."""
    return physical_cores(available_cores())


def check_threads(value: int | None, option: str = "--threads") -> int | None:
    """`value` if it is a whole number >= 1 (or None: choose); InvalidOption naming `option` otherwise."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InvalidOption(option, value, "must be a whole number >= 1 (leave it out: one per physical core)")
    return value


def use_threads(threads: int | None = None) -> int:
    """Make torch compute with `threads` intra-op threads (None: `default_threads()`); returns the
    number set. Sets OMP_WAIT_POLICY=PASSIVE first while torch is not yet imported (module docstring)."""
    n = default_threads() if threads is None else check_threads(threads)
    assert n is not None
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    torch.set_num_threads(n)
    return n
