"""A user's fault file (``--fault-file``, API: :mod:`kvdoctor.engines.faultkit`): read before anything starts, and
installed inside the servers it names.

Read (:func:`load`): the file is executed once in a fresh module while :func:`faultkit.collect` records its
:func:`faultkit.wrap` calls. What cannot be used is a :class:`FaultFileError` (one line; the run turns it into
exit 2): no such file, not Python, an error while it runs, no wrap, a malformed target, an unknown role.

Installed (:func:`hooks_from_env`): kvdoctor gives a server ``KVDOCTOR_FAULT_FILE=ROLE:PATH`` (``hook_log.CONTROL_ENV``)
when the file wraps something in ROLE (or ``any``). SGLang's site hook (``engines/sglang/server_hooks.py``) and vLLM's
plugin (``engines/vllm/server_plugin.py``) call it in every server process, with their own log; it reads the file
again and returns, per target module, the hook that wraps the target once that module has been executed (the same
import hooks the built-in faults use). Each wrapped call checks ``arming.armed(NAME)`` (otherwise the original runs,
untouched) and logs one line (``hook_log``): ``fault-fired NAME TARGET ROLE [notes]``, or ``fault-unchanged ... REASON``
when the fault said it changed nothing. ``fault-installed NAME TARGET ROLE`` when a target was wrapped;
``fault-refused NAME [TARGET ROLE]: WHY`` when the file or a target could not be used there;
``fault-unresolved NAME TARGET ROLE: WHY`` when the target's module is not on that server's path (looked up without
importing anything). The run's gate reads them back (:mod:`kvdoctor.consistency.fault_file`). Imports nothing of
either server.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import inspect
import os
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from kvdoctor.engines import arming, faultkit
from kvdoctor.engines.faultkit import FaultFileError, Wrap

__all__ = ["FAULT_FILE_ENV", "FaultFile", "FaultFileError", "env_value", "fault_name", "hooks_from_env", "load"]

FAULT_FILE_ENV = "KVDOCTOR_FAULT_FILE"  # ROLE:PATH, the server's role and the fault file's absolute path
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
MAX_READ = 1_000_000  # bytes: a fault file is short; a bigger file is not one
Log = Callable[[str, str], None]
_MARK = "__kvdoctor_fault_file__"  # on a wrapped function: the target is wrapped once per process


@dataclass(frozen=True)
class FaultFile:
    """A fault file as read: its path, its name (what kvdoctor arms and logs) and its wraps, in file order."""

    path: Path
    name: str
    wraps: tuple[Wrap, ...]

    @property
    def roles(self) -> tuple[str, ...]:
        """The roles the file wraps something in, in :data:`faultkit.ROLES` order."""
        return tuple(r for r in faultkit.ROLES if any(w.role == r for w in self.wraps))

    def describe(self) -> str:
        return ", ".join(f"{w.target} ({w.role})" for w in self.wraps)


def fault_name(path: Path) -> str:
    """The fault's name: the file's name without ``.py`` (letters, digits, ``_ . -``); else :class:`FaultFileError`."""
    name = path.name[:-3] if path.name.endswith(".py") else path.name
    if not NAME.fullmatch(name):
        raise FaultFileError(
            f"{path}: the fault is named after its file, and {name!r} is not a name (letters, digits, '_', '.', '-'; "
            "no spaces): rename the file"
        )
    return name


def load(path: Path) -> FaultFile:
    """Read and run the fault file at PATH, collecting its wraps; :class:`FaultFileError` (one line) for a file
    kvdoctor cannot use."""
    name = fault_name(path)
    code = _compile(path)
    module = ModuleType(f"kvdoctor_fault_file_{re.sub(r'[^A-Za-z0-9_]', '_', name)}")
    module.__file__ = str(path)
    with faultkit.collect() as found:
        try:
            exec(code, module.__dict__)
        except FaultFileError as exc:
            raise FaultFileError(f"{path}{_line(exc, path)}: {exc}") from None
        except BaseException as exc:  # the user's code: anything it raises is a file kvdoctor cannot use
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise FaultFileError(
                f"{path} failed while it was read{_line(exc, path)}: {type(exc).__name__}: {exc} (import the "
                "server's modules inside your fault function, not at the top of the file)"
            ) from None
    if not found:
        raise FaultFileError(
            f"{path} defines no fault: wrap a server function with @faultkit.wrap('module:Attr.path', role=...) "
            "(kvdoctor.engines.faultkit; see docs/fault-file.md)"
        )
    seen: set[tuple[str, str]] = set()
    for w in found:
        if (w.target, w.role) in seen:
            raise FaultFileError(f"{path} wraps {w.target} in role {w.role} twice: one fault function per target")
        seen.add((w.target, w.role))
    return FaultFile(path, name, tuple(found))


def _compile(path: Path) -> Any:
    if not path.is_file():
        raise FaultFileError(f"{path}: no such file" if not path.exists() else f"{path} is not a file")
    try:
        raw = path.read_bytes()[: MAX_READ + 1]
    except OSError as exc:
        raise FaultFileError(f"{path} cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_READ:
        raise FaultFileError(f"{path} is over {MAX_READ:,} bytes: not a fault file")
    try:
        return compile(raw.decode("utf-8"), str(path), "exec", dont_inherit=True)
    except UnicodeDecodeError:
        raise FaultFileError(f"{path} is not Python: not UTF-8 text") from None
    except SyntaxError as exc:
        raise FaultFileError(f"{path} is not Python: {exc.msg} (line {exc.lineno})") from None
    except ValueError as exc:  # source with a NUL byte
        raise FaultFileError(f"{path} is not Python: {exc}") from None


def _line(exc: BaseException, path: Path) -> str:
    """`` (line N)``: the last line of PATH in EXC's traceback, if any."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
    return f" (line {lines[-1]})" if lines else ""


def env_value(role: str, path: Path) -> str:
    """``KVDOCTOR_FAULT_FILE`` for a server in ROLE (``prefill``, ``decode`` or ``single``)."""
    return f"{role}:{path.resolve()}"


def hooks_from_env(log: Log) -> dict[str, Callable[[ModuleType], None]]:
    """Inside a server: per target module, the hook that wraps the targets of this server's role (none without
    ``KVDOCTOR_FAULT_FILE``). A file that cannot be read here is logged (``fault-refused``), never raised: the
    server runs on, and the run's gate turns red on the log line."""
    value = os.environ.get(FAULT_FILE_ENV)
    if not value:
        return {}
    log = _one_line(log)
    role, _, path = value.partition(":")
    try:
        return _hooks(role, Path(path), log)
    except Exception as exc:  # a file that cannot be read here, or a kvdoctor bug: never the server's other hooks
        why = str(exc) if isinstance(exc, FaultFileError) else f"{type(exc).__name__}: {exc}"
        log("fault-refused", f"{Path(path).name.removesuffix('.py')}: {why}")
        return {}


def _hooks(role: str, path: Path, log: Log) -> dict[str, Callable[[ModuleType], None]]:
    read = load(path)
    mine = [w for w in read.wraps if w.role in (role, "any")]
    log("fault-file-loaded", f"{read.name} role={role} wraps={len(mine)} {read.path}")
    hooks: dict[str, list[Wrap]] = {}
    for w in mine:
        hooks.setdefault(w.module, []).append(w)
        missing = _unresolved(w.module)
        if missing:
            log("fault-unresolved", f"{read.name} {w.target} {w.role}: {missing}")
    return {module: _hook(read.name, wraps, log) for module, wraps in hooks.items()}


def _one_line(log: Log) -> Log:
    """LOG with every detail on one line (an exception's message may span several; the log is one event a line)."""
    return lambda event, detail: log(event, " ".join(detail.split()))


def _hook(name: str, wraps: list[Wrap], log: Log) -> Callable[[ModuleType], None]:
    def hook(module: ModuleType) -> None:
        for w in wraps:
            try:
                install(module, w, name, log)
            except Exception as exc:  # a wrong attribute path: logged, and the server runs on unfaulted
                log("fault-refused", f"{name} {w.target} {w.role}: {type(exc).__name__}: {exc}")

    return hook


def _unresolved(module: str) -> str | None:
    """Why MODULE cannot be found on this process's path, looked up without importing (executing) any package: the
    top package through the import system's finders, each level below it as a directory or file in its parent's
    locations (a namespace package included). None when it is found, or when that cannot be told."""
    if module in sys.modules:
        return None
    top, *below = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except Exception:
        return None
    if spec is None:
        return f"no module named {top!r} on this server's path"
    locations = spec.submodule_search_locations
    for i, part in enumerate(below, 1):
        name = ".".join([top, *below[:i]])
        if locations is None:
            return f"{name.rpartition('.')[0]!r} is not a package"
        found = _below(list(locations), part)
        if found is None:
            return f"no module named {name!r} on this server's path"
        locations = found or None  # [] is a plain module
    return None


def _below(locations: list[str], part: str) -> list[str] | None:
    """The locations of package PART in LOCATIONS ([] for a plain module), or None when none holds it."""
    suffixes = importlib.machinery.all_suffixes()
    dirs = [os.path.join(loc, part) for loc in locations if os.path.isdir(os.path.join(loc, part))]
    if dirs:
        return dirs
    files = (os.path.join(loc, part + suffix) for loc in locations for suffix in suffixes)
    return [] if any(os.path.isfile(f) for f in files) else None


def install(module: ModuleType, w: Wrap, name: str, log: Log) -> None:
    """Wrap W's attribute of MODULE (once per process) and log ``fault-installed``; AttributeError/TypeError when
    the attribute is missing or not callable."""
    owner: Any = module
    *path, last = w.attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    raw = inspect.getattr_static(owner, last)
    kind = type(raw) if isinstance(raw, staticmethod | classmethod) else None
    original = raw.__func__ if kind is not None else raw
    if not callable(original):
        raise TypeError(f"{w.attribute} is a {type(original).__name__}, not a function")
    if getattr(original, _MARK, None) == (name, w.role):
        return
    wrapped = _wrapped(original, w, name, log)
    setattr(owner, last, kind(wrapped) if kind is not None else wrapped)
    log("fault-installed", f"{name} {w.target} {w.role}")


def _wrapped(original: Callable[..., Any], w: Wrap, name: str, log: Log) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not arming.armed(name):
            return original(*args, **kwargs)
        firing = faultkit.enter()
        raised = ""
        try:
            return w.fault(original, *args, **kwargs)
        except BaseException as exc:  # the user's fault may raise on purpose (a loud bug): logged, then raised
            raised = f" raised {type(exc).__name__}: {exc}"
            raise
        finally:
            faultkit.leave()
            where = f"{name} {w.target} {w.role}"
            if firing.unchanged is not None and not raised:
                log("fault-unchanged", f"{where} {firing.unchanged}")
            else:
                log("fault-fired", " ".join([where, *firing.notes]) + raised)

    setattr(call, _MARK, (name, w.role))
    return call
