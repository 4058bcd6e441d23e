"""``--device cuda`` where the servers cannot use CUDA is exit 2 before any work (issue 28, defect 11): no run
directory, no checkpoint, no server that dies at start-up. A dry run still prints a GPU plan on a CPU machine."""

from __future__ import annotations

import glob
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.consistency import run

HAS_CUDA = bool(glob.glob("/dev/nvidia[0-9]*"))


@pytest.mark.skipif(HAS_CUDA, reason="this machine has an NVIDIA device node")
@pytest.mark.parametrize("server", ["sglang", "vllm"])
def test_cuda_on_a_machine_without_a_gpu_is_exit_2_before_any_work(tmp_path: Path, server: str) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "kvdoctor", "consistency", "llama-3.1-8b", "--shrink", "--device", "cuda",
         "--server", server, "--output-dir", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvdoctor: error: --device cuda: this machine has no NVIDIA GPU")
    assert not out.exists() or list(out.iterdir()) == [], "no run directory, no checkpoint"


def test_the_dry_run_of_a_gpu_plan_still_prints_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kvdoctor", "consistency", "llama-3.1-8b", "--shrink", "--device", "cuda", "--dry-run"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "SGLANG_USE_CPU_ENGINE" not in done.stdout


def test_cuda_visible_devices_hiding_every_gpu_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(glob, "glob", lambda _pattern: ["/dev/nvidia0"])
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        with pytest.raises(InputError, match="hides every GPU"):
            run.check_cuda()


def test_a_driver_without_a_cuda_torch_in_the_servers_interpreter_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A device node, but the interpreter the servers run (here this one, whose torch is a CPU build) sees no GPU."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this interpreter's torch sees a GPU")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(glob, "glob", lambda _pattern: ["/dev/nvidia0"])
    with pytest.raises(InputError, match=r"cannot use CUDA \(torch\.cuda\.is_available\(\) is False\)"):
        run.check_cuda(sys.executable)
    assert shutil.which(sys.executable) is not None


def test_a_cpu_run_asks_nothing_of_cuda(monkeypatch: pytest.MonkeyPatch, server_environment: None) -> None:
    def fail(_python: str = "python") -> None:
        raise AssertionError("a CPU run checked CUDA")

    monkeypatch.setattr(run, "check_cuda", fail)
    run.preflight(run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True)))
    with pytest.raises(AssertionError, match="checked CUDA"):
        run.preflight(run.prepare(run.ConsistencyOptions("llama-3.1-8b", shrink=True, device="cuda")))
