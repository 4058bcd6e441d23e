"""The two gates of a PD eval: accuracy against a floor, and proof that retraction happened.

Why a second gate: a decode pool big enough never to retract passes the accuracy gate while
exercising none of the state-restoring code the run exists to guard.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from kvdoctor.deploy.metrics import RetractionCount

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
    """Pass when ``score >= threshold`` (SGLang's gate uses ``>=`` too), both finite: an infinite score would pass
    any floor (a score is a share of questions, so one that is no finite number is no score)."""
    ok = math.isfinite(score) and math.isfinite(threshold) and score >= threshold
    relation = ">=" if ok else "<"
    return GateResult(
        "accuracy",
        PASSED if ok else FAILED,
        f"accuracy {score:.3f} {relation} threshold {threshold:.3f}",
        "" if ok else "accuracy_below_threshold",
    )


def retraction(count: RetractionCount, *, allow_none: bool) -> GateResult:
    """Pass when the decode server retracted at least one request during the eval. A value that is no finite count
    (``kvdoctor.deploy.metrics`` refuses such a sample; this gate does not rely on it) is an unknown count: ``inf > 0``
    would pass, and ``nan > 0`` would read as "no retraction", which ``--allow-no-retraction`` lets through (it
    allows none, not a malformed count: red either way)."""
    value = count.value
    if value is not None and not _count(value):
        message = f"retraction count unknown: decode's count is {value!r} (from {count.source}), not a count"
        return GateResult("retraction", FAILED, message, "retraction_unknown")
    if value is not None and value > 0:
        return GateResult("retraction", PASSED, f"{value} requests retracted on decode (from {count.source})", "")
    if value is None:
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


def _count(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
