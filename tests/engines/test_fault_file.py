"""A user's fault file (``--fault-file``): the API (``kvdoctor.engines.faultkit``), its reader's refusals, and the
wraps installed through the servers' real import hooks (SGLang's site hook ``AfterImport``, vLLM's plugin) on a
fake module and class written by the test, armed and logged as the run's gate reads them."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from kvdoctor.engines import arming, fault_file, faultkit, hook_log
from kvdoctor.engines.faultkit import FaultFileError

LOG_ENV = "KVDOCTOR_HOOK_LOG"
HEAD = "from kvdoctor.engines import faultkit\n"
FAKE = "kvd_fake_server.engine"  # the fake server module the tests' fault files wrap


def write(tmp_path: Path, body: str, name: str = "my_fault.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


DOUBLE = """
    from kvdoctor.engines import faultkit

    @faultkit.wrap("kvd_fake_server.engine:Engine.step", role="single")
    def double(original, engine, x):
        if x == 0:
            faultkit.unchanged("nothing to double at zero")
            return original(engine, x)
        faultkit.note(f"x={x}")
        return 2 * original(engine, x)

    @faultkit.wrap("kvd_fake_server.engine:Engine.decode", role="prefill")
    def never_here(original, *args, **kwargs):
        return original(*args, **kwargs)
"""


# ---- the API -------------------------------------------------------------------------------------------------------
def test_wrap_declares_a_target_and_role_and_returns_the_function_unchanged() -> None:
    def fault(original: object) -> None:
        return None

    with faultkit.collect() as found:
        assert faultkit.wrap("a.b:C.d", role="decode")(fault) is fault
    assert found == [faultkit.Wrap("a.b:C.d", "decode", fault)]
    assert (found[0].module, found[0].attribute) == ("a.b", "C.d")
    assert faultkit.wrap("a:f", role="any")(fault) is fault  # outside a read: declared to nobody, harmless


@pytest.mark.parametrize("target", ["a.b.C.d", "a.b:", ":C.d", "a b:C", "a.b:C..d", "a.1b:C", 3])
def test_a_malformed_target_is_refused_where_it_is_written(target: object) -> None:
    with pytest.raises(FaultFileError, match="target"):
        faultkit.wrap(target, role="single")  # type: ignore[arg-type]


def test_an_unknown_role_is_refused_naming_the_roles() -> None:
    with pytest.raises(FaultFileError, match="unknown role 'router': choose one of prefill, decode, single, any"):
        faultkit.wrap("a:f", role="router")


def test_unchanged_and_note_outside_a_fault_function_say_so() -> None:
    with pytest.raises(RuntimeError, match="only inside a wrapped fault function"):
        faultkit.unchanged("x")
    with pytest.raises(RuntimeError, match="only inside"):
        faultkit.note("x")


def test_the_api_imports_neither_server() -> None:
    import ast

    for module in (faultkit, fault_file):
        tree = ast.parse(Path(module.__file__ or "").read_text(encoding="utf-8"))
        named = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        named |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m.split(".")[0] for m in named} & {"sglang", "vllm", "sgl_kernel", "torch"}


# ---- reading a file: what cannot be used is one line ---------------------------------------------------------------
def test_a_file_is_read_into_its_name_and_wraps(tmp_path: Path) -> None:
    found = fault_file.load(write(tmp_path, DOUBLE))
    assert found.name == "my_fault"
    assert [(w.target, w.role) for w in found.wraps] == [
        ("kvd_fake_server.engine:Engine.step", "single"),
        ("kvd_fake_server.engine:Engine.decode", "prefill"),
    ]
    assert found.roles == ("prefill", "single")


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("def f(:\n", "is not Python: invalid syntax (line 1)"),
        ("x = 1\n", "defines no fault"),
        (
            HEAD + "faultkit.wrap('a:f', role='router')(print)\n",
            "(line 2): unknown role",
        ),
        (HEAD + "faultkit.wrap('a.f', role='single')(print)\n", "malformed target"),
        ("import no_such_server_module\n", "failed while it was read (line 1): ModuleNotFoundError"),
        (
            HEAD + "for _ in (1, 2):\n    faultkit.wrap('a:f', role='single')(print)\n",
            "wraps a:f in role single twice",
        ),
    ],
)
def test_a_file_kvdoctor_cannot_use_is_one_line(tmp_path: Path, body: str, said: str) -> None:
    path = write(tmp_path, body)
    with pytest.raises(FaultFileError) as caught:
        fault_file.load(path)
    assert said in str(caught.value) and "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_missing_binary_and_badly_named_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(FaultFileError, match="no such file"):
        fault_file.load(tmp_path / "absent.py")
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(FaultFileError, match="is not Python: not UTF-8"):
        fault_file.load(binary)
    with pytest.raises(FaultFileError, match="rename the file"):
        fault_file.load(write(tmp_path, DOUBLE, name="my fault.py"))
    with pytest.raises(FaultFileError, match="is not a file"):
        fault_file.load(tmp_path)


# ---- inside a server: the real import hooks on a fake module -------------------------------------------------------
ENGINE = """
class Engine:
    def step(self, x):
        return x + 1

    def decode(self, x):
        return x

    @staticmethod
    def helper(x):
        return x * 10
"""


@pytest.fixture
def fake_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fake server package on sys.path (not imported yet), the hook log, and sys.meta_path/sys.modules restored."""
    root = tmp_path / "site"
    (root / "kvd_fake_server").mkdir(parents=True)
    (root / "kvd_fake_server" / "__init__.py").write_text("", encoding="utf-8")
    (root / "kvd_fake_server" / "engine.py").write_text(ENGINE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setenv(LOG_ENV, str(tmp_path / "hook.log"))
    monkeypatch.delenv(arming.ARM_ENV, raising=False)
    yield tmp_path / "hook.log"
    for name in [m for m in sys.modules if m.startswith("kvd_fake_server")]:
        del sys.modules[name]


def _log(event: str, detail: str) -> None:
    hook_log.append(LOG_ENV, event, detail)


def _import_with_sglang_hook(monkeypatch: pytest.MonkeyPatch, role: str, path: Path) -> ModuleType:
    from kvdoctor.engines.sglang import server_hooks

    monkeypatch.setenv(fault_file.FAULT_FILE_ENV, fault_file.env_value(role, path))
    server_hooks.install()  # the site hook's own start-up: an AfterImport on sys.meta_path
    import importlib

    return importlib.import_module(FAKE)


def test_the_site_hook_wraps_the_target_once_its_module_runs_and_logs_each_firing(
    tmp_path: Path, fake_server: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _import_with_sglang_hook(monkeypatch, "single", write(tmp_path, DOUBLE))
    engine = module.Engine()
    assert engine.step(3) == 8  # the fault: 2 * (3 + 1)
    assert engine.step(0) == 1  # unchanged: the original's answer
    assert engine.decode(5) == 5  # a prefill wrap is not installed on a single server
    log = hook_log.read(fake_server)
    assert log.details("fault-installed") == ["my_fault kvd_fake_server.engine:Engine.step single"]
    assert log.details("fault-fired") == ["my_fault kvd_fake_server.engine:Engine.step single x=3"]
    assert log.details("fault-unchanged") == [
        "my_fault kvd_fake_server.engine:Engine.step single nothing to double at zero"
    ]
    assert log.first("fault-file-loaded", "fault-refused", "fault-unresolved", "hook-failed").startswith(
        "my_fault role=single wraps=1 "
    )


def test_disarmed_the_original_runs_untouched_and_nothing_is_logged(
    tmp_path: Path, fake_server: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    armed = tmp_path / "armed"
    arming.disarm(armed)
    monkeypatch.setenv(arming.ARM_ENV, str(armed))
    engine = _import_with_sglang_hook(monkeypatch, "single", write(tmp_path, DOUBLE)).Engine()
    assert engine.step(3) == 4
    arming.arm(armed, "my_fault")
    assert engine.step(3) == 8
    arming.disarm(armed)
    assert engine.step(3) == 4
    assert hook_log.read(fake_server).count("fault-fired", "fault-unchanged") == 1


def test_any_role_static_methods_and_a_raising_fault(
    tmp_path: Path, fake_server: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        """
        from kvdoctor.engines import faultkit

        @faultkit.wrap("kvd_fake_server.engine:Engine.helper", role="any")
        def loud(original, x):
            raise RuntimeError(f"replayed crash at {x}")
        """,
    )
    engine = _import_with_sglang_hook(monkeypatch, "decode", path).Engine
    with pytest.raises(RuntimeError, match="replayed crash at 2"):
        engine.helper(2)  # still a static method: no self passed
    assert hook_log.read(fake_server).details("fault-fired") == [
        "my_fault kvd_fake_server.engine:Engine.helper any raised RuntimeError: replayed crash at 2"
    ]


def test_a_wrong_attribute_or_module_is_logged_inside_the_server_never_raised(
    tmp_path: Path, fake_server: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        """
        from kvdoctor.engines import faultkit

        @faultkit.wrap("kvd_fake_server.engine:Engine.no_such_method", role="single")
        def a(original, *args):
            return original(*args)

        @faultkit.wrap("kvd_fake_server.no_such_module:f", role="single")
        def b(original, *args):
            return original(*args)
        """,
    )
    module = _import_with_sglang_hook(monkeypatch, "single", path)
    assert module.Engine().step(1) == 2  # the server imports and runs on
    log = hook_log.read(fake_server)
    assert log.details("fault-refused")[0].startswith(
        "my_fault kvd_fake_server.engine:Engine.no_such_method single: AttributeError"
    )
    assert log.details("fault-unresolved") == [
        "my_fault kvd_fake_server.no_such_module:f single: no module named 'kvd_fake_server.no_such_module' on this "
        "server's path"
    ]


def test_a_file_that_cannot_be_read_in_the_server_is_logged_not_raised(
    tmp_path: Path, fake_server: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "x = 1\n")
    monkeypatch.setenv(fault_file.FAULT_FILE_ENV, fault_file.env_value("single", path))
    assert fault_file.hooks_from_env(_log) == {}
    assert hook_log.read(fake_server).details("fault-refused")[0].startswith("my_fault: ")


def test_the_vllm_plugin_installs_the_file_now_or_after_import(
    tmp_path: Path, fake_server: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvdoctor.engines.vllm import server_plugin

    monkeypatch.setenv(server_plugin.LOG_ENV, str(fake_server))
    monkeypatch.delenv(server_plugin.INJECT_ENV, raising=False)
    monkeypatch.setenv(fault_file.FAULT_FILE_ENV, fault_file.env_value("single", write(tmp_path, DOUBLE)))
    server_plugin.register()  # before the module is imported: an import hook
    import importlib

    assert importlib.import_module(FAKE).Engine().step(1) == 4
    server_plugin.register()  # a second call (the module imported now): wrapped once, not twice
    assert importlib.import_module(FAKE).Engine().step(1) == 4
    log = hook_log.read(fake_server)
    assert log.count("fault-installed") == 1 and log.count("fault-fired") == 2


def test_a_typo_under_a_namespace_package_is_found_without_importing_it(
    tmp_path: Path, fake_server: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "site" / "kvd_fake_server" / "srt"  # a namespace package (no __init__.py), as sglang.srt is
    root.mkdir()
    (root / "scheduler.py").write_text("x = 1\n", encoding="utf-8")
    assert fault_file._unresolved("kvd_fake_server.srt.scheduler") is None
    assert fault_file._unresolved("kvd_fake_server.srt.schedular") == (
        "no module named 'kvd_fake_server.srt.schedular' on this server's path"
    )
    assert (
        fault_file._unresolved("kvd_fake_server.srt.scheduler.x") == "'kvd_fake_server.srt.scheduler' is not a package"
    )
    assert "kvd_fake_server" not in sys.modules  # looked up, never imported


def test_a_kvdoctor_failure_while_installing_never_breaks_the_servers_other_hooks(
    tmp_path: Path, fake_server: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(module: str) -> str | None:
        raise KeyError(module)

    monkeypatch.setattr(fault_file, "_unresolved", broken)
    monkeypatch.setenv(fault_file.FAULT_FILE_ENV, fault_file.env_value("single", write(tmp_path, DOUBLE)))
    assert fault_file.hooks_from_env(_log) == {}
    assert hook_log.read(fake_server).details("fault-refused") == ["my_fault: KeyError: 'kvd_fake_server.engine'"]
