"""``--scenario offload`` on vLLM: preempt's run with vLLM's OffloadingConnector on the pressured server.

The plan is preempt's two servers (the same pools: roomy reference, pressured tight) with the connector added to the
pressured one only (``--kv-offloading-size GiB --kv-offloading-backend native``: ``VllmConfig.
_post_init_kv_transfer_config``, config/vllm.py:1099-1123; config/cache.py:266-275), its CPU tier sized
(:func:`offload_gib`) to hold every in-flight request's blocks twice over, so a request resumed from preemption
finds its blocks there and loads them instead of recomputing; proven by ``vllm:kv_offload_load_bytes``
(:class:`kvdoctor.consistency.probe_vllm.OffloadProbe`) beside the preemptions. vLLM refuses the connector on a CPU
at start-up, so ``--device cpu`` is refused before launch with vLLM's message (:data:`OFFLOAD_CPU_FINDING`); on a
GPU it is planned, not measured.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kvdoctor._exceptions import InputError
from kvdoctor.consistency.compare import Generation
from kvdoctor.consistency.deploy import Deployment
from kvdoctor.consistency.prepared import Prepared
from kvdoctor.consistency.probe_vllm import OffloadCount, OffloadProbe
from kvdoctor.consistency.result import ConsistencyResult
from kvdoctor.consistency.scenarios.offload import OffloadDoc, OffloadResult
from kvdoctor.consistency.servers import Notify, Probe
from kvdoctor.consistency.servers.vllm import plan
from kvdoctor.consistency.servers.vllm.part import VllmPart, options
from kvdoctor.consistency.servers.vllm.plan import SUBJECT, VllmDeployOptions

__all__ = ["OFFLOAD_CPU_FINDING", "PART", "Offload", "offload_bytes", "offload_gib", "record"]

# vLLM 0.32 v1/kv_offload/cpu/spec.py:196-207 (0.33: 217-228), CPUOffloadingSpec.get_worker, at the worker's
# start-up: the OffloadingConnector's CPU tier needs a CUDA-alike or XPU platform.
OFFLOAD_CPU_MESSAGE = "CPU Offloading is currently only supported on CUDA-alike and XPU GPUs"
OFFLOAD_CPU_WHERE = "vLLM 0.32 v1/kv_offload/cpu/spec.py:196-207, CPUOffloadingSpec.get_worker; 0.33: 217-228"
OFFLOAD_CPU_FINDING = (
    f"--scenario offload cannot run on a CPU: vLLM's OffloadingConnector refuses it at start-up with "
    f'"{OFFLOAD_CPU_MESSAGE}" ({OFFLOAD_CPU_WHERE}); a finding about vLLM on CPU (not kvdoctor\'s; a GPU is not '
    "measured): run it with --device cuda, or --scenario preempt (recompute on resume)"
)
OFFLOAD_HEADROOM = 2  # the CPU tier holds every in-flight request's blocks this many times over
OFFLOAD_STEP_GIB = 0.01  # --kv-offloading-size is rounded up to this
# offload_prompt_only defaults to True (v1/kv_offload/base.py:620-622): decode KV would never reach the CPU tier;
# vLLM merges this extra config with --kv-offloading-size's connector (config/vllm.py:1099-1123).
OFFLOAD_TRANSFER_CONFIG = json.dumps({"kv_connector_extra_config": {"offload_prompt_only": False}})


def offload_gib(o: VllmDeployOptions) -> str:
    """``--kv-offloading-size`` for the pressured server: every in-flight request's blocks (every group's layers'
    pages, from the sizing model without the connector) :data:`OFFLOAD_HEADROOM` times over, in GiB rounded up to
    :data:`OFFLOAD_STEP_GIB`, so every preempted request's blocks fit in the CPU tier."""
    return f"{offload_bytes(o)[1] / (1 << 30):.2f}"


def offload_bytes(o: VllmDeployOptions) -> tuple[int, float]:
    """(bytes one request's blocks take in every group, the CPU tier's size in bytes as --kv-offloading-size says)."""
    flags = (*plan.base_flags(o, SUBJECT), "--max-model-len", str(plan.model_len(o.workload)), *o.extra_args)
    a = plan.analysis(o, flags)
    if a.groups is None:
        raise InputError(f"vLLM would not start with this model and these flags: {a.refusal} ({a.refusal_where})")
    tokens = o.workload.per_request_tokens
    per_request = 0
    for g in a.groups:
        per_request += plan.request_blocks(g, tokens) * g.spec.page_size_bytes * len(g.layer_names)
    need = OFFLOAD_HEADROOM * o.workload.in_flight * per_request
    steps = max(1, math.ceil(need / (OFFLOAD_STEP_GIB * (1 << 30))))
    return per_request, round(steps * OFFLOAD_STEP_GIB, 2) * (1 << 30)


def record(
    result: OffloadResult, opts: VllmDeployOptions, reference: OffloadCount, subject: OffloadCount
) -> OffloadResult:
    """RESULT with the OffloadingConnector's evidence: the pressured server's CPU tier (OPTS: the run's plan
    options) and both servers' counters."""
    per_request, tier = offload_bytes(opts)
    rows = {"reference": reference.to_dict(), "pressured": subject.to_dict()}
    evidence: OffloadDoc = {
        "kv_offloading_size_gib": float(offload_gib(opts)),
        "cpu_tier_bytes": int(tier),
        "request_bytes": per_request,
        **{key: {role: row[key] for role, row in rows.items()} for key in subject.to_dict()},
        "source": subject.source if subject.source == reference.source else f"{reference.source}/{subject.source}",
    }
    return replace(result, offload=evidence)


class Offload(VllmPart):
    """vLLM's part of ``--scenario offload``: its OffloadingConnector."""

    name = "offload"
    preset = "consistency-vllm-offload"
    path_words = "a load from the OffloadingConnector's CPU tier"

    def check(self, o: VllmDeployOptions) -> None:
        """No flag the scenario owns; no CPU (vLLM refuses the connector there)."""
        plan.check_extra_args(o.extra_args, plan.OFFLOAD_FLAGS, " with --scenario offload")
        if o.device == "cpu":
            raise InputError(OFFLOAD_CPU_FINDING)

    def cache_flags(self, o: VllmDeployOptions, role: str) -> tuple[str, ...]:
        """No GPU prefix cache: it is asked before the connector, and a preempted request's prompt blocks, freed
        last, would mostly be found there (no load from the CPU tier); both servers, for symmetry."""
        return ("--no-enable-prefix-caching",)

    def subject_flags(self, o: VllmDeployOptions) -> tuple[str, ...]:
        """The connector on the pressured server, its CPU tier sized by :func:`offload_gib`."""
        return (
            "--kv-offloading-size",
            offload_gib(o),
            "--kv-offloading-backend",
            "native",
            "--kv-transfer-config",
            OFFLOAD_TRANSFER_CONFIG,
        )

    def subject_env(self, o: VllmDeployOptions) -> dict[str, str]:
        return {"VLLM_USE_SIMPLE_KV_OFFLOAD": "0"}  # else config/vllm.py:1116 picks SimpleCPUOffloadConnector

    def probes(self, prepared: Prepared, url: str) -> dict[str, Probe]:
        return {"offload": OffloadProbe(url)}

    def record(
        self,
        result: ConsistencyResult,
        prepared: Prepared,
        evidence: Mapping[str, Mapping[str, Any]],
        got: list[Generation],
        say: Notify,
    ) -> tuple[ConsistencyResult, dict[str, Any]]:
        ref, press = evidence["reference"], evidence[SUBJECT]
        if "offload" not in ref or "offload" not in press:
            return result, {}
        counts = (ref["offload"], press["offload"])
        if isinstance(result, OffloadResult):
            result = record(result, options(prepared, "<model>", None), *counts)
            moved = press["offload"]
            say("compare", f"bytes loaded from the CPU tier: pressured {moved.load_bytes} ({moved.source})")
        return result, {"offload_loads": counts}

    def head_lines(self, prepared: Prepared, preview: Deployment) -> list[str]:
        flag = "--kv-offloading-size"
        gib = next((s.argv[s.argv.index(flag) + 1] for s in preview.steps if flag in s.argv), "?")
        return [
            f"scenario: offload: pressured {flag} {gib} --kv-offloading-backend native (vLLM's "
            "OffloadingConnector), the reference without; loads from vllm:kv_offload_load_bytes"
        ]

    def result_lines(self, result: ConsistencyResult) -> list[str]:
        assert isinstance(result, OffloadResult)
        moved = result.offload
        row = ", ".join(
            f"{what} reference {moved[key]['reference']}, pressured {moved[key]['pressured']}"  # type: ignore[literal-required]
            for what, key in (("loaded", "load_bytes"), ("stored", "store_bytes"))
        )
        return [
            f"offload (bytes, CPU tier {moved['kv_offloading_size_gib']} GiB): {row}; external prefix-cache hit "
            f"tokens: pressured {moved['external_prefix_cache_hits']['pressured']} (from {moved['source']})"
        ]


PART = Offload()
