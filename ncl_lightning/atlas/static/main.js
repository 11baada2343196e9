// main.js: the page's views and the router. Everything is drawn from the JSON document in
// <script id="atlas-data">; nothing is fetched (the page works from file://).
//
// DOM contract (tests and users may rely on these):
//   #title            the atlas title            #models     nav: a[data-key] per model,
//   #route-error      a bad URL, explained                    a#compare-link (>= 2 models)
//   #notes            .note banners (data-key)   #metrics    table: th[data-key] per model of
//   #compare-pick     #compare-a, #compare-b                  the view, tr[data-row] per row
//   #head-row         #overview (the table) and #summary: #plot-ea, #plot-consistency
//                     (inline SVG; .series.s0 / .s1 per model); hidden in the detail view
//   #controls         #sort (option[value] ea|consistency|freq|sepin|gate|id, disabled when
//                     a model of the view lacks the column), #order (desc|asc),
//                     #class-filter ("" or a class index), #min-freq (percent),
//                     #jump + #jump-go (opens the detail), #jump-msg
//   #browse           #count (data-shown, data-live), #cards, #dead-list (data-count)
//   #compare          #cards-a, #cards-b, #count-a, #count-b, #dead-list-a, #dead-list-b
//   .card[data-dim]   a link to the detail; data-model, data-ea, data-freq,
//                     data-consistency, data-majority, data-sepin, data-gate (raw values)
//   #detail           [data-model][data-dim]; #detail-back, #detail-prev, #detail-next,
//                     #detail-hist (SVG), figure.cell[data-index] (one per image)
//   html[data-view]   browse | detail | compare
//   html[data-routed] the location.hash the page last finished drawing
//   performance.mark("atlas-first-cards") once the first cards are in the DOM.
//
// URLs (location.hash; reload, back and forward restore the view):
//   #/m1                 browse model m1
//   #/m1/dim/42          detail of dimension 42 of m1 (+ cmp=m0/m1 when opened from compare:
//                        its back link returns there)
//   #/compare/m0/m1      compare mode, A = m0, B = m1
//   any of them + ?sort=consistency&order=asc&class=3&minfreq=1.5 (minfreq in percent)

const atlas = JSON.parse(document.getElementById("atlas-data").textContent);
const byKey = new Map(atlas.models.map((m) => [m.key, m]));
const $ = (id) => document.getElementById(id);

const METRICS = [
  ["sparsity", "sparsity", pct],
  ["active_dims", "active dims", String],
  ["dead_dims", "dead dims", String],
  ["semantic_consistency", "consistency (%)", fmt],
  ["semantic_entropy", "H_s (nats)", fmt],
  ["accuracy", "accuracy", pct],
  ["gate_open_rate", "gate open rate", pct],
];
const INFO = [
  ["method", "method", (m) => m.method],
  ["checkpoint", "checkpoint", (m) => m.checkpoint || "—"],
  ["data", "data", (m) => `${m.data} (${m.split})`],
  ["samples", "samples", (m) => String(m.num_samples)],
  ["features", "features", (m) => `${m.num_features} (${m.space === "z" ? "ẑ" : "h"}, eps ${m.eps})`],
  ["classes", "classes", (m) => String(m.num_classes)],
];

let current = null; // the state on display
let lists = []; // the CardLists on display
let listKey = null; // what the lists show: rebuilt when it changes
let plotsKey = null;
const savedScroll = new Map();
let marked = false;

/** The models a state shows: one (browse, detail) or A and B (compare). */
function viewModels(state) {
  return state.mode === "compare" ? [byKey.get(state.a), byKey.get(state.b)] : [byKey.get(state.key)];
}

function renderNav(state) {
  const links = atlas.models.map((m) =>
    h("a", { href: formatHash({ ...state, mode: "browse", key: m.key }), "data-key": m.key,
      "aria-current": state.mode !== "compare" && m.key === state.key ? "page" : null }, m.name),
  );
  if (atlas.models.length >= 2) {
    links.push(h("a", { id: "compare-link", href: formatHash({ ...state, mode: "compare" }),
      "aria-current": state.mode === "compare" ? "page" : null }, "compare"));
  }
  clear($("models")).append(...links);
}

function renderOverview(state, models) {
  const table = clear($("metrics"));
  table.append(h("tr", {}, h("th", {}, ""), models.map((m) => h("th", { "data-key": m.key, title: m.key }, m.name))));
  for (const [row, label, text] of INFO) {
    table.append(h("tr", { "data-row": row }, h("th", {}, label), models.map((m) => h("td", { title: text(m) }, text(m)))));
  }
  const keys = new Set(models.flatMap((m) => Object.keys(m.metrics)));
  const rows = METRICS.filter(([k]) => keys.has(k));
  for (const k of [...keys].filter((k) => k.startsWith("sepin@")).sort((x, y) => sepinRank(x) - sepinRank(y))) {
    rows.push([k, k.replace("sepin", "SEPIN"), fmt]);
  }
  for (const k of [...keys].filter((k) => !rows.some(([r]) => r === k)).sort()) rows.push([k, k, fmt]);
  table.append(h("tr", { class: "section" }, h("th", { colspan: models.length + 1 }, "metrics on the split")));
  for (const [row, label, text] of rows) {
    const cells = models.map((m) => h("td", {}, row in m.metrics ? text(m.metrics[row]) : "—"));
    table.append(h("tr", { "data-row": row }, h("th", {}, label), cells));
  }
  const notes = models.flatMap((m) => m.notes.map((note) => h("div", { class: "note", role: "status", "data-key": m.key }, `${m.name}: ${note}`)));
  clear($("notes")).append(...notes);
  $("compare-pick").hidden = state.mode !== "compare";
  if (state.mode === "compare") {
    for (const [id, key] of [["compare-a", state.a], ["compare-b", state.b]]) {
      clear($(id)).append(...atlas.models.map((m) => h("option", { value: m.key, selected: m.key === key }, m.name)));
    }
  }
}

function sepinRank(key) {
  const k = key.slice("sepin@".length);
  return k === "all" ? Infinity : Number(k);
}

function renderControls(state, models) {
  clear($("sort")).append(
    ...SORTS.map((x) => h("option", { value: x.key, disabled: !sortAvailable(x.key, models), selected: x.key === state.sort }, x.label)),
  );
  $("order").value = state.order;
  const names = models[0].class_names;
  clear($("class-filter")).append(
    h("option", { value: "" }, "all classes"),
    ...names.map((name, c) => h("option", { value: String(c), selected: c === state.cls }, name)),
  );
  if (document.activeElement !== $("min-freq")) $("min-freq").value = String(state.minFreq);
}

function renderSummary(models) {
  const key = models.map((m) => m.key).join("/");
  if (key === plotsKey) return;
  plotsKey = key;
  clear($("plots")).append(eaCurve(models, models.map(sortedEa)), consistencyHistogram(models));
}

/** One list of cards for a model: count, cards, dead list (ids suffixed "-a"/"-b" in compare). */
function buildList(model, state, suffix) {
  const dims = orderedDims(model, state);
  const live = model.dims.dead.filter((x) => !x).length;
  const count = $(`count${suffix}`);
  count.dataset.shown = String(dims.length);
  count.dataset.live = String(live);
  count.textContent = `${model.name}: ${dims.length} of ${live} live dimensions shown`;
  const container = clear($(`cards${suffix}`));
  deadList($(`dead-list${suffix}`), model);
  if (dims.length === 0) {
    container.append(h("p", { class: "empty" }, live === 0 ? "No live dimension: every dimension is dead." : "No dimension passes the filters."));
  }
  const cmp = state.mode === "compare" ? `${state.a}/${state.b}` : null;
  const hrefOf = (j) => formatHash({ ...state, mode: "detail", key: model.key, dim: j, cmp });
  return new CardList(container, model, dims, hrefOf, () => {
    if (!marked && dims.length > 0) {
      marked = true;
      performance.mark("atlas-first-cards");
    }
  });
}

function renderLists(state, models) {
  const key = JSON.stringify([state.mode, models.map((m) => m.key), state.sort, state.order, state.cls, state.minFreq]);
  if (key === listKey) return false;
  listKey = key;
  lists.forEach((list) => list.destroy());
  if (state.mode === "compare") {
    $("compare-title-a").textContent = `A · ${models[0].name}`;
    $("compare-title-b").textContent = `B · ${models[1].name}`;
    lists = [buildList(models[0], state, "-a"), buildList(models[1], state, "-b")];
  } else {
    lists = [buildList(models[0], state, "")];
  }
  return true;
}

function detailLinks(state, model) {
  const order = orderedDims(model, state);
  const at = order.indexOf(state.dim);
  const link = (j) => (j === undefined || j < 0 || j >= model.num_features ? null : formatHash({ ...state, dim: j }));
  const back = state.cmp ? { ...state, mode: "compare", a: state.cmp.split("/")[0], b: state.cmp.split("/")[1] } : { ...state, mode: "browse" };
  if (at < 0) return { prev: link(state.dim - 1), next: link(state.dim + 1), back: formatHash(back) };
  return { prev: link(order[at - 1]), next: link(order[at + 1]), back: formatHash(back) };
}

function route() {
  routeTo(location.hash);
  document.documentElement.dataset.routed = location.hash;
}

function routeTo(hash) {
  const { state, error } = parseHash(hash, atlas);
  const models = viewModels(state);
  let message = error;
  if (!sortAvailable(state.sort, models)) {
    const lacking = models.filter((m) => !sortAvailable(state.sort, [m])).map((m) => m.name);
    message = `${sortSpec(state.sort).label} is not measured for ${lacking.join(", ")}: sorted by EA instead`;
    Object.assign(state, { sort: DEFAULT_SORT, order: sortSpec(DEFAULT_SORT).order });
  }
  if (state.cls !== null && state.cls >= models[0].num_classes) state.cls = null;
  const was = current;
  current = state;
  $("route-error").hidden = message === null;
  $("route-error").textContent = message || "";
  document.documentElement.dataset.view = state.mode;
  document.title = `${atlas.title} · ${state.mode === "compare" ? models.map((m) => m.name).join(" vs ") : models[0].name}`;
  renderNav(state);
  renderOverview(state, models);
  renderControls(state, models);
  const detail = state.mode === "detail";
  $("detail").hidden = !detail;
  $("head-row").hidden = detail;
  $("browse").hidden = state.mode !== "browse";
  $("compare").hidden = state.mode !== "compare";
  if (detail) {
    if (was && was.mode !== "detail") savedScroll.set(listKey, window.scrollY);
    renderDetail($("detail"), models[0], state.dim, detailLinks(state, models[0]));
    if (!was || was.mode !== "detail" || was.dim !== state.dim) window.scrollTo(0, 0);
    return;
  }
  renderSummary(models);
  const rebuilt = renderLists(state, models);
  if (!rebuilt && was && was.mode === "detail") window.scrollTo(0, savedScroll.get(listKey) || 0);
}

/** A control changed the sort or a filter: same view, new state in the URL (no new entry). */
function update(changes) {
  const state = { ...current, ...changes };
  history.replaceState(null, "", formatHash(state));
  route();
}

function jump() {
  const model = byKey.get(current.mode === "compare" ? current.a : current.key);
  const dim = Number($("jump").value);
  if ($("jump").value === "" || !Number.isInteger(dim) || dim < 0 || dim >= model.num_features) {
    $("jump-msg").textContent = `${model.name} has dimensions 0 to ${model.num_features - 1}`;
    return;
  }
  $("jump-msg").textContent = "";
  location.hash = formatHash({ ...current, mode: "detail", key: model.key, dim, cmp: null });
}

let freqTimer = null;
$("sort").addEventListener("change", (e) => update({ sort: e.target.value, order: sortSpec(e.target.value).order }));
$("order").addEventListener("change", (e) => update({ order: e.target.value }));
$("class-filter").addEventListener("change", (e) => update({ cls: e.target.value === "" ? null : Number(e.target.value) }));
$("min-freq").addEventListener("input", (e) => {
  clearTimeout(freqTimer);
  const value = Number(e.target.value);
  freqTimer = setTimeout(() => update({ minFreq: Number.isFinite(value) && value > 0 ? value : 0 }), 150);
});
$("controls").addEventListener("submit", (e) => {
  e.preventDefault();
  if ($("jump").value !== "") jump();
});
for (const [id, side] of [["compare-a", "a"], ["compare-b", "b"]]) {
  $(id).addEventListener("change", (e) => {
    location.hash = formatHash({ ...current, [side]: e.target.value });
  });
}
document.addEventListener("keydown", (e) => {
  if (current.mode !== "detail" || e.altKey || e.ctrlKey || e.metaKey) return;
  if (["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName)) return;
  const target = { ArrowLeft: "detail-prev", ArrowRight: "detail-next", Escape: "detail-back" }[e.key];
  const link = target && $(target);
  if (link && link.hasAttribute("href")) {
    e.preventDefault();
    link.click();
  }
});
window.addEventListener("hashchange", route);
route();
