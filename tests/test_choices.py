"""The options' choice enums: importable without torch, and equal to the lists the heavy code acts on."""

from __future__ import annotations

import subprocess
import sys

from kvdoctor.choices import Device, MxfpBackend, ScaleMode, TorchDtype
from kvdoctor.core.faults import FaultName


def test_fault_enum_is_exactly_the_faults_the_run_knows() -> None:
    from kvdoctor.state.faults import FAULTS

    assert [f.value for f in FaultName] == list(FAULTS)


def test_scale_mode_enum_is_exactly_the_codecs_modes() -> None:
    import pytest
    import torch

    from kvdoctor import mxfp8
    from kvdoctor._exceptions import InputError

    x = torch.ones(1, 32)
    for mode in ScaleMode:  # every choice --scale-mode offers, the codec runs
        assert mxfp8.quantize(x, scale_mode=mode.value, backend="torch").scales.numel() == 1
    with pytest.raises(InputError, match=r"choose one of sglang, rceil, floor$"):  # and it refuses the rest
        mxfp8.quantize(x, scale_mode="ceil", backend="torch")


def test_dtypes_and_backends_name_real_things() -> None:
    import torch

    assert all(isinstance(getattr(torch, d.value), torch.dtype) for d in TorchDtype)
    assert MxfpBackend.ALL.names() == ("torch", "triton") and MxfpBackend.TORCH.names() == ("torch",)
    assert [d.value for d in Device] == ["auto", "cpu", "cuda"]


def test_the_choices_and_the_cli_options_import_without_torch() -> None:
    code = (
        "import sys, kvdoctor.choices, kvdoctor.core.faults, kvdoctor.cli.options, kvdoctor.cli.roundtrip, "
        "kvdoctor.cli.bench_mxfp8; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'pandas')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
