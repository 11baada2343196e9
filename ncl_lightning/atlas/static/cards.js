// cards.js: a dimension's card, the incrementally rendered list of cards, the list of dead
// dimensions and the detail view of one dimension.

const BATCH = 60; // cards rendered at a time; more when the sentinel scrolls into view
const CARD_CELL = 40; // CSS pixels of one image in a card
const DETAIL_CELL = 96; // CSS pixels of one image in the detail view

/** The stats of dimension j as [label, text, title] rows (SEPIN and gate when measured). */
function dimStats(model, j) {
  const d = model.dims;
  const rows = [
    ["EA", fmt(d.ea[j]), "expected activation: mean of ẑ over the split"],
    ["freq", pct(d.freq[j]), `activation frequency: share of samples with |ẑ| > ${model.eps}`],
    ["cons.", pctOf(d.consistency[j]), "semantic consistency: activating samples in the majority class"],
  ];
  if (Array.isArray(d.sepin)) rows.push(["SEPIN", fmt(d.sepin[j]), "per-dimension SEPIN"]);
  if (Array.isArray(d.gate)) rows.push(["gate", pct(d.gate[j]), "gate open frequency"]);
  return rows;
}

function statList(rows) {
  return h("dl", { class: "stats" }, rows.map(([label, text, title]) => h("div", {}, h("dt", { title }, label), h("dd", {}, text))));
}

/** The card of live dimension j: a link to its detail view. */
function card(model, j, href) {
  const d = model.dims;
  const size = cellSize(model.images, CARD_CELL);
  const shown = Math.min(model.images.card, d.top[j].length);
  return h(
    "a",
    {
      class: "card",
      href,
      "data-dim": j,
      "data-model": model.key,
      "data-ea": d.ea[j],
      "data-freq": d.freq[j],
      "data-consistency": d.consistency[j],
      "data-majority": d.majority[j],
      "data-sepin": Array.isArray(d.sepin) ? d.sepin[j] : null,
      "data-gate": Array.isArray(d.gate) ? d.gate[j] : null,
    },
    h(
      "div",
      { class: "card-head" },
      h("span", { class: "dim-id" }, `#${j}`),
      h("span", { class: "majority", title: "majority class" }, `class ${className(model, d.majority[j])}`),
    ),
    stripWindow(model, j, 0, shown, size),
    miniHistogram(model, j),
    statList(dimStats(model, j)),
  );
}

/** Cards of `dims` appended to `container` BATCH at a time: the next batch when the sentinel
 * after the list comes within 1,500 px of the viewport (or its button is pressed). */
class CardList {
  constructor(container, model, dims, hrefOf, onFirst) {
    this.container = container;
    this.model = model;
    this.dims = dims;
    this.hrefOf = hrefOf;
    this.next = 0;
    this.button = h("button", { type: "button", class: "more" }, "");
    this.button.addEventListener("click", () => this.more());
    this.sentinel = h("div", { class: "sentinel" }, this.button);
    container.after(this.sentinel);
    this.observer = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) this.more();
    }, { rootMargin: "1500px 0px" });
    this.more();
    if (onFirst) onFirst();
  }

  more() {
    const end = Math.min(this.next + BATCH, this.dims.length);
    const fragment = document.createDocumentFragment();
    for (let i = this.next; i < end; i++) fragment.append(card(this.model, this.dims[i], this.hrefOf(this.dims[i])));
    this.container.append(fragment);
    this.next = end;
    this.observer.unobserve(this.sentinel);
    if (end >= this.dims.length) {
      this.sentinel.hidden = true;
      return;
    }
    this.button.textContent = `show more (${this.dims.length - end} left)`;
    this.observer.observe(this.sentinel); // a fresh observe reports at once if still in view
  }

  destroy() {
    this.observer.disconnect();
    this.sentinel.remove();
  }
}

/** The dead dimensions of a model as compact id ranges. */
function deadList(node, model) {
  const dead = [];
  model.dims.dead.forEach((isDead, j) => isDead && dead.push(j));
  node.dataset.count = String(dead.length);
  node.textContent = dead.length ? ranges(dead) : "none";
  return dead.length;
}

/** The detail view of dimension j: stats, the big histogram, every image of the strip with
 * its value (and class when the atlas records the images' labels); prev/next links. */
function renderDetail(node, model, j, links) {
  const d = model.dims;
  const size = cellSize(model.images, DETAIL_CELL);
  const nav = h(
    "nav",
    { class: "detail-nav" },
    h("a", { id: "detail-back", href: links.back }, "← all dimensions"),
    h("a", { id: "detail-prev", href: links.prev, class: links.prev ? null : "disabled" }, "‹ prev"),
    h("a", { id: "detail-next", href: links.next, class: links.next ? null : "disabled" }, "next ›"),
    h("span", { class: "hint" }, "keys: ← → Esc"),
  );
  clear(node).append(nav, h("h2", { id: "detail-title" }, `${model.name} · dimension ${j}`));
  node.dataset.dim = String(j);
  node.dataset.model = model.key;
  if (d.dead[j]) {
    node.append(h("p", { class: "empty" }, `Dimension ${j} is dead: no sample of the split has |ẑ| > ${model.eps}.`));
    return;
  }
  const activating = d.hist[j].reduce((a, b) => a + b, 0);
  const rows = [
    ...dimStats(model, j),
    ["majority", className(model, d.majority[j]), "class of most activating samples"],
    ["activating", `${activating} of ${model.num_samples}`, "samples with |ẑ| > eps"],
  ];
  node.append(h("div", { class: "detail-top" }, statList(rows), bigHistogram(model, j)));
  const labels = Array.isArray(d.top_labels) ? d.top_labels[j] : null;
  const cells = d.top[j].map((index, i) =>
    h(
      "figure",
      { class: "cell", "data-index": index },
      stripWindow(model, j, i, 1, size),
      h(
        "figcaption",
        {},
        labels ? h("span", { class: "cls" }, className(model, labels[i])) : null,
        h("span", { class: "val", title: "ẑ of this image" }, fmt(d.top_values[j][i])),
        h("span", { class: "idx", title: "index in the split" }, `#${index}`),
      ),
    ),
  );
  node.append(
    h("h3", {}, `Most activating images (${cells.length})`),
    cells.length ? h("div", { class: "cells" }, cells) : h("p", { class: "empty" }, "No image stored for this dimension."),
  );
}
