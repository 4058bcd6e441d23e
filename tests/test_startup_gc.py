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
from kvdoctor.cli.inspect_cmd import SglangInspectRun


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
