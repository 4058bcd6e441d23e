"""``inspect_result``'s --engine sglang types are made on first use, and are then ordinary top-level classes."""

from __future__ import annotations

import pickle
import subprocess
import sys
import typing

import pytest


def test_importing_the_result_makes_none_of_them() -> None:
    code = (
        "from kvdoctor.core.sglang import inspect_result as r\n"
        "print([n for n in r.ENGINE_ANSWER_TYPES if n in vars(r)])\n"
        "from kvdoctor.core.sglang.inspect_result import FieldDrift\n"
        "print(sorted(n for n in r.ENGINE_ANSWER_TYPES if n in vars(r)) == sorted(r.ENGINE_ANSWER_TYPES))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines() == ["[]", "True"]  # none before the first read; all of them after it


def test_once_made_they_read_as_top_level_classes_of_this_module() -> None:
    from kvdoctor.core.engine_ref import EngineRef
    from kvdoctor.core.sglang import inspect_result as r
    from kvdoctor.core.sglang.inspect_result import FieldDrift, InspectBesideReport, LiveRefusal, SglangAnswers

    assert r.FieldDrift is FieldDrift and r.__getattr__("FieldDrift") is FieldDrift  # made once, not per read
    for name in r.ENGINE_ANSWER_TYPES:
        cls = getattr(r, name)
        assert (cls.__module__, cls.__qualname__) == (r.__name__, name)
        assert name in r.__all__
    drift = FieldDrift("kv_pool", "SWAKVPool", "MHATokenToKVPool")
    assert repr(drift) == "FieldDrift(field='kv_pool', kvdoctor='SWAKVPool', sglang='MHATokenToKVPool')"
    assert pickle.loads(pickle.dumps(drift)) == drift and hash(drift) == hash(FieldDrift(*drift.__dict__.values()))
    assert issubclass(InspectBesideReport, r.InspectReport)
    hints = typing.get_type_hints(SglangAnswers)
    assert hints["engine"] is EngineRef and hints["refusal"] == LiveRefusal | None


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    from kvdoctor.core.sglang import inspect_result as r

    with pytest.raises(AttributeError, match="has no attribute 'EngineFacts'"):
        r.EngineFacts  # noqa: B018
    with pytest.raises(ImportError):
        from kvdoctor.core.sglang.inspect_result import Nope  # noqa: F401
