// Formatting helpers for the JSON the API returns (protojson with proto
// field names): enums are full names, uint64 values are strings, durations
// are strings like "1.5s", timestamps are RFC 3339.

// enumName turns ACTIVITY_STATE_TIMED_OUT into "timed out" given the prefix.
export function enumName(value, prefix) {
  if (!value) return "";
  let s = String(value);
  if (s.startsWith(prefix)) s = s.slice(prefix.length);
  return s.toLowerCase().replace(/_/g, " ");
}

// seconds parses a protojson duration ("1.500s") into seconds; 0 if unset.
export function seconds(d) {
  if (!d) return 0;
  const n = parseFloat(d);
  return Number.isFinite(n) ? n : 0;
}

// human renders a span of seconds compactly: 850ms, 12.3s, 4m05s, 2h10m, 3d4h.
export function human(sec) {
  if (!Number.isFinite(sec)) return "";
  const neg = sec < 0;
  sec = Math.abs(sec);
  let out;
  if (sec < 1) out = `${Math.round(sec * 1000)}ms`;
  else if (sec < 60) out = `${sec < 10 ? sec.toFixed(1) : Math.round(sec)}s`;
  else if (sec < 3600) out = `${Math.floor(sec / 60)}m${pad(Math.floor(sec % 60))}s`;
  else if (sec < 86400) out = `${Math.floor(sec / 3600)}h${pad(Math.floor((sec % 3600) / 60))}m`;
  else out = `${Math.floor(sec / 86400)}d${Math.floor((sec % 86400) / 3600)}h`;
  return neg ? `-${out}` : out;
}

// ago renders how long before now a timestamp was, coarsely (whole seconds
// below a minute), so that a table refreshed every few seconds changes as
// little text as possible.
export function ago(ts, now = Date.now()) {
  const t = millis(ts);
  if (!t) return "—";
  const sec = Math.max(0, (now - t) / 1000);
  if (sec < 1) return "now";
  if (sec < 60) return `${Math.floor(sec)}s ago`;
  return `${human(sec)} ago`;
}

// millis parses an RFC 3339 timestamp into epoch milliseconds; 0 if unset.
export function millis(ts) {
  if (!ts) return 0;
  const t = Date.parse(ts);
  return Number.isFinite(t) ? t : 0;
}

function pad(n, w = 2) {
  return String(n).padStart(w, "0");
}

// clock renders a timestamp as local time: HH:MM:SS.mmm today, with the
// date in front otherwise.
export function clock(ts) {
  const t = millis(ts);
  if (!t) return "—";
  const d = new Date(t);
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  const today = new Date();
  if (d.toDateString() === today.toDateString()) return time;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
}

// span is the time between two timestamps in seconds, up to now when the
// second is unset; NaN when the first is unset.
export function span(from, to) {
  const a = millis(from);
  if (!a) return NaN;
  const b = to ? millis(to) : Date.now();
  return (b - a) / 1000;
}

// payload renders a payload as the JSON API gives it (docs/protocol.md,
// payloads): a JSON value is shown as JSON, on one line when short; bytes
// that are not JSON come as {"base64": "..."} and are shown as such, marked.
export function payload(v, limit = 4000) {
  if (v === undefined || v === null) return "";
  const keys = typeof v === "object" && !Array.isArray(v) ? Object.keys(v) : [];
  if (keys.length === 1 && keys[0] === "base64" && typeof v.base64 === "string") {
    const size = Math.floor((v.base64.length * 3) / 4) - (v.base64.match(/=*$/)[0].length);
    return clip(`not JSON, ${size} bytes, base64: ${v.base64}`, limit);
  }
  const line = JSON.stringify(v);
  return clip(line.length <= 80 ? line : JSON.stringify(v, null, 2), limit);
}

function clip(text, limit) {
  return text.length > limit ? `${text.slice(0, limit)}… (${text.length} characters)` : text;
}

// placement renders a namespace's placement: "unplaced", "pinned n1, n2".
export function placement(p) {
  const mode = enumName(p && p.mode, "PLACEMENT_MODE_") || "unplaced";
  const nodes = (p && p.nodes) || [];
  return nodes.length ? `${mode} ${nodes.join(", ")}` : mode;
}

// count renders a number with thin grouping.
export function count(n) {
  return Number(n || 0).toLocaleString("en-US");
}

// goDuration renders a span of seconds exactly, the way Go and the CLI
// write durations (1h, 1h30m, 15m, 2.5s, 500ms), for what a user set rather
// than what was measured; "0s" for none.
export function goDuration(sec) {
  if (!Number.isFinite(sec) || sec === 0) return "0s";
  const neg = sec < 0;
  sec = Math.abs(sec);
  let out;
  if (sec < 1) {
    out = `${+(sec * 1000).toFixed(3)}ms`;
  } else {
    const hours = Math.floor(sec / 3600);
    const mins = Math.floor((sec % 3600) / 60);
    const secs = +(sec % 60).toFixed(3);
    out = `${hours ? `${hours}h` : ""}${mins ? `${mins}m` : ""}${secs ? `${secs}s` : ""}`;
  }
  return neg ? `-${out}` : out;
}

// zoned renders a timestamp as the wall clock of an IANA time zone:
// "2026-03-09 03:00:00 GMT+1". A zone the browser does not know falls back
// to local time, as clock has it.
export function zoned(ts, zone) {
  const t = millis(ts);
  if (!t) return "—";
  try {
    const parts = {};
    const f = new Intl.DateTimeFormat("en-US", {
      timeZone: zone || "UTC",
      hourCycle: "h23",
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      minute: "2-digit",
      second: "2-digit",
      timeZoneName: "short",
    });
    for (const p of f.formatToParts(new Date(t))) parts[p.type] = p.value;
    return `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}:${parts.second} ${parts.timeZoneName}`;
  } catch {
    return clock(ts);
  }
}
