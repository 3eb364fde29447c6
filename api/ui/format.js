// Numbers as people read them: seconds with three significant digits, bytes in KiB/MiB,
// counts with thousands separators. Every function takes null/undefined/NaN and gives "—"
// (the API says null where a figure does not exist yet, e.g. a ratio to a LOW of 0).

const DASH = "\u2014";
const grouped = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });

function missing(value) {
  return value === null || value === undefined || Number.isNaN(value);
}

/** A plain number with `digits` significant digits, grouped above 1,000 (no exponent). */
export function significant(value, digits = 3) {
  if (missing(value)) return DASH;
  if (!Number.isFinite(value)) return value > 0 ? "\u221e" : "-\u221e";
  const size = Math.abs(value);
  if (size === 0) return "0";
  if (size >= 10 ** digits) return grouped.format(value);
  const decimals = Math.max(0, Math.min(6, digits - 1 - Math.floor(Math.log10(size))));
  return value.toFixed(decimals);
}

/** Seconds: "0.123 s", "12.3 s", "1,234 s". */
export function seconds(value) {
  return missing(value) ? DASH : `${significant(value)} s`;
}

/** A duration as words, for tooltips: "2 h 03 min", "4 min 10 s", "12.3 s". */
export function duration(value) {
  if (missing(value)) return DASH;
  const s = Math.abs(value);
  if (s < 60 || !Number.isFinite(s)) return seconds(value);
  const sign = value < 0 ? "-" : "";
  if (s < 3600) return `${sign}${Math.floor(s / 60)} min ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
  if (s < 86400) return `${sign}${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
  return `${sign}${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

/** A span of time in whole units, for labels: "8 s", "4 min", "1.5 h". */
export function span(value) {
  if (missing(value)) return DASH;
  if (value < 90) return `${Math.round(value)} s`;
  if (value < 5400) return `${Math.round(value / 60)} min`;
  return `${significant(value / 3600, 2)} h`;
}

/** Bytes in binary units: "512 B", "12.3 KiB", "1.50 MiB". */
export function bytes(value) {
  if (missing(value)) return DASH;
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let size = Math.abs(value);
  let unit = 0;
  while (size >= 1024 && unit < units.length - 1) {
    size /= 1024;
    unit += 1;
  }
  const shown = unit === 0 ? String(Math.round(size)) : significant(size);
  return `${value < 0 ? "-" : ""}${shown} ${units[unit]}`;
}

/** A count: "1,234". */
export function count(value) {
  return missing(value) ? DASH : grouped.format(value);
}

/** A ratio such as staleness integral / LOW: "1.27", with "—" when the divisor is 0. */
export function ratio(numerator, denominator) {
  if (missing(numerator) || missing(denominator) || denominator <= 0) return DASH;
  return significant(numerator / denominator);
}

/** A rate per second: "12.3/s", "0.050/s". */
export function rate(value) {
  return missing(value) ? DASH : `${significant(value, 2)}/s`;
}

/** A percentage of a whole: "4.8%". */
export function percent(part, whole) {
  if (missing(part) || missing(whole) || whole <= 0) return DASH;
  return `${significant((100 * part) / whole, 2)}%`;
}

/**
 * A table's load cost as a person reads it: milliseconds of loading per 1,000 rows written
 * (beside the fixed overhead; the column says "per 1k rows"), "—" before its first load. A service that does not report
 * it yet gives alpha itself: seconds of loading per second of data, shown as ms per second
 * (a latest table's model is per key loaded: ms per 1,000 keys).
 */
export function alpha(table) {
  if ("ms_per_1k_rows" in table) return missing(table.ms_per_1k_rows) ? DASH : `${significant(table.ms_per_1k_rows)} ms`;
  if (table.mode === "latest" && table.keys) {
    const ms = table.keys.seconds_per_key * 1e6;
    return ms >= 1000 ? `${significant(ms / 1000)} s/1k keys` : `${significant(ms)} ms/1k keys`;
  }
  return missing(table.alpha) ? DASH : `${significant(table.alpha * 1000)} ms/s`;
}

/** The raw model behind ``alpha``, for a tooltip. */
export function alphaTitle(table) {
  const model = table.mode === "latest" && table.keys
    ? `${significant(table.keys.seconds_per_key)} s per key loaded`
    : `\u03b1 = ${significant(table.alpha)} s of loading per s of data`;
  return `${model}, plus ${seconds(table.overhead_seconds)} overhead a load`;
}

/** How long ago an epoch time was: "12 s ago", "3 min ago". */
export function ago(epochSeconds, now) {
  if (missing(epochSeconds)) return DASH;
  const s = Math.max(0, now - epochSeconds);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${significant(s / 3600, 2)} h ago`;
  return `${significant(s / 86400, 2)} d ago`;
}

/** Wall-clock time of an epoch second, local: "14:03:27". */
export function clock(epochSeconds) {
  if (missing(epochSeconds)) return DASH;
  return new Date(epochSeconds * 1000).toLocaleTimeString("en-GB", { hour12: false });
}

export { DASH };
