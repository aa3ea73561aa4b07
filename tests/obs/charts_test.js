// charts.js under Node: the renderer's pure functions draw SVG strings, so
// its behaviour is checked here without a browser (run by charts_js_test.cc).
//
// usage: node charts_test.js CHARTS_JS [PAGE.html ...]
// Checks the renderer, then each page: its inlined charts.js is CHARTS_JS,
// its data parses and every chart draws well-formed SVG. Prints "ok ..." per
// check and one "PAGE {...}" line per page summarising what was drawn, for
// the C++ side to check against the data it wrote. Exit 1 on a failure.
"use strict";
const assert = require("assert");
const fs = require("fs");

const chartsPath = process.argv[2], pages = process.argv.slice(3);
const source = fs.readFileSync(chartsPath, "utf8");
const C = require(require("path").resolve(chartsPath));

function check(name, fn) {
  fn();
  console.log("ok    " + name);
}

// Well-formed XML (what DOMParser("image/svg+xml") needs): tags nest, text escapes & and <.
function wellFormed(svg) {
  const stack = [], tag = /<(\/?)([a-zA-Z][\w-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>/g;
  let at = 0, m;
  while ((m = tag.exec(svg))) {
    const text = svg.slice(at, m.index);
    assert(!/[<>]/.test(text) && !/&(?!amp;|lt;|gt;|quot;|#39;)/.test(text), `bad text ${JSON.stringify(text)} in ${svg}`);
    if (m[1]) assert.strictEqual(stack.pop(), m[2], `</${m[2]}> closes nothing open in ${svg}`);
    else if (!m[4]) stack.push(m[2]);
    at = tag.lastIndex;
  }
  assert.strictEqual(svg.slice(at), "", "text after the last tag");
  assert.deepStrictEqual(stack, [], "unclosed tags");
  assert(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"'), "an SVG root");
}

const all = (re, s) => [...s.matchAll(re)];
const polylines = (svg) => all(/<polyline class="series" points="([^"]*)"/g, svg).map((m) => m[1].trim().split(/\s+/).map((p) => p.split(",").map(Number)));
const keyTexts = (svg) => all(/<g class="key">.*?<text[^>]*style="fill:([^;]+);[^"]*">([^<]*)<\/text><\/g>/g, svg).map((m) => ({ color: m[1], name: m[2] }));
const tickTexts = (svg, axis) => all(new RegExp(`class="tick ${axis}"[^>]*>([^<]*)<`, "g"), svg).map((m) => m[1]);
const markers = (svg) => all(/<g class="marker" data-x="([^"]*)"><title>[^<]*<\/title><line x1="([^"]*)".*?<\/g>/g, svg)
  .map((m) => ({ x: Number(m[1]), px: Number(m[2]), labelled: m[0].includes(">restart</text>") }));

const line = (series, extra = {}) => ({ kind: "line", title: "Loss", x: { label: "step" }, y: { label: "loss" }, series, ...extra });

check("the source is safe inline in a <script> element and a CDATA section", () => {
  for (const never of ["</script", "<!--", "]]>", " src=", "<link"]) assert(!source.includes(never), never);
});

check("legend text is drawn in its series' colour, as a style no page CSS overrides", () => {
  const svg = C.lineChart(line([{ name: "A", points: [[0, 1], [1, 2]] }, { name: "B <b>", points: [[0, 2], [1, 3]] }]));
  wellFormed(svg);
  assert.deepStrictEqual(keyTexts(svg), [{ color: C.PALETTE[0], name: "A" }, { color: C.PALETTE[1], name: "B &lt;b&gt;" }]);
  const strokes = all(/<polyline[^>]*stroke="([^"]*)"/g, svg).map((m) => m[1]);
  assert.deepStrictEqual(strokes, [C.PALETTE[0], C.PALETTE[1]]);
  assert(!/<text[^>]* fill=/.test(svg), "text colours are styles, not fill attributes a stylesheet beats");
});

check("the key sits outside the plot: above its top edge", () => {
  const svg = C.lineChart(line([{ name: "A", points: [[0, 1], [1, 2]] }, { name: "B", points: [[0, 2], [1, 3]] }]));
  const keyBottom = Math.max(...all(/<g class="key">.*?<text x="[^"]*" y="([^"]*)"/g, svg).map((m) => Number(m[1])));
  const plotTop = Math.min(...polylines(svg).flat().map((p) => p[1]));
  assert(keyBottom < plotTop, `key at y ${keyBottom}, the highest point at ${plotTop}`);
});

check("points of a generation that a later one redid leave the line and are drawn as redone", () => {
  const redone = [[10, 5, 0], [20, 4, 0], [30, 3, 0], [40, 2, 0], [50, 1, 0], [30, 3.5, 1], [40, 3.2, 1], [50, 3.0, 1], [60, 2.8, 1]];
  const kept = [[10, 5], [20, 4], [30, 3.5], [40, 3.2], [50, 3.0], [60, 2.8]];
  assert.deepStrictEqual(C.latestPoints(redone).map((p) => [p[0], p[1]]), kept);
  // The line is the latest points' only; the killed attempt's steps 30-50 are a faint dashed line with its own key.
  const svg = C.lineChart(line([{ name: "loss", points: redone }])), plain = C.lineChart(line([{ name: "loss", points: kept }]));
  wellFormed(svg);
  assert.strictEqual(polylines(svg).length, 1);
  const sx = (svgText) => polylines(svgText)[0].map((p) => p[0]);
  assert.deepStrictEqual(sx(svg), sx(plain), "the same line at the same x");
  const dashed = all(/<g class="superseded"><title>([^<]*)<\/title><polyline points="([^"]*)"[^>]*stroke-dasharray/g, svg);
  assert.strictEqual(dashed.length, 1, svg);
  assert.strictEqual(dashed[0][1], "loss: step 30-50 before a restart, trained again after it");
  assert.strictEqual(dashed[0][2].trim().split(/\s+/).length, 3);
  assert(svg.includes(">before a restart (trained again)</text>") && !plain.includes("before a restart"), "keyed only when there are some");
  // A generation that has not yet caught up still hides what it will redo.
  assert.deepStrictEqual(C.latestPoints([[10, 1, 0], [20, 1, 0], [30, 1, 0], [20, 2, 1]]).map((p) => p[0]), [10, 20]);
  // Within one generation the last line for an x counts.
  assert.deepStrictEqual(C.latestPoints([[1, 1], [2, 2], [2, 3]]), [[1, 1], [2, 3]]);
});

check("a restart marker is a vertical line labelled restart at its x", () => {
  const svg = C.lineChart(line([{ name: "loss", points: [[0, 3], [100, 2], [200, 1], [300, 0.5]] }],
    { markers: [{ x: 200, label: "restart", text: "restart: resumed at step 200" }] }));
  wellFormed(svg);
  const [m] = markers(svg);
  assert(m && m.labelled, "a labelled marker");
  assert.strictEqual(m.px, polylines(svg)[0][2][0], "at the x of step 200's point");
  assert(svg.includes("<title>restart: resumed at step 200</title>"));
});

check("ticks are nice: 1, 2 or 5 times a power of ten, with units", () => {
  for (const [lo, hi] of [[0, 1], [0.0123, 0.987], [3, 47], [0, 45000], [1.2e6, 3.7e6], [-3, 2], [0.3, 0.31]]) {
    for (const count of [3, 5, 8]) {
      const { step, values } = C.niceTicks(lo, hi, count);
      const mantissa = step / Math.pow(10, Math.floor(Math.log10(step) + 1e-9));
      assert([1, 2, 5].some((m) => Math.abs(mantissa - m) < 1e-9), `step ${step} for ${lo}..${hi}`);
      assert(values.length >= 1 && values.length <= 3 * count, `${values.length} ticks for ${lo}..${hi}`);
      for (const v of values) assert(Math.abs(v / step - Math.round(v / step)) < 1e-6, `${v} is not a multiple of ${step}`);
    }
  }
  const svg = C.lineChart({ kind: "line", x: { label: "step" }, y: { label: "throughput", unit: "samples/s", zero: true },
    series: [{ name: "samples/s", points: [[0, 41000], [50, 45500], [100, 43000]] }] });
  assert.deepStrictEqual(tickTexts(svg, "y"), ["0", "10k", "20k", "30k", "40k", "50k"]);
  assert(svg.includes(">throughput (samples/s)</text>"), "the unit on the axis");
  const pct = C.lineChart({ kind: "line", x: { label: "epoch", integer: true }, y: { label: "accuracy", percent: true },
    series: [{ name: "acc", points: [[1, 0.8], [2, 0.85], [3, 0.86]] }] });
  assert(tickTexts(pct, "y").every((t) => /^\d+(\.\d+)?%$/.test(t)), tickTexts(pct, "y").join(" "));
  assert.deepStrictEqual(tickTexts(pct, "x"), ["1", "2", "3"], "whole epochs only");
});

check("values far above their differences keep few finite ticks", () => {
  const svg = C.lineChart(line([{ name: "a", points: [[0, 1e17], [1, 1e17 + 16]] }]));
  wellFormed(svg);
  assert(svg.length < 20000 && !svg.includes("NaN") && !svg.includes("Infinity"));
  assert(tickTexts(svg, "y").every((t) => !t.includes("e+")), "no exponent on an axis");
});

check("the tooltip shows the x of the point under the cursor", () => {
  const pts = [[100, 3], [200, 2], [300, 1]];
  const svg0 = C.lineChart(line([{ name: "loss", points: pts }]));
  const x200 = polylines(svg0)[0][1][0];
  const svg = C.lineChart(line([{ name: "loss", points: pts }]), { hover: x200 + 3 });
  wellFormed(svg);
  assert(/<g class="hover">.*>step 200: 2<\/text><\/g>/.test(svg), svg.slice(svg.indexOf('<g class="hover">')));
  assert(!svg.includes("step 0"));
  assert(!C.lineChart(line([{ name: "loss", points: pts }]), { hover: -500 }).includes('class="hover"'), "off the chart: none");
});

check("waiting for data only while there is no point at all; one point is a dot", () => {
  assert(C.lineChart(line([])).includes(">waiting for data</text>"));
  assert(C.lineChart(line([{ name: "a", points: [[0, null], [1, null]] }])).includes(">waiting for data</text>"));
  assert(C.lineChart({ ...line([]), empty: "no data" }).includes(">no data</text>"));
  const one = C.lineChart(line([{ name: "a", points: [[3, 0.5]] }]));
  wellFormed(one);
  assert(!one.includes("waiting for data") && !one.includes("NaN"));
  assert.strictEqual(all(/<circle /g, one).length, 1, "one dot");
  const epoch = C.lineChart({ kind: "line", x: { label: "epoch", integer: true, min: 1, max: 1 }, y: { label: "accuracy", percent: true },
    series: [{ name: "test accuracy", dots: true, points: [[1, 0.795]] }] });
  assert.deepStrictEqual(tickTexts(epoch, "x"), ["1"], "a one-epoch run's only epoch, alone on its axis");
  const later = C.lineChart(line([{ name: "a", points: [] }, { name: "b", points: [[3, 0.5]] }]));
  assert(later.includes(">a (no data)</text>") && !later.includes("waiting for data"));
});

check("a log2 axis ticks at powers of two; a dots-only series draws no line", () => {
  const svg = C.lineChart({ kind: "line", x: { label: "workers", log2: true, integer: true }, y: { label: "samples/s", zero: true },
    series: [{ name: "predicted", points: [1, 2, 4, 8, 16].map((n) => [n, 1000 * Math.sqrt(n)]) },
      { name: "measured", line: false, points: [[1, 1000], [2, 1500]] }], markers: [{ x: 8, label: "knee: 8" }] });
  wellFormed(svg);
  assert.deepStrictEqual(tickTexts(svg, "x"), ["1", "2", "4", "8", "16"]);
  assert.strictEqual(polylines(svg).length, 1);
  assert(svg.includes(">knee: 8</text>"));
});

check("bars: one per rank and phase, with its value in the tooltip", () => {
  const svg = C.barChart({ kind: "bars", title: "phases", unit: "ms", categories: ["forward", "backward", "comm"],
    rows: [{ label: "rank 0", values: [1, 2, 0.5] }, { label: "rank 1", values: [1.1, 2.2, 0.1] }] });
  wellFormed(svg);
  assert.strictEqual(all(/<rect class="bar"/g, svg).length, 6);
  assert(svg.includes("<title>rank 1 comm: 0.1 ms</title>"));
  assert.deepStrictEqual(keyTexts(svg).map((k) => k.color), C.PALETTE.slice(0, 3));
});

check("heatmaps: a cell per row and column; timelines: a mark per event", () => {
  const svg = C.heatmap({ kind: "heatmap", title: "h", unit: "ms", x_label: "step", columns: [50, 100, 150],
    rows: [{ label: "ranks 0-3", values: [1, 2, null] }, { label: "ranks 4-7", values: [1, 9, 1] }] });
  wellFormed(svg);
  assert.strictEqual(all(/<rect class="cell"/g, svg).length, 6);
  assert(svg.includes("ranks 4-7 · step 100: 9 ms") && svg.includes("ranks 0-3 · step 150: no data"));
  const tl = C.timeline({ kind: "timeline", start: 0, end: 60, marks: [{ t: 10, kind: "failure", text: "rank 1 died" },
    { t: 12, kind: "restart", text: "resumed at step 40" }, { t: 30, kind: "checkpoint", text: "c" }] });
  wellFormed(tl);
  assert(tl.includes('<g class="mark fail">') && tl.includes("<title>10s · rank 1 died</title>"));
  // A short run's marks keep their tenths, so they read where they are drawn.
  const short = C.timeline({ kind: "timeline", start: 0, end: 3.2, marks: [{ t: 1.6, kind: "restart", text: "r" }, { t: 3.2, kind: "finished", text: "f" }] });
  assert(short.includes("<title>1.6s · r</title>") && short.includes("<title>3.2s · f</title>"), short);
  assert.deepStrictEqual([0, 1, 2.04, 59.6, 61, 3725].map(C.fmtDuration), ["0s", "1s", "2s", "1m", "1m1s", "1h2m"]);
  assert(C.timeline({ kind: "timeline", marks: [] }).includes("waiting for events"));
});

check("money and bytes read as the C++ reports write them (formatting_cases.json)", () => {
  const cases = JSON.parse(fs.readFileSync(require("path").join(__dirname, "formatting_cases.json"), "utf8"));
  for (const [v, currency, text] of cases.money) assert.strictEqual(C.fmtMoney(v, currency), text, `${v} ${currency}`);
  for (const [v, per, text] of cases.bytes) assert.strictEqual(C.fmtBytes(v, per), text, `${v}${per}`);
  assert.strictEqual(C.fmtPrice(0.0425, "USD"), "$0.0425");
  assert.strictEqual(C.fmtMoney(undefined, "USD"), "—");
});

check("a marker of a compared run takes its series' colour", () => {
  const svg = C.lineChart(line([{ name: "A", points: [[0, 1], [9, 2]] }, { name: "B", points: [[0, 2], [9, 3]] }],
    { markers: [{ x: 4, label: "B: restart", series: 1 }] }));
  assert(svg.includes(`style="fill:${C.PALETTE[1]};font-size:10px">B: restart</text>`), svg);
});

// ---------- the pages ----------

function checkPage(file) {
  const page = fs.readFileSync(file, "utf8");
  const data = /<script type="application\/json" id="gradmesh-chart-data">([^<]*)<\/script>/.exec(page);
  assert(data, `${file}: no chart data`);
  const scripts = all(/<script>\n([\s\S]*?)\nGradmeshCharts\.renderPage\(/g, page);
  assert.strictEqual(scripts.length, 1, `${file}: charts.js inlined once`);
  assert.strictEqual(scripts[0][1], source, `${file}: the inlined renderer is charts.js`);
  const summary = JSON.parse(data[1]).charts.map((spec) => {
    const svg = C.render(spec);
    wellFormed(svg);
    assert(!/NaN|undefined|Infinity/.test(svg), `${file}: ${spec.title}`);
    for (const t of [...tickTexts(svg, "x"), ...tickTexts(svg, "y")]) assert(!t.includes("e+"), `${spec.title}: tick ${t}`);
    return { kind: spec.kind, title: spec.title, points: polylines(svg).map((p) => p.length), keys: keyTexts(svg),
      markers: markers(svg).map((m) => m.x), cells: all(/<rect class="cell"/g, svg).length,
      marks: all(/<g class="mark /g, svg).length, empty: svg.includes('class="empty"') };
  });
  console.log("PAGE " + JSON.stringify({ file, charts: summary }));
}
for (const file of pages) checkPage(file);
console.log("all passed");
