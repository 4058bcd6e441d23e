"""The two deployments: only the pool differs; CPU enablers only on CPU; faults only in decode-pressured."""

from __future__ import annotations

import pytest

from kvdoctor._exceptions import InputError, NotRunnableHere
from kvdoctor.consistency import deploy, runnable
from kvdoctor.consistency.workload import Workload
from kvdoctor.deploy.plan import flag_value


def options(**kw: object) -> deploy.DeployOptions:
    base: dict[str, object] = {
        "model_dir": "/m",
        "topology": "pd",
        "device": "cpu",
        "workload": Workload(),
        "has_recurrent": True,
        "stand_in_dir": "/shim",
        "site_hook_dir": "/hook",
    }
    return deploy.DeployOptions(**{**base, **kw})  # type: ignore[arg-type]


def without_pool(argv: tuple[str, ...]) -> list[str]:
    out = list(argv)
    i = out.index("--max-total-tokens")
    del out[i : i + 2]
    return [w for w in out if not w.isdigit()]  # ports differ too


def test_the_pressured_pool_is_kvdoctors_quarter_of_peak_and_the_reference_roomy() -> None:
    reference, pressured = deploy.pools(Workload())
    assert pressured == 768  # 32 x (32 + 64) / 4, pd-eval's default_pool_tokens
    assert reference >= 4 * Workload().peak_tokens


def test_pd_decodes_differ_only_in_the_pool_and_share_one_prefill() -> None:
    d = deploy.build(options(), [1, 2, 3, 4, 5, 6])
    roles = [s.role for s in d.steps]
    assert roles == ["prefill", "decode-reference", "decode-pressured", "router-reference", "router-pressured"]
    ref, press = d.step("decode-reference"), d.step("decode-pressured")
    assert flag_value(ref.argv, "--max-total-tokens") == str(d.reference_pool)
    assert flag_value(press.argv, "--max-total-tokens") == str(d.pressured_pool)
    assert without_pool(ref.argv) == without_pool(press.argv)
    assert flag_value(press.argv, "--disaggregation-decode-retraction-backup") == "cpu_tensor"
    assert press.env["SGLANG_INIT_NEW_TOKEN_RATIO"] == ref.env["SGLANG_INIT_NEW_TOKEN_RATIO"] == "0.05"
    for router in ("router-reference", "router-pressured"):
        assert "http://127.0.0.1:1" in d.step(router).argv  # both routers use the one prefill
    assert d.step("prefill").env["KVDOCTOR_PATCHES"] == "mooncake-host-indices"


def test_the_fault_goes_only_into_the_pressured_decode() -> None:
    d = deploy.build(options(inject="missing-mamba"), [1, 2, 3, 4, 5, 6])
    assert d.step("decode-pressured").env["KVDOCTOR_INJECT"] == "missing-mamba"
    assert all("KVDOCTOR_INJECT" not in s.env for s in d.steps if s.role != "decode-pressured")
    assert d.injected_role == "decode-pressured"


def test_stand_in_and_site_hook_go_first_on_the_servers_pythonpath() -> None:
    d = deploy.build(options(inherited_pythonpath="/user"), [1, 2, 3, 4, 5, 6])
    assert d.step("prefill").env["PYTHONPATH"] == "/hook:/shim:/user"
    names = " ".join(e.name for e in d.enablers)
    assert "stand-in" in names and "supports_host_tensor_indices" in names
    assert "stand-in" not in " ".join(e.name for e in deploy.build(options(stand_in_dir=None), range(6)).enablers)


def test_on_a_gpu_no_cpu_enabler_applies() -> None:
    d = deploy.build(options(device="cuda", stand_in_dir=None, site_hook_dir=None), [1, 2, 3, 4, 5, 6])
    assert d.enablers == ()
    for step in d.steps:
        assert "--device" not in step.argv and "cpu_tensor" not in step.argv
        assert "SGLANG_USE_CPU_ENGINE" not in step.env


def test_single_has_two_servers_and_refuses_a_fault() -> None:
    d = deploy.build(options(topology="single"), [7, 8])
    assert [s.role for s in d.steps] == ["reference", "pressured"]
    with pytest.raises(InputError, match="needs --topology pd"):
        deploy.build(options(topology="single", inject="drop-kv"), [7, 8])


@pytest.mark.parametrize("flag", ["--max-total-tokens", "--load-format", "--port", "--model-path"])
def test_flags_the_plan_owns_are_refused_after_the_double_dash(flag: str) -> None:
    with pytest.raises(InputError, match=flag):
        deploy.build(options(extra_args=(flag, "1")), [1, 2, 3, 4, 5, 6])


@pytest.mark.parametrize(
    ("fixture", "where"),
    [
        ("nemotron-h-8b", "mamba/mamba.py:43-75"),
        ("qwen3-next-80b-a3b", "gdn_backend.py:183-188"),
        ("inkling-small", "mamba_hook.py:120"),
    ],
)
def test_models_sglang_cannot_run_on_cpu_exit_2_naming_sglangs_line(fixture: str, where: str) -> None:
    import json

    from kvdoctor.core.config import resolve_config_path

    config = json.loads(resolve_config_path(fixture).read_text())
    with pytest.raises(NotRunnableHere, match=where) as caught:
        runnable.check_cpu(runnable.classify(config, fixture), fixture)
    assert caught.value.exit_code == 2
