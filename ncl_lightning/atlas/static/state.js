// state.js: the view state, its URL (location.hash) and the sorted, filtered order of the
// dimensions a view shows.

// Sort keys: the column of model.dims each reads and its default order ("id" reads none).
const SORTS = [
  { key: "ea", label: "expected activation (EA)", column: "ea", order: "desc" },
  { key: "consistency", label: "consistency", column: "consistency", order: "desc" },
  { key: "freq", label: "activation frequency", column: "freq", order: "desc" },
  { key: "sepin", label: "SEPIN", column: "sepin", order: "desc" },
  { key: "gate", label: "gate open frequency", column: "gate", order: "desc" },
  { key: "id", label: "dimension id", column: null, order: "asc" },
];
const DEFAULT_SORT = "ea";

function sortSpec(key) {
  return SORTS.find((x) => x.key === key);
}

/** Whether every model of the view has the column the sort reads (SEPIN and gate may be null). */
function sortAvailable(key, models) {
  const spec = sortSpec(key);
  return spec !== undefined && models.every((m) => spec.column === null || Array.isArray(m.dims[spec.column]));
}

/** The state a hash names: {mode, key, dim, a, b, sort, order, cls, minFreq, cmp} and the error
 * text for a hash that names no such model or dimension (then the default view). */
function parseHash(hash, atlas) {
  const [path, query] = hash.replace(/^#\/?/, "").split("?");
  const parts = path.split("/").filter((p) => p.length > 0).map(decodeURIComponent);
  const params = new URLSearchParams(query || "");
  const keys = atlas.models.map((m) => m.key);
  const state = {
    mode: "browse",
    key: keys[0],
    dim: null,
    a: keys[0],
    b: keys[Math.min(1, keys.length - 1)],
    sort: params.get("sort") || DEFAULT_SORT,
    order: params.get("order"),
    cls: params.has("class") ? Number(params.get("class")) : null,
    minFreq: params.has("minfreq") ? Number(params.get("minfreq")) : 0,
    cmp: params.get("cmp"), // "a/b": a detail opened from compare mode goes back there
  };
  let error = null;
  if (!sortSpec(state.sort)) {
    error = `unknown sort "${state.sort}"`;
    state.sort = DEFAULT_SORT;
  }
  if (state.order !== "asc" && state.order !== "desc") state.order = sortSpec(state.sort).order;
  if (!Number.isInteger(state.cls) || state.cls < 0) state.cls = null;
  if (!Number.isFinite(state.minFreq) || state.minFreq < 0) state.minFreq = 0;
  const known = (k) => keys.includes(k);
  if (state.cmp !== null && !(state.cmp.split("/").length === 2 && state.cmp.split("/").every(known))) state.cmp = null;
  if (parts[0] === "compare") {
    if (keys.length < 2) error = "compare mode needs two models; this atlas has one";
    else if (!known(parts[1]) || !known(parts[2])) error = `no such models to compare: ${parts.slice(1).join(", ")}`;
    else Object.assign(state, { mode: "compare", a: parts[1], b: parts[2], key: parts[1] });
  } else if (parts.length > 0) {
    if (!known(parts[0])) error = `no model "${parts[0]}" in this atlas (models: ${keys.join(", ")})`;
    else state.key = parts[0];
    if (!error && parts[1] === "dim") {
      const model = atlas.models[keys.indexOf(state.key)];
      const dim = Number(parts[2]);
      if (Number.isInteger(dim) && dim >= 0 && dim < model.num_features) Object.assign(state, { mode: "detail", dim });
      else error = `no dimension "${parts[2]}" in ${model.name} (0 to ${model.num_features - 1})`;
    }
  }
  return { state, error };
}

/** The hash of a state (sort and filters only where they differ from the defaults). */
function formatHash(state) {
  const enc = encodeURIComponent;
  let path;
  if (state.mode === "compare") path = `#/compare/${enc(state.a)}/${enc(state.b)}`;
  else if (state.mode === "detail") path = `#/${enc(state.key)}/dim/${state.dim}`;
  else path = `#/${enc(state.key)}`;
  const params = new URLSearchParams();
  if (state.sort !== DEFAULT_SORT) params.set("sort", state.sort);
  if (state.order !== sortSpec(state.sort).order) params.set("order", state.order);
  if (state.cls !== null) params.set("class", String(state.cls));
  if (state.minFreq > 0) params.set("minfreq", String(state.minFreq));
  if (state.mode === "detail" && state.cmp) params.set("cmp", state.cmp);
  const query = params.toString();
  return query ? `${path}?${query}` : path;
}

/** The live dimensions of a model that pass the filters (majority class, minimum activation
 * frequency in percent), in the order of the sort; ties by id; null values last. */
function orderedDims(model, state) {
  const d = model.dims;
  const minShare = state.minFreq / 100;
  const out = [];
  for (let j = 0; j < model.num_features; j++) {
    if (d.dead[j]) continue;
    if (state.cls !== null && d.majority[j] !== state.cls) continue;
    if (d.freq[j] < minShare) continue;
    out.push(j);
  }
  const spec = sortSpec(state.sort);
  const column = spec.column === null ? null : d[spec.column];
  const sign = state.order === "asc" ? 1 : -1;
  if (column === null || column === undefined) {
    return sign === 1 ? out : out.reverse();
  }
  return out.sort((x, y) => {
    const vx = column[x];
    const vy = column[y];
    if (vx === null || vy === null) return vx === vy ? x - y : vx === null ? 1 : -1;
    return vx !== vy ? sign * (vx - vy) : x - y;
  });
}

/** The sorted EA column of a model, computed once. */
const sortedEaCache = new Map();
function sortedEa(model) {
  if (!sortedEaCache.has(model.key)) sortedEaCache.set(model.key, [...model.dims.ea].sort((a, b) => b - a));
  return sortedEaCache.get(model.key);
}
