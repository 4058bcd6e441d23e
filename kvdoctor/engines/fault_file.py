"""A user's fault file (``--fault-file``, API: :mod:`kvdoctor.engines.faultkit`): read before anything starts, and
installed inside the servers it names.

Read by kvdoctor (:func:`read`): never in kvdoctor's own process. A fault file is the user's code, and run there it
could end kvdoctor (``os._exit(0)``: a false green), write into its ``--json`` stdout, move its working directory, or
replace one of its checks. So a child interpreter (``python -I``, stdin closed, its output captured, the caller's
working directory and kvdoctor's ``sys.path``) runs it under :func:`faultkit.collect` and writes one JSON document
to a file kvdoctor made and passed it by descriptor: the fault's name, each wrap's target and role, and the sha256 of
the bytes it ran (or the one line why the file cannot be used). The file's own prints go to the captured output,
never there. A child that ends without that document (``os._exit``, a signal, the timeout) is a
:class:`FaultFileError`, never a pass; a signal that stops kvdoctor while the child runs kills the child (it also
dies with kvdoctor: a parent-death signal). What kvdoctor keeps (:class:`FaultFile`) is targets and roles only, no
function of the file's; reads are cached by the resolved path and the content's sha256, so an edited file is read
again and concurrent reads (threads) each get their own child.

The name (what kvdoctor arms, the servers log and the gate reads) is the name of the file the path resolves to,
without ``.py``: a symlink is resolved once, where it is read, and the servers are given the resolved path, so every
side names the fault the same. What cannot be used is a :class:`FaultFileError` (one line; the run turns it into
exit 2): no such file, not Python, an error while it runs, no wrap, a malformed target, an unknown role.

Installed (:func:`hooks_from_env`): kvdoctor gives a server ``KVDOCTOR_FAULT_FILE=ROLE:PATH`` (``hook_log.CONTROL_ENV``)
when the file wraps something in ROLE (or ``any``). SGLang's site hook (``engines/sglang/server_hooks.py``) and vLLM's
plugin (``engines/vllm/server_plugin.py``) call it in every server process, with their own log; it reads the file
again, in that process (:func:`load`), and returns, per target module, the hook that wraps the target once that module
has been executed (the same import hooks the built-in faults use). Each wrapped call checks ``arming.armed(NAME)``
(otherwise the original runs, untouched) and logs one line (``hook_log``): ``fault-fired NAME TARGET ROLE [notes]``, or
``fault-unchanged ... REASON`` when the fault said it changed nothing. ``fault-file-loaded NAME role=ROLE wraps=N
sha256=HEX PATH`` when a process loaded the file; ``fault-installed NAME TARGET ROLE`` when a target was wrapped;
``fault-refused NAME [TARGET ROLE]: WHY`` when the file or a target could not be used there;
``fault-unresolved NAME TARGET ROLE: WHY`` when the target's module is not on that server's path (looked up without
importing anything). The run's gate reads them back (:mod:`kvdoctor.consistency.fault_file`). Imports nothing of
either server.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

from kvdoctor.engines import arming, faultkit
from kvdoctor.engines.faultkit import Declared, FaultFileError, Wrap

if TYPE_CHECKING:
    import subprocess

__all__ = [
    "FAULT_FILE_ENV",
    "Declared",
    "FaultFile",
    "FaultFileError",
    "Loaded",
    "env_value",
    "fault_name",
    "hooks_from_env",
    "load",
    "read",
    "resolve",
]

FAULT_FILE_ENV = "KVDOCTOR_FAULT_FILE"  # ROLE:PATH, the server's role and the fault file's absolute path
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
MAX_READ = 1_000_000  # bytes: a fault file is short; a bigger file is not one
READ_TIMEOUT_S = 60.0  # the child that reads a file: its top must be cheap (server modules import inside functions)
DOC = "kvdoctor-fault-file"  # the child's document says it is one
MAX_CACHED = 64
Log = Callable[[str, str], None]
_MARK = "__kvdoctor_fault_file__"  # on a wrapped function: the target is wrapped once per process
_SAID_TAIL = 2000  # characters of the child's own output quoted when it ended without its document


class _Wraps:
    wraps: tuple[Declared, ...]

    @property
    def roles(self) -> tuple[str, ...]:
        """The roles the file wraps something in, in :data:`faultkit.ROLES` order."""
        return tuple(r for r in faultkit.ROLES if any(w.role == r for w in self.wraps))

    def describe(self) -> str:
        return ", ".join(f"{w.target} ({w.role})" for w in self.wraps)


@dataclass(frozen=True)
class FaultFile(_Wraps):
    """A fault file as kvdoctor read it (:func:`read`, in a child): its resolved path, its name (what kvdoctor arms and
    the servers log), its wraps' targets and roles in file order, the sha256 of the bytes the child ran, and the path
    as it was given (a symlink's own; the resolved path when the same)."""

    path: Path
    name: str
    wraps: tuple[Declared, ...]
    sha256: str = ""
    given: Path | None = None

    @property
    def shown(self) -> str:
        """The path for a person: as given, with where it leads when that is elsewhere (a symlink)."""
        given = self.given if self.given is not None else self.path
        return str(given) if given == self.path else f"{given} -> {self.path}"


@dataclass(frozen=True)
class Loaded(_Wraps):
    """A fault file run in this process (:func:`load`: inside a server, or the child that reads it for kvdoctor):
    its wraps with the user's functions."""

    path: Path
    name: str
    wraps: tuple[Wrap, ...]
    sha256: str = ""


def fault_name(path: Path) -> str:
    """The fault's name: the file's name without ``.py`` (letters, digits, ``_ . -``); else :class:`FaultFileError`."""
    name = path.name[:-3] if path.name.endswith(".py") else path.name
    if not NAME.fullmatch(name):
        raise FaultFileError(
            f"{path}: the fault is named after its file, and {name!r} is not a name (letters, digits, '_', '.', '-'; "
            "no spaces): rename the file"
        )
    return name


def resolve(path: Path | str) -> Path:
    """PATH as every side uses it: ``~`` expanded, absolute, every symlink resolved (the file the servers run)."""
    return Path(path).expanduser().resolve()


def load(path: Path) -> Loaded:
    """Run the fault file at PATH in this process, collecting its wraps; :class:`FaultFileError` (one line) for a file
    kvdoctor cannot use. Only a server (and :func:`read`'s child) runs a file so: kvdoctor itself calls :func:`read`."""
    name = fault_name(path)
    raw = _source(path)
    code = _compile(path, raw)
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
    _check_twice(path, found)
    return Loaded(path, name, tuple(found), hashlib.sha256(raw).hexdigest())


def _check_twice(path: Path, wraps: Sequence[Declared]) -> None:
    seen: set[tuple[str, str]] = set()
    for w in wraps:
        if (w.target, w.role) in seen:
            raise FaultFileError(f"{path} wraps {w.target} in role {w.role} twice: one fault function per target")
        seen.add((w.target, w.role))


def _source(path: Path) -> bytes:
    """PATH's bytes (at most :data:`MAX_READ`); :class:`FaultFileError` for no file, not a file, or too big."""
    if not path.is_file():
        raise FaultFileError(f"{path}: no such file" if not path.exists() else f"{path} is not a file")
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_READ + 1)
    except OSError as exc:
        raise FaultFileError(f"{path} cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_READ:
        raise FaultFileError(f"{path} is over {MAX_READ:,} bytes: not a fault file")
    return raw


def _compile(path: Path, raw: bytes) -> Any:
    try:
        return compile(raw.decode("utf-8"), str(path), "exec", dont_inherit=True)
    except UnicodeDecodeError:
        raise FaultFileError(f"{path} is not Python: not UTF-8 text") from None
    except SyntaxError as exc:
        raise FaultFileError(f"{path} is not Python: {exc.msg} (line {exc.lineno})") from None
    except ValueError as exc:  # source with a NUL byte
        raise FaultFileError(f"{path} is not Python: {exc}") from None


# ---- read for kvdoctor: in a child interpreter -----------------------------------------------------------------------
_cache: dict[tuple[str, str], FaultFile] = {}  # (resolved path, sha256 of its bytes) -> what the child read
_cache_lock = threading.Lock()

# The child: kvdoctor's sys.path (as this process has it: -I ignores PYTHONPATH and the user's site), then the reader.
_BOOT = (
    "import json, sys\n"
    "sys.path[:] = json.loads(sys.argv[4])\n"
    "from kvdoctor.engines.fault_file import _child\n"
    "_child(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]))\n"
)


def read(path: Path | str, *, timeout_s: float | None = None) -> FaultFile:
    """The fault file at PATH as kvdoctor uses it: resolved (:func:`resolve`), named after the file it resolves to,
    and run in a child interpreter (never this process) that returns its wraps' targets and roles; one child per
    content (cached by the resolved path and the bytes' sha256: an edited file is read again).
    :class:`FaultFileError` (one line) for a file kvdoctor cannot use, or a child that ended without its answer."""
    given = Path(path)
    resolved = resolve(path)
    try:
        fault_name(resolved)  # the name's refusal before any child starts
    except FaultFileError as exc:
        via = f" (where {given} leads: the fault is named after that file)" if resolved.name != given.name else ""
        raise FaultFileError(f"{exc}{via}") from None
    digest = hashlib.sha256(_source(resolved)).hexdigest()
    with _cache_lock:
        found = _cache.get((str(resolved), digest))
    if found is None:
        found = _read_in_child(resolved, READ_TIMEOUT_S if timeout_s is None else timeout_s)
        with _cache_lock:
            while len(_cache) >= MAX_CACHED:
                del _cache[next(iter(_cache))]
            _cache[(str(found.path), found.sha256)] = found
    return dataclasses.replace(found, given=given)


def cached(path: Path | str, sha256: str) -> FaultFile | None:
    """What :func:`read` read of PATH (resolved) when its bytes had SHA256, if this process read that version."""
    with _cache_lock:
        found = _cache.get((str(resolve(path)), sha256))
    return dataclasses.replace(found, given=Path(path)) if found is not None else None


def _read_in_child(path: Path, timeout_s: float) -> FaultFile:
    """PATH (resolved) run in a child interpreter; its document turned into a :class:`FaultFile`."""
    import subprocess  # here, not at the top: the servers import this module at start-up, and never read so
    import tempfile

    if not sys.executable:
        raise FaultFileError(f"{path} cannot be read: no Python interpreter to read it in (sys.executable is empty)")
    with tempfile.TemporaryFile() as doc, tempfile.TemporaryFile() as said:
        argv = [sys.executable, "-I", "-c", _BOOT, str(doc.fileno()), str(path), str(os.getpid()), _paths()]
        try:
            child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=said,
                stderr=subprocess.STDOUT,
                cwd=_cwd(path),
                pass_fds=(doc.fileno(),),
                start_new_session=True,  # its own group: killed whole, and a Ctrl-C meant for kvdoctor is kvdoctor's
            )
        except OSError as exc:
            raise FaultFileError(f"{path} cannot be read: cannot start {sys.executable}: {exc}") from None
        try:
            code = _wait(child, timeout_s)
        except subprocess.TimeoutExpired:
            raise FaultFileError(
                f"{path} was still being read after {timeout_s:g} s: keep the top of the file cheap (import the "
                "server's modules inside your fault function)"
            ) from None
        finally:  # a signal (Interrupted, KeyboardInterrupt) or the timeout: the child and its group go too
            _stop(child)
        doc.seek(0)
        text = doc.read().decode("utf-8", "replace")
        said.seek(0, os.SEEK_END)
        said.seek(max(0, said.tell() - _SAID_TAIL))
        output = said.read().decode("utf-8", "replace")
    return _answer(path, code, text, output)


def _paths() -> str:
    """This process's ``sys.path`` for the child (``''`` made the absolute working directory), kvdoctor's own root
    first: the child imports the kvdoctor that is reading the file, and the file sees the modules kvdoctor sees."""
    root = str(Path(__file__).resolve().parents[2])
    here = _getcwd()
    paths = [(here or "") if p == "" else p for p in sys.path if isinstance(p, str)]
    return json.dumps([root, *(p for p in paths if p and p != root)])


def _getcwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the working directory was removed
        return None


def _cwd(path: Path) -> str:
    """The child's working directory: kvdoctor's (the servers run there too), else the file's folder."""
    return _getcwd() or str(path.parent)


def _wait(child: subprocess.Popen[bytes], timeout_s: float) -> int:
    """CHILD's exit status, once it ended (``TimeoutExpired`` after TIMEOUT_S); what it left running in its process
    group (a process the file started) is killed before it is reaped, while its pid still names the group."""
    import select
    import subprocess

    try:
        fd = os.pidfd_open(child.pid)
    except (AttributeError, OSError):  # no pidfd here: the group is killed only if the child is still running
        return child.wait(timeout=timeout_s)
    try:
        if not select.select([fd], [], [], timeout_s)[0]:
            raise subprocess.TimeoutExpired(child.args, timeout_s)
    finally:
        os.close(fd)
    _kill_group(child)
    return child.wait()


def _stop(child: subprocess.Popen[bytes]) -> None:
    """CHILD and its process group killed and reaped, unless it was reaped already."""
    if child.returncode is None:  # not reaped: its pid, the group's id, is still its own
        _kill_group(child)
        child.wait()


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # nothing left in the group
        os.killpg(child.pid, signal.SIGKILL)


def _answer(path: Path, code: int, text: str, output: str) -> FaultFile:
    """The child's DOCUMENT (its exit CODE, its own OUTPUT's tail) as a :class:`FaultFile`, or the one line why not."""
    doc: Any = None
    line = text.strip()
    if line:
        try:
            doc = json.loads(line)
        except ValueError:
            doc = None
    if code != 0 or not isinstance(doc, dict) or doc.get("document") != DOC:
        raise FaultFileError(f"{path} {_how_it_ended(code, output)}")
    if "error" in doc:
        raise FaultFileError(" ".join(str(doc["error"]).split()))
    try:
        wraps = tuple(
            Declared(faultkit.check_target(w["target"]), faultkit.check_role(w["role"])) for w in doc["wraps"]
        )
        name, digest = str(doc["name"]), str(doc["sha256"])
    except (KeyError, TypeError) as exc:
        raise FaultFileError(f"{path} was read, but its answer is malformed ({type(exc).__name__}: {exc})") from None
    if not wraps:
        raise FaultFileError(f"{path} defines no fault")
    _check_twice(path, wraps)
    return FaultFile(path, name, wraps, digest)


def _how_it_ended(code: int, output: str) -> str:
    """Why a child that read a file gave no answer, in words: how it exited, and the last line it printed."""
    if code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with status {code}"
    last = [ln.strip() for ln in output.splitlines() if ln.strip()]
    tail = f"; its last output: {last[-1][:300]}" if last else ""
    return (
        f"ended the process that read it without an answer: it {how} while the file ran (does its top call "
        f"os._exit, exit or kill its own process?){tail}"
    )


def _child(out: int, path: str, parent: int) -> NoReturn:
    """The child's body (:data:`_BOOT`): die with kvdoctor, run the file (:func:`load`), write the one document to
    descriptor OUT and end at once (the file's threads and exit handlers never run after it)."""
    _die_with(parent)
    os.set_inheritable(out, False)  # a process the file starts does not inherit it
    sys.argv = [path]  # the file sees its own path, as a script would, not kvdoctor's arguments
    try:
        loaded = load(Path(path))
        doc: dict[str, Any] = {
            "document": DOC,
            "name": loaded.name,
            "sha256": loaded.sha256,
            "wraps": [{"target": w.target, "role": w.role} for w in loaded.wraps],
        }
    except FaultFileError as exc:
        doc = {"document": DOC, "error": str(exc)}
    except Exception as exc:  # kvdoctor's own reader failed here: still one line, never a pass
        doc = {"document": DOC, "error": f"{path} could not be read: {type(exc).__name__}: {exc}"}
    data = (json.dumps(doc) + "\n").encode("utf-8")
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # the file may have closed or replaced them
            stream.flush()
    try:
        while data:
            data = data[os.write(out, data) :]
    except OSError:
        os._exit(3)
    os._exit(0)


def _die_with(parent: int) -> None:
    """This process gets SIGKILL when kvdoctor (PARENT) dies (Linux: a parent-death signal); an orphan ends now."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(1)


def _line(exc: BaseException, path: Path) -> str:
    """`` (line N)``: the last line of PATH in EXC's traceback, if any."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
    return f" (line {lines[-1]})" if lines else ""


def env_value(role: str, path: Path | str) -> str:
    """``KVDOCTOR_FAULT_FILE`` for a server in ROLE (``prefill``, ``decode`` or ``single``)."""
    return f"{role}:{resolve(path)}"


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
    log("fault-file-loaded", f"{read.name} role={role} wraps={len(mine)} sha256={read.sha256} {read.path}")
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
