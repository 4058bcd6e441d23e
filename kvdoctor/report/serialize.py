"""JSON reports: plain dicts in, one stable rendering out, written atomically."""

from __future__ import annotations

import dataclasses
import json
import math
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Any

from kvdoctor.report.atomic import write_text


def jsonable(value: Any) -> Any:
    """Dataclasses, paths, decimals, enums and non-finite floats as JSON can carry them."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, Enum):
        return jsonable(value.value)
    if isinstance(value, Path):
        return str(value)
    return value


def dumps(data: Any) -> str:
    return json.dumps(jsonable(data), indent=2, sort_keys=False, allow_nan=False) + "\n"


def write(path: Path, data: Any) -> None:
    write_text(path, dumps(data))
