// latch dashboard: polls the serving member's own endpoints and draws them.
// No framework, no build step, nothing fetched from anywhere else. Every
// piece of data is put in the page as text (textContent), never as HTML.
//
// Auth: the page starts locked (nothing shown). Any answer unlocks it; a 401
// (auth enabled, no or an expired token) locks it again, clears every table
// and shows the login form. The token from POST /v1/auth/login is kept in
// this tab's sessionStorage only (gone when the tab closes) and sent as
// "Authorization: Bearer"; sign out revokes it (POST /v1/auth/logout).
"use strict";

const POLL_MS = 1000;        // members, locks, elections, sessions
const METRICS_MS = 2000;     // counters for the charts and watches
const KV_MS = 5000;          // the key browser's refresh
const FETCH_TIMEOUT_MS = 4000;
const CHART_POINTS = 60;     // 2 minutes at METRICS_MS
const KV_MAX_CHILDREN = 200; // the key browser reads at most this many children
const READ = "consistency=stale";

const WRITE_ROUTES = new Set([
  "PUT /v1/kv/{path...}", "DELETE /v1/kv/{path...}",
  "POST /v1/lock/acquire", "POST /v1/lock/release",
  "POST /v1/election/join", "POST /v1/election/resign",
  "POST /v1/session/create", "POST /v1/session/close",
]);
const READ_ROUTES = new Set([
  "GET /v1/kv/{path...}", "GET /v1/lock/{name}", "GET /v1/election/{role}",
  "GET /v1/session/{id}", "GET /v1/cluster/members",
]);
const LATENCY_ROUTES = new Set(["PUT /v1/kv/{path...}", "DELETE /v1/kv/{path...}"]);

const $ = (id) => document.getElementById(id);

// ---- auth ----

const TOKEN_KEY = "latch.token";
const USER_KEY = "latch.user";

function token() { return sessionStorage.getItem(TOKEN_KEY); }

// lock hides and clears every piece of data and shows the login form.
function lock() {
  document.body.classList.add("locked");
  for (const body of document.querySelectorAll("main tbody")) body.replaceChildren();
  for (const b of document.querySelectorAll("main b, header .summary b")) b.textContent = "—";
  for (const svg of document.querySelectorAll("main svg")) svg.replaceChildren();
  $("kv-node").replaceChildren();
  $("shards-box").hidden = true;
  errors.clear();
  setError("", null);
  heldSince.clear();
  history.last = null;
  history.writes.length = history.reads.length = history.latency.length = 0;
  $("login").hidden = false;
  $("signed-in").hidden = true;
}

function unlock() {
  if (!document.body.classList.contains("locked")) return;
  document.body.classList.remove("locked");
  $("login").hidden = true;
  const user = sessionStorage.getItem(USER_KEY);
  $("signed-in").hidden = !token();
  $("user-name").textContent = user || "";
}

// forgetToken drops the tab's token and locks the page.
function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(USER_KEY);
  lock();
}

async function login(event) {
  event.preventDefault();
  const user = $("login-user").value;
  const failure = $("login-error");
  failure.hidden = true;
  let resp, body;
  try {
    resp = await fetch("/v1/auth/login", {
      method: "POST", cache: "no-store", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ user, password: $("login-password").value }),
    });
    body = await resp.json().catch(() => null);
  } catch (e) {
    resp = null;
    body = { error: { message: e.message } };
  }
  $("login-password").value = "";
  if (!resp || !resp.ok || !body || !body.token) {
    failure.textContent = resp && resp.status === 401 ? "wrong user or password"
      : "sign-in failed: " + (body && body.error ? body.error.message : "HTTP " + (resp ? resp.status : "?"));
    failure.hidden = false;
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, body.token);
  sessionStorage.setItem(USER_KEY, body.user);
  pollNow();
}

async function logout() {
  const current = token();
  forgetToken();
  if (!current) return;
  try {
    await fetch("/v1/auth/logout", { method: "POST", cache: "no-store", headers: { Authorization: "Bearer " + current } });
  } catch (e) {
    console.error(e); // the token is gone from the tab either way; it expires on its own
  }
}

// ---- fetching ----

// request fetches path with the tab's token: a 401 locks the page, any
// other answer unlocks it. An answer to a request sent with a token the tab
// no longer holds (signed out meanwhile) is dropped, never shown.
async function request(path) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
  const sent = token();
  const headers = {};
  if (sent) headers.Authorization = "Bearer " + sent;
  try {
    const resp = await fetch(path, { signal: ctl.signal, cache: "no-store", headers });
    if (token() !== sent) throw new Error(path + ": signed out meanwhile");
    if (resp.status === 401) {
      if (token()) forgetToken(); else lock();
      throw new Error(path + ": sign in to see this cluster");
    }
    unlock();
    return resp;
  } finally {
    clearTimeout(timer);
  }
}

async function getJSON(path) {
  const resp = await request(path);
  const body = await resp.json().catch(() => null);
  if (!resp.ok) {
    const msg = body && body.error ? body.error.code + ": " + body.error.message : "HTTP " + resp.status;
    throw new Error(path + ": " + msg);
  }
  return body;
}

async function getText(path) {
  const resp = await request(path);
  if (!resp.ok) throw new Error(path + ": HTTP " + resp.status);
  return await resp.text();
}

// every runs fn now and then again ms after each run ends (never two at
// once); pollNow runs every such fn at once (after a sign-in) instead of at
// its next turn.
const pollers = [];
function every(ms, fn) {
  let timer = null;
  let running = false;
  const run = async () => {
    clearTimeout(timer);
    if (running) return;
    running = true;
    try { await fn(); } catch (e) { console.error(e); }
    running = false;
    timer = setTimeout(run, ms);
  };
  pollers.push(run);
  run();
}
function pollNow() { for (const run of pollers) run(); }

const errors = new Map(); // source -> message
function setError(source, err) {
  if (document.body.classList.contains("locked")) err = null; // nothing shows while locked
  if (err) errors.set(source, err.message || String(err)); else errors.delete(source);
  const box = $("error");
  box.hidden = errors.size === 0;
  box.textContent = [...errors.values()].join(" · ");
}

// ---- DOM helpers ----

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else if (k === "title") e.title = v;
    else if (k === "onclick") e.addEventListener("click", v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function td(text, cls) { return el("td", { class: cls, title: String(text) }, text); }

function fillBody(table, rows, emptyText, columns) {
  const body = $(table).tBodies[0];
  if (rows.length === 0) {
    body.replaceChildren(el("tr", {}, el("td", { class: "empty", colspan: String(columns) }, emptyText)));
    return;
  }
  body.replaceChildren(...rows);
}

function duration(ms) {
  if (ms < 1000) return ms + " ms";
  const s = Math.floor(ms / 1000);
  if (s < 120) return s + " s";
  const m = Math.floor(s / 60);
  if (m < 120) return m + " min " + (s % 60) + " s";
  return Math.floor(m / 60) + " h " + (m % 60) + " min";
}

// ---- members ----

async function pollHealth() {
  let h;
  try {
    h = await getJSON("/v1/cluster/health");
    setError("health", null);
  } catch (e) {
    setError("health", e);
    $("updated").textContent = "not answering since " + new Date().toLocaleTimeString();
    return;
  }
  const leader = h.members.find((m) => m.id === h.leader_id);
  $("leader-name").textContent = leader ? leader.name : "none";
  $("served-by").textContent = h.answered_by;
  const terms = h.members.filter((m) => m.reachable).map((m) => m.term);
  $("term").textContent = terms.length ? Math.max(...terms) : "—";
  const commits = h.members.map((m) => m.commit_index);
  $("commit-index").textContent = commits.length ? Math.max(...commits) : "—";
  $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  const up = h.members.filter((m) => m.reachable).length;
  const upBox = $("members-up");
  upBox.textContent = up + "/" + h.members.length;
  upBox.className = up < h.members.length ? "warn" : "";
  const members = [...h.members].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const rows = members.map((m) => {
    const isLeader = m.id === h.leader_id;
    const role = m.reachable ? m.role : "unknown";
    return el("tr", { "data-member": m.name, "data-role": role, class: isLeader ? "is-leader" : "" },
      td(m.name),
      el("td", {}, el("span", { class: "badge " + role }, role)),
      td(m.learner ? "learner" : "voter"),
      el("td", { class: "health " + (m.reachable ? "up" : "down"), title: m.error || "status report heard within 3 s" }, m.reachable ? "up" : "down"),
      td(m.reachable ? m.applied_index : "—", "num"),
      td(m.reachable ? m.lag : "—", "num"),
      td(m.client_url || "", "mono"));
  });
  fillBody("members", rows, "no members", 7);
  await pollShards(members);
}

// pollShards shows, with more than one shard, each shard's leader, term,
// commit and applied index as the serving member sees them (/v1/status).
async function pollShards(members) {
  let st;
  try {
    st = await getJSON("/v1/status");
    setError("status", null);
  } catch (e) {
    setError("status", e);
    return;
  }
  const shards = st.shards || [];
  $("shards-box").hidden = shards.length < 2;
  if (shards.length < 2) return;
  const names = new Map(members.map((m) => [m.id, m.name]));
  const rows = shards.map((s) => el("tr", { "data-shard": String(s.shard), "data-leader": names.get(s.leader_id) || "" },
    td(s.shard, "num"),
    td(s.leader_id ? names.get(s.leader_id) || s.leader_id : "none", s.leader_id ? "" : "empty"),
    td(s.term, "num"),
    td(s.commit_index, "num"),
    td(s.applied_index, "num"),
    el("td", {}, el("span", { class: "badge " + s.role }, s.role))));
  fillBody("shards", rows, "no shards", 6);
}

// ---- locks, elections, sessions ----

const heldSince = new Map(); // lock name -> {token, since}

async function pollLocks() {
  let list;
  try {
    list = await getJSON("/v1/locks?" + READ);
    setError("locks", null);
  } catch (e) {
    setError("locks", e);
    return;
  }
  const now = Date.now();
  const seen = new Set();
  const rows = list.locks.map((l) => {
    seen.add(l.name);
    const holder = l.holder;
    let held = "—";
    if (holder) {
      const prev = heldSince.get(l.name);
      if (!prev || prev.token !== holder.fencing_token) heldSince.set(l.name, { token: holder.fencing_token, since: now });
      held = duration(now - heldSince.get(l.name).since);
    } else {
      heldSince.delete(l.name);
    }
    return el("tr", { "data-lock": l.name, "data-token": holder ? String(holder.fencing_token) : "" },
      td(l.name),
      td(holder ? holder.session_handle : "free", holder ? "mono" : "empty"),
      td(holder ? holder.fencing_token : "—", "num token"),
      td(l.waiters, "num"),
      td(held, "num"));
  });
  for (const name of heldSince.keys()) if (!seen.has(name)) heldSince.delete(name);
  fillBody("locks", rows, "no locks", 5);
  $("locks-note").textContent = list.truncated ? "(first " + list.locks.length + " shown)" : "";
}

async function pollElections() {
  let list;
  try {
    list = await getJSON("/v1/elections?" + READ);
    setError("elections", null);
  } catch (e) {
    setError("elections", e);
    return;
  }
  const rows = list.elections.map((e) => {
    const l = e.leader;
    return el("tr", { "data-election": e.role },
      td(e.role),
      td(l ? l.session_handle : "none", l ? "mono" : "empty"),
      td(l ? l.value : "", "mono"),
      td(l ? l.fencing_token : "—", "num"),
      td(e.candidates, "num"));
  });
  fillBody("elections", rows, "no elections", 5);
  $("elections-note").textContent = list.truncated ? "(first " + list.elections.length + " shown)" : "";
}

async function pollSessions() {
  let list;
  try {
    list = await getJSON("/v1/sessions?limit=50&" + READ);
    setError("sessions", null);
  } catch (e) {
    setError("sessions", e);
    return;
  }
  $("sessions-count").textContent = list.count;
  const soon = $("sessions-expiring");
  soon.textContent = list.expiry_known ? list.expiring_soon : "—";
  soon.className = list.expiry_known && list.expiring_soon > 0 ? "warn" : "";
  const rows = list.sessions.map((s) => el("tr", { "data-session": s.session_handle },
    td(s.session_handle, "mono"),
    td(duration(s.timeout_ms), "num"),
    td(s.ephemeral_count, "num"),
    td(s.expires_in_ms === undefined ? "—" : duration(s.expires_in_ms), "num")));
  fillBody("sessions", rows, "no live sessions", 4);
  const notes = [];
  if (list.truncated) notes.push("first " + list.sessions.length + " of " + list.count + " shown");
  if (!list.expiry_known) notes.push("expiry is known only to the leader: open the leader's /ui to see time left");
  else notes.push("expiring soon: less than half the timeout left");
  $("sessions-note").textContent = notes.join("; ");
}

// ---- metrics: charts and watches ----

// parseMetrics reads Prometheus text into [{name, labels, value}].
function parseMetrics(text) {
  const out = [];
  const line = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
  const label = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  for (const l of text.split("\n")) {
    if (l === "" || l[0] === "#") continue;
    const m = line.exec(l);
    if (!m) continue;
    const labels = {};
    if (m[2]) for (const lm of m[2].matchAll(label)) labels[lm[1]] = lm[2];
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

function sum(samples, name, routes) {
  let total = 0;
  for (const s of samples) {
    if (s.name !== name) continue;
    if (routes && !routes.has(s.labels.method + " " + s.labels.route)) continue;
    total += s.value;
  }
  return total;
}

const history = { last: null, writes: [], reads: [], latency: [] };

function push(series, v) {
  series.push(v);
  if (series.length > CHART_POINTS) series.shift();
}

async function pollMetrics() {
  let samples;
  try {
    samples = parseMetrics(await getText("/metrics"));
    setError("metrics", null);
  } catch (e) {
    setError("metrics", e);
    return;
  }
  const now = {
    t: performance.now(),
    writes: sum(samples, "latch_http_requests_total", WRITE_ROUTES),
    reads: sum(samples, "latch_http_requests_total", READ_ROUTES),
    latSum: sum(samples, "latch_http_request_duration_seconds_sum", LATENCY_ROUTES),
    latCount: sum(samples, "latch_http_request_duration_seconds_count", LATENCY_ROUTES),
  };
  const last = history.last;
  history.last = now;
  showWatches(samples);
  if (!last) return;
  const dt = (now.t - last.t) / 1000;
  if (dt <= 0) return;
  const writes = Math.max(0, now.writes - last.writes) / dt;
  const reads = Math.max(0, now.reads - last.reads) / dt;
  const n = now.latCount - last.latCount;
  const latency = n > 0 ? ((now.latSum - last.latSum) / n) * 1000 : 0;
  push(history.writes, writes);
  push(history.reads, reads);
  push(history.latency, latency);
  $("writes-now").textContent = formatNumber(writes);
  $("reads-now").textContent = formatNumber(reads);
  $("latency-now").textContent = n > 0 ? formatNumber(latency) : "—";
  drawChart("chart-writes", history.writes);
  drawChart("chart-reads", history.reads);
  drawChart("chart-latency", history.latency);
}

function showWatches(samples) {
  $("watches-registered").textContent = sum(samples, "latch_watches_registered");
  $("streams-open").textContent = sum(samples, "latch_event_streams_open");
  $("events-queued").textContent = sum(samples, "latch_watch_events_queued");
  const slow = sum(samples, "latch_watch_sessions_disconnected_total");
  $("slow-consumers").textContent = slow;
  $("slow-consumers").className = slow > 0 ? "warn" : "";
}

// drawChart draws series as a sparkline in a 300x60 SVG, scaled to its max.
function drawChart(id, series) {
  const svg = $(id);
  if (series.length < 2) return;
  const ns = "http://www.w3.org/2000/svg";
  const top = Math.max(...series, 1e-9);
  const step = 300 / (CHART_POINTS - 1);
  const x0 = 300 - (series.length - 1) * step;
  const pts = series.map((v, i) => (x0 + i * step).toFixed(1) + "," + (58 - (v / top) * 54).toFixed(1));
  const area = document.createElementNS(ns, "polygon");
  area.setAttribute("points", x0.toFixed(1) + ",60 " + pts.join(" ") + " 300,60");
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", pts.join(" "));
  const title = document.createElementNS(ns, "title");
  title.textContent = "max " + top.toFixed(2);
  svg.replaceChildren(title, area, line);
  $(id + "-max").textContent = "max " + formatNumber(top);
}

function formatNumber(v) {
  if (v < 1e-6) return "0";
  if (v < 10) return v.toFixed(2);
  if (v < 1000) return v.toFixed(0);
  return (v / 1000).toFixed(1) + "k";
}

// ---- key browser ----

let kvPath = "/";
let kvSelected = null;

function nodeURL(path) { return "/v1/kv" + (path === "/" ? "/" : path.split("/").map(encodeURIComponent).join("/")); }
function join(dir, name) { return dir === "/" ? "/" + name : dir + "/" + name; }

function showCrumbs() {
  const parts = kvPath === "/" ? [] : kvPath.slice(1).split("/");
  const nav = $("kv-crumbs");
  const items = [el("a", { onclick: () => openDir("/") }, "/")];
  parts.forEach((p, i) => {
    const path = "/" + parts.slice(0, i + 1).join("/");
    if (i > 0) items.push(el("span", {}, "/"));
    items.push(el("a", { onclick: () => openDir(path) }, p));
  });
  nav.replaceChildren(...items);
}

function showNodeHint() {
  $("kv-node").replaceChildren(el("p", { class: "muted" }, "Select a key to see its value and metadata; a name ending in / opens a directory."));
}

function openDir(path) {
  kvPath = path;
  kvSelected = null;
  showNodeHint();
  refreshKeys();
}

async function refreshKeys() {
  showCrumbs();
  let list;
  try {
    list = await getJSON(nodeURL(kvPath) + "?children=true&" + READ);
    setError("kv", null);
  } catch (e) {
    setError("kv", e);
    return;
  }
  const names = list.children.slice(0, KV_MAX_CHILDREN);
  const nodes = await Promise.all(names.map((n) => getJSON(nodeURL(join(kvPath, n)) + "?" + READ).catch(() => null)));
  const rows = names.map((name, i) => {
    const n = nodes[i];
    const path = join(kvPath, name);
    const link = el("a", { onclick: () => (n && n.children_count > 0 ? openDir(path) : selectNode(path)) }, name + (n && n.children_count > 0 ? "/" : ""));
    return el("tr", { "data-key": path },
      el("td", { title: path }, link),
      td(n ? n.version : "—", "num"),
      td(n ? n.children_count : "—", "num"),
      td(n && n.ephemeral ? n.owner_handle : "", "mono"),
      td(n ? n.value : "(gone)", "mono"));
  });
  fillBody("kv-children", rows, "no children", 5);
  $("kv-note").textContent = list.children.length > KV_MAX_CHILDREN
    ? "first " + KV_MAX_CHILDREN + " of " + list.children.length + " children shown" : "";
  if (kvSelected) selectNode(kvSelected);
}

async function selectNode(path) {
  kvSelected = path;
  let n;
  try {
    n = await getJSON(nodeURL(path) + "?" + READ);
  } catch (e) {
    $("kv-node").replaceChildren(el("p", { class: "muted" }, e.message));
    return;
  }
  const at = (ms) => (ms ? " at " + new Date(ms).toLocaleString() : "");
  const dl = el("dl", {},
    el("dt", {}, "path"), el("dd", { class: "mono" }, n.path),
    el("dt", {}, "version"), el("dd", {}, n.version),
    el("dt", {}, "created"), el("dd", {}, "index " + n.created_index + at(n.created_at_ms)),
    el("dt", {}, "modified"), el("dd", {}, "index " + n.modified_index + at(n.modified_at_ms)),
    el("dt", {}, "owner"), el("dd", { class: "mono" }, n.ephemeral ? n.owner_handle + " (ephemeral)" : "persistent"),
    el("dt", {}, "children"), el("dd", {}, n.children_count));
  $("kv-node").replaceChildren(dl, el("pre", {}, n.value === "" ? "(empty value)" : n.value));
}

// ---- start ----

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", logout);
  showNodeHint();
  every(POLL_MS, pollHealth);
  every(POLL_MS, pollLocks);
  every(POLL_MS, pollElections);
  every(POLL_MS, pollSessions);
  every(METRICS_MS, pollMetrics);
  every(KV_MS, refreshKeys);
});
