"""Outside strings made safe for rich: control characters stripped, then markup escaped.

A config's ``model_type``, an architecture name, a path or a pasted flag value is data, never markup:
``[/x]`` in one would crash rich (MarkupError) and ``[mamba2_config; srt/...]`` would vanish as an
unknown tag. Every renderer passes such a string through ``safe`` before it reaches a table or print.
The escaping itself lives in one place, ``kvdoctor.report.terminal.markup``; ``safe`` is its one-line form.
"""

from __future__ import annotations

from kvdoctor.report.terminal import markup


def safe(value: object) -> str:
    """VALUE as literal text for rich: no escape sequences, control characters or line breaks, markup escaped."""
    return markup(value, one_line=True)
