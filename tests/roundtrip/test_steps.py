"""The round trip's one step sequence (``kvdoctor.roundtrip.steps.run_steps``), which both engines walk."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from kvdoctor.roundtrip.steps import StepNames, run_steps

NAMES = StepNames(build="build", offload="out {rid}", restore="in {rid}")


class Recorder:
    """A driver that records each step it is asked to run (and can fail at one)."""

    names = NAMES

    def __init__(self, fail_at: str | None = None) -> None:
        self.calls: list[str] = []
        self.fail_at = fail_at

    def _step(self, name: str) -> None:
        self.calls.append(name)
        if name == self.fail_at:
            raise RuntimeError(name)

    def build(self) -> None:
        self._step("build")

    @contextlib.contextmanager
    def instrumented(self) -> Iterator[None]:
        self.calls.append("install")
        try:
            yield
        finally:
            self.calls.append("uninstall")

    def fill(self) -> None:
        self._step("fill")

    def offload(self, rid: int) -> None:
        self._step(f"offload {rid}")

    def reuse(self) -> None:
        self._step("reuse")

    def restore(self, rid: int) -> None:
        self._step(f"restore {rid}")

    def restored(self) -> None:
        self._step("restored")

    def diff(self) -> str:  # type: ignore[override]
        self._step("diff")
        return "verdict"


def test_the_steps_run_in_the_protocols_order_and_report_as_they_start() -> None:
    seen: list[tuple[str, int, int]] = []
    driver = Recorder()
    assert run_steps(driver, [3, 5], lambda what, done, total: seen.append((what, done, total))) == "verdict"
    assert driver.calls == [
        "build",
        "install",
        "fill",
        "offload 3",
        "offload 5",
        "reuse",
        "restore 3",
        "restore 5",
        "restored",
        "uninstall",
        "diff",
    ]
    assert seen == [
        ("build", 0, 8),
        ("fill requests", 1, 8),
        ("out 3", 2, 8),
        ("out 5", 3, 8),
        ("intruders reuse the freed slots", 4, 8),
        ("in 3", 5, 8),
        ("in 5", 6, 8),
        ("diff every component", 7, 8),
        ("done", 8, 8),
    ]


def test_a_step_that_fails_still_removes_the_engines_wrappers() -> None:
    driver = Recorder(fail_at="restore 3")
    with pytest.raises(RuntimeError, match="restore 3"):
        run_steps(driver, [3], lambda *_: None)
    assert driver.calls[-2:] == ["restore 3", "uninstall"]  # nothing after the failure but the clean-up
