"""The site hook changes one attribute of a module right after it executes; faults are refused where they
cannot show anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.engines.sglang import live_faults
from kvdoctor.engines.sglang.server_hooks import AfterImport

HOOK_DIR = Path(live_faults.__file__).parent / "site_hook"


def test_after_import_runs_the_hook_once_the_module_has_executed(tmp_path: Path) -> None:
    (tmp_path / "kvd_probe_mod.py").write_text("class Sender:\n    supports_host_tensor_indices = True\n")
    seen: list[bool] = []

    def hook(module: object) -> None:
        seen.append(module.Sender.supports_host_tensor_indices)  # type: ignore[attr-defined]
        module.Sender.supports_host_tensor_indices = False  # type: ignore[attr-defined]

    finder = AfterImport({"kvd_probe_mod": hook})
    sys.path.insert(0, str(tmp_path))
    sys.meta_path.insert(0, finder)
    try:
        import kvd_probe_mod  # type: ignore[import-not-found]

        assert seen == [True]
        assert kvd_probe_mod.Sender.supports_host_tensor_indices is False
    finally:
        sys.meta_path.remove(finder)
        sys.path.remove(str(tmp_path))
        sys.modules.pop("kvd_probe_mod", None)


def test_the_sitecustomize_arms_the_mooncake_patch_from_the_environment(tmp_path: Path) -> None:
    log = tmp_path / "hook.log"
    env = {**os.environ, "PYTHONPATH": str(HOOK_DIR), "KVDOCTOR_PATCHES": "mooncake-host-indices"}
    env["KVDOCTOR_HOOK_LOG"] = str(log)
    code = (
        "import sys; from kvdoctor.engines.sglang.server_hooks import AfterImport, MOONCAKE_MODULE;"
        "f = [m for m in sys.meta_path if isinstance(m, AfterImport)];"
        "assert f and MOONCAKE_MODULE in f[0].hooks, f"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout


@pytest.mark.parametrize(
    ("fault", "recurrent", "swa", "ok"),
    [
        ("missing-mamba", True, False, True),
        ("missing-mamba", False, False, False),
        ("drop-swa", True, False, False),
        ("drop-kv", False, False, True),
        ("clobber-padding", False, False, False),  # not a live fault: slot 0 is never read for tokens
    ],
)
def test_a_fault_the_model_cannot_show_is_refused(fault: str, recurrent: bool, swa: bool, ok: bool) -> None:
    if ok:
        live_faults.check(fault, has_recurrent=recurrent, has_swa=swa)
    else:
        with pytest.raises(InputError):
            live_faults.check(fault, has_recurrent=recurrent, has_swa=swa)


def test_the_sitecustomize_arms_the_state_trace_on_both_modules(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(HOOK_DIR), "KVDOCTOR_DIGEST_LOG": str(tmp_path / "d.jsonl")}
    env["KVDOCTOR_HOOK_LOG"] = str(tmp_path / "hook.log")
    code = (
        "import sys; from kvdoctor.engines.sglang.server_hooks import AfterImport, SCHEDULE_BATCH_MODULE, "
        "SCHEDULER_MODULE;"
        "f = [m for m in sys.meta_path if isinstance(m, AfterImport)];"
        "assert f and {SCHEDULE_BATCH_MODULE, SCHEDULER_MODULE} <= set(f[0].hooks), f"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout


def test_with_a_fault_the_fault_wraps_the_digests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The digests sit next to SGLang's code, so they see what SGLang's code did under the fault."""
    from types import SimpleNamespace

    from kvdoctor.engines.sglang import digests, server_hooks

    order: list[str] = []

    class Req:
        def offload_kv_cache(self, a: object, b: object) -> None:
            order.append("sglang")

        def load_kv_cache(self, a: object, b: object) -> None:
            order.append("sglang-load")

    def install(name: str, a: object, b: object) -> live_faults.Installed:
        order.append("fault")
        return live_faults.Installed(name, [])

    def backup(self: object, req: object, a: object, b: object, offload: object) -> object:
        order.append("digest")
        return offload()  # type: ignore[operator]

    monkeypatch.setattr(live_faults, "install", install)
    monkeypatch.setattr(digests.Recorder, "backup", backup)
    monkeypatch.setenv("KVDOCTOR_DIGEST_LOG", str(tmp_path / "d.jsonl"))
    monkeypatch.setenv("KVDOCTOR_INJECT", "drop-kv")
    monkeypatch.delenv("KVDOCTOR_HOOK_LOG", raising=False)
    server_hooks.install()
    finder = sys.meta_path.pop(0)
    assert isinstance(finder, AfterImport)
    finder.hooks[server_hooks.SCHEDULE_BATCH_MODULE](SimpleNamespace(Req=Req, __name__="fake"))  # type: ignore[arg-type]
    Req().offload_kv_cache(1, 2)
    assert order == ["fault", "digest", "sglang"]
