"""Run-time changes kvdoctor makes inside a SGLang server process it launched, each named in the report.

Imported by ``site_hook/sitecustomize.py``, which kvdoctor puts first on the server's ``PYTHONPATH``
(so every SGLang process, spawned schedulers included, runs it at start-up). Nothing here edits
SGLang's files: an import hook waits until a SGLang module has been executed, then changes one
attribute of it. Which changes apply is read from the environment kvdoctor sets for that server:

- ``KVDOCTOR_PATCHES=mooncake-host-indices``: ``MooncakeKVSender.supports_host_tensor_indices = False``
  (``srt/disaggregation/mooncake/conn.py``). With it on, prefill's first send pins host memory and
  records a CUDA event (``srt/disaggregation/prefill.py:1746-1761``), which fails on a CPU-only
  machine; off, the plain ``kv_to_page_indices`` branch runs. A CPU enabler: it changes SGLang's
  behaviour, so kvdoctor prints it.
- ``KVDOCTOR_INJECT=<fault>``: wraps ``Req.offload_kv_cache`` (``srt/managers/schedule_batch.py``)
  so the first retraction backup installs the fault on the server's pools
  (:mod:`kvdoctor.engines.sglang.live_faults`).
- ``KVDOCTOR_DIGEST_LOG=<file>``: wraps ``Req.offload_kv_cache``/``Req.load_kv_cache`` and
  ``Scheduler.run_batch`` (``srt/managers/scheduler.py``) to record per-component digests of every
  retracted request's state at backup, restore and its next forward, and the positions each covers
  (:mod:`kvdoctor.engines.sglang.digests`). Observation only: SGLang's calls run unchanged. With a fault
  as well, the fault wraps the digests, so the digests see what SGLang's own code (under the fault) did.

Each event is one line in ``$KVDOCTOR_HOOK_LOG`` (``<pid> <event> <detail>``), which the run reads
back: a fault that never ran, or was refused, must not pass as a caught fault; a fault in a run without
``--inject`` turns the verdict unknown. These variables are kvdoctor's own (``hook_log.CONTROL_ENV``): the
supervisor passes a server only those its run sets, never one inherited from the user's shell.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kvdoctor.engines import hook_log

PATCHES_ENV = "KVDOCTOR_PATCHES"
INJECT_ENV = "KVDOCTOR_INJECT"
LOG_ENV = "KVDOCTOR_HOOK_LOG"
DIGEST_ENV = "KVDOCTOR_DIGEST_LOG"
MOONCAKE_MODULE = "sglang.srt.disaggregation.mooncake.conn"
SCHEDULE_BATCH_MODULE = "sglang.srt.managers.schedule_batch"
SCHEDULER_MODULE = "sglang.srt.managers.scheduler"
MOONCAKE_HOST_INDICES = "mooncake-host-indices"


def log(event: str, detail: str = "") -> None:
    hook_log.append(LOG_ENV, event, detail)


class AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``hooks[name](module)`` once module NAME has been executed (by whichever finder found it)."""

    def __init__(self, hooks: dict[str, Callable[[ModuleType], None]]) -> None:
        self.hooks = hooks

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        hook = self.hooks.pop(fullname, None)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Wrapped(spec.loader, hook)
                return spec
        return None


class _Wrapped(importlib.abc.Loader):
    def __init__(self, loader: Any, hook: Callable[[ModuleType], None]) -> None:
        self.loader, self.hook = loader, hook

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        try:
            self.hook(module)
        except Exception as exc:  # a hook that fails must be seen, and must not pass silently
            log("hook-failed", f"{module.__name__}: {type(exc).__name__}: {exc}")
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


def _mooncake(module: ModuleType) -> None:
    module.MooncakeKVSender.supports_host_tensor_indices = False
    log("patched", "MooncakeKVSender.supports_host_tensor_indices=False")


def _fault(name: str) -> Callable[[ModuleType], None]:
    def hook(module: ModuleType) -> None:
        from kvdoctor.engines.sglang import live_faults

        req_class = module.Req
        original = req_class.offload_kv_cache
        original_load = req_class.load_kv_cache
        box: dict[str, Any] = {}

        @functools.wraps(original)
        def offload_kv_cache(self: Any, req_to_token_pool: Any, allocator: Any) -> Any:
            if "installed" not in box:
                try:
                    box["installed"] = live_faults.install(name, req_to_token_pool, allocator)
                except Exception as exc:
                    log("fault-refused", f"{name}: {exc}")
                    raise
                log("fault-installed", name)
            log("fault-offload", name)
            return original(self, req_to_token_pool, allocator)

        @functools.wraps(original_load)
        def load_kv_cache(self: Any, req_to_token_pool: Any, allocator: Any) -> Any:
            installed = box.get("installed")
            if installed is not None:
                while installed.deferred:  # restore-order: the previous restore's state arrives now
                    installed.deferred.pop(0)()
                log("fault-restore", name)
            return original_load(self, req_to_token_pool, allocator)

        req_class.offload_kv_cache = offload_kv_cache
        req_class.load_kv_cache = load_kv_cache
        log("fault-armed", f"{name} on Req.offload_kv_cache")

    return hook


def _digests(path: str) -> tuple[Callable[[ModuleType], None], Callable[[ModuleType], None]]:
    """The two digest hooks (schedule_batch, scheduler), sharing one recorder."""
    from kvdoctor.engines.sglang import digests

    recorder = digests.Recorder(path, lambda message: log("digest-failed", message))

    def on_schedule_batch(module: ModuleType) -> None:
        digests.hook_schedule_batch(module, recorder)
        log("digests-armed", "Req.offload_kv_cache, Req.load_kv_cache")

    def on_scheduler(module: ModuleType) -> None:
        digests.hook_scheduler(module, recorder)
        log("digests-armed", "Scheduler.run_batch")

    return on_schedule_batch, on_scheduler


def _chain(*hooks: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
    """One module's hooks, run in order: a later hook wraps what an earlier one installed."""

    def hook(module: ModuleType) -> None:
        for h in hooks:
            h(module)

    return hook


def install() -> None:
    hooks: dict[str, Callable[[ModuleType], None]] = {}
    patches = {p for p in os.environ.get(PATCHES_ENV, "").split(",") if p}
    if MOONCAKE_HOST_INDICES in patches:
        hooks[MOONCAKE_MODULE] = _mooncake
    batch_hooks: list[Callable[[ModuleType], None]] = []
    digest_log = os.environ.get(DIGEST_ENV)
    if digest_log:
        on_schedule_batch, on_scheduler = _digests(digest_log)
        batch_hooks.append(on_schedule_batch)  # first: the fault, if any, wraps the digests
        hooks[SCHEDULER_MODULE] = on_scheduler
    fault = os.environ.get(INJECT_ENV)
    if fault:
        batch_hooks.append(_fault(fault))
    if batch_hooks:
        hooks[SCHEDULE_BATCH_MODULE] = _chain(*batch_hooks)
    if hooks:
        sys.meta_path.insert(0, AfterImport(hooks))
