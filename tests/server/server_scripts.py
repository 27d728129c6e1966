"""Model outputs in the real Qwen3.5 format, keyed by a marker the test puts in its prompt.

With thinking on, the prompt ends in `<think>\\n`, so the model's text starts inside the reasoning and
closes it with `</think>`; with thinking off the template already closed it and the text is the answer.
"""

from __future__ import annotations

GREETING = "The user greets me. I should greet them back.\n</think>\n\nHello! How can I help you today?"
NO_THINK = "Hello! How can I help you today?"

WEATHER_CALL = (
    "The user wants the weather, so I call the tool.\n</think>\n\nLet me check that.\n\n"
    "<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n"
    "<parameter=metric>\ntrue\n</parameter>\n"
    "<parameter=ratio>\n0.5\n</parameter>\n"
    '<parameter=options>\n{"hourly": false, "fields": ["temp", "rain"]}\n</parameter>\n'
    "<parameter=note>\nline one\nline two\n</parameter>\n"
    "</function>\n</tool_call>"
)
WEATHER_CALL_NO_THINK = WEATHER_CALL.split("</think>\n\n", 1)[1]
WEATHER_ARGS = {"city": "Paris", "days": 3, "metric": True, "ratio": 0.5,
                "options": {"hourly": False, "fields": ["temp", "rain"]}, "note": "line one\nline two"}

PARALLEL_CALLS = (
    "Two tools at once.\n</think>\n\n"
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\nnot a number\n"
    "</parameter>\n</function>\n</tool_call>\n"
    "<tool_call>\n<function=get_time>\n<parameter=zone>\nAsia/Tokyo\n</parameter>\n</function>\n</tool_call>"
)

UNKNOWN_TOOL = (
    "Hmm.\n</think>\n\n<tool_call>\n<function=launch_rockets>\n<parameter=count>\n3\n</parameter>\n"
    "</function>\n</tool_call>"
)
MALFORMED_CALL = "Hmm.\n</think>\n\nSure: <tool_call>\nthis is not a call\n</tool_call> done"

# a freeform (custom) tool's call: Codex CLI's apply_patch, its text raw inside the one parameter
PATCH = ('*** Begin Patch\n*** Update File: app.py\n@@ def main():\n-    print("hi")\n+    print("hi & <bye>", {"a": 1})\n'
         "*** End Patch")
PATCH_CALL = (
    "I edit the file.\n</think>\n\n<tool_call>\n<function=apply_patch>\n<parameter=input>\n" + PATCH
    + "\n</parameter>\n</function>\n</tool_call>"
)

# a namespaced (MCP) tool's call, by the flattened name the model is shown
MCP_CALL = ("I read the file.\n</think>\n\n<tool_call>\n<function=mcp__files__read>\n<parameter=path>\nREADME.md\n"
            "</parameter>\n</function>\n</tool_call>")

# a client-executed tool search (Codex CLI's), then a call of a tool it found, by its flattened name
SEARCH_CALL = ("I need a calendar tool.\n</think>\n\n<tool_call>\n<function=tool_search>\n<parameter=query>\n"
               "calendar events\n</parameter>\n<parameter=limit>\n5\n</parameter>\n</function>\n</tool_call>")
FOUND_CALL = ("Now I can add it.\n</think>\n\n<tool_call>\n<function=mcp__calendar__create_event>\n"
              "<parameter=title>\nStand-up\n</parameter>\n<parameter=minutes>\n15\n</parameter>\n</function>\n"
              "</tool_call>")

AFTER_TOOL = "The tool answered 18 degrees.\n</think>\n\nIt is 18 °C in Paris right now."
STOPPY = "Counting.\n</think>\n\none two three STOP four five"
LONG_THINK = "step " * 60 + "\n</think>\n\nDone."
UNICODE = "Ok.\n</think>\n\nHéllo wörld — 你好 🌍!"
LONG_ANSWER = "Ok.\n</think>\n\n" + " ".join(f"word{i}" for i in range(400))

SCRIPTS = {
    "[[greet]]": GREETING,
    "[[nothink]]": NO_THINK,
    "[[weather]]": WEATHER_CALL,
    "[[weather_nothink]]": WEATHER_CALL_NO_THINK,
    "[[parallel]]": PARALLEL_CALLS,
    "[[unknown_tool]]": UNKNOWN_TOOL,
    "[[malformed]]": MALFORMED_CALL,
    "[[after_tool]]": AFTER_TOOL,
    "[[patch]]": PATCH_CALL,
    "[[mcp]]": MCP_CALL,
    "[[search]]": SEARCH_CALL,
    "[[calendar]]": FOUND_CALL,
    "[[stop]]": STOPPY,
    "[[long_think]]": LONG_THINK,
    "[[unicode]]": UNICODE,
    "[[long]]": LONG_ANSWER,
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "metric": {"type": "boolean"},
                "ratio": {"type": "number"},
                "options": {"type": "object"},
                "note": {"type": "string"},
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "description": "Current time",
                 "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}},
}


def anthropic_tool(t: dict) -> dict:
    f = t["function"]
    return {"name": f["name"], "description": f["description"], "input_schema": f["parameters"]}


# the weather tool in the Responses API's shape
RESPONSES_TOOLS = [{"type": "function", **WEATHER_TOOL["function"]}]
# a Codex-shaped Responses history: a user turn, a tool call and its output, the assistant's answer, the next user
# turn (its [[nothink]] scripts a summary when the conversation is compacted)
CODEX_HISTORY = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather in Paris, please"}]},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "18 C, light rain"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is 18 C in Paris."}]},
    {"type": "message", "role": "user", "content": "and tomorrow? [[nothink]]"},
]
