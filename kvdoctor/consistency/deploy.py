"""The two deployments of a consistency run, as launch plans built on pd-eval's ``kvdoctor.deploy.plan``.

A *reference* (a roomy pool: nothing retracts) and a *pressured* deployment (a pool sized from
kvdoctor's own sizing, ``kvdoctor.deploy.prediction.default_pool_tokens``: a quarter of the workload's
peak demand, so retraction must happen). Both get the same model directory, flags, scheduler knobs
(``SGLANG_INIT_NEW_TOKEN_RATIO=0.05 --schedule-conservativeness 0.05``) and concurrency; only
``--max-total-tokens`` differs. Pure data: ``--dry-run`` prints exactly what starts.

- ``single``: two servers, ``reference`` and ``pressured`` (retraction by recompute).
- ``pd``: one prefill shared by both (its work is identical for both), a decode and a mini-lb router
  per deployment; retraction happens on the pressured decode, which backs the state up and restores it.
  The prefill and each decode/router pair come from ``kvdoctor.deploy.plan.build``, as pd-eval's do. The
  pressured decode records its state trace (``KVDOCTOR_DIGEST_LOG``, :mod:`kvdoctor.engines.sglang.digests`):
  per retracted request and component, digests and positions at backup, restore and the next forward. For a
  model whose recurrent state per request is small (``--shrink``), both decodes also keep that state's bytes
  before every forward (``KVDOCTOR_STATE_BYTES``), the reference's in its own log: which reference position a
  backup equals is then read from the tensors (:mod:`kvdoctor.consistency.state_bytes`).

On a CPU the plan adds SGLang's CPU path and its CPU-only flags (each an *enabler*, named in the
report); on a GPU none of them applies.

``pd-eval --oracle tokens`` hands its own deployment choices in as :class:`PlanChoices` (its preset or the
generic one for ``--tp``, transfer backend, IB device, router, launchers): the pressured deployment is then
pd-eval's plan, the reference the same plan with the roomy pool, and kvdoctor's own flags are added to the
preset's (the pool bound a preset carries is replaced by the two sized pools). Without choices the plan is
consistency's own, unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvdoctor._exceptions import InputError
from kvdoctor.consistency.workload import Workload
from kvdoctor.core import faults as registry
from kvdoctor.core.sglang.flags import owned_word
from kvdoctor.deploy import plan, prediction
from kvdoctor.deploy.presets import Preset
from kvdoctor.engines import fault_list

TOPOLOGIES = ("single", "pd")
DEVICES = ("cpu", "cuda")
ROOMY_MIN = 8192
ROOMY_FACTOR = 4
MAMBA_SLOTS = 64  # --max-mamba-cache-size for recurrent models: 0.3 of a CPU box's memory is far too many
CPU_FLAGS = (
    "--device",
    "cpu",
    "--attention-backend",
    "torch_native",
    "--dtype",
    "float32",
    "--mem-fraction-static",
    "0.3",
    "--grammar-backend",
    "none",
)
PRESSURE_FLAGS = ("--schedule-conservativeness", "0.05")
# Every server gets --sleep-on-idle: an idle SGLang scheduler otherwise spins (measured: ~40% of a core each
# on CPU), and the deployment not being measured would halve the other's throughput on a small machine.
PRESSURE_ENV = {"SGLANG_INIT_NEW_TOKEN_RATIO": "0.05"}
CPU_DECODE_FLAGS = ("--disaggregation-decode-retraction-backup", "cpu_tensor", "--num-reserved-decode-tokens", "8")
CPU_PREFILL_FLAGS = ("--disable-overlap-schedule",)
# Flags of pd-eval's presets that need a GPU (dropped on a CPU, each named as an enabler): flag -> (takes a value,
# the roles it is on, why).
CPU_DROPPED = {
    "--enable-hierarchical-cache": (
        False,
        "prefill",
        "HiCache's host pool pins host memory through CUDA (srt/mem_cache/pool_host/common.py:147)",
    ),
    "--base-gpu-id": (True, "decodes", "GPU placement (decode on the GPUs after prefill's); a CPU has no GPU ids"),
}
# Flags the plan decides; after -- they would change what is compared. Each is held by its dest, so every alias
# and unique prefix SGLang reads as it is refused too (``-- --model PATH`` is --model-path: kvdoctor.core.owned_flags),
# and each says why in consistency's own terms: consistency has no --host, --tp or port options. A superset of
# pd-eval's ``plan.PLAN_FLAGS`` (whose messages name pd-eval's options), so a consistency run never shows those.
OWNED_FLAGS = {
    "--model-path": (
        "kvdoctor serves MODEL's checkpoint (a seeded random one when MODEL has no weights), the one the report names "
        "with its sha256"
    ),
    "--max-total-tokens": "kvdoctor sizes both pools (reference roomy, pressured tight)",
    "--load-format": "dummy weights give degenerate output (a two-token cycle); kvdoctor writes a seeded checkpoint",
    "--schedule-conservativeness": "the pressured deployment needs 0.05 to retract",
    "--enable-metrics": "kvdoctor turns it on (retractions are read from /metrics)",
    "--port": "kvdoctor picks a free port for every server",
    "--host": "kvdoctor binds every server to 127.0.0.1, where its client and health checks go",
    "--tp-size": "consistency runs every server at TP 1 (pd-eval --oracle tokens --tp plans TP per role)",
    "--base-gpu-id": "consistency places every server itself (pd-eval --oracle tokens --tp places TP per role)",
    "--disaggregation-mode": "--topology pd sets prefill and decode itself (--topology single disaggregates nothing)",
    "--disaggregation-bootstrap-port": "kvdoctor picks a free bootstrap port for prefill and both decodes",
    "--disaggregation-transfer-backend": "kvdoctor picks mooncake (mooncake_tcp on a CPU) for --topology pd",
    # SGLang puts a config file's flags first (srt/utils/server_args_config_parser.py:75-105): it could set any of these
    "--config": "a config file may set a flag kvdoctor owns, and kvdoctor does not read it: give its flags after --",
}


@dataclass(frozen=True)
class Enabler:
    """A change kvdoctor makes so SGLang runs on this machine; printed in the header and the JSON."""

    name: str
    where: str  # the roles it applies to
    why: str


@dataclass(frozen=True)
class Deployment:
    topology: str
    steps: tuple[plan.Step, ...]
    reference_url: str  # where the reference's requests go (its server, or its router)
    pressured_url: str
    reference_metrics: str  # whose /metrics counts the reference's retractions
    pressured_metrics: str
    reference_pool: int
    pressured_pool: int
    enablers: tuple[Enabler, ...] = ()
    injected_role: str | None = None
    bootstrap_port: int | None = None  # pd: the one bootstrap port prefill and both decodes share
    preset: str = "consistency"  # whose flags the servers carry (pd-eval's preset under --oracle tokens)
    arm_file: str | None = None  # the injected faults fire only while this file names them (the run arms them)

    def launch_plan(self, model: str) -> plan.LaunchPlan:
        """Every step as pd-eval's launch plan lists them (``launch_plan`` in its JSON, its dry run)."""
        return plan.LaunchPlan(model, self.preset, self.steps, self.bootstrap_port, external=False)

    def step(self, role: str) -> plan.Step:
        return next(s for s in self.steps if s.role == role)

    def to_dict(self) -> dict[str, object]:
        return {
            "topology": self.topology,
            "reference_pool_tokens": self.reference_pool,
            "pressured_pool_tokens": self.pressured_pool,
            "reference_url": self.reference_url,
            "pressured_url": self.pressured_url,
            "injected_role": self.injected_role,
            "steps": [s.to_dict() for s in self.steps],
        }


@dataclass(frozen=True)
class PlanChoices:
    """A PD deployment's own choices (``pd-eval --oracle tokens``): the defaults are consistency's plan."""

    preset: Preset | None = None  # pd-eval's (its --preset, or the generic one for --tp); None: no flags of its own
    transfer_backend: str = "mooncake"  # mooncake_tcp on a CPU
    ib_device: str | None = None
    mini_lb: bool = True
    launcher: str = plan.DEFAULT_LAUNCHER
    router_launcher: str = plan.DEFAULT_ROUTER_LAUNCHER


CONSISTENCY = Preset(name="consistency", source="kvdoctor consistency", mini_lb=True)


def ports_needed(topology: str, choices: PlanChoices | None = None) -> int:
    """Free ports a plan takes: 2 for single; for pd 6, and 2 more for the Rust routers' Prometheus ports."""
    if topology == "single":
        return 2
    return 6 if choices is None or choices.mini_lb else 8


@dataclass(frozen=True)
class ScenarioPlan:
    """What a scenario changes in the plan (``consistency/servers/sglang/<scenario>.py``'s ``plan``); preempt's:
    nothing (the tight pool forces the retractions)."""

    pools: tuple[int, int] | None = None  # (reference, pressured) pools the scenario sizes itself (prefix-cache)
    role_args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # flags per single role
    roomy_subject: bool = False  # pd: the pressured decode roomy too, so nothing retracts (transfer)
    patches: tuple[str, ...] = ()  # pd: kvdoctor's site-hook patches on every server (transfer: its observer)


@dataclass(frozen=True)
class DeployOptions:
    model_dir: str
    topology: str
    device: str
    workload: Workload
    has_recurrent: bool
    host: str = "127.0.0.1"
    launcher: str = plan.DEFAULT_LAUNCHER
    router_launcher: str = plan.DEFAULT_ROUTER_LAUNCHER
    extra_args: tuple[str, ...] = ()
    subject_args: tuple[str, ...] = ()  # the subject's alone (single: the pressured server; pd: its decode)
    server_path: tuple[str, ...] = ()  # first on every server's PYTHONPATH (a release overlay)
    inject: str | None = None
    stand_in_dir: str | None = None  # put on the servers' PYTHONPATH (CPU, no real sgl_kernel)
    site_hook_dir: str | None = None
    inherited_pythonpath: str = ""
    log_env: Mapping[str, str] = field(default_factory=dict)  # the stand-in and hook logs
    digest_log: str | None = None  # the pressured decode's state trace (kvdoctor.engines.sglang.digests)
    reference_digest_log: str | None = None  # the reference decode's, for the state bytes it keeps
    state_bytes: int = 0  # keep the recurrent state's bytes of requests whose state is at most this (0: none)
    choices: PlanChoices | None = None  # pd-eval's deployment (pd only); None: consistency's own
    arm_file: str | None = None  # where the run arms the injected faults (kvdoctor.engines.arming), when injecting
    prefill_faults: tuple[str, ...] = ()  # the injected faults that run on the prefill (the rest: pressured decode)
    scenario: ScenarioPlan = field(default_factory=ScenarioPlan)  # what --scenario changes (its server part's)


def pools(w: Workload) -> tuple[int, int]:
    """(reference, pressured) ``--max-total-tokens``: roomy, and pd-eval's quarter-of-peak bound."""
    tight = prediction.default_pool_tokens(w.per_request_tokens, w.peak_tokens)
    roomy = max(ROOMY_MIN, ROOMY_FACTOR * w.peak_tokens)
    roomy = math.ceil(roomy / prediction.POOL_ALIGN) * prediction.POOL_ALIGN
    return roomy, tight


def check_extra_args(args: Sequence[str]) -> None:
    """SGLang flags after ``--`` (SGLang's spellings and values, ``plan.server_flag_names``); one SGLang reads as a
    flag in OWNED_FLAGS (itself, an alias, a unique prefix) is refused naming what was typed and the flag."""
    plan.server_flag_names(args)
    hit = owned_word(args, OWNED_FLAGS)
    if hit is not None:
        raise InputError(f"{hit.typed} after -- is not allowed{hit.reading('SGLang')}: {OWNED_FLAGS[hit.flag]}")


def enablers(o: DeployOptions) -> tuple[Enabler, ...]:
    if o.device != "cpu":
        return ()
    servers = "every server"
    out = [
        Enabler("SGLANG_USE_CPU_ENGINE=1", servers, "is_cpu() is False without it (srt/utils/common.py:221-224)"),
        Enabler(
            " ".join(CPU_FLAGS),
            servers,
            "CPU device; the x86 default backend is intel_amx (srt/arg_groups/platform_hook.py:158-172); float32 "
            "keeps near-tied random-weight logits from flipping",
        ),
    ]
    if o.stand_in_dir:
        out.append(
            Enabler(
                "sgl_kernel import-only stand-in (kvdoctor/engines/sglang/cpu_shims)",
                servers,
                "SGLang imports sgl_kernel on its CPU path (kernels/ops/kvcache/cache_move.py:9-10) and the registry "
                "has only CUDA wheels; every stand-in function raises if called, and the run fails if one was",
            )
        )
    if o.has_recurrent:
        out.append(Enabler("TRITON_INTERPRET=1", servers, "the ShortConv state goes through Triton kernels"))
        out.append(Enabler(f"--max-mamba-cache-size {MAMBA_SLOTS}", servers, "bounds the recurrent-state pool"))
    if o.topology == "pd":
        transfer = "" if _transfer(o) != "mooncake_tcp" else "--disaggregation-transfer-backend mooncake_tcp, "
        out += [
            Enabler(
                f"{transfer}MC_FORCE_TCP=1, SGLANG_HOST_IP={o.host}",
                "prefill, decodes",
                "no RDMA device; loopback only",
            ),
            Enabler(
                "--disaggregation-decode-retraction-backup cpu_tensor",
                "decodes",
                "the inferred host_pool pins host memory through CUDA (srt/mem_cache/pool_host/common.py:147)",
            ),
            Enabler("--num-reserved-decode-tokens 8", "decodes", "the default 512 eats a small pool; warm-up hangs"),
            Enabler(
                "--disable-overlap-schedule",
                "prefill",
                "overlap records a CUDA event (srt/disaggregation/prefill.py:1495-1497)",
            ),
            Enabler(
                "MooncakeKVSender.supports_host_tensor_indices = False (run-time patch, site hook)",
                "prefill",
                "the host-index send pins memory and records a CUDA event (srt/disaggregation/prefill.py:1746-1761); "
                "this changes SGLang's behaviour on CPU",
            ),
        ]
        base = _base(o)
        for flag, (_, where, why) in CPU_DROPPED.items():
            if flag in (*base.common, *base.prefill_tail, *base.decode_tail):
                out.append(Enabler(f"{flag} dropped (preset {base.name})", where, why))
    return tuple(out)


def _base(o: DeployOptions) -> Preset:
    return o.choices.preset or CONSISTENCY if o.choices is not None else CONSISTENCY


def _transfer(o: DeployOptions) -> str:
    chosen = o.choices.transfer_backend if o.choices is not None else "mooncake"
    return "mooncake_tcp" if o.device == "cpu" and chosen == "mooncake" else chosen


def _drop(args: Sequence[str], flag: str, takes_value: bool) -> tuple[str, ...]:
    """ARGS without FLAG (and its value): ``--flag v`` and ``--flag=v`` alike."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == flag:
            skip = takes_value
        elif not arg.startswith(flag + "="):
            out.append(arg)
    return tuple(out)


def _composed(o: DeployOptions, base: Preset, prefill_pool: int, decode_pool: int) -> Preset:
    """BASE's flags with kvdoctor's own: the pool bound replaced by the sized one (prefill roomy, decode POOL),
    ``--enable-metrics`` once, and on a CPU the CPU flags added and the GPU-placement flags dropped."""
    cpu = o.device == "cpu"

    def clean(args: Sequence[str]) -> tuple[str, ...]:
        out = _drop(_drop(args, "--max-total-tokens", True), "--enable-metrics", False)
        for flag, (takes_value, _, _) in CPU_DROPPED.items() if cpu else ():
            out = _drop(out, flag, takes_value)
        return out

    return dataclasses.replace(
        base,
        common=(*clean(base.common), *_server_flags(o)),
        prefill_tail=(
            *clean(base.prefill_tail),
            *(CPU_PREFILL_FLAGS if cpu else ()),
            "--max-total-tokens",
            str(prefill_pool),
        ),
        decode_tail=(
            *clean(base.decode_tail),
            *(CPU_DECODE_FLAGS if cpu else ()),
            "--max-total-tokens",
            str(decode_pool),
        ),
        bounds_pool=True,
    )


def _faults(o: DeployOptions, role: str) -> str | None:
    """The injected faults ROLE (``prefill`` or ``decode``) runs: the prefill those its records put there
    (``prefill_faults``: a transfer fault on its send, armed for the pressured burst only), the decode the rest."""
    return fault_list.encode(f for f in fault_list.decode(o.inject) if (f in o.prefill_faults) == (role == "prefill"))


def _env(
    o: DeployOptions, *, patches: Sequence[str] = (), inject: str | None = None, trace: str | None = None
) -> dict[str, str]:
    env: dict[str, str] = {**PRESSURE_ENV, **o.log_env}
    if o.device == "cpu":
        env["SGLANG_USE_CPU_ENGINE"] = "1"
        if o.has_recurrent:
            env["TRITON_INTERPRET"] = "1"
    if o.topology == "pd":
        env |= {"MC_FORCE_TCP": "1", "SGLANG_HOST_IP": o.host}
    path = [p for p in (*o.server_path, o.site_hook_dir, o.stand_in_dir, o.inherited_pythonpath) if p]
    if path:
        env["PYTHONPATH"] = ":".join(path)
    if patches:
        env["KVDOCTOR_PATCHES"] = ",".join(patches)
    faults = _faults(o, inject) if inject else None
    if faults:
        env["KVDOCTOR_INJECT"] = faults
        if o.arm_file:
            env["KVDOCTOR_ARM"] = o.arm_file
    if trace and o.site_hook_dir:  # TRACE: the decode's digest log
        env["KVDOCTOR_DIGEST_LOG"] = trace
        if o.state_bytes > 0:
            env["KVDOCTOR_STATE_BYTES"] = str(o.state_bytes)
    return env


def _server_flags(o: DeployOptions) -> tuple[str, ...]:
    flags: tuple[str, ...] = CPU_FLAGS if o.device == "cpu" else ()
    flags += ("--enable-metrics", "--sleep-on-idle", *PRESSURE_FLAGS)
    if o.has_recurrent:
        flags += ("--max-mamba-cache-size", str(MAMBA_SLOTS))
    return flags


def build(o: DeployOptions, ports: Sequence[int]) -> Deployment:
    """The plan; PORTS are free ports (2 for single, 6 for pd)."""
    if o.topology not in TOPOLOGIES:
        raise InputError(f"--topology must be one of {', '.join(TOPOLOGIES)}, got {o.topology!r}")
    if o.device not in DEVICES:
        raise InputError(f"--device must be one of {', '.join(DEVICES)}, got {o.device!r}")
    check_extra_args(o.extra_args)
    check_extra_args(o.subject_args)
    if o.choices is not None and o.topology != "pd":
        raise InputError("a PD deployment's choices (pd-eval --oracle tokens) need --topology pd")
    if o.inject and o.topology != "pd" and not _on_one_server(o.inject):
        raise InputError(
            f"--inject {o.inject} needs --topology pd: only PD decode backs a retracted request's state up and "
            "restores it (srt/managers/schedule_batch.py:2375-2386); a single server retracts by recompute"
        )
    roomy, tight = o.scenario.pools or pools(o.workload)
    return (_single if o.topology == "single" else _pd)(o, list(ports), roomy, tight)


def _single(o: DeployOptions, ports: list[int], roomy: int, tight: int) -> Deployment:
    launcher = plan.split_command("--launcher", o.launcher)
    steps = []
    for role, pool, port in (("reference", roomy, ports[0]), ("pressured", tight, ports[1])):
        argv = (
            *launcher,
            "--model-path",
            o.model_dir,
            *_server_flags(o),
            "--max-total-tokens",
            str(pool),
            *o.scenario.role_args.get(role, ()),
            *o.extra_args,
            *(o.subject_args if role == "pressured" else ()),
            "--host",
            o.host,
            "--port",
            str(port),
        )
        env = _env(o, inject="single" if role == "pressured" else None)  # a radix-hit fault: the subject only
        steps.append(plan.Step(role, argv, plan.base_url(o.host, port), "/health", env))
    ref, press = steps
    injected = "pressured" if o.inject else None
    return Deployment(
        "single",
        tuple(steps),
        ref.url,
        press.url,
        ref.url,
        press.url,
        roomy,
        tight,
        enablers(o),
        injected_role=injected,
        arm_file=o.arm_file if o.inject else None,
    )


def _on_one_server(inject: str) -> bool:
    """Every fault in INJECT acts on a radix-cache hit or on sliding-window eviction, which one SGLang server serves
    (the rest need PD)."""
    paths = (registry.StatePath.PREFIX_HIT, registry.StatePath.SLIDING_WINDOW)
    hits = {n for p in paths for n in registry.names(server="sglang", target=registry.Target.SERVER, path=p)}
    return all(name in hits for name in fault_list.decode(inject))


def _pd(o: DeployOptions, ports: list[int], roomy: int, tight: int) -> Deployment:
    prefill_port, bootstrap, ref_decode, press_decode, ref_router, press_router = ports[:6]
    metrics = list(ports[6:8]) or [0, 0]  # the Rust routers' Prometheus ports (a mini-lb binds none)
    cpu = o.device == "cpu"
    c = o.choices or PlanChoices()
    base = _base(o)

    def one(pool: int, decode: int, router: int, router_metrics: int, subject: bool = False) -> plan.LaunchPlan:
        preset = _composed(o, base, roomy, pool)
        if subject:  # the subject's own flags on its decode alone (the prefill is shared with the reference)
            preset = dataclasses.replace(preset, decode_tail=(*preset.decode_tail, *o.subject_args))
        return plan.build(
            plan.PlanOptions(
                model=o.model_dir,
                preset=preset,
                transfer_backend=_transfer(o),
                ib_device=c.ib_device,
                launcher=c.launcher if o.choices is not None else o.launcher,
                router_launcher=c.router_launcher if o.choices is not None else o.router_launcher,
                mini_lb=c.mini_lb,
                host=o.host,
                extra_args=o.extra_args,
            ),
            plan.Ports(
                prefill=prefill_port, decode=decode, router=router, bootstrap=bootstrap, router_metrics=router_metrics
            ),
        )

    ref = one(roomy, ref_decode, ref_router, metrics[0])
    pressured_pool = roomy if o.scenario.roomy_subject else tight  # transfer: nothing may retract
    press = one(pressured_pool, press_decode, press_router, metrics[-1], subject=True)
    prefill = ref.step("prefill")
    assert prefill is not None and prefill == press.step("prefill"), "both deployments share one prefill"
    observe = o.scenario.patches  # transfer: kvdoctor.engines.sglang.transfer_faults' observer
    prefill_env = _env(o, patches=(*(("mooncake-host-indices",) if cpu else ()), *observe), inject="prefill")
    steps = [dataclasses.replace(prefill, env={**prefill.env, **prefill_env})]
    for name, launch in (("reference", ref), ("pressured", press)):
        decode = launch.step("decode")
        assert decode is not None
        pressured = name == "pressured"
        log = o.digest_log if pressured else o.reference_digest_log
        env = {**decode.env, **_env(o, patches=observe, inject="decode" if pressured else None, trace=log)}
        steps.append(dataclasses.replace(decode, role=f"decode-{name}", env=env))
    for name, launch in (("reference", ref), ("pressured", press)):
        router = launch.step("router")
        assert router is not None
        steps.append(dataclasses.replace(router, role=f"router-{name}"))
    by = {s.role: s for s in steps}
    return Deployment(
        "pd",
        tuple(steps),
        by["router-reference"].url,
        by["router-pressured"].url,
        by["decode-reference"].url,
        by["decode-pressured"].url,
        roomy,
        pressured_pool,
        enablers(o),
        injected_role=", ".join(s.role for s in steps if "KVDOCTOR_INJECT" in s.env) or None,
        bootstrap_port=bootstrap,
        preset=base.name,
        arm_file=o.arm_file if o.inject else None,
    )
