"""The LLM client against OpenAI-compatible servers on 127.0.0.1: retries, faults, limits, keys.

Every test runs on both transports (litellm, and plain HTTP), so they behave the same.
"""
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from evo.core.errors import LLMError
from operators import LLMClient
from tests.support.llm_server import Faults, Gate, ScriptedLLMServer, completion

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(params=["litellm", "http"], autouse=True)
def transport(request):
    return request.param


@pytest.fixture
def client(transport):
    def make(server, **kw):
        kw = {"timeout_s": 5, "retries": 0, "backoff_s": 0.01, "transport": transport, **kw}
        return LLMClient(model="openai/scripted", api_base=server.api_base, **kw)
    return make


@pytest.mark.slow
def test_429_is_retried_after_the_servers_retry_after(client):
    replies = iter([(429, {"error": {"message": "slow down"}}, {"Retry-After": "1"}), (200, completion("done"))])
    with ScriptedLLMServer(lambda request: next(replies)) as server:
        reply = client(server, retries=2).complete(HI)
    assert reply.text == "done" and [c["attempt"] for c in reply.calls] == [0, 1]
    assert "RateLimitError" in reply.calls[0]["error"] and "retrying in 1.0 s" in reply.calls[0]["error"]
    assert reply.calls[1]["error"] == "" and reply.calls[1]["prompt_tokens"] == 100


@pytest.mark.slow
def test_server_errors_and_hangs_are_retried_with_backoff_until_the_retries_run_out(client):
    faults = Faults(["500", "hang", "500"], hang_s=3)
    with ScriptedLLMServer(faults) as server:
        reply = client(server, retries=2, timeout_s=1).complete(HI)
    assert reply.text is None and len(reply.calls) == 3 and faults.requests == 3
    errors = [c["error"] for c in reply.calls]
    assert "InternalServerError" in errors[0] and "retrying" in errors[0]
    assert "Timeout" in errors[1] or "timeout" in errors[1].lower()
    assert reply.error == errors[2] and "retrying" not in errors[2]


@pytest.mark.parametrize("fault, message, attempts", [
    # litellm reports a body it cannot parse as a server error: retried like one
    ("malformed", "Expecting value", 2), ("non_utf8", "can't decode", 2),
    # a well-formed reply that is unusable is not a transient failure
    ("truncated", "truncated", 1), ("empty", "empty completion", 1),
])
def test_bad_replies_are_failed_calls_not_exceptions(fault, message, attempts, client):
    faults = Faults([fault])
    with ScriptedLLMServer(faults) as server:
        reply = client(server, retries=1).complete(HI)
    assert reply.text is None and message in reply.error
    assert len(reply.calls) == attempts == faults.requests and all(c["error"] for c in reply.calls)


def test_enormous_and_non_utf8_text_is_bounded_and_cleaned(client):
    with ScriptedLLMServer(lambda request: (200, completion("x" * 5000))) as server:
        reply = client(server, max_reply_chars=1000).complete(HI)
    assert reply.text is None and "exceeds llm.max_reply_chars" in reply.error
    assert len(reply.calls[0]["response"]) == 1000
    with ScriptedLLMServer(lambda request: (200, completion("ok \ud800 \x00"))) as server:
        reply = client(server).complete(HI)
    assert reply.text.startswith("ok \ufffd") and reply.text.endswith(" \ufffd") and reply.text.encode("utf-8")


def test_a_reply_body_past_its_bound_is_a_failed_call_not_read_to_the_end(client, transport, monkeypatch):
    if transport != "http":
        pytest.skip("litellm reads the body itself")
    import operators.llm_transport as llm_transport

    monkeypatch.setattr(llm_transport, "MAX_REPLY_BYTES", 1 << 20)
    with ScriptedLLMServer(lambda request: (200, completion("x" * (2 << 20)))) as server:
        reply = client(server, retries=2).complete(HI)
    assert reply.text is None and "past 1 MiB" in reply.error and len(reply.calls) == 1
    with ScriptedLLMServer(lambda request: (200, completion("x" * (1 << 19)))) as server:
        assert client(server, max_reply_chars=1 << 20).complete(HI).text == "x" * (1 << 19)


def test_requests_in_flight_are_bounded_by_max_in_flight(client):
    def slow_ok(request):
        time.sleep(0.2)  # while three are answered, a fourth request would be seen
        return 200, completion("ok")

    with ScriptedLLMServer(Gate(3, slow_ok)) as server:
        c = client(server, max_in_flight=3)
        with ThreadPoolExecutor(9) as pool:
            replies = list(pool.map(lambda _: c.complete(HI), range(9)))
    assert all(r.text == "ok" for r in replies) and server.peak == 3


def test_prices_give_dollars_per_call(client):
    with ScriptedLLMServer(lambda request: (200, completion("ok"))) as server:
        reply = client(server, prices={"openai/scripted": [2.0, 10.0]}).complete(HI)
    assert reply.calls[0]["cost_usd"] == pytest.approx((100 * 2.0 + 50 * 10.0) / 1e6)


def test_api_key_from_env_or_file_is_sent_but_never_recorded(monkeypatch, tmp_path, client):
    seen = []

    def reply(request):
        seen.append(request)
        return 401, {"error": {"message": "Incorrect API key provided: sk-secret-123"}}

    with ScriptedLLMServer(reply) as server:
        c = client(server, api_key_env="EVO_TEST_KEY")
        missing = c.complete(HI)
        assert missing.text is None and "EVO_TEST_KEY" in missing.error and not seen
        monkeypatch.setenv("EVO_TEST_KEY", "sk-secret-123")
        failed = c.complete(HI)
        key_file = tmp_path / "key"
        key_file.write_text("sk-secret-123\n")
        from_file = client(server, api_key_file=str(key_file)).complete(HI)
        assert server.authorizations == ["Bearer sk-secret-123"] * 2
    for r in (failed, from_file):
        assert r.text is None and "***" in r.error and "sk-secret-123" not in repr(r)
    assert "sk-secret-123" not in repr(vars(c))
    with pytest.raises(LLMError, match="not both"):
        LLMClient(model="m", api_key_env="A", api_key_file="/x")


def test_unreachable_endpoint_fails_the_check(transport):
    c = LLMClient(model=["openai/a", "openai/b"], api_base="http://127.0.0.1:9/v1", timeout_s=5, retries=0,
                  transport=transport)
    with pytest.raises(LLMError, match="openai/a .*not usable"):
        c.check()


def test_the_client_pickles_without_its_event_loop(client):
    import pickle

    with ScriptedLLMServer(lambda request: (200, completion("ok"))) as server:
        c = client(server)
        assert c.complete(HI).text == "ok"
        copy = pickle.loads(pickle.dumps(c))
        assert copy._loop is None and copy.complete(HI).text == "ok"


def test_dropped_connections_are_retried_and_the_model_is_named_as_the_server_knows_it(client):
    replies = iter([ConnectionResetError("dropped"), (200, completion("done"))])

    def reply(request):
        outcome = next(replies)
        if isinstance(outcome, Exception):
            raise outcome  # the server closes the connection without a reply
        return outcome

    with ScriptedLLMServer(reply) as server:
        reply = client(server, retries=1).complete(HI)
        assert reply.text == "done" and len(reply.calls) == 2 and "retrying" in reply.calls[0]["error"]
        assert [r["model"] for r in server.requests] == ["scripted", "scripted"]  # the openai/ prefix is litellm's


def test_retry_after_ms_is_honoured(client):
    replies = iter([(429, {"error": {"message": "slow"}}, {"retry-after-ms": "300"}), (200, completion("done"))])
    with ScriptedLLMServer(lambda request: next(replies)) as server:
        reply = client(server, retries=1, backoff_s=30).complete(HI)
    assert reply.text == "done" and "retrying in 0.3 s" in reply.calls[0]["error"]


def test_unpriced_models_cost_what_litellms_cost_map_says_or_nothing(client):
    import litellm

    with ScriptedLLMServer(lambda request: (200, completion("ok", model=request["model"]))) as server:
        known = LLMClient(model="openai/gpt-4o-mini", api_base=server.api_base, timeout_s=5, retries=0,
                          transport=client(server).transport).complete(HI)
        unknown = client(server).complete(HI, model="openai/never-priced")  # (other tests register prices)
    expected = sum(litellm.cost_per_token(model="openai/gpt-4o-mini", prompt_tokens=100, completion_tokens=50))
    assert expected > 0 and known.calls[0]["cost_usd"] == pytest.approx(expected)
    assert unknown.calls[0]["cost_usd"] == 0


@pytest.mark.parametrize("transport", ["auto"])  # overrides the autouse fixture: one run is enough
@pytest.mark.parametrize("models, api_base, chosen", [
    (["openai/a"], "http://h/v1", "http"), (["hosted_vllm/org/m", "openai/b"], "http://h/v1", "http"),
    (["openai/a"], None, "litellm"), (["ollama/llama3"], "http://h", "litellm"),
    (["openai/a", "anthropic/claude"], "http://h/v1", "litellm"),
])
def test_auto_takes_plain_http_for_openai_compatible_endpoints(models, api_base, chosen, transport):
    assert LLMClient(model=models, api_base=api_base, transport=transport).transport == chosen


@pytest.mark.parametrize("transport", ["auto"])
def test_bad_transports_are_refused(transport):
    with pytest.raises(LLMError, match="llm.transport must be auto, litellm or http"):
        LLMClient(model="openai/a", transport="grpc")
    with pytest.raises(LLMError, match="needs llm.api_base"):
        LLMClient(model="openai/a", transport="http")


@pytest.mark.parametrize("transport", ["http"])
def test_the_http_transport_never_imports_litellm_for_priced_models(transport):
    import subprocess
    import sys

    code = ("import sys; from operators import LLMClient; from tests.support.llm_server import ScriptedLLMServer, completion\n"
            "with ScriptedLLMServer(lambda r: (200, completion('ok'))) as s:\n"
            "    c = LLMClient(model='openai/m', api_base=s.api_base, prices={'openai/m': [1, 2]})\n"
            "    assert c.complete([{'role': 'user', 'content': 'hi'}]).text == 'ok'\n"
            "assert 'litellm' not in sys.modules, 'litellm was imported'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Unclosed" not in out.stderr  # the process's HTTP session is closed at exit
