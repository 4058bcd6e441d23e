"""The cyclic collector while kvdoctor starts (``kvdoctor.cli.app``: ``pause_gc`` / ``resume_gc``).

``main()`` pauses it for the start-up (issue 17: a fifth of inspect's own start-up CPU went to collections
over objects that live as long as the process). A command that is not short gets it back as soon as it is
looked up, before its body runs, so a long run (roundtrip, a server, an installed engine) collects as usual;
inspect's rule model runs paused; ``main()`` gives it back on every way out.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest

from kvdoctor.cli import app as cli_app
from kvdoctor.cli.render.sglang import SglangInspectRun


@pytest.fixture
def resumed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Each call of resume_gc while main() runs: whether the collector was paused then."""
    calls: list[bool] = []
    real = cli_app.resume_gc

    def spy() -> None:
        calls.append(not gc.isenabled())
        real()

    monkeypatch.setattr(cli_app, "resume_gc", spy)
    assert gc.isenabled()
    yield calls
    assert gc.isenabled()  # main() gave it back


def _main(monkeypatch: pytest.MonkeyPatch, *argv: str) -> object:
    monkeypatch.setattr(sys, "argv", ["kvdoctor", *argv])
    with pytest.raises(SystemExit) as exited:
        cli_app.main()
    return exited.value.code


def test_inspect_runs_paused_and_main_gives_the_collector_back(
    monkeypatch: pytest.MonkeyPatch, resumed: list[bool]
) -> None:
    seen: list[bool] = []
    work = SglangInspectRun.work

    def watched(self: SglangInspectRun) -> object:
        seen.append(gc.isenabled())
        return work(self)

    monkeypatch.setattr(SglangInspectRun, "work", watched)
    assert _main(monkeypatch, "inspect", "inkling-small", "--json") == 0
    assert seen == [False]  # the rule model's work: paused
    assert resumed == [True]  # once, from main()'s way out


def test_a_command_that_is_not_short_gets_the_collector_back_before_its_body(
    monkeypatch: pytest.MonkeyPatch, resumed: list[bool]
) -> None:
    assert _main(monkeypatch, "schema", "--help") == 0
    assert resumed == [True, False]  # when `schema` was looked up; main()'s way out found it running


def test_inspect_for_an_installed_engine_gets_it_back(monkeypatch: pytest.MonkeyPatch, resumed: list[bool]) -> None:
    _main(monkeypatch, "inspect", "inkling-small", "--engine", "sglang", "--json")  # exit 0, or 3 without SGLang
    assert resumed[0] is True and len(resumed) == 2  # before the engine is asked


def test_main_gives_it_back_after_an_error(monkeypatch: pytest.MonkeyPatch, resumed: list[bool]) -> None:
    assert _main(monkeypatch, "inspect", "no-such-model-anywhere") == 2
    assert resumed == [True]


def test_the_process_entry_freezes_what_is_alive_once_main_has_finished(monkeypatch: pytest.MonkeyPatch) -> None:
    """run() (the console script, ``python -m kvdoctor``) freezes on the way out, after main()'s work and with
    main()'s exit code; the spy stands in for gc.freeze so the test process's own collector is left alone."""
    froze: list[bool] = []  # whether main() had given the collector back when run() froze
    monkeypatch.setattr(cli_app.gc, "freeze", lambda: froze.append(gc.isenabled()))
    monkeypatch.setattr(sys, "argv", ["kvdoctor", "inspect", "no-such-model-anywhere"])
    with pytest.raises(SystemExit) as exited:
        cli_app.run()
    assert exited.value.code == 2
    assert froze == [True]


def test_the_process_entry_never_freezes_a_command_that_resumed_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command that is not short (torch, Triton, an installed server) shuts down as Python would: Triton's
    nanobind reports every extension object still alive at exit as leaked."""
    froze: list[None] = []
    monkeypatch.setattr(cli_app.gc, "freeze", lambda: froze.append(None))
    monkeypatch.setattr(sys, "argv", ["kvdoctor", "schema", "--help"])
    with pytest.raises(SystemExit) as exited:
        cli_app.run()
    assert exited.value.code == 0
    assert froze == []


def test_main_alone_never_freezes(monkeypatch: pytest.MonkeyPatch) -> None:
    froze: list[None] = []
    monkeypatch.setattr(cli_app.gc, "freeze", lambda: froze.append(None))
    assert _main(monkeypatch, "inspect", "inkling-small", "--json") == 0
    assert froze == []


def test_both_process_entries_are_run() -> None:
    """The console script and ``python -m kvdoctor`` start through run(), not main()."""
    import ast
    from pathlib import Path

    import tomllib

    root = Path(cli_app.__file__).resolve().parents[2]
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kvdoctor"] == "kvdoctor.cli.app:run"
    module = ast.parse((root / "kvdoctor" / "__main__.py").read_text())
    calls = [n.func.id for n in ast.walk(module) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert calls == ["run"]
