"""The two gates of a PD eval: accuracy against a floor, and proof that retraction happened.

Why a second gate: a decode pool big enough never to retract passes the accuracy gate while
exercising none of the state-restoring code the run exists to guard.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kvdoctor.pd.metrics import RetractionCount

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass(frozen=True)
class GateResult:
    name: str
    status: str  # passed | failed | skipped
    message: str
    reason: str  # machine-readable exit reason when failed

    @property
    def passed(self) -> bool:
        return self.status != FAILED

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def accuracy(score: float, threshold: float) -> GateResult:
    """Pass when ``score >= threshold`` (SGLang's gate uses ``>=`` too)."""
    ok = score >= threshold
    relation = ">=" if ok else "<"
    return GateResult(
        "accuracy",
        PASSED if ok else FAILED,
        f"accuracy {score:.3f} {relation} threshold {threshold:.3f}",
        "" if ok else "accuracy_below_threshold",
    )


def retraction(count: RetractionCount, *, allow_none: bool) -> GateResult:
    """Pass when the decode server retracted at least one request during the eval."""
    if count.value is not None and count.value > 0:
        return GateResult("retraction", PASSED, f"{count.value} requests retracted on decode (from {count.source})", "")
    if count.value is None:
        message = (
            "retraction count unknown: decode /metrics lacks sglang:num_retracted_requests"
            "_total and no decode log was available (start decode with --enable-metrics)"
        )
        reason = "retraction_unknown"
    else:
        message = (
            "no retraction happened: the decode pool was too large to guard anything "
            "(shrink --max-total-tokens or raise --parallel)"
        )
        reason = "no_retraction"
    if allow_none:
        return GateResult("retraction", SKIPPED, message + "; allowed by --allow-no-retraction", "")
    return GateResult("retraction", FAILED, message, reason)
