// util.js: DOM and formatting helpers shared by the other scripts (no globals: page.py wraps
// every script of the page in one function scope).

const SVG_NS = "http://www.w3.org/2000/svg";

/** An HTML element: attributes (null/false values skipped) and children (strings -> text). */
function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  appendAll(node, children);
  return node;
}

/** An SVG element, like h(). */
function s(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttrs(node, attrs);
  appendAll(node, children);
  return node;
}

function setAttrs(node, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    node.setAttribute(name, value === true ? "" : String(value));
  }
}

function appendAll(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" || typeof child === "number" ? String(child) : child);
  }
}

/** Remove every child of a node. */
function clear(node) {
  node.replaceChildren();
  return node;
}

/** A number with 3 significant digits ("—" for null / undefined). */
function fmt(x, digits = 3) {
  if (x === null || x === undefined) return "—";
  if (x === 0) return "0";
  const abs = Math.abs(x);
  if (abs >= 1e-3 && abs < 1e5) return String(Number(x.toPrecision(digits)));
  return x.toExponential(digits - 1);
}

/** A share in [0, 1] as a percent ("12.3%"). */
function pct(x) {
  return x === null || x === undefined ? "—" : `${fmt(100 * x)}%`;
}

/** A percent value as text ("93.1%"). */
function pctOf(x) {
  return x === null || x === undefined ? "—" : `${fmt(x)}%`;
}

/** Sorted integer ids as compact ranges: [0, 1, 2, 5, 7, 8] -> "0–2, 5, 7–8". */
function ranges(ids) {
  const parts = [];
  let i = 0;
  while (i < ids.length) {
    let j = i;
    while (j + 1 < ids.length && ids[j + 1] === ids[j] + 1) j++;
    parts.push(j === i ? String(ids[i]) : `${ids[i]}–${ids[j]}`);
    i = j + 1;
  }
  return parts.join(", ");
}

/** A class index as its name (the index itself when the model has no name for it). */
function className(model, c) {
  if (c === null || c === undefined) return "—";
  const name = model.class_names[c];
  return name === undefined ? String(c) : name;
}

/** The displayed size of one stored image cell for a target width in CSS pixels: integer
 * upscaling (pixelated) for small images, plain downscaling for large ones. */
function cellSize(images, target) {
  const scale = images.width >= target ? target / images.width : Math.floor(target / images.width);
  return {
    w: Math.max(1, Math.round(images.width * scale)),
    h: Math.max(1, Math.round(images.height * scale)),
    pixelated: scale > 1,
  };
}

/** The URL of dimension j's strip, or null when the strip is empty (no file). */
function stripUrl(model, j) {
  if (model.dims.top[j].length === 0) return null;
  const inline = model.images.inline;
  if (inline) return inline[String(j)] || null;
  return `img/${model.key}/${j}.${model.images.ext}`;
}

/** A window of `count` cells of dimension j's strip starting at cell `first`, cropped with
 * CSS (one lazy <img> of the whole strip, shifted left inside an overflow-hidden box). */
function stripWindow(model, j, first, count, size) {
  const url = stripUrl(model, j);
  const cells = model.dims.top[j].length;
  const box = h("div", {
    class: "strip",
    style: `width:${count * size.w}px;height:${size.h}px`,
  });
  if (url === null || count === 0) return box;
  box.append(
    h("img", {
      src: url,
      alt: `dimension ${j}, most activating images`,
      loading: "lazy",
      decoding: "async",
      width: cells * size.w,
      height: size.h,
      class: size.pixelated ? "pixelated" : null,
      style: first ? `margin-left:${-first * size.w}px` : null,
    }),
  );
  return box;
}

/** Round "nice" tick values covering [lo, hi] (about n of them). */
function ticks(lo, hi, n = 5) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((v) => v >= raw);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    out.push(Number(v.toPrecision(12)));
  }
  return out;
}
