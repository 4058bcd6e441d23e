"""Request and reply shapes of SGLang's two text APIs, and how failures are classified."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
import pytest

from kvdoctor.deploy import client

SAMPLING = client.Sampling(max_new_tokens=512, stop=("Question", "Assistant:"), model="m")


def test_completions_request_is_greedy_with_stops() -> None:
    path, body = client.request_for("Q: 1+1\nA:", SAMPLING)
    assert path == "/v1/completions"
    assert body == {
        "model": "m",
        "prompt": "Q: 1+1\nA:",
        "temperature": 0.0,
        "max_tokens": 512,
        "stop": ["Question", "Assistant:"],
    }


def test_generate_request_is_greedy_with_stops() -> None:
    generate = client.Sampling(512, ("Question",), "m", api="generate")
    path, body = client.request_for("p", generate)
    assert path == "/generate"
    assert body == {"text": "p", "sampling_params": {"temperature": 0.0, "max_new_tokens": 512, "stop": ["Question"]}}


def test_replies_of_both_apis() -> None:
    generate = {"text": " 18", "meta_info": {"completion_tokens": 3, "finish_reason": {"type": "stop", "matched": "Q"}}}
    assert client.parse_reply("generate", generate) == (" 18", 3, "stop")
    completions = {"choices": [{"text": " 18", "finish_reason": "length"}], "usage": {"completion_tokens": 512}}
    assert client.parse_reply("completions", completions) == (" 18", 512, "length")


def run_one(handler: httpx.MockTransport) -> client.Completion:
    async def go() -> client.Completion:
        async with httpx.AsyncClient(transport=handler, base_url="http://r") as http:
            return await client.complete(http, "p", SAMPLING)

    return asyncio.run(go())


@pytest.mark.parametrize(
    "body",
    [
        b"<html>bad gateway</html>",
        b"[1, 2]",
        b'{"choices": null}',
        b'{"choices": [1]}',
        b'{"choices": [{"text": 5}]}',
        b"\xff\xfe",
    ],
    ids=["html", "list", "null-choices", "int-choice", "int-text", "not-utf8"],
)
def test_malformed_200_reply_is_a_per_question_error(body: bytes) -> None:
    done = run_one(httpx.MockTransport(lambda r: httpx.Response(200, content=body)))
    assert done.text == "" and done.error is not None
    assert done.error.startswith("malformed reply from POST /v1/completions")


def test_generate_reply_without_text_is_malformed() -> None:
    with pytest.raises(client.MalformedReply):
        client.parse_reply("generate", {"meta_info": None})
    assert client.parse_reply("generate", {"text": "x", "meta_info": [1]}) == ("x", None, None)


def test_client_error_scores_as_unanswered(monkeypatch: pytest.MonkeyPatch) -> None:
    done = run_one(httpx.MockTransport(lambda r: httpx.Response(400, text="prompt too long")))
    assert done.text == "" and done.error == "HTTP 400: prompt too long"


def test_server_errors_are_retried_then_fail_the_deployment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client, "RETRY_BACKOFF_S", 0.0)
    calls: list[int] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) < 3:
            return httpx.Response(502, text="bad gateway")
        reply = {"choices": [{"text": " 4", "finish_reason": "stop"}]}
        return httpx.Response(200, text=json.dumps(reply))

    assert run_one(httpx.MockTransport(flaky)).text == " 4" and len(calls) == 3
    with pytest.raises(client.RequestFailed, match="failed 3 times; last: HTTP 503"):
        run_one(httpx.MockTransport(lambda r: httpx.Response(503, text="down")))


def wire(monkeypatch: pytest.MonkeyPatch, handler: Callable[[httpx.Request], httpx.Response]) -> None:
    """Keep complete_all's real clients (limits, shards, timeouts) but swap their wire."""
    real = client.make_client

    def mocked(base_url: str, connections: int, timeout: float) -> httpx.AsyncClient:
        made = real(base_url, connections, timeout)
        made._transport = httpx.MockTransport(handler)
        return made

    monkeypatch.setattr(client, "make_client", mocked)


def test_results_keep_prompt_order(monkeypatch: pytest.MonkeyPatch) -> None:
    def echo(request: httpx.Request) -> httpx.Response:
        prompt = json.loads(request.content)["prompt"]
        return httpx.Response(200, json={"choices": [{"text": prompt, "finish_reason": "stop"}]})

    wire(monkeypatch, echo)
    prompts = [f"p{i}" for i in range(50)]
    seen: list[int] = []
    done = asyncio.run(
        client.complete_all(
            "http://r", prompts, SAMPLING, parallel=20, request_timeout_s=5, on_done=lambda i, _: seen.append(i)
        )
    )
    assert [d.text for d in done] == prompts
    assert sorted(seen) == list(range(50))


def test_watchdog_stops_a_stalled_eval(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    wire(monkeypatch, refused)
    monkeypatch.setattr(client, "RETRY_BACKOFF_S", 60.0)  # requests stall in their retries

    class Died(Exception):
        pass

    def watchdog() -> None:
        raise Died("decode exited")

    with pytest.raises(Died):
        asyncio.run(
            client.complete_all("http://r", ["p"] * 4, SAMPLING, parallel=2, request_timeout_s=5, watchdog=watchdog)
        )
