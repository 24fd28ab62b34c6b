"""An OpenAI-compatible chat-completions server on 127.0.0.1 for tests.

``reply(request_json) -> (status, body_dict_or_text)`` decides each answer,
so tests script good replies and failures alike.
"""
from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def completion(text: str, model: str = "scripted") -> dict:
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150},
    }


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
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                server.requests.append(body)
                status, payload = server.reply(body)
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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
