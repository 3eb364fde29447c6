// The page's loop: ask for the token once (kept in this browser's localStorage), then every
// REFRESH_MS read the API and redraw. A 401 brings the token form back with the service's
// reason; any other failure shows in a banner or in the panel it concerns, and the next
// refresh tries again.

import { Api, ApiError } from "./api.js";
import { drawChart, PALETTE } from "./chart.js";
import * as fmt from "./format.js";
import * as metric from "./metrics.js";
import * as render from "./render.js";

const REFRESH_MS = 2000;
const TOKEN_KEY = "warehouse-loader.token";
const PREFS_KEY = "warehouse-loader.prefs";
const $ = (id) => document.getElementById(id);

const saved = JSON.parse(localStorage.getItem(PREFS_KEY) || "{}");
const state = {
  api: null,
  timer: null,
  running: false,
  paused: false,
  sort: saved.sort === "name" ? "name" : "staleness",
  limit: [25, 50, 100, 200].includes(saved.limit) ? saved.limit : 50,
  cursors: [null], // the cursor of each page visited; the last is the page shown
  nextCursor: null,
  chartTables: [5, 10, 20].includes(saved.chartTables) ? saved.chartTables : 10,
  windowSeconds: [300, 600, 1800, 3600].includes(saved.windowSeconds) ? saved.windowSeconds : 600,
  selected: null,
  counters: new metric.CounterHistory(),
  colors: new Map(),
  lastSuccess: null,
  page: null,
  // Set by the first 403 of an operator-only call: the token is a producer's, so those
  // calls are not made again until the token changes (their panels say why).
  notOperator: null,
};

function savePrefs() {
  const { sort, limit, chartTables, windowSeconds } = state;
  localStorage.setItem(PREFS_KEY, JSON.stringify({ sort, limit, chartTables, windowSeconds }));
}

// -- the token ---------------------------------------------------------------------------

function askForToken(reason) {
  stop();
  state.api = null;
  $("token-reason").textContent = reason || "";
  $("token-reason").hidden = !reason;
  $("connection").textContent = "not connected";
  const dialog = $("token-dialog");
  if (!dialog.open) dialog.showModal();
  $("token-input").focus();
}

async function submitToken(event) {
  event.preventDefault();
  const token = $("token-input").value.trim();
  if (!token) {
    $("token-reason").textContent = "Enter the operator token (auth_tokens in the config, or data/tokens.json).";
    $("token-reason").hidden = false;
    return;
  }
  const api = new Api(token);
  $("token-submit").disabled = true;
  try {
    await api.get("v1/tables", { limit: 1 });
  } catch (error) {
    $("token-reason").textContent = error.unauthorized ? `The service refused this token: ${error.message}` : error.message;
    $("token-reason").hidden = false;
    return;
  } finally {
    $("token-submit").disabled = false;
  }
  localStorage.setItem(TOKEN_KEY, token);
  $("token-input").value = "";
  $("token-dialog").close();
  start(api);
}

function forgetToken() {
  localStorage.removeItem(TOKEN_KEY);
  askForToken("Token forgotten: this browser no longer keeps it.");
}

// -- the loop ------------------------------------------------------------------------------

function start(api) {
  state.api = api;
  state.notOperator = null;
  state.paused = false;
  $("pause").textContent = "Pause";
  refresh();
}

function stop() {
  clearTimeout(state.timer);
  state.timer = null;
}

function schedule(delay) {
  stop();
  if (!state.paused && state.api) state.timer = setTimeout(refresh, delay);
}

/** Settle a call: its value, or the ApiError it failed with. */
async function settle(promise) {
  try {
    return { value: await promise };
  } catch (error) {
    return { error: error instanceof ApiError ? error : new ApiError(-1, "page", String(error)) };
  }
}

async function refresh() {
  if (state.running || !state.api) return;
  state.running = true;
  const started = performance.now();
  const api = state.api;
  try {
    const cursor = state.cursors[state.cursors.length - 1];
    const operator = (call) => (state.notOperator ? { error: state.notOperator } : settle(call()));
    const [ready, page, history, metrics, pending, quarantine, views] = await Promise.all([
      settle(api.get("readyz", {}, { accept: [503] })),
      settle(api.get("v1/tables", { limit: state.limit, sort: state.sort, cursor })),
      settle(api.get("v1/tables:history", { stalest: state.chartTables, seconds: state.windowSeconds, points: 600 })),
      settle(api.get("metrics", { names: metric.FAMILIES.join(",") }, { text: true })),
      operator(() => api.get("v1/admin/pending")),
      operator(() => api.get("v1/admin/quarantine")),
      operator(() => viewsWithDetails(api)),
    ]);
    const all = [ready, page, history, metrics, pending, quarantine, views];
    const forbidden = [pending, quarantine, views].find((r) => r.error && r.error.forbidden);
    if (forbidden && api === state.api) state.notOperator = forbidden.error;
    const refused = all.find((r) => r.error && r.error.unauthorized);
    if (refused) {
      localStorage.removeItem(TOKEN_KEY);
      askForToken(`The service refused the token: ${refused.error.message}`);
      return;
    }
    let detail = null;
    if (state.selected) detail = await settle(tableWithHistory(api, state.selected));
    draw({ ready, page, history, metrics, pending, quarantine, views, detail });
  } finally {
    state.running = false;
    schedule(Math.max(250, REFRESH_MS - (performance.now() - started)));
  }
}

async function viewsWithDetails(api) {
  const list = await api.get("v1/admin/views");
  const details = new Map();
  await Promise.all(
    list.views.slice(0, 50).map(async (name) => {
      const answer = await settle(api.get(`v1/admin/views/${encodeURIComponent(name)}`));
      details.set(name, answer.error ? { error: answer.error } : answer.value);
    }),
  );
  return { list, details };
}

async function tableWithHistory(api, name) {
  const path = `v1/tables/${encodeURIComponent(name)}`;
  const [table, history] = await Promise.all([
    api.get(path),
    api.get("v1/tables:history", { tables: name, seconds: state.windowSeconds, points: 600 }),
  ]);
  return { table, history };
}

// -- drawing -------------------------------------------------------------------------------

function colorOf(name, shown) {
  let color = state.colors.get(name);
  const taken = new Set([...shown].filter((n) => n !== name).map((n) => state.colors.get(n)));
  if (!color || taken.has(color)) {
    color = PALETTE.find((c) => !taken.has(c)) || PALETTE[state.colors.size % PALETTE.length];
    state.colors.set(name, color);
  }
  return color;
}

function draw({ ready, page, history, metrics, pending, quarantine, views, detail }) {
  const now = Date.now() / 1000;
  const samples = metrics.value ? metric.parse(metrics.value) : null;
  if (samples) state.counters.add(now, samples);
  const failed = [ready, page, history, metrics, pending, quarantine, views].filter((r) => r.error);
  const unreachable = failed.find((r) => r.error.unreachable);

  // Banners: the service's state first, then what could not be read.
  const banners = [];
  if (unreachable) {
    const since = state.lastSuccess ? `; the figures below are from ${fmt.clock(state.lastSuccess)}` : "";
    banners.push(render.banner("bad", "Service unreachable.", `${unreachable.error.message}, retrying every ${REFRESH_MS / 1000} s${since}.`));
  }
  if (ready.value && !ready.value.ready) {
    const why = ready.value.detail || "recovering the write-ahead log or starting Spark";
    banners.push(render.banner("warn", "Not ready:", `${why}. Loads start once it is; intake ${ready.value.accepting ? "is open" : "is closed"}.`));
  }
  for (const [what, text] of Object.entries((ready.value && ready.value.faults) || {})) {
    banners.push(render.banner("bad", `Fault (${what}):`, text));
  }
  for (const [name, result] of [["table list", page], ["staleness history", history], ["metrics", metrics]]) {
    if (result.error && !result.error.unreachable) banners.push(render.banner("bad", `Could not read the ${name}:`, result.error.message));
  }
  $("banner").replaceChildren(...banners);
  document.body.classList.toggle("stale", Boolean(unreachable));
  if (!unreachable) state.lastSuccess = now;
  $("connection").textContent = unreachable ? "unreachable" : `updated ${fmt.clock(now)}`;
  $("connection").className = unreachable ? "connection bad" : "connection";

  if (unreachable) $("chips").replaceChildren(render.unreachableChip());
  else if (ready.value || samples) $("chips").replaceChildren(...render.chips(ready.value, samples, metric));
  if (samples || page.value) {
    $("kpis").replaceChildren(
      ...render.kpis({
        samples,
        metric,
        counters: state.counters,
        page: page.value,
        pending: pending.value,
        windowSeconds: 300,
      }),
    );
  }
  if (history.value) drawStalest(history.value);
  if (page.value) drawTables(page.value);
  else if (page.error && !page.error.unreachable) $("tables-body").replaceChildren();
  if (pending.value) $("pending").replaceChildren(...render.pendingStore(pending.value, samples, metric));
  else if (!pending.error.unreachable) $("pending").replaceChildren(render.failure(pending.error));
  if (page.value) $("latest").replaceChildren(render.latestTables(page.value.tables));
  if (views.value) {
    $("views").replaceChildren(render.views(views.value.list, views.value.details));
    $("views-count").textContent = views.value.list.views.length ? String(views.value.list.views.length) : "";
  } else if (!views.error.unreachable) $("views").replaceChildren(render.failure(views.error));
  if (quarantine.value) {
    $("quarantine").replaceChildren(render.quarantine(quarantine.value.batches, now));
    const n = quarantine.value.batches.length;
    $("quarantine-count").textContent = n ? String(n) : "";
    $("quarantine-card").classList.toggle("alert", n > 0);
  } else if (!quarantine.error.unreachable) $("quarantine").replaceChildren(render.failure(quarantine.error));
  drawDetail(detail, now);
}

function drawStalest(history) {
  const shown = history.tables.map((t) => t.name);
  const lines = history.tables.map((t) => ({ name: t.name, color: colorOf(t.name, shown), points: t.points }));
  drawChart($("chart"), {
    since: history.since,
    now: history.now,
    lines,
    empty: "No tables yet: register one (POST /v1/admin/tables).",
  });
  $("legend").replaceChildren(
    ...history.tables.map((t, i) => {
      const swatch = render.h("span", { class: "swatch" });
      swatch.style.backgroundColor = lines[i].color;
      return render.h(
        "button",
        { type: "button", class: "legend-item", title: `${t.loads} loads in the window; click for details`, onclick: () => select(t.name) },
        swatch,
        render.h("span", { class: "legend-name" }, t.name),
        render.h("span", { class: "num" }, fmt.seconds(t.staleness_seconds)),
      );
    }),
  );
}

function drawTables(page) {
  state.page = page;
  state.nextCursor = page.next_cursor;
  const first = (state.cursors.length - 1) * state.limit;
  $("tables-body").replaceChildren(...render.tableRows(page.tables, state.selected, select));
  const shown = page.tables.length;
  $("page-info").textContent = shown
    ? `${fmt.count(first + 1)}\u2013${fmt.count(first + shown)} of ${fmt.count(page.total)}`
    : `0 of ${fmt.count(page.total)}`;
  $("prev").disabled = state.cursors.length <= 1;
  $("next").disabled = !page.next_cursor;
  for (const th of document.querySelectorAll("#tables thead th[data-sort]")) {
    th.classList.toggle("sorted", th.dataset.sort === state.sort);
  }
  for (const button of document.querySelectorAll("#sort button")) {
    button.setAttribute("aria-pressed", String(button.dataset.sort === state.sort));
  }
}

function drawDetail(detail, now) {
  const card = $("detail-card");
  if (!state.selected) {
    card.hidden = true;
    return;
  }
  card.hidden = false;
  $("detail-name").textContent = state.selected;
  if (!detail) return;
  if (detail.error) {
    $("detail").replaceChildren(render.failure(detail.error));
    return;
  }
  const { table, history } = detail.value;
  const line = history.tables[0];
  const chart = render.h("div", { class: "chart small" });
  $("detail").replaceChildren(render.h("div", { class: "detail-facts" }, ...render.tableDetail(table, now)), chart);
  drawChart(chart, {
    since: history.since,
    now: history.now,
    lines: line ? [{ name: line.name, color: colorOf(line.name, [line.name]), points: line.points }] : [],
    height: 200,
  });
}

// -- controls ------------------------------------------------------------------------------

function select(name) {
  state.selected = state.selected === name ? null : name;
  $("detail").replaceChildren(render.h("p", { class: "note" }, "Loading\u2026"));
  if (state.page) drawTables(state.page);
  drawDetail(null, Date.now() / 1000);
  if (state.selected) $("detail-card").scrollIntoView({ behavior: "smooth", block: "nearest" });
  refreshSoon();
}

function refreshSoon() {
  if (state.api && !state.paused) schedule(0);
}

function setSort(sort) {
  if (sort === state.sort) return;
  state.sort = sort;
  state.cursors = [null];
  savePrefs();
  refreshSoon();
}

function wire() {
  $("token-form").addEventListener("submit", submitToken);
  $("token-dialog").addEventListener("cancel", (event) => {
    if (!state.api) event.preventDefault(); // nothing to show without a token
  });
  $("token-button").addEventListener("click", forgetToken);
  $("pause").addEventListener("click", () => {
    state.paused = !state.paused;
    $("pause").textContent = state.paused ? "Resume" : "Pause";
    $("connection").textContent = state.paused ? "paused" : $("connection").textContent;
    if (state.paused) stop();
    else refreshSoon();
  });
  for (const button of document.querySelectorAll("#sort button")) {
    button.addEventListener("click", () => setSort(button.dataset.sort));
  }
  for (const th of document.querySelectorAll("#tables thead th[data-sort]")) {
    th.addEventListener("click", () => setSort(th.dataset.sort));
  }
  $("prev").addEventListener("click", () => {
    if (state.cursors.length > 1) state.cursors.pop();
    refreshSoon();
  });
  $("next").addEventListener("click", () => {
    if (state.nextCursor) state.cursors.push(state.nextCursor);
    refreshSoon();
  });
  const limit = $("limit");
  limit.value = String(state.limit);
  limit.addEventListener("change", () => {
    state.limit = Number(limit.value);
    state.cursors = [null];
    savePrefs();
    refreshSoon();
  });
  const chartTables = $("chart-tables");
  chartTables.value = String(state.chartTables);
  chartTables.addEventListener("change", () => {
    state.chartTables = Number(chartTables.value);
    savePrefs();
    refreshSoon();
  });
  const windowSelect = $("window");
  windowSelect.value = String(state.windowSeconds);
  windowSelect.addEventListener("change", () => {
    state.windowSeconds = Number(windowSelect.value);
    savePrefs();
    refreshSoon();
  });
  $("detail-close").addEventListener("click", () => select(state.selected));
  $("host").textContent = location.host;
}

wire();
const token = localStorage.getItem(TOKEN_KEY);
if (token) start(new Api(token));
else askForToken("");
