"""One case of a consistency run: a name and the fault armed inside the servers while its burst runs.

A run measures one or more cases on one deployment (``kvdoctor.consistency.run.run_cases``); ``kvdoctor replay``
groups its bugs' controls and subjects into such cases. Kept apart from ``run`` so that a caller can name cases
without importing the run.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Case"]


@dataclass(frozen=True)
class Case:
    """One case of a run: its name and the fault armed inside the servers while its burst runs (None: a control)."""

    name: str
    fault: str | None = None
