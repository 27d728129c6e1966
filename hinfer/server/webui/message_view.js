// One message on screen: the user's text, or the answer with its thinking (collapsed), tool calls, error and
// speed line. update() redraws the parts that change while a stream runs; the <details> element stays, so a
// thinking block the reader opened stays open.
import { copyButton } from "./clipboard.js";
import { renderMarkdown } from "./markdown.js";

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function button(label, className, onClick) {
  const b = el("button", className, label);
  b.type = "button";
  b.addEventListener("click", onClick);
  return b;
}

export function statsText(stats) {
  if (!stats) return "";
  const parts = [];
  if (Number.isFinite(stats.ttft_s)) parts.push(`TTFT ${stats.ttft_s.toFixed(2)} s`);
  if (Number.isFinite(stats.tokens_per_s)) parts.push(`${stats.tokens_per_s.toFixed(1)} tok/s`);
  if (Number.isFinite(stats.tokens)) parts.push(`${stats.tokens} tokens`);
  if (stats.cached_tokens) parts.push(`${stats.cached_tokens} prompt tokens cached`);
  if (stats.finish) parts.push(stats.finish === "stopped" ? "stopped" : `finish: ${stats.finish}`);
  return parts.join(" · ");
}

function toolCallNode(call) {
  const box = el("div", "tool-call");
  box.append(el("div", "tool-name", `tool call: ${call.name || "?"}`));
  let args = call.arguments || "";
  try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* still streaming, or not JSON: as sent */ }
  box.append(el("pre", "tool-args", args));
  return box;
}

export class MessageView {
  // actions: {onEdit(message, text), onRegenerate(message)}; both are left out where they do not apply.
  constructor(message, actions = {}) {
    this.message = message;
    this.actions = actions;
    this.root = el("article", `message ${message.role}`);
    this.root.dataset.id = message.id;
    this.thinking = el("details", "thinking");
    this.thinkingLabel = el("summary");
    this.thinkingBody = el("div", "thinking-body");
    this.thinking.append(this.thinkingLabel, this.thinkingBody);
    this.body = el("div", "body");
    this.tools = el("div", "tool-calls");
    this.error = el("div", "error");
    this.error.setAttribute("role", "alert");
    this.stats = el("div", "stats");
    this.bar = el("div", "actions");
    this.root.append(this.thinking, this.body, this.tools, this.error, this.stats, this.bar);
    this.update();
  }

  update() {
    const m = this.message;
    this.thinking.hidden = !m.reasoning;
    if (m.reasoning) {
      this.thinkingLabel.textContent = m.streaming && !m.content ? "Thinking…" : `Thought (${m.reasoning.length} characters)`;
      this.thinkingBody.replaceChildren(renderMarkdown(m.reasoning));
    }
    this.body.replaceChildren(renderMarkdown(m.content || ""));
    this.body.hidden = !m.content;
    this.tools.replaceChildren(...(m.toolCalls || []).map(toolCallNode));
    this.error.textContent = m.error || "";
    this.error.hidden = !m.error;
    this.stats.textContent = m.streaming ? (m.content || m.reasoning ? "streaming…" : "waiting for the first token…")
      : statsText(m.stats);
    this.root.classList.toggle("streaming", Boolean(m.streaming));
  }

  // The buttons under the message; redrawn when what may be done changes (a stream starts or ends).
  setActions({ busy, last }) {
    const m = this.message;
    const items = [];
    if (!m.streaming) items.push(copyButton(() => m.content || m.reasoning || ""));
    if (m.role === "user" && this.actions.onEdit && !busy) items.push(button("Edit", "edit", () => this.edit()));
    if (m.role === "assistant" && last && this.actions.onRegenerate && !busy) {
      items.push(button("Regenerate", "regenerate", () => this.actions.onRegenerate(m)));
    }
    this.bar.replaceChildren(...items);
  }

  edit() {
    const area = el("textarea", "edit-area");
    area.value = this.message.content;
    area.rows = Math.min(12, Math.max(2, this.message.content.split("\n").length));
    const save = button("Save & send", "save-edit", () => this.actions.onEdit(this.message, area.value));
    const cancel = button("Cancel", "cancel-edit", () => {
      this.body.hidden = false;
      form.remove();
      this.bar.hidden = false;
    });
    const form = el("div", "edit-form");
    form.append(area, el("div", "edit-buttons"));
    form.lastChild.append(save, cancel);
    area.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); save.click(); }
      if (e.key === "Escape") { e.preventDefault(); cancel.click(); }
    });
    this.body.hidden = true;
    this.bar.hidden = true;
    this.body.after(form);
    area.focus();
  }
}
