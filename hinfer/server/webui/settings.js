// The settings dialog: system prompt, sampling, thinking, tools and the API key, to and from its form.
import { parseTools } from "./chat.js";
import { DEFAULT_SETTINGS } from "./store.js";

const $ = (id) => document.getElementById(id);

export function fillSettings(settings, apiKey) {
  $("set-system").value = settings.system;
  $("set-temperature").value = settings.temperature;
  $("set-top-p").value = settings.top_p;
  $("set-max-tokens").value = settings.max_tokens;
  $("set-thinking").checked = settings.thinking;
  $("set-tools").value = settings.tools;
  $("set-key").value = apiKey;
  $("settings-error").textContent = "";
}

function number(id, min, max, fallback) {
  const raw = $(id).value.trim();
  if (raw === "") return fallback;
  const v = Number(raw);
  if (!Number.isFinite(v) || v < min || v > max) throw new Error(`${$(id).dataset.name} must be a number in [${min}, ${max}]`);
  return v;
}

// Returns {settings, apiKey} from the form, or throws an Error naming the field that is wrong.
export function readSettings() {
  const settings = {
    system: $("set-system").value,
    temperature: number("set-temperature", 0, 2, DEFAULT_SETTINGS.temperature),
    top_p: number("set-top-p", 0.01, 1, DEFAULT_SETTINGS.top_p),
    max_tokens: Math.round(number("set-max-tokens", 1, 1 << 20, DEFAULT_SETTINGS.max_tokens)),
    thinking: $("set-thinking").checked,
    tools: $("set-tools").value,
  };
  parseTools(settings.tools);
  return { settings, apiKey: $("set-key").value.trim() };
}
