// The few aggregates the page shows from /metrics (asked for by name, so the answer stays
// small at any number of tables), parsed from Prometheus' text format, and rates and
// windowed ratios from the page's own successive samples of its counters.

/** The families the page reads (GET /metrics?names=...). */
export const FAMILIES = [
  "loader_tables",
  "loader_tables_staleness_quantile_seconds",
  "loader_tables_total_staleness_seconds",
  "loader_stalest_table_staleness_seconds",
  "loader_tables_staleness_seconds_squared",
  "loader_tables_low_bound_seconds_squared",
  "loader_tables_pending_updates",
  "loader_tables_quarantined_updates",
  "loader_tables_batches",
  "loader_tables_updates_received",
  "loader_tables_updates_loaded",
  "loader_tables_rows_loaded",
  "loader_workers",
  "loader_workers_busy",
  "loader_load_processes",
  "loader_spark_reachable",
  "loader_policy_info",
  "loader_pressure_mode",
  "loader_intake_refused",
  "loader_wal_size_bytes",
];

const LABEL = /([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

function number(text) {
  if (text === "+Inf") return Infinity;
  if (text === "-Inf") return -Infinity;
  return Number(text);
}

/** Sample name -> [{labels, value}] of an exposition. */
export function parse(text) {
  const samples = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const brace = line.indexOf("{");
    const space = line.indexOf(" ");
    let name;
    let labels = {};
    let rest;
    if (brace >= 0 && (space < 0 || brace < space)) {
      const close = line.lastIndexOf("}");
      name = line.slice(0, brace);
      for (const match of line.slice(brace + 1, close).matchAll(LABEL)) {
        labels[match[1]] = match[2].replace(/\\"/g, '"').replace(/\\n/g, "\n").replace(/\\\\/g, "\\");
      }
      rest = line.slice(close + 1).trim();
    } else {
      name = line.slice(0, space);
      rest = line.slice(space + 1).trim();
    }
    const value = number(rest.split(" ")[0]);
    if (!samples.has(name)) samples.set(name, []);
    samples.get(name).push({ labels, value });
  }
  return samples;
}

/** The sum of a sample's values whose labels include `match` (null when there is none). */
export function value(samples, name, match = {}) {
  const found = (samples.get(name) || []).filter((s) => Object.entries(match).every(([k, v]) => s.labels[k] === v));
  return found.length ? found.reduce((total, s) => total + s.value, 0) : null;
}

/** The first sample's labels of a name (e.g. the policy of loader_policy_info). */
export function labels(samples, name) {
  const found = samples.get(name);
  return found && found.length ? found[0].labels : null;
}

/** Counters the page turns into rates, and the window of its samples. */
const COUNTERS = {
  received: ["loader_tables_updates_received_total"],
  loaded: ["loader_tables_updates_loaded_total"],
  rows: ["loader_tables_rows_loaded_total"],
  batchesLoaded: ["loader_tables_batches_total", { outcome: "loaded" }],
  batchesFailed: ["loader_tables_batches_total", { outcome: "failed" }],
  integral: ["loader_tables_staleness_seconds_squared_total"],
  low: ["loader_tables_low_bound_seconds_squared_total"],
};

/** Successive samples of the counters (this page's own polls), for rates and windowed ratios. */
export class CounterHistory {
  constructor(keepSeconds = 3600) {
    this.keepSeconds = keepSeconds;
    this.samples = [];
  }

  add(at, samples) {
    const entry = { at };
    for (const [key, [name, match]] of Object.entries(COUNTERS)) entry[key] = value(samples, name, match || {});
    const last = this.samples[this.samples.length - 1];
    // A counter that went down: the service restarted, the older samples no longer compare.
    if (last && Object.keys(COUNTERS).some((k) => entry[k] !== null && last[k] !== null && entry[k] < last[k])) {
      this.samples = [];
    }
    this.samples.push(entry);
    while (this.samples.length > 2 && at - this.samples[0].at > this.keepSeconds) this.samples.shift();
  }

  /** The sample closest to `seconds` before the newest (at most that far back), and the newest. */
  span(seconds) {
    const newest = this.samples[this.samples.length - 1];
    if (!newest) return null;
    const oldest = this.samples.find((s) => newest.at - s.at <= seconds) || newest;
    return oldest === newest ? null : { from: oldest, to: newest, seconds: newest.at - oldest.at };
  }

  /** Per second over about the last `seconds` (null until two samples exist). */
  rate(key, seconds = 30) {
    const span = this.span(seconds);
    if (!span || span.from[key] === null || span.to[key] === null) return null;
    return (span.to[key] - span.from[key]) / span.seconds;
  }

  /** Increase of the staleness integral over that of LOW, over about the last `seconds`. */
  ratio(seconds) {
    const span = this.span(seconds);
    if (!span) return { value: null, seconds: 0 };
    const low = span.to.low - span.from.low;
    const integral = span.to.integral - span.from.integral;
    return { value: low > 0 ? integral / low : null, seconds: span.seconds };
  }
}
