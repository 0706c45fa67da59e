"""The web page the service serves at ``/``: static HTML and one script (no inline code,
so the Content-Security-Policy can forbid it). Every value is inserted with textContent."""

PAGE_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>dpsql</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #bbb;padding:.2em .5em}
textarea{width:100%;font-family:monospace}.err{color:#a00}.hidden{display:none}
</style></head>
<body>
<h1>dpsql</h1>
<form id="login"><label>User <input id="user" autocomplete="username"></label>
<label>Password <input id="password" type="password" autocomplete="current-password"></label>
<button id="login-button" type="submit">Sign in</button></form>
<p id="message" class="err"></p>
<section id="analyst" class="hidden">
  <h2>Your budget</h2><table id="budget"></table>
  <h2>Ask</h2>
  <label>Dataset <select id="dataset"></select></label>
  <label>ε <input id="epsilon" size="6" placeholder="default"></label><br>
  <textarea id="sql" rows="4">SELECT COUNT(*) AS n FROM visits</textarea><br>
  <button id="explain-button" type="button">Explain (spends nothing)</button>
  <button id="run-button" type="button">Run (spends ε)</button>
  <pre id="plan"></pre>
  <table id="result"></table>
  <h2>Tables</h2>
  <p>Columns: the bounds values are clamped to and the public values of GROUP BY keys.</p>
  <table id="columns"></table>
  <p>Contribution bounds: at most this many groups of a GROUP BY and rows in each (and rows
  in all) count of one person; rows beyond are dropped before the noise.</p>
  <table id="bounds"></table>
  <h2>Your releases</h2><table id="history"></table>
</section>
<section id="owner" class="hidden">
  <h2>Datasets</h2><table id="datasets"></table>
  <h2>Analysts' spend</h2><table id="spend"></table>
  <h2>Refusals</h2><table id="refusals"></table>
</section>
<script src="/app.js"></script>
</body></html>
"""

APP_JS = r"""
"use strict";
let auth = null;
const $ = (id) => document.getElementById(id);

async function api(path, body) {
  const init = {headers: {"Authorization": auth, "X-Dpsql-Client": "web"}};
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = await response.json();
  if (!response.ok) { throw data; }
  return data;
}

function fill(table, header, rows) {
  table.replaceChildren();
  const head = table.insertRow();
  for (const h of header) { const th = document.createElement("th"); th.textContent = h; head.appendChild(th); }
  for (const row of rows) {
    const tr = table.insertRow();
    for (const v of row) {
      const td = tr.insertCell();
      td.textContent = (v === null || v === undefined) ? "" :
        (typeof v === "object" ? JSON.stringify(v) : String(v));
    }
  }
}

function showError(e) { $("message").textContent = (e.error || String(e)) + (e.hint ? " — " + e.hint : ""); }

async function showCatalogue() {
  const catalogue = await api("/api/v1/catalogue");
  const columns = [], bounds = [];
  for (const [d, c] of Object.entries(catalogue)) {
    for (const [t, spec] of Object.entries(c.tables)) {
      for (const [name, col] of Object.entries(spec.columns)) {
        columns.push([d, t, name, col.type, spec.public ? "public" : "private",
                      col.lower, col.upper, col.values ? col.values.join(", ") : ""]);
      }
      if (spec.public) { continue; }
      const total = spec.max_rows_per_unit;
      bounds.push([d, t, "other statements", spec.max_groups_per_unit, spec.max_rows_per_group,
                   total]);
      for (const entry of spec.key_bounds || []) {
        bounds.push([d, t, "GROUP BY " + entry.columns.join(", "), entry.max_groups_per_unit,
                     entry.max_rows_per_group, total]);
      }
    }
  }
  fill($("columns"), ["dataset", "table", "column", "type", "kind", "lower", "upper", "values"],
       columns);
  fill($("bounds"), ["dataset", "table", "applies to", "max_groups_per_unit", "max_rows_per_group",
                     "max_rows_per_unit"], bounds);
}

async function refreshAnalyst() {
  const budget = await api("/api/v1/budget");
  fill($("budget"), ["dataset", "ε budget", "ε spent", "ε remaining"],
       Object.entries(budget).map(([d, b]) => [d, b.budget.epsilon, b.spent.epsilon, b.remaining.epsilon]));
  const history = await api("/api/v1/history");
  fill($("history"), ["when", "dataset", "via", "action", "statement", "ε", "outcome", "answer"],
       history.map((h) => [new Date(h.time * 1000).toISOString(), h.dataset, h.interface, h.action,
                           h.statement, h.epsilon, h.outcome + (h.code ? " (" + h.code + ")" : ""),
                           h.answer ? h.answer.rows : ""]));
}

function request() {
  const body = {sql: $("sql").value};
  const eps = $("epsilon").value.trim();
  if (eps) {
    // Number("0,02") is NaN, which JSON sends as null: refuse here instead
    const value = Number(eps);
    if (!Number.isFinite(value) || value <= 0) {
      throw {error: "ε must be a number above 0, such as 0.02 (with a point), not " +
                    JSON.stringify(eps), hint: "or leave it empty for your default"};
    }
    body.epsilon = value;
  }
  return body;
}
const datasetPath = (what) => "/api/v1/datasets/" + encodeURIComponent($("dataset").value) + "/" + what;

async function explain() {
  $("message").textContent = "";
  try {
    const plan = await api(datasetPath("explain"), request());
    $("plan").textContent = "ε " + plan.epsilon + (plan.fits_budget ? " (fits your budget)" : " (does NOT fit your budget)") +
      "\n" + plan.statements.map((s) => (s.aggregates || []).map((a) =>
        a.aggregate + ": " + a.mechanism + ", scale " + a.scale + ", ±" + a.ci95_half_width + " (95%)").join("\n")).join("\n");
  } catch (e) { showError(e); }
}

async function run() {
  $("message").textContent = "";
  try {
    const answer = await api(datasetPath("query"), request());
    fill($("result"), answer.columns.map((c) => c.name), answer.rows);
    $("plan").textContent = "released: ε " + answer.epsilon_spent + (answer.reused ? " (stored answer reused)" : "") +
      "; remaining ε " + answer.budget_remaining.epsilon +
      answer.notes.map((note) => "\nnote: " + note).join("");
  } catch (e) { showError(e); }
  await refreshAnalyst();
}

async function refreshOwner() {
  const o = await api("/api/v1/admin/overview");
  // unlisted: charged under no analyst of the configuration (the custodian's tools on the
  // server's ledger, analysts since removed)
  fill($("datasets"), ["dataset", "ε total", "ε spent", "of which unlisted"],
       Object.entries(o.datasets).map(([d, v]) => [d, v.budget ? v.budget.epsilon : "none",
                                                   v.spent.epsilon, v.unlisted_spent.epsilon]));
  const spend = [];
  for (const [d, v] of Object.entries(o.datasets)) {
    for (const [a, s] of Object.entries(v.analysts)) { spend.push([d, a, s.budget.epsilon, s.spent.epsilon]); }
  }
  fill($("spend"), ["dataset", "analyst", "ε share", "ε spent"], spend);
  fill($("refusals"), ["when", "analyst", "dataset", "via", "action", "code"],
       o.refusals.map((r) => [new Date(r.time * 1000).toISOString(), r.analyst, r.dataset, r.interface, r.action, r.code]));
}

$("login").addEventListener("submit", async (event) => {
  event.preventDefault();
  auth = "Basic " + btoa(unescape(encodeURIComponent($("user").value + ":" + $("password").value)));
  $("message").textContent = "";
  try {
    const me = await api("/api/v1/me");
    $("login").classList.add("hidden");
    if (me.role === "owner") {
      $("owner").classList.remove("hidden");
      await refreshOwner();
    } else {
      $("analyst").classList.remove("hidden");
      for (const d of me.datasets) { const o = document.createElement("option"); o.textContent = d; $("dataset").appendChild(o); }
      await refreshAnalyst();
      await showCatalogue();
    }
    document.body.dataset.ready = "1";
  } catch (e) { auth = null; showError(e); }
});
$("explain-button").addEventListener("click", explain);
$("run-button").addEventListener("click", run);
"""
