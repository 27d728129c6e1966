// /metrics (Prometheus text) -> the few figures the status strip shows.

// name{labels} value: label values are quoted and may hold any character, `}` included.
const SAMPLE = /^([A-Za-z_:][\w:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(\S+)/;

// Returns {metric name: its first sample's value}; the engine figures the strip shows have one sample each.
export function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = SAMPLE.exec(line);
    if (m && !(m[1] in out)) out[m[1]] = Number(m[3]);
  }
  return out;
}

export function summarize(values) {
  const get = (name) => (Number.isFinite(values[name]) ? values[name] : null);
  return {
    lanesBusy: get("hinfer_engine_lanes_busy"),
    lanesTotal: get("hinfer_engine_lanes_total"),
    queued: get("hinfer_engine_queue_depth"),
    hitRate: get("hinfer_engine_prefix_hit_rate"),  // absent when the prefix cache is off
  };
}

export function statusText(s) {
  const parts = [];
  if (s.lanesTotal !== null) parts.push(`lanes ${s.lanesBusy ?? "?"}/${s.lanesTotal} busy`);
  if (s.queued !== null) parts.push(`queued ${s.queued}`);
  parts.push(s.hitRate === null ? "prefix cache off" : `cache hit ${(100 * s.hitRate).toFixed(0)}%`);
  return parts.join(" · ");
}
