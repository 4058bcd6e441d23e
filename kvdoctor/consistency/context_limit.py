"""The longest request a consistency run's servers take, known before launch: a request past it is exit 2 here.

Without this, ``--prompt-tokens`` + ``--max-new-tokens`` past the model's context launched both servers (~60 s on a
CPU) and every request came back HTTP 400, exit 3. The limit is the server's own, restated from the config the
servers load (after ``--shrink``) and the flags after ``--``:

- SGLang: ``ModelConfig._derive_context_length`` (srt/configs/model_config.py:1291-1329): ``--context-length``
  when given, else ``get_context_length`` (srt/utils/hf_transformers/common.py:677-694, kvdoctor's
  :func:`kvdoctor.core.sglang.analysis.derived_context_length`); a ``--context-length`` above the derived one is a
  start-up refusal unless ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` is set (the servers inherit it). Its HTTP
  front refuses a request whose input + ``max_new_tokens`` exceeds the context (HTTP 400:
  ``TokenizerManager._validate_one_request``, srt/managers/tokenizer_manager.py:1337-1377), and its scheduler is
  stricter still: ``max_req_len`` is the context - 1 (the pools, at least two whole requests here, are larger:
  srt/managers/tp_worker.py:568-572), a request's ``max_new_tokens`` is cut to ``max_req_len`` - input - 1
  without a word (``Scheduler.init_req_max_new_tokens``, srt/managers/scheduler.py:2693-2716), and an input of
  ``max_req_len`` - 5 tokens or more is aborted (``validate_input_length``, srt/managers/utils.py:259-287). So the
  longest request SGLang serves whole is the context - 2 tokens, its prompt at most the context - 7
  (:data:`SGLANG_SCHEDULER_RESERVE`, :data:`SGLANG_INPUT_RESERVE`); past that the run would compare requests cut
  short. Not modelled: the draft-token slots EAGLE speculative decoding reserves on top of the input
  (``compute_num_reserved_tokens``, srt/managers/utils.py:484).
- vLLM: kvdoctor passes ``--max-model-len`` (the request's tokens rounded up to 32,
  :func:`kvdoctor.consistency.servers.vllm.plan.model_len`), a ``--max-model-len`` after ``--`` replaces it (the last
  one wins), and vLLM refuses to start when it exceeds the config's derived length
  (:func:`kvdoctor.core.vllm.model_len.max_model_len`); a request longer than ``max_model_len`` is refused.

Each server's limit is its function here, named by one line of :data:`LIMITS` (:func:`limit` reads it), and a
refusal cites the server's own request check when its :class:`Limit` carries one: nothing here branches on a
server's name.

``--scenario prefix-cache`` sends each compared prompt with its group's prefix in front (the served workload,
:func:`kvdoctor.consistency.prefix.served`); its eviction phase's prompts are as long with one new token, so the
compared requests are the longest. Pure: config and flags in, a number or an ``InputError`` out.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvdoctor._exceptions import InputError
from kvdoctor.core.config import ModelConfig, unwrap_text_config
from kvdoctor.core.servers import lookup
from kvdoctor.core.sglang.analysis import derived_context_length
from kvdoctor.core.sglang.flags import parse_flags
from kvdoctor.core.vllm.flags import parse_vllm_flags
from kvdoctor.core.vllm.model_len import max_model_len

AUTO = -1  # --max-model-len auto / -1: vLLM derives it
SGLANG_OVERRIDE_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
SGLANG_REQUEST_CHECK = "srt/managers/scheduler.py:2693-2716, srt/managers/utils.py:259-287"
SGLANG_SCHEDULER_RESERVE = 2  # max_req_len = context - 1, and max_new_tokens <= max_req_len - input - 1
SGLANG_INPUT_RESERVE = 7  # an input >= max_req_len - 5 = context - 6 tokens is aborted
SGLANG_CONTEXT_CHECK = "srt/configs/model_config.py:1291-1316"


@dataclass(frozen=True)
class Limit:
    """The longest request (prompt + new tokens) a server serves whole, its longest prompt, and where they come
    from."""

    tokens: int
    why: str
    prompt: int | None = None  # None: any prompt within TOKENS
    cite: str = ""  # the server's own code that refuses or cuts a longer request, named in the refusal


def _model_config(config: Mapping[str, Any], source: str) -> ModelConfig:
    """CONFIG (already loaded and validated, then perhaps shrunk) as the core reads it. Not validated again: only
    its length fields are read here, and a shrink's own inconsistencies are the checkpoint build's to report."""
    return ModelConfig(source, config, unwrap_text_config(config))


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "y", "on")


def sglang(config: Mapping[str, Any], source: str, extra_args: Sequence[str]) -> Limit:
    """SGLang's context length for CONFIG under the flags after ``--`` (its start-up refusal is exit 2 here)."""
    derived = derived_context_length(_model_config(config, source))
    asked = parse_flags(extra_args).context_length
    if asked is not None and asked > derived and not _truthy(os.environ.get(SGLANG_OVERRIDE_ENV)):
        raise InputError(
            f"--context-length {asked:,} after -- is above the model's derived context length {derived:,}: SGLang "
            f"refuses to start ({SGLANG_CONTEXT_CHECK}; {SGLANG_OVERRIDE_ENV}=1 allows it)"
        )
    context = derived if asked is None else asked
    where = "the model's context length" if asked is None else "--context-length after --"
    return Limit(
        context - SGLANG_SCHEDULER_RESERVE,
        f"{where} {context:,} less the {SGLANG_SCHEDULER_RESERVE} tokens SGLang's scheduler keeps",
        context - SGLANG_INPUT_RESERVE,
        SGLANG_REQUEST_CHECK,
    )


def vllm(config: Mapping[str, Any], source: str, extra_args: Sequence[str]) -> Limit:
    """vLLM's ``max_model_len`` for CONFIG: the config's derived length, or the ``--max-model-len`` after ``--``
    (one above the derived length is vLLM's start-up refusal: exit 2 here)."""
    user = parse_vllm_flags(extra_args).max_model_len
    length = max_model_len(_model_config(config, source), user)
    if length.refusal is not None:
        raise InputError(f"--max-model-len {user:,} after --: vLLM refuses to start: {length.refusal}")
    if user is not None and user != AUTO:
        return Limit(length.tokens, f"--max-model-len {user:,} after --")
    return Limit(length.tokens, f"the model's max_model_len {length.tokens:,} ({length.reason})")


# One line per server: its limit's function, (config, source, flags after --) -> Limit.
LIMITS: dict[str, str] = {
    "sglang": "kvdoctor.consistency.context_limit:sglang",
    "vllm": "kvdoctor.consistency.context_limit:vllm",
}


def limit(server: str, config: Mapping[str, Any], source: str, extra_args: Sequence[str]) -> Limit:
    """SERVER's limit for CONFIG under the flags after ``--`` (its start-up refusal is exit 2 here)."""
    return lookup(LIMITS, server, "context limit")(config, source, extra_args)


def check_own_vllm(limit: Limit, own: int, request_tokens: int, extra_args: Sequence[str]) -> None:
    """kvdoctor's own ``--max-model-len`` (OWN: REQUEST_TOKENS rounded up to vLLM's CPU block) must not pass the
    model's length, where no ``--max-model-len`` after ``--`` replaces it: vLLM would refuse to start."""
    if parse_vllm_flags(extra_args).max_model_len is None and own > limit.tokens:
        raise InputError(
            f"kvdoctor's --max-model-len {own:,} (a request of {request_tokens:,} tokens rounded up to a multiple of "
            f"32) is above {limit.why}: vLLM would refuse to start; pass -- --max-model-len {limit.tokens}"
        )


def check(limit: Limit, prompt_tokens: int, max_new_tokens: int, server: str, served_prefix: int = 0) -> None:
    """Refuse (exit 2) a request LIMIT does not serve whole: the prompt (after a prefix-cache prefix of
    SERVED_PREFIX tokens) plus its new tokens, and the prompt alone."""
    prompt = served_prefix + prompt_tokens
    total = prompt + max_new_tokens
    prefix = f"the scenario's {served_prefix:,}-token prefix + " if served_prefix else ""
    where = f" ({limit.cite})" if limit.cite else ""
    if limit.prompt is not None and prompt > limit.prompt:
        raise InputError(
            f"a prompt of {prefix}--prompt-tokens {prompt_tokens:,} is longer than {server} takes: at most "
            f"{limit.prompt:,} tokens ({limit.why}); the server would abort every request{where}"
        )
    if total <= limit.tokens:
        return
    room = limit.tokens - served_prefix - max_new_tokens
    fit = f"--prompt-tokens {room:,}" if room >= 1 else "a smaller --max-new-tokens"
    raise InputError(
        f"a request of {prefix}--prompt-tokens {prompt_tokens:,} + --max-new-tokens {max_new_tokens:,} = "
        f"{total:,} tokens is longer than {server} serves whole: at most {limit.tokens:,} ({limit.why}); the "
        f"server would refuse or cut every request{where}: use at most {fit}"
    )
