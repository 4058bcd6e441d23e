"""GSM8K data resolution, prompts and scoring (SGLang simple-eval convention)."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Iterator
from decimal import Decimal
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from kvdoctor._exceptions import InputError
from kvdoctor.deploy import http as gsm8k_http
from kvdoctor.pd import gsm8k
from tests.pd.helpers import GSM8K, invoke


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("She makes $18 a day.\n#### 18", Decimal(18)),
        ("The answer is 1,234,567.", Decimal(1234567)),  # thousands commas stripped
        ("It drops to -3 degrees", Decimal(-3)),  # the minus sign is kept
        ("about 2.5 hours, so 2.5", Decimal("2.5")),
        ("first 7 then 18.", Decimal(18)),  # the last number wins; a trailing period is not a decimal
    ],
)
def test_parse_number(text: str, value: Decimal) -> None:
    assert gsm8k.parse_number(text) == value


def test_parse_number_without_a_number_is_invalid() -> None:
    assert gsm8k.parse_number("I do not know.") is None


def test_gold_values_of_the_real_file() -> None:
    records = gsm8k.load_examples(GSM8K)
    assert len(records) == 1319
    assert gsm8k.gold_value(records[0].answer) == 18
    assert gsm8k.gold_value(records[489].answer) == -10  # a negative gold
    assert gsm8k.gold_value(records[146].answer) > 999  # a gold written with a comma


def test_select_excludes_the_shots_from_scoring() -> None:
    records = gsm8k.load_examples(GSM8K)
    questions = gsm8k.select(records, num_shots=10, num_questions=200)
    assert [q.example.line for q in questions] == list(range(10, 210))
    prompt = questions[0].prompt
    assert prompt.startswith(f"Question: {records[0].question}\nAnswer: {records[0].answer}\n\n")
    assert prompt.count("Question: ") == 11
    assert prompt.endswith(f"Question: {records[10].question}\nAnswer:")


def test_select_refuses_more_questions_than_follow_the_shots_and_rejects_nonsense() -> None:
    records = gsm8k.load_examples(GSM8K)
    assert len(gsm8k.select(records, 5, 1314)) == 1314  # every question after the shots: allowed
    with pytest.raises(InputError, match="holds only 1,314 questions after the 5 shots"):
        gsm8k.select(records, 5, 1315)  # once capped silently at 1,314
    with pytest.raises(InputError):
        gsm8k.select(records, 1319, 1)
    with pytest.raises(InputError):
        gsm8k.select(records, 5, 0)


def test_data_path_is_used_and_hashed() -> None:
    data = gsm8k.resolve_data(GSM8K)
    assert data is not None and data.official and data.source == "data-path"


def test_missing_data_path_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        gsm8k.resolve_data(tmp_path / "nope.jsonl")


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """A local HTTP server for the download tests (the internet is never used), on an install
    without the bundled copy (else it would be used and nothing downloaded)."""
    monkeypatch.setattr(gsm8k, "bundled_copy", lambda: None)
    root = tmp_path / "www"
    root.mkdir()
    (root / "test.jsonl").write_bytes(GSM8K.read_bytes())
    (root / "bad.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')

    class Quiet(SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def test_download_once_into_the_cache(
    served: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, root = served
    monkeypatch.setenv(gsm8k.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(gsm8k.URL_ENV, f"{url}/test.jsonl")
    first = gsm8k.resolve_data(None)
    assert first is not None and first.source == "download" and first.official
    (root / "test.jsonl").unlink()  # a second resolution must not need the network
    second = gsm8k.resolve_data(None)
    assert second is not None and second.source == "cache" and second.path == first.path


def test_download_with_wrong_sha_is_refused_and_not_cached(
    served: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = served
    monkeypatch.setenv(gsm8k.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(gsm8k.URL_ENV, f"{url}/bad.jsonl")
    with pytest.raises(InputError, match="sha256"):
        gsm8k.resolve_data(None)
    assert not list((tmp_path / "cache").rglob("*"))


def test_corrupt_cache_is_replaced(served: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, _ = served
    monkeypatch.setenv(gsm8k.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(gsm8k.URL_ENV, f"{url}/test.jsonl")
    cached = gsm8k.cache_path()
    cached.parent.mkdir(parents=True)
    cached.write_text("truncated")
    data = gsm8k.resolve_data(None)
    assert data is not None and data.source == "download"
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == gsm8k.OFFICIAL_SHA256


def test_dry_run_resolution_never_downloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gsm8k.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(gsm8k.URL_ENV, "http://127.0.0.1:9/unreachable")
    data = gsm8k.resolve_data(None, download=False)
    assert data is not None and data.source == "bundled" and data.official
    assert not (tmp_path / "cache").exists()
    monkeypatch.setattr(gsm8k, "bundled_copy", lambda: None)
    assert gsm8k.resolve_data(None, download=False) is None


def test_bundled_copy_wins_over_the_network(
    served: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = served
    monkeypatch.undo()  # the bundled copy is installed again
    monkeypatch.setenv(gsm8k.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(gsm8k.URL_ENV, f"{url}/test.jsonl")  # would serve the same bytes
    data = gsm8k.resolve_data(None)
    assert data is not None and data.source == "bundled" and data.official
    assert not (tmp_path / "cache").exists()  # nothing was downloaded


def test_offline_without_a_bundled_copy_names_the_way_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gsm8k.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(gsm8k.URL_ENV, "http://127.0.0.1:9/unreachable")
    monkeypatch.setattr(gsm8k, "bundled_copy", lambda: None)
    with pytest.raises(InputError, match="pass --data-path"):
        gsm8k.resolve_data(None)


def test_download_has_a_short_connect_timeout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, object] = {}

    def fake_get(url: str, **kwargs: object) -> object:
        seen.update(kwargs)
        raise httpx.ConnectTimeout("no route")

    monkeypatch.setattr(gsm8k_http, "get", fake_get)
    with pytest.raises(gsm8k.DownloadError):
        gsm8k._download("http://192.0.2.1/test.jsonl", tmp_path / "t.jsonl")
    assert seen["connect_s"] == gsm8k.CONNECT_TIMEOUT_S <= 10


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"\xff\xfe\x00q", "not UTF-8"),
        (b'{"question": 1, "answer": "#### 1"}\n', "string"),
        (b'{"question": "q", "answer": null}\n', "string"),
        (b"[1, 2]\n", "string"),
        (b"{not json\n", "not a GSM8K record"),
    ],
    ids=["not-utf8", "int-question", "null-answer", "list", "not-json"],
)
def test_bad_data_file_is_an_input_error(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(InputError, match=match):
        gsm8k.load_examples(path)


def test_cached_download_is_readable_by_others(
    served: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = served
    monkeypatch.setenv(gsm8k.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(gsm8k.URL_ENV, f"{url}/test.jsonl")
    old = os.umask(0o022)
    try:
        data = gsm8k.resolve_data(None)
    finally:
        os.umask(old)
    assert data is not None and stat.S_IMODE(data.path.stat().st_mode) == 0o644


def test_a_tampered_bundled_copy_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "pkg" / "gsm8k"
    fake.mkdir(parents=True)
    (fake / "test.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')
    monkeypatch.setattr(gsm8k.resources, "files", lambda _pkg: tmp_path / "pkg")
    assert gsm8k.bundled_copy() is None


@pytest.mark.parametrize(
    ("name", "says"),
    [("missing.jsonl", "cannot download GSM8K from"), ("bad.jsonl", "has sha256")],
    ids=["http-404", "wrong-sha"],
)
def test_a_download_url_with_credentials_never_echoes_the_password(
    served: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, says: str
) -> None:
    """$KVDOCTOR_GSM8K_URL may carry credentials; the error names the URL (and httpx's 404 message
    quotes it again) with the password masked, through the real CLI."""
    url, _ = served
    secret_url = url.replace("http://", "http://alice:s3cret@") + f"/{name}"
    monkeypatch.setenv(gsm8k.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(gsm8k.URL_ENV, secret_url)
    run = invoke(["pd-eval", "m", "--output-dir", str(tmp_path / "out")])
    assert run.exit_code == 2, run.output
    assert run.stderr.count("\n") == 1 and says in run.stderr
    assert "alice:***@127.0.0.1" in run.stderr and "s3cret" not in run.stdout + run.stderr
