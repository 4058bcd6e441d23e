"""One wording for a bad option value, whichever typer parsed it.

typer 0.29 checks option values through pydantic ("Input should be a valid integer, unable to parse string as
an integer"; a bad choice as "Value error, 'gpu' is not one of ..."); typer 0.28, the one kvdoctor pins
(constraints/: 0.29's pydantic costs every command its start-up), through its vendored click types
("'abc' is not a valid int range.", "0 is not in the range x>=1."). kvdoctor's usage line says the same
under both: the sentences its lines gave under 0.29, less the "Value error, " prefix, which names the
validation layer, not the user's mistake.
"""

from __future__ import annotations

import re

_NOT_AN_INT = "Input should be a valid integer, unable to parse string as an integer"
_NOT_A_NUMBER = "Input should be a valid number, unable to parse string as a number"

# click's messages, after "Invalid value for '--x': " and to the end; a value that did not parse is its repr().
_NOT_PARSED = re.compile(r"""(?<=: )(?P<value>'.*'|".*") is not a valid (?P<type>int|float)(?: range)?\.$""")
_OUT_OF_RANGE = re.compile(
    r"(?<=: )(?P<value>\S+) is not in the range "
    r"(?:x>=(?P<min_only>\S+?)|x<=(?P<max_only>\S+?)|(?P<min>[^\s<]+)<=x<=(?P<max>\S+?))\.$"
)


def _bound(match: re.Match[str]) -> str:
    if match["min_only"] is not None:
        return f"Input should be greater than or equal to {match['min_only']}"
    if match["max_only"] is not None:
        return f"Input should be less than or equal to {match['max_only']}"
    if float(match["value"]) < float(match["min"]):  # which end of min<=x<=max it missed
        return f"Input should be greater than or equal to {match['min']}"
    return f"Input should be less than or equal to {match['max']}"


def plain(message: str) -> str:
    """typer's MESSAGE for a bad value (``format_message()``), in the one wording kvdoctor prints."""
    message = message.replace("Value error, ", "")
    message = _NOT_PARSED.sub(lambda m: _NOT_AN_INT if m["type"] == "int" else _NOT_A_NUMBER, message)
    return _OUT_OF_RANGE.sub(_bound, message)
