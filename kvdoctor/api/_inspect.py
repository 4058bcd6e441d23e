"""``inspect``: which state a model carries, where it lives, how its server backs it up; no torch without an engine.

Each server's answer is its room's job (its launch line, rule model and engine: ``_inspect_sglang``,
``_inspect_vllm``), named by its line of ``kvdoctor.api._servers.SERVERS`` and imported only when that server is asked
about; what every server's ``inspect`` shares is :class:`InspectJob`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvdoctor._exceptions import InputError
from kvdoctor.api._inspect_args import InspectArgs
from kvdoctor.api._job import Job, chosen, execute
from kvdoctor.api._keywords import keyword_function
from kvdoctor.api._servers import room, server_of
from kvdoctor.engines import Engine, GpuArch, Inspected, answers_for
from kvdoctor.report.inspect_report import Report

if TYPE_CHECKING:
    from kvdoctor.report import github


class InspectJob(Job[Inspected, "Report"]):
    """One ``inspect`` with ARGS. A server's subclass answers
    (:meth:`work`, setting :attr:`title`) and names its model's fact rows (:meth:`facts`); NOTES are what its engine
    said about itself (why it did not answer), for the caller to show."""

    title: str  # the step summary's heading, once the launch line named the model

    def __init__(self, args: InspectArgs, *, own_options: Sequence[str] = (), argv: Sequence[str] = ()) -> None:
        self.model, self.own_options, self.argv = args.model, tuple(own_options), tuple(argv)
        self.server = server_of(args.server)
        self.engine = chosen(Engine, args.engine, "engine")
        self.server_args = args.server_args
        self.gpu_arch = chosen(GpuArch, args.gpu_arch, "gpu_arch")
        self.request_tokens, self.concurrent = args.request_tokens, args.concurrent
        self.strict, self.junit_path = args.strict, args.junit_path
        self.notes: tuple[str, ...] = ()

    def check(self) -> None:
        for flag, value in (("--request-tokens", self.request_tokens), ("--concurrent", self.concurrent)):
            if value < 1:
                raise InputError(f"{flag} must be at least 1, got {value}")
        self.adapter = answers_for(self.engine, self.server)  # type: ignore[arg-type]  # another server's: exit 2

    def words(self) -> list[str]:
        """MODEL and the server flags, as one launch line's words."""
        return [self.model, *self.server_args] if self.model is not None else list(self.server_args)

    def facts(self, report: Any) -> tuple[github.Row, ...]:
        """The model's facts in the step summary (none when the rule model did not answer)."""
        return ()

    def report(self, result: Inspected) -> Report:
        from kvdoctor.report.inspect_report import Report

        self.notes = tuple(result.notes)
        return Report(result.report, self.title, self.strict, result.engine, result.drifts, self.facts, self.argv)


def inspect_job(args: InspectArgs, *, own_options: Sequence[str] = (), argv: Sequence[str] = ()) -> InspectJob:
    """The job that answers for ARGS' server (its room's ``inspect_job``, ``kvdoctor.api._servers``)."""
    server = server_of(args.server)  # an unknown server is bad input; a registered one without a room, loud
    job = room(server).inspect_job(args, own_options=own_options, argv=argv)
    assert isinstance(job, InspectJob), job  # the room's line names an InspectJob subclass
    return job


inspect = keyword_function(
    InspectArgs,
    lambda args: execute(inspect_job(args, argv=("inspect",))),
    name="inspect",
    module=__name__,
    doc="""``kvdoctor inspect MODEL [options] SERVER_ARGS``: which state MODEL carries under that launch line, where it
    lives, how the server backs it up at retraction, its bytes and hazards; from kvdoctor's rule model (no torch),
    or also from the installed server's own code (``engine="sglang"`` or ``"vllm"``), with the drift between them.
    Returns the report (``passed``, ``verdict``, ``explain()``, ``to_json()``; its ``report`` is the typed answer).
    Exit code 1 (``passed`` False) only with ``strict`` and an error-severity hazard.""",
    flags_into="server_args",
)
