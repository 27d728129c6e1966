// The server's API on the page's own origin: the model list, /metrics and streamed chat completions.
import { sseData } from "./sse.js";

export class ApiError extends Error {
  constructor(status, message, code = null) {
    super(message);
    this.status = status;  // 0: the server could not be reached
    this.code = code;
  }

  // What the page shows: the HTTP status in words a person can act on, then the server's own message.
  describe() {
    if (this.status === 401) return `Wrong or missing API key (401). Enter the key the server was started with (--api-key). Server: ${this.message}`;
    if (this.status === 429) return `The server is busy (429): every lane is taken and the queue is full. Try again in a moment. Server: ${this.message}`;
    if (this.status === 503) return `The server is unavailable (503): ${this.message}`;
    if (this.status === 0) return `Cannot reach the server: ${this.message}`;
    return `Error ${this.status}: ${this.message}`;
  }
}

function headers(apiKey, json = false) {
  const h = {};
  if (apiKey) h.Authorization = `Bearer ${apiKey}`;
  if (json) h["Content-Type"] = "application/json";
  return h;
}

async function request(path, apiKey, init = {}) {
  let response;
  try {
    response = await fetch(path, { ...init, headers: headers(apiKey, init.body !== undefined) });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, e.message);
  }
  if (!response.ok) throw await errorOf(response);
  return response;
}

async function errorOf(response) {
  let message = response.statusText || "request failed";
  let code = null;
  try {
    const body = await response.json();
    const err = body.error || {};
    message = err.message || message;
    code = err.code || err.type || null;
  } catch { /* not JSON: keep the status text */ }
  return new ApiError(response.status, message, code);
}

export async function fetchModel(apiKey) {
  const body = await (await request("/v1/models", apiKey)).json();
  return body.data?.[0]?.id ?? null;
}

export async function fetchMetrics(apiKey) {
  return (await request("/metrics", apiKey)).text();
}

// Yields the parsed chunks of a streamed /v1/chat/completions answer. A `data: {"error": ...}` event (the server
// failing mid-stream, or shutting down) is thrown as an ApiError.
export async function* streamChat(body, apiKey, signal) {
  const response = await request("/v1/chat/completions", apiKey,
    { method: "POST", body: JSON.stringify({ ...body, stream: true }), signal });
  for await (const data of sseData(response.body)) {
    if (data === "[DONE]") return;
    let chunk;
    try { chunk = JSON.parse(data); } catch { continue; }
    if (chunk.error) throw new ApiError(500, chunk.error.message || "the server failed mid-answer", chunk.error.code);
    yield chunk;
  }
}
