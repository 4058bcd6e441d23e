"""vLLM's room in the API (its line of ``kvdoctor.api._servers.SERVERS``): ``inspect --server vllm``'s job, the
installed vLLM as ``drift``'s other side (its answers take no platform), and the checks of a round trip on vLLM's own
offloading worker, which reads fewer options than SGLang's."""

from __future__ import annotations

from kvdoctor._exceptions import InputError
from kvdoctor.api._drift_sides import EngineSide
from kvdoctor.api._inspect_vllm import VllmInspectJob
from kvdoctor.api._roundtrip_sides import check_fault
from kvdoctor.api._servers import RoundtripAsk, ServerApi
from kvdoctor.choices import Device
from kvdoctor.engines import Engine

# Options that steer SGLang's round trip only: given with --engine vllm, they would be silently ignored.
SGLANG_ONLY = {"requests": "--requests", "heads": "--heads", "gpu_arch": "--gpu-arch", "emulate_d2h": "--emulate-d2h"}


class VllmRoundtrip:
    """vLLM's own offloading worker (``--engine vllm``): one request's blocks of every group, on the CPU."""

    def check(self, run: RoundtripAsk) -> None:
        if run.engine is not Engine.VLLM:
            raise InputError(
                "roundtrip --server vllm runs vLLM's own offloading worker: add --engine vllm "
                "(kvdoctor's own model is of SGLang's pools)"
            )
        check_fault(run)
        given = [o for name, o in SGLANG_ONLY.items() if name in run.explicit]
        if given:
            raise InputError(
                f"{given[0]} is an option of SGLang's round trip; --engine vllm moves one request's blocks of every "
                "group (its options: --tokens, --seed, --layers, --inject, --device cpu, --json, --junit)"
            )
        if run.options.device == Device.CUDA.value:
            raise InputError(
                "--engine vllm runs vLLM's offloading worker on the CPU (the shims it names): use --device cpu"
            )


SERVER = ServerApi(
    inspect_job=VllmInspectJob,
    drift_side=EngineSide(Engine.VLLM, platform=False),
    roundtrip_side=VllmRoundtrip(),
)
