// The aion ops console. Topology (workers connecting, draining and leaving,
// namespaces and their placement, pool load) comes from the Server-Sent
// Events stream at /api/v1/events: a snapshot first, then numbered deltas.
// What the stream does not carry (slots in use, last heartbeat) is refreshed
// from /api/v1/workers every few seconds, and activities are read from
// /api/v1/activities. Every change marks keyed rows dirty; one render per
// animation frame applies them, so a burst of events costs one DOM pass.

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
  const es = new EventSource(token ? `/api/v1/events?access_token=${encodeURIComponent(token)}` : "/api/v1/events");
  source = es;
  let opened = false; // this connection delivered its snapshot
  es.addEventListener("snapshot", (m) => {
    if (source !== es) return;
    opened = true;
    if (!state.snapshots) performance.mark("aion-snapshot-arrived");
    onSnapshot(JSON.parse(m.data));
  });
  for (const kind of DELTAS) {
    es.addEventListener(kind, (m) => source === es && onDelta(kind, JSON.parse(m.data)));
  }
  // "error" is both the browser's network error and the server's own
  // `event: error` (a subscriber that fell too far behind). Either way the
  // deltas after it cannot be trusted: start over from a fresh snapshot.
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
  if (seq !== state.lastSeq + 1) {
    resubscribe(`event stream skipped from #${state.lastSeq} to #${seq}`, true);
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
  }
  if (kind !== "pool_stats" || $("show-pool-stats").checked) {
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

// syncNamespaceOptions keeps the namespace filter's options equal to the
// known namespaces (plus the chosen one, if it is not known yet), sorted.
function syncNamespaceOptions() {
  const sel = $("act-ns");
  const names = [...state.namespaces.keys()];
  if (acts.ns && !state.namespaces.has(acts.ns)) names.push(acts.ns);
  names.sort();
  const opts = sel.options;
  if (names.length !== opts.length || names.some((n, i) => opts[i].value !== n)) {
    sel.replaceChildren(...names.map((n) => h("option", { value: n }, n)));
  }
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

function writeHash() {
  const q = new URLSearchParams();
  if (acts.ns) q.set("ns", acts.ns);
  if (acts.state) q.set("state", acts.state);
  if (acts.type) q.set("type", acts.type);
  if (acts.detail) q.set("activity", acts.detail.id);
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
  const json = JSON.stringify(res.activity);
  if (json === acts.detailJSON) return;
  acts.detailJSON = json;
  renderDetail(res.activity || {});
  box.hidden = false;
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

function renderDetail(a) {
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
    kv([
      ["namespace", a.namespace],
      ["task queue", a.task_queue || "default"],
      ["type", a.activity_type],
      ["node pin", a.node],
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
  namespacesTable.markAll();
  schedule();
}

$("auth-forget").hidden = !token;
readHash();
if (acts.ns) loadActivities();
connect();
setInterval(tick, REFRESH_MS);
window.addEventListener("hashchange", () => {
  readHash();
  applyFilter();
});
