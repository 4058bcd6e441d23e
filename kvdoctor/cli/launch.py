"""MODEL and the server flags of a command that takes them (inspect, roundtrip, bench roundtrip).

Click hands the command its MODEL argument and, in order, every word it did not recognise; kvdoctor
reads them back as one launch line (``kvdoctor.core.sglang.flags.parse_launch_line``), so MODEL may come
first, after the flags, as ``--model-path``, or inside a pasted ``python -m sglang.launch_server``
or ``sglang serve`` command. Unknown options get a did-you-mean over kvdoctor's own options too. With
``--server vllm`` the same words are read by vLLM's flag table (``kvdoctor.api._inspect_vllm``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from kvdoctor.core.launch_line import LaunchLine


def own_options(ctx: typer.Context) -> tuple[str, ...]:
    """Every option string the command itself defines, help included."""
    names = [o for p in ctx.command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")]
    return (*names, *ctx.help_option_names)


def launch_line(ctx: typer.Context, model: str | None, *, default_model: str | None = None) -> LaunchLine:
    """MODEL and the server flags, in SGLang's full spellings; a ``FlagError`` (exit 2) on a stray word."""
    from kvdoctor.core.sglang.flags import parse_launch_line  # SGLang's flag table: not for --server vllm

    words = [model, *ctx.args] if model is not None else list(ctx.args)
    return parse_launch_line(words, own_options=own_options(ctx), default_model=default_model)
