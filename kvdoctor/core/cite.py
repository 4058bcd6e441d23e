"""One citation type for both servers' rule models: a range of the server's own source a rule restates.

kvdoctor never copies a server's code; every rule it restates cites the file (inside the server's
package: ``sglang/...`` or ``vllm/...``), a symbol that file names within the cited lines, and the lines.
Each server's rule model records its citations in one :class:`Citations` as it makes them (``cite``),
so the engine suites can open every cited range in the installed server and check the symbol is there.
"""

from __future__ import annotations

from collections.abc import Iterator

from kvdoctor.core.record import record


@record(frozen=True)
class Cite:
    """A range of a server's source that a rule restates.

    ``server`` is the package the file is in (``sglang``, ``vllm``); ``path`` is relative to it
    (``srt/mem_cache/kv_cache_builder.py``); ``symbol`` is a name (function, class, constant, field) or a
    short message fragment within lines ``start``..``end`` of that file (for vLLM, a short description).
    """

    server: str
    path: str
    symbol: str
    start: int
    end: int

    @property
    def lines(self) -> str:
        """``start`` or ``start-end``."""
        return str(self.start) if self.start == self.end else f"{self.start}-{self.end}"

    @property
    def where(self) -> str:
        """``<server>/<path>:<lines>``: the file and lines as a person opens them in the installed server."""
        return f"{self.server}/{self.path}:{self.lines}"

    @property
    def label(self) -> str:
        """``<path>:<lines> (<symbol>)``: the path inside the server's package, as a model's rule source shows it."""
        return f"{self.path}:{self.lines} ({self.symbol})"

    def __str__(self) -> str:
        return f"{self.where} ({self.symbol})"


Source = Cite | tuple[Cite, ...]


def _each(source: Source) -> tuple[Cite, ...]:
    return source if isinstance(source, tuple) else (source,)


def shown(source: Source) -> str:
    """One or more citations as a model's rule source shows them (``Cite.label``), joined by "; "."""
    return "; ".join(c.label for c in _each(source))


def located(source: Source) -> str:
    """One or more citations as the files and lines a person opens (``Cite.where``), joined by "; "."""
    return "; ".join(c.where for c in _each(source))


class Citations:
    """Every citation of one server's rule model, in the order its rules made them.

    ``revision`` is the one server release every citation was read at (``sglang==0.5.23 ...``)."""

    def __init__(self, server: str, revision: str) -> None:
        self.server = server
        self.revision = revision
        self._made: list[Cite] = []

    def cite(self, path: str, symbol: str, start: int, end: int | None = None) -> Cite:
        """Record and return a citation of ``path`` (inside the server's package), lines start..end."""
        citation = Cite(self.server, path, symbol, start, start if end is None else end)
        self._made.append(citation)
        return citation

    def __iter__(self) -> Iterator[Cite]:
        return iter(self._made)

    def __len__(self) -> int:
        return len(self._made)
