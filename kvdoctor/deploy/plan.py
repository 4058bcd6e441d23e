"""The launch plan: which commands start, in what order, with which ports and environment.

Pure data built from the model and the options, so ``--dry-run`` prints exactly what a real run
launches and a test can assert every flag without starting anything.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kvdoctor._exceptions import InputError
from kvdoctor.deploy.presets import Preset

DEFAULT_LAUNCHER = "python -m sglang.launch_server"
DEFAULT_ROUTER_LAUNCHER = "python -m sglang_router.launch_router"
ROLES = ("prefill", "decode", "router")
# Readiness through the router (pd-eval.md §4): mini_lb's /health is always 200, so ask it to
# fan /health_generate out to every worker; the Rust router has a real /readiness.
MINI_LB_READY = "/health_generate"
RUST_ROUTER_READY = "/readiness"
# Server flags the plan sets per role; after ``--`` they would contradict it (the last value wins in SGLang's
# argparse), e.g. ``--tp-size 4`` beside the plan's ``--tp 1`` and overlapping GPUs. Each is held by its dest,
# so every alias and unique prefix SGLang reads as it is refused too (``-- --model PATH`` is ``--model-path``:
# ``kvdoctor.core.owned_flags``); the value says what pd-eval offers instead, naming pd-eval's own options.
PLAN_FLAGS: Mapping[str, str] = {
    "--model-path": "the model is pd-eval's MODEL",
    "--tp-size": "use pd-eval's --tp instead",
    "--base-gpu-id": "use pd-eval's --tp instead (decode's first GPU follows prefill's)",
    "--port": "use pd-eval's --prefill-port / --decode-port instead",
    "--host": "use pd-eval's --host instead",
    "--disaggregation-mode": "kvdoctor sets prefill and decode itself",
    "--disaggregation-bootstrap-port": "use pd-eval's --bootstrap-port instead",
    "--disaggregation-transfer-backend": "use pd-eval's --transfer-backend instead",
    # SGLang puts a config file's flags first (srt/utils/server_args_config_parser.py:75-105): it could set any of these
    "--config": "a config file may set what the plan sets, and kvdoctor does not read it: give its flags after --",
}


@dataclass(frozen=True)
class Ports:
    prefill: int
    decode: int
    router: int
    bootstrap: int
    router_metrics: int


@dataclass(frozen=True)
class Step:
    """One process to start (``argv`` empty when external), and how to know it is up."""

    role: str
    argv: tuple[str, ...]
    url: str
    health_path: str
    env: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """The step as a launch plan lists it in JSON (pd-eval's ``launch_plan``, consistency's ``deployment``)."""
        return {
            "role": self.role,
            "argv": list(self.argv),
            "env": dict(self.env),
            "url": self.url,
            "health_path": self.health_path,
        }


@dataclass(frozen=True)
class LaunchPlan:
    model: str
    preset: str
    steps: tuple[Step, ...]
    bootstrap_port: int | None
    external: bool

    def step(self, role: str) -> Step | None:
        return next((s for s in self.steps if s.role == role), None)

    @property
    def router_url(self) -> str:
        router = self.step("router")
        assert router is not None
        return router.url

    def to_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "preset": self.preset,
            "external": self.external,
            "bootstrap_port": self.bootstrap_port,
            "steps": [s.to_dict() for s in self.steps],
        }


@dataclass(frozen=True)
class PlanOptions:
    model: str
    preset: Preset
    transfer_backend: str = "mooncake"
    ib_device: str | None = None
    launcher: str = DEFAULT_LAUNCHER
    router_launcher: str = DEFAULT_ROUTER_LAUNCHER
    mini_lb: bool = False
    host: str = "127.0.0.1"
    pool_tokens: int | None = None
    extra_args: tuple[str, ...] = ()


def split_command(option: str, command: str) -> list[str]:
    """``shlex.split`` with the option named in the error (an unbalanced quote is bad input)."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise InputError(f"{option} {command!r}: {exc}") from None
    if not words:
        raise InputError(f"{option} is empty")
    return words


def server_flag_names(args: Sequence[str], own_options: Sequence[str] = ()) -> frozenset[str]:
    """The SGLang flags the server words ARGS set, as SGLang's argparse reads them (``core.launch_line.scan``:
    a unique prefix expanded, each value held to the flag's type and choices). An unknown flag (with a
    did-you-mean), a bad value, one of kvdoctor's own options (OWN_OPTIONS) or a stray word is refused
    here, exit 2, before anything starts: the same check ``inspect`` makes of the same words."""
    from kvdoctor.core.launch_line import check_values, scan
    from kvdoctor.core.sglang.flags import SGLANG

    found = scan(args, SGLANG, own_options)
    check_values(found.options, SGLANG)  # the flags kvdoctor models too: no parse_flags reads these words
    if found.positionals:
        raise InputError(f"unexpected word {found.positionals[0]!r} after --: SGLang's launch line takes only flags")
    return frozenset(option.name for option in found.options)


def check_extra_args(args: Sequence[str], own_options: Sequence[str] = ()) -> frozenset[str]:
    """Reject server flags after ``--`` that SGLang refuses or that the plan already sets (as SGLang reads them:
    an alias, ``--model``, or a unique prefix, ``--disaggregation-mo``), naming pd-eval's option to use; returns
    the flags ARGS set."""
    from kvdoctor.core.sglang.flags import owned_word

    names = server_flag_names(args, own_options)
    hit = owned_word(args, PLAN_FLAGS)
    if hit is not None:
        raise InputError(
            f"{hit.typed} after -- would contradict the launch plan{hit.reading('SGLang')}; {PLAN_FLAGS[hit.flag]}"
        )
    return names


def base_url(host: str, port: int) -> str:
    """``http://host:port``, with an IPv6 literal in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def build(options: PlanOptions, ports: Ports) -> LaunchPlan:
    """Prefill, then decode, then the router — the order SGLang's PD fixture waits in."""
    o, p = options, options.preset
    check_extra_args(o.extra_args)
    prefill_url = base_url(o.host, ports.prefill)
    decode_url = base_url(o.host, ports.decode)
    router_url = base_url(o.host, ports.router)
    bound: tuple[str, ...] = ()
    user_bound = "--max-total-tokens" in server_flag_names(o.extra_args)
    if not p.bounds_pool and o.pool_tokens is not None and not user_bound:
        bound = ("--max-total-tokens", str(o.pool_tokens))
    transfer = ("--disaggregation-transfer-backend", o.transfer_backend)
    if o.ib_device:
        transfer += ("--disaggregation-ib-device", o.ib_device)

    launcher = split_command("--launcher", o.launcher)

    def server(mode: str, tail: tuple[str, ...], port: int) -> tuple[str, ...]:
        return (
            *launcher,
            "--model-path",
            o.model,
            *p.leading,
            "--disaggregation-mode",
            mode,
            "--disaggregation-bootstrap-port",
            str(ports.bootstrap),
            *p.common,
            *bound,
            *tail,
            *transfer,
            *o.extra_args,
            "--host",
            o.host,
            "--port",
            str(port),
        )

    router_argv: tuple[str, ...] = (
        *split_command("--router-launcher", o.router_launcher),
        "--pd-disaggregation",
        *(("--mini-lb",) if o.mini_lb else ()),
        "--prefill",
        prefill_url,
        "--decode",
        decode_url,
        "--host",
        o.host,
        "--port",
        str(ports.router),
    )
    if not o.mini_lb:
        # The Rust router binds a Prometheus port (29000) by default: parallel jobs would collide.
        router_argv += ("--prometheus-port", str(ports.router_metrics))
    steps = (
        Step("prefill", server("prefill", p.prefill_tail, ports.prefill), prefill_url, "/health", dict(p.env)),
        Step("decode", server("decode", p.decode_tail, ports.decode), decode_url, "/health", dict(p.env)),
        Step("router", router_argv, router_url, MINI_LB_READY if o.mini_lb else RUST_ROUTER_READY),
    )
    return LaunchPlan(o.model, p.name, steps, ports.bootstrap, external=False)


def external(model: str, *, router_url: str, decode_url: str | None, prefill_url: str | None) -> LaunchPlan:
    """Servers someone else runs: nothing is started, only checked for health and measured."""
    steps = [Step("router", (), router_url.rstrip("/"), "/health")]
    if prefill_url:
        steps.insert(0, Step("prefill", (), prefill_url.rstrip("/"), "/health"))
    if decode_url:
        steps.insert(len(steps) - 1, Step("decode", (), decode_url.rstrip("/"), "/health"))
    return LaunchPlan(model, "external", tuple(steps), None, external=True)


def render(plan: LaunchPlan) -> str:
    """Shell-ready lines, one per step, in launch order (what ``--dry-run`` prints)."""
    lines = []
    for number, step in enumerate(plan.steps, 1):
        wait = f"then wait for GET {step.url}{step.health_path}"
        if not step.argv:
            lines.append(f"# {number}. {step.role}: external at {step.url}; {wait}")
            continue
        lines.append(f"# {number}. {step.role} ({wait})")
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in step.env.items())
        lines.append((env + " " if env else "") + shlex.join(step.argv))
    return "\n".join(lines)


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The last value given to ``flag`` (``--f v`` or ``--f=v``), as argparse would keep it."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value
