// The page: conversations in the sidebar, the open one in the middle, the composer, settings and key prompts,
// and the status strip. Answers stream from this server's /v1/chat/completions.
import { ApiError, fetchMetrics, fetchModel } from "./api.js";
import { buildRequest, runAnswer } from "./chat.js";
import { MessageView } from "./message_view.js";
import { parseMetrics, statusText, summarize } from "./metrics.js";
import { fillSettings, readSettings } from "./settings.js";
import * as store from "./store.js";

const $ = (id) => document.getElementById(id);
const STATUS_EVERY_MS = 2000;
const SAVE_EVERY_MS = 1000;  // while a stream runs; every finished answer is saved at once

const state = {
  conversations: store.loadConversations(),
  currentId: store.loadCurrentId(),
  settings: store.loadSettings(),
  apiKey: store.loadApiKey(),
  model: null,
  running: null,  // {controller, conversation, message} while an answer streams
  views: new Map(),  // message id -> MessageView of the open conversation
};

// ---- storage -----------------------------------------------------------------------------------------------
let lastSave = 0;

function save(force = true) {
  const now = Date.now();
  if (!force && now - lastSave < SAVE_EVERY_MS) return;
  lastSave = now;
  const stored = state.conversations.map((c) => ({ ...c, messages: c.messages.map(({ streaming, ...m }) => m) }));
  const err = store.saveConversations(stored) || store.saveCurrentId(state.currentId);
  if (err) showBanner(err);
}

function current() {
  return state.conversations.find((c) => c.id === state.currentId) || null;
}

function newConversation() {
  const c = { id: store.newId(), title: "New chat", created: Date.now(), messages: [] };
  state.conversations.unshift(c);
  state.currentId = c.id;
  return c;
}

// ---- drawing -----------------------------------------------------------------------------------------------
function showBanner(text) {
  $("banner").textContent = text || "";
  $("banner").hidden = !text;
}

function drawSidebar() {
  const list = $("conversations");
  list.replaceChildren(...state.conversations.map((c) => {
    const li = document.createElement("li");
    li.className = c.id === state.currentId ? "active" : "";
    const open = document.createElement("button");
    open.type = "button";
    open.className = "open-chat";
    open.textContent = c.title;
    open.title = c.title;
    open.addEventListener("click", () => { openConversation(c.id); document.body.classList.remove("sidebar-open"); });
    const del = document.createElement("button");
    del.type = "button";
    del.className = "delete-chat";
    del.textContent = "×";
    del.setAttribute("aria-label", `delete ${c.title}`);
    del.addEventListener("click", () => deleteConversation(c.id));
    li.append(open, del);
    return li;
  }));
}

function drawMessages() {
  const box = $("messages");
  const c = current();
  state.views.clear();
  const nodes = (c?.messages || []).map((m) => {
    const view = new MessageView(m, { onEdit: editAndResend, onRegenerate: regenerate });
    state.views.set(m.id, view);
    return view.root;
  });
  $("empty").hidden = nodes.length > 0;
  box.replaceChildren($("empty"), ...nodes);
  drawActions();
  box.scrollTop = box.scrollHeight;
}

function drawActions() {
  const busy = state.running !== null;
  const msgs = current()?.messages || [];
  msgs.forEach((m, i) => state.views.get(m.id)?.setActions({ busy, last: i === msgs.length - 1 }));
  $("send").hidden = busy;
  $("stop").hidden = !busy;
}

let frame = null;

function redrawSoon(message) {  // at most once per animation frame, however fast the tokens come
  if (frame !== null) return;
  frame = requestAnimationFrame(() => {
    frame = null;
    const view = state.views.get(message.id);
    if (!view) return;
    const box = $("messages");
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    view.update();
    if (atBottom) box.scrollTop = box.scrollHeight;
  });
}

// ---- conversations -----------------------------------------------------------------------------------------
function openConversation(id) {
  state.currentId = id;
  save();
  drawSidebar();
  drawMessages();
}

function deleteConversation(id) {
  if (state.running?.conversation.id === id) state.running.controller.abort();
  state.conversations = state.conversations.filter((c) => c.id !== id);
  if (state.currentId === id) state.currentId = state.conversations[0]?.id ?? null;
  save();
  drawSidebar();
  drawMessages();
}

async function send(text) {
  if (state.running || !text.trim()) return;
  const c = current() || newConversation();
  if (!c.messages.length) c.title = text.trim().split("\n")[0].slice(0, 60);
  c.messages.push({ id: store.newId(), role: "user", content: text });
  $("input").value = "";
  save();
  drawSidebar();
  await answer(c);
}

function regenerate(message) {
  const c = current();
  if (state.running || !c) return;
  c.messages = c.messages.filter((m) => m.id !== message.id);
  answer(c);
}

function editAndResend(message, text) {
  const c = current();
  if (state.running || !c || !text.trim()) return;
  const at = c.messages.findIndex((m) => m.id === message.id);
  message.content = text;
  c.messages = c.messages.slice(0, at + 1);
  if (at === 0) c.title = text.trim().split("\n")[0].slice(0, 60);
  save();
  drawSidebar();
  answer(c);
}

async function answer(c) {
  const message = { id: store.newId(), role: "assistant", content: "", reasoning: "", toolCalls: [], streaming: true };
  const history = c.messages.slice();
  c.messages.push(message);
  const controller = new AbortController();
  state.running = { controller, conversation: c, message };
  drawMessages();
  try {
    const body = buildRequest(state.model || await loadModel(), history, state.settings);
    await runAnswer(body, message, state.apiKey, controller.signal, () => { redrawSoon(message); save(false); });
  } catch (e) {
    message.error = e instanceof ApiError ? e.describe() : e.message;
    if (!message.content && !message.reasoning && !message.toolCalls.length) message.stats = null;  // nothing came
    if (e instanceof ApiError && e.status === 401) askForKey(message.error, true);
  } finally {
    message.streaming = false;
    state.running = null;
    save();
    if (state.currentId === c.id) {
      state.views.get(message.id)?.update();
      drawActions();
    }
    refreshStatus();
  }
}

function stop() {
  state.running?.controller.abort();  // closes the connection: the server aborts the request and frees the lane
}

// ---- model, key and status ---------------------------------------------------------------------------------
async function loadModel() {
  state.model = await fetchModel(state.apiKey);
  $("model-name").textContent = state.model || "hinfer";
  return state.model;
}

function askForKey(message, wrong) {
  $("key-message").textContent = message;
  $("key-message").classList.toggle("error", wrong);
  $("key-form").hidden = false;
  $("key-input").focus();
}

async function connect() {
  try {
    await loadModel();
    $("key-form").hidden = true;
    showBanner("");
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    if (e.status === 401) {
      askForKey(state.apiKey ? e.describe() : "This server needs an API key (it was started with --api-key).",
        Boolean(state.apiKey));
    } else {
      showBanner(e.describe());
    }
  }
  refreshStatus();
}

let statusTimer = null;

async function refreshStatus() {
  clearTimeout(statusTimer);
  try {
    $("status").textContent = statusText(summarize(parseMetrics(await fetchMetrics(state.apiKey))));
    $("status").classList.remove("down");
  } catch (e) {
    $("status").textContent = e instanceof ApiError && e.status === 401 ? "status: needs the API key"
      : "status: server unreachable";
    $("status").classList.add("down");
  }
  if (!document.hidden) statusTimer = setTimeout(refreshStatus, STATUS_EVERY_MS);
}

// ---- events ------------------------------------------------------------------------------------------------
function openSettings() {
  fillSettings(state.settings, state.apiKey);
  $("settings").showModal();
}

function saveSettings(event) {
  event.preventDefault();
  let read;
  try {
    read = readSettings();
  } catch (e) {
    $("settings-error").textContent = e.message;
    return;
  }
  state.settings = read.settings;
  const err = store.saveSettings(state.settings);
  if (err) showBanner(err);
  $("settings").close();
  if (read.apiKey !== state.apiKey) useKey(read.apiKey);
}

function useKey(key) {
  state.apiKey = key;
  const err = store.saveApiKey(key);
  if (err) showBanner(err);
  connect();
}

function onKeydown(event) {
  if (event.key === "Escape" && state.running && !$("settings").open) {
    event.preventDefault();
    stop();
  }
}

function onComposerKey(event) {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send($("input").value);
  }
}

function init() {
  if (state.currentId && !current()) state.currentId = null;
  $("composer").addEventListener("submit", (e) => { e.preventDefault(); send($("input").value); });
  $("input").addEventListener("keydown", onComposerKey);
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", () => {
    state.currentId = null;
    drawSidebar();
    drawMessages();
    document.body.classList.remove("sidebar-open");
    $("input").focus();
  });
  $("open-settings").addEventListener("click", openSettings);
  $("settings-form").addEventListener("submit", saveSettings);
  $("settings-cancel").addEventListener("click", () => $("settings").close());
  $("key-form").addEventListener("submit", (e) => { e.preventDefault(); useKey($("key-input").value.trim()); });
  $("toggle-sidebar").addEventListener("click", () => document.body.classList.toggle("sidebar-open"));
  document.addEventListener("keydown", onKeydown);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refreshStatus(); });
  drawSidebar();
  drawMessages();
  connect();
  $("input").focus();
}

init();
