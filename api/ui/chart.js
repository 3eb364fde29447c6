// Staleness lines as an inline SVG: one polyline per table over a time window, axes in
// seconds and minutes before now, and a crosshair that reads every line at the pointer.
// Drawn from scratch on every refresh (a few hundred vertices per line): simpler than
// diffing, and cheap at the sizes the page asks the API for.

import * as fmt from "./format.js";

const SVG = "http://www.w3.org/2000/svg";
const MARGIN = { top: 12, right: 16, bottom: 26, left: 58 };

/** Where the pointer is over each chart's container: a redraw every refresh keeps the readout. */
const pointers = new WeakMap();

export const PALETTE = [
  "#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed",
  "#0891b2", "#db2777", "#65a30d", "#ea580c", "#475569",
];

function node(tag, attributes = {}, text = null) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, String(value));
  if (text !== null) element.textContent = text;
  return element;
}

/** About `count` round steps covering [0, top]: 1, 2 or 5 times a power of ten. */
function niceStep(top, count) {
  const raw = top / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw);
  return step || 10 * power;
}

/** Time ticks in round seconds before `now`, about `count` of them. */
function timeStep(span, count) {
  const steps = [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
  return steps.find((s) => span / s <= count) || steps[steps.length - 1];
}

function ago(seconds) {
  if (seconds === 0) return "now";
  if (seconds % 3600 === 0) return `\u2212${seconds / 3600} h`;
  if (seconds % 60 === 0) return `\u2212${seconds / 60} min`;
  return `\u2212${seconds} s`;
}

/** The value of a line of vertices at time t (linear between vertices), or null outside it. */
function valueAt(points, t) {
  if (!points.length || t < points[0][0] || t > points[points.length - 1][0]) return null;
  let lo = 0;
  let hi = points.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (points[mid][0] <= t) lo = mid;
    else hi = mid;
  }
  const [t0, v0] = points[lo];
  const [t1, v1] = points[hi];
  return t1 > t0 ? v0 + ((v1 - v0) * (t - t0)) / (t1 - t0) : v1;
}

/**
 * Draw `lines` ([{name, color, points: [[epoch s, staleness s], ...]}]) between `since` and
 * `now` into `container`, `height` pixels tall and as wide as the container.
 */
export function drawChart(container, { since: windowStart, now, lines, height = 260, empty = "No data yet." }) {
  // A service that started within the window knows nothing before: the axis begins with
  // the earliest line (a minute at least) instead of leaving most of the chart empty.
  const earliest = Math.min(...lines.filter((l) => l.points.length).map((l) => l.points[0][0]));
  const since = Math.max(windowStart, Math.min(now - 60, Number.isFinite(earliest) ? earliest : windowStart));
  const width = Math.max(320, Math.floor(container.clientWidth || 800));
  const plotW = width - MARGIN.left - MARGIN.right;
  const plotH = height - MARGIN.top - MARGIN.bottom;
  const svg = node("svg", {
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    class: "chart-svg",
    role: "img",
    "aria-label": `Staleness of ${lines.length} tables over the last ${Math.round((now - since) / 60)} minutes`,
  });
  let top = 0;
  for (const line of lines) for (const [t, v] of line.points) if (t >= since && v > top) top = v;
  const step = niceStep(top > 0 ? top : 1, 4);
  const yMax = Math.max(step, Math.ceil((top * 1.05) / step) * step);
  const x = (t) => MARGIN.left + ((t - since) / (now - since)) * plotW;
  const y = (v) => MARGIN.top + plotH - (v / yMax) * plotH;

  const grid = node("g", { class: "grid" });
  const decimals = Math.max(0, Math.ceil(-Math.log10(step) - 1e-9));
  for (let k = 0; k * step <= yMax + step / 2; k += 1) {
    const v = k * step;
    grid.append(node("line", { x1: MARGIN.left, x2: MARGIN.left + plotW, y1: y(v), y2: y(v) }));
    const label = v >= 1000 ? fmt.count(v) : v.toFixed(decimals);
    grid.append(node("text", { x: MARGIN.left - 8, y: y(v) + 4, class: "tick y" }, `${label} s`));
  }
  const tstep = timeStep(now - since, 7);
  for (let back = 0; back <= now - since + 1e-9; back += tstep) {
    const px = x(now - back);
    grid.append(node("line", { x1: px, x2: px, y1: MARGIN.top, y2: MARGIN.top + plotH, class: "vertical" }));
    grid.append(node("text", { x: px, y: height - 8, class: "tick x" }, ago(back)));
  }
  svg.append(grid);

  const clipId = `clip-${Math.random().toString(36).slice(2)}`;
  const clip = node("clipPath", { id: clipId });
  clip.append(node("rect", { x: MARGIN.left, y: MARGIN.top - 2, width: plotW, height: plotH + 4 }));
  svg.append(clip);
  const plot = node("g", { "clip-path": `url(#${clipId})` });
  for (const line of lines) {
    if (!line.points.length) continue;
    const d = line.points.map(([t, v], i) => `${i ? "L" : "M"}${x(t).toFixed(1)},${y(v).toFixed(1)}`).join("");
    plot.append(node("path", { d, stroke: line.color, class: "series" }));
  }
  svg.append(plot);
  svg.append(node("line", { x1: MARGIN.left, x2: MARGIN.left + plotW, y1: y(0), y2: y(0), class: "axis" }));

  if (!lines.length) {
    svg.append(node("text", { x: MARGIN.left + plotW / 2, y: MARGIN.top + plotH / 2, class: "empty" }, empty));
  }

  const cursor = node("line", { y1: MARGIN.top, y2: MARGIN.top + plotH, class: "cursor", visibility: "hidden" });
  svg.append(cursor);
  const tip = document.createElement("div");
  tip.className = "chart-tip";
  tip.hidden = true;
  const show = (px) => {
    if (px < MARGIN.left || px > MARGIN.left + plotW || !lines.length) {
      cursor.setAttribute("visibility", "hidden");
      tip.hidden = true;
      return;
    }
    const t = since + ((px - MARGIN.left) / plotW) * (now - since);
    cursor.setAttribute("x1", px);
    cursor.setAttribute("x2", px);
    cursor.setAttribute("visibility", "visible");
    const rows = lines
      .map((line) => ({ line, v: valueAt(line.points, t) }))
      .filter((row) => row.v !== null)
      .sort((a, b) => b.v - a.v);
    const head = document.createElement("div");
    head.className = "chart-tip-time";
    head.textContent = `${fmt.clock(t)} (${fmt.duration(now - t)} ago)`;
    tip.replaceChildren(head);
    for (const { line, v } of rows) {
      const row = document.createElement("div");
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.backgroundColor = line.color;
      const name = document.createElement("span");
      name.className = "chart-tip-name";
      name.textContent = line.name;
      const shown = document.createElement("span");
      shown.className = "num";
      shown.textContent = fmt.seconds(v);
      row.append(swatch, name, shown);
      tip.append(row);
    }
    tip.hidden = false;
    const left = px + 14 + 220 > width ? px - 14 - tip.offsetWidth : px + 14;
    tip.style.left = `${Math.max(0, left)}px`;
    tip.style.top = `${MARGIN.top}px`;
  };
  svg.addEventListener("pointermove", (event) => {
    const px = event.clientX - svg.getBoundingClientRect().left;
    pointers.set(container, px);
    show(px);
  });
  svg.addEventListener("pointerleave", () => {
    pointers.delete(container);
    cursor.setAttribute("visibility", "hidden");
    tip.hidden = true;
  });
  container.replaceChildren(svg, tip);
  if (pointers.has(container)) show(pointers.get(container));
}
