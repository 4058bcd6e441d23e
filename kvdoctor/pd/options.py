"""``kvdoctor pd-eval``'s options, each declared once (``kvdoctor.core.declared``): the command's options and
:func:`kvdoctor.api.pd_eval`'s keyword arguments are made from :class:`PdEvalOptions`' fields. Pure data, no heavy
import (``kvdoctor --help`` reads it)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from kvdoctor.core.declared import argument, option
from kvdoctor.deploy.plan import DEFAULT_LAUNCHER, DEFAULT_ROUTER_LAUNCHER
from kvdoctor.deploy.presets import Api, EvalDefaults, PresetName

__all__ = ["Oracle", "PdEvalOptions"]

_EVAL = EvalDefaults()  # the generic defaults; a --preset brings its own, which is what "or the preset's" means
_FREE = "a free port"


class Oracle(str, Enum):
    """The ``--oracle`` choices (the checks of each: ``kvdoctor.pd.oracle``)."""

    GSM8K = "gsm8k"
    TOKENS = "tokens"


def _or_preset(value: object) -> str:
    return f"{value}, or the preset's"


@dataclass(frozen=True)
class PdEvalOptions:
    """The command's options; None means "the preset's (or the generic) default". The fields after ``junit_path``'s
    neighbours that carry no option (``grace_s``, ``extra_args``) are set by the callers."""

    model: str = argument(help="Model path or HF id, passed as --model-path.")
    preset: PresetName | str | None = option(
        None, "--preset", help="Reproduce a reference test exactly: its flags and its eval defaults."
    )
    tp: int | None = option(None, "--tp", help="TP size per role.", show_default=_or_preset(1))
    transfer_backend: str = option(
        "mooncake", "--transfer-backend", help="--disaggregation-transfer-backend for both roles."
    )
    ib_device: str | None = option(None, "--ib-device", help="--disaggregation-ib-device for both roles.")
    num_shots: int | None = option(
        None, "--num-shots", help="Few-shot examples.", show_default=_or_preset(_EVAL.num_shots)
    )
    num_questions: int | None = option(
        None, "--num-questions", help="Scored questions after the shots.", show_default=_or_preset(_EVAL.num_questions)
    )
    threshold: float | None = option(
        None, "--threshold", help="Accuracy floor.", show_default=_or_preset(f"{_EVAL.threshold:.2f}")
    )
    max_new_tokens: int | None = option(
        None, "--max-new-tokens", help="Per answer.", show_default=_or_preset(_EVAL.max_new_tokens)
    )
    parallel: int | None = option(
        None, "--parallel", help="Requests in flight.", show_default=_or_preset(_EVAL.parallel)
    )
    api: Api | str | None = option(
        None,
        "--api",
        help="completions: /v1/completions, as SGLang's gate; generate: /generate.",
        show_default=_or_preset(_EVAL.api),
    )
    data_path: Path | None = option(
        None, "--data-path", help="GSM8K test.jsonl (default: sha256-checked cache, bundled copy, download)."
    )
    launcher: str = option(DEFAULT_LAUNCHER, "--launcher", help="Server command.")
    router_launcher: str = option(DEFAULT_ROUTER_LAUNCHER, "--router-launcher", help="Router command.")
    mini_lb: bool | None = option(
        None,
        "--mini-lb/--no-mini-lb",
        help="Python mini load balancer instead of the Rust one.",
        show_default="the Rust router, or the preset's",
    )
    prefill_url: str | None = option(None, "--prefill-url", help="Use a running prefill.")
    decode_url: str | None = option(None, "--decode-url", help="Use a running decode.")
    router_url: str | None = option(None, "--router-url", help="Use a running router.")
    host: str = option("127.0.0.1", "--host", help="Host the servers bind to.")
    prefill_port: int | None = option(None, "--prefill-port", help="Prefill's port.", show_default=_FREE)
    decode_port: int | None = option(None, "--decode-port", help="Decode's port.", show_default=_FREE)
    router_port: int | None = option(None, "--router-port", help="The router's port.", show_default=_FREE)
    bootstrap_port: int | None = option(
        None, "--bootstrap-port", help="Shared by prefill and decode.", show_default=_FREE
    )
    output_dir: Path = option(
        Path("kvdoctor-out/pd-eval"),
        "--output-dir",
        help="Each run writes its logs, result.json and per-question rows into a new run-<time>-<id>/ directory here.",
    )
    timeout_s: float = option(3600.0, "--timeout", help="Seconds for the whole run.", keyword="timeout")
    request_timeout_s: float = option(
        600.0, "--request-timeout", help="Seconds per request.", keyword="request_timeout"
    )
    grace_s: float = 10.0
    allow_no_retraction: bool = option(False, "--allow-no-retraction", help="Do not fail when decode never retracted.")
    extra_args: tuple[str, ...] = ()  # both roles' server flags (what follows -- on the command line)
    junit_path: Path | None = option(None, "--junit", help="Write JUnit XML, one test case per gate.")
    # --oracle tokens (kvdoctor.pd.tokens) and its own options; each is refused with the other oracle
    oracle: Oracle | str = option(
        Oracle.GSM8K,
        "--oracle",
        help="gsm8k: GSM8K accuracy (trained weights); tokens: every greedy token against a roomy reference "
        "of the same plan (kvdoctor consistency's oracle; with --shrink no weights needed).",
    )
    shrink: bool = option(False, "--shrink", help="tokens: a tiny seeded random checkpoint of MODEL's config.")
    device: str | None = option(None, "--device", help="tokens: cpu or cuda.", show_default="cuda")
    inject: str | None = option(None, "--inject", help="tokens: a fault applied inside the pressured decode.")
    prompt_tokens: int | None = option(
        None, "--prompt-tokens", help="tokens: seeded token ids per prompt.", show_default="32"
    )
    seed: int | None = option(None, "--seed", help="tokens: seeds the prompts and the checkpoint.", show_default="0")
