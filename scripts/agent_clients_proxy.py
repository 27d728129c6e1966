"""A recording pass-through proxy for scripts/agent_clients_smoke.sh.

Forwards every request to the hinfer server unchanged (streams included) and appends one JSON line per request
to LOG: method, path, status, model, stream, and how many tools the body offered. The server's own log
(`--log-requests`) has each route and status; this adds what is inside the bodies.

    python scripts/agent_clients_proxy.py LISTEN_PORT UPSTREAM_PORT LOG [--short-responses [--tool-round-trip]]

--short-responses: a /v1/responses, /v1/messages or /v1/chat/completions request (tool_choice auto, no format of its
own) gets a JSON-schema format that only allows `{}` (grammar-constrained by the server; Responses also
`reasoning.effort: none` when it names no effort, chat completions thinking off), so the demo model's random answer ends at once as a normal finished turn. Without
it the random words do not stop: Codex CLI sends no `max_output_tokens`, so they run to the end of the 64K
context (many minutes on a CPU), and a capped answer (`incomplete`, `max_tokens`) is an error to both clients.
Recorded as `injected`.

--tool-round-trip (with --short-responses): a request that offers the client's harmless listing tool (Claude
Code's `Glob`, Codex CLI's `exec_command`, Qwen Code's `glob`) and carries no tool result yet is asked for a call of it instead
(`tool_choice` naming it, grammar-enforced), its schema narrowed for this request to one fixed argument (`Glob`
pattern `*`, `exec_command` cmd `ls`) so that the demo model's call is short and valid; the client runs it and
sends the result back, and that request gets the `{}` answer above. So each client's turn is a whole tool round
trip: the call in the shape the client parses, its execution, the history with the call and its result. Where a
Responses request declares a client tool search (Codex CLI with MCP servers, for a model it knows to search), the
round trip goes through it: first a `tool_search` call (query `echo text`), then, once the client's
`tool_search_output` is in the input, a call of the first tool it found (its schema narrowed to `text` = `hi`).
Likewise for Claude Code's own `ToolSearch` where the MCP echo server's tools are deferred: `ToolSearch` selecting
`mcp__echo__echo`, then, once a tool_result's `tool_reference` loaded it, a call of it.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection", "upgrade", "te",
        "trailer", "host"}
_lock = threading.Lock()
_EMPTY_OBJECT = {"type": "json_schema", "name": "smoke", "strict": True,
                 "schema": {"type": "object", "properties": {}, "additionalProperties": False}}


# the listing tool each client offers, and the one argument the round trip's call is held to
_LISTING = {"/v1/messages": ("Glob", "pattern", "*"), "/v1/responses": ("exec_command", "cmd", "ls"),
            "/v1/chat/completions": ("glob", "pattern", "*")}  # Qwen Code's


def _compaction(data: dict) -> bool:
    """A Responses request asking for the conversation's compaction (Codex CLI's remote compaction): its input ends
    in a compaction_trigger item. Left as it is: the server's --compaction-max-tokens keeps its summary short."""
    items = data.get("input")
    return isinstance(items, list) and bool(items) and isinstance(items[-1], dict) and items[-1].get(
        "type") == "compaction_trigger"


def _compacted(data: dict) -> bool:
    """A conversation compacted already (a compaction item in its input): its tool round trip is behind it, so it
    gets the short answer, not another call (each call would grow it past the client's compaction limit again)."""
    items = data.get("input")
    return isinstance(items, list) and any(isinstance(i, dict) and i.get("type") == "compaction" for i in items)


def _tool_results(route: str, data: dict) -> int:
    """How many tool results the conversation carries (Anthropic tool_result blocks, Responses outputs, chat
    messages of role tool)."""
    if route == "/v1/chat/completions":
        return sum(1 for m in data.get("messages") or [] if isinstance(m, dict) and m.get("role") == "tool")
    if route == "/v1/messages":
        return sum(1 for m in data.get("messages") or [] if isinstance(m, dict) and isinstance(m.get("content"), list)
                   for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    items = data.get("input")
    return sum(1 for i in items if isinstance(i, dict) and str(i.get("type", "")).endswith("_output")) if isinstance(
        items, list) else 0


def _narrow(arg: str, value: str) -> dict:
    return {"type": "object", "properties": {arg: {"type": "string", "enum": [value]}}, "required": [arg],
            "additionalProperties": False}


def _force(route: str, data: dict, choice: dict) -> None:
    data["tool_choice"] = choice
    if route == "/v1/chat/completions":
        data["chat_template_kwargs"] = {**(data.get("chat_template_kwargs") or {}), "enable_thinking": False}
    elif route == "/v1/messages":
        data["thinking"] = {"type": "disabled"}
    else:
        data["reasoning"] = {**(data.get("reasoning") or {}), "effort": "none"}


def _references(data: dict) -> list[str]:
    """The tool names of a Messages conversation's tool_reference blocks (Claude Code's ToolSearch results)."""
    return [r.get("tool_name") for m in data.get("messages") or [] if isinstance(m, dict)
            and isinstance(m.get("content"), list) for b in m["content"] if isinstance(b, dict)
            and b.get("type") == "tool_result" and isinstance(b.get("content"), list)
            for r in b["content"] if isinstance(r, dict) and r.get("type") == "tool_reference"]  # fmt: skip


def _ask_for_tool_search(data: dict) -> str:
    """The Messages round trip through Claude Code's ToolSearch: the search (selecting the MCP echo tool) while
    nothing was loaded, then the tool it loaded; "" where there is no ToolSearch or the tool was called already."""
    tools = {t.get("name"): t for t in data.get("tools") or [] if isinstance(t, dict)}
    loaded = _references(data)
    if "ToolSearch" in tools and not loaded:
        if "mcp__echo__echo" not in json.dumps(data.get("messages")):  # Claude Code names its deferred tools there
            return ""  # no MCP server behind it: the listing tool's round trip instead
        tools["ToolSearch"]["input_schema"] = _narrow("query", "select:mcp__echo__echo")
        _force("/v1/messages", data, {"type": "tool", "name": "ToolSearch"})
        return "tool_choice ToolSearch(query='select:mcp__echo__echo')"
    if loaded and loaded[0] in tools and _tool_results("/v1/messages", data) < 2:
        tools[loaded[0]]["input_schema"] = _narrow("text", "hi")
        _force("/v1/messages", data, {"type": "tool", "name": loaded[0]})
        return f"tool_choice {loaded[0]}(text='hi')"
    return ""


def _ask_for_search(data: dict) -> str:
    """The Responses round trip through a client tool search: the search while nothing was found, then the first
    tool it found; "" where no search is declared or its tool was called already."""
    items = [i for i in data.get("input") or [] if isinstance(i, dict)]
    found = [i for i in items if i.get("type") == "tool_search_output"]
    search = [t for t in data.get("tools") or [] if isinstance(t, dict) and t.get("type") == "tool_search"]
    if search and not found:
        search[0]["parameters"] = _narrow("query", "echo text")
        _force("/v1/responses", data, {"type": "function", "name": "tool_search"})
        return "tool_choice tool_search(query='echo text')"
    if not found or any(i.get("type") == "function_call_output" for i in items[items.index(found[-1]):]):
        return ""
    for tool in found[-1].get("tools") or []:
        ns = tool["name"] if tool.get("type") == "namespace" else None
        for member in tool.get("tools") or [] if ns else [tool]:
            member["parameters"] = _narrow("text", "hi")
            _force("/v1/responses", data, {"type": "function", "name": member["name"], **({"namespace": ns} if ns else {})})
            return f"tool_choice {ns + '/' if ns else ''}{member['name']}(text='hi')"
    return ""


def _ask_for_call(route: str, data: dict) -> str:
    """Name the listing tool in tool_choice, its schema narrowed to one fixed argument; "" where it is not offered."""
    name, arg, value = _LISTING[route]
    for tool in data.get("tools") or []:
        if route == "/v1/chat/completions" and isinstance(tool, dict) and (tool.get("function") or {}).get(
                "name") == name:  # fmt: skip
            tool["function"]["parameters"] = _narrow(arg, value)
            _force(route, data, {"type": "function", "function": {"name": name}})
            return f"tool_choice {name}({arg}={value!r})"
        if isinstance(tool, dict) and tool.get("name") == name:
            if route == "/v1/messages":
                tool["input_schema"] = _narrow(arg, value)
                _force(route, data, {"type": "tool", "name": name})
            else:
                tool["parameters"] = _narrow(arg, value)
                _force(route, data, {"type": "function", "name": name})
            return f"tool_choice {name}({arg}={value!r})"
    return ""


def _shorten(path: str, body: bytes, round_trip: bool = False) -> tuple[bytes, str]:
    route = path.split("?")[0]
    if route not in _LISTING or not body:
        return body, ""
    try:
        data = json.loads(body)
    except ValueError:
        return body, ""
    if not isinstance(data, dict) or data.get("tool_choice") not in (None, "auto", {"type": "auto"}) \
            or _compaction(data):
        return body, ""
    search = {"/v1/responses": _ask_for_search, "/v1/messages": _ask_for_tool_search}.get(route)
    if round_trip and search is not None and (done := search(data)):
        return json.dumps(data).encode(), done
    if round_trip and not _tool_results(route, data) and not _compacted(data) and (
            done := _ask_for_call(route, data)):
        return json.dumps(data).encode(), done
    if route == "/v1/chat/completions":
        if data.get("response_format"):
            return body, ""
        data["response_format"] = {"type": "json_schema", "json_schema": _EMPTY_OBJECT}
        data["chat_template_kwargs"] = {**(data.get("chat_template_kwargs") or {}), "enable_thinking": False}
        done = "response_format {}, thinking off"
    elif route == "/v1/responses":
        if (data.get("text") or {}).get("format"):
            return body, ""
        data["text"] = {**(data.get("text") or {}), "format": _EMPTY_OBJECT}
        done = "text.format {}"
        if not (data.get("reasoning") or {}).get("effort"):  # no effort: the template thinks, unconstrained
            data["reasoning"] = {**(data.get("reasoning") or {}), "effort": "none"}
            done += ", reasoning.effort none"
    else:
        if (data.get("output_config") or {}).get("format"):
            return body, ""
        if (data.get("thinking") or {}).get("type") not in (None, "disabled"):  # thinking runs free of the grammar
            data["thinking"] = {"type": "disabled"}
        data["output_config"] = {**(data.get("output_config") or {}), "format": {
            "type": "json_schema", "schema": _EMPTY_OBJECT["schema"]}}
        done = "output_config.format {}" + (", thinking disabled" if b'"thinking"' in body else "")
    return json.dumps(data).encode(), done


def _summary(path: str, body: bytes) -> dict:
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    tools = data.get("tools")
    route = path.split("?")[0]
    return {"model": data.get("model"), "stream": bool(data.get("stream")), "tool_results": _tool_results(route, data),
            "compaction": _compaction(data),
            "tools": len(tools) if isinstance(tools, list) else 0,
            "tool_names": [t.get("name") or (t.get("function") or {}).get("name") or t.get("type")
                           for t in tools if isinstance(t, dict)][:8] if isinstance(tools, list) else []}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream_port = 0
    log_path = ""
    short_responses = False
    round_trip = False

    def log_message(self, format: str, *args: object) -> None:  # quiet: the JSON lines are the log
        pass

    def _body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _forward(self) -> None:
        body = self._body()
        record = {"method": self.command, "path": self.path, **(_summary(self.path, body) if body else {})}
        if self.short_responses and self.command == "POST":
            body, injected = _shorten(self.path, body, self.round_trip)
            if injected:
                record["injected"] = injected
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=900)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        try:
            conn.request(self.command, self.path, body=body if body or self.command in ("POST", "PUT") else None,
                         headers=headers)
            resp = conn.getresponse()
            record["status"] = resp.status
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP:
                    self.send_header(k, v)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            size, kept = 0, b""
            while chunk := resp.read1(65536):
                size += len(chunk)
                if resp.status >= 400 and len(kept) < 2000:
                    kept += chunk
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            record["response_bytes"] = size
            if kept:
                record["response"] = kept[:2000].decode("utf-8", "replace")
        except OSError as e:
            record["error"] = repr(e)
            self.close_connection = True
        finally:
            conn.close()
            with _lock, open(self.log_path, "a") as f:
                f.write(json.dumps(record) + "\n")

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_OPTIONS = _forward


def main() -> None:
    listen, upstream, log_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    Handler.upstream_port = upstream
    Handler.log_path = log_path
    Handler.short_responses = "--short-responses" in sys.argv[4:]
    Handler.round_trip = "--tool-round-trip" in sys.argv[4:]
    ThreadingHTTPServer(("127.0.0.1", listen), Handler).serve_forever()


if __name__ == "__main__":
    main()
