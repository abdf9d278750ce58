// The aion ops console. Topology (workers connecting, draining and leaving,
// namespaces and their placement, pool load) comes from the Server-Sent
// Events stream at /api/v1/events: a snapshot first, then numbered deltas; a
// reconnect names the last position seen and, when the server still holds
// what was missed, gets `resumed` and just those deltas instead.
// What the stream does not carry (slots in use, last heartbeat) is refreshed
// from /api/v1/workers every few seconds, activities are read from
// /api/v1/activities, workflow runs, with their history, from
// /api/v1/workflows (the stream's run events refresh them sooner) and
// schedules from /api/v1/schedules. Every change marks keyed rows dirty; one
// render per animation frame applies them, so a burst of events costs one
// DOM pass.

import * as fmt from "./format.js";
import { KeyedTable } from "./table.js";

const REFRESH_MS = 2000; // worker figures, activity page, open detail
const FEED_MAX = 200; // events kept in the feed
const PAGE_SIZE = 50; // activities per page
const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 8000;

const $ = (id) => document.getElementById(id);

// h builds an element: h("td", {className: "x", dataset: {a: 1}}, "text", child).
function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null) continue;
    if (k === "dataset") Object.assign(el.dataset, v);
    else if (k in el) el[k] = v;
    else el.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

// The token (API key or JWT) for a server that runs with authentication:
// asked for when the server answers 401 or 403, kept for this tab only, sent
// as a bearer token, and as access_token to the event stream (an
// EventSource cannot set headers).
const TOKEN_KEY = "aion.console.token";
let token = sessionStorage.getItem(TOKEN_KEY) || "";

async function api(path, init = {}) {
  const headers = { Accept: "application/json", ...init.headers };
  if (token) headers.Authorization = `Bearer ${token}`;
  const res = await fetch(path, { ...init, headers });
  const text = await res.text();
  let body = {};
  try {
    body = text ? JSON.parse(text) : {};
  } catch {
    body = { message: text };
  }
  if (!res.ok) {
    const err = new Error(`${body.code || res.status}: ${body.message || res.statusText}`);
    err.status = res.status;
    if (res.status === 401 || res.status === 403) askForToken(err.message);
    throw err;
  }
  return body;
}

function askForToken(why) {
  $("auth-msg").textContent = token ? `The token was refused (${why}).` : "This server needs a token.";
  $("auth-msg").title = why;
  $("auth").hidden = false;
  $("auth-forget").hidden = !token;
}

$("auth").addEventListener("submit", (e) => {
  e.preventDefault();
  token = $("auth-token").value.trim();
  $("auth-token").value = "";
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
  $("auth").hidden = true;
  $("auth-forget").hidden = !token;
  retryMs = RETRY_MIN_MS;
  connect();
  loadActivities();
  loadWorkflows();
  loadSchedules();
});

$("auth-forget").addEventListener("click", () => {
  token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  $("auth-forget").hidden = true;
  if (source) source.close();
  source = null;
  connect();
});

// ---------------------------------------------------------------- state

const state = {
  workers: new Map(), // id (string) -> Worker
  namespaces: new Map(), // name -> Namespace
  pools: new Map(), // namespace -> [PoolStats]
  nsWorkers: new Map(), // namespace -> connected workers serving it
  lastSeq: 0,
  epoch: "", // the stream lastSeq belongs to; empty asks for a snapshot
  snapshots: 0,
  live: false,
};

// ---------------------------------------------------------------- workers

const idOrder = (a, b) => a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
const workerState = (w) => fmt.enumName(w.state, "WORKER_STATE_") || "connected";

function chips(td, list, cls = "chip") {
  td.replaceChildren(...list.map((s) => h("span", { className: cls }, s)));
}

const workersTable = new KeyedTable($("workers-body"), {
  attr: "worker-id",
  rowTag: "div",
  cellTag: "div",
  compare: idOrder,
  rowState: workerState,
  columns: [
    {
      name: "id",
      className: "num mono",
      value: (w) => `${w.id}\u0000${w.peer || ""}\u0000${w.identity || ""}`,
      paint: (td, w) => {
        td.textContent = w.id;
        td.title = [w.server && `server ${w.server}`, w.identity, w.peer, w.sdk_version].filter(Boolean).join(" · ");
      },
    },
    {
      name: "namespaces",
      value: (w) => (w.namespaces || []).join("\u0000"),
      paint: (td, w) => chips(td, w.namespaces || []),
    },
    { name: "task_queue", value: (w) => w.task_queue || "default" },
    { name: "node", value: (w) => w.node || "—" },
    {
      name: "slots",
      init: (td) => td.append(h("span", { className: "bar" }, h("i")), h("span", { className: "n" })),
      value: (w) => `${w.slots_in_use || 0} / ${w.slots || 0}`,
      paint: (td, w, v) => {
        const bar = td.firstChild;
        const used = w.slots_in_use || 0;
        const total = w.slots || 0;
        bar.firstChild.style.width = `${total ? Math.min(100, (100 * used) / total) : 0}%`;
        bar.className = used >= total && total ? "bar full" : "bar";
        td.lastChild.textContent = v;
      },
    },
    {
      name: "state",
      init: (td) => td.append(h("span", { className: "badge" })),
      value: workerState,
      paint: (td, w, v) => {
        td.firstChild.className = `badge ${v}`;
        td.firstChild.textContent = v;
      },
    },
    {
      name: "heartbeat",
      value: (w, now) => fmt.ago(w.last_heartbeat_time, now),
      paint: (td, w, v) => {
        td.textContent = v;
        td.title = fmt.clock(w.last_heartbeat_time);
      },
    },
    {
      name: "connected",
      value: (w, now) => fmt.ago(w.connected_time, now),
      paint: (td, w, v) => {
        td.textContent = v;
        td.title = fmt.clock(w.connected_time);
      },
    },
    {
      name: "actions",
      className: "actions",
      init: (td) => td.append(h("button", { type: "button", className: "ghost", title: "drain this worker" }, "drain")),
      value: workerState,
      paint: (td, w, v) => {
        td.firstChild.dataset.drain = w.id;
        td.firstChild.hidden = v !== "connected";
      },
    },
  ],
});

function workerFilter() {
  const q = $("worker-filter").value.trim().toLowerCase();
  if (!q) {
    workersTable.filter = null;
  } else {
    const terms = q.split(/\s+/);
    workersTable.filter = (w) => {
      const hay = [w.id, ...(w.namespaces || []), w.task_queue || "default", w.node || "", w.server || "", workerState(w)]
        .join(" ")
        .toLowerCase();
      return terms.every((t) => hay.includes(t));
    };
  }
  workersTable.markAll();
  schedule();
}

$("worker-filter").addEventListener("input", workerFilter);

$("workers-body").addEventListener("click", async (e) => {
  const btn = e.target.closest("button[data-drain]");
  if (!btn) return;
  const id = btn.dataset.drain;
  if (!confirm(`Drain worker ${id}? It finishes its in-flight work and takes nothing new.`)) return;
  btn.disabled = true;
  try {
    await api(`/api/v1/workers/${encodeURIComponent(id)}/drain`, { method: "POST" });
  } catch (err) {
    note("error", `drain worker ${id}: ${err.message}`);
    btn.disabled = false;
  }
});

// countWorker adds (+1) or removes (-1) a worker from the per-namespace
// counts: O(its namespaces) per event, not O(workers).
function countWorker(w, delta) {
  for (const ns of w.namespaces || []) {
    const n = (state.nsWorkers.get(ns) || 0) + delta;
    if (n > 0) state.nsWorkers.set(ns, n);
    else state.nsWorkers.delete(ns);
    namespacesTable.mark(ns);
  }
}

// recountNamespaceWorkers counts from scratch, after a snapshot.
function recountNamespaceWorkers() {
  const m = new Map();
  for (const w of state.workers.values()) {
    for (const ns of w.namespaces || []) m.set(ns, (m.get(ns) || 0) + 1);
  }
  const changed = new Set([...m.keys(), ...state.nsWorkers.keys()]);
  for (const ns of changed) {
    if (m.get(ns) !== state.nsWorkers.get(ns)) namespacesTable.mark(ns);
  }
  state.nsWorkers = m;
}

// refreshWorkers brings in the figures the event stream does not carry. It
// never adds or removes a worker: topology is the stream's alone, so a
// response that raced with a connect or disconnect cannot resurrect a
// departed worker.
let refreshing = false;
async function refreshWorkers() {
  if (refreshing) return;
  refreshing = true;
  try {
    const res = await api("/api/v1/workers");
    for (const w of res.workers || []) {
      const cur = state.workers.get(w.id);
      if (!cur) continue;
      const draining = cur.state === "WORKER_STATE_DRAINING";
      Object.assign(cur, w);
      if (draining) cur.state = "WORKER_STATE_DRAINING"; // draining is one-way
    }
  } catch (err) {
    if (state.live && !err.status) note("error", `refresh workers: ${err.message}`);
  } finally {
    refreshing = false;
    workersTable.markAll();
    schedule();
  }
}

// ---------------------------------------------------------------- namespaces

function nsView(name) {
  const ns = state.namespaces.get(name);
  if (!ns) return undefined;
  const pools = state.pools.get(name) || [];
  let backlog = 0;
  let oldest = 0;
  for (const p of pools) {
    backlog += Number(p.backlog || 0);
    oldest = Math.max(oldest, fmt.seconds(p.oldest_age));
  }
  return { ns, pools, backlog, oldest, workers: state.nsWorkers.get(name) || 0 };
}

const namespacesTable = new KeyedTable($("namespaces-body"), {
  attr: "namespace",
  compare: (a, b) => (a < b ? -1 : a > b ? 1 : 0),
  rowState: (v) => (v.backlog > 0 ? "backlogged" : "idle"),
  columns: [
    { name: "name", className: "strong", value: (v) => v.ns.name },
    { name: "origin", value: (v) => fmt.enumName(v.ns.origin, "NAMESPACE_ORIGIN_") || "—" },
    {
      name: "placement",
      value: (v) => fmt.placement(v.ns.placement),
      paint: (td, v, text) => {
        const mode = fmt.enumName(v.ns.placement && v.ns.placement.mode, "PLACEMENT_MODE_") || "unplaced";
        td.replaceChildren(h("span", { className: `badge placement ${mode}` }, text));
      },
    },
    { name: "workers", className: "num", value: (v) => fmt.count(v.workers) },
    { name: "backlog", className: "num", value: (v) => fmt.count(v.backlog) },
    { name: "oldest", className: "num", value: (v) => (v.oldest > 0 ? fmt.human(v.oldest) : "—") },
    {
      name: "pools",
      value: (v) =>
        v.pools.map((p) => `${p.task_queue}|${p.workers || 0}|${p.slots_free || 0}|${p.backlog || 0}`).join(","),
      paint: (td, v) => {
        td.replaceChildren(
          ...v.pools.map((p) =>
            h(
              "span",
              {
                className: Number(p.backlog || 0) > 0 ? "chip pool backlogged" : "chip pool",
                title: `${p.workers || 0} workers, ${p.slots_free || 0} free slots, ${p.backlog || 0} waiting, oldest ${fmt.human(fmt.seconds(p.oldest_age))}`,
              },
              `${p.task_queue} `,
              h("small", {}, `${p.workers || 0}w · ${p.slots_free || 0} free · ${p.backlog || 0} waiting`),
            ),
          ),
        );
      },
    },
  ],
});

// ---------------------------------------------------------------- event feed

const feedEl = $("event-feed");
let pendingFeed = [];

function describe(kind, ev) {
  switch (kind) {
    case "snapshot": {
      const s = ev.snapshot || {};
      return `${(s.workers || []).length} workers, ${(s.namespaces || []).length} namespaces, ${(s.pools || []).length} pools`;
    }
    case "worker_connected": {
      const w = (ev.worker_connected || {}).worker || {};
      const where = [(w.namespaces || []).join(", "), w.task_queue || "default", w.node && `node ${w.node}`]
        .filter(Boolean)
        .join(" · ");
      return `worker ${w.id} · ${where} · ${w.slots || 0} slots`;
    }
    case "worker_draining":
      return `worker ${(ev.worker_draining || {}).worker_id}`;
    case "worker_disconnected": {
      const d = ev.worker_disconnected || {};
      return `worker ${d.worker_id} · ${fmt.enumName(d.reason, "DISCONNECT_REASON_") || "unknown"} · ${(d.namespaces || []).join(", ")}`;
    }
    case "namespace_created": {
      const ns = (ev.namespace_created || {}).namespace || {};
      return `${ns.name} · origin ${fmt.enumName(ns.origin, "NAMESPACE_ORIGIN_")}`;
    }
    case "placement_changed": {
      const ns = (ev.placement_changed || {}).namespace || {};
      return `${ns.name} → ${fmt.placement(ns.placement)}`;
    }
    case "run_started":
    case "run_closed": {
      const r = (ev[kind] || {}).run || {};
      const st = kind === "run_closed" ? ` · ${fmt.enumName(r.status, "RUN_STATUS_")}` : "";
      return `${r.namespace} · ${r.workflow_id} · ${r.workflow_type}${st}`;
    }
    case "schedule_fired": {
      const f = ev.schedule_fired || {};
      const outcome = fmt.enumName(f.outcome, "SCHEDULE_ACTION_OUTCOME_") || "unknown";
      const n = Number(f.count || 1);
      const what = n > 1 ? `${n} ticks ${outcome}` : outcome;
      const tick = f.nominal_time ? ` · tick ${fmt.clock(f.nominal_time)}` : "";
      const action = f.action_id ? ` · ${f.action_id}` : "";
      return `${f.namespace} · ${f.schedule_id} · ${what}${f.origin ? ` (${f.origin})` : ""}${tick}${action}${f.detail ? ` · ${f.detail}` : ""}`;
    }
    case "pool_stats": {
      const pools = (ev.pool_stats || {}).pools || [];
      const backlog = pools.reduce((n, p) => n + Number(p.backlog || 0), 0);
      return `${pools.length} pools · backlog ${backlog}`;
    }
    default:
      return "";
  }
}

function feed(kind, seq, time, text) {
  pendingFeed.push({ kind, seq, time, text });
  if (pendingFeed.length > FEED_MAX) pendingFeed = pendingFeed.slice(-FEED_MAX);
  schedule();
}

// note puts a line from the console itself (not the server) in the feed.
function note(kind, text) {
  feed(kind, "", new Date().toISOString(), text);
}

function flushFeed() {
  if (!pendingFeed.length) return;
  const frag = document.createDocumentFragment();
  for (let i = pendingFeed.length - 1; i >= 0; i--) {
    const e = pendingFeed[i];
    frag.appendChild(
      h(
        "li",
        { dataset: { kind: e.kind, seq: e.seq } },
        h("time", { title: e.time }, fmt.clock(e.time)),
        h("span", { className: `kind ${e.kind}` }, e.kind.replace(/_/g, " ")),
        h("span", { className: "text" }, e.text),
      ),
    );
  }
  pendingFeed = [];
  feedEl.prepend(frag);
  while (feedEl.childElementCount > FEED_MAX) feedEl.lastElementChild.remove();
}

// ---------------------------------------------------------------- event stream

const DELTAS = [
  "worker_connected",
  "worker_draining",
  "worker_disconnected",
  "namespace_created",
  "placement_changed",
  "pool_stats",
  "run_started",
  "run_closed",
  "schedule_fired",
];

let source = null;
let retryMs = RETRY_MIN_MS;
let retryTimer = 0;

function setConn(s, text) {
  const el = $("conn");
  el.dataset.state = s;
  $("conn-text").textContent = text;
  state.live = s === "live";
}

function connect() {
  clearTimeout(retryTimer);
  if (source) source.close();
  setConn(state.snapshots ? "reconnecting" : "connecting", state.snapshots ? "reconnecting…" : "connecting…");
  if (!state.snapshots) performance.mark("aion-stream-open");
  const params = new URLSearchParams();
  if (token) params.set("access_token", token);
  if (state.epoch) params.set("after", `${state.epoch}-${state.lastSeq}`);
  const query = params.toString();
  const es = new EventSource(query ? `/api/v1/events?${query}` : "/api/v1/events");
  source = es;
  let opened = false; // this connection delivered its snapshot, or resumed
  es.addEventListener("snapshot", (m) => {
    if (source !== es) return;
    opened = true;
    if (!state.snapshots) performance.mark("aion-snapshot-arrived");
    onSnapshot(JSON.parse(m.data));
  });
  // The server still held every event since lastSeq: the view stands and
  // the missed deltas follow.
  es.addEventListener("resumed", (m) => {
    if (source !== es) return;
    opened = true;
    retryMs = RETRY_MIN_MS;
    setConn("live", "live");
    note("stream", `resumed after #${JSON.parse(m.data).sequence || 0}`);
  });
  for (const kind of DELTAS) {
    es.addEventListener(kind, (m) => source === es && onDelta(kind, JSON.parse(m.data)));
  }
  // "error" is both the browser's network error and the server's own
  // `event: error` (a subscriber that fell too far behind). Either way the
  // stream ends there: reconnect after the last delta received (the server
  // answers with a fresh snapshot when it no longer holds what followed).
  es.addEventListener("error", (m) => {
    if (source !== es) return;
    let why = "event stream lost";
    if (m.data) {
      try {
        why = JSON.parse(m.data).message || why;
      } catch {
        /* keep the generic reason */
      }
    }
    if (opened) {
      resubscribe(why);
      return;
    }
    // It failed before its snapshot: the server may be down, or refusing
    // us (an EventSource does not say which). Ask the same question with a
    // fetch, which tells; a refusal waits for a token instead of retrying.
    es.close();
    api("/api/v1/workers?namespace=aion-console-probe").then(
      () => source === es && resubscribe(why),
      (err) => {
        if (source !== es) return;
        if (err.status === 401 || err.status === 403) {
          source = null;
          setConn("unauthorized", "needs a token");
        } else {
          resubscribe(why);
        }
      },
    );
  });
}

function resubscribe(why, now = false) {
  if (source) source.close();
  source = null;
  const wait = now ? 0 : retryMs;
  retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
  setConn("reconnecting", wait ? `reconnecting in ${fmt.human(wait / 1000)}` : "reconnecting…");
  note("stream", `${why}; ${wait ? `reconnecting in ${fmt.human(wait / 1000)}` : "reconnecting"}`);
  retryTimer = setTimeout(connect, wait);
}

function replace(map, items, keyOf, table) {
  const next = new Map();
  for (const it of items) next.set(keyOf(it), it);
  for (const k of map.keys()) if (!next.has(k)) table.mark(k);
  for (const k of next.keys()) table.mark(k);
  return next;
}

function setPools(pools) {
  const next = new Map();
  for (const p of pools || []) {
    if (!next.has(p.namespace)) next.set(p.namespace, []);
    next.get(p.namespace).push(p);
  }
  // pool_stats carries every pool with workers or backlog, so a namespace
  // missing from it has neither.
  for (const ns of new Set([...state.pools.keys(), ...next.keys()])) namespacesTable.mark(ns);
  state.pools = next;
}

function onSnapshot(ev) {
  if (!state.snapshots) performance.mark("aion-snapshot-received");
  const snap = ev.snapshot || {};
  state.lastSeq = Number(ev.sequence || 0);
  state.epoch = ev.epoch || "";
  state.snapshots++;
  workersTable.quiet = namespacesTable.quiet = true;
  state.workers = replace(state.workers, snap.workers || [], (w) => w.id, workersTable);
  state.namespaces = replace(state.namespaces, snap.namespaces || [], (n) => n.name, namespacesTable);
  setPools(snap.pools);
  recountNamespaceWorkers();
  nsOptionsDirty = true;
  retryMs = RETRY_MIN_MS;
  setConn("live", "live");
  feed("snapshot", String(state.lastSeq), ev.time, describe("snapshot", ev));
  schedule();
  // The snapshot's slot figures may be stale; refresh them, after the
  // first render so that the two do not compete for the first frame.
  if (firstRender) refreshWorkers();
}

function onDelta(kind, ev) {
  const seq = Number(ev.sequence || 0);
  // Events of namespaces the caller may not see are not sent, so the
  // sequence may skip ahead; within one stream it never goes back.
  if (seq <= state.lastSeq) {
    state.epoch = ""; // the view cannot be trusted: start over from a snapshot
    resubscribe(`event stream went back from #${state.lastSeq} to #${seq}`, true);
    return;
  }
  state.lastSeq = seq;
  switch (kind) {
    case "worker_connected": {
      const w = ev.worker_connected.worker;
      const had = state.workers.get(w.id);
      if (had) countWorker(had, -1);
      state.workers.set(w.id, w);
      countWorker(w, +1);
      workersTable.mark(w.id);
      break;
    }
    case "worker_draining": {
      const w = state.workers.get(ev.worker_draining.worker_id);
      if (w) {
        w.state = "WORKER_STATE_DRAINING";
        workersTable.mark(w.id);
      }
      break;
    }
    case "worker_disconnected": {
      const id = ev.worker_disconnected.worker_id;
      const had = state.workers.get(id);
      if (had) countWorker(had, -1);
      state.workers.delete(id);
      workersTable.mark(id);
      break;
    }
    case "namespace_created":
    case "placement_changed": {
      const ns = ev[kind].namespace;
      state.namespaces.set(ns.name, ns);
      namespacesTable.mark(ns.name);
      nsOptionsDirty = true;
      break;
    }
    case "pool_stats":
      setPools((ev.pool_stats || {}).pools);
      break;
    case "run_started":
    case "run_closed": {
      const run = (ev[kind] || {}).run || {};
      if (run.namespace === wfs.ns && wfs.page === 0) reloadWorkflowsSoon();
      const d = wfs.detail;
      if (d && d.ns === run.namespace && d.id === run.workflow_id) loadRun();
      break;
    }
    case "schedule_fired": {
      const f = ev.schedule_fired || {};
      const d = sch.detail;
      if (d && d.ns === f.namespace && d.id === f.schedule_id) loadSchedule();
      break;
    }
  }
  const quiet = (kind === "pool_stats" && !$("show-pool-stats").checked) || ((kind.startsWith("run_") || kind === "schedule_fired") && !$("show-runs").checked);
  if (!quiet) {
    feed(kind, String(seq), ev.time, describe(kind, ev));
  }
  schedule();
}

// ---------------------------------------------------------------- activities

const acts = {
  ns: "",
  state: "",
  type: "",
  tokens: [""], // page token of each page visited
  page: 0,
  next: "",
  items: new Map(),
  req: 0,
  detail: null, // {ns, id}
  detailJSON: "",
};

const actState = (a) => fmt.enumName(a.state, "ACTIVITY_STATE_") || "scheduled";
const TERMINAL = new Set(["completed", "failed", "canceled", "timed out"]);

function activityDuration(a) {
  const s = fmt.span(a.started_time || a.scheduled_time, a.closed_time);
  return Number.isFinite(s) ? fmt.human(s) : "—";
}

function failureText(f) {
  if (!f) return "";
  return [f.type, f.message].filter(Boolean).join(": ");
}

const activitiesTable = new KeyedTable($("activities-body"), {
  attr: "activity-id",
  compare: () => 0,
  rowState: actState,
  columns: [
    { name: "id", className: "mono", value: (a) => a.id },
    { name: "type", value: (a) => a.activity_type || "" },
    { name: "task_queue", value: (a) => a.task_queue || "default" },
    {
      name: "state",
      value: actState,
      paint: (td, a, v) => td.replaceChildren(h("span", { className: `badge ${v.replace(" ", "-")}` }, v)),
    },
    { name: "attempt", className: "num", value: (a) => String(a.attempt || 0) },
    {
      name: "scheduled",
      value: (a) => fmt.clock(a.scheduled_time),
      paint: (td, a, v) => {
        td.textContent = v;
        td.title = a.scheduled_time || "";
      },
    },
    { name: "duration", className: "num", value: activityDuration },
    { name: "failure", className: "failure", value: (a) => failureText(a.failure) },
  ],
});

let nsOptionsDirty = false;

// syncNamespaceSelect keeps a namespace menu's options equal to the known
// namespaces (plus the chosen one, if it is not known yet), sorted, and
// returns them.
function syncNamespaceSelect(sel, chosen) {
  const names = [...state.namespaces.keys()];
  if (chosen && !state.namespaces.has(chosen)) names.push(chosen);
  names.sort();
  const opts = sel.options;
  if (names.length !== opts.length || names.some((n, i) => opts[i].value !== n)) {
    sel.replaceChildren(...names.map((n) => h("option", { value: n }, n)));
  }
  return names;
}

// syncNamespaceOptions keeps the activity namespace filter's options equal
// to the known namespaces, choosing the first when none is chosen yet.
function syncNamespaceOptions() {
  const sel = $("act-ns");
  const names = syncNamespaceSelect(sel, acts.ns);
  if (!acts.ns && names.length) {
    acts.ns = names[0];
    activitiesTable.quiet = true;
    loadActivities();
  } else if (!names.length && state.snapshots) {
    setActivitiesEmpty("No namespace yet: one appears when a worker registers or an activity is scheduled.");
  }
  sel.value = acts.ns;
}

// setActivitiesEmpty shows text in place of the activity list.
function setActivitiesEmpty(text) {
  const empty = $("activities-empty");
  empty.textContent = text;
  empty.hidden = false;
}

// writeHash records the panels' filters and open details in the URL
// fragment, so a link opens the same view.
function writeHash() {
  const q = new URLSearchParams();
  if (acts.ns) q.set("ns", acts.ns);
  if (acts.state) q.set("state", acts.state);
  if (acts.type) q.set("type", acts.type);
  if (acts.detail) q.set("activity", acts.detail.id);
  if (wfs.ns) q.set("wns", wfs.ns);
  if (wfs.status) q.set("wstatus", wfs.status);
  if (wfs.type) q.set("wtype", wfs.type);
  if (wfs.detail) {
    q.set("workflow", wfs.detail.id);
    if (wfs.detail.run) q.set("run", wfs.detail.run);
  }
  if (sch.ns) q.set("sns", sch.ns);
  if (sch.detail) q.set("schedule", sch.detail.id);
  const s = q.toString();
  history.replaceState(null, "", s ? `#${s}` : location.pathname);
}

function readHash() {
  const q = new URLSearchParams(location.hash.slice(1));
  acts.ns = q.get("ns") || "";
  acts.type = q.get("type") || "";
  // The filter is what the menus show: a state the menu does not offer
  // (an old or hand-edited link) becomes "any" rather than a hidden filter.
  $("act-state").value = q.get("state") || "";
  acts.state = $("act-state").value;
  $("act-type").value = acts.type;
  syncNamespaceOptions();
  if (acts.ns && q.get("activity")) openDetail(acts.ns, q.get("activity"));
  wfs.ns = q.get("wns") || "";
  wfs.type = q.get("wtype") || "";
  $("wf-status").value = q.get("wstatus") || "";
  wfs.status = $("wf-status").value;
  $("wf-type").value = wfs.type;
  syncWorkflowNamespaces();
  if (wfs.ns && q.get("workflow")) openRun(wfs.ns, q.get("workflow"), q.get("run") || "");
  const sns = q.get("sns") || "";
  if (sns !== sch.ns) sch.ticks = new Map();
  sch.ns = sns;
  syncScheduleNamespaces();
  if (sch.ns && q.get("schedule")) openSchedule(sch.ns, q.get("schedule"));
}

// loadActivities reads the current page; background is the periodic
// refresh, which keeps the status line quiet.
async function loadActivities(background = false) {
  const empty = $("activities-empty");
  if (!acts.ns) {
    activitiesTable.flushOrdered([], () => undefined);
    setActivitiesEmpty(state.namespaces.size ? "Pick a namespace to list its activities." : "No namespace yet.");
    return;
  }
  const q = new URLSearchParams({ namespace: acts.ns, page_size: String(PAGE_SIZE) });
  if (acts.state) q.set("state", acts.state);
  if (acts.type) q.set("type", acts.type);
  const pageToken = acts.tokens[acts.page];
  if (pageToken) q.set("page_token", pageToken);
  const req = ++acts.req;
  if (!background) $("act-status").textContent = "loading…";
  let res;
  try {
    res = await api(`/api/v1/activities?${q}`);
  } catch (err) {
    if (req !== acts.req) return;
    $("act-status").textContent = err.message;
    // A list shown before stays (a refresh that failed); an empty panel
    // says why it is empty.
    if (!activitiesTable.size) setActivitiesEmpty(`Could not list the activities of ${acts.ns}: ${err.message}`);
    return;
  }
  if (req !== acts.req) return; // a newer request (filter change) superseded this one
  const list = res.activities || [];
  acts.items = new Map(list.map((a) => [a.id, a]));
  acts.next = res.next_page_token || "";
  activitiesTable.flushOrdered(
    list.map((a) => a.id),
    (id) => acts.items.get(id),
  );
  for (const row of activitiesTable.rows.values()) row.tr.tabIndex = 0; // Enter opens it
  markSelected();
  empty.textContent = acts.page ? "No more activities." : "No activities match.";
  empty.hidden = list.length > 0;
  $("act-prev").disabled = acts.page === 0;
  $("act-next").disabled = !acts.next;
  $("act-page").textContent = `page ${acts.page + 1}`;
  $("act-status").textContent = `updated ${fmt.clock(new Date().toISOString())}`;
}

function applyFilter() {
  acts.ns = $("act-ns").value;
  acts.state = $("act-state").value;
  acts.type = $("act-type").value.trim();
  acts.tokens = [""];
  acts.page = 0;
  activitiesTable.quiet = true; // a new list, not new activities
  writeHash();
  loadActivities();
}

$("activity-filter").addEventListener("submit", (e) => {
  e.preventDefault();
  applyFilter();
});
$("act-ns").addEventListener("change", applyFilter);
$("act-state").addEventListener("change", applyFilter);
$("act-next").addEventListener("click", () => {
  if (!acts.next) return;
  acts.tokens[acts.page + 1] = acts.next;
  acts.page++;
  activitiesTable.quiet = true;
  loadActivities();
});
$("act-prev").addEventListener("click", () => {
  if (acts.page === 0) return;
  acts.page--;
  activitiesTable.quiet = true;
  loadActivities();
});
$("activities-body").addEventListener("click", (e) => {
  const tr = e.target.closest("tr[data-activity-id]");
  if (tr) openDetail(acts.ns, tr.dataset.activityId);
});
$("activities-body").addEventListener("keydown", (e) => {
  const tr = e.target.closest("tr[data-activity-id]");
  if (tr && e.key === "Enter") openDetail(acts.ns, tr.dataset.activityId);
});

function markSelected() {
  for (const [id, row] of activitiesTable.rows) {
    const sel = acts.detail && acts.detail.ns === acts.ns && acts.detail.id === id;
    row.tr.classList.toggle("selected", !!sel);
  }
}

async function openDetail(ns, id) {
  acts.detail = { ns, id };
  acts.detailJSON = "";
  markSelected();
  writeHash();
  await loadDetail();
}

function closeDetail() {
  acts.detail = null;
  acts.detailJSON = "";
  $("activity-detail").hidden = true;
  $("activity-detail").replaceChildren();
  markSelected();
  writeHash();
}

async function loadDetail() {
  const d = acts.detail;
  if (!d) return;
  const box = $("activity-detail");
  let res;
  try {
    res = await api(`/api/v1/activities/${encodeURIComponent(d.ns)}/${encodeURIComponent(d.id)}`);
  } catch (err) {
    if (acts.detail !== d) return;
    box.hidden = false;
    box.replaceChildren(detailHead(d.id, "unknown"), h("p", { className: "error" }, err.message));
    return;
  }
  if (acts.detail !== d) return;
  const why = await explain(`/api/v1/activities/${encodeURIComponent(d.ns)}/${encodeURIComponent(d.id)}/why`, actState(res.activity || {}) !== "scheduled");
  if (acts.detail !== d) return;
  const json = JSON.stringify([res.activity, why]);
  if (json === acts.detailJSON) return;
  acts.detailJSON = json;
  renderDetail(res.activity || {}, why);
  box.hidden = false;
}

// explain reads a why route, unless skip: the reason something waits, or an
// error text when the server could not say.
async function explain(path, skip) {
  if (skip) return null;
  try {
    return await api(path);
  } catch (err) {
    return { reason: "unknown", message: err.message };
  }
}

// whyBox shows why work waits, as the why routes explain it.
function whyBox(why) {
  if (!why) return null;
  return h(
    "div",
    { className: "why", dataset: { testid: "why", reason: why.reason || "" } },
    h("strong", {}, "Why it waits: "),
    h("span", { className: "mono" }, why.reason || "unknown"),
    " — ",
    h("span", {}, why.message || ""),
    why.until ? h("span", { className: "muted" }, ` (until ${fmt.clock(why.until)})`) : null,
  );
}

// flowPairs are the key-value rows of what places work in its pool.
function flowPairs(x) {
  return [
    ["priority", x.priority && x.priority !== 3 ? String(x.priority) : ""],
    ["fairness key", x.fairness_key ? `${x.fairness_key} (weight ${x.fairness_weight || 1})` : ""],
    ["concurrency key", x.concurrency_key],
    ["schedule", x.schedule_id && `${x.schedule_id} (tick ${fmt.clock(x.schedule_time)})`],
  ];
}

function detailHead(id, st) {
  return h(
    "header",
    {},
    h("h3", {}, "Activity ", h("span", { className: "mono" }, id), " ", h("span", { className: `badge ${st.replace(" ", "-")}` }, st)),
    h("button", { type: "button", className: "ghost", dataset: { testid: "detail-close" }, onclick: closeDetail }, "close ✕"),
  );
}

function kv(pairs) {
  return h(
    "dl",
    { className: "kv" },
    ...pairs.filter(([, v]) => v !== undefined && v !== "").flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
  );
}

function retrySummary(p) {
  if (!p) return "";
  const max = p.maximum_attempts ? `${p.maximum_attempts} attempts` : "unlimited attempts";
  return `${max}, ${fmt.human(fmt.seconds(p.initial_interval))} × ${p.backoff_coefficient || 1} up to ${fmt.human(fmt.seconds(p.maximum_interval))}`;
}

function renderDetail(a, why) {
  const st = actState(a);
  const attempts = a.attempts || [];
  const rows = attempts.map((t) => {
    const outcome = fmt.enumName(t.outcome, "ATTEMPT_OUTCOME_") || "running";
    const dur = fmt.span(t.started_time, t.ended_time);
    return h(
      "tr",
      { dataset: { attempt: String(t.number), state: outcome } },
      h("td", { className: "num", dataset: { col: "number" } }, t.number),
      h("td", { className: "num mono", dataset: { col: "worker" } }, t.worker_id || "—"),
      h("td", { dataset: { col: "node" } }, t.node || "—"),
      h("td", { dataset: { col: "started" }, title: t.started_time || "" }, fmt.clock(t.started_time)),
      h("td", { dataset: { col: "ended" }, title: t.ended_time || "" }, fmt.clock(t.ended_time)),
      h("td", { className: "num", dataset: { col: "duration" } }, Number.isFinite(dur) ? fmt.human(dur) : "—"),
      h("td", { dataset: { col: "outcome" } }, h("span", { className: `badge ${outcome.replace(" ", "-")}` }, outcome)),
      h("td", { className: "failure", dataset: { col: "failure" } }, failureText(t.failure)),
    );
  });
  const result = fmt.payload(a.result);
  const payload = fmt.payload(a.payload);
  $("activity-detail").replaceChildren(
    detailHead(a.id, st),
    whyBox(why) || "",
    kv([
      ["namespace", a.namespace],
      ["task queue", a.task_queue || "default"],
      ["type", a.activity_type],
      ["node pin", a.node],
      ["ready", st === "scheduled" && a.ready_time && a.ready_time !== a.scheduled_time ? fmt.clock(a.ready_time) : ""],
      ...flowPairs(a),
      ["scheduled", fmt.clock(a.scheduled_time)],
      ["started", a.started_time ? fmt.clock(a.started_time) : ""],
      ["closed", a.closed_time ? fmt.clock(a.closed_time) : ""],
      ["schedule→start", a.schedule_to_start_timeout && fmt.human(fmt.seconds(a.schedule_to_start_timeout))],
      ["start→close", a.start_to_close_timeout && fmt.human(fmt.seconds(a.start_to_close_timeout))],
      ["schedule→close", a.schedule_to_close_timeout && fmt.human(fmt.seconds(a.schedule_to_close_timeout))],
      ["heartbeat", a.heartbeat_timeout && fmt.human(fmt.seconds(a.heartbeat_timeout))],
      ["retry", retrySummary(a.retry_policy)],
      ["failure", failureText(a.failure)],
    ]),
    h(
      "div",
      { className: "io" },
      payload && h("figure", {}, h("figcaption", {}, "input"), h("pre", {}, payload)),
      result && h("figure", {}, h("figcaption", {}, "result"), h("pre", {}, result)),
    ),
    h("h4", {}, `Attempts (${attempts.length})`),
    attempts.length
      ? h(
          "table",
          { className: "grid attempts" },
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              ...["#", "worker", "node", "started", "ended", "duration", "outcome", "failure"].map((c) => h("th", {}, c)),
            ),
          ),
          h("tbody", {}, ...rows),
        )
      : h("p", { className: "muted" }, "No attempt yet: waiting for a worker."),
  );
}

// ---------------------------------------------------------------- workflows

const WF_PAGE_SIZE = 50; // runs per page
const HISTORY_PAGE = 1000; // events per history request
const HISTORY_MAX = 5000; // events a run's timeline shows

const wfs = {
  ns: "",
  status: "",
  type: "",
  tokens: [""], // page token of each page visited
  page: 0,
  next: "",
  items: new Map(), // run_id -> Run
  req: 0,
  soon: 0, // timer of a reload a run event asked for
  detail: null, // {ns, id, run}
  detailJSON: "",
  shown: null, // the open run as last read
  events: [], // the open run's history, oldest first
  loading: false, // a loadRun is under way
  again: false, // and another was asked for meanwhile
};

const runStatus = (r) => fmt.enumName(r.status, "RUN_STATUS_") || "running";
const badgeClass = (v) => v.replace(/ /g, "-");

function runDuration(r) {
  const s = fmt.span(r.start_time, r.close_time);
  return Number.isFinite(s) ? fmt.human(s) : "—";
}

// runFailure is what a run's failure column says: a failing workflow task
// first, as it is what holds an open run up.
function runFailure(r) {
  if (r.task_failure) return `task: ${r.task_failure}`;
  return failureText(r.failure);
}

function statusBadges(r) {
  const st = runStatus(r);
  return [
    h("span", { className: `badge ${badgeClass(st)}` }, st),
    r.task_failure && h("span", { className: "badge task-failing", title: r.task_failure }, "task failing"),
  ];
}

const workflowsTable = new KeyedTable($("workflows-body"), {
  attr: "run-id",
  compare: () => 0,
  rowState: (r) => (r.task_failure ? "task-failing" : badgeClass(runStatus(r))),
  columns: [
    {
      name: "workflow_id",
      className: "mono",
      value: (r) => `${r.workflow_id}\u0000${r.run_id}`,
      paint: (td, r) => {
        td.textContent = r.workflow_id;
        td.title = `run ${r.run_id}`;
      },
    },
    { name: "type", value: (r) => r.workflow_type || "" },
    {
      name: "status",
      value: (r) => `${runStatus(r)}\u0000${r.task_failure || ""}`,
      paint: (td, r) => td.replaceChildren(...statusBadges(r).filter(Boolean)),
    },
    { name: "build", className: "mono", value: (r) => r.build_id || "—" },
    {
      name: "started",
      value: (r) => fmt.clock(r.start_time),
      paint: (td, r, v) => {
        td.textContent = v;
        td.title = r.start_time || "";
      },
    },
    { name: "duration", className: "num", value: runDuration },
    { name: "events", className: "num", value: (r) => fmt.count(r.history_length) },
    { name: "failure", className: "failure", value: runFailure },
  ],
});

// syncWorkflowNamespaces does for the workflow menu what
// syncNamespaceOptions does for the activity one.
function syncWorkflowNamespaces() {
  const names = syncNamespaceSelect($("wf-ns"), wfs.ns);
  if (!wfs.ns && names.length) {
    wfs.ns = names[0];
    workflowsTable.quiet = true;
    loadWorkflows();
  } else if (!names.length && state.snapshots) {
    setWorkflowsEmpty("No namespace yet: one appears when a worker registers or a workflow starts.");
  }
  $("wf-ns").value = wfs.ns;
}

function setWorkflowsEmpty(text) {
  const empty = $("workflows-empty");
  empty.textContent = text;
  empty.hidden = false;
}

// loadWorkflows reads the current page of runs, newest first; background
// is a refresh, which keeps the status line quiet.
async function loadWorkflows(background = false) {
  const empty = $("workflows-empty");
  if (!wfs.ns) {
    workflowsTable.flushOrdered([], () => undefined);
    setWorkflowsEmpty(state.namespaces.size ? "Pick a namespace to list its workflow runs." : "No namespace yet.");
    return;
  }
  const q = new URLSearchParams({ namespace: wfs.ns, page_size: String(WF_PAGE_SIZE) });
  if (wfs.status) q.set("status", wfs.status);
  if (wfs.type) q.set("type", wfs.type);
  const pageToken = wfs.tokens[wfs.page];
  if (pageToken) q.set("page_token", pageToken);
  const req = ++wfs.req;
  if (!background) $("wf-msg").textContent = "loading…";
  let res;
  try {
    res = await api(`/api/v1/workflows?${q}`);
  } catch (err) {
    if (req !== wfs.req) return;
    $("wf-msg").textContent = err.message;
    if (!workflowsTable.size) setWorkflowsEmpty(`Could not list the workflow runs of ${wfs.ns}: ${err.message}`);
    return;
  }
  if (req !== wfs.req) return; // a newer request (filter change) superseded this one
  const list = res.runs || [];
  wfs.items = new Map(list.map((r) => [r.run_id, r]));
  wfs.next = res.next_page_token || "";
  workflowsTable.flushOrdered(
    list.map((r) => r.run_id),
    (id) => wfs.items.get(id),
  );
  for (const [id, row] of workflowsTable.rows) {
    row.tr.tabIndex = 0; // Enter opens it
    row.tr.dataset.workflowId = wfs.items.get(id).workflow_id;
  }
  markRunSelected();
  empty.textContent = wfs.page ? "No more runs." : "No runs match.";
  empty.hidden = list.length > 0;
  $("wf-prev").disabled = wfs.page === 0;
  $("wf-next").disabled = !wfs.next;
  $("wf-page").textContent = `page ${wfs.page + 1}`;
  $("wf-msg").textContent = `updated ${fmt.clock(new Date().toISOString())}`;
}

// reloadWorkflowsSoon refreshes the list shortly after a run of its
// namespace started or closed; a burst of such events costs one request.
function reloadWorkflowsSoon() {
  if (wfs.soon || !$("wf-live").checked) return;
  wfs.soon = setTimeout(() => {
    wfs.soon = 0;
    loadWorkflows(true);
  }, 250);
}

function applyWorkflowFilter() {
  wfs.ns = $("wf-ns").value;
  wfs.status = $("wf-status").value;
  wfs.type = $("wf-type").value.trim();
  wfs.tokens = [""];
  wfs.page = 0;
  workflowsTable.quiet = true; // a new list, not new runs
  writeHash();
  loadWorkflows();
}

$("workflow-filter").addEventListener("submit", (e) => {
  e.preventDefault();
  applyWorkflowFilter();
});
$("wf-ns").addEventListener("change", applyWorkflowFilter);
$("wf-status").addEventListener("change", applyWorkflowFilter);
$("wf-next").addEventListener("click", () => {
  if (!wfs.next) return;
  wfs.tokens[wfs.page + 1] = wfs.next;
  wfs.page++;
  workflowsTable.quiet = true;
  loadWorkflows();
});
$("wf-prev").addEventListener("click", () => {
  if (wfs.page === 0) return;
  wfs.page--;
  workflowsTable.quiet = true;
  loadWorkflows();
});

function openRunRow(tr) {
  const r = wfs.items.get(tr.dataset.runId);
  if (r) openRun(wfs.ns, r.workflow_id, r.run_id);
}
$("workflows-body").addEventListener("click", (e) => {
  const tr = e.target.closest("tr[data-run-id]");
  if (tr) openRunRow(tr);
});
$("workflows-body").addEventListener("keydown", (e) => {
  const tr = e.target.closest("tr[data-run-id]");
  if (tr && e.key === "Enter") openRunRow(tr);
});

function markRunSelected() {
  for (const [id, row] of workflowsTable.rows) {
    const sel = wfs.detail && wfs.detail.ns === wfs.ns && wfs.detail.run === id;
    row.tr.classList.toggle("selected", !!sel);
  }
}

// openRun shows a run: by run id, or the open (else latest) run of the
// workflow id when run is empty.
async function openRun(ns, id, run) {
  wfs.detail = { ns, id, run: run || "" };
  wfs.detailJSON = "";
  wfs.shown = null;
  wfs.events = [];
  markRunSelected();
  writeHash();
  await loadRun();
}

function closeRun() {
  wfs.detail = null;
  wfs.detailJSON = "";
  wfs.shown = null;
  wfs.events = [];
  $("run-detail").hidden = true;
  $("run-detail").replaceChildren();
  markRunSelected();
  writeHash();
}

function runPath(d) {
  return `/api/v1/workflows/${encodeURIComponent(d.ns)}/${encodeURIComponent(d.id)}`;
}

// loadRun reads the open run and the events it has not shown yet. Loads
// run one at a time (a refresh and a run event may ask at once): a load
// asked for meanwhile runs once the current one ends.
async function loadRun() {
  if (wfs.loading) {
    wfs.again = true;
    return;
  }
  wfs.loading = true;
  try {
    do {
      wfs.again = false;
      await loadRunOnce();
    } while (wfs.again && wfs.detail);
  } finally {
    wfs.loading = false;
  }
}

async function loadRunOnce() {
  const d = wfs.detail;
  if (!d) return;
  const box = $("run-detail");
  let res;
  try {
    res = await api(runPath(d) + (d.run ? `?run_id=${encodeURIComponent(d.run)}` : ""));
  } catch (err) {
    if (wfs.detail !== d) return;
    box.hidden = false;
    box.replaceChildren(runHead(d.id, "unknown"), h("p", { className: "error" }, err.message));
    return;
  }
  if (wfs.detail !== d) return;
  const run = res.run || {};
  if (!d.run && run.run_id) {
    d.run = run.run_id; // a link that named no run shows the one found, from now on
    markRunSelected();
    writeHash();
  }
  let historyError = "";
  try {
    await loadHistory(d);
  } catch (err) {
    historyError = err.message;
  }
  if (wfs.detail !== d) return;
  const why = await explain(`${runPath(d)}/why?run_id=${encodeURIComponent(d.run || "")}`, runStatus(run) !== "running");
  if (wfs.detail !== d) return;
  wfs.shown = run;
  const json = `${JSON.stringify([run, why])}|${wfs.events.length}|${historyError}`;
  if (json === wfs.detailJSON) return;
  wfs.detailJSON = json;
  renderRun(run, historyError, why);
  box.hidden = false;
}

// loadHistory reads the events after those already shown (history only
// grows; a page token is the seq of the last event of the page before).
async function loadHistory(d) {
  for (;;) {
    if (wfs.events.length >= HISTORY_MAX) return;
    const q = new URLSearchParams({ run_id: d.run, page_size: String(HISTORY_PAGE) });
    if (wfs.events.length) q.set("page_token", String(wfs.events[wfs.events.length - 1].seq));
    const res = await api(`${runPath(d)}/history?${q}`);
    if (wfs.detail !== d) return;
    const last = wfs.events.length ? Number(wfs.events[wfs.events.length - 1].seq) : 0;
    const fresh = (res.events || []).filter((e) => Number(e.seq) > last);
    wfs.events.push(...fresh.slice(0, HISTORY_MAX - wfs.events.length));
    if (!res.next_page_token || !fresh.length) return;
  }
}

function runHead(id, st) {
  return h(
    "header",
    {},
    h("h3", {}, "Workflow ", h("span", { className: "mono" }, id), " ", h("span", { className: `badge ${badgeClass(st)}` }, st)),
    h("button", { type: "button", className: "ghost", dataset: { testid: "run-close" }, onclick: closeRun }, "close ✕"),
  );
}

// eventKind is the name of the one event field an event has set.
function eventKind(e) {
  return Object.keys(e).find((k) => k !== "seq" && k !== "time") || "unknown";
}

const STEP_OPENS = new Set(["activity_scheduled", "timer_started", "child_started"]);
const STEP_CLOSES = new Set(["activity_closed", "timer_fired", "timer_canceled", "child_closed"]);

// stepSpans pairs each step's opening event with its closing one:
// step -> {open, close}, events as the history has them.
function stepSpans(events) {
  const spans = new Map();
  for (const e of events) {
    const kind = eventKind(e);
    const step = (e[kind] || {}).step;
    if (!step) continue;
    if (STEP_OPENS.has(kind)) spans.set(step, { open: e, close: null });
    else if (STEP_CLOSES.has(kind) && spans.has(step)) spans.get(step).close = e;
  }
  return spans;
}

const short = (v) => fmt.payload(v, 120);

function withPayload(text, label, v) {
  const p = short(v);
  return p ? `${text} · ${label} ${p}` : text;
}

// summary says in a line what an event records.
function summary(kind, b, e) {
  switch (kind) {
    case "workflow_started": {
      const from = [b.parent_workflow_id && `child of ${b.parent_workflow_id}`, b.continued_from_run_id && `continues ${b.continued_from_run_id}`];
      return withPayload([b.workflow_type, `queue ${b.task_queue || "default"}`, ...from].filter(Boolean).join(" · "), "input", b.input);
    }
    case "workflow_task_completed":
      return `worker ${b.worker_id || "—"} · build ${b.build_id || "—"} · had seen #${b.seen_seq || 0}`;
    case "activity_scheduled":
      return withPayload(`${b.activity_type} · ${b.activity_id || ""}`, "input", b.input);
    case "activity_closed": {
      const tries = `${b.attempts || 0} attempt${b.attempts === 1 ? "" : "s"}`;
      return b.failure ? `${failureText(b.failure)} · ${tries}` : withPayload(`completed · ${tries}`, "result", b.result);
    }
    case "timer_started": {
      const wait = fmt.span(e.time, b.fire_time);
      return `${b.name || "timer"} · fires ${fmt.clock(b.fire_time)}${Number.isFinite(wait) ? ` (after ${fmt.human(wait)})` : ""}`;
    }
    case "timer_fired":
      return "fired";
    case "timer_canceled":
      return "canceled by the code";
    case "signal_received":
      return withPayload(b.name, "input", b.input);
    case "side_effect_recorded":
      return withPayload(b.name || "side effect", "=", b.value);
    case "child_started":
      return withPayload(`${b.workflow_type} ${b.workflow_id} · run ${b.run_id || "—"}`, "input", b.input);
    case "child_closed": {
      const st = fmt.enumName(b.status, "RUN_STATUS_");
      return b.failure ? `${st} · ${failureText(b.failure)}` : withPayload(st, "result", b.result);
    }
    case "cancel_requested":
      return b.reason ? `reason: ${b.reason}` : "no reason given";
    case "activity_cancel_requested":
      return `cancel step ${b.step}`;
    case "workflow_closed": {
      const st = fmt.enumName(b.status, "RUN_STATUS_");
      if (b.failure) return `${st} · ${failureText(b.failure)}`;
      if (b.next_run_id) return withPayload(`${st} · next run ${b.next_run_id}`, "input", b.continue_input);
      return withPayload(st, "result", b.result);
    }
    default:
      return "";
  }
}

// stepDuration is the duration cell of an event that opens or closes a
// step: how long the step took, or that it is still pending.
function stepDuration(kind, b, spans, runOpen) {
  const s = b.step && spans.get(b.step);
  if (!s || !(STEP_OPENS.has(kind) || STEP_CLOSES.has(kind))) return ["", ""];
  if (!s.close) {
    if (!runOpen) return ["—", "never closed"];
    return ["pending", `since ${fmt.clock(s.open.time)} (#${s.open.seq}), not closed yet`];
  }
  const took = fmt.span(s.open.time, s.close.time);
  return [fmt.human(took), `#${s.open.seq} → #${s.close.seq}`];
}

function timelineRows(events, runOpen) {
  const spans = stepSpans(events);
  const start = events.length ? events[0].time : "";
  return events.map((e) => {
    const kind = eventKind(e);
    const b = e[kind] || {};
    const [dur, durTitle] = stepDuration(kind, b, spans, runOpen);
    const failed = (kind === "activity_closed" || kind === "child_closed") && b.failure;
    const offset = fmt.span(start, e.time);
    return h(
      "tr",
      { dataset: { seq: String(e.seq), kind } },
      h("td", { className: "num", dataset: { col: "seq" } }, e.seq),
      h(
        "td",
        { dataset: { col: "time" }, title: e.time || "" },
        fmt.clock(e.time),
        Number.isFinite(offset) && h("small", {}, `+${fmt.human(offset)}`),
      ),
      h("td", { dataset: { col: "kind" } }, h("span", { className: `ev ${kind}${failed ? " failed" : ""}` }, kind.replace(/_/g, " "))),
      h("td", { className: "num", dataset: { col: "step" } }, b.step || ""),
      h("td", { className: "summary", dataset: { col: "summary" } }, summary(kind, b, e)),
      h("td", { className: "num", dataset: { col: "duration" }, title: durTitle }, dur),
    );
  });
}

function pendingRows(steps) {
  return steps.map((p) => {
    const kind = fmt.enumName(p.kind, "STEP_KIND_") || "step";
    let what = "";
    if (p.activity_id) what = p.activity_id;
    else if (p.fire_time) what = `fires ${fmt.clock(p.fire_time)}`;
    else if (p.child_workflow_id) what = p.child_workflow_id;
    const w = p.worker_id ? state.workers.get(p.worker_id) : null;
    const who = w ? [w.identity, w.task_queue && `queue ${w.task_queue}`, w.sdk_version].filter(Boolean).join(" · ") : "";
    return h(
      "tr",
      { dataset: { step: String(p.step), kind } },
      h("td", { className: "num", dataset: { col: "step" } }, p.step),
      h("td", { dataset: { col: "kind" } }, kind),
      h("td", { dataset: { col: "name" } }, p.name || "—"),
      h("td", { className: "mono", dataset: { col: "what" } }, what),
      h("td", { className: "num", dataset: { col: "attempt" } }, p.activity_id ? String(p.attempt || 0) : ""),
      h("td", { className: "num mono", dataset: { col: "worker" }, title: who }, p.worker_id || (p.activity_id ? "waiting" : "")),
      h("td", { dataset: { col: "node" } }, w ? w.node || "—" : ""),
    );
  });
}

// table builds a grid table; heads names the columns, those in nums are
// right-aligned as their cells are.
function table(className, heads, nums, rows) {
  return h(
    "table",
    { className: `grid ${className}` },
    h("thead", {}, h("tr", {}, ...heads.map((c) => h("th", { className: nums.includes(c) ? "num" : "" }, c)))),
    h("tbody", {}, ...rows),
  );
}

function renderRun(r, historyError, why) {
  const st = runStatus(r);
  const open = st === "running";
  const pending = r.pending_steps || [];
  const events = wfs.events;
  const total = Number(r.history_length || events.length);
  const input = fmt.payload(r.input);
  const result = fmt.payload(r.result);
  const parts = [
    runHead(r.workflow_id, st),
    r.task_failure &&
      h(
        "div",
        { className: "task-failure", dataset: { testid: "task-failure" }, role: "alert" },
        h("strong", {}, "Workflow task failing: "),
        h("span", { className: "mono" }, r.task_failure),
        h("p", {}, "The run waits: its workflow task is retried with a backoff until code that agrees with its history, or an operator, moves it on."),
      ),
    open && whyBox(why),
    kv([
      ["namespace", r.namespace],
      ["type", r.workflow_type],
      ["run", h("span", { className: "mono" }, r.run_id)],
      ["task queue", r.task_queue || "default"],
      ["build", r.build_id || "not bound yet"],
      ...flowPairs(r),
      ["events", fmt.count(total)],
      ["started", fmt.clock(r.start_time)],
      ["closed", r.close_time ? fmt.clock(r.close_time) : ""],
      ["duration", runDuration(r)],
      ["parent", r.parent_workflow_id && `${r.parent_workflow_id} (run ${r.parent_run_id})`],
      ["continued as", r.next_run_id],
      ["failure", failureText(r.failure)],
    ]),
    h(
      "div",
      { className: "io" },
      input && h("figure", {}, h("figcaption", {}, "input"), h("pre", {}, input)),
      result && h("figure", {}, h("figcaption", {}, "result"), h("pre", {}, result)),
    ),
    h("h4", {}, `Pending steps (${pending.length})`),
    pending.length
      ? table("pending", ["#", "kind", "name", "activity / fires / child", "attempt", "worker", "node"], ["#", "attempt", "worker"], pendingRows(pending))
      : h("p", { className: "muted" }, open ? "No step pending: the run waits for its next workflow task or a signal." : "None: the run is closed."),
    h(
      "h4",
      {},
      events.length < total
        ? `History (first ${fmt.count(events.length)} of ${fmt.count(total)} events)`
        : `History (${fmt.count(events.length)} event${events.length === 1 ? "" : "s"})`,
    ),
    historyError && h("p", { className: "error" }, `Could not read the history: ${historyError}`),
    h("div", { className: "timeline-wrap" }, table("timeline", ["#", "time", "event", "step", "summary", "duration"], ["#", "step", "duration"], timelineRows(events, open))),
  ].filter(Boolean);
  $("run-detail").replaceChildren(...parts);
}

// ---------------------------------------------------------------- schedules

const SCH_PAGE_SIZE = 50; // schedules per page
const SCH_UPCOMING = 10; // next fire times an open schedule shows
const SCH_NEXT_PARALLEL = 4; // next-tick reads in flight at once

const sch = {
  ns: "",
  tokens: [""], // page token of each page visited
  page: 0,
  next: "",
  items: new Map(), // schedule id -> Schedule, as listed
  // Each listed schedule carries its next tick; one that passes before the
  // next refresh is read from the schedule (GET …?upcoming=1) and kept until
  // it passes or the spec changes.
  ticks: new Map(), // schedule id -> {sig, tick (ScheduleTick or null for none), error}
  ticksLoading: false,
  req: 0,
  detail: null, // {ns, id}
  shown: null, // the open schedule as last read
  loading: false, // a loadSchedule is under way
  again: false, // and another was asked for meanwhile
  busy: false, // a button's call is under way
  el: null, // the open detail's parts
  parts: new Map(), // detail section -> key it last rendered
};

const schedState = (s) => (s.paused ? "paused" : "active");
const isWorkflowAction = (a) => !!(a && a.workflow_type);
const outcomeName = (r) => fmt.enumName(r.outcome, "SCHEDULE_ACTION_OUTCOME_") || "unknown";
const CRON_TZ = /^(?:CRON_)?TZ=(\S+)/;

// scheduleZone is the zone a cron spec is read in: its time_zone, else a
// CRON_TZ= prefix of the expression, else UTC; interval specs know none.
function scheduleZone(spec) {
  if (spec.time_zone) return spec.time_zone;
  const m = CRON_TZ.exec(spec.cron || "");
  return m ? m[1] : "UTC";
}

// triggerText says when a schedule ticks, in a line: "0 3 * * * (Europe/Berlin)",
// "every 1h (offset 15m)".
function triggerText(spec) {
  spec = spec || {};
  if (spec.cron) return CRON_TZ.test(spec.cron) ? spec.cron : `${spec.cron} (${spec.time_zone || "UTC"})`;
  const every = fmt.seconds(spec.every);
  if (!every) return "—";
  const off = fmt.seconds(spec.offset);
  return `every ${fmt.goDuration(every)}${off ? ` (offset ${fmt.goDuration(off)})` : ""}`;
}

function actionKind(a) {
  return isWorkflowAction(a) ? "workflow" : "activity";
}

function actionText(a) {
  a = a || {};
  return `${actionKind(a)} ${a.workflow_type || a.activity_type || "—"} · queue ${a.task_queue || "default"}`;
}

function lastRecord(s) {
  const r = s.recent_actions || [];
  return r.length ? r[r.length - 1] : null;
}

// tickSig is what a schedule's next tick depends on besides the time: its
// spec and whether it is paused (ticks come after now and after the last
// tick handled, which is never ahead of now).
const tickSig = (s) => `${JSON.stringify(s.spec || {})}|${s.paused ? 1 : 0}`;

// nextTick is a listed schedule's next tick: null when none (paused, past
// its end), undefined while not read yet.
function nextTick(s) {
  if (s.paused) return null;
  const c = sch.ticks.get(s.schedule_id);
  return c && c.sig === tickSig(s) ? c.tick : undefined;
}

function countdown(ts, now) {
  const sec = (fmt.millis(ts) - now) / 1000;
  return sec > 0 ? `in ${fmt.human(sec)}` : "due";
}

const schedulesTable = new KeyedTable($("schedules-body"), {
  attr: "schedule-id",
  compare: () => 0,
  rowState: schedState,
  columns: [
    { name: "id", className: "mono", value: (s) => s.schedule_id },
    { name: "trigger", value: (s) => triggerText(s.spec) },
    { name: "action", value: (s) => actionText(s.action) },
    {
      name: "next",
      value: (s, now) => {
        if (s.paused) return "paused";
        const c = sch.ticks.get(s.schedule_id);
        if (c && c.error) return `?\u0000${c.error}`;
        const t = nextTick(s);
        if (t === undefined) return "…";
        if (t === null) return "none";
        return `${fmt.clock(t.fire_time)}\u0000${countdown(t.fire_time, now)}`;
      },
      paint: (td, s, v) => {
        const [text, more] = v.split("\u0000");
        const t = nextTick(s);
        if (text === "?") {
          td.replaceChildren("?");
          td.title = `could not read the next tick: ${more}`;
          return;
        }
        td.replaceChildren(text, more ? h("small", {}, more) : "");
        td.title = t ? `nominal ${t.nominal_time || ""}, fires ${t.fire_time || ""}` : text === "none" ? "no tick ahead" : "";
      },
    },
    {
      name: "last",
      value: (s, now) => {
        const r = lastRecord(s);
        return r ? `${fmt.ago(r.nominal_time, now)}\u0000${outcomeName(r)}` : "—";
      },
      paint: (td, s, v) => {
        const r = lastRecord(s);
        const [text, outcome] = v.split("\u0000");
        td.replaceChildren(text, outcome ? h("small", {}, outcome) : "");
        td.title = r ? [fmt.clock(r.nominal_time), r.origin, r.action_id].filter(Boolean).join(" · ") : "nothing fired yet";
      },
    },
    {
      name: "state",
      value: (s) => `${schedState(s)}\u0000${s.note || ""}`,
      paint: (td, s) => {
        const st = schedState(s);
        td.replaceChildren(h("span", { className: `badge ${st}` }, st), s.note ? h("span", { className: "note", title: s.note }, s.note) : "");
      },
    },
    { name: "fired", className: "num", value: (s) => fmt.count(s.fired) },
    { name: "skipped", className: "num", value: (s) => fmt.count(s.skipped) },
    { name: "missed", className: "num", value: (s) => fmt.count(s.missed) },
  ],
});

// syncScheduleNamespaces does for the schedule menu what
// syncNamespaceOptions does for the activity one.
function syncScheduleNamespaces() {
  const names = syncNamespaceSelect($("sch-ns"), sch.ns);
  if (!sch.ns && names.length) {
    sch.ns = names[0];
    schedulesTable.quiet = true;
    loadSchedules();
  } else if (!names.length && state.snapshots) {
    setSchedulesEmpty("No namespace yet: one appears when a worker registers or a schedule is created.");
  }
  $("sch-ns").value = sch.ns;
}

function setSchedulesEmpty(text) {
  const empty = $("schedules-empty");
  empty.textContent = text;
  empty.hidden = false;
}

// loadSchedules reads the current page of schedules, ordered by id;
// background is a refresh, which keeps the status line quiet.
async function loadSchedules(background = false) {
  const empty = $("schedules-empty");
  if (!sch.ns) {
    schedulesTable.flushOrdered([], () => undefined);
    setSchedulesEmpty(state.namespaces.size ? "Pick a namespace to list its schedules." : "No namespace yet.");
    return;
  }
  const q = new URLSearchParams({ namespace: sch.ns, page_size: String(SCH_PAGE_SIZE) });
  const pageToken = sch.tokens[sch.page];
  if (pageToken) q.set("page_token", pageToken);
  const req = ++sch.req;
  if (!background) $("sch-msg").textContent = "loading…";
  let res;
  try {
    res = await api(`/api/v1/schedules?${q}`);
  } catch (err) {
    if (req !== sch.req) return;
    $("sch-msg").textContent = err.message;
    if (!schedulesTable.size) setSchedulesEmpty(`Could not list the schedules of ${sch.ns}: ${err.message}`);
    return;
  }
  if (req !== sch.req) return; // a newer request (namespace or page change) superseded this one
  const list = res.schedules || [];
  sch.items = new Map(list.map((s) => [s.schedule_id, s]));
  for (const s of list) sch.ticks.set(s.schedule_id, { sig: tickSig(s), tick: (s.upcoming || [])[0] || null });
  sch.next = res.next_page_token || "";
  paintSchedules();
  empty.textContent = sch.page ? "No more schedules." : `No schedules in ${sch.ns}.`;
  empty.hidden = list.length > 0;
  $("sch-prev").disabled = sch.page === 0;
  $("sch-next").disabled = !sch.next;
  $("sch-page").textContent = `page ${sch.page + 1}`;
  $("sch-msg").textContent = `updated ${fmt.clock(new Date().toISOString())}`;
  loadNextTicks();
}

function paintSchedules() {
  schedulesTable.flushOrdered([...sch.items.keys()], (id) => sch.items.get(id));
  for (const row of schedulesTable.rows.values()) row.tr.tabIndex = 0; // Enter opens it
  markScheduleSelected();
}

// extrapolate moves a cached next tick of an interval spec without jitter
// past now: such ticks are at the epoch + offset + k × every, and fire on
// the dot, so no request is needed. False when that cannot be known here.
function extrapolate(s, c, now) {
  const spec = s.spec || {};
  const every = fmt.seconds(spec.every) * 1000;
  if (!c.tick || spec.cron || !every || fmt.seconds(spec.jitter)) return false;
  const last = fmt.millis(c.tick.nominal_time);
  if (!last) return false;
  const next = last + (Math.floor((now - last) / every) + 1) * every;
  const end = fmt.millis(spec.end_time);
  if (end && next >= end) {
    c.tick = null;
  } else {
    const iso = new Date(next).toISOString();
    c.tick = { nominal_time: iso, fire_time: iso };
  }
  return true;
}

// loadNextTicks reads the next tick of each listed schedule whose cached
// one passed or whose spec changed, a few at a time.
async function loadNextTicks() {
  if (sch.ticksLoading) return;
  for (const id of sch.ticks.keys()) if (!sch.items.has(id)) sch.ticks.delete(id); // deleted, or on another page
  const now = Date.now();
  const stale = [];
  for (const s of sch.items.values()) {
    if (s.paused) continue;
    const c = sch.ticks.get(s.schedule_id);
    if (c && c.sig === tickSig(s) && !c.error) {
      if (!c.tick || fmt.millis(c.tick.fire_time) > now) continue;
      if (extrapolate(s, c, now)) continue;
    }
    stale.push(s);
  }
  if (!stale.length) {
    paintSchedules();
    return;
  }
  sch.ticksLoading = true;
  const ns = sch.ns;
  try {
    const work = stale.slice();
    const worker = async () => {
      for (let s = work.shift(); s; s = work.shift()) {
        if (sch.ns !== ns) return;
        const sig = tickSig(s);
        try {
          const res = await api(`/api/v1/schedules/${encodeURIComponent(ns)}/${encodeURIComponent(s.schedule_id)}?upcoming=1`);
          const got = res.schedule || {};
          if (sch.ns === ns) sch.ticks.set(s.schedule_id, { sig: tickSig(got), tick: (got.upcoming || [])[0] || null });
        } catch (err) {
          if (sch.ns === ns) sch.ticks.set(s.schedule_id, { sig, tick: undefined, error: err.message });
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(SCH_NEXT_PARALLEL, stale.length) }, worker));
  } finally {
    sch.ticksLoading = false;
  }
  if (sch.ns === ns) paintSchedules();
}

function applyScheduleFilter() {
  const ns = $("sch-ns").value;
  if (ns !== sch.ns) sch.ticks = new Map();
  sch.ns = ns;
  sch.tokens = [""];
  sch.page = 0;
  schedulesTable.quiet = true; // a new list, not new schedules
  writeHash();
  loadSchedules();
}

$("schedule-filter").addEventListener("submit", (e) => {
  e.preventDefault();
  applyScheduleFilter();
});
$("sch-ns").addEventListener("change", applyScheduleFilter);
$("sch-live").addEventListener("change", () => $("sch-live").checked && sch.ns && loadSchedules(true));
$("sch-next").addEventListener("click", () => {
  if (!sch.next) return;
  sch.tokens[sch.page + 1] = sch.next;
  sch.page++;
  schedulesTable.quiet = true;
  loadSchedules();
});
$("sch-prev").addEventListener("click", () => {
  if (sch.page === 0) return;
  sch.page--;
  schedulesTable.quiet = true;
  loadSchedules();
});
$("schedules-body").addEventListener("click", (e) => {
  const tr = e.target.closest("tr[data-schedule-id]");
  if (tr) openSchedule(sch.ns, tr.dataset.scheduleId);
});
$("schedules-body").addEventListener("keydown", (e) => {
  const tr = e.target.closest("tr[data-schedule-id]");
  if (tr && e.key === "Enter") openSchedule(sch.ns, tr.dataset.scheduleId);
});

function markScheduleSelected() {
  for (const [id, row] of schedulesTable.rows) {
    const sel = sch.detail && sch.detail.ns === sch.ns && sch.detail.id === id;
    row.tr.classList.toggle("selected", !!sel);
  }
}

function schedulePath(d) {
  return `/api/v1/schedules/${encodeURIComponent(d.ns)}/${encodeURIComponent(d.id)}`;
}

async function openSchedule(ns, id) {
  sch.detail = { ns, id };
  sch.shown = null;
  sch.parts = new Map();
  buildScheduleBox(id);
  markScheduleSelected();
  writeHash();
  await loadSchedule();
}

function closeSchedule() {
  sch.detail = null;
  sch.shown = null;
  sch.el = null;
  sch.parts = new Map();
  $("schedule-detail").hidden = true;
  $("schedule-detail").replaceChildren();
  markScheduleSelected();
  writeHash();
}

// buildScheduleBox lays out the open schedule's box once: its title, its
// buttons (which a refresh never rebuilds, so a note being typed stays),
// and the sections each refresh rewrites only when what they show changed.
function buildScheduleBox(id) {
  const badge = h("span", { className: "badge" }, "…");
  const btn = (testid, text, title, onclick) => h("button", { type: "button", dataset: { testid }, title, onclick }, text);
  const note = h("input", {
    type: "text",
    maxLength: 1024,
    placeholder: "why (optional; shown with the schedule)",
    "aria-label": "pause note",
    dataset: { testid: "schedule-pause-note" },
  });
  const pauseForm = h(
    "form",
    { hidden: true, dataset: { testid: "schedule-pause-form" } },
    note,
    h("button", { type: "submit", dataset: { testid: "schedule-pause-confirm" } }, "Pause"),
    h("button", { type: "button", className: "ghost", onclick: () => closePauseForm() }, "cancel"),
  );
  const closePauseForm = () => {
    pauseForm.hidden = true;
    pause.hidden = !!(sch.shown && sch.shown.paused);
  };
  note.addEventListener("keydown", (e) => e.key === "Escape" && closePauseForm());
  pauseForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const text = note.value.trim();
    scheduleCall("pause", { note: text }, "pause", () => {
      note.value = "";
      closePauseForm();
    });
  });
  const pause = btn("schedule-pause", "Pause…", "stop its ticks from firing, with a note saying why", () => {
    pause.hidden = true;
    pauseForm.hidden = false;
    note.focus();
  });
  const resume = btn("schedule-resume", "Resume", "fire again from now on; ticks that fell while paused do not fire", () =>
    scheduleCall("resume", {}, "resume"),
  );
  const trigger = btn("schedule-trigger", "Trigger now", "fire once now, paused or not, under its overlap policy", () =>
    scheduleCall("trigger", {}, "trigger"),
  );
  const msg = h("p", { className: "sched-msg", dataset: { testid: "schedule-msg" }, role: "status" });
  const loadError = h("p", { className: "error", dataset: { testid: "schedule-load-error" }, hidden: true });
  const sections = {
    summary: h("div", { dataset: { section: "summary" } }),
    upcoming: h("div", { dataset: { section: "upcoming" } }),
    recent: h("div", { dataset: { section: "recent" } }),
  };
  sch.el = { badge, pause, pauseForm, resume, trigger, msg, loadError, sections };
  const box = $("schedule-detail");
  box.replaceChildren(
    h(
      "header",
      {},
      h("h3", {}, "Schedule ", h("span", { className: "mono" }, id), " ", badge),
      h("button", { type: "button", className: "ghost", dataset: { testid: "schedule-close" }, onclick: closeSchedule }, "close ✕"),
    ),
    h("div", { className: "sched-actions" }, pause, pauseForm, resume, trigger),
    msg,
    loadError,
    sections.summary,
    sections.upcoming,
    sections.recent,
  );
  box.hidden = false;
}

// scheduleCall presses one of the open schedule's buttons: it calls the
// route, says what came of it, and reads the schedule and the list again.
async function scheduleCall(verb, body, what, done) {
  const d = sch.detail;
  const el = sch.el;
  if (!d || !el || sch.busy) return;
  sch.busy = true;
  for (const b of [el.pause, el.resume, el.trigger]) b.disabled = true;
  el.msg.className = "sched-msg muted";
  el.msg.setAttribute("role", "status");
  el.msg.textContent = `${what}…`;
  try {
    await api(`${schedulePath(d)}/${verb}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    if (sch.el === el) {
      el.msg.className = "sched-msg muted";
      el.msg.setAttribute("role", "status");
      el.msg.textContent = `${what}: done at ${fmt.clock(new Date().toISOString())}`;
      if (done) done();
    }
  } catch (err) {
    note("error", `${what} schedule ${d.id}: ${err.message}`);
    if (sch.el === el) {
      el.msg.className = "sched-msg error";
      el.msg.setAttribute("role", "alert");
      el.msg.textContent = `Could not ${what} ${d.id}: ${err.message}`;
    }
  } finally {
    sch.busy = false;
    for (const b of [el.pause, el.resume, el.trigger]) b.disabled = false;
  }
  if (sch.detail === d) {
    loadSchedule();
    if (d.ns === sch.ns) loadSchedules(true);
  }
}

// loadSchedule reads the open schedule with its next fire times, one read
// at a time (a refresh and a button may ask at once).
async function loadSchedule() {
  if (sch.loading) {
    sch.again = true;
    return;
  }
  sch.loading = true;
  try {
    do {
      sch.again = false;
      await loadScheduleOnce();
    } while (sch.again && sch.detail);
  } finally {
    sch.loading = false;
  }
}

async function loadScheduleOnce() {
  const d = sch.detail;
  if (!d) return;
  let res;
  try {
    res = await api(`${schedulePath(d)}?upcoming=${SCH_UPCOMING}`);
  } catch (err) {
    if (sch.detail !== d || !sch.el) return;
    // What was shown stays, marked as no longer read.
    sch.el.loadError.textContent = `Could not read the schedule: ${err.message}`;
    sch.el.loadError.hidden = false;
    if (!sch.shown) sch.el.badge.textContent = "unknown";
    return;
  }
  if (sch.detail !== d || !sch.el) return;
  const s = res.schedule || {};
  sch.shown = s;
  if (d.ns === sch.ns) sch.ticks.set(d.id, { sig: tickSig(s), tick: (s.upcoming || [])[0] || null });
  sch.el.loadError.hidden = true;
  renderSchedule(s);
}

// section rewrites one part of the open schedule's box when its key
// changed since it was last drawn.
function section(name, key, build) {
  if (sch.parts.get(name) === key) return;
  sch.parts.set(name, key);
  sch.el.sections[name].replaceChildren(...build().filter(Boolean));
}

const dur = (d) => (d ? fmt.goDuration(fmt.seconds(d)) : "");

function renderSchedule(s) {
  const el = sch.el;
  const st = schedState(s);
  el.badge.className = `badge ${st}`;
  el.badge.textContent = st;
  if (s.paused) el.pauseForm.hidden = true;
  el.pause.hidden = s.paused || !el.pauseForm.hidden;
  el.resume.hidden = !s.paused;

  const { upcoming, recent_actions: recent, ...rest } = s;
  section("summary", JSON.stringify(rest), () => scheduleSummary(s));

  const zone = s.spec && s.spec.cron ? scheduleZone(s.spec) : "UTC";
  const now = Date.now();
  const ticks = (upcoming || []).map((t, i) => [
    String(i + 1),
    fmt.clock(t.fire_time),
    countdown(t.fire_time, now),
    fmt.zoned(t.nominal_time, zone),
    t.fire_time || "",
  ]);
  section("upcoming", JSON.stringify([s.paused, zone, ticks]), () => [
    h("h4", {}, `Next fire times (${ticks.length})`),
    ticks.length
      ? table(
          "upcoming",
          ["#", "fires", "in", `nominal (${zone})`],
          ["#"],
          ticks.map(([n, fire, left, nominal, iso]) =>
            h(
              "tr",
              { dataset: { tick: n } },
              h("td", { className: "num", dataset: { col: "n" } }, n),
              h("td", { dataset: { col: "fires" }, title: iso }, fire),
              h("td", { dataset: { col: "in" } }, left),
              h("td", { dataset: { col: "nominal" } }, nominal),
            ),
          ),
        )
      : h("p", { className: "muted", dataset: { testid: "no-upcoming" } }, s.paused ? "None while paused: resume it to fire again." : "None: no tick is ahead (its end time has passed)."),
  ]);

  const records = (recent || []).slice().reverse();
  section("recent", JSON.stringify([s.namespace, s.action && s.action.workflow_type, records]), () => [
    h("h4", {}, `Recent actions (${records.length}, newest first)`),
    records.length
      ? table("recent", ["nominal time", "outcome", "origin", "action", "detail", "recorded"], [], records.map((r) => recentRow(s, r)))
      : h("p", { className: "muted" }, "None yet: nothing has fired."),
  ]);
}

function scheduleSummary(s) {
  const spec = s.spec || {};
  const a = s.action || {};
  const p = s.policy || {};
  const activity = !isWorkflowAction(a);
  const running = s.running_action_ids || [];
  const input = fmt.payload(a.input);
  return [
    h("h4", {}, "Spec"),
    kv([
      ["trigger", h("span", { className: "mono" }, triggerText(spec))],
      ["cron", spec.cron],
      ["time zone", spec.cron ? scheduleZone(spec) : ""],
      ["every", spec.cron ? "" : dur(spec.every)],
      ["offset", spec.cron ? "" : dur(spec.offset) || "0s"],
      ["jitter", spec.jitter ? `up to ${dur(spec.jitter)}` : "none"],
      ["start", spec.start_time ? fmt.clock(spec.start_time) : ""],
      ["end", spec.end_time ? fmt.clock(spec.end_time) : ""],
    ]),
    h("h4", {}, "Action"),
    kv([
      [actionKind(a), a.workflow_type || a.activity_type || "—"],
      ["task queue", a.task_queue || "default"],
      ["node pin", a.node],
      ...flowPairs(a),
      ["schedule→start", activity ? dur(a.schedule_to_start_timeout) : ""],
      ["start→close", activity ? dur(a.start_to_close_timeout) : ""],
      ["schedule→close", activity ? dur(a.schedule_to_close_timeout) : ""],
      ["heartbeat", activity ? dur(a.heartbeat_timeout) : ""],
      ["retry", activity ? retrySummary(a.retry_policy) : ""],
    ]),
    input && h("div", { className: "io" }, h("figure", {}, h("figcaption", {}, "input"), h("pre", {}, input))),
    h("h4", {}, "Policy"),
    kv([
      ["overlap", fmt.enumName(p.overlap, "SCHEDULE_OVERLAP_") || "skip"],
      ["catch-up", fmt.enumName(p.catch_up, "SCHEDULE_CATCH_UP_") || "one"],
      ["catch-up window", dur(p.catch_up_window) || "1m"],
    ]),
    h("h4", {}, "State"),
    kv([
      ["state", schedState(s)],
      ["note", s.note],
      ["fired", fmt.count(s.fired)],
      ["skipped (overlap)", fmt.count(s.skipped)],
      ["missed (catch-up)", fmt.count(s.missed)],
      ["ticks handled up to", fmt.clock(s.last_tick_time)],
      ["buffered tick", s.buffered_tick_time ? fmt.clock(s.buffered_tick_time) : ""],
      ["open actions", running.length ? `${running.length}: ${running.join(", ")}` : "none"],
      ["fires pending", s.pending_fires ? fmt.count(s.pending_fires) : ""],
      ["backfills waiting", s.backfills_waiting ? fmt.count(s.backfills_waiting) : ""],
      ["created", fmt.clock(s.create_time)],
      ["updated", fmt.clock(s.update_time)],
    ]),
  ];
}

function recentRow(s, r) {
  const outcome = outcomeName(r);
  const n = Number(r.count || 0);
  const nominal =
    n > 1 && r.first_nominal_time ? `${fmt.clock(r.first_nominal_time)} – ${fmt.clock(r.nominal_time)}` : fmt.clock(r.nominal_time);
  const detail = [n > 1 ? `${fmt.count(n)} ticks` : "", r.detail || ""].filter(Boolean).join(" · ");
  return h(
    "tr",
    { dataset: { outcome, origin: r.origin || "", actionId: r.action_id || "" } },
    h("td", { dataset: { col: "nominal" }, title: r.nominal_time || "" }, nominal),
    h("td", { dataset: { col: "outcome" } }, h("span", { className: `badge outcome-${badgeClass(outcome)}` }, outcome)),
    h("td", { dataset: { col: "origin" } }, r.origin || "—"),
    h("td", { dataset: { col: "action" } }, actionLink(s, r)),
    h("td", { className: "detail-text", dataset: { col: "detail" } }, detail),
    h("td", { dataset: { col: "recorded" }, title: r.time || "" }, fmt.clock(r.time)),
  );
}

// actionLink names what a tick started, as a link that opens it in the
// workflow or activity panel (the href is the same view as a link of its
// own, for a new tab).
function actionLink(s, r) {
  if (!r.action_id) return "—";
  if (outcomeName(r) !== "started") return h("span", { className: "mono" }, r.action_id);
  const ns = s.namespace;
  if (isWorkflowAction(s.action)) {
    const q = new URLSearchParams({ wns: ns, workflow: r.action_id });
    if (r.run_id) q.set("run", r.run_id);
    return h(
      "a",
      { href: `#${q}`, className: "mono", title: "open the run in the Workflows panel", dataset: { openWorkflow: r.action_id, run: r.run_id || "" } },
      r.action_id,
    );
  }
  const q = new URLSearchParams({ ns, activity: r.action_id });
  return h("a", { href: `#${q}`, className: "mono", title: "open it in the Activities panel", dataset: { openActivity: r.action_id } }, r.action_id);
}

$("schedule-detail").addEventListener("click", (e) => {
  const a = e.target.closest("a[data-open-workflow], a[data-open-activity]");
  if (!a || !sch.detail || e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  const ns = sch.detail.ns;
  if (a.dataset.openWorkflow) showRun(ns, a.dataset.openWorkflow, a.dataset.run || "");
  else showActivity(ns, a.dataset.openActivity);
});

// showRun opens a run in the Workflows panel, listing its namespace there.
function showRun(ns, id, run) {
  if (wfs.ns !== ns) {
    wfs.ns = ns;
    wfs.tokens = [""];
    wfs.page = 0;
    workflowsTable.quiet = true;
    syncWorkflowNamespaces();
    loadWorkflows();
  }
  openRun(ns, id, run);
  $("workflows-panel").scrollIntoView({ block: "start" });
}

// showActivity opens an activity in the Activities panel, listing its
// namespace there.
function showActivity(ns, id) {
  if (acts.ns !== ns) {
    acts.ns = ns;
    acts.tokens = [""];
    acts.page = 0;
    activitiesTable.quiet = true;
    syncNamespaceOptions();
    loadActivities();
  }
  openDetail(ns, id);
  $("activities-panel").scrollIntoView({ block: "start" });
}


// ---------------------------------------------------------------- waiting work

// The waiting panel counts a namespace's ready work by pool, type,
// priority and fairness key (GET /api/v1/waiting), largest groups first,
// with what a flow limit holds shown apart.
const wait = { ns: "", req: 0 };

function syncWaitingNamespaces() {
  const names = syncNamespaceSelect($("wait-ns"), wait.ns);
  if (!wait.ns && names.length) {
    wait.ns = names[0];
    loadWaiting();
  }
  $("wait-ns").value = wait.ns;
}

async function loadWaiting() {
  const empty = $("waiting-empty");
  if (!wait.ns) {
    $("waiting-body").replaceChildren();
    empty.textContent = state.namespaces.size ? "Pick a namespace." : "No namespace yet.";
    empty.hidden = false;
    return;
  }
  const req = ++wait.req;
  let res;
  try {
    res = await api(`/api/v1/waiting?namespace=${encodeURIComponent(wait.ns)}`);
  } catch (err) {
    if (req !== wait.req) return;
    $("wait-msg").textContent = err.message;
    return;
  }
  if (req !== wait.req) return;
  const groups = res.groups || [];
  const now = Date.now();
  let total = 0;
  const rows = groups.map((g) => {
    const n = Number(g.count || 0);
    total += n;
    const held = g.held_by ? `${g.held_by.replace(/_/g, " ")}${g.concurrency_key ? ` (${g.concurrency_key})` : ""}` : "—";
    return h(
      "tr",
      { dataset: { kind: g.kind || "", priority: String(g.priority || 3), fairnessKey: g.fairness_key || "", heldBy: g.held_by || "" } },
      h("td", { dataset: { col: "task_queue" } }, g.task_queue || "default"),
      h("td", { dataset: { col: "kind" } }, (g.kind || "").replace(/_/g, " ")),
      h("td", { className: "mono", dataset: { col: "type" } }, g.type || ""),
      h("td", { className: "num", dataset: { col: "priority" } }, String(g.priority || 3)),
      h("td", { className: "mono", dataset: { col: "fairness_key" } }, g.fairness_key || "(default)"),
      h("td", { dataset: { col: "held_by" } }, held),
      h("td", { className: "num", dataset: { col: "count" } }, fmt.count(n)),
      h("td", { className: "num", dataset: { col: "oldest" }, title: g.oldest_ready_time || "" },
        g.oldest_ready_time ? fmt.human(Math.max(0, (now - Date.parse(g.oldest_ready_time)) / 1000)) : "—"),
    );
  });
  $("waiting-body").replaceChildren(...rows);
  $("waiting-total").textContent = fmt.count(total);
  const more = Number(res.truncated || 0);
  empty.textContent = "Nothing waits: every ready activity and run has a worker.";
  empty.hidden = groups.length > 0;
  $("wait-msg").textContent = `updated ${fmt.clock(new Date().toISOString())}${more ? ` · ${more} smaller groups left out` : ""}`;
}

$("wait-ns").addEventListener("change", () => {
  wait.ns = $("wait-ns").value;
  loadWaiting();
});
$("waiting-filter").addEventListener("submit", (e) => e.preventDefault());

// ---------------------------------------------------------------- render loop

let frame = 0;
let firstRender = false;

function schedule() {
  if (!frame) frame = requestAnimationFrame(render);
}

function render() {
  frame = 0;
  const now = Date.now();
  const workersChanged = workersTable.flush((id) => state.workers.get(id), now);
  namespacesTable.flush(nsView, now);
  if (nsOptionsDirty) {
    nsOptionsDirty = false;
    syncNamespaceOptions();
    syncWorkflowNamespaces();
    syncScheduleNamespaces();
    syncWaitingNamespaces();
  }
  flushFeed();
  if (workersChanged) renderTotals();
  else renderBacklogTotal();
  $("workers-empty").hidden = workersTable.size > 0;
  $("namespaces-empty").hidden = namespacesTable.size > 0;
  $("events-seq").textContent = state.lastSeq ? `#${state.lastSeq}` : "";

  if (!firstRender && state.snapshots > 0) {
    performance.mark("aion-first-dom");
    void document.body.offsetHeight; // style and layout, now
    performance.mark("aion-first-layout");
    // The first snapshot is in the DOM; mark when the frame holding it has
    // been laid out and painted (the next frame's start), so the figure
    // covers loading, the snapshot, parsing, the DOM work and the paint.
    firstRender = true;
    requestAnimationFrame(() => {
      const mark = performance.mark("aion-first-render", {
        detail: { workers: state.workers.size, namespaces: state.namespaces.size },
      });
      window.aionFirstRenderMs = mark.startTime;
      document.body.dataset.firstRenderMs = String(Math.round(mark.startTime));
      refreshWorkers();
    });
  }
}

function renderTotals() {
  let draining = 0;
  let used = 0;
  let total = 0;
  for (const w of state.workers.values()) {
    if (w.state === "WORKER_STATE_DRAINING") draining++;
    used += w.slots_in_use || 0;
    total += w.slots || 0;
  }
  const n = state.workers.size;
  $("total-workers").textContent = fmt.count(n);
  $("total-draining").textContent = fmt.count(draining);
  $("total-slots").textContent = `${fmt.count(used)} / ${fmt.count(total)}`;
  $("workers-count").textContent =
    workersTable.visible === n ? fmt.count(n) : `${fmt.count(workersTable.visible)} of ${fmt.count(n)}`;
  renderBacklogTotal();
}

function renderBacklogTotal() {
  let backlog = 0;
  for (const pools of state.pools.values()) for (const p of pools) backlog += Number(p.backlog || 0);
  $("total-backlog").textContent = fmt.count(backlog);
  $("total-namespaces").textContent = fmt.count(state.namespaces.size);
  $("namespaces-count").textContent = fmt.count(state.namespaces.size);
}

// ---------------------------------------------------------------- start

function tick() {
  if (document.visibilityState !== "visible") return;
  if (state.live) refreshWorkers();
  if ($("act-live").checked && acts.ns) loadActivities(true);
  const d = acts.detail;
  if (d) {
    const a = acts.detailJSON ? JSON.parse(acts.detailJSON) : null;
    if (!a || !TERMINAL.has(actState(a))) loadDetail();
  }
  if ($("wf-live").checked && wfs.ns) loadWorkflows(true);
  // An open run changes (and its pending steps' timers count down); a
  // closed one does not.
  if (wfs.detail && (!wfs.shown || runStatus(wfs.shown) === "running")) loadRun();
  // Schedules: the page, the next ticks that passed, the open schedule.
  if ($("sch-live").checked) {
    if (sch.ns) loadSchedules(true);
    if (sch.detail) loadSchedule();
  }
  if ($("wait-live").checked && wait.ns) loadWaiting();
  namespacesTable.markAll();
  schedule();
}

$("auth-forget").hidden = !token;
readHash();
if (acts.ns) loadActivities();
if (wfs.ns) loadWorkflows();
if (sch.ns) loadSchedules();
connect();
setInterval(tick, REFRESH_MS);
window.addEventListener("hashchange", () => {
  readHash();
  applyFilter();
  applyWorkflowFilter();
  applyScheduleFilter();
});
