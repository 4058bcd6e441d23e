"""kvdoctor's pytest plugin: a server project's own tests call kvdoctor, no subprocess of their own.

Registered under the ``pytest11`` entry point (``pytest -p kvdoctor`` names it; it loads wherever kvdoctor is
installed) and inert unless a test asks for it: importing it imports neither torch nor a server, and a test that
requests none of its fixtures sees nothing of it. What it gives::

    def test_lfm2_survives_pd_retraction(kvdoctor_consistency):
        assert kvdoctor_consistency("lfm2-1.2b", topology="pd", shrink=True).passed

- fixtures ``kvdoctor_consistency``, ``kvdoctor_roundtrip``, ``kvdoctor_inspect``, ``kvdoctor_replay`` and
  ``kvdoctor_pd_eval``: each is the :mod:`kvdoctor.api` function of its name, its run directory, JSON document and
  JUnit file in the test's ``tmp_path`` (``output_dir`` and ``junit_path`` may still be given);
- every report's JSON path and verdict attached to the test's JUnit case (its ``user_properties``:
  ``kvdoctor.<command>.report``, ``kvdoctor.<command>.verdict``) and, when the test fails, each report's
  ``explain()`` in its own ``kvdoctor`` section of the failure;
- a failed ``assert report.passed`` names the verdict and the first reason on one line (the report's ``repr``);
  :func:`kvdoctor.testing.check` fails the test with the whole ``explain()`` (the first divergence, the component,
  the server's file:line);
- markers: ``kvdoctor`` on every test that uses a fixture here, ``kvdoctor_server`` on those that launch a real
  server (``consistency``, ``replay``, ``pd_eval``): ``-m "not kvdoctor_server"`` keeps a quick run quick.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Fixture name -> (the kvdoctor.api function, whether it launches real servers).
FIXTURES: dict[str, tuple[str, bool]] = {
    "kvdoctor_consistency": ("consistency", True),
    "kvdoctor_roundtrip": ("roundtrip", False),
    "kvdoctor_inspect": ("inspect", False),
    "kvdoctor_replay": ("replay", True),
    "kvdoctor_pd_eval": ("pd_eval", True),
}
_REPORTS = pytest.StashKey[list[Any]]()  # the reports a test made, in order
_TAKES_OUTPUT_DIR = frozenset({"consistency", "replay", "pd_eval"})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kvdoctor: the test runs a kvdoctor check (set by kvdoctor's fixtures)")
    config.addinivalue_line(
        "markers", "kvdoctor_server: the test launches real inference servers through kvdoctor (minutes each)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = [name for name in getattr(item, "fixturenames", ()) if name in FIXTURES]
        if used:
            item.add_marker("kvdoctor")
        if any(FIXTURES[name][1] for name in used):
            item.add_marker("kvdoctor_server")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    made = item.stash.get(_REPORTS, [])
    if made and report.when == "call" and report.failed:
        text = "\n\n".join(r.explain() for r in made)
        report.sections.append(("kvdoctor", text))
    return report


def _runner(command: str, request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Any]:
    from importlib import import_module

    function = getattr(import_module("kvdoctor.api"), command)
    node = request.node
    made = node.stash.setdefault(_REPORTS, [])

    def run(*args: Any, **options: Any) -> Any:
        n = len(made) + 1
        stem = f"kvdoctor-{command.replace('_', '-')}-{n}"
        options.setdefault("junit_path", tmp_path / f"{stem}.xml")
        if command in _TAKES_OUTPUT_DIR:
            options.setdefault("output_dir", tmp_path / stem)
        published = function(*args, **options)
        made.append(published)
        document = tmp_path / f"{stem}.json"
        document.write_text(published.to_json(), encoding="utf-8")
        # As record_property adds them (without its warning under junit_family xunit2, which writes them too).
        node.user_properties.append((f"kvdoctor.{command}.report", str(document)))
        node.user_properties.append((f"kvdoctor.{command}.verdict", published.verdict.value))
        return published

    run.__doc__ = function.__doc__
    return run


@pytest.fixture
def kvdoctor_consistency(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Any]:
    """:func:`kvdoctor.api.consistency`, its run directory and reports in the test's ``tmp_path``."""
    return _runner("consistency", request, tmp_path)


@pytest.fixture
def kvdoctor_roundtrip(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Any]:
    """:func:`kvdoctor.api.roundtrip`, its reports in the test's ``tmp_path``."""
    return _runner("roundtrip", request, tmp_path)


@pytest.fixture
def kvdoctor_inspect(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Any]:
    """:func:`kvdoctor.api.inspect`, its reports in the test's ``tmp_path``."""
    return _runner("inspect", request, tmp_path)


@pytest.fixture
def kvdoctor_replay(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Any]:
    """:func:`kvdoctor.api.replay`, its run directories and reports in the test's ``tmp_path``."""
    return _runner("replay", request, tmp_path)


@pytest.fixture
def kvdoctor_pd_eval(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Any]:
    """:func:`kvdoctor.api.pd_eval`, its run directory and reports in the test's ``tmp_path``."""
    return _runner("pd_eval", request, tmp_path)
