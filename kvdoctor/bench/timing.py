"""One way to time a callable, and one way to time a child process, shared by every kvdoctor benchmark.

A callable on CUDA: CUDA events around each call (the device's own clock, no host jitter),
synchronised once per sample.  On the CPU: ``time.perf_counter``.  Both discard warm-up calls
(compilation, allocator, caches) and report the median, which a single slow outlier cannot move.

A child process (``kvdoctor bench startup``): the CPU time the kernel charged that one child,
user + system, read from ``os.wait4`` when it is reaped; a number no other process (nor this one)
adds to, unlike a ``RUSAGE_CHILDREN`` delta or the wall clock on a shared machine.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median and the fastest of ``samples`` timed calls."""

    median_s: float
    min_s: float
    samples: int


def time_call(fn: Callable[[], object], *, device: torch.device | str, repeats: int = 10, warmup: int = 2) -> Timing:
    """Time ``fn`` ``repeats`` times after ``warmup`` untimed calls."""
    import torch

    device = torch.device(device)
    for _ in range(warmup):
        fn()
    samples: list[float] = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(repeats):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            samples.append(start.elapsed_time(stop) / 1e3)
    else:
        for _ in range(repeats):
            begin = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - begin)
    return Timing(median_s=statistics.median(samples), min_s=min(samples), samples=len(samples))


@dataclass(frozen=True)
class ProcessRun:
    """One finished child: the CPU seconds it used (user + system), its wall seconds, how it ended."""

    cpu_s: float
    wall_s: float
    exit_code: int
    stderr: str


def time_process(argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout_s: float = 120.0) -> ProcessRun:
    """Run ARGV to its end (standard output discarded, standard error kept) and charge it its own CPU time.

    The child is reaped here with ``os.wait4``, which returns the kernel's account of that child alone.
    One that runs past TIMEOUT_S is killed (exit code -9); one still running when this is interrupted
    (Ctrl-C) is killed and reaped before the interruption goes on: no orphan either way.
    """
    with tempfile.TemporaryFile() as err:
        begin = time.perf_counter()
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        wall = time.perf_counter() - begin
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    return ProcessRun(usage.ru_utime + usage.ru_stime, wall, proc.returncode, text)
