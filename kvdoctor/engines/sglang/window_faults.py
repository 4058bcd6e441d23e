"""``--inject`` faults inside a SGLang server on sliding-window eviction (``kvdoctor consistency``, one server).

A request decoding past its sliding window gives back, every step, the SWA slots of the tokens that left the window:
``ScheduleBatch.maybe_evict_swa`` (``srt/managers/schedule_batch.py:4068-4099``) calls ``ScheduleBatch._evict_swa``
(4125-4129) for each decoding request once ``seqlen - 1 - window`` passes its evicted length by the eviction interval
(``SGLANG_SWA_EVICTION_INTERVAL``, 128 tokens by default, ``srt/environ.py:730``), and the tree cache frees the row's
slots below ``pre_len - window`` (``free_swa_out_of_window_slots``, ``srt/mem_cache/common.py:75-138``). On a
CPU this path runs with an all-SWA model (``PureSWARadixCache``; SGLang 0.5.23 refuses gpt-oss on torch_native and
runs Gemma-2/3 without the SWA pool, :mod:`kvdoctor.consistency.runnable`).

- ``swa-early-evict`` (sglang#23982, sglang#8649): the eviction frontier is moved half a window ahead, so slots still
  inside the window are freed; the pool hands them to the next allocation (another request's token, or the same
  request's next one), which overwrites them, and the request's attention then reads that KV at the freed positions.

Each fault checks :func:`kvdoctor.engines.arming.armed` at every firing (disarmed: SGLang's own code runs) and logs
``fault-fired <name> <detail>`` through the site hook's log, which the run counts (a fault that never fired is no
caught fault). Which faults exist, what each needs and replays, is the registry's (``WINDOW_FAULTS`` of
:mod:`kvdoctor.core.sglang.faults`); each record's ``impl`` names its function here, which returns the SGLang module
it wraps and the hook.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kvdoctor.engines import arming
from kvdoctor.engines.sglang.server_hooks import log

SCHEDULE_BATCH_MODULE = "sglang.srt.managers.schedule_batch"
EARLY = "swa-early-evict"


def _log(event: str, detail: str) -> None:
    log(event, detail)


def early_frontier(pre_len: int, window: int, page_size: int = 1) -> int:
    """The ``pre_len`` to hand SGLang's eviction so it frees half a window (at least a page) of in-window slots.

    SGLang frees the row below ``pre_len - window`` (rounded to pages); adding ``max(window // 2, page_size)`` moves
    that frontier into the window and never past the newest token (the shift stays below the window)."""
    shift = max(window // 2, page_size)
    return pre_len + min(shift, max(window - 1, 0))


def _window(tree_cache: Any) -> int | None:
    """The window the tree cache's eviction keeps behind a request (its own rule, ``swa_retain_window``)."""
    window = getattr(tree_cache, "swa_retain_window", None)
    if window is None:
        window = getattr(tree_cache, "sliding_window_size", None)
    return int(window) if window is not None else None


def swa_early_evict(name: str) -> dict[str, Callable[[ModuleType], None]]:
    """``swa-early-evict``'s hook (its record's ``impl``): wrap ``ScheduleBatch._evict_swa`` so an armed eviction
    frees up to :func:`early_frontier`'s frontier."""

    def hook(module: ModuleType) -> None:
        batch = module.ScheduleBatch
        original = batch._evict_swa

        @functools.wraps(original)
        def evict(self: Any, req: Any, pre_len: int, *args: Any, **kwargs: Any) -> Any:
            window = _window(self.tree_cache)
            if window is None or window <= 0 or not arming.armed(name):
                return original(self, req, pre_len, *args, **kwargs)
            page = int(getattr(self.tree_cache, "page_size", 1) or 1)
            early = early_frontier(pre_len, window, page)
            _log(
                "fault-fired",
                f"{name} rid={getattr(req, 'rid', '?')} pre_len={pre_len} window={window}: frees up to "
                f"{early - window} (SGLang's frontier {pre_len - window}), {early - pre_len} in-window slots",
            )
            return original(self, req, early, *args, **kwargs)

        batch._evict_swa = evict
        _log("fault-installed", f"{name} on ScheduleBatch._evict_swa")

    return {SCHEDULE_BATCH_MODULE: hook}
