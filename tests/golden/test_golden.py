"""Golden outputs: every case in cases.py, run as a user runs it, must print exactly its stored file.

Each case runs ``sys.executable -m kvdoctor ARGV`` in a subprocess, in a fresh scratch directory (its cwd),
with a fixed environment (COLUMNS=120 unless the case says otherwise, NO_COLOR=1, TERM=dumb,
LC_ALL=C.UTF-8, HOME and the caches inside the scratch directory, this checkout first on PYTHONPATH). The
exit code, stdout, stderr and every file the command wrote (JUnit, step summary, pd-eval's result.json)
go into one text file, after normalise.py has replaced what is volatile (timings, timestamps, paths,
free ports), and are compared with ``tests/golden/outputs/<id>.txt``; a mismatch shows a unified diff.

To (re)write the stored files, run the suite with ``KVDOCTOR_GOLDEN_UPDATE=1``:

    KVDOCTOR_GOLDEN_UPDATE=1 python3 -m pytest -q tests/golden
    KVDOCTOR_GOLDEN_UPDATE=1 PYTHONPATH=$PWD .venv-sglang/bin/python -m pytest -q -m sglang tests/golden

then read the diff (``git diff tests/golden/outputs``) before committing it. The "sglang" cases are marked
``sglang`` and run only where SGLang is importable (tests/engines/conftest.py's gate).
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

import kvdoctor
from tests.golden.cases import CASES, Case
from tests.golden.normalise import Normaliser, path_placeholders

REPO = Path(__file__).resolve().parents[2]
OUTPUTS = Path(__file__).resolve().parent / "outputs"
UPDATE = os.environ.get("KVDOCTOR_GOLDEN_UPDATE") == "1"
HAVE_SGLANG = importlib.util.find_spec("sglang") is not None
TIMEOUT_S = {"main": 120, "sglang": 600}
BASE_ENV = {"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb", "LC_ALL": "C.UTF-8"}
PASSED_THROUGH = ("PATH", "TRITON_INTERPRET")  # nothing else of the caller's environment reaches a case
# Cases run two at a time (the 2-core CI machine: the main run then takes about half its serial time); each
# is its own process in its own scratch directory, so they share nothing but the CPU.
WORKERS = 2
Runs = dict[str, "Future[str]"]


def _fixture_dirs() -> list[Path]:
    dirs = [REPO / "fixtures"]
    spec = importlib.util.find_spec("kvdoctor_fixtures")
    if spec is not None and spec.submodule_search_locations:
        dirs += [Path(p) for p in spec.submodule_search_locations]
    return dirs


def _env(case: Case, scratch: Path) -> dict[str, str]:
    home = scratch / "home"
    env = {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}
    env |= BASE_ENV
    env |= {
        "PYTHONPATH": str(REPO),  # this checkout's kvdoctor, whatever is installed
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "HF_HOME": str(home / ".cache" / "huggingface"),  # no Hub repo is "in the local cache"
    }
    env |= {name: value.replace("{scratch}", str(scratch)) for name, value in case.env.items()}
    return env


def _section(name: str, text: str) -> str:
    if not text:
        return f"# {name} (empty)\n"
    if not text.endswith("\n"):
        return f"# {name} (no newline at end)\n{text}\n"
    return f"# {name}\n{text}"


def run_case(case: Case, scratch: Path) -> str:
    """Run one case in ``scratch`` and render its normalised outputs as the stored file's text."""
    (scratch / "home").mkdir(parents=True)
    for name, content in case.files.items():
        (scratch / name).write_text(content, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "kvdoctor", *case.argv],
        cwd=scratch,
        env=_env(case, scratch),
        capture_output=True,
        encoding="utf-8",
        timeout=TIMEOUT_S[case.runs_in],
        check=False,
    )
    prefix = Path(sys.prefix) if sys.prefix != sys.base_prefix else None
    norm = Normaliser(path_placeholders(scratch, REPO, _fixture_dirs(), prefix), kvdoctor.__version__)
    parts = [
        f"# kvdoctor golden output: {case.id} (tests/golden/cases.py)\n",
        f"# argv: {shlex.join(['kvdoctor', *case.argv])}\n",
        *(f"# env: {name}={value}\n" for name, value in sorted(case.env.items())),
        f"# exit: {proc.returncode}\n",
        _section("stdout", norm(proc.stdout)),
        _section("stderr", norm(proc.stderr)),
    ]
    for path in sorted(p for p in scratch.rglob("*") if p.is_file()):
        rel = path.relative_to(scratch).as_posix()
        if rel.startswith("home/"):
            continue
        data = path.read_bytes()
        if case.files.get(rel, "").encode() == data:
            continue  # an input the command left alone
        try:
            body = norm(data.decode())
        except UnicodeDecodeError:
            body = f"<{len(data)} bytes, not text>\n"
        parts.append(_section(f"file: {norm(rel)}", body))
    return "".join(parts)


def _params() -> list[object]:
    params = []
    for case in CASES:
        marks = []
        if case.runs_in == "sglang":
            marks.append(pytest.mark.sglang)
        if case.without_sglang:
            marks.append(pytest.mark.skipif(HAVE_SGLANG, reason="shows what a machine without SGLang says"))
        params.append(pytest.param(case, id=case.id, marks=marks))
    return params


def test_case_ids_are_unique_and_file_name_safe() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))
    assert all(c.isalnum() or c in "-._" for case_id in ids for c in case_id)


def test_every_stored_output_belongs_to_a_case() -> None:
    """A case renamed or removed leaves no stale file that nothing compares any more."""
    stored = {path.stem for path in OUTPUTS.glob("*.txt")}
    assert stored <= {case.id for case in CASES}


def _will_run(item: pytest.Item) -> bool:
    """A selected golden case that no skip marker (the SGLang gate, ``without_sglang``) turns off."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or not isinstance(callspec.params.get("case"), Case):
        return False
    if item.get_closest_marker("skip") is not None:
        return False
    return not any(mark.args and mark.args[0] for mark in item.iter_markers("skipif"))


@pytest.fixture(scope="session")
def running(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """Every selected case, started at once on WORKERS threads (each a subprocess), in test order."""
    cases = [item.callspec.params["case"] for item in request.session.items if _will_run(item)]
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        runs = {case.id: pool.submit(run_case, case, tmp_path_factory.mktemp(case.id) / "scratch") for case in cases}
        yield runs
        for run in runs.values():
            run.cancel()


@pytest.mark.parametrize("case", _params())
def test_golden(case: Case, running: Runs) -> None:
    actual = running[case.id].result()
    stored = OUTPUTS / f"{case.id}.txt"
    if UPDATE:
        OUTPUTS.mkdir(exist_ok=True)
        stored.write_text(actual, encoding="utf-8")
        return
    assert stored.exists(), f"no stored output for {case.id}: run with KVDOCTOR_GOLDEN_UPDATE=1"
    expected = stored.read_text(encoding="utf-8")
    if actual != expected:
        diff = difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            fromfile=f"tests/golden/outputs/{case.id}.txt",
            tofile=f"{case.id} (this run)",
        )
        pytest.fail("output differs from the golden file:\n" + "".join(diff), pytrace=False)
