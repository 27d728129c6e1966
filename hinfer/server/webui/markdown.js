// A small Markdown renderer that builds DOM nodes, never HTML strings: whatever the model writes (tags, scripts,
// entities) ends up as text. It covers what chat answers use: fenced code (with a copy button; an unclosed fence
// runs to the end, as while streaming), headings, lists, quotes, tables, rules, paragraphs, and inline code,
// bold, italic, strike-through and links (http, https and mailto only).
import { copyButton } from "./clipboard.js";

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}>\s?/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$/;
const SAFE_HREF = /^(?:https?:|mailto:)/i;

const INLINE = new RegExp([
  "(?<tick>`+)(?<code>[\\s\\S]*?[^`])\\k<tick>(?!`)",
  "\\[(?<ltext>[^\\]\\n]+)\\]\\((?<href>[^)\\s]+)(?:\\s+\"[^\"\\n]*\")?\\)",
  "(?<url>https?://[^\\s<>]*[^\\s<>.,;:!?'\")\\]])",
  "\\*\\*(?<b1>\\S(?:[\\s\\S]*?\\S)?)\\*\\*",
  "__(?<b2>\\S(?:[\\s\\S]*?\\S)?)__",
  "~~(?<s>\\S(?:[\\s\\S]*?\\S)?)~~",
  "\\*(?<i1>[^*\\s](?:[^*]*?[^*\\s])?)\\*",
  "(?<!\\w)_(?<i2>[^_\\s](?:[^_]*?[^_\\s])?)_(?!\\w)",
].join("|"), "g");

function el(tag, className) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  return node;
}

function isBlockStart(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);
}

export function renderMarkdown(text) {
  const fragment = document.createDocumentFragment();
  renderBlocks(String(text).replace(/\r\n?/g, "\n").split("\n"), fragment);
  return fragment;
}

function renderBlocks(lines, parent) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (!line.trim()) {
      i += 1;
    } else if ((m = FENCE.exec(line))) {
      const close = new RegExp(`^ {0,3}${m[1][0] === "`" ? "`" : "~"}{${m[1].length},}\\s*$`);
      const body = [];
      for (i += 1; i < lines.length && !close.test(lines[i]); i += 1) body.push(lines[i]);
      i += 1;  // the closing fence (or past the end)
      parent.append(codeBlock(body.join("\n"), m[2]));
    } else if ((m = HEADING.exec(line))) {
      const h = el(`h${m[1].length}`);
      inline(m[2], h);
      parent.append(h);
      i += 1;
    } else if (RULE.test(line)) {
      parent.append(el("hr"));
      i += 1;
    } else if (QUOTE.test(line)) {
      const body = [];
      for (; i < lines.length && QUOTE.test(lines[i]); i += 1) body.push(lines[i].replace(QUOTE, ""));
      const quote = el("blockquote");
      renderBlocks(body, quote);
      parent.append(quote);
    } else if (ITEM.test(line)) {
      i = list(lines, i, parent);
    } else if (line.includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1])) {
      i = table(lines, i, parent);
    } else {
      const body = [line];
      for (i += 1; i < lines.length && lines[i].trim() && !isBlockStart(lines[i]); i += 1) body.push(lines[i]);
      const p = el("p");
      body.forEach((l, k) => {
        if (k) p.append(el("br"));
        inline(l.trim(), p);
      });
      parent.append(p);
    }
  }
}

function codeBlock(code, lang) {
  const box = el("div", "code-block");
  const head = el("div", "code-head");
  const name = el("span", "code-lang");
  name.textContent = lang || "text";
  head.append(name, copyButton(() => code));
  const pre = el("pre");
  const c = el("code");
  c.textContent = code;
  pre.append(c);
  box.append(head, pre);
  return box;
}

// One list (ordered or not) from line i; an item's following lines indented past its marker are its own blocks
// (nested lists, code). Returns the index after the list.
function list(lines, i, parent) {
  const first = ITEM.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const node = el(ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
    const pad = m[1].length + m[2].length + 1;
    const body = [m[3]];
    for (i += 1; i < lines.length; i += 1) {
      const l = lines[i];
      const next = ITEM.exec(l);
      if (next && next[1].length <= indent) break;
      if (!l.trim()) {  // a blank line: the item goes on only if indented text follows
        if (i + 1 < lines.length && /^\s+\S/.test(lines[i + 1]) && !(ITEM.exec(lines[i + 1])?.[1].length <= indent)) {
          body.push("");
          continue;
        }
        break;
      }
      if (!/^\s/.test(l) && isBlockStart(l)) break;
      body.push(l.slice(Math.min(pad, l.length - l.trimStart().length)));
    }
    const li = el("li");
    renderBlocks(body, li);
    node.append(li);
  }
  parent.append(node);
  return i;
}

function cells(line) {
  let s = line.trim();
  if (s.startsWith("|")) s = s.slice(1);
  if (s.endsWith("|") && !s.endsWith("\\|")) s = s.slice(0, -1);
  return s.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
}

function table(lines, i, parent) {
  const wrap = el("div", "table-wrap");
  const node = el("table");
  const align = cells(lines[i + 1]).map((c) => (c.endsWith(":") ? (c.startsWith(":") ? "center" : "right") : ""));
  const row = (line, tag) => {
    const tr = el("tr");
    cells(line).forEach((c, k) => {
      const td = el(tag);
      if (align[k]) td.style.textAlign = align[k];
      inline(c, td);
      tr.append(td);
    });
    return tr;
  };
  const head = el("thead");
  head.append(row(lines[i], "th"));
  const body = el("tbody");
  for (i += 2; i < lines.length && lines[i].includes("|") && lines[i].trim(); i += 1) body.append(row(lines[i], "td"));
  node.append(head, body);
  wrap.append(node);
  parent.append(wrap);
  return i;
}

function inline(text, parent) {
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) parent.append(text.slice(last, m.index));
    last = m.index + m[0].length;
    const g = m.groups;
    if (g.code !== undefined) {
      const c = el("code");
      c.textContent = g.code.length > 2 && g.code.startsWith(" ") && g.code.endsWith(" ") ? g.code.slice(1, -1) : g.code;
      parent.append(c);
    } else if (g.href !== undefined) {
      if (SAFE_HREF.test(g.href)) {
        const a = link(g.href);
        inline(g.ltext, a);
        parent.append(a);
      } else {
        parent.append(m[0]);  // javascript:, data: and relative links stay text
      }
    } else if (g.url !== undefined) {
      const a = link(g.url);
      a.textContent = g.url;
      parent.append(a);
    } else {
      const bold = g.b1 ?? g.b2;
      const [tag, inner] = bold !== undefined ? ["strong", bold] : g.s !== undefined ? ["del", g.s] : ["em", g.i1 ?? g.i2];
      const node = el(tag);
      inline(inner, node);
      parent.append(node);
    }
  }
  if (last < text.length) parent.append(text.slice(last));
}

function link(href) {
  const a = el("a");
  a.href = href;
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  return a;
}
