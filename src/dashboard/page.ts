/**
 * The live dashboard (GET /-/dashboard): one self-contained HTML document with
 * inline CSS and JS, no build step, nothing loaded from elsewhere. It holds no
 * data: it asks for the admin secret (or takes it from `#token=…`), keeps it in
 * sessionStorage, opens the WebSocket /-/dashboard/live with the subprotocols
 * ["switchyard.v1", "auth.<base64url(secret)>"] and renders every DashboardFrame
 * (src/telemetry/types.ts) the Telemetry object pushes, about once a second.
 * Charts are inline SVG drawn by the script below. Everything from the frame is
 * put in the DOM as text nodes or attributes, never as HTML.
 */
import { SystemPath } from "../protocol/paths.ts";

const CSS = String.raw`
:root{--bg:#f5f6f8;--card:#fff;--fg:#1d2330;--muted:#6b7385;--line:#e3e6ec;--accent:#2f6fed;--accent2:#9b5de5;--ok:#1f9d55;--warn:#d08a00;--bad:#d64545;--bar:#e9edf3;color-scheme:light dark}
@media (prefers-color-scheme:dark){:root{--bg:#12151b;--card:#1b2029;--fg:#e4e8ef;--muted:#8e97a8;--line:#2c3340;--bar:#2a313d}}
*{box-sizing:border-box}[hidden]{display:none!important}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
.top{display:flex;align-items:center;gap:12px;padding:12px 24px;background:var(--card);border-bottom:1px solid var(--line);position:sticky;top:0;z-index:1}
h1{font-size:17px;margin:0;font-weight:650}h1 span{color:var(--muted);font-weight:400}
.conn{padding:2px 10px;border-radius:99px;font-size:12px;font-weight:600;background:var(--bar);color:var(--muted)}
.conn.live{background:#1f9d5522;color:var(--ok)}.conn.live::before{content:"● "}
.conn.reconnecting,.conn.stale{background:#d08a0022;color:var(--warn)}.conn.unauthorized{background:#d6454522;color:var(--bad)}
#detail,#summary{color:var(--muted);font-size:12px}#summary{margin-left:auto}
button{font:inherit;border:1px solid var(--line);background:var(--card);color:var(--fg);border-radius:6px;padding:4px 12px;cursor:pointer}
button.primary{background:var(--accent);border-color:var(--accent);color:#fff}
main{padding:20px 24px;max-width:1400px;margin:0 auto}
form{max-width:380px;margin:60px auto;background:var(--card);border:1px solid var(--line);border-radius:10px;padding:20px;display:grid;gap:10px}
form input{font:inherit;padding:7px 9px;border:1px solid var(--line);border-radius:6px;background:var(--bg);color:var(--fg)}
.err{color:var(--bad);margin:0;min-height:1.4em}.muted{color:var(--muted)}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:16px 18px;margin-bottom:18px}
.card>header{display:flex;align-items:baseline;flex-wrap:wrap;gap:10px;margin-bottom:12px}
.card h2{font-size:16px;margin:0}
code,.mono{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.pill{font-size:12px;padding:1px 8px;border-radius:99px;background:var(--bar);color:var(--muted)}
.totals{margin-left:auto;font-size:12px;color:var(--muted)}
.charts{display:grid;grid-template-columns:repeat(3,1fr);gap:14px;margin-bottom:12px}
figure{margin:0;border:1px solid var(--line);border-radius:8px;padding:8px 10px 6px}
figcaption{display:flex;justify-content:space-between;font-size:12px;color:var(--muted)}figcaption b{color:var(--fg);font-weight:600}
svg{display:block;width:100%;height:64px;margin:4px 0 2px}
svg path{fill:none;stroke:var(--c);stroke-width:1.6;vector-effect:non-scaling-stroke;stroke-linejoin:round}
svg .grid{stroke:var(--line);stroke-width:1;vector-effect:non-scaling-stroke}
svg path.dot{stroke-width:5;stroke-linecap:round}
svg path.area{stroke:none;fill:var(--c);opacity:.14}
.s0{--c:var(--accent)}.s1{--c:var(--accent2)}.s2{--c:var(--bad)}
.key{display:inline-block;width:8px;height:8px;border-radius:2px;margin:0 3px 0 8px;background:var(--c)}
.axis{display:flex;justify-content:space-between;font-size:11px;color:var(--muted)}
table{width:100%;border-collapse:collapse;table-layout:fixed}th:nth-child(1){width:26%}th:nth-child(2){width:11%}th:nth-child(3){width:20%}th:nth-child(4){width:9%}th:nth-child(6){width:12%}
td{overflow:hidden;text-overflow:ellipsis}
th{text-align:left;font-size:11px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);font-weight:600;padding:4px 8px;border-bottom:1px solid var(--line)}
td{padding:6px 8px;border-bottom:1px solid var(--line);vertical-align:middle}tr:last-child td{border-bottom:0}
.url{font-size:11px;color:var(--muted)}
.badge{font-size:11px;font-weight:600;padding:1px 8px;border-radius:99px}
.badge.ready{background:#1f9d5522;color:var(--ok)}.badge.draining{background:#d08a0022;color:var(--warn)}
.load{display:flex;align-items:center;gap:8px}.bar{width:110px;height:8px;border-radius:4px;background:var(--bar);overflow:hidden}
.bar i{display:block;height:100%;background:var(--ok)}.bar i.high{background:var(--warn)}.bar i.full{background:var(--bad)}
.chip{display:inline-block;font:11px ui-monospace,monospace;padding:1px 6px;margin:1px 4px 1px 0;border-radius:4px;background:var(--bar)}
.chip.loading{opacity:.45;font-style:italic}
@media (max-width:800px){.charts{grid-template-columns:1fr}.top{flex-wrap:wrap}}
`;

const JS = String.raw`
"use strict";
const KEY = "switchyard.adminSecret", WINDOW_MS = 5000, SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
let secret = null, ws = null, retry = 0, timer = 0, lastFrame = null, lastFrameAt = 0;

// Element builder: attributes via setAttribute, children as text nodes or elements (never HTML).
function h(tag, attrs, ...kids) {
  const el = ["svg", "path", "line"].includes(tag) ? document.createElementNS(SVG, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v === true ? "" : String(v));
  for (const kid of kids.flat(Infinity)) if (kid !== null && kid !== undefined && kid !== false) el.append(typeof kid === "object" ? kid : String(kid));
  return el;
}

// ---- secret and connection ----
function store(value) {
  secret = value;
  try { value === null ? sessionStorage.removeItem(KEY) : sessionStorage.setItem(KEY, value); } catch { /* storage off: memory only */ }
}
function b64url(s) {
  let bin = "";
  for (const b of new TextEncoder().encode(s)) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
function setConn(state, detail) {
  const c = $("conn");
  c.textContent = state;
  c.className = "conn " + state;
  $("detail").textContent = detail || "";
}
function showLogin(message) {
  $("login").hidden = false;
  $("login-msg").textContent = message || "";
  $("signout").hidden = true;
  $("secret").focus();
}
function connect() {
  clearTimeout(timer);
  if (!secret) return setConn("signed out"), showLogin("");
  $("login").hidden = true;
  $("signout").hidden = false;
  setConn("connecting");
  const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + location.pathname.replace(/\/+$/, "") + "/live";
  let sock;
  try {
    sock = new WebSocket(url, ["switchyard.v1", "auth." + b64url(secret)]);
  } catch (e) {
    return schedule(String(e));
  }
  ws = sock;
  let opened = false;
  sock.onopen = () => {
    opened = true;
    if (sock.protocol !== "switchyard.v1") sock.close(4002, "unsupported protocol");
  };
  sock.onmessage = (ev) => {
    let frame;
    try { frame = JSON.parse(ev.data); } catch { return; }
    if (!frame || frame.type !== "frame") return;
    retry = 0;
    lastFrame = frame;
    lastFrameAt = Date.now();
    setConn("live");
    if (!document.hidden) render(frame);
  };
  sock.onclose = (ev) => {
    if (ws !== sock) return;
    ws = null;
    if (ev.code === 4001) return refused();
    if (opened) return schedule("connection closed");
    // An upgrade refused with 401 looks like any failed connection (1006) to a page:
    // ask an admin endpoint whether the secret is the problem.
    fetch(${JSON.stringify(SystemPath.metrics)}, { headers: { authorization: "Bearer " + secret }, cache: "no-store" })
      .then((res) => (res.status === 401 ? refused() : schedule("cannot connect")))
      .catch(() => schedule("cannot connect"));
  };
}
function refused() {
  store(null);
  setConn("unauthorized");
  showLogin("The admin secret was refused.");
}
function schedule(why) {
  const delay = Math.min(15000, 500 * 2 ** retry) * (0.8 + Math.random() * 0.4);
  retry++;
  setConn("reconnecting", why + "; retrying in " + Math.ceil(delay / 1000) + " s");
  timer = setTimeout(connect, delay);
}
function disconnect() {
  clearTimeout(timer);
  const sock = ws;
  ws = null;
  if (sock) sock.close(1000, "signed out");
}

// ---- formatting ----
const fmtRate = (v) => (v >= 10 ? String(Math.round(v)) : v.toFixed(1));
const fmtMs = (v) => (v === null || v === undefined ? "–" : v >= 1000 ? (v / 1000).toFixed(2) + " s" : (v >= 10 ? Math.round(v) : v.toFixed(1)) + " ms");
const fmtInt = (v) => Number(v).toLocaleString("en-US");
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((m) => m >= v);
}

// ---- charts ----
// points: complete windows, oldest first; lines: [{key, label}] drawn over [at - span, at].
function chart(metric, title, value, points, lines, at, span, area, fmt) {
  const W = 300, H = 60;
  let max = 0;
  for (const p of points) for (const l of lines) if (p[l.key] !== null) max = Math.max(max, p[l.key]);
  const top = niceMax(max);
  const x = (t) => (((t + WINDOW_MS - (at - span)) / span) * W).toFixed(1);
  const y = (v) => (H - (v / top) * (H - 2) - 1).toFixed(1);
  const svg = h("svg", { viewBox: "0 0 " + W + " " + H, preserveAspectRatio: "none", role: "img", "aria-label": title },
    [0, H / 2, H].map((gy) => h("line", { class: "grid", x1: 0, x2: W, y1: gy, y2: gy })));
  lines.forEach((l, i) => {
    // Gaps (null: no requests) break the line; a point alone gets a dot.
    let d = "", dots = "", run = 0, xy = "";
    for (const p of points.concat({ t: at, [l.key]: null })) {
      if (p[l.key] === null) {
        if (run === 1) dots += "M" + xy + " h0.01 ";
        run = 0;
        continue;
      }
      xy = x(p.t) + " " + y(p[l.key]);
      d += (run++ ? "L" : "M") + xy + " ";
    }
    if (!d) return;
    const cls = "s" + (l.cls ?? i);
    if (area && points.length > 1) svg.append(h("path", { class: "area " + cls, d: d + "L" + x(points[points.length - 1].t) + " " + H + " L" + x(points[0].t) + " " + H + " Z" }));
    svg.append(h("path", { class: cls, d }));
    if (dots) svg.append(h("path", { class: "dot " + cls, d: dots }));
  });
  const lastPoint = points[points.length - 1];
  return h("figure", { "data-testid": "chart", "data-metric": metric, "data-points": points.length, "data-max": max, "data-last": lastPoint ? lastPoint[lines[0].key] : null },
    h("figcaption", null, h("span", null, title, lines.length > 1 ? lines.map((l, i) => [h("i", { class: "key s" + i }), l.label]) : null), h("b", null, value)),
    svg,
    h("div", { class: "axis" }, h("span", null, "−" + Math.round(span / 60000) + " min"), h("span", null, "max " + fmt(top)), h("span", null, "now")));
}

// ---- frame rendering ----
// regions: whether the table has a Region column (some replica of the deployment declared one).
function replicaRow(r, regions) {
  const ratio = r.max > 0 ? Math.min(1, r.ongoing / r.max) : 0;
  return h("tr", { "data-testid": "replica-row", "data-replica-id": r.id, "data-state": r.state },
    h("td", null, h("div", { class: "mono" }, r.id), h("div", { class: "url" }, r.url)),
    h("td", null, h("span", { class: "badge " + r.state, "data-testid": "replica-state" }, r.state)),
    h("td", null, h("div", { class: "load", title: r.ongoing + " ongoing of " + r.max },
      h("div", { class: "bar" }, h("i", { class: ratio >= 1 ? "full" : ratio >= 0.7 ? "high" : "", style: "width:" + (ratio * 100).toFixed(0) + "%" })),
      h("span", { class: "mono" }, r.ongoing + "/" + r.max))),
    h("td", { class: "mono" }, r.queued),
    h("td", null, r.models.map((m) => h("span", { class: "chip" }, m)),
      r.loading.map((m) => h("span", { class: "chip loading", title: "loading" }, m + "…")),
      r.models.length + r.loading.length === 0 ? h("span", { class: "muted" }, "–") : null),
    regions ? h("td", { class: "mono", "data-testid": "replica-region" }, r.region || h("span", { class: "muted" }, "–")) : null);
}

function card(d, at) {
  const series = d.series || [];
  const complete = series.filter((p) => p.t + WINDOW_MS <= at); // the current window is still filling
  // Zoom to the windows with data: at least 1 min, at most all the windows kept.
  const first = complete.find((p) => p.requestsPerSecond > 0 || p.p50Ms !== null);
  const span = Math.min(Math.max(60000, series.length * WINDOW_MS), Math.max(60000, first ? Math.ceil((at - first.t) / 60000) * 60000 : 0));
  const points = complete.filter((p) => p.t >= at - span);
  const last = points[points.length - 1] || { requestsPerSecond: 0, errorsPerSecond: 0, p50Ms: null, p99Ms: null };
  const ready = d.replicas.filter((r) => r.state === "ready").length;
  const regions = d.replicas.some((r) => r.region);
  const req = d.totals ? d.totals.requests : null;
  const total = req ? req["2xx"] + req["3xx"] + req["4xx"] + req["5xx"] : 0;
  return h("section", { class: "card", "data-testid": "deployment-card", "data-deployment": d.name, "data-requests": total },
    h("header", null,
      h("h2", null, d.name), h("code", null, d.routePrefix),
      h("span", { class: "pill", "data-testid": "replica-count" }, ready + " ready" + (d.replicas.length > ready ? " · " + (d.replicas.length - ready) + " draining" : "")),
      d.desiredReplicas !== null && d.desiredReplicas !== undefined ? h("span", { class: "pill", "data-testid": "desired" }, "desired " + d.desiredReplicas) : null,
      d.sessionBindings !== null && d.sessionBindings !== undefined ? h("span", { class: "pill" }, fmtInt(d.sessionBindings) + " sessions") : null,
      req ? h("span", { class: "totals" }, fmtInt(total) + " requests · 5xx " + fmtInt(req["5xx"]) + " · 4xx " + fmtInt(req["4xx"]) + " · retried " + fmtInt(d.totals.retries) + " · rejected " + fmtInt(d.totals.rejections)) : null),
    h("div", { class: "charts" },
      chart("rps", "Requests/s", fmtRate(last.requestsPerSecond), points, [{ key: "requestsPerSecond" }], at, span, true, fmtRate),
      chart("latency", "Latency", fmtMs(last.p50Ms) + " / " + fmtMs(last.p99Ms), points, [{ key: "p50Ms", label: "p50" }, { key: "p99Ms", label: "p99" }], at, span, false, fmtMs),
      chart("errors", "Errors/s (5xx)", fmtRate(last.errorsPerSecond), points, [{ key: "errorsPerSecond", cls: 2 }], at, span, true, fmtRate)),
    d.replicas.length === 0
      ? h("p", { class: "muted", "data-testid": "no-replicas" }, "No replicas registered.")
      : h("table", { "data-testid": "replicas" },
          h("thead", null, h("tr", null, ["Replica", "State", "Load (ongoing/max)", "Queued", "Models", ...(regions ? ["Region"] : [])].map((t) => h("th", null, t)))),
          h("tbody", null, d.replicas.map((r) => replicaRow(r, regions)))));
}

function render(f) {
  const replicas = f.deployments.reduce((n, d) => n + d.replicas.length, 0);
  $("summary").textContent = f.deployments.length + " deployments · " + replicas + " replicas · frame " + new Date(f.at).toLocaleTimeString();
  $("deployments").replaceChildren(...f.deployments.map((d) => card(d, f.at)));
  $("empty").hidden = f.deployments.length > 0;
}

// ---- start ----
$("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const v = $("secret").value;
  if (!v) return;
  $("secret").value = "";
  store(v);
  retry = 0;
  connect();
});
$("signout").addEventListener("click", () => {
  disconnect();
  store(null);
  lastFrame = null;
  $("deployments").replaceChildren();
  $("summary").textContent = "";
  setConn("signed out");
  showLogin("");
});
document.addEventListener("visibilitychange", () => { if (!document.hidden && lastFrame) render(lastFrame); });
addEventListener("online", () => { if (secret && !ws) { retry = 0; connect(); } });
setInterval(() => {
  if (!ws || ws.readyState !== WebSocket.OPEN || !lastFrameAt) return;
  const age = Date.now() - lastFrameAt;
  if (age > 15000) ws.close(4000, "no frames");
  else if (age > 4000) setConn("stale", "no update for " + Math.round(age / 1000) + " s");
}, 1000);

const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
if (m) {
  store(decodeURIComponent(m[1]));
  history.replaceState(null, "", location.pathname + location.search); // keep the secret out of the address bar
} else {
  try { secret = sessionStorage.getItem(KEY); } catch { secret = null; }
}
connect();
`;

/** The dashboard's HTML (static: the same for every request). */
export function dashboardPage(): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Switchyard dashboard</title>
<link rel="icon" href="data:,">
<style>${CSS}</style>
</head>
<body>
<header class="top">
<h1>Switchyard <span>dashboard</span></h1>
<span id="conn" class="conn" data-testid="connection">connecting</span>
<span id="detail"></span>
<span id="summary" data-testid="summary"></span>
<button id="signout" type="button" hidden>Sign out</button>
</header>
<main>
<noscript><p>The dashboard needs JavaScript.</p></noscript>
<form id="login" hidden>
<strong>Admin secret</strong>
<span class="muted">The value of SWITCHYARD_ADMIN_SECRET. Kept in this tab only (sessionStorage).</span>
<input id="secret" type="password" autocomplete="current-password" aria-label="Admin secret">
<button class="primary">Connect</button>
<p id="login-msg" class="err" role="alert"></p>
</form>
<p id="empty" class="muted" hidden>No deployments.</p>
<div id="deployments"></div>
</main>
<script>${JS}</script>
</body>
</html>
`;
}
