// One answer: the request from a conversation and the settings, and the stream folded into the message
// (content, reasoning, tool calls, usage, speed).
import { streamChat } from "./api.js";

// A tool call's arguments go back to the server only when they are a JSON object (a stopped stream can leave
// half of one, which the server would refuse).
function completeCall(call) {
  try {
    const args = JSON.parse(call.arguments || "{}");
    return args !== null && typeof args === "object" && !Array.isArray(args);
  } catch {
    return false;
  }
}

export function parseTools(text) {
  if (!text.trim()) return null;
  let tools;
  try { tools = JSON.parse(text); } catch (e) { throw new Error(`Settings: the tools are not valid JSON (${e.message})`); }
  if (!Array.isArray(tools)) throw new Error("Settings: the tools must be a JSON array of {\"type\": \"function\", ...}");
  return tools.length ? tools : null;
}

export function buildRequest(model, messages, settings) {
  const out = [];
  if (settings.system.trim()) out.push({ role: "system", content: settings.system });
  for (const m of messages) {
    if (m.role === "user") {
      out.push({ role: "user", content: m.content });
      continue;
    }
    const calls = (m.toolCalls || []).filter(completeCall);
    if (!m.content && !calls.length) continue;  // an answer that failed or was stopped while thinking
    const turn = { role: "assistant", content: m.content || "" };
    if (m.reasoning) turn.reasoning_content = m.reasoning;
    if (calls.length) {
      turn.tool_calls = calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments || "{}" } }));
    }
    out.push(turn);
  }
  const body = {
    model,
    messages: out,
    stream_options: { include_usage: true },
    max_tokens: settings.max_tokens,
    temperature: settings.temperature,
    top_p: settings.top_p,
    chat_template_kwargs: { enable_thinking: settings.thinking },
  };
  const tools = parseTools(settings.tools);
  if (tools) body.tools = tools;
  return body;
}

// Streams into `message` (mutated), calling onUpdate() after each chunk. Ends normally, on abort (the stop
// button: the message is marked stopped) or with an exception from the API (left to the caller).
export async function runAnswer(body, message, apiKey, signal, onUpdate) {
  const t0 = performance.now();
  let first = null;
  let last = null;
  let pieces = 0;  // streamed deltas: the token count the page measures itself when the stream is cut short
  let usage = null;
  let timings = null;
  let finish = null;
  try {
    for await (const chunk of streamChat(body, apiKey, signal)) {
      if (chunk.usage) usage = chunk.usage;
      if (chunk.timings) timings = chunk.timings;
      for (const choice of chunk.choices || []) {
        const d = choice.delta || {};
        const got = Boolean(d.content || d.reasoning_content || d.tool_calls?.length);
        if (d.content) message.content += d.content;
        if (d.reasoning_content) message.reasoning += d.reasoning_content;
        for (const tc of d.tool_calls || []) {
          const calls = message.toolCalls;
          const call = calls[tc.index ?? calls.length] ??= { id: "", name: "", arguments: "" };
          if (tc.id) call.id = tc.id;
          if (tc.function?.name) call.name += tc.function.name;
          if (tc.function?.arguments) call.arguments += tc.function.arguments;
        }
        if (choice.finish_reason) finish = choice.finish_reason;
        if (got) {
          const now = performance.now();
          first ??= now;
          last = now;
          pieces += 1;
        }
      }
      onUpdate();
    }
  } catch (e) {
    if (e.name !== "AbortError") throw e;
    finish = "stopped";
  } finally {
    const measuredRate = pieces > 1 && last > first ? (pieces - 1) / ((last - first) / 1000) : null;
    message.stats = {
      ttft_s: timings?.ttft_s ?? (first !== null ? (first - t0) / 1000 : null),
      tokens_per_s: timings?.decode_tokens_per_s ?? measuredRate,
      tokens: usage?.completion_tokens ?? pieces,
      cached_tokens: usage?.prompt_tokens_details?.cached_tokens ?? 0,
      finish: finish ?? (signal.aborted ? "stopped" : null),
    };
  }
}
