"""The LLM client against OpenAI-compatible servers on 127.0.0.1: retries, faults, limits, keys."""
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from evo.errors import LLMError
from operators import LLMClient
from tests.llm_server import Faults, ScriptedLLMServer, completion

HI = [{"role": "user", "content": "hi"}]


def client(server, **kw):
    kw = {"timeout_s": 5, "retries": 0, "backoff_s": 0.01, **kw}
    return LLMClient(model="openai/scripted", api_base=server.api_base, **kw)


def test_429_is_retried_after_the_servers_retry_after():
    replies = iter([(429, {"error": {"message": "slow down"}}, {"Retry-After": "1"}), (200, completion("done"))])
    with ScriptedLLMServer(lambda request: next(replies)) as server:
        reply = client(server, retries=2).complete(HI)
    assert reply.text == "done" and [c["attempt"] for c in reply.calls] == [0, 1]
    assert "RateLimitError" in reply.calls[0]["error"] and "retrying in 1.0 s" in reply.calls[0]["error"]
    assert reply.calls[1]["error"] == "" and reply.calls[1]["prompt_tokens"] == 100


def test_server_errors_and_hangs_are_retried_with_backoff_until_the_retries_run_out():
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
def test_bad_replies_are_failed_calls_not_exceptions(fault, message, attempts):
    faults = Faults([fault])
    with ScriptedLLMServer(faults) as server:
        reply = client(server, retries=1).complete(HI)
    assert reply.text is None and message in reply.error
    assert len(reply.calls) == attempts == faults.requests and all(c["error"] for c in reply.calls)


def test_enormous_and_non_utf8_text_is_bounded_and_cleaned():
    with ScriptedLLMServer(lambda request: (200, completion("x" * 5000))) as server:
        reply = client(server, max_reply_chars=1000).complete(HI)
    assert reply.text is None and "exceeds llm.max_reply_chars" in reply.error
    assert len(reply.calls[0]["response"]) == 1000
    with ScriptedLLMServer(lambda request: (200, completion("ok \ud800 \x00"))) as server:
        reply = client(server).complete(HI)
    assert reply.text.startswith("ok \ufffd") and reply.text.endswith(" \ufffd") and reply.text.encode("utf-8")


def test_requests_in_flight_are_bounded_by_max_in_flight():
    state = {"now": 0, "most": 0}
    lock = threading.Lock()

    def reply(request):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(0.2)
        with lock:
            state["now"] -= 1
        return 200, completion("ok")

    with ScriptedLLMServer(reply) as server:
        c = client(server, max_in_flight=3)
        with ThreadPoolExecutor(9) as pool:
            replies = list(pool.map(lambda _: c.complete(HI), range(9)))
    assert all(r.text == "ok" for r in replies) and state["most"] == 3


def test_prices_give_dollars_per_call():
    with ScriptedLLMServer(lambda request: (200, completion("ok"))) as server:
        reply = client(server, prices={"openai/scripted": [2.0, 10.0]}).complete(HI)
    assert reply.calls[0]["cost_usd"] == pytest.approx((100 * 2.0 + 50 * 10.0) / 1e6)


def test_api_key_from_env_or_file_is_sent_but_never_recorded(monkeypatch, tmp_path):
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
    for r in (failed, from_file):
        assert r.text is None and "***" in r.error and "sk-secret-123" not in repr(r)
    assert "sk-secret-123" not in repr(vars(c))
    with pytest.raises(LLMError, match="not both"):
        LLMClient(model="m", api_key_env="A", api_key_file="/x")


def test_unreachable_endpoint_fails_the_check():
    c = LLMClient(model=["openai/a", "openai/b"], api_base="http://127.0.0.1:9/v1", timeout_s=5, retries=0)
    with pytest.raises(LLMError, match="openai/a .*not usable"):
        c.check()


def test_the_client_pickles_without_its_event_loop():
    import pickle

    with ScriptedLLMServer(lambda request: (200, completion("ok"))) as server:
        c = client(server)
        assert c.complete(HI).text == "ok"
        copy = pickle.loads(pickle.dumps(c))
        assert copy._loop is None and copy.complete(HI).text == "ok"
