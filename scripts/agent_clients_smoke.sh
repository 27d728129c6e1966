#!/usr/bin/env bash
# Smoke test of real agent clients against `hinfer serve` (the demo model): Claude Code (Anthropic Messages), Codex
# CLI (OpenAI Responses) and Qwen Code (OpenAI Chat Completions) each run one non-interactive turn with their tools
# offered.
#
#   scripts/agent_clients_smoke.sh            # PASS/FAIL per client; exit status 0 when every run passes
#
# Environment: PREFIX (npm prefix for the clients, default /tmp/agent-clients), PORT (server, default 18431),
# PROXY_PORT (default PORT+1), CLIENT_TIMEOUT (seconds per client, default 300), HINFER_CACHE (demo model cache),
# CLAUDE_CODE_VERSION / CODEX_VERSION / QWEN_CODE_VERSION (the pinned client versions), KEEP=1 keeps the work folder.
#
# The clients talk to a recording pass-through proxy (scripts/agent_clients_proxy.py) in front of the server, so
# the report can say which requests offered tools; routes and statuses come from the server's own log
# (`--log-requests`). Each client runs twice: as the demo model, and under an alias of a model it knows to defer tools
# for (CLAUDE_ALIAS, SEARCH_MODEL) with an MCP server (scripts/mcp_echo_server.py), whose tools it then leaves behind
# its tool search (Claude Code's own ToolSearch, Codex CLI's client tool_search). Each client's turn is a tool round trip: the proxy asks for a call of the client's listing tool
# (Claude Code's Glob, Codex CLI's exec_command, held to one fixed argument), the client runs it and sends its
# result back (--tool-round-trip in agent_clients_proxy.py). The demo model writes random words at a few dozen
# tokens a second on a CPU and almost never stops by itself, so answers are kept short: Claude Code with CLAUDE_CODE_MAX_OUTPUT_TOKENS=256 MAX_THINKING_TOKENS=0, Codex CLI (which
# sends no max_output_tokens) by the proxy's --short-responses (see agent_clients_proxy.py). A turn counts as complete when the client exited 0, sent at least one generation request
# with tools, made the tool round trip, and every generation request got a 200. The demo model's words are random: the answer is not checked.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="${PREFIX:-/tmp/agent-clients}"
PORT="${PORT:-18431}"
PROXY_PORT="${PROXY_PORT:-$((PORT + 1))}"
CLIENT_TIMEOUT="${CLIENT_TIMEOUT:-300}"
CLAUDE_CODE_VERSION="${CLAUDE_CODE_VERSION:-2.1.332}"
CODEX_VERSION="${CODEX_VERSION:-0.171.0}"
QWEN_CODE_VERSION="${QWEN_CODE_VERSION:-0.24.4}"
MODEL=demo
SEARCH_MODEL=gpt-5.5  # an alias Codex CLI knows to search its MCP tools for (its model catalog's supports_search_tool)
CLAUDE_ALIAS=claude-sonnet-4-5  # an alias Claude Code defers its MCP tools for, behind its own ToolSearch
PYTHON="${PYTHON:-python}"
WORK="$(mktemp -d /tmp/agent-clients-smoke.XXXXXX)"
SERVER_LOG="$WORK/server.log"
PROXY_LOG="$WORK/proxy.jsonl"
SERVER_PID=""
PROXY_PID=""

cleanup() {
    [ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null && wait "$PROXY_PID" 2>/dev/null
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
    if [ "${KEEP:-0}" = 1 ]; then echo "logs kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

say() { printf '\n== %s\n' "$*"; }

# 1. the clients, pinned
say "installing @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION, @openai/codex@$CODEX_VERSION and @qwen-code/qwen-code@$QWEN_CODE_VERSION into $PREFIX"
installed() { node -p "require('$PREFIX/node_modules/$1/package.json').version" 2>/dev/null; }
if [ "$(installed @anthropic-ai/claude-code)" != "$CLAUDE_CODE_VERSION" ] || [ "$(installed @openai/codex)" != "$CODEX_VERSION" ] \
        || [ "$(installed @qwen-code/qwen-code)" != "$QWEN_CODE_VERSION" ]; then
    npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" \
        "@openai/codex@$CODEX_VERSION" "@qwen-code/qwen-code@$QWEN_CODE_VERSION" || { echo "npm install failed"; exit 2; }
fi
CLAUDE="$PREFIX/node_modules/.bin/claude"
CODEX="$PREFIX/node_modules/.bin/codex"
QWEN="$PREFIX/node_modules/.bin/qwen"
echo "claude: $("$CLAUDE" --version 2>&1 | head -1)"
echo "codex:  $("$CODEX" --version 2>&1 | head -1)"
echo "qwen:   $("$QWEN" --version 2>&1 | head -1)"

# 2. the server (demo model) and the recording proxy
say "starting hinfer serve on 127.0.0.1:$PORT (demo model), proxy on $PROXY_PORT"
HINFER_CACHE="${HINFER_CACHE:-/tmp/hc-clients}" PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" \
    "$PYTHON" -m hinfer serve --port "$PORT" --log-requests --served-model-name "$MODEL,$SEARCH_MODEL,$CLAUDE_ALIAS" \
    --compaction-max-tokens 32 >"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
"$PYTHON" "$REPO/scripts/agent_clients_proxy.py" "$PROXY_PORT" "$PORT" "$PROXY_LOG" --short-responses --tool-round-trip \
    >"$WORK/proxy.err" 2>&1 &
PROXY_PID=$!
for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "server exited:"; tail -20 "$SERVER_LOG"; exit 2; }
    sleep 0.5
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { echo "server not healthy after 300 s"; tail -20 "$SERVER_LOG"; exit 2; }
echo "health: $(curl -s "http://127.0.0.1:$PORT/health" | head -c 200)"
URL="http://127.0.0.1:$PROXY_PORT"

# Report one client: its exit status, the server's log lines (route -> status) and the proxy's view of the bodies.
RESULTS=()
report() {  # name rc server_log_line_offset proxy_log_line_offset [a call the round trip must have been asked for]
    local name=$1 rc=$2 out
    out=$("$PYTHON" - "$name" "$rc" "$SERVER_LOG" "$3" "$PROXY_LOG" "$4" "${5:-}" <<'EOF'
import json, re, sys
name, rc, slog, soff, plog, poff = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
need = sys.argv[7]
lines = open(slog, errors="replace").read().splitlines()[soff:]
reqs = [m.groups() for l in lines if (m := re.search(r"\b(GET|POST|DELETE|PUT|HEAD|OPTIONS) (\S+) -> (\d{3})", l))]
try:
    proxied = [json.loads(l) for l in open(plog).read().splitlines()[poff:]]
except FileNotFoundError:
    proxied = []
print(f"server log: {len(reqs)} requests")
for method, path, status in reqs:
    print(f"  {method} {path} -> {status}")
print("bodies (proxy):")
for p in proxied:
    extra = f" model={p.get('model')} stream={p.get('stream')} tools={p.get('tools')}" if "model" in p else ""
    names = f" {p['tool_names']}" if p.get("tool_names") else ""
    names += f" (proxy set {p['injected']})" if p.get("injected") else ""
    results = f" tool_results={p['tool_results']}" if p.get("tool_results") else ""
    results += " compaction" if p.get("compaction") else ""
    print(f"  {p['method']} {p['path']} -> {p.get('status', p.get('error'))}{extra}{results}{names}")
    if p.get("response"):
        print(f"    response: {p['response'][:600]}")
gen = ("/v1/messages", "/v1/responses", "/v1/chat/completions")
generation = [p for p in proxied if p["method"] == "POST" and p["path"].split("?")[0] in gen]
with_tools = [p for p in generation if p.get("tools")]
bad = [p for p in generation if p.get("status") != 200]
server_bad = [r for r in reqs if r[0] == "POST" and r[1] in gen and r[2] != "200"]
reasons = []
if rc != 0:
    reasons.append(f"exit status {rc}" + (" (timed out)" if rc == 124 else ""))
if not with_tools:
    reasons.append("no generation request offered tools" if generation else "no generation request reached the server")
if bad or server_bad:
    reasons.append(f"{len(bad) or len(server_bad)} generation request(s) not answered 200")
asked = [p for p in generation if str(p.get("injected", "")).startswith("tool_choice")]
answered = [p for p in generation if p.get("tool_results")]
if not asked or not answered:
    reasons.append("no tool round trip (" + ("the listing tool was not offered" if not asked else
                                             "no request carried the tool's result back") + ")")
if need == "compaction":
    if not any(p.get("compaction") and p.get("status") == 200 for p in generation):
        reasons.append("no compaction request answered 200")
elif need and not any(str(p.get("injected", "")).startswith(f"tool_choice {need}") for p in generation):
    reasons.append(f"no {need} call asked for")
ok = not reasons
why = (f"exit 0, {len(with_tools)}/{len(generation)} generation requests with tools, a tool round trip, all 200"
       if ok else "; ".join(reasons))
print(f"RESULT {name}: {'PASS' if ok else 'FAIL'} ({why})")
EOF
)
    echo "$out"
    RESULTS+=("$(echo "$out" | grep '^RESULT')")
}

lines() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }

# One client turn: TAG names its folder ($WORK/TAG-run) and its output ($WORK/TAG.out, .err); reported as NAME, its
# round trip required to have asked for NEED (a tool name) when given.
claude_turn() {  # claude_turn TAG MODEL PROMPT [claude args...]
    local tag=$1 model=$2 prompt=$3; shift 3
    mkdir -p "$WORK/$tag-run" "$WORK/$tag-config"
    (cd "$WORK/$tag-run" && env ANTHROPIC_BASE_URL="$URL" ANTHROPIC_API_KEY=sk-ant-dummy ANTHROPIC_AUTH_TOKEN= \
        ANTHROPIC_MODEL="$model" ANTHROPIC_SMALL_FAST_MODEL="$model" ANTHROPIC_DEFAULT_SONNET_MODEL="$model" \
        ANTHROPIC_DEFAULT_HAIKU_MODEL="$model" ANTHROPIC_DEFAULT_OPUS_MODEL="$model" CLAUDE_CODE_MAX_OUTPUT_TOKENS=256 \
        MAX_THINKING_TOKENS=0 CLAUDE_CONFIG_DIR="$WORK/$tag-config" DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 \
        DISABLE_AUTOUPDATER=1 DISABLE_BUG_COMMAND=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
        CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1 \
        timeout "$CLIENT_TIMEOUT" "$CLAUDE" -p "$prompt" --model "$model" "$@" --output-format json \
        </dev/null >"$WORK/$tag.out" 2>"$WORK/$tag.err")
}
codex_turn() {  # codex_turn TAG CODEX_HOME PROMPT
    mkdir -p "$WORK/$1-run"
    (cd "$WORK/$1-run" && env CODEX_HOME="$2" HINFER_API_KEY=dummy OPENAI_API_KEY=dummy RUST_LOG=error \
        timeout "$CLIENT_TIMEOUT" "$CODEX" exec --skip-git-repo-check "$3" </dev/null >"$WORK/$1.out" 2>"$WORK/$1.err")
}
qwen_turn() {  # qwen_turn TAG PROMPT: Qwen Code on OpenAI Chat Completions, its settings in a home of its own
    mkdir -p "$WORK/$1-run" "$WORK/$1-home"
    (cd "$WORK/$1-run" && env HOME="$WORK/$1-home" QWEN_CODE_SUPPRESS_YOLO_WARNING=1 \
        timeout "$CLIENT_TIMEOUT" "$QWEN" "$2" --auth-type openai -m "$MODEL" --openai-base-url "$URL/v1" \
        --openai-api-key dummy --output-format json --max-session-turns 3 --yolo </dev/null >"$WORK/$1.out" 2>"$WORK/$1.err")
}
turn() {  # turn NAME NEED TAG RUNNER ARGS...: run one turn and report it
    local name=$1 need=$2 tag=$3 s0 p0 rc; shift 3
    s0=$(lines "$SERVER_LOG"); p0=$(lines "$PROXY_LOG")
    "$@"
    rc=$?
    echo "exit status: $rc"
    echo "stdout (head): $(head -c 600 "$WORK/$tag.out")"
    [ -s "$WORK/$tag.err" ] && echo "stderr (tail): $(tail -c 600 "$WORK/$tag.err")"
    report "$name" "$rc" "$s0" "$p0" "$need"
}

# 3a. Claude Code: Anthropic Messages
say "Claude Code: claude -p (tools allowed) in an empty folder"
turn "Claude Code $CLAUDE_CODE_VERSION" "" claude claude_turn claude "$MODEL" "list the files in this directory" \
    --allowedTools "Bash(ls:*)" "Glob" "Read" "LS" --max-turns 3

# 3a'. Claude Code as a Claude model (an alias) with an MCP server: it defers the MCP tools behind its own ToolSearch;
# the round trip is ToolSearch, its tool_reference result, then a call of the tool it loaded
say "Claude Code as $CLAUDE_ALIAS with an MCP server: ToolSearch, then the tool it loaded"
MCP_CONFIG=$(printf '{"mcpServers": {"echo": {"command": "%s", "args": ["%s"]}}}' "$(command -v "$PYTHON")" \
    "$REPO/scripts/mcp_echo_server.py")
turn "Claude Code $CLAUDE_CODE_VERSION as $CLAUDE_ALIAS, MCP tools behind ToolSearch" ToolSearch claude-mcp \
    claude_turn claude-mcp "$CLAUDE_ALIAS" "echo hi with the echo tool" --mcp-config "$MCP_CONFIG" \
    --allowedTools "ToolSearch" "mcp__echo__echo" --max-turns 4

# 3b. Codex CLI: OpenAI Responses
say "Codex CLI: codex exec in an empty folder"
CX_HOME="$WORK/codex-home"; mkdir -p "$CX_HOME"
cat >"$CX_HOME/config.toml" <<EOF
model = "$MODEL"
model_provider = "hinfer"
model_context_window = 65536
approval_policy = "never"
sandbox_mode = "workspace-write"
check_for_update_on_startup = false

[model_providers.hinfer]
name = "hinfer"
base_url = "$URL/v1"
wire_api = "responses"
env_key = "HINFER_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false
EOF
turn "Codex CLI $CODEX_VERSION" "" codex codex_turn codex "$CX_HOME" "list the files"

# 3c. Codex CLI with an MCP server, as a model it knows to search tools for: its MCP tools are left out of `tools`
# behind a client tool_search; the round trip is the search, then a call of a tool found (scripts/mcp_echo_server.py)
say "Codex CLI as $SEARCH_MODEL with an MCP server: tool search, then a tool it found"
CS_HOME="$WORK/codex-search-home"; mkdir -p "$CS_HOME"
sed "s/^model = \"$MODEL\"/model = \"$SEARCH_MODEL\"/" "$CX_HOME/config.toml" >"$CS_HOME/config.toml"
printf '\n[mcp_servers.echo]\ncommand = "%s"\nargs = ["%s"]\n' "$(command -v "$PYTHON")" "$REPO/scripts/mcp_echo_server.py" \
    >>"$CS_HOME/config.toml"
turn "Codex CLI $CODEX_VERSION as $SEARCH_MODEL, MCP tools behind tool_search" tool_search codex-search \
    codex_turn codex-search "$CS_HOME" "echo hi with the echo tool"

# 3c'. Codex CLI on its built-in OpenAI provider pointed here (openai_base_url), as people set it with OPENAI_BASE_URL:
# it compacts remotely (a compaction_trigger ending the input of /v1/responses; the server's --compaction-max-tokens
# keeps the demo model's summary short), forced here by an auto-compaction limit of 2,000 tokens. It tries the
# Responses WebSocket first and falls back to HTTPS after five refusals (405).
say "Codex CLI on its OpenAI provider (openai_base_url): the turn, then a remote compaction"
CO_HOME="$WORK/codex-openai-home"; mkdir -p "$CO_HOME"
sed -e "s|^model_provider = \"hinfer\"|openai_base_url = \"$URL/v1\"\nmodel_auto_compact_token_limit = 2000|" \
    -e '/^\[model_providers.hinfer\]/,/^$/d' "$CX_HOME/config.toml" >"$CO_HOME/config.toml"
turn "Codex CLI $CODEX_VERSION on its OpenAI provider, remote compaction" compaction codex-openai \
    codex_turn codex-openai "$CO_HOME" "list the files"

# 3d. Qwen Code: OpenAI Chat Completions
say "Qwen Code: qwen (yolo) in an empty folder"
turn "Qwen Code $QWEN_CODE_VERSION" "" qwen qwen_turn qwen "list the files"

# 4. summary
say "summary ($(date -u +%Y-%m-%d))"
printf '%s\n' "${RESULTS[@]}"
grep -E " -> 5[0-9][0-9]|Traceback" "$SERVER_LOG" >/dev/null && { echo "server log has 5xx/tracebacks:"; grep -E " -> 5|Traceback" "$SERVER_LOG" | head; }
printf '%s\n' "${RESULTS[@]}" | grep -q FAIL && exit 1
exit 0
