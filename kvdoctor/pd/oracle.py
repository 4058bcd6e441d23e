"""Which oracle judges a pd-eval deployment, and the options that belong to only one of them.

``gsm8k`` (the default): GSM8K few-shot accuracy on the model's trained weights, with decode-side retraction
proven. ``tokens``: the same deployment judged by ``kvdoctor consistency``'s greedy token-exact comparison
against a roomy reference (``kvdoctor.pd.tokens``), weight-free with ``--shrink``, so it runs anywhere.
An option that means nothing to the chosen oracle is refused (exit 2, one line) rather than ignored: a
``--threshold`` silently dropped would read as a gate that ran. Pure data; no heavy import.
"""

from __future__ import annotations

from collections.abc import Callable

from kvdoctor._exceptions import InputError
from kvdoctor.pd.options import Oracle, PdEvalOptions

Given = Callable[["PdEvalOptions"], bool]

# Refused with --oracle tokens: (option, given?, why it means nothing there).
GSM8K_ONLY: tuple[tuple[str, Given, str], ...] = (
    ("--threshold", lambda o: o.threshold is not None, "the tokens oracle has no accuracy floor"),
    ("--num-shots", lambda o: o.num_shots is not None, "the tokens oracle sends seeded token-id prompts, no shots"),
    ("--data-path", lambda o: o.data_path is not None, "the tokens oracle reads no GSM8K data"),
    ("--api", lambda o: o.api is not None, "the tokens oracle sends token ids to /generate"),
    (
        "--allow-no-retraction",
        lambda o: o.allow_no_retraction,
        "the tokens oracle compares nothing without a retraction (its pressure gate)",
    ),
    *(
        (flag, (lambda o, f=field: getattr(o, f) is not None), "the tokens oracle launches both deployments itself")
        for flag, field in (
            ("--prefill-url", "prefill_url"),
            ("--decode-url", "decode_url"),
            ("--router-url", "router_url"),
            ("--prefill-port", "prefill_port"),
            ("--decode-port", "decode_port"),
            ("--router-port", "router_port"),
            ("--bootstrap-port", "bootstrap_port"),
        )
    ),
)
# Refused with --oracle gsm8k.
TOKENS_ONLY: tuple[tuple[str, Given, str], ...] = (
    ("--shrink", lambda o: o.shrink, "GSM8K needs the model's trained weights, not a tiny random checkpoint"),
    ("--inject", lambda o: o.inject is not None, "a fault is caught by comparing tokens with a reference"),
    ("--device", lambda o: o.device is not None, "the GSM8K eval runs where pd-eval's plan puts it (GPUs)"),
    ("--prompt-tokens", lambda o: o.prompt_tokens is not None, "GSM8K's prompts are its questions"),
    ("--seed", lambda o: o.seed is not None, "GSM8K's prompts are its questions"),
)


def check(o: PdEvalOptions) -> None:
    """Refuse the first option given that the chosen oracle does not read (``InputError``, exit 2)."""
    tokens = Oracle(o.oracle) is Oracle.TOKENS
    table, other = (GSM8K_ONLY, Oracle.GSM8K) if tokens else (TOKENS_ONLY, Oracle.TOKENS)
    for flag, given, why in table:
        if given(o):
            raise InputError(f"{flag} applies to --oracle {other.value} only: {why}")
