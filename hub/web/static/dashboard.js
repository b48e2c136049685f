// rshub dashboard: polls the overview every 2 s, tails a topic over server-sent events.
// The operator token (when the hub has tokens) lives in sessionStorage and is only ever
// sent as an Authorization header, never in a URL.
"use strict";

const TOKEN_KEY = "rshub-operator-token";
const POLL_MS = 2000;
const TAIL_MAX = 200;
const previous = new Map(); // topic -> {published, at}
let tail = null;

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: "Bearer " + token } : {};
}

function ago(ms) {
  if (!ms) return "never";
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return s.toFixed(0) + " s ago";
  if (s < 3600) return (s / 60).toFixed(0) + " min ago";
  return (s / 3600).toFixed(1) + " h ago";
}

function fillRows(tbody, rows, columns, emptyText) {
  tbody.replaceChildren();
  if (!rows.length) {
    const tr = el("tr");
    const td = el("td", emptyText, "empty");
    td.colSpan = columns;
    tr.append(td);
    tbody.append(tr);
  }
  for (const cells of rows) {
    const tr = el("tr");
    for (const cell of cells) tr.append(cell);
    tbody.append(tr);
  }
}

// Per topic, over every hub process: "2 WS · 1 SSE · 3 WebSub (1 suspended)".
function presenceText(p) {
  if (!p) return "";
  const websub = Object.values(p.websub || {}).reduce((a, b) => a + b, 0);
  const parked = Object.entries(p.websub || {}).filter(([s, n]) => s !== "active" && n > 0);
  const notes = parked.map(([s, n]) => n + " " + s).join(", ");
  return p.ws + " WS · " + p.sse + " SSE · " + websub + " WebSub" + (notes ? " (" + notes + ")" : "");
}

function renderTopics(topics, now, presence) {
  const names = $("topic-names");
  names.replaceChildren(...topics.map((t) => { const o = el("option"); o.value = t.name; return o; }));
  const rows = topics.map((t) => {
    const before = previous.get(t.name);
    let rate = "…";
    if (before && now > before.at) rate = ((t.published - before.published) * 1000 / (now - before.at)).toFixed(1);
    previous.set(t.name, { published: t.published, at: now });
    const button = el("button", "tail");
    button.type = "button";
    button.addEventListener("click", () => { $("tail-topic").value = t.name; startTail(t.name); });
    const action = el("td");
    action.append(button);
    return [el("td", t.name), el("td", rate, "num"), el("td", t.length, "num"),
      el("td", t.published, "num"), el("td", ago(t.last_publish_ms)),
      el("td", presenceText(presence[t.name])), action];
  });
  fillRows($("topics").tBodies[0], rows, 7, "no topics yet");
}

function renderSubscriptions(subs) {
  const rows = subs.map((s) => {
    const state = el("td");
    state.append(el("span", s.state, "state-" + s.state));
    // The id is what `rshub inspect --id` and `rshub dead-letters --id` take.
    return [el("td", s.topic), el("td", s.id, "id"), el("td", s.callback), state,
      el("td", (s.lag_capped ? "≥" : "") + s.lag_events, "num"),
      el("td", s.lag_seconds.toFixed(1), "num"), el("td", s.failures, "num"),
      el("td", s.last_error || "", s.last_error ? "bad" : "")];
  });
  fillRows($("subs").tBodies[0], rows, 8, "no subscriptions");
}

async function refreshHealth() {
  const pill = $("health");
  try {
    // Details (Redis) only for operators: the same token as the overview.
    const resp = await fetch("healthz", { headers: authHeaders(), cache: "no-store" });
    const body = await resp.json();
    pill.textContent = "health: " + body.status + (body.redis ? " (redis " + body.redis + ")" : "");
    pill.className = "pill " + (resp.ok ? "ok" : "bad");
  } catch (err) {
    pill.textContent = "health: hub unreachable";
    pill.className = "pill bad";
  }
}

async function refreshOverview() {
  let resp;
  try {
    resp = await fetch("admin/overview.json", { headers: authHeaders(), cache: "no-store" });
  } catch (err) {
    $("updated").textContent = "overview unavailable";
    return;
  }
  if (resp.status === 401 || resp.status === 403) {
    $("login").hidden = false;
    const body = await resp.json().catch(() => ({}));
    if (sessionStorage.getItem(TOKEN_KEY)) $("login-error").textContent = body.error || "token refused";
    return;
  }
  if (!resp.ok) {
    $("updated").textContent = "overview: HTTP " + resp.status;
    return;
  }
  $("login").hidden = true;
  const data = await resp.json();
  const now = Date.now();
  renderTopics(data.topics, now, data.presence || {});
  renderSubscriptions(data.subscriptions);
  const c = data.clients || {};
  $("clients").textContent = "clients: " + (c.ws || 0) + " WebSocket, " + (c.sse || 0) + " SSE";
  $("updated").textContent = "updated " + new Date(now).toLocaleTimeString() + " · v" + data.version;
}

function stopTail() {
  if (tail) tail.close();
  tail = null;
  $("tail-state").textContent = "not tailing";
}

function startTail(topic) {
  stopTail();
  if (!topic) return;
  const list = $("tail");
  list.replaceChildren();
  // Streams need no token; EventSource could not send one in a header anyway.
  tail = new EventSource("topics/" + encodeURIComponent(topic) + "/events");
  $("tail-state").textContent = "connecting to " + topic + " …";
  tail.onopen = () => { $("tail-state").textContent = "tailing " + topic; };
  tail.onerror = () => { $("tail-state").textContent = "reconnecting to " + topic + " …"; };
  tail.onmessage = (msg) => {
    let text = msg.data;
    try {
      const e = JSON.parse(msg.data);
      text = e.id + "  " + (e.change || "") + "  " + (e.loc || "") + (e.lastmod ? "  " + e.lastmod : "");
    } catch (err) { /* show the raw data */ }
    const item = el("li", text, "new");
    list.prepend(item);
    setTimeout(() => item.classList.remove("new"), 1500);
    while (list.children.length > TAIL_MAX) list.lastChild.remove();
  };
}

$("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  $("login-error").textContent = "";
  refreshOverview();
});
$("tail-form").addEventListener("submit", (ev) => { ev.preventDefault(); startTail($("tail-topic").value.trim()); });
$("tail-stop").addEventListener("click", stopTail);

function tick() { refreshHealth(); refreshOverview(); }
tick();
setInterval(tick, POLL_MS);
