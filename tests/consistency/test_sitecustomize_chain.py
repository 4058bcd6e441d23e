"""kvdoctor's site hook (first on a PD server's PYTHONPATH) runs the user's own ``sitecustomize`` after its hooks,
the one Python would have run without kvdoctor, so single and PD servers run the same user code (issue 28, 13)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor.engines.sglang import live_faults

HOOK_DIR = Path(live_faults.__file__).parent / "site_hook"
USER_SITE = 'import os\nopen(os.environ["MARK"], "a").write(f"{os.getpid()} {__name__} {__file__}\\n")\n'
# What the started interpreter reports: which module is ``sitecustomize``, and whether kvdoctor's hooks are in.
PROBE = (
    "import sys; from kvdoctor.engines.sglang.server_hooks import AfterImport;"
    "m = sys.modules.get('sitecustomize');"
    "print(getattr(m, '__file__', None)); print(any(isinstance(f, AfterImport) for f in sys.meta_path))"
)


def _python(pythonpath: list[Path], tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    mark = tmp_path / "mark"
    mark.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, pythonpath)), "MARK": str(mark)}
    env["KVDOCTOR_PATCHES"] = "mooncake-host-indices"  # a hook to install, as on a PD prefill
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    return done, mark.read_text().splitlines() if mark.exists() else []


def test_the_users_sitecustomize_runs_after_kvdoctors_hooks(tmp_path: Path) -> None:
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text(USER_SITE)
    alone, marks_alone = _python([user], tmp_path)  # a single server: no kvdoctor hook on the path
    done, marks = _python([HOOK_DIR, user], tmp_path)  # a PD server: kvdoctor's directory first
    assert done.returncode == 0, done.stderr
    assert marks == [f"{marks[0].split()[0]} sitecustomize {user / 'sitecustomize.py'}"]  # ran once, as itself
    assert len(marks_alone) == 1
    module, hooked = done.stdout.split()
    assert module == alone.stdout.split()[0] == str(user / "sitecustomize.py")  # `import sitecustomize` is theirs
    assert hooked == "True"  # and kvdoctor's hooks are installed all the same


def test_without_a_sitecustomize_of_the_users_the_same_one_runs_as_without_kvdoctor(tmp_path: Path) -> None:
    """Nothing of the user's: whatever Python itself would run (a distribution's, or none) runs, once."""
    empty = tmp_path / "empty"
    empty.mkdir()
    alone, _ = _python([empty], tmp_path)
    done, _ = _python([HOOK_DIR, empty, HOOK_DIR], tmp_path)  # listed twice: no loop back into kvdoctor's own
    assert done.returncode == 0, done.stderr
    expected = alone.stdout.split()[0]
    module, hooked = done.stdout.split()
    assert hooked == "True" and module == (expected if expected != "None" else str(HOOK_DIR / "sitecustomize.py"))


@pytest.mark.parametrize("with_kvdoctor", [False, True])
def test_a_failing_sitecustomize_of_the_users_fails_as_it_would_without_kvdoctor(
    tmp_path: Path, with_kvdoctor: bool
) -> None:
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("raise ValueError('the user broke it')\n")
    done, _ = _python([HOOK_DIR, user] if with_kvdoctor else [user], tmp_path)
    assert done.returncode == 0  # Python goes on, as it does without kvdoctor
    assert "Error in sitecustomize" in done.stderr and "ValueError: the user broke it" in done.stderr
    assert done.stdout.split()[1] == str(with_kvdoctor)
