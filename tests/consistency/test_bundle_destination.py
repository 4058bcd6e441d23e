"""``--bundle DIR`` refused before anything launches (exit 2, one line) wherever no bundle could land (issue 43,
defect 15): a folder nothing can be created in, a symbolic link, a run that never writes a bundle (``--inject``,
``--fault-file``, another server); a copy that still fails after the run leaves the run directory's bundle."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.api._consistency import ConsistencyJob
from kvdoctor.consistency import bundle
from kvdoctor.consistency.prepared import ConsistencyOptions
from tests.consistency.test_bundle import _write


def _refused(dest: Path, match: str, **kw: object) -> str:
    with pytest.raises(InputError, match=match) as caught:
        bundle.check_destination(dest, **kw)  # type: ignore[arg-type]
    said = str(caught.value)
    assert "\n" not in said and said.startswith(f"--bundle {dest}"), said
    return said


def test_a_parent_nothing_can_be_created_in_is_refused(tmp_path: Path) -> None:
    """/proc: root may write anywhere os.access asks about, yet nothing can be created there."""
    _refused(Path("/proc/kvdoctor-bundle"), r"no folder can be created in its parent /proc \(")
    afile = tmp_path / "a-file"
    afile.write_text("x")
    _refused(afile / "bundle", "its parent .*a-file is not a folder")
    _refused(tmp_path / "missing" / "b", "parent folder .* does not exist")
    assert [p.name for p in tmp_path.iterdir()] == ["a-file"]  # the probe left nothing behind


@pytest.mark.skipif(os.geteuid() == 0, reason="root creates folders in a chmod 555 folder")
def test_a_read_only_parent_is_refused(tmp_path: Path) -> None:
    parent = tmp_path / "ro"
    parent.mkdir(mode=0o555)
    try:
        _refused(parent / "b", "no folder can be created in its parent")
    finally:
        parent.chmod(0o755)


def test_a_symbolic_link_is_refused_even_to_an_empty_folder(tmp_path: Path) -> None:
    """The bundle replaces its folder whole (rename): over a link it would replace the link, not fill its target;
    the run used to end with the bundle lost and a warning."""
    target = tmp_path / "empty"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    said = _refused(link, "is a symbolic link")
    assert str(target) in said and "give the folder itself" in said
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    _refused(dangling, "is a symbolic link")
    bundle.check_destination(target)  # the folder itself is fine


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"inject": "drop-kv"}, "with --inject drop-kv: such a run never gets a bundle"),
        ({"fault_file": Path("my_fault.py")}, "with --fault-file my_fault.py: such a run never gets a bundle"),
        ({"server": "vllm"}, "with --server vllm: a bundle reproduces SGLang runs only"),
    ],
)
def test_a_run_that_never_writes_a_bundle_is_refused(tmp_path: Path, kw: dict[str, object], said: str) -> None:
    _refused(tmp_path / "new", said, **kw)


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"inject": "drop-kv"}, "--inject drop-kv: such a run never gets a bundle"),
        ({"fault_file": Path("f.py")}, "--fault-file f.py: such a run never gets a bundle"),
        ({"bundle": Path("/proc/kvdoctor-bundle")}, "no folder can be created in its parent /proc"),
    ],
)
def test_the_job_refuses_before_any_work(tmp_path: Path, kw: dict[str, object], said: str) -> None:
    """kvdoctor consistency's (and kvdoctor.api.consistency's) preflight: before the run directory, the checkpoint
    or a launch (the CLI prints the InputError as its one line, exit 2)."""
    out = tmp_path / "out"
    o = ConsistencyOptions("llama-3.1-8b", shrink=True, output_dir=out, bundle=tmp_path / "dest")
    with pytest.raises(InputError, match=said):
        ConsistencyJob(replace(o, **kw)).preflight()  # type: ignore[arg-type]
    assert not out.exists() and not (tmp_path / "dest").exists()
    ConsistencyJob(o).preflight()  # the same run with --bundle alone goes ahead


def test_a_copy_that_fails_after_the_run_keeps_the_run_directory_s_bundle(tmp_path: Path) -> None:
    """--bundle was fine before launch; something filled it during the run: the run directory's bundle is named."""
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "meanwhile").write_text("x")
    written, _ = _write(tmp_path, copy_to=dest)
    assert written.path == tmp_path / "run" / "bundle" and (written.path / "run.py").exists()
    assert written.warning and "not copied to --bundle" in written.warning and "not an empty folder" in written.warning
    assert sorted(p.name for p in dest.iterdir()) == ["meanwhile"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".dest-")]  # no staging left
