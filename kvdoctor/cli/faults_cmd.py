"""``kvdoctor faults``: every fault ``--inject`` takes, from the one registry (``kvdoctor.core.faults``).

One table per server and target (the command that injects it), a row per fault: the state path it breaks, the
server role it runs in, which models can show it, the server code it hooks and what it does. When the rows do not
fit the console whole they are laid out as one block per fault (``cli.layout``), folding at the console's width.
``--json`` prints one document (``kvdoctor schema faults``). Reads no model, imports no torch; exits 0.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from kvdoctor.cli.layout import fits_whole, kv_table
from kvdoctor.core.faults import Fault, StatePath, select
from kvdoctor.core.servers import Server, facts
from kvdoctor.report.envelope import document, header
from kvdoctor.report.serialize import dumps
from kvdoctor.text import safe


def faults(
    server: Annotated[Server | None, typer.Option("--server", help="Only this server's faults.")] = None,
    path: Annotated[StatePath | None, typer.Option("--path", help="Only the faults on this state path.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON document instead of the tables.")] = False,
) -> None:
    """List every fault --inject takes: where it runs, the state path it breaks, the server code it hooks."""
    chosen = select(server=server, path=path)
    if json_out:
        head = header("faults", exit_code=0, argv_fallback=["faults"])
        typer.echo(dumps(document(head, {"count": len(chosen), "faults": [_jsonable(f) for f in chosen]})), nl=False)
        return
    _render(chosen)


def _jsonable(f: Fault) -> dict[str, Any]:
    return {
        "name": f.name,
        "server": f.server,
        "target": f.target.value,
        "command": f.command,
        "path": f.path.value,
        "role": f.role.value,
        "needs": f.needs.value,
        "models": f.needs.models,
        "hooks": [
            {"path": c.path, "symbol": c.symbol, "start": c.start, "end": c.end, "where": c.where} for c in f.hooks
        ],
        "does": f.does,
        "replays": list(f.replays),
        "formerly": list(f.formerly),
    }


def _hooks(f: Fault) -> str:
    return "; ".join(c.label for c in f.hooks)


def _groups(chosen: tuple[Fault, ...]) -> dict[tuple[str, str], list[Fault]]:
    groups: dict[tuple[str, str], list[Fault]] = {}
    for f in chosen:
        groups.setdefault((f.server, f.command), []).append(f)
    return groups


def _render(chosen: tuple[Fault, ...]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, emoji=False)
    for (server, command), rows in _groups(chosen).items():
        title = f"{facts(server).title}: {command} --inject"
        table = Table(title=title, title_justify="left")
        for column in ("fault", "path", "role", "models", "hook", "does"):
            table.add_column(column, overflow="fold")
        for f in rows:
            table.add_row(*(safe(v) for v in (f.name, f.path.value, f.role.value, f.needs.models, _hooks(f), f.does)))
        if not fits_whole(table, console):
            table = kv_table(title)  # one block per fault: its name, then every fact wrapped at words
            for f in rows:
                formerly = f" (formerly {', '.join(f.formerly)})" if f.formerly else ""
                said = (
                    f"{f.does}. Path {f.path.value}, role {f.role.value}, {f.needs.models}; hooks {_hooks(f)}{formerly}"
                )
                table.add_row(safe(f.name), safe(said))
        console.print(table)
    noun = "fault" if len(chosen) == 1 else "faults"
    console.print(f"{len(chosen)} {noun} (every field: kvdoctor faults --json)", markup=False)


def markdown(chosen: tuple[Fault, ...] | None = None) -> str:
    """The registry as the Markdown table of ``docs/faults.md`` (a test holds the file to it)."""
    rows = [
        "| fault | server | injected by | path | role | models | hooks | does |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for f in select() if chosen is None else chosen:
        name = f"`{f.name}`" + (f" (formerly `{'`, `'.join(f.formerly)}`)" if f.formerly else "")
        hooks = "; ".join(f"`{c.where}` ({c.symbol})" for c in f.hooks)
        cells = (
            name,
            facts(f.server).title,
            f"`{f.command}`",
            f.path.value,
            f.role.value,
            f.needs.models,
            hooks,
            f.does,
        )
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"
