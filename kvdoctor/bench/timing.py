"""One way to time a callable, shared by every kvdoctor benchmark.

CUDA: CUDA events around each call (the device's own clock, no host jitter), synchronised once
per sample.  CPU: ``time.perf_counter``.  Both discard warm-up calls (compilation, allocator,
caches) and report the median, which a single slow outlier cannot move.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median and the fastest of ``samples`` timed calls."""

    median_s: float
    min_s: float
    samples: int


def time_call(fn: Callable[[], object], *, device: torch.device | str, repeats: int = 10, warmup: int = 2) -> Timing:
    """Time ``fn`` ``repeats`` times after ``warmup`` untimed calls."""
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
