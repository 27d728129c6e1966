"""A minimal MCP server over stdio (newline-delimited JSON-RPC) for scripts/agent_clients_smoke.sh: two tools,
`echo` and `reverse`, each taking one string `text`. Enough for Codex CLI to list them, find them through its tool
search and call one."""

from __future__ import annotations

import json
import sys

TOOLS = [{"name": name, "description": about, "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                                                             "required": ["text"]}}
         for name, about in (("echo", "Echo a text back."), ("reverse", "Reverse a text."))]  # fmt: skip


def answer(msg: dict) -> dict:
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        return {"result": {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                           "capabilities": {"tools": {}}, "serverInfo": {"name": "echo", "version": "1"}}}
    if method == "tools/list":
        return {"result": {"tools": TOOLS}}
    if method == "tools/call":
        text = (params.get("arguments") or {}).get("text", "")
        return {"result": {"content": [{"type": "text", "text": text if params.get("name") == "echo" else text[::-1]}]}}
    return {"error": {"code": -32601, "message": f"unknown method {method!r}"}}


def main() -> None:
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("id") is not None:  # notifications (no id) need no answer
            print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], **answer(msg)}), flush=True)


if __name__ == "__main__":
    main()
