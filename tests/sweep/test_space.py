"""A sweep's space: launch words that name only what differs from the defaults, and a user's TOML held to the
server's own flag table (one line, exit 2, naming the file and the factor)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdoctor._exceptions import FlagError, InputError
from kvdoctor.core.sglang._generated.server_flags import SGLANG_FLAG_VALUES, SGLANG_SERVER_FLAGS
from kvdoctor.sweep.space import Factor, Space, read_toml

OVERLAP = Factor("--disable-overlap-schedule", (False, True), False, "the overlap schedule's decode loop")
PAGE = Factor("--page-size", (1, 16), 1)
BACKUP = Factor("--disaggregation-decode-retraction-backup", ("cpu_tensor", "host_pool"), "cpu_tensor", topology="pd")
SPACE = Space("sglang", (OVERLAP, PAGE, BACKUP))


def test_launch_words_name_only_what_differs_from_the_defaults() -> None:
    cell = SPACE.configuration({"--disable-overlap-schedule": True, "--page-size": 16})
    assert cell.argv(SPACE) == ("--disable-overlap-schedule", "--page-size", "16")
    assert cell.changed(SPACE) == ("--disable-overlap-schedule", "--page-size")
    assert SPACE.defaults().argv(SPACE) == ()
    assert cell.with_defaults(SPACE, ["--page-size"]).argv(SPACE) == ("--page-size", "16")


def test_a_default_left_out_is_the_flag_left_out() -> None:
    chunk = Factor("--chunked-prefill-size", (64, 512))
    space = Space("sglang", (chunk,))
    assert space.defaults().argv(space) == () and space.defaults().label(space) == "defaults"
    assert space.configuration({"--chunked-prefill-size": 64}).argv(space) == ("--chunked-prefill-size", "64")


def test_a_pd_only_flag_leaves_a_single_servers_space() -> None:
    assert [f.flag for f in SPACE.for_topology("single").factors] == ["--disable-overlap-schedule", "--page-size"]
    assert SPACE.for_topology("pd").factors == SPACE.factors


def _check(space: Space) -> None:
    space.check(SGLANG_FLAG_VALUES.get, SGLANG_SERVER_FLAGS.__contains__)


def test_the_built_in_factors_are_sglangs_own_flags_and_values() -> None:
    _check(SPACE)


@pytest.mark.parametrize(
    ("factor", "message"),
    [
        (Factor("--page-sise", (1, 2), 1), "--page-sise is not a sglang server flag"),
        (Factor("--page-size", ("one", 2), 1), "invalid int value: 'one'"),
        (Factor("--disaggregation-decode-retraction-backup", ("disk", "none"), "none"), "invalid choice: 'disk'"),
    ],
)
def test_a_flag_or_value_the_server_refuses_is_refused(factor: Factor, message: str) -> None:
    with pytest.raises(FlagError, match=message):
        _check(Space("sglang", (factor,), "space.toml"))


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.toml"
    path.write_text(text)
    return path


def test_a_users_space_reads_as_written(tmp_path: Path) -> None:
    path = _toml(
        tmp_path,
        'server = "sglang"\n'
        '[[factor]]\nflag = "--page-size"\nvalues = [1, 16]\ndefault = 1\nwhy = "pages"\n'
        '[[factor]]\nflag = "--disable-overlap-schedule"\nvalues = [false, true]\ndefault = false\n'
        '[[factor]]\nflag = "--disaggregation-decode-retraction-backup"\nvalues = ["cpu_tensor", "host_pool"]\n'
        'default = "cpu_tensor"\ntopology = "pd"\n',
    )
    space = read_toml(path)
    assert space.server == "sglang" and space.source == str(path)
    assert space.factors == (Factor("--page-size", (1, 16), 1, "pages"), Factor(*OVERLAP_FIELDS), BACKUP)
    _check(space)


OVERLAP_FIELDS = ("--disable-overlap-schedule", (False, True), False)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("server = ", "not TOML"),
        ('server = "sglang"\n', "no \\[\\[factor\\]\\] tables"),
        ("[[factor]]\nflag='--page-size'\nvalues=[1,2]\ndefault=1\n", "server must name the server"),
        ('server="sglang"\nspeed=1\n[[factor]]\n', "unknown key 'speed'"),
        ('server="sglang"\n[[factor]]\nflag="page-size"\nvalues=[1,2]\ndefault=1\n', "factor 1: flag must be"),
        ('server="sglang"\n[[factor]]\nflag="--page-size"\nvalues=[1]\ndefault=1\n', "at least two values"),
        ('server="sglang"\n[[factor]]\nflag="--page-size"\nvalues=[1,1]\ndefault=1\n', "listed twice"),
        ('server="sglang"\n[[factor]]\nflag="--page-size"\nvalues=[1,2]\ndefault=1\ncolor=1\n', "unknown key 'color'"),
        ('server="sglang"\n[[factor]]\nflag="--page-size"\nvalues=[1,[2]]\ndefault=1\n', "a value is a string"),
        (
            'server="sglang"\n[[factor]]\nflag="--page-size"\nvalues=[1,2]\ndefault=1\ntopology="ring"\n',
            "topology is one of pd, single",
        ),
        (
            'server="sglang"\n' + '[[factor]]\nflag="--page-size"\nvalues=[1,2]\ndefault=1\n' * 2,
            "--page-size is listed twice",
        ),
    ],
)
def test_a_malformed_space_is_one_line_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = _toml(tmp_path, text)
    with pytest.raises(InputError, match=message) as caught:
        read_toml(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value).strip()


def test_a_missing_or_binary_space_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="No such file"):
        read_toml(tmp_path / "absent.toml")
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InputError, match="not UTF-8"):
        read_toml(tmp_path / "bin.toml")


def test_a_switch_whose_default_is_decided_at_start_up_is_tried_on_off_and_left_out() -> None:
    f = Factor("--async-scheduling", (False, True), None)
    assert f.switch and f.words(True) == ("--async-scheduling",) and f.words(False) == ("--no-async-scheduling",)
    assert f.words(None) == ()
    assert Factor("--enable-mixed-chunk", (False, True), False).words(False) == ()
    space = Space("sglang", (Factor("--enable-mixed-chunk", (False, True), None),), "x.toml")
    with pytest.raises(FlagError, match="has no --no-enable-mixed-chunk: give default = false"):
        space.check(lambda flag: None, lambda flag: flag == "--enable-mixed-chunk")
