"""An OpenAI-compatible chat-completions server on 127.0.0.1 for tests.

``reply(request_json) -> (status, body[, headers])`` decides each answer,
so tests script good replies and failures alike: the body is a dict (sent as
JSON), a str, or raw bytes (malformed JSON, invalid UTF-8); a reply function
may sleep to hang past the client's timeout.  ``faults`` builds the
fault-injection replies.
"""
from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support import StandInEvaluator


def completion(text: str, model: str = "scripted") -> dict:
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150},
    }


def truncated(text: str) -> dict:
    """A completion cut off at max_tokens."""
    body = completion(text)
    body["choices"][0]["finish_reason"] = "length"
    return body


def parent_source(prompt: str) -> str:
    """The parent kernel quoted in one of our mutation prompts."""
    section = prompt.split("## Current kernel", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def halve_warps(request: dict) -> tuple[int, dict]:
    """A good scripted reply: the parent with NUM_WARPS changed, in a fenced block."""
    prompt = request["messages"][-1]["content"]
    if "## Current kernel" not in prompt:  # the start-up check
        return 200, completion("OK")
    source = parent_source(prompt)
    match = re.search(r"^NUM_WARPS = (\d+)", source, re.MULTILINE)
    warps = int(match.group(1)) if match else 4
    new = 2 if warps != 2 else 8
    source = re.sub(r"^NUM_WARPS = \d+", f"NUM_WARPS = {new}", source, flags=re.MULTILINE)
    return 200, completion(f"Here is a faster kernel:\n```python\n{source}```\nIt uses {new} warps.")


class ScriptedLLMServer:
    def __init__(self, reply=halve_warps):
        self.reply = reply
        self.requests: list[dict] = []
        self.authorizations: list[str | None] = []  # each request's Authorization header
        self.held = self.peak = 0  # requests being answered now, and the most at once
        self._held_lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                server.requests.append(body)
                server.authorizations.append(self.headers.get("Authorization"))
                with server._held_lock:
                    server.held += 1
                    server.peak = max(server.peak, server.held)
                try:
                    status, payload, *headers = server.reply(body)
                finally:
                    with server._held_lock:
                        server.held -= 1
                if isinstance(payload, bytes):
                    data = payload
                else:
                    data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                for name, value in (headers[0] if headers else {}).items():
                    self.send_header(name, str(value))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints do
            disable_nagle_algorithm = True  # headers and body go out in two writes

            def log_message(self, *args):
                pass

        ThreadingHTTPServer.request_queue_size = 128  # many clients connect at once
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.handle_error = lambda *args: None  # a client that timed out closed its connection
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> "ScriptedLLMServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


_KERNEL = re.compile(r"## (?:Current|Failed) kernel.*?```python\n(.*?)```", re.DOTALL)


class Variants:
    """Good scripted replies that are all different: the prompt's kernel with one more
    module constant, as a whole module or (for a diff prompt) a SEARCH/REPLACE edit."""

    def __init__(self, latency_s: float = 0.0):
        self.latency_s = latency_s
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self, request: dict):
        if self.latency_s:
            time.sleep(self.latency_s)
        prompt = request["messages"][-1]["content"]
        match = _KERNEL.search(prompt)
        if match is None:  # the start-up check
            return 200, completion("OK")
        with self._lock:
            self.count += 1
            n = self.count
        line = f"VARIANT_{n} = {n}\n\n\nclass ModelNew(nn.Module):"
        if "<<<<<<< SEARCH" in prompt:
            return 200, completion(f"<<<<<<< SEARCH\nclass ModelNew(nn.Module):\n=======\n{line}\n>>>>>>> REPLACE\n")
        source = match.group(1).replace("class ModelNew(nn.Module):", line)
        return 200, completion(f"Here it is:\n```python\n{source}```\n")


class Gate:
    """Holds every reply until ``n`` requests are being answered at once (the first time), then answers
    with ``good``: a test of a limit of ``n`` requests in flight sees the limit reached however fast or
    loaded the machine is.  (More than ``n`` at once, a broken limit, shows while replies take ``good``'s
    latency; ``wait_s`` only bounds a wait for ``n`` requests that never come.)"""

    def __init__(self, n: int, good=None, wait_s: float = 60.0):
        self.n, self.good, self.wait_s = n, good or Variants(), wait_s
        self.opened = False
        self._answering = 0
        self._cond = threading.Condition()

    def __call__(self, request: dict):
        with self._cond:
            self._answering += 1
            if self._answering >= self.n:
                self.opened = True
                self._cond.notify_all()
            self._cond.wait_for(lambda: self.opened, timeout=self.wait_s)
        try:
            return self.good(request)
        finally:
            with self._cond:
                self._answering -= 1


class Faults:
    """Fault injection: the i-th request (from 0) gets ``plan[i % len(plan)]``; "ok" goes to ``good``.

    Kinds: 429 (with Retry-After: 0), 500, hang (past ``hang_s``), malformed (JSON),
    truncated, empty, non_utf8.  ``injected`` counts the faults sent.
    """

    def __init__(self, plan: list[str], good=None, hang_s: float = 2.0):
        self.plan, self.good, self.hang_s = plan, good or Variants(), hang_s
        self.requests = 0
        self.injected: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, request: dict):
        with self._lock:
            self.requests += 1
            kind = self.plan[(self.requests - 1) % len(self.plan)]
            if kind != "ok":
                self.injected[kind] = self.injected.get(kind, 0) + 1
        if kind == "ok":
            return self.good(request)
        if kind == "429":
            return 429, {"error": {"message": "rate limited", "type": "rate_limit"}}, {"Retry-After": "0"}
        if kind == "500":
            return 500, {"error": {"message": "internal error"}}
        if kind == "hang":
            time.sleep(self.hang_s)
            return 200, completion("too late")
        if kind == "malformed":
            return 200, b'{"id": "x", "choices": [{"message": '
        if kind == "truncated":
            return 200, truncated("```python\nclass ModelNew(nn.Module):\n    def forward(self")
        if kind == "empty":
            return 200, completion("")
        if kind == "non_utf8":
            return 200, b'{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": ' \
                        b'{"role": "assistant", "content": "\xff\xfe bad bytes"}, "finish_reason": "stop"}]}'
        raise ValueError(f"unknown fault {kind}")


class TrivialEvaluator(StandInEvaluator):
    """An instant stand-in for the evaluator: a child whose single ``VARIANT_n`` constant has an
    odd ``n`` fails to compile (when ``failing``); every other program is correct, with a speedup
    drawn from its hash."""

    def __init__(self, failing: bool = False):
        self.failing = failing

    def score(self, task_name: str, task_source: str, source: str):
        from evaluator.result import EvalResult, Status
        from evo.core.kernel_source import normalized_hash

        variants = [int(n) for n in re.findall(r"^VARIANT_(\d+) =", source, re.MULTILINE)]
        if self.failing and len(variants) == 1 and variants[0] % 2:
            return EvalResult(status=Status.COMPILE_ERROR, reason=f"VARIANT_{variants[0]} does not compile",
                              error="Traceback (most recent call last):\nCompilationError: at 1:0", device="fake")
        speedup = 0.5 + int(normalized_hash(source)[:6], 16) % 1000 / 500
        return EvalResult(status=Status.CORRECT, speedup=speedup, device="fake")
