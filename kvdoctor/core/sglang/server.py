"""SGLang's facts for the server seam (``kvdoctor.core.servers``): imports nothing heavy."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from kvdoctor.core.servers import Server, ServerFacts

__all__ = ["FACTS", "RULES"]

RULES_VERSION = "0.5.23"  # the SGLang release the rule model restates (core/sglang/rules); the flag table's too


class SglangRules:
    """kvdoctor's rule model of SGLang (``core/sglang``), behind the ``RuleModel`` protocol."""

    def analyze(self, model: str, argv: Sequence[str], **settings: Any) -> Any:
        from kvdoctor.core.sglang.analysis import analyze

        return analyze(model, argv, **settings)

    def vocabulary(self) -> Any:
        from kvdoctor.core.sglang import flags

        return flags.SGLANG

    def launch_line(self, words: Sequence[str], own_options: Collection[str]) -> Any:
        from kvdoctor.core.sglang.flags import parse_launch_line

        return parse_launch_line(words, own_options=own_options)


RULES = SglangRules()

FACTS = ServerFacts(
    server=Server.SGLANG,
    title="SGLang",
    rules_version=RULES_VERSION,
    rules_revision="sglang==0.5.23 (retraction semantics of PR #35840, MXFP8 CPU offload of #35888)",
    noun="retraction",
    distributions=("sglang",),
    rule_model="kvdoctor.core.sglang.server:RULES",
    sweep="kvdoctor.core.sglang.sweep",
    platform=True,
)
