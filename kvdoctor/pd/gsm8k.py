"""GSM8K few-shot data, prompts and scoring, in the convention of SGLang's PD accuracy gate.

Why this convention: the gate must be comparable with SGLang's own CI (``simple_eval`` GSM8K, the
one the Inkling MXFP8 PD test runs). So the few-shot block is the first ``k`` test lines, the
scored questions are ``lines[k : k + n]`` (shots are never scored), the prompt is
``Question: …\\nAnswer: …`` blocks, and the prediction is the last number in the reply after
removing thousands commas, with its minus sign kept. Gold is the ``#### N`` value.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from importlib import resources
from pathlib import Path

from kvdoctor._exceptions import DownloadError, InputError
from kvdoctor.deploy.urls import masked, redact
from kvdoctor.report.atomic import atomic_open

OFFICIAL_URL = "https://raw.githubusercontent.com/openai/grade-school-math/master/grade_school_math/data/test.jsonl"
OFFICIAL_SHA256 = "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"
URL_ENV = "KVDOCTOR_GSM8K_URL"
CACHE_ENV = "KVDOCTOR_CACHE_DIR"
CONVENTION = "sglang-simple-eval"
DOWNLOAD_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 5.0  # an unreachable host must fail fast, not after a minute
STOP = ("Question", "Assistant:", "<|separator|>")
# Mean len(question) + len(answer) over the 1,319 official test lines; used only when a dry run
# has no local copy of the data to measure.
MEAN_RECORD_CHARS = 533

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_GOLD = re.compile(r"####\s*(-?[0-9.,]+)")


@dataclass(frozen=True)
class Example:
    """One GSM8K line; ``line`` is its 0-based position in the file (stable across runs)."""

    line: int
    question: str
    answer: str


@dataclass(frozen=True)
class DataFile:
    """Where the data came from and what exactly it was (sha256), for the result."""

    path: Path
    sha256: str
    source: str  # "data-path", "cache", "download" or "bundled"

    @property
    def official(self) -> bool:
        return self.sha256 == OFFICIAL_SHA256


@dataclass(frozen=True)
class Question:
    """A scored question: its prompt (few-shot block + question) and its gold value."""

    example: Example
    prompt: str
    gold: Decimal


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cache_path() -> Path:
    """``$KVDOCTOR_CACHE_DIR/gsm8k/test.jsonl``, else ``~/.cache/kvdoctor/gsm8k/test.jsonl``."""
    root = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "kvdoctor"
    return Path(root) / "gsm8k" / "test.jsonl"


def bundled_copy() -> Path | None:
    """The MIT-licensed test split shipped in ``fixtures/gsm8k``, if intact (sha256-checked)."""
    path = Path(str(resources.files("kvdoctor_fixtures") / "gsm8k" / "test.jsonl"))
    return path if path.is_file() and sha256_of(path) == OFFICIAL_SHA256 else None


def resolve_data(data_path: Path | None, *, download: bool = True) -> DataFile | None:
    """Find the test set: ``--data-path``, the sha-checked cache, the bundled copy, a download.

    kvdoctor ships the byte-identical official split (sha256-checked), so a run never waits on
    the network for it; the official URL is fetched into the cache only when no bundled copy is
    installed. Returns None only when ``download`` is False and nothing usable is on disk (dry
    runs never touch the network).
    """
    if data_path is not None:
        if not data_path.is_file():
            raise InputError(f"--data-path {data_path}: no such file")
        return DataFile(data_path, sha256_of(data_path), "data-path")
    cached = cache_path()
    if cached.is_file() and sha256_of(cached) == OFFICIAL_SHA256:
        return DataFile(cached, OFFICIAL_SHA256, "cache")
    bundled = bundled_copy()
    if bundled is not None:
        return DataFile(bundled, OFFICIAL_SHA256, "bundled")
    if not download:
        return None
    _download(os.environ.get(URL_ENV) or OFFICIAL_URL, cached)
    return DataFile(cached, OFFICIAL_SHA256, "download")


def _download(url: str, dest: Path) -> None:
    """Fetch, verify sha256, then rename into place so no half-written copy is ever cached."""
    import httpx

    from kvdoctor.deploy import http

    shown_url = masked(url)  # $KVDOCTOR_GSM8K_URL may carry credentials: never echo the secret
    try:
        response = http.get(url, timeout_s=DOWNLOAD_TIMEOUT_S, connect_s=CONNECT_TIMEOUT_S, follow_redirects=True)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        error = redact(str(exc), url)
        raise DownloadError(
            f"cannot download GSM8K from {shown_url}: {error}; pass --data-path to an offline copy"
        ) from None
    body = response.content
    got = hashlib.sha256(body).hexdigest()
    if got != OFFICIAL_SHA256:
        raise InputError(f"GSM8K from {shown_url} has sha256 {got}, expected {OFFICIAL_SHA256}")
    try:
        with atomic_open(dest, "wb") as fh:
            fh.write(body)
    except OSError as exc:
        raise InputError(f"cannot cache GSM8K at {dest}: {exc}") from None


def load_examples(path: Path) -> list[Example]:
    """Every non-blank line as an example; anything else (bad UTF-8, JSON, fields) is bad input."""
    examples = []
    try:
        with path.open(encoding="utf-8") as fh:
            for number, raw in enumerate(fh):
                if raw.strip():
                    examples.append(_example(path, number + 1, raw, len(examples)))
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc})") from None
    return examples


def _example(path: Path, line: int, raw: str, index: int) -> Example:
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{line}: not a GSM8K record ({exc})") from None
    fields = [obj.get(key) if isinstance(obj, dict) else None for key in ("question", "answer")]
    if not all(isinstance(value, str) for value in fields):
        raise InputError(f"{path}:{line}: not a GSM8K record (needs string 'question' and 'answer' fields)")
    return Example(index, fields[0], fields[1])


def shot_block(examples: Sequence[Example]) -> str:
    """The few-shot prefix: each shot as ``Question: q\\nAnswer: a`` followed by a blank line."""
    return "".join(f"Question: {r.question}\nAnswer: {r.answer}\n\n" for r in examples)


def question_prompt(example: Example) -> str:
    return f"Question: {example.question}\nAnswer:"


def parse_number(text: str) -> Decimal | None:
    """The last number in ``text`` after removing commas (minus sign kept); None when absent."""
    found = _NUMBER.findall(text.replace(",", ""))
    if not found:
        return None
    return Decimal(found[-1])


def gold_value(answer: str) -> Decimal:
    """The ``#### N`` value of a GSM8K answer, commas removed."""
    match = _GOLD.search(answer)
    if match is None:
        raise InputError(f"GSM8K answer without a '#### N' line: {answer[-60:]!r}")
    try:
        return Decimal(match.group(1).replace(",", "").rstrip("."))
    except InvalidOperation as exc:
        raise InputError(f"GSM8K gold {match.group(1)!r} is not a number") from exc


def select(examples: Sequence[Example], num_shots: int, num_questions: int | None) -> list[Question]:
    """Shots = the first ``num_shots`` lines; scored = the next ``num_questions`` (never a shot).

    Asking for more questions than follow the shots is refused, never capped: a gate that scored
    1,314 questions when 5,000 were asked for would report less evidence than the user demanded.
    """
    if num_shots < 0:
        raise InputError("--num-shots must be >= 0")
    if num_questions is not None and num_questions < 1:
        raise InputError("--num-questions must be >= 1")
    if num_shots >= len(examples):
        raise InputError(f"--num-shots {num_shots} leaves no question in {len(examples)} lines")
    prefix = shot_block(examples[:num_shots])
    scored = examples[num_shots:]
    if num_questions is not None:
        if num_questions > len(scored):
            raise InputError(
                f"--num-questions {num_questions}: the data holds only {len(scored):,} questions after the "
                f"{num_shots} shots ({len(examples):,} lines); ask for at most {len(scored):,}"
            )
        scored = scored[:num_questions]
    return [Question(r, prefix + question_prompt(r), gold_value(r.answer)) for r in scored]


def estimated_prompt_chars(num_shots: int) -> int:
    """Prompt length without data at hand (dry runs): shots plus one question, from the mean."""
    return (num_shots + 1) * (MEAN_RECORD_CHARS + len("Question: \nAnswer: \n\n"))
