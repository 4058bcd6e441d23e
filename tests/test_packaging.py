"""Every folder of Python modules under kvdoctor/ ships in a non-editable install.

pyproject.toml lists its packages by hand (``fixtures/`` installs under another name, which find() cannot
express), so a folder the list forgets installs nothing from a wheel: an ImportError that an editable
checkout never shows. Issue 17's move added five such folders.
"""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _listed() -> set[str]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return set(tomllib.load(f)["tool"]["setuptools"]["packages"])


def test_every_folder_of_modules_is_a_listed_package() -> None:
    folders = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for path in (ROOT / "kvdoctor").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert folders - _listed() == set(), "add these to [tool.setuptools] packages in pyproject.toml"


def test_every_listed_package_is_a_folder() -> None:
    renamed = {"kvdoctor_fixtures": "fixtures"}
    missing = {p for p in _listed() if not (ROOT / renamed.get(p, p.replace(".", "/"))).is_dir()}
    assert missing == set()
