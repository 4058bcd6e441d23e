"""The one fault registry (``kvdoctor.core.faults``): queries, one meaning per name, torch-free, and the old
fault tables read from it."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict

import pytest

from kvdoctor.core import bugs, faults
from kvdoctor.core.cite import Cite
from kvdoctor.core.faults import Fault, Needs, Role, StatePath, Target


def test_every_record_is_complete() -> None:
    for f in faults.faults():
        assert f.name and f.does and f.hooks, f
        assert all(isinstance(c, Cite) and c.server == f.server for c in f.hooks), f
        assert f.server in ("sglang", "vllm")
        assert set(f.replays) <= set(bugs.ids()), f  # each a public bug of the reference (kvdoctor.core.bugs)


def test_one_meaning_per_name() -> None:
    """A name on two records is one fault done in two places: same server, path and needs; on one server, an old
    spelling (``formerly``) is never another fault's name there."""
    by_name: dict[str, set[tuple[str, StatePath, Needs]]] = defaultdict(set)
    for f in faults.faults():
        by_name[f.name].add((f.server, f.path, f.needs))
    assert {n: m for n, m in by_name.items() if len(m) > 1} == {}
    for f in faults.faults():
        assert not set(f.formerly) & set(faults.names(server=f.server)), f


def test_drop_kv_is_sglang_s_and_vllm_s_fault_is_zero_kv() -> None:
    assert {(f.server, f.target) for f in faults.faults() if f.name == "drop-kv"} == {("sglang", Target.SERVER)}
    zero = faults.get("zero-kv")
    assert (zero.server, zero.path, zero.needs) == ("vllm", StatePath.PREEMPTION, Needs.KV)
    assert faults.renamed(server="vllm") == {"drop-kv": "zero-kv"} and faults.renamed(server="sglang") == {}


def test_counts_per_server_target_and_path() -> None:
    count = lambda **kw: len(faults.select(**kw))  # noqa: E731
    assert len(faults.faults()) == 37
    assert (count(server="sglang"), count(server="vllm")) == (27, 10)
    assert [count(target=t) for t in Target] == [7, 13, 17]
    assert {p.value: count(path=p) for p in StatePath if count(path=p)} == {
        "retraction": 21,
        "preemption": 2,
        "transfer": 2,
        "prefix-hit": 4,
        "offload": 7,
        "sliding-window": 1,
    }


def test_queries_filter_by_enum_or_value_and_get_refuses_an_ambiguous_name() -> None:
    assert faults.names(server="vllm", target="consistency") == ("zero-kv", "zero-state", "drop-prefix", "drop-offload")
    assert faults.names(server=faults.Server.VLLM, path=StatePath.PREFIX_HIT) == ("drop-prefix",)
    assert faults.names(server="sglang", path=StatePath.PREFIX_HIT) == (
        "blank-state-on-hit",
        "stale-state-on-hit",
        "unwritten-checkpoint",
    )
    assert faults.get("missing-mamba", target=Target.ENGINE).target is Target.ENGINE
    with pytest.raises(KeyError, match="3 faults 'missing-mamba' for sglang"):  # model, engine and live server
        faults.get("missing-mamba", server="sglang")
    with pytest.raises(KeyError, match=r"no fault 'drop-kv' for vllm engine-roundtrip \(choose one of drop-group"):
        faults.get("drop-kv", server="vllm", target=Target.ENGINE)
    assert faults.get("drop-kv", server="vllm").name == "zero-kv"  # the old spelling, on the server that had it
    assert faults.get("drop-kv", server="sglang").name == "drop-kv"
    with pytest.raises(KeyError, match="2 faults 'drop-kv' for any target"):
        faults.get("drop-kv")


def test_roles_say_where_each_target_runs() -> None:
    assert {f.role for f in faults.select(target=Target.MODEL)} == {Role.ANY}
    live = faults.select(server="sglang", target=Target.SERVER, path=StatePath.RETRACTION)
    assert {f.role for f in live} == {Role.DECODE}  # pd decode only
    transfer = faults.select(server="sglang", target=Target.SERVER, path=StatePath.TRANSFER)
    assert {f.name: f.role for f in transfer} == {"drop-pd-state": Role.PREFILL, "clear-pd-state": Role.DECODE}
    assert {f.role for f in faults.select(server="vllm", target=Target.SERVER)} == {Role.SINGLE}


def test_a_registered_server_is_listed_after_the_rooms_and_filtered_by_name() -> None:
    hook = Cite("tiny", "a.py", "f", 1, 2)
    fake = Fault("bit-flip", "tiny", Target.SERVER, StatePath.TRANSFER, Role.PREFILL, (hook,), "flips a bit", Needs.KV)
    try:
        faults.register("tiny", [fake])
        assert faults.faults()[-1] is fake and faults.names(server="tiny") == ("bit-flip",)
        assert faults.names(server="tiny", path=StatePath.TRANSFER) == ("bit-flip",)
    finally:
        faults._REGISTERED.pop("tiny")
        faults.faults.cache_clear()
    assert faults.names(server="tiny") == ()


def test_the_registry_and_the_old_tables_import_without_torch() -> None:
    code = (
        "import sys, kvdoctor.core.faults, kvdoctor.roundtrip.faults, kvdoctor.engines.vllm.server_plugin; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'sglang', 'vllm', 'rich', 'typer')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert ast.literal_eval(out.stdout) == []


def test_the_old_tables_are_read_from_the_registry() -> None:
    from kvdoctor.roundtrip import faults as roundtrip_faults

    assert [f.value for f in faults.FaultName] == list(faults.names(target=Target.MODEL))
    assert faults.names(server="sglang", target=Target.ENGINE) == faults.roundtrip_names("sglang")
    assert faults.names(server="vllm", target=Target.ENGINE) == faults.roundtrip_names("vllm")
    both = [*faults.roundtrip_names("sglang"), *faults.roundtrip_names("vllm")]
    assert [f.value for f in roundtrip_faults.InjectName] == both
