"""A local, scripted stand-in for the Messages API upstream (POST /v1/messages).

Only the paid model is replaced; everything of ours stays real. A test scripts the next responses
and reads back every request the runner made:

    model.script([
        tool_use("bash", {"command": "echo hi"}),
        text("done"),
    ])
    ...
    model.requests[-1]["body"]["messages"]   # what the runner sent

Responses (dicts, built with the helpers below) are served in order, one per request:

* ``text(...)`` / ``tool_use(...)`` / ``message(content, stop_reason)``: a 200 Message;
* ``error(status, ...)``: an error envelope with that status (500, 529, 429 …);
* any of them with ``delay=seconds``: the server sleeps first (to test interrupts, timeouts);
* a callable ``fn(request_body) -> response``: decided per request.

When the script runs out, ``default`` (a short end_turn text) is served. A request with
``"stream": true`` gets the same response as Messages-API SSE events.

Run alone, it is the offline model upstream for `make run` (`make scripted-model`, README):

    python -m tests.scripted_model --port 8099    # then ANTHROPIC_BASE_URL=http://127.0.0.1:8099

It then answers with ``offline``: a message line `bash: <command>` becomes a bash tool use (and
`<tool name>: <JSON input>` a use of any other tool the request offers), the tools' results are
quoted back as the answer, and anything else is echoed ("(scripted model) You said: ..."). It is a
stand-in for the paid model that shows every tool path, not a model.
"""

import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def message(
    content: list[dict],
    stop_reason: str = "end_turn",
    *,
    delay: float = 0.0,
    usage: dict | None = None,
    stop_details: dict | None = None,
) -> dict:
    return {
        "kind": "message",
        "content": content,
        "stop_reason": stop_reason,
        "stop_details": stop_details,
        "delay": delay,
        "usage": usage or {"input_tokens": 10, "output_tokens": 5},
    }


def text(value: str, *, delay: float = 0.0, stop_reason: str = "end_turn") -> dict:
    return message([{"type": "text", "text": value}], stop_reason, delay=delay)


def tool_use(
    name: str, tool_input: dict, *, text_before: str | None = None, delay: float = 0.0, tool_id: str | None = None
) -> dict:
    content = [{"type": "text", "text": text_before}] if text_before else []
    content.append(
        {"type": "tool_use", "id": tool_id or f"toolu_{uuid.uuid4().hex[:20]}", "name": name, "input": tool_input}
    )
    return message(content, "tool_use", delay=delay)


def tool_uses(calls: list[tuple[str, dict]], *, delay: float = 0.0) -> dict:
    content = [
        {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}", "name": name, "input": tool_input}
        for name, tool_input in calls
    ]
    return message(content, "tool_use", delay=delay)


def request_system(body: dict) -> str:
    """A Messages request's system prompt as one string (it may come as text blocks)."""
    system = body.get("system") or ""
    return system if isinstance(system, str) else "".join(block.get("text", "") for block in system)


def request_user_texts(body: dict) -> list[str]:
    """The text of every user message's text blocks in a Messages request, in order."""
    texts = []
    for message in body.get("messages") or []:
        if message["role"] != "user":
            continue
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts += [block.get("text", "") for block in blocks if block.get("type") == "text"]
    return texts


def _last_user_blocks(body: dict) -> list[dict]:
    for item in reversed(body.get("messages") or []):
        if item.get("role") == "user":
            content = item.get("content")
            return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    return []


def _user_text(body: dict) -> str:
    """The request's last user text (the newest user message that has one)."""
    for item in reversed(body.get("messages") or []):
        if item.get("role") != "user":
            continue
        content = item.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        said = " ".join(block.get("text", "") for block in blocks if block.get("type") == "text").strip()
        if said:
            return said
    return ""


def echo(body: dict) -> dict:
    """A reply quoting the request's last user text."""
    said = _user_text(body)
    return text(f"(scripted model) You said: {said}" if said else "(scripted model) Hello.")


_TOOL_LINE = re.compile(r"^\s*([A-Za-z0-9_.\-]{1,128}):[ \t]*(.+?)\s*$")


def tool_calls_in(said: str, offered: set[str]) -> list[tuple[str, dict]]:
    """The tool uses a message asks for, one a line: `bash: <command>` for the bash tool, and
    `<tool name>: <JSON object>` for any other tool the request offers (MCP tools included, under
    the names they are offered by). Lines naming no offered tool are just text."""
    calls = []
    for line in said.splitlines():
        found = _TOOL_LINE.match(line)
        if found is None or found.group(1) not in offered:
            continue
        name, argument = found.groups()
        if name == "bash" and not argument.startswith("{"):
            calls.append((name, {"command": argument}))
            continue
        try:
            tool_input = json.loads(argument)
        except ValueError:
            continue
        if isinstance(tool_input, dict):
            calls.append((name, tool_input))
    return calls


def _result_text(block: dict) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content or [] if part.get("type") == "text")


def offline(body: dict) -> dict:
    """The offline model of `make scripted-model`: a stand-in for the paid model that follows
    instructions to the letter and understands nothing. A user message whose lines say
    `bash: <command>` (or `<tool name>: <JSON input>`) becomes those tool uses, when the request
    offers the tools; the tools' results are then quoted back as its answer. Anything else is
    echoed."""
    last = _last_user_blocks(body)
    results = [block for block in last if block.get("type") == "tool_result"]
    if results:
        lines = [("(error) " if block.get("is_error") else "") + _result_text(block).strip() for block in results]
        return text("(scripted model) The tools answered:\n" + "\n".join(lines))
    offered = {tool.get("name") for tool in body.get("tools") or [] if isinstance(tool, dict) and tool.get("name")}
    calls = tool_calls_in(_user_text(body), offered)
    if calls:
        return tool_uses(calls)
    return echo(body)


def error(
    status: int, error_type: str = "api_error", message_text: str = "scripted failure", *, delay: float = 0.0
) -> dict:
    return {"kind": "error", "status": status, "error_type": error_type, "message": message_text, "delay": delay}


class ScriptedModel:
    """A threaded HTTP server on 127.0.0.1 serving a per-test script. Thread-safe."""

    def __init__(self, default: dict | Callable | None = None, *, host: str = "127.0.0.1", port: int = 0):
        self.default = self._initial_default = default or text("(script exhausted)")
        self._lock = threading.Lock()
        self._script: list = []
        self.requests: list[dict] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode(errors="replace")}
                response = model._next(self.path, dict(self.headers), body)
                if callable(response):
                    response = response(body)
                if response.get("delay"):
                    time.sleep(response["delay"])
                if not self.path.split("?")[0].endswith("/v1/messages"):
                    return self._json(
                        404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}}
                    )
                if response["kind"] == "error":
                    envelope = {
                        "type": "error",
                        "error": {"type": response["error_type"], "message": response["message"]},
                    }
                    return self._json(response["status"], envelope, {"x-should-retry": "false"})
                payload = {
                    "id": f"msg_{uuid.uuid4().hex[:24]}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "scripted"),
                    "content": response["content"],
                    "stop_reason": response["stop_reason"],
                    "stop_sequence": None,
                    "stop_details": response.get("stop_details"),
                    "usage": response["usage"],
                }
                if body.get("stream"):
                    return self._stream(payload)
                return self._json(200, payload)

            def _json(self, status, payload, headers=None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_{uuid.uuid4().hex[:16]}")
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, payload):
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()

                def send(event, data):
                    self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()

                start = {
                    **payload,
                    "content": [],
                    "stop_reason": None,
                    "usage": {**payload["usage"], "output_tokens": 0},
                }
                send("message_start", {"type": "message_start", "message": start})
                for index, block in enumerate(payload["content"]):
                    if block["type"] == "text":
                        send(
                            "content_block_start",
                            {
                                "type": "content_block_start",
                                "index": index,
                                "content_block": {"type": "text", "text": ""},
                            },
                        )
                        words = block["text"].split(" ")
                        pieces = [word + " " for word in words[:-1]] + [words[-1]]
                        for piece in pieces[:-1]:  # several deltas, as a real stream sends
                            send(
                                "content_block_delta",
                                {
                                    "type": "content_block_delta",
                                    "index": index,
                                    "delta": {"type": "text_delta", "text": piece},
                                },
                            )
                        delta = {"type": "text_delta", "text": pieces[-1]}
                    elif "input" in block:  # tool_use and server_tool_use: the input as JSON deltas
                        send(
                            "content_block_start",
                            {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}},
                        )
                        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                    else:  # server tool results arrive whole in their start event, as the real API sends them
                        send(
                            "content_block_start",
                            {"type": "content_block_start", "index": index, "content_block": block},
                        )
                        delta = None
                    if delta is not None:
                        send("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
                    send("content_block_stop", {"type": "content_block_stop", "index": index})
                send(
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {
                            "stop_reason": payload["stop_reason"],
                            "stop_sequence": None,
                            "stop_details": payload["stop_details"],
                        },
                        "usage": {"output_tokens": payload["usage"]["output_tokens"]},
                    },
                )
                send("message_stop", {"type": "message_stop"})
                self.close_connection = True

        class Server(ThreadingHTTPServer):
            # Hundreds of turns connect at once (tests/sessions/test_fleet.py, bench/): the
            # default listen backlog of 5 would drop their SYNs and retry them a second later.
            request_queue_size = 1024

        self._server = Server((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="scripted-model")
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, responses: list[dict | Callable]) -> None:
        """Replace the queue of responses (and forget recorded requests)."""
        with self._lock:
            self._script = list(responses)
            self.requests.clear()

    def add(self, *responses: dict | Callable) -> None:
        with self._lock:
            self._script.extend(responses)

    def reset(self) -> None:
        """An empty script and the default answer the model was built with."""
        self.script([])
        self.default = self._initial_default

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def _next(self, path: str, headers: dict, body: dict):
        with self._lock:
            self.requests.append({"path": path, "headers": headers, "body": body, "at": time.time()})
            return self._script.pop(0) if self._script else self.default

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.02)
        raise AssertionError(f"expected {count} model requests within {timeout}s, got {len(self.requests)}")

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def main() -> None:
    import argparse
    import signal

    parser = argparse.ArgumentParser(description="An offline stand-in for the model upstream (Messages API).")
    parser.add_argument("--port", type=int, default=8099)
    args = parser.parse_args()
    stop = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # before the server's threads start: they inherit it
    model = ScriptedModel(default=offline, port=args.port)
    print(f"scripted model upstream at {model.url}: start make run with ANTHROPIC_BASE_URL={model.url}", flush=True)
    signal.sigwait(stop)
    model.close()


if __name__ == "__main__":
    main()
