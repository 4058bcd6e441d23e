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
- ``KVDOCTOR_PATCHES=transfer-observer`` (``--scenario transfer``): logs each request's PD transfer, the prefill's
  sends and the decode's commit (:mod:`kvdoctor.engines.sglang.transfer_faults`); observation only, installed last
  so it wraps a transfer fault.
- ``KVDOCTOR_INJECT=<fault>[,<fault>...]``: each fault's implementation, the function its registry record names
  (``Fault.impl``, :mod:`kvdoctor.engines.fault_impl`), hooks the SGLang modules it acts on (SGLang module -> hook);
  e.g. a retraction fault wraps ``Req.offload_kv_cache`` (``srt/managers/schedule_batch.py``) so the first
  retraction backup installs it on the server's pools (:mod:`kvdoctor.engines.sglang.live_faults`). Several
  faults are installed at once only to be armed one at a time (``KVDOCTOR_ARM``, :mod:`kvdoctor.engines.arming`).
- ``KVDOCTOR_DIGEST_LOG=<file>``: wraps ``Req.offload_kv_cache``/``Req.load_kv_cache`` and
  ``Scheduler.run_batch`` (``srt/managers/scheduler.py``) to record per-component digests of every
  retracted request's state at backup, restore and its next forward, and the positions each covers
  (:mod:`kvdoctor.engines.sglang.digests`). Observation only: SGLang's calls run unchanged. With a fault
  as well, the fault wraps the digests, so the digests see what SGLang's own code (under the fault) did. With
  ``KVDOCTOR_STATE_BYTES=<n>`` it also keeps the recurrent state's bytes (requests whose state is at most N bytes)
  before every forward and in every backup, in ``<log>.bin``; the reference decode keeps them too, in its own log.
- ``KVDOCTOR_FAULT_FILE=<role>:<path>``: the user's fault file (``--fault-file``); its wraps of this role are
  installed by the same import hooks (:mod:`kvdoctor.engines.fault_file`).

Each event is one line in ``$KVDOCTOR_HOOK_LOG`` (``<pid> <event> <detail>``), which the run reads
back: a fault that never ran, or was refused, must not pass as a caught fault; a fault in a run without
``--inject`` turns the verdict unknown. These variables are kvdoctor's own (``hook_log.CONTROL_ENV``): the
supervisor passes a server only those its run sets, never one inherited from the user's shell.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kvdoctor.engines import fault_file, fault_list, hook_log

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


def _digests(path: str) -> tuple[Callable[[ModuleType], None], Callable[[ModuleType], None]]:
    """The two digest hooks (schedule_batch, scheduler), sharing one recorder."""
    from kvdoctor.engines.sglang import digests

    try:
        keep = int(os.environ.get(digests.STATE_BYTES_ENV) or 0)
    except ValueError:
        keep = 0
        log("digest-failed", f"{digests.STATE_BYTES_ENV} is no integer: state bytes not kept")
    recorder = digests.Recorder(path, lambda message: log("digest-failed", message), keep)

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


def fault_hooks(name: str) -> dict[str, Callable[[ModuleType], None]]:
    """The SGLang modules fault NAME hooks, and how: what its record's ``impl`` returns (the registry is read only
    when a fault is asked for: every SGLang process runs this module at start-up)."""
    from kvdoctor.core import faults as registry
    from kvdoctor.core.faults import Target
    from kvdoctor.core.servers import Server
    from kvdoctor.engines import fault_impl

    return fault_impl.hooks(registry.get(name, server=Server.SGLANG, target=Target.SERVER))


def install() -> None:
    hooks: dict[str, list[Callable[[ModuleType], None]]] = {}
    patches = {p for p in os.environ.get(PATCHES_ENV, "").split(",") if p}
    if MOONCAKE_HOST_INDICES in patches:
        hooks.setdefault(MOONCAKE_MODULE, []).append(_mooncake)
    digest_log = os.environ.get(DIGEST_ENV)
    if digest_log:
        on_schedule_batch, on_scheduler = _digests(digest_log)
        hooks.setdefault(SCHEDULE_BATCH_MODULE, []).append(on_schedule_batch)  # first: a fault wraps the digests
        hooks.setdefault(SCHEDULER_MODULE, []).append(on_scheduler)
    for name in fault_list.decode(os.environ.get(INJECT_ENV)):
        try:
            found = fault_hooks(name)
        except Exception as exc:  # an unknown fault or a missing module: seen in the log, never silent
            log("fault-refused", f"{name}: {type(exc).__name__}: {exc}")
            continue
        for module, hook in found.items():
            hooks.setdefault(module, []).append(hook)
    if "transfer-observer" in patches:  # last: it wraps a transfer fault, so it counts the calls a fault faked
        from kvdoctor.engines.sglang.transfer_faults import observer_hooks

        for module, hook in observer_hooks().items():
            hooks.setdefault(module, []).append(hook)
    for module, hook in fault_file.hooks_from_env(log).items():  # --fault-file: the user's own fault
        hooks.setdefault(module, []).append(hook)
    if hooks:
        sys.meta_path.insert(0, AfterImport({module: _chain(*chain) for module, chain in hooks.items()}))
