// charts.js: the one chart renderer of every gradmesh page: report.html, the
// comparison of two runs, the scaling study and the live dashboard.
//
// Pages carry data only: a JSON spec per chart. Each kind of chart is a pure
// function from its spec to an SVG string (no DOM), so a static page, the
// dashboard redrawing from its event stream and the tests under Node all run
// the same code. No library and nothing fetched: pages stay single files.
//
// Colours come from one palette, chosen here. Every text carries its colour
// as an inline style, which no page-wide CSS rule overrides (a `fill`
// attribute would lose to any `svg text {...}` rule).
//
// Specs (see docs/observability.md):
//   line:     {kind, title, empty, x: {label, unit, integer, log2, min, max},
//              y: {label, unit, zero, percent},
//              series: [{name, dots, line, points: [[x, y, generation], ...]}],
//              markers: [{x, label, text, series}]}
//   bars:     {kind, title, unit, categories: [...], rows: [{label, values}]}
//   heatmap:  {kind, title, unit, x_label, columns: [...], columns_on_top,
//              scale: "range" | "median", cell_text,
//              rows: [{label, values, notes, highlight, title}], note}
//   timeline: {kind, title, start, end, marks: [{t, kind, text}]}
// A point's generation (0 when left out) is the attempt that wrote it: a
// later generation that starts at x supersedes every earlier point at or
// beyond x (steps trained again after a restart). The latest points make the
// series' line; the superseded ones a faint dashed line of the same colour,
// the steps a restart made the run train again. A marker's series (an index)
// colours it as that series (two runs' restarts on one chart).
//
// Money and sizes read the same on every page and in the C++-written tables
// (fmtMoney, fmtBytes; obs/metering.h).
"use strict";
const GradmeshCharts = (() => {
const SVGNS = "http://www.w3.org/2000/svg";
const PALETTE = ["#2563eb", "#e8710a", "#2f9e44", "#7c3aed", "#0f766e", "#db2777", "#8c564b", "#6b7280"];
const INK = "#1f2933", MUTED = "#6b7683", GRID = "#eef0f3", FRAME = "#c9ced6", ALERT = "#d43d2a";
const FONT = "system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif";
const MAX_POINTS = 2000;  // more polyline points than pixels only costs drawing time
const CHAR_W = 6.2;       // mean width of an 11px character, to lay out text without a DOM

const isNum = (v) => typeof v === "number" && Number.isFinite(v);
const px = (v) => (Math.round(v * 10) / 10).toFixed(1);
const ENTITIES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ENTITIES[c]);

function attrs(a) {
  let s = "";
  for (const k in a) if (a[k] !== undefined && a[k] !== null) s += ` ${k}="${esc(a[k])}"`;
  return s;
}
const el = (tag, a, body) => (body === undefined ? `<${tag}${attrs(a)}/>` : `<${tag}${attrs(a)}>${body}</${tag}>`);
const tip = (s) => el("title", {}, esc(s));

// A text whose colour and size page-wide CSS rules cannot change (inline style).
function label(x, y, s, o = {}) {
  const style = `fill:${o.fill || MUTED};font-size:${o.size || 11}px` + (o.bold ? ";font-weight:600" : "");
  return el("text", { x: px(x), y: px(y), "text-anchor": o.anchor, class: o.cls, transform: o.transform, style }, esc(s));
}

function svgOpen(w, h, title) {
  return `<svg xmlns="${SVGNS}" width="${px(w)}" height="${px(h)}" viewBox="0 0 ${px(w)} ${px(h)}" role="img"` +
    ` font-family="${FONT}">` + (title ? tip(title) : "");
}

// The title line over a chart, and the height it takes.
const heading = (spec, w) => (spec.title ? label(w / 2, 15, spec.title, { anchor: "middle", fill: INK, size: 13, bold: true }) : "");
const headingH = (spec) => (spec.title ? 24 : 0);

function emptySvg(w, h, spec, message) {
  return svgOpen(w, h, spec.title) + heading(spec, w) +
    label(w / 2, headingH(spec) + (h - headingH(spec)) / 2, message, { anchor: "middle", size: 12, cls: "empty" }) + "</svg>";
}

// ---------- numbers ----------

const strip = (s) => (s.includes(".") && !s.includes("e") ? s.replace(/\.?0+$/, "") : s);
const UNITS = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
// Digits needed after the point so that multiples of `step` stay distinct.
const decimals = (step) => Math.max(0, Math.min(8, -Math.floor(Math.log10(step) + 1e-9)));

// Tick label: compact and only as precise as the tick spacing: 45k, 1.2M, 0.25, 1.2e-4.
function fmtTick(v, step) {
  if (Math.abs(v) < step * 1e-6) return "0";
  if (step < 1e-3) {
    const d = Math.floor(Math.log10(Math.abs(v))) - Math.floor(Math.log10(step));
    return v.toExponential(Math.max(0, Math.min(4, d))).replace(/\.?0+e/, "e");
  }
  for (const [u, s] of UNITS) if (Math.abs(v) >= u) return strip((v / u).toFixed(decimals(step / u))) + s;
  return strip(v.toFixed(decimals(step)));
}

// A value with `sig` significant digits: 45.2k, 0.531, 1.2e-5.
function fmtNum(v, sig = 3) {
  if (!isNum(v)) return "—";
  if (v === 0) return "0";
  if (Math.abs(v) < 1e-3) return v.toExponential(sig - 1).replace(/\.?0+e/, "e");
  const r = Number(v.toPrecision(sig));  // round first, so 999999 becomes 1M rather than 1000k
  for (const [u, s] of UNITS) {
    if (Math.abs(r) >= u) return (Math.abs(r / u) >= 1000 ? Math.round(r / u) : strip((r / u).toPrecision(sig))) + s;
  }
  return strip(r.toPrecision(sig));
}

const fmtPct = (v, digits = 1) => (isNum(v) ? (v * 100).toFixed(digits) + "%" : "—");

// Money as a bill shows it: $1,234.57, $0.42, "< $0.01" for a short run's
// fraction of a cent, the currency on every amount ("12.30 CHF" without a
// symbol). obs/metering.cc's money_text writes the same.
const MONEY_SYMBOLS = { USD: "$", EUR: "€", GBP: "£" };
const withCurrency = (amount, currency) => (MONEY_SYMBOLS[currency] ? MONEY_SYMBOLS[currency] + amount
  : amount + " " + (currency || "?"));
function fmtMoney(v, currency) {
  if (!isNum(v)) return "—";
  if (v !== 0 && Math.abs(v) < 0.005) return (v < 0 ? "> -" : "< ") + withCurrency("0.01", currency);
  const digits = Math.abs(v).toFixed(2).split(".");
  return (v < 0 ? "-" : "") + withCurrency(digits[0].replace(/\B(?=(\d{3})+(?!\d))/g, ",") + "." + digits[1], currency);
}
// A price keeps 4 significant digits: $0.0425 (per core-hour).
const fmtPrice = (v, currency) => (isNum(v) ? withCurrency(String(Number(v.toPrecision(4))), currency) : "—");

// Bytes with 3 significant digits and a decimal unit: 512 B, 1.9 kB, 4.38 GB;
// `per` names what they are multiplied by ("-hours": 1.9 kB-hours).
function fmtBytes(v, per = "") {
  if (!isNum(v)) return "—";
  const units = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
  let i = 0, r = Number(Math.abs(v).toPrecision(3));
  while (r >= 1000 && i < units.length - 1) r = Number((r / 1000).toPrecision(3)), i++;
  if (i === 0 && r !== 0 && r < 1) return (v < 0 ? "-" : "") + "< 1 B" + per;
  return (v < 0 ? "-" : "") + strip(i === 0 && r >= 1 ? String(Math.round(r)) : String(r)) + " " + units[i] + per;
}

// Under 10 s, tenths: a mark at 1.6 s must not read "2s" next to an axis tick at 2 s.
function fmtDuration(s) {
  if (Math.abs(s) < 10 && Math.abs(s - Math.round(s)) >= 0.05) return s.toFixed(1) + "s";
  s = Math.round(s);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60 ? (s % 60) + "s" : "");
  const m = Math.floor((s % 3600) / 60);
  return Math.floor(s / 3600) + "h" + (m ? m + "m" : "");
}

// ---------- scales ----------

// A tick step of 1, 2 or 5 times a power of ten giving about `count` ticks over `span`.
function niceStep(span, count, integer) {
  const raw = span / Math.max(1, count);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  let step = mag;
  for (const m of [2, 5, 10]) if (raw > step * (1 + 1e-9)) step = m * mag;
  return integer ? Math.max(1, Math.round(step)) : step;
}

// Multiples of `step` in [lo, hi]; by index, so a step below the values'
// precision ends the list instead of looping forever.
function ticks(lo, hi, step) {
  const out = [], first = Math.ceil(lo / step - 1e-9) * step;
  for (let i = 0; i < 50; i++) {
    const t = first + i * step;
    if (t > hi + step * 1e-9 || (i > 0 && t === out[out.length - 1])) break;
    out.push(Math.abs(t) < step * 1e-9 ? 0 : t);
  }
  return out;
}

const niceTicks = (lo, hi, count, integer) => {
  const step = niceStep(hi - lo, count, integer);
  return { step, values: ticks(lo, hi, step) };
};

const DURATION_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
function durationStep(span, count) {
  const raw = span / Math.max(1, count);
  return DURATION_STEPS.find((s) => s >= raw) || 86400 * Math.ceil(raw / 86400);
}

// ---------- line charts ----------

// The points to draw, by x: a later generation starting at x supersedes the
// earlier generations' points at or beyond x; of one generation's points at
// the same x the last one counts.
function latestPoints(points) {
  const start = new Map();
  for (const p of points) {
    if (!Array.isArray(p) || !isNum(p[0])) continue;
    const g = isNum(p[2]) ? p[2] : 0;
    if (!start.has(g) || p[0] < start.get(g)) start.set(g, p[0]);
  }
  const cut = new Map();  // per generation: where the first later one starts
  let later = Infinity;
  for (const g of [...start.keys()].sort((a, b) => b - a)) {
    cut.set(g, later);
    later = Math.min(later, start.get(g));
  }
  const kept = points.filter((p) => Array.isArray(p) && isNum(p[0]) && p[0] < cut.get(isNum(p[2]) ? p[2] : 0));
  const byX = new Map();
  for (const p of kept) byX.set(p[0], p);
  return [...byX.values()].sort((a, b) => a[0] - b[0]);
}

// The points a later generation superseded, one run of points per
// generation (a killed attempt's steps that were trained again), by x.
function supersededRuns(points) {
  const latest = new Set(latestPoints(points)), byGen = new Map();
  for (const p of points) {
    if (!Array.isArray(p) || !isNum(p[0]) || !isNum(p[1]) || latest.has(p)) continue;
    const g = isNum(p[2]) ? p[2] : 0;
    if (!byGen.has(g)) byGen.set(g, new Map());
    byGen.get(g).set(p[0], p);  // of one generation's points at an x, the last counts
  }
  return [...byGen.keys()].sort((a, b) => a - b).map((g) => [...byGen.get(g).values()].sort((a, b) => a[0] - b[0]));
}

// Every k-th point and the last, so a long run never draws more than MAX_POINTS.
function thin(pts) {
  if (pts.length <= MAX_POINTS) return pts;
  const k = Math.ceil(pts.length / (MAX_POINTS - 1)), out = [];
  for (let i = 0; i < pts.length; i += k) out.push(pts[i]);
  if (out[out.length - 1] !== pts[pts.length - 1]) out.push(pts[pts.length - 1]);
  return out;
}

const axisTitle = (a) => (a.label || "") + (a.unit ? ` (${a.unit})` : "");
const fmtX = (x) => (Number.isInteger(x) ? String(x) : fmtNum(x, 4));
const fmtY = (spec, y) => (spec.y.percent ? fmtPct(y, 2) : fmtNum(y, 4) + (spec.y.unit ? " " + spec.y.unit : ""));

// The key: one entry per series, in rows above the plot (never over a point).
// entries: [{name, dot}], coloured in palette order.
function legendLayout(entries, w, left) {
  const items = [];
  let x = left, row = 0;
  entries.forEach((e, i) => {
    const width = 26 + CHAR_W * e.name.length;
    if (x > left && x + width > w - 8) x = left, row++;
    items.push({ ...e, color: e.color || PALETTE[i % PALETTE.length], x, y: row * 16 });
    x += width + 14;
  });
  return { items, height: entries.length ? (row + 1) * 16 + 4 : 0 };
}

function legendSvg(layout, top) {
  return layout.items.map(({ name, dot, dashed, color, x, y }) => {
    const cy = top + y + 6;
    const swatch = dot ? el("circle", { cx: px(x + 9), cy: px(cy), r: 3.5, fill: color })
      : el("line", { x1: px(x), x2: px(x + 18), y1: px(cy), y2: px(cy), stroke: color, "stroke-width": dashed ? 1.6 : 2.5,
        "stroke-dasharray": dashed ? "3 2" : undefined });
    return el("g", { class: dashed ? "key note" : "key" }, swatch + label(x + 24, cy + 4, name, { fill: color }));
  }).join("");
}

// Scales for the x and y axes of a line chart from its drawn points.
function lineScales(spec, series, box) {
  const xs = spec.x, ys = spec.y;
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (const s of series) {
    for (const [x, y] of [...s.points, ...s.earlier.flat()]) {
      x0 = Math.min(x0, x), x1 = Math.max(x1, x), y0 = Math.min(y0, y), y1 = Math.max(y1, y);
    }
  }
  if (isNum(xs.min)) x0 = Math.min(x0, xs.min);
  if (isNum(xs.max)) x1 = Math.max(x1, xs.max);
  if (xs.log2) {
    x1 = Math.max(x1, x0 * 2);
  } else if (x1 <= x0) {  // one x: the point in the middle (a lone epoch 1 gets no epoch 0 or 2 tick)
    const pad = xs.integer ? 0.5 : Math.abs(x0) * 0.05 || 1;
    x0 -= pad, x1 += pad;
  }
  if (ys.zero) y0 = Math.min(0, y0), y1 = Math.max(0, y1);
  if (y1 - y0 <= Math.abs(y1) * 1e-9) {
    const pad = Math.abs(y1) * 0.05 || 1;
    y1 += pad;
    if (!ys.zero || y0 < 0) y0 -= pad;
  }
  const y = niceTicks(y0, y1, Math.max(3, Math.floor(box.h / 38)), false);
  y0 = Math.floor(y0 / y.step + 1e-9) * y.step, y1 = Math.ceil(y1 / y.step - 1e-9) * y.step;
  if (ys.percent) {  // a fraction: never below 0% or above 100%
    y0 = Math.max(0, y0);
    if (Math.min(1, y1) > y0) y1 = Math.min(1, y1);
  }
  const lx = xs.log2 ? Math.log2 : (v) => v;
  const sx = (v) => box.l + ((lx(v) - lx(x0)) / (lx(x1) - lx(x0))) * box.w;
  const sy = (v) => box.t + box.h - ((v - y0) / (y1 - y0)) * box.h;
  return { x0, x1, y0, y1, ystep: y.step, sx, sy };
}

function xTicks(spec, sc, box) {
  if (spec.x.log2) {
    const out = [];
    for (let v = Math.pow(2, Math.ceil(Math.log2(sc.x0) - 1e-9)); v <= sc.x1 * (1 + 1e-9); v *= 2) out.push(v);
    const every = Math.max(1, Math.ceil(out.length / Math.max(2, Math.floor(box.w / 40))));
    return { values: out.filter((_, i) => i % every === 0), step: 1 };
  }
  return niceTicks(sc.x0, sc.x1, Math.max(2, Math.floor(box.w / 70)), spec.x.integer);
}

function axesSvg(spec, sc, box, w, h, compact) {
  let out = "";
  for (const t of ticks(sc.y0, sc.y1, sc.ystep)) {
    const y = sc.sy(t);
    out += el("line", { x1: px(box.l), x2: px(box.l + box.w), y1: px(y), y2: px(y), stroke: GRID });
    const text = spec.y.percent ? strip((t * 100).toFixed(decimals(sc.ystep * 100))) + "%" : fmtTick(t, sc.ystep);
    out += label(box.l - 6, y + 4, text, { anchor: "end", cls: "tick y" });
  }
  out += el("line", { x1: px(box.l), x2: px(box.l + box.w), y1: px(box.t + box.h), y2: px(box.t + box.h), stroke: FRAME });
  const xt = xTicks(spec, sc, box);
  for (const t of xt.values) {
    const x = sc.sx(t);
    out += el("line", { x1: px(x), x2: px(x), y1: px(box.t + box.h), y2: px(box.t + box.h + 4), stroke: FRAME });
    out += label(x, box.t + box.h + 16, spec.x.log2 ? fmtNum(t, 3) : fmtTick(t, xt.step), { anchor: "middle", cls: "tick x" });
  }
  if (compact) return out;
  if (axisTitle(spec.x)) out += label(box.l + box.w / 2, h - 6, axisTitle(spec.x), { anchor: "middle", fill: INK });
  if (axisTitle(spec.y)) {
    const cy = box.t + box.h / 2;
    out += label(0, 0, axisTitle(spec.y), { anchor: "middle", fill: INK, transform: `translate(12 ${px(cy)}) rotate(-90)` });
  }
  return out;
}

// Vertical lines at given x (restarts, a knee), labelled at the top of the plot.
function markersSvg(spec, sc, box) {
  let out = "", lastLabel = -Infinity;
  for (const m of [...(spec.markers || [])].filter((m) => isNum(m.x)).sort((a, b) => a.x - b.x)) {
    if (m.x < sc.x0 || m.x > sc.x1) continue;
    const x = sc.sx(m.x), name = m.label || "restart";
    const color = isNum(m.series) ? PALETTE[m.series % PALETTE.length] : /restart/.test(name) ? ALERT : MUTED;
    let g = el("line", { x1: px(x), x2: px(x), y1: px(box.t), y2: px(box.t + box.h), stroke: color,
      "stroke-width": 1.2, "stroke-dasharray": "4 3" });
    g += el("rect", { x: px(x - 3), y: px(box.t), width: 6, height: px(box.h), fill: "transparent" });
    if (x - lastLabel > CHAR_W * (name.length + 1)) {  // labels never overprint each other
      g += label(x + 3, box.t + 10, name, { fill: color, size: 10 });
      lastLabel = x;
    }
    out += el("g", { class: "marker", "data-x": m.x }, tip(m.text || `${name} at ${spec.x.label || "x"} ${fmtX(m.x)}`) + g);
  }
  return out;
}

// What a killed generation logged at steps the run trained again: faint and dashed, under the line.
function supersededSvg(series, sc, xName) {
  let out = "";
  series.forEach((s, i) => {
    for (const run of s.earlier) {
      const pts = thin(run), xy = pts.map((p) => px(sc.sx(p[0])) + "," + px(sc.sy(p[1])));
      const note = `${s.name ? s.name + ": " : ""}${xName} ${fmtX(run[0][0])}` +
        (run.length > 1 ? `-${fmtX(run[run.length - 1][0])}` : "") + " before a restart, trained again after it";
      out += el("g", { class: "superseded" }, tip(note) + (xy.length > 1
        ? el("polyline", { points: xy.join(" "), fill: "none", stroke: PALETTE[i % PALETTE.length], "stroke-width": 1.2,
          "stroke-dasharray": "3 2", opacity: 0.55 })
        : el("circle", { cx: px(sc.sx(pts[0][0])), cy: px(sc.sy(pts[0][1])), r: 2.5, fill: "none",
          stroke: PALETTE[i % PALETTE.length], opacity: 0.55 })));
    }
  });
  return out;
}

function seriesSvg(series, sc) {
  let out = "";
  series.forEach((s, i) => {
    const color = PALETTE[i % PALETTE.length], pts = thin(s.points);
    const xy = pts.map((p) => px(sc.sx(p[0])) + "," + px(sc.sy(p[1])));
    // One point is a polyline too (drawing nothing; its dot shows it): every drawn series is one.
    if (s.line !== false && xy.length) {
      out += el("polyline", { class: "series", points: xy.join(" "), fill: "none", stroke: color,
        "stroke-width": 1.6, "stroke-linejoin": "round" });
    }
    // Dots: on request, for few points and a dot-only series; the last point always (a single point too).
    const all = s.dots || s.line === false || pts.length <= 60;
    for (const p of all ? pts : pts.slice(-1)) {
      out += el("circle", { cx: px(sc.sx(p[0])), cy: px(sc.sy(p[1])), r: s.line === false ? 4 : 3, fill: color });
    }
  });
  return out;
}

// The point nearest the cursor's x: a crosshair and its x and y in a box.
function hoverSvg(spec, series, sc, box, hover) {
  if (!isNum(hover) || hover < box.l - 10 || hover > box.l + box.w + 10) return "";
  let best = null;
  series.forEach((s, i) => s.points.forEach((p) => {
    const d = Math.abs(sc.sx(p[0]) - hover);
    if (!best || d < best.d) best = { d, p, s, color: PALETTE[i % PALETTE.length] };
  }));
  if (!best) return "";
  const hx = sc.sx(best.p[0]), hy = sc.sy(best.p[1]);
  const text = `${spec.x.label || "x"} ${fmtX(best.p[0])}: ${fmtY(spec, best.p[1])}` + (series.length > 1 ? ` (${best.s.name})` : "");
  const tw = CHAR_W * text.length + 12, lx = hx + 8 + tw > box.l + box.w ? hx - 8 - tw : hx + 8;
  return el("g", { class: "hover" },
    el("line", { x1: px(hx), x2: px(hx), y1: px(box.t), y2: px(box.t + box.h), stroke: "#9aa3ae", "stroke-width": 0.8 }) +
    el("circle", { cx: px(hx), cy: px(hy), r: 4, fill: "none", stroke: best.color, "stroke-width": 1.5 }) +
    el("rect", { x: px(lx), y: px(box.t), width: px(tw), height: 18, rx: 3, fill: "#fff", stroke: "#d5d9df" }) +
    label(lx + 6, box.t + 13, text, { fill: INK }));
}

// opts: {width, height, hover: the cursor's x in the chart's pixels,
//        compact: no axis titles (a card's heading names the axes)}.
function lineChart(spec, opts = {}) {
  const w = opts.width || 560, h = opts.height || 260;
  spec = { ...spec, x: spec.x || {}, y: spec.y || {} };
  const drawable = (p) => isNum(p[1]) && (!spec.x.log2 || p[0] > 0);
  const series = (spec.series || []).map((s) => ({
    ...s, name: s.name === undefined ? "" : String(s.name),
    points: latestPoints(s.points || []).filter(drawable),
    earlier: supersededRuns(s.points || []).map((run) => run.filter(drawable)).filter((run) => run.length),
  }));
  if (!series.some((s) => s.points.length)) return emptySvg(w, h, spec, spec.empty || "waiting for data");
  const entries = series.map((s) => ({ name: s.points.length ? s.name : `${s.name} (no data)`, dot: s.line === false }));
  if (series.some((s) => s.earlier.length)) entries.push({ name: "before a restart (trained again)", dashed: true, color: MUTED });
  const key = legendLayout(entries, w, 52), top = headingH(spec) + 4;
  const left = axisTitle(spec.y) && !opts.compact ? 60 : 46, bottom = axisTitle(spec.x) && !opts.compact ? 36 : 22;
  const box = { l: left, t: top + key.height + 6, w: w - left - 14, h: 0 };
  box.h = Math.max(40, h - box.t - bottom);
  const sc = lineScales(spec, series, box);
  return svgOpen(w, h, spec.title) + heading(spec, w) + legendSvg(key, top) + axesSvg(spec, sc, box, w, h, opts.compact) +
    markersSvg(spec, sc, box) + supersededSvg(series, sc, spec.x.label || "x") + seriesSvg(series, sc) +
    hoverSvg(spec, series, sc, box, opts.hover) + "</svg>";
}

// ---------- stacked bars (time per step by phase, per rank) ----------

function barChart(spec, opts = {}) {
  const w = opts.width || 560, cats = spec.categories || [], rows = spec.rows || [];
  const totals = rows.map((r) => (r.values || []).reduce((a, v) => a + (isNum(v) ? Math.max(0, v) : 0), 0));
  const longest = Math.max(0, ...totals);
  if (!rows.length || !cats.length || !(longest > 0)) return emptySvg(w, 80, spec, spec.empty || "waiting for data");
  const bar = 22, gap = 8, left = 64, top = headingH(spec) + 4;
  const key = legendLayout(cats.map((name) => ({ name: String(name) })), w, left);
  const y0 = top + key.height + 4, h = y0 + rows.length * (bar + gap) + 8, pw = w - left - 60;
  let out = svgOpen(w, h, spec.title) + heading(spec, w) + legendSvg(key, top);
  rows.forEach((r, ri) => {
    const y = y0 + ri * (bar + gap);
    out += label(left - 6, y + bar / 2 + 4, r.label, { anchor: "end" });
    let x = left;
    cats.forEach((c, ci) => {
      const v = isNum(r.values[ci]) ? Math.max(0, r.values[ci]) : 0, bw = (v / longest) * pw;
      out += el("rect", { class: "bar", x: px(x), y: px(y), width: px(bw), height: bar, fill: PALETTE[ci % PALETTE.length] },
        tip(`${r.label} ${c}: ${fmtNum(v, 4)} ${spec.unit || ""}`.trim()));
      x += bw;
    });
    out += label(x + 4, y + bar / 2 + 4, fmtNum(totals[ri], 4), { fill: INK });
  });
  return out + "</svg>";
}

// ---------- heatmaps ----------

const HEAT_STOPS = [[0, [241, 243, 245]], [0.3, [253, 226, 160]], [0.65, [244, 150, 80]], [1, [200, 45, 30]]];
function heatColor(t) {
  t = Math.max(0, Math.min(1, isNum(t) ? t : 0));
  let i = 1;
  while (i < HEAT_STOPS.length - 1 && t > HEAT_STOPS[i][0]) i++;
  const [a, ca] = HEAT_STOPS[i - 1], [b, cb] = HEAT_STOPS[i], f = (t - a) / (b - a || 1);
  return `rgb(${ca.map((v, k) => Math.round(v + (cb[k] - v) * f)).join(",")})`;
}

function median(values) {
  const v = values.filter(isNum).sort((p, q) => p - q);
  if (!v.length) return 0;
  const h = v.length >> 1;
  return v.length % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// Colour position of each cell, 0 (pale) to 1 (red). "range": from the
// smallest to the largest value. "median": how far a cell is above its
// column's median, up to twice it, so equal ranks stay pale whatever the
// phase's size; the floor (5% of a median row) keeps a phase that takes
// almost no time from lighting up on tiny wobbles.
function heatScale(spec, rows, n) {
  let lo = Infinity, hi = -Infinity;
  for (const r of rows) for (const v of r.values) if (isNum(v)) lo = Math.min(lo, v), hi = Math.max(hi, v);
  if (spec.scale !== "median") return { lo, hi, t: (v) => (hi > lo ? (v - lo) / (hi - lo) : 0) };
  const medians = [...Array(n).keys()].map((c) => median(rows.map((r) => r.values[c])));
  const floor = Math.max(1e-6, 0.05 * medians.reduce((a, b) => a + b, 0));
  return { lo, hi, medians, t: (v, c) => (v - medians[c]) / Math.max(medians[c], floor) };
}

function heatLegend(spec, sc, x, y, w) {
  let out = label(x - 8, y + 9, "colour", { anchor: "end" });
  const n = 24;
  for (let i = 0; i < n; i++) {
    out += el("rect", { x: px(x + (i * w) / n), y: px(y), width: px(w / n + 0.5), height: 10, fill: heatColor(i / (n - 1)) });
  }
  const unit = spec.unit ? " " + spec.unit : "";
  const ends = spec.scale === "median" ? ["≤ median", "≥ 2× median"] : [fmtNum(sc.lo, 3) + unit, fmtNum(sc.hi, 3) + unit];
  out += label(x, y + 23, ends[0]) + label(x + w, y + 23, ends[1], { anchor: "end" });
  if (spec.note) out += label(x, y + 37, spec.note);
  return out;
}

function heatmap(spec, opts = {}) {
  const w = opts.width || 560, cols = spec.columns || [];
  const rows = (spec.rows || []).map((r) => ({ ...r, values: (r.values || []).map((v) => (isNum(v) ? v : null)) }));
  if (!cols.length || !rows.some((r) => r.values.some(isNum))) return emptySvg(w, 80, spec, spec.empty || "waiting for data");
  const sc = heatScale(spec, rows, cols.length), labelW = 90, top = headingH(spec) + (spec.columns_on_top ? 18 : 4);
  const rowH = Math.max(10, Math.min(26, Math.floor(380 / rows.length))), cellW = (w - labelW - 10) / cols.length;
  const axisY = top + rows.length * rowH, legendY = axisY + (spec.columns_on_top ? 12 : 40);
  const h = legendY + (spec.note ? 44 : 30);
  let out = svgOpen(w, h, spec.title) + heading(spec, w);
  const every = spec.columns_on_top ? 1 : Math.max(1, Math.ceil(cols.length / 6));
  cols.forEach((c, i) => {
    if (i % every) return;
    const cx = labelW + (i + 0.5) * cellW, text = isNum(c) ? fmtX(c) : String(c);
    out += spec.columns_on_top ? label(cx, top - 6, text, { anchor: "middle" }) : label(cx, axisY + 14, text, { anchor: "middle" });
  });
  if (!spec.columns_on_top && spec.x_label) out += label(labelW + (w - labelW) / 2, axisY + 30, spec.x_label, { anchor: "middle", fill: INK });
  rows.forEach((r, ri) => {
    const y = top + ri * rowH;
    if (rows.length <= 40 || ri % 4 === 0) {
      const name = label(labelW - 8, y + rowH / 2 + 4, r.label, { anchor: "end", fill: r.highlight ? ALERT : INK, bold: r.highlight, cls: "row" });
      out += r.title ? el("g", {}, tip(r.title) + name) : name;
    }
    r.values.forEach((v, ci) => {
      const t = isNum(v) ? sc.t(v, ci) : 0, x = labelW + ci * cellW;
      const note = r.notes && r.notes[ci] ? r.notes[ci]
        : `${r.label} · ${spec.columns_on_top ? cols[ci] : (spec.x_label || "") + " " + fmtX(cols[ci])}: ` +
          (isNum(v) ? `${fmtNum(v, 4)} ${spec.unit || ""}` : "no data");
      out += el("rect", { class: "cell", x: px(x + 0.5), y: px(y + 0.5), width: px(Math.max(1, cellW - 1)), height: px(rowH - 1),
        fill: isNum(v) ? heatColor(t) : "#fafafa" }, tip(note.trim()));
      if (spec.cell_text && cellW >= 34 && rowH >= 12 && isNum(v)) {
        out += label(x + cellW / 2, y + rowH / 2 + 3.5, fmtNum(v, 3), { anchor: "middle", size: 10, fill: t > 0.75 ? "#fff" : "#333" });
      }
    });
  });
  return out + heatLegend(spec, sc, labelW, legendY, Math.min(240, w - labelW - 10)) + "</svg>";
}

// ---------- timelines ----------

const LANES = ["run", "failures", "checkpoints", "slow ranks"];
// Each kind of event: its lane, its class (mark <cls>), colour and shape.
const MARKS = {
  start: [0, "gen", "#2563eb", "dot"], resume: [0, "resume", "#2563eb", "ring"], finished: [0, "done", "#2f9e44", "square"],
  stopped: [0, "stop", "#555", "square"], failure: [1, "fail", ALERT, "diamond"], restart: [1, "recover", ALERT, "ring"],
  checkpoint: [2, "ckpt", MUTED, "tick"], "slow rank": [3, "slow", "#d99a00", "triangle"],
};

function markShape(shape, color, x, y) {
  if (shape === "tick") return el("rect", { x: px(x - 0.75), y: px(y - 6), width: 1.5, height: 12, fill: color });
  if (shape === "triangle") return el("path", { d: `M${px(x)},${px(y - 6)}L${px(x + 6)},${px(y + 5)}L${px(x - 6)},${px(y + 5)}Z`, fill: color });
  if (shape === "diamond") return el("path", { d: `M${px(x)},${px(y - 7)}L${px(x + 7)},${px(y)}L${px(x)},${px(y + 7)}L${px(x - 7)},${px(y)}Z`, fill: color });
  if (shape === "ring") return el("circle", { cx: px(x), cy: px(y), r: 4.5, fill: "#fff", stroke: color, "stroke-width": 2 });
  if (shape === "square") return el("rect", { x: px(x - 5), y: px(y - 5), width: 10, height: 10, fill: color });
  return el("circle", { cx: px(x), cy: px(y), r: 5, fill: color });
}

function timeline(spec, opts = {}) {
  const w = opts.width || 560, laneH = 24, top = headingH(spec) + 6, labelW = 86;
  const h = top + LANES.length * laneH + 24;
  const marks = (spec.marks || []).filter((k) => isNum(k.t) && MARKS[k.kind]);
  if (!marks.length) return emptySvg(w, h, spec, spec.empty || "waiting for events");
  const first = marks.reduce((a, k) => Math.min(a, k.t), Infinity), last = marks.reduce((a, k) => Math.max(a, k.t), -Infinity);
  const t0 = isNum(spec.start) ? spec.start : first, span = Math.max(1, (isNum(spec.end) ? Math.max(spec.end, last) : last) - t0);
  const pw = w - labelW - 14, sx = (t) => labelW + (Math.max(0, Math.min(span, t - t0)) / span) * pw;
  let out = svgOpen(w, h, spec.title) + heading(spec, w);
  LANES.forEach((name, i) => {
    const y = top + i * laneH;
    if (i % 2 === 0) out += el("rect", { x: labelW, y, width: px(pw), height: laneH, fill: "#f7f8fa" });
    out += label(labelW - 8, y + laneH / 2 + 4, name, { anchor: "end" });
  });
  const axisY = top + LANES.length * laneH, step = durationStep(span, Math.max(2, Math.floor(pw / 80)));
  out += el("line", { x1: labelW, x2: px(labelW + pw), y1: axisY, y2: axisY, stroke: FRAME });
  for (let s = 0; s <= span + 1e-9; s += step) {
    const x = sx(t0 + s);
    out += el("line", { x1: px(x), x2: px(x), y1: top, y2: axisY + 4, stroke: s === 0 ? FRAME : "#eceef1" });
    out += label(x, axisY + 16, fmtDuration(s), { anchor: "middle" });
  }
  // Failures also get a faint line across the lanes, to line up with what followed.
  for (const k of marks.filter((k) => k.kind === "failure")) {
    out += el("line", { x1: px(sx(k.t)), x2: px(sx(k.t)), y1: top, y2: axisY, stroke: ALERT, opacity: 0.35, "stroke-dasharray": "2 3" });
  }
  // Lanes denser than one mark per few pixels fade, to read as a band rather than a wall.
  const perLane = LANES.map((_, i) => marks.filter((k) => MARKS[k.kind][0] === i).length);
  for (const k of marks) {
    const [lane, cls, color, shape] = MARKS[k.kind], x = sx(k.t), y = top + lane * laneH + laneH / 2;
    out += el("g", { class: "mark " + cls, opacity: perLane[lane] > pw / 4 ? 0.4 : undefined },
      tip(`${fmtDuration(k.t - t0)} · ${k.text || k.kind}`) +
      el("rect", { x: px(x - 6), y: px(y - 9), width: 12, height: 18, fill: "transparent" }) + markShape(shape, color, x, y));
  }
  return out + "</svg>";
}

// ---------- in a page ----------

const KINDS = { line: lineChart, bars: barChart, heatmap, timeline };
function render(spec, opts) {
  const draw = KINDS[spec && spec.kind];
  return draw ? draw(spec, opts) : emptySvg((opts && opts.width) || 560, 60, spec || {}, "unknown chart");
}

// Replaces `box`'s content with the chart; works in HTML and SVG documents.
function mount(box, svgText) {
  const doc = new DOMParser().parseFromString(svgText, "image/svg+xml");
  box.replaceChildren(box.ownerDocument.importNode(doc.documentElement, true));
}

// Calls onHover with the cursor's x in `box` (undefined when it leaves), once per frame.
function hoverable(box, onHover) {
  let frame = 0, x;
  const later = () => { frame = 0; onHover(x); };
  box.addEventListener("mousemove", (e) => {
    x = e.clientX - box.getBoundingClientRect().left;
    if (!frame) frame = requestAnimationFrame(later);
  });
  box.addEventListener("mouseleave", () => { x = undefined; if (!frame) frame = requestAnimationFrame(later); });
}

// A static page: every chart of the JSON in element `dataId`, in order, into element `containerId`.
function renderPage(containerId, dataId) {
  const doc = document, container = doc.getElementById(containerId);
  const data = JSON.parse(doc.getElementById(dataId).textContent);
  for (const spec of data.charts || []) {
    const box = doc.createElement("div");
    box.className = "chart " + spec.kind;
    container.appendChild(box);
    const draw = (hover) => mount(box, render(spec, { hover }));
    draw();
    if (spec.kind === "line") hoverable(box, draw);
  }
}

// A standalone SVG file: the chart replaces the text shown where scripts do not run.
function drawDocument(spec) {
  const root = document.documentElement;
  const opts = { width: Number(root.getAttribute("width")) || 640, height: Number(root.getAttribute("height")) || 400 };
  for (const e of [...root.querySelectorAll(".fallback")]) e.remove();
  const holder = document.createElementNS(SVGNS, "g");
  root.appendChild(holder);
  const draw = (hover) => {
    const doc = new DOMParser().parseFromString(render(spec, { ...opts, hover }), "image/svg+xml");
    holder.replaceChildren(...[...doc.documentElement.childNodes].map((n) => document.importNode(n, true)));
  };
  draw();
  hoverable(root, draw);
}

return {
  PALETTE, render, lineChart, barChart, heatmap, timeline, latestPoints, niceStep, niceTicks, ticks,
  fmtTick, fmtNum, fmtPct, fmtDuration, fmtMoney, fmtPrice, fmtBytes, heatColor, mount, hoverable, renderPage, drawDocument,
};
})();
if (typeof module === "object" && module.exports) module.exports = GradmeshCharts;
