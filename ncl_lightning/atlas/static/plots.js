// plots.js: the inline SVG plots (class histograms, the sorted EA curve, the histogram of
// per-dimension consistency), drawn from the embedded columns.

/** The classes of a histogram with the most samples: "seven 93%, one 4%". */
function topClasses(model, counts, k) {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return "no activating sample";
  return counts
    .map((n, c) => [n, c])
    .filter(([n]) => n > 0)
    .sort((a, b) => b[0] - a[0] || a[1] - b[1])
    .slice(0, k)
    .map(([n, c]) => `${className(model, c)} ${fmt((100 * n) / total)}%`)
    .join(", ");
}

/** A card's small class histogram: one path for the bars, the majority class highlighted. */
function miniHistogram(model, j) {
  const counts = model.dims.hist[j];
  const major = model.dims.majority[j];
  const max = Math.max(1, ...counts);
  const bar = 10;
  const height = 40;
  let path = "";
  let majorBar = null;
  counts.forEach((n, c) => {
    if (n === 0) return;
    const top = height - Math.max(1, (height * n) / max);
    if (c === major) majorBar = s("rect", { class: "maj", x: c * bar, y: top, width: bar - 2, height: height - top });
    else path += `M${c * bar},${height}V${top.toFixed(2)}h${bar - 2}V${height}z`;
  });
  return s(
    "svg",
    {
      class: "hist",
      viewBox: `0 0 ${counts.length * bar} ${height}`,
      preserveAspectRatio: "none",
      role: "img",
      "aria-label": "class histogram",
    },
    s("title", {}, `activating samples by class: ${topClasses(model, counts, 3)}`),
    s("path", { class: "base", d: `M0,${height - 0.5}H${counts.length * bar}` }),
    s("path", { class: "bar", d: path }),
    majorBar,
  );
}

/** Axes frame of a plot: a y grid with tick labels and an x axis line. */
function frame(g, box, yTicks, y, yFormat) {
  for (const t of yTicks) {
    g.append(
      s("line", { class: "grid", x1: box.left, x2: box.right, y1: y(t), y2: y(t) }),
      s("text", { class: "tick", x: box.left - 6, y: y(t) + 4, "text-anchor": "end" }, yFormat(t)),
    );
  }
  g.append(s("line", { class: "axis", x1: box.left, x2: box.right, y1: box.bottom, y2: box.bottom }));
}

/** A plot's legend: one swatch and name per series, in a row above the plot. */
function legend(box, names) {
  return s(
    "g",
    { class: "legend" },
    names.map((name, i) => [
      s("rect", { class: `swatch s${i}`, x: box.left + 230 * i, y: 6, width: 12, height: 12 }),
      s("text", { x: box.left + 18 + 230 * i, y: 16 }, name),
    ]),
  );
}

function plotBox(width, height) {
  return { left: 56, right: width - 12, top: 30, bottom: height - 40, width, height };
}

function axisLabels(box, xLabel, yLabel) {
  return [
    s("text", { class: "label", x: (box.left + box.right) / 2, y: box.height - 6, "text-anchor": "middle" }, xLabel),
    s(
      "text",
      { class: "label", transform: `translate(14 ${(box.top + box.bottom) / 2}) rotate(-90)`, "text-anchor": "middle" },
      yLabel,
    ),
  ];
}

/** The detail view's class histogram: one bar per class with its count in a tooltip. */
function bigHistogram(model, j) {
  const counts = model.dims.hist[j];
  const total = Math.max(1, counts.reduce((a, b) => a + b, 0));
  const box = plotBox(Math.max(480, Math.min(1100, 40 + 24 * counts.length)), 240);
  const max = Math.max(1, ...counts);
  const y = (v) => box.bottom - ((box.bottom - box.top) * v) / max;
  const step = (box.right - box.left) / counts.length;
  const svg = s("svg", { id: "detail-hist", class: "plot", viewBox: `0 0 ${box.width} ${box.height}`, width: box.width });
  frame(svg, box, ticks(0, max, 4).filter(Number.isInteger), y, String);
  const labelEvery = Math.ceil(counts.length / 25);
  counts.forEach((n, c) => {
    const x = box.left + c * step;
    svg.append(
      s(
        "rect",
        { class: c === model.dims.majority[j] ? "maj" : "bar", x: x + step * 0.1, y: y(n), width: step * 0.8, height: box.bottom - y(n) },
        s("title", {}, `${className(model, c)}: ${n} (${fmt((100 * n) / total)}%)`),
      ),
    );
    if (c % labelEvery === 0) {
      const label = counts.length <= 25 ? className(model, c) : String(c);
      svg.append(s("text", { class: "tick", x: x + step / 2, y: box.bottom + 14, "text-anchor": "middle" }, label.slice(0, 10)));
    }
  });
  svg.append(...axisLabels(box, "class", "activating samples"));
  return svg;
}

/** The EA of every dimension of each model, sorted from high to low, on one plot. */
function eaCurve(models, sortedEa) {
  const box = plotBox(560, 280);
  const all = sortedEa.flat();
  const lo = Math.min(0, ...all);
  const hi = Math.max(lo + 1e-12, ...all);
  const n = Math.max(2, ...sortedEa.map((v) => v.length));
  const x = (i) => box.left + ((box.right - box.left) * i) / (n - 1);
  const y = (v) => box.bottom - ((box.bottom - box.top) * (v - lo)) / (hi - lo);
  const svg = s("svg", { id: "plot-ea", class: "plot", viewBox: `0 0 ${box.width} ${box.height}`, role: "img" });
  svg.append(s("title", {}, "expected activation of every dimension, sorted"));
  frame(svg, box, ticks(lo, hi, 5), y, (t) => fmt(t));
  for (const t of ticks(0, n - 1, 5)) {
    svg.append(s("text", { class: "tick", x: x(t), y: box.bottom + 14, "text-anchor": "middle" }, String(t)));
  }
  sortedEa.forEach((values, i) => {
    const points = values.map((v, k) => `${x(k).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    svg.append(s("polyline", { class: `series s${i}`, points, "data-key": models[i].key }));
  });
  svg.append(legend(box, models.map((m) => m.name)), ...axisLabels(box, "dimension rank (by EA)", "EA"));
  return svg;
}

/** Histogram of the consistency of the live dimensions (10 bins of 10%), as a share of each
 * model's live dimensions, bars of the models side by side. */
function consistencyHistogram(models) {
  const box = plotBox(560, 280);
  const shares = models.map((m) => {
    const bins = new Array(10).fill(0);
    let live = 0;
    m.dims.consistency.forEach((c, j) => {
      if (c === null || m.dims.dead[j]) return;
      bins[Math.min(9, Math.floor(c / 10))] += 1;
      live += 1;
    });
    return { bins: bins.map((b) => (live ? (100 * b) / live : 0)), live };
  });
  const max = Math.max(1, ...shares.flatMap((v) => v.bins));
  const y = (v) => box.bottom - ((box.bottom - box.top) * v) / max;
  const step = (box.right - box.left) / 10;
  const svg = s("svg", { id: "plot-consistency", class: "plot", viewBox: `0 0 ${box.width} ${box.height}`, role: "img" });
  svg.append(s("title", {}, "consistency of the live dimensions"));
  frame(svg, box, ticks(0, max, 5), y, (t) => `${fmt(t)}%`);
  const w = (step * 0.8) / models.length;
  shares.forEach((v, i) =>
    v.bins.forEach((share, b) => {
      const x = box.left + b * step + step * 0.1 + i * w;
      svg.append(
        s(
          "rect",
          { class: `series s${i}`, x, y: y(share), width: w, height: box.bottom - y(share) },
          s("title", {}, `${models[i].name}, consistency ${10 * b}–${10 * b + 10}%: ${fmt(share)}% of live dims`),
        ),
      );
    }),
  );
  for (let b = 0; b <= 10; b += 2) {
    svg.append(s("text", { class: "tick", x: box.left + b * step, y: box.bottom + 14, "text-anchor": "middle" }, `${10 * b}`));
  }
  const names = models.map((m, i) => `${m.name} (${shares[i].live} live)`);
  svg.append(legend(box, names), ...axisLabels(box, "semantic consistency (%)", "share of live dims (%)"));
  return svg;
}
