"""What ``kvdoctor roundtrip --server S`` checks before any work: one :class:`RoundtripSide` per server.

A side says which engine runs that server's round trip and refuses (exit 2, one line) what it would
silently ignore: an engine that models another server's pools, a fault of another engine, an option only
another server's round trip reads. ``kvdoctor.api._roundtrip`` reaches a side through one line of its
``SIDES`` table (``kvdoctor.core.servers.lookup``) and never asks which server it was given. Nothing here
imports torch or a server; the faults come from where ``--inject`` lists them (``kvdoctor.roundtrip.faults``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from kvdoctor.choices import Device
from kvdoctor.engines import Engine

if TYPE_CHECKING:
    from kvdoctor.api._roundtrip import RoundtripJob

# Options that steer SGLang's round trip only: given with --engine vllm, they would be silently ignored.
SGLANG_ONLY = {"requests": "--requests", "heads": "--heads", "gpu_arch": "--gpu-arch", "emulate_d2h": "--emulate-d2h"}


class RoundtripSide(Protocol):
    """One server's round trip: :meth:`check` refuses (``InputError``) what its engine would not act on."""

    def check(self, run: RoundtripJob) -> None: ...


def _check_fault(run: RoundtripJob) -> None:
    from kvdoctor.roundtrip.faults import check_fault

    check_fault(run.settings["inject"], server=run.server)


class SglangSide:
    """SGLang's pools: kvdoctor's model of them or the installed SGLang; every option is theirs."""

    def check(self, run: RoundtripJob) -> None:
        _check_fault(run)


class VllmSide:
    """vLLM's own offloading worker (``--engine vllm``): one request's blocks of every group, on the CPU."""

    def check(self, run: RoundtripJob) -> None:
        from kvdoctor._exceptions import InputError

        if run.engine is not Engine.VLLM:
            raise InputError(
                "roundtrip --server vllm runs vLLM's own offloading worker: add --engine vllm "
                "(kvdoctor's own model is of SGLang's pools)"
            )
        _check_fault(run)
        given = [o for name, o in SGLANG_ONLY.items() if name in run.explicit]
        if given:
            raise InputError(
                f"{given[0]} is an option of SGLang's round trip; --engine vllm moves one request's blocks of every "
                "group (its options: --tokens, --seed, --layers, --inject, --device cpu, --json, --junit)"
            )
        if run.settings["device"] == Device.CUDA.value:
            raise InputError(
                "--engine vllm runs vLLM's offloading worker on the CPU (the shims it names): use --device cpu"
            )


SGLANG: RoundtripSide = SglangSide()
VLLM: RoundtripSide = VllmSide()
