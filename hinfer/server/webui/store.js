// What the page keeps in the browser's localStorage: conversations, settings and the API key.

const CONVERSATIONS = "hinfer.conversations";
const CURRENT = "hinfer.current";
const SETTINGS = "hinfer.settings";
const API_KEY = "hinfer.apiKey";

export const DEFAULT_SETTINGS = Object.freeze({
  system: "",
  temperature: 0.7,
  top_p: 0.95,
  max_tokens: 1024,
  thinking: true,
  tools: "",  // a JSON array of OpenAI tools, offered to the model when set
});

function read(key, fallback) {
  try {
    const text = localStorage.getItem(key);
    return text === null ? fallback : JSON.parse(text);
  } catch {
    return fallback;  // storage off or a corrupt value: start clean rather than not at all
  }
}

// Returns an error message when the browser refused (quota full, storage off), else null.
function write(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
    return null;
  } catch (e) {
    return `could not save in the browser's storage: ${e.message}`;
  }
}

export function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

export function loadConversations() {
  const list = read(CONVERSATIONS, []);
  return Array.isArray(list) ? list.filter((c) => c && typeof c.id === "string" && Array.isArray(c.messages)) : [];
}

export function saveConversations(list) {
  return write(CONVERSATIONS, list);
}

export function loadCurrentId() {
  return read(CURRENT, null);
}

export function saveCurrentId(id) {
  return write(CURRENT, id);
}

export function loadSettings() {
  return { ...DEFAULT_SETTINGS, ...read(SETTINGS, {}) };
}

export function saveSettings(settings) {
  return write(SETTINGS, settings);
}

export function loadApiKey() {
  return read(API_KEY, "") || "";
}

export function saveApiKey(key) {
  if (!key) {
    try { localStorage.removeItem(API_KEY); } catch { /* storage off: nothing kept anyway */ }
    return null;
  }
  return write(API_KEY, key);
}
