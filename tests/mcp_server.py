"""A real MCP server for the tests (the `mcp` SDK's MCPServer over streamable HTTP, under uvicorn
in a thread on loopback) that requires a bearer token, and an OAuth token endpoint beside it.

The server records the Authorization headers it saw (`seen_tokens`) and the token requests
(`token_requests`: form fields and the Basic credentials); `accepted` is the set of bearer
tokens it takes (any other is a 401, with `refusal` as its body), and `issue` what the token
endpoint hands out next (`token_body`, when set, is sent instead, as is). A misbehaving server on
demand: with `trickle` set, every body holding TRICKLE_MARKER (the `trickle` tool's result, a
`refusal` or `token_body` holding it) is sent one byte every `trickle` seconds.
"""

import argparse
import asyncio
import base64
import json
import socket
import threading
import time
from urllib.parse import parse_qs

import uvicorn
from mcp.server.mcpserver import Context, MCPServer

PORT_RANGE = range(8700, 8800)
TRICKLE_MARKER = b"trickled"


def free_port() -> int:
    for port in PORT_RANGE:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 8700-8799")


class McpTestServer:
    def __init__(self, *, delay: float = 0.0, port: int | None = None):
        self.accepted: set[str] = set()
        self.seen_tokens: list[str] = []
        self.token_requests: list[dict] = []
        self.issue: dict = {}
        self.token_status = 200
        self.token_body: bytes | None = None
        self.refusal = b"unauthorized"
        self.trickle = 0.0
        self.calls: list[tuple[str, dict]] = []
        self.delay = delay
        self.open_requests = 0
        self.peak_requests = 0
        self.mcp = MCPServer("mango-test-tools", log_level="WARNING")
        self._tools()
        inner = self.mcp.streamable_http_app(stateless_http=True, json_response=True)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.token_url = f"http://127.0.0.1:{self.port}/oauth/token"
        self.host = f"127.0.0.1:{self.port}"
        self._app = self._guard(inner)
        config = uvicorn.Config(self._app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def _tools(self):
        server = self

        @self.mcp.tool(description="Add two integers.")
        async def add(a: int, b: int) -> str:
            server.calls.append(("add", {"a": a, "b": b}))
            if server.delay:
                await asyncio.sleep(server.delay)
            return str(a + b)

        @self.mcp.tool(description="Echo a text back.")
        async def echo(text: str) -> str:
            server.calls.append(("echo", {"text": text}))
            if server.delay:
                await asyncio.sleep(server.delay)
            return text

        @self.mcp.tool(description="Return a large text.")
        async def big(size: int) -> str:
            server.calls.append(("big", {"size": size}))
            return "x" * size

        @self.mcp.tool(description="Sleep, then answer.")
        async def slow(seconds: float) -> str:
            server.calls.append(("slow", {"seconds": seconds}))
            await asyncio.sleep(seconds)
            return "slept"

        @self.mcp.tool(description="Add a tool named fresh, and say the tool list changed.")
        async def grow(ctx: Context) -> str:
            server.calls.append(("grow", {}))

            async def fresh() -> str:
                return "fresh"

            server.mcp.add_tool(fresh, name="fresh", description="A tool added while the session ran.")
            await ctx.notify_tools_changed()
            return "grown"

        @self.mcp.tool(description="Answer, slowly when the server trickles.")
        async def trickle() -> str:
            server.calls.append(("trickle", {}))
            return TRICKLE_MARKER.decode()

        @self.mcp.tool(description="Always fails.")
        async def explode() -> str:
            raise ValueError("the tool exploded")

    def _guard(self, inner):
        server = self

        async def app(scope, receive, send):
            if scope["type"] != "http":
                return await inner(scope, receive, send)
            if scope["path"] == "/oauth/token":
                return await server._token(scope, receive, send)
            if scope["path"] != "/mcp":
                start = {"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]}
                await send(start)
                await send({"type": "http.response.body", "body": b"not found"})
                return None
            headers = dict(scope.get("headers") or [])
            auth = headers.get(b"authorization", b"").decode()
            token = auth[7:] if auth.startswith("Bearer ") else ""
            server.seen_tokens.append(token)
            if token not in server.accepted:
                start = {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
                await send(start)
                await server._send_body(send, {"type": "http.response.body", "body": server.refusal})
                return None
            server.open_requests += 1
            server.peak_requests = max(server.peak_requests, server.open_requests)

            async def trickling(message):
                if message["type"] == "http.response.body":
                    return await server._send_body(send, message)
                return await send(message)

            try:
                return await inner(scope, receive, trickling)
            finally:
                server.open_requests -= 1

        return app

    async def _token(self, scope, receive, send):
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        form = {key: values[0] for key, values in parse_qs(body.decode()).items()}
        headers = dict(scope.get("headers") or [])
        basic = headers.get(b"authorization", b"").decode()
        if basic.startswith("Basic "):
            form["_basic"] = base64.b64decode(basic[6:]).decode()
        self.token_requests.append(form)
        payload = json.dumps(self.issue).encode() if self.token_body is None else self.token_body
        status = self.token_status
        if status == 200 and self.issue.get("access_token"):
            self.accepted.add(self.issue["access_token"])
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send_body(send, {"type": "http.response.body", "body": payload})

    async def _send_body(self, send, message: dict) -> None:
        body = message.get("body", b"")
        if not self.trickle or TRICKLE_MARKER not in body:
            return await send(message)
        for index in range(len(body)):
            await send({"type": "http.response.body", "body": body[index : index + 1], "more_body": True})
            await asyncio.sleep(self.trickle)
        if not message.get("more_body"):
            await send({"type": "http.response.body", "body": b""})
        return None

    def start(self) -> "McpTestServer":
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the MCP test server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)


if __name__ == "__main__":
    # The README's MCP quickstart: this server on loopback, for trying MCP and vaults offline.
    parser = argparse.ArgumentParser(
        description="The tests' MCP server (tools add, echo, …), requiring a bearer token."
    )
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--token", required=True, help="the bearer token it accepts")
    args = parser.parse_args()
    served = McpTestServer(port=args.port)
    served.accepted.add(args.token)
    served.start()
    print(f"MCP server at {served.url} (bearer token required); Ctrl-C stops it", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        served.stop()
