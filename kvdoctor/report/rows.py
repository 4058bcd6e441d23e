"""Per-row tables (one dict per row) to CSV or Parquet (by file suffix) through pandas, written atomically."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from kvdoctor._exceptions import InputError
from kvdoctor.report.atomic import atomic_open

FORMATS = (".csv", ".parquet")


def write(path: Path, rows: Sequence[Mapping[str, object]]) -> None:
    import pandas as pd

    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise InputError(f"{path}: per-row results are written as .csv or .parquet")
    frame = pd.DataFrame.from_records(list(rows))
    with atomic_open(path, "wb") as fh:
        if suffix == ".csv":
            frame.to_csv(fh, index=False)
        else:
            frame.to_parquet(fh, index=False)
