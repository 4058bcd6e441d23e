"""The space file's published schema (``kvdoctor schema sweep-space``) and its reader agree: what one accepts the
other accepts, what one refuses the other refuses (the reader's refusal one line, exit 2)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from kvdoctor._exceptions import InputError
from kvdoctor.schemas import space_schema
from kvdoctor.sweep.space import read_toml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

GOOD = """server = "sglang"

[[factor]]
flag = "--page-size"
values = [1, 16]
default = 1
why = "the KV page"

[[factor]]
flag = "--mamba-ssm-dtype"
values = ["float32", "bfloat16"]
shared = true
"""
BAD = {
    "unknown top key": GOOD + "\nextra = 1\n",
    "one value": GOOD.replace("values = [1, 16]", "values = [1]"),
    "no dashes": GOOD.replace('flag = "--page-size"', 'flag = "page-size"'),
    "unknown factor key": GOOD.replace('why = "the KV page"', 'why = "the KV page"\nweight = 2'),
    "bad topology": GOOD.replace('why = "the KV page"', 'why = "the KV page"\ntopology = "both"'),
    "shared not a bool": GOOD.replace("shared = true", 'shared = "yes"'),
    "a value twice": GOOD.replace("values = [1, 16]", "values = [16, 16]"),
    "no server": GOOD.replace('server = "sglang"\n', ""),
}


def _validator() -> Draft202012Validator:
    Draft202012Validator.check_schema(space_schema())
    return Draft202012Validator(space_schema())


def test_a_good_space_is_valid_and_read(tmp_path: Path) -> None:
    path = tmp_path / "space.toml"
    path.write_text(GOOD, encoding="utf-8")
    assert _validator().is_valid(tomllib.loads(GOOD))
    space = read_toml(path)
    assert [f.flag for f in space.factors] == ["--page-size", "--mamba-ssm-dtype"]
    assert space.factors[1].shared and space.factors[1].default is None


@pytest.mark.parametrize("name", sorted(BAD))
def test_what_the_schema_refuses_the_reader_refuses(name: str, tmp_path: Path) -> None:
    text = BAD[name]
    path = tmp_path / "space.toml"
    path.write_text(text, encoding="utf-8")
    assert not _validator().is_valid(tomllib.loads(text)), name
    with pytest.raises(InputError) as refused:
        read_toml(path)
    assert str(path) in str(refused.value) and "\n" not in str(refused.value)
