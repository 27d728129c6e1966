// Server-sent events from a fetch() body: yields each event's data (the `data:` lines joined), as text.

// Aborting the fetch (its AbortSignal) makes the pending read throw an AbortError, which ends the loop.
export async function* sseData(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buffer.search(/\r?\n/)) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + (buffer[nl] === "\r" ? 2 : 1));
        if (line === "") {  // a blank line ends the event
          if (data.length) yield data.join("\n");
          data = [];
        } else if (line.startsWith("data:")) {
          data.push(line.slice(line[5] === " " ? 6 : 5));
        }  // `event:`, `id:` and `:` comments carry nothing the page needs
      }
    }
    if (data.length) yield data.join("\n");
  } finally {
    reader.cancel().catch(() => {});  // a consumer that stops early closes the connection too
  }
}
