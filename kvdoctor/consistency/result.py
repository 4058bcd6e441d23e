"""What one consistency run produced, fed unchanged to every serializer (JSON, JUnit, step summary, terminal)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvdoctor._exceptions import EXIT_DEPLOYMENT, EXIT_GATE, EXIT_PASS
from kvdoctor.consistency.compare import RequestDiff
from kvdoctor.consistency.gates import Gate


@dataclass(frozen=True)
class Burst:
    """One send of the whole workload to one deployment."""

    name: str  # reference, reference-repeat, pressured
    url: str
    wall_s: float
    output_tokens: int
    tokens_per_s: float
    median_distinct_tokens: float
    median_length: float


@dataclass
class FaultReport:
    name: str
    role: str
    installed: bool = False
    backups: int = 0  # retraction backups that ran through the fault
    restores: int = 0
    refused: str | None = None


@dataclass
class ConsistencyResult:
    model: str
    family: str
    topology: str
    device: str
    shrunk: bool
    workload: dict[str, int]
    model_dir: str | None = None
    checkpoint: dict[str, Any] | None = None
    weights_digest: str | None = None
    cpu_enablers: list[dict[str, str]] = field(default_factory=list)
    stand_in: dict[str, Any] = field(default_factory=dict)
    fault: FaultReport | None = None
    deployment: dict[str, Any] = field(default_factory=dict)
    launch_s: dict[str, float] = field(default_factory=dict)
    bursts: list[Burst] = field(default_factory=list)
    retractions: dict[str, int | None] = field(default_factory=dict)
    retraction_source: str = "none"
    noise_floor: dict[str, Any] | None = None
    logprob_drift: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)  # reported, not gated (the header's warnings)
    requests: list[RequestDiff] = field(default_factory=list)
    identical: int = 0
    total: int = 0
    gates: list[Gate] = field(default_factory=list)
    passed: bool = False
    exit_code: int = EXIT_DEPLOYMENT
    exit_reason: str = "not_run"
    message: str = ""
    logs: dict[str, str] = field(default_factory=dict)
    run_dir: str | None = None
    wall_s: float = 0.0
    survivors: list[str] = field(default_factory=list)
    # PD only: the pressured decode's state trace joined with the comparison (kvdoctor.consistency.attribution)
    state_trace: dict[str, Any] | None = None

    @property
    def first_divergence(self) -> RequestDiff | None:
        red = [d for d in self.requests if d.diverged and not d.within_noise]
        return min(red, key=lambda d: (d.position or 0, d.index)) if red else None

    def summary_line(self) -> str:
        if self.exit_code not in (EXIT_PASS, EXIT_GATE):
            return self.message.splitlines()[0] if self.message else self.exit_reason
        press = self.retractions.get("pressured")
        head = f"{self.identical}/{self.total} requests identical, {press if press is not None else '?'} retractions"
        failed = [g for g in self.gates if not g.passed]
        return f"{head}; {failed[0].message}" if failed else f"{head} ({self.wall_s:.0f} s)"
