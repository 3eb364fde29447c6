// The page's sections drawn from the API's answers. Every value goes into the DOM as text
// (textContent, never HTML): table names and error messages come from outside, and the
// page holds the operator's token.

import * as fmt from "./format.js";

/** An element: h("td", {class: "num", title: "..."}, "text", child, ...). */
export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") element.className = value;
    else if (name === "dataset") Object.assign(element.dataset, value);
    else if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

/** What a panel shows instead of its figures when its call failed. */
export function failure(error) {
  if (error && error.forbidden) {
    return h("p", { class: "note warn" }, "Needs an operator token: ", error.message);
  }
  return h("p", { class: "note bad" }, error ? error.message : "failed");
}

function badge(text, kind = "") {
  return h("span", { class: `badge ${kind}`.trim() }, text);
}

function dl(rows) {
  return h(
    "dl",
    { class: "facts" },
    rows.filter(Boolean).map(([term, value, title, kind]) => [
      h("dt", {}, term),
      h("dd", { title, class: kind || null }, value),
    ]),
  );
}

/** A horizontal bar of part/whole, with its caption. */
function meter(part, whole, label) {
  const share = whole > 0 ? Math.min(1, part / whole) : 0;
  const fill = h("span", { class: `meter-fill ${share >= 0.8 ? "bad" : share >= 0.5 ? "warn" : ""}` });
  fill.style.width = `${(share * 100).toFixed(1)}%`;
  return h("div", { class: "meter-row" }, h("div", { class: "meter" }, fill), h("div", { class: "meter-label" }, label));
}

// -- header and banners ------------------------------------------------------------------

export function chips(ready, samples, metric) {
  const list = [];
  if (ready) {
    list.push(chip(ready.ready ? "Ready" : "Not ready", ready.ready ? "good" : "bad", ready.detail || ""));
    list.push(chip(ready.accepting ? "Intake open" : "Intake closed", ready.accepting ? "good" : "bad"));
    const spark = ready.faults && ready.faults.spark;
    const reachable = samples ? metric.value(samples, "loader_spark_reachable") : null;
    const sparkOk = !spark && reachable !== 0;
    list.push(chip(sparkOk ? "Spark reachable" : "Spark unreachable", sparkOk ? "good" : "bad", spark || ""));
    if (ready.writer) list.push(chip(`Writer ${ready.writer}`, ""));
  }
  if (samples) {
    const policy = metric.labels(samples, "loader_policy_info");
    if (policy) list.push(chip(`Policy ${policy.policy}`, ""));
    const workers = metric.value(samples, "loader_workers");
    const busy = metric.value(samples, "loader_workers_busy");
    const processes = metric.value(samples, "loader_load_processes");
    if (workers !== null) {
      const title = processes !== null ? `${fmt.count(processes)} load worker processes running` : "";
      list.push(chip(`Workers ${fmt.count(busy)}/${fmt.count(workers)} busy`, busy >= workers ? "warn" : "", title));
    }
  }
  return list;
}

export function unreachableChip() {
  return chip("Unreachable", "bad", "The last refresh could not reach the service");
}

function chip(text, kind, title = "") {
  return h("span", { class: `chip ${kind}`.trim(), title: title || null }, h("span", { class: "dot" }), text);
}

export function banner(kind, title, text) {
  return h("div", { class: `banner ${kind}` }, h("strong", {}, title), text ? ` ${text}` : "");
}

// -- the figures across tables -------------------------------------------------------------

function kpi(title, value, sub, opts = {}) {
  return h(
    "div",
    { class: `kpi ${opts.kind || ""}`.trim(), title: opts.title || null },
    h("div", { class: "kpi-title" }, title),
    h("div", { class: "kpi-value num" }, value),
    h("div", { class: "kpi-sub" }, sub),
  );
}

export function kpis({ samples, metric, counters, page, pending, windowSeconds }) {
  const cards = [];
  const v = (name, match) => (samples ? metric.value(samples, name, match) : null);
  const tables = v("loader_tables");
  cards.push(
    kpi("Tables", fmt.count(tables ?? (page ? page.total : null)), page ? `${fmt.count(page.total)} visible to this token` : ""),
  );
  const stalest = samples ? (samples.get("loader_stalest_table_staleness_seconds") || [])[0] : null;
  cards.push(
    kpi("Stalest table", stalest ? fmt.seconds(stalest.value) : fmt.DASH, stalest ? stalest.labels.table : "", {
      title: stalest ? fmt.duration(stalest.value) : null,
    }),
  );
  const q = (quantile) => v("loader_tables_staleness_quantile_seconds", { quantile });
  const mean = tables ? v("loader_tables_total_staleness_seconds") / tables : null;
  cards.push(
    kpi(
      "Staleness across tables",
      `${fmt.seconds(q("0.5"))}`,
      `median \u00b7 p90 ${fmt.seconds(q("0.9"))} \u00b7 p99 ${fmt.seconds(q("0.99"))} \u00b7 mean ${fmt.seconds(mean)}`,
    ),
  );
  const windowed = counters.ratio(windowSeconds);
  const overall = fmt.ratio(v("loader_tables_staleness_seconds_squared_total"), v("loader_tables_low_bound_seconds_squared_total"));
  const windowText = windowed.seconds ? `last ${fmt.span(windowed.seconds)}` : "collecting";
  cards.push(
    kpi("Ratio to LOW", fmt.significant(windowed.value), `${windowText} \u00b7 ${overall} since start`, {
      title: "Staleness integral divided by its lower bound LOW, all tables: 1 is unreachable; compare it with itself over time",
    }),
  );
  const spilled = pending && !pending.error ? pending.spilled_bytes : null;
  const resident = pending && !pending.error ? pending.resident_bytes : null;
  cards.push(
    kpi(
      "Pending updates",
      fmt.count(v("loader_tables_pending_updates")),
      resident !== null ? `${fmt.bytes(resident)} in memory \u00b7 ${fmt.bytes(spilled)} spilled` : "acknowledged, not loaded yet",
    ),
  );
  cards.push(
    kpi(
      "Updates",
      `${fmt.rate(counters.rate("loaded"))}`,
      `loaded \u00b7 ${fmt.rate(counters.rate("received"))} received \u00b7 ${fmt.rate(counters.rate("rows"))} rows`,
      { title: "Over the last 30 s of this page's refreshes" },
    ),
  );
  const failed = counters.rate("batchesFailed");
  const quarantined = v("loader_tables_quarantined_updates");
  cards.push(
    kpi(
      "Batches",
      fmt.rate(counters.rate("batchesLoaded")),
      `loaded \u00b7 ${fmt.rate(failed)} failed \u00b7 ${fmt.count(quarantined)} updates quarantined`,
      { kind: (failed || 0) > 0 || (quarantined || 0) > 0 ? "bad" : "" },
    ),
  );
  return cards;
}

// -- the pending store ---------------------------------------------------------------------

export function pendingStore(pending, samples, metric) {
  const v = (name) => (samples ? metric.value(samples, name) : null);
  const memory = pending.memory_budget_bytes;
  const disk = pending.disk_budget_bytes;
  const parts = [
    h("h3", {}, "Memory (budget M)"),
    meter(pending.resident_bytes, memory, `${fmt.bytes(pending.resident_bytes)} of ${fmt.bytes(memory)} (${fmt.percent(pending.resident_bytes, memory)})`),
    h("h3", {}, "Spill disk"),
    disk
      ? meter(pending.spilled_bytes, disk, `${fmt.bytes(pending.spilled_bytes)} of ${fmt.bytes(disk)} (${fmt.percent(pending.spilled_bytes, disk)})`)
      : h("p", { class: "note" }, `${fmt.bytes(pending.spilled_bytes)} spilled (no disk budget)`),
  ];
  if (pending.spill_error) parts.push(h("p", { class: "note bad" }, "Spilling failed: ", pending.spill_error));
  const pressure = v("loader_pressure_mode");
  const refused = samples ? (samples.get("loader_intake_refused_total") || []).reduce((t, s) => t + s.value, 0) : null;
  parts.push(
    dl([
      ["In flight", fmt.bytes(pending.in_flight_bytes), "Payload of batches being loaded (outside M)"],
      ["Peak in memory", fmt.bytes(pending.peak_resident_bytes)],
      ["Spill policy", pending.name || fmt.DASH, pending.chunk_bytes ? `chunk ${fmt.bytes(pending.chunk_bytes)}` : null],
      ["Segment files", fmt.count(pending.segment_files)],
      ["Spill writes", `${fmt.count(pending.writes)} (${fmt.bytes(pending.bytes_written)})`],
      ["Reads", `${fmt.count(pending.loader_reads)} in place \u00b7 ${fmt.count(pending.reads)} back`, `${fmt.bytes(pending.bytes_read)} read back`],
      ["Chain pressure mode", pressure === null ? fmt.DASH : pressure ? "on" : "off", null, pressure ? "warn" : null],
      ["Intake refused (503)", fmt.count(refused), "Since the service started", refused ? "warn" : null],
      ["WAL on disk", fmt.bytes(v("loader_wal_size_bytes"))],
    ]),
  );
  return parts;
}

// -- the tables ----------------------------------------------------------------------------

/** The cells of a table's row, in the order of the header in index.html; `num`: right-aligned figures. */
export const COLUMNS = [
  { key: "name" },
  { key: "staleness_seconds", num: true },
  { key: "ratio", num: true },
  { key: "pending_updates", num: true },
  { key: "pending_bytes", num: true },
  { key: "waiting", num: true },
  { key: "last_loaded_sequence", num: true },
  { key: "delta_version", num: true },
  { key: "alpha", num: true },
  { key: "overhead_seconds", num: true },
  { key: "max_stretch", num: true },
  { key: "state" },
];

function stateCell(table) {
  const parts = [];
  if (table.running) parts.push(badge("loading", "info"));
  if (table.paused) parts.push(badge("paused", "warn"));
  if (table.retiring) parts.push(badge("retiring", "warn"));
  if (table.failures) parts.push(badge(`${table.failures} failed`, "bad"));
  if (table.quarantined_updates) parts.push(badge(`${fmt.count(table.quarantined_updates)} quarantined`, "bad"));
  if (!parts.length) parts.push(h("span", { class: "muted" }, "ok"));
  return parts;
}

export function tableRows(tables, selected, onSelect) {
  const top = Math.max(1e-9, ...tables.map((t) => t.staleness_seconds || 0));
  return tables.map((t) => {
    const bar = h("span", { class: "bar" });
    bar.style.width = `${Math.max(0, Math.min(100, (100 * (t.staleness_seconds || 0)) / top)).toFixed(1)}%`;
    const spilled = t.pending_spilled_bytes || 0;
    const cells = {
      name: [
        h("span", { class: "table-name" }, t.name),
        t.mode !== "append" ? badge(t.mode, t.mode === "view" ? "view" : "latest") : null,
      ],
      staleness_seconds: h(
        "div",
        { class: "bar-cell" },
        h("span", { class: "bar-track" }, bar),
        h("span", { class: "bar-value" }, fmt.seconds(t.staleness_seconds)),
      ),
      ratio: fmt.ratio(t.staleness_integral, t.low_bound),
      pending_updates: fmt.count(t.pending_updates),
      pending_bytes: [fmt.bytes(t.pending_bytes), spilled ? h("span", { class: "sub warn" }, ` ${fmt.bytes(spilled)} spilled`) : null],
      waiting: t.keys ? fmt.count(t.keys.waiting) : "",
      last_loaded_sequence: [h("span", { class: "loaded" }, fmt.count(t.last_loaded_sequence)), h("span", { class: "sub" }, ` / ${fmt.count(t.last_sequence)}`)],
      delta_version: fmt.count(t.delta_version),
      alpha: fmt.alpha(t),
      overhead_seconds: fmt.seconds(t.overhead_seconds),
      max_stretch: fmt.significant(t.max_stretch),
      state: stateCell(t),
    };
    const titles = {
      staleness_seconds: `${fmt.duration(t.staleness_seconds)}; current up to ${t.current_upto_iso}`,
      pending_bytes: `${fmt.bytes(t.pending_resident_bytes)} in memory, ${fmt.bytes(spilled)} spilled`,
      ratio: `integral ${fmt.significant(t.staleness_integral)} s\u00b2, LOW ${fmt.significant(t.low_bound)} s\u00b2`,
      alpha: fmt.alphaTitle(t),
    };
    return h(
      "tr",
      {
        class: t.name === selected ? "selected" : null,
        dataset: { table: t.name },
        tabindex: "0",
        onclick: () => onSelect(t.name),
        onkeydown: (event) => (event.key === "Enter" ? onSelect(t.name) : null),
      },
      COLUMNS.map((c) =>
        h("td", { class: c.num ? "num" : null, dataset: { field: c.key }, title: titles[c.key] || null }, cells[c.key]),
      ),
    );
  });
}

/** One table in full: what GET /v1/tables/{table} says, grouped. */
export function tableDetail(t, now) {
  const columns = (t.schema && t.schema.columns) || [];
  const groups = [
    dl([
      ["Mode", t.mode],
      ["Staleness now", fmt.seconds(t.staleness_seconds), fmt.duration(t.staleness_seconds)],
      ["Current up to", t.current_upto_iso || fmt.DASH, fmt.ago(t.current_upto, now)],
      ["Integral / LOW", fmt.ratio(t.staleness_integral, t.low_bound)],
      ["Max stretch", fmt.significant(t.max_stretch)],
      ["Weight", fmt.significant(t.weight)],
      ["Period", t.period_estimate ? fmt.seconds(t.period_estimate) : fmt.DASH, t.period_hint ? `hint ${fmt.seconds(t.period_hint)}` : "estimated"],
      ["Group", t.group ?? fmt.DASH],
    ]),
    dl([
      ["Pending updates", fmt.count(t.pending_updates)],
      ["Pending bytes", `${fmt.bytes(t.pending_resident_bytes)} in memory \u00b7 ${fmt.bytes(t.pending_spilled_bytes)} spilled`],
      ["Sequence", `${fmt.count(t.last_loaded_sequence)} loaded of ${fmt.count(t.last_sequence)}`],
      ["Delta version", fmt.count(t.delta_version)],
      ["Load cost", `${fmt.alpha(t)}${"ms_per_1k_rows" in t ? " per 1,000 rows" : ""} + ${fmt.seconds(t.overhead_seconds)} a load`, fmt.alphaTitle(t)],
      ["State", stateCell(t)],
      t.inputs ? ["Inputs", t.inputs.join(", ")] : ["Columns", columns.map((c) => c.name).join(", ") || fmt.DASH],
      t.superseded_rows ? ["Superseded rows", fmt.count(t.superseded_rows)] : null,
    ]),
  ];
  if (t.keys) groups.push(keyFacts(t));
  return groups;
}

function keyFacts(t) {
  const k = t.keys;
  return dl([
    ["Waiting keys", fmt.count(k.waiting)],
    ["Loading keys", fmt.count(k.loading)],
    ["Next batch", `${fmt.count(k.next_batch.keys)} keys \u00b7 ${fmt.count(k.next_batch.updates)} updates \u00b7 ${fmt.seconds(k.next_batch.predicted_seconds)}`],
    ["Queue staleness", `mean ${fmt.seconds(k.queue_staleness_seconds.mean)} \u00b7 p99 ${fmt.seconds(k.queue_staleness_seconds.p99)} \u00b7 max ${fmt.seconds(k.queue_staleness_seconds.max)}`],
    ["Application staleness", `mean ${fmt.seconds(k.application_staleness_seconds.mean)} \u00b7 p99 ${fmt.seconds(k.application_staleness_seconds.p99)}`],
    ["Key policy", k.policy + (k.max_keys_per_batch ? `, at most ${fmt.count(k.max_keys_per_batch)} keys a batch` : "")],
  ]);
}

// -- latest tables, views, quarantine ------------------------------------------------------

function simpleTable(headers, rows, empty) {
  if (!rows.length) return h("p", { class: "note" }, empty);
  return h(
    "div",
    { class: "table-scroll" },
    h(
      "table",
      { class: "grid-table compact" },
      h("thead", {}, h("tr", {}, headers.map(([label, num]) => h("th", { class: num ? "num" : null }, label)))),
      h("tbody", {}, rows),
    ),
  );
}

export function latestTables(tables) {
  const rows = tables
    .filter((t) => t.keys)
    .map((t) =>
      h(
        "tr",
        { dataset: { table: t.name } },
        h("td", {}, t.name),
        h("td", { class: "num" }, fmt.count(t.keys.waiting)),
        h("td", { class: "num" }, fmt.count(t.keys.loading)),
        h("td", { class: "num", title: `${fmt.count(t.keys.next_batch.updates)} updates` }, `${fmt.count(t.keys.next_batch.keys)} keys`),
        h("td", { class: "num" }, fmt.seconds(t.keys.queue_staleness_seconds.p99)),
        h("td", { class: "num" }, fmt.seconds(t.keys.application_staleness_seconds.mean)),
        h("td", { class: "num" }, fmt.count(t.superseded_rows)),
        h("td", {}, t.keys.policy),
      ),
    );
  return simpleTable(
    [
      ["Table"],
      ["Waiting keys", 1],
      ["Loading keys", 1],
      ["Next batch", 1],
      ["Queue staleness p99", 1],
      ["Application staleness mean", 1],
      ["Superseded rows", 1],
      ["Key policy"],
    ],
    rows,
    "No latest tables on this page of tables.",
  );
}

export function views(list, details) {
  const rows = [];
  for (const name of list.views) {
    const view = details.get(name);
    if (!view || view.error) {
      rows.push(h("tr", {}, h("td", {}, name), h("td", { colspan: "6", class: "bad" }, view ? view.error.message : "loading\u2026")));
      continue;
    }
    const ex = view.executor;
    const byState = { used: 0, profiled: 0, unused: 0 };
    for (const c of (ex && ex.candidates) || []) byState[c.state] = (byState[c.state] || 0) + 1;
    const cacheBytes = ((ex && ex.caches) || []).reduce((total, c) => total + (c.bytes || 0), 0);
    const hit = ex && ex.cache_probes ? fmt.percent(ex.cache_hits, ex.cache_probes) : fmt.DASH;
    const caches = !ex
      ? h("span", { class: "muted" }, "being rebuilt")
      : ex.mode === "spark"
        ? h("span", { class: "muted" }, `spark engine \u00b7 ${fmt.count(ex.jobs)} jobs`)
        : `${byState.used} used \u00b7 ${byState.profiled} profiled \u00b7 ${byState.unused} unused`;
    const cacheTitle = ex && ex.caches ? `${ex.caches.length} caches in use` : null;
    rows.push(
      h(
        "tr",
        { dataset: { view: name } },
        h("td", {}, name, " ", badge(view.engine || "driver", "view")),
        h("td", { class: "num" }, fmt.seconds(view.staleness_seconds)),
        h("td", { class: "num" }, fmt.count(view.pending_input_commits)),
        h("td", { class: "num" }, fmt.count(view.delta_version)),
        h("td", { class: "nowrap", title: cacheTitle }, caches),
        h("td", { class: "num", title: ex ? `${fmt.count(ex.cache_hits)} hits of ${fmt.count(ex.cache_probes)} probes` : null }, hit),
        h("td", { class: "num" }, fmt.bytes(cacheBytes)),
      ),
    );
  }
  for (const [name, reason] of Object.entries(list.broken || {})) {
    rows.push(h("tr", { class: "broken" }, h("td", {}, name, " ", badge("broken", "bad")), h("td", { colspan: "6", class: "bad" }, reason)));
  }
  return simpleTable(
    [["View"], ["Staleness", 1], ["Input commits", 1], ["Version", 1], ["Caches"], ["Hit ratio", 1], ["Memory", 1]],
    rows,
    "No join views.",
  );
}

export function quarantine(batches, now) {
  const open = batches.filter((b) => !b.resolved);
  const rows = [...open, ...batches.filter((b) => b.resolved)].map((b) =>
    h(
      "tr",
      { class: b.resolved ? "resolved" : null },
      h("td", {}, b.table),
      h("td", { class: "num" }, `${fmt.count(b.first_sequence)}\u2013${fmt.count(b.last_sequence)}`),
      h("td", { class: "num" }, fmt.count(b.updates)),
      h("td", { class: "num" }, fmt.count(b.rows)),
      h("td", { class: "num" }, fmt.count(b.attempts)),
      h("td", { class: "error-text", title: b.error }, b.error),
      h("td", {}, b.resolved ? String(b.resolved) : fmt.ago(b.quarantined_at, now)),
    ),
  );
  return simpleTable(
    [["Table"], ["Sequences", 1], ["Updates", 1], ["Rows", 1], ["Attempts", 1], ["Error"], ["When"]],
    rows,
    "Nothing quarantined.",
  );
}
