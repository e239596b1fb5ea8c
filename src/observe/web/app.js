// ramjet dashboard: plain JS, inline SVG, no dependencies and no network beyond this origin.
// Data: GET /api/v1/series (the per-second rings, once), then the SSE stream /api/v1/stream
// (a `state` event every second, appended to the local series); /api/v1/decisions on its tab.
'use strict';

const MAX_POINTS = 900;
const TABS = ['overview', 'serving', 'topology', 'gpus', 'decisions'];
const POINT_KEYS = ['gen_tps', 'gen_tps_30s', 'prompt_tps', 'stream_p50', 'stream_p05', 'ttft_p50', 'ttft_p95',
  'tpot_p95', 'inflight', 'req_rate', 'cache_hit_lb', 'cache_hit_engine', 'kv_usage'];
const ENGINE_KEYS = ['running', 'waiting', 'kv_usage', 'req_rate', 'inflight', 'load_units', 'cache_hit', 'gen_tps'];

const S = {
  state: null,       // the newest /api/v1/state
  series: null,      // columnar rings, as /api/v1/series
  tab: 'overview',
  decisions: null,
  decisionsAt: 0,
  live: false,
};

// ------------------------------------------------------------------ formatting
const $ = (sel, root = document) => root.querySelector(sel);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
const isNum = (v) => typeof v === 'number' && isFinite(v);
function fmt(v, digits = 1) {
  if (!isNum(v)) return '—';
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + 'M';
  if (a >= 1e4) return (v / 1e3).toFixed(a >= 1e5 ? 0 : 1) + 'k';
  if (a >= 100) return v.toFixed(0);
  return v.toFixed(digits);
}
function fmtSec(v) {
  if (!isNum(v)) return '—';
  if (v < 1) return (v * 1000).toFixed(0) + ' ms';
  return v.toFixed(v < 10 ? 2 : 1) + ' s';
}
const fmtPct = (v, d = 0) => (isNum(v) ? v.toFixed(d) + '%' : '—');
// A 0..1 fraction as a percentage: one decimal below 10 % (a lightly used KV cache is not "0").
const pctOf = (f) => { const p = f * 100; return p > 0 && p < 10 ? p.toFixed(1) : p.toFixed(0); };
const engineColor = (i, n) => `hsl(${Math.round((i * 360) / Math.max(n, 1) + 200) % 360} 75% 62%)`;
const stateLabel = (s) => (s === 'unhealthy' ? 'fenced' : s);
// The idle drain (RJ_IDLE_DRAIN_MODE): an engine out of placement to save power, by its state; null
// or warm: in placement.
const PARKED = { draining: 'draining (idle)', drained: 'asleep (idle)', waking: 'waking', failed: 'failed to wake' };
const isParked = (e) => !!PARKED[e.idle_drain];
const engineState = (e) => (isParked(e) ? PARKED[e.idle_drain] : stateLabel(e.state));
// An engine's KV-event index (cache/events): what its state means for exact routing. null: no
// engine publishes KV events (nothing to show).
const KV_INDEX = {
  trusted: 'KV-event index trusted: it mirrors this engine\'s prefix cache, so exact routing can read it.',
  replaying: 'KV-event index replaying: fetching event batches it missed. Until it is trusted again, exact ' +
    'routing places this engine on its approximate (fingerprint) estimate; the others stay exact.',
  fenced: 'KV-event index fenced: events were lost or unreadable, so the index is emptied and not used until a ' +
    'replay or a cache reset makes it whole (tried again on a backoff). Meanwhile exact routing places this ' +
    'engine on its approximate (fingerprint) estimate; the others stay exact.',
  none: 'No KV events from this engine: exact routing places it on its approximate (fingerprint) estimate; ' +
    'the others stay exact.',
  withdrawn: 'Exact trust withdrawn: its KV-event index is trusted, but exact predictions kept missing the ' +
    'cached tokens the engine reported (a tokenizer, template or block-size mismatch). Until the cooldown ' +
    '(RJ_EXACT_MISS_COOLDOWN_MS) ends, exact routing places this engine on its approximate (fingerprint) ' +
    'estimate; the others stay exact.',
};
const kvUntrusted = (k) => k === 'fenced' || k === 'replaying' || k === 'none' || k === 'withdrawn';
const kvLabel = (k) => (k === 'none' ? 'no KV events' : k === 'withdrawn' ? 'exact trust withdrawn' : 'KV index ' + k);
// The state drawn for an engine: its index's, or `withdrawn` when a trusted index's predictions
// kept missing (null: no engine publishes KV events).
const kvShown = (e) => (!e.kv_index ? null : e.kv_index === 'trusted' && e.exact_withdrawn ? 'withdrawn' : e.kv_index);
const profileShort = (p) => (p === 'mtp' ? 'MTP' : p === 'standard' ? 'STD' : '—');

// ------------------------------------------------------------------ data
async function getJSON(url) {
  const r = await fetch(url, { cache: 'no-store' });
  if (!r.ok) throw new Error(url + ': ' + r.status);
  return r.json();
}

function emptySeries() {
  const s = { t: [], engines: [], gpus: [], hours: [] };
  for (const k of POINT_KEYS) s[k] = [];
  return s;
}

// Appends the newest state's point to the local rings (the SSE stream carries one per second).
function appendState(st) {
  const s = S.series || (S.series = emptySeries());
  if (!st || !st.t) return;
  if (s.t.length && st.t <= s.t[s.t.length - 1]) return;
  s.t.push(st.t);
  for (const k of POINT_KEYS) s[k].push(st.tiles ? st.tiles[k] : null);
  const n = s.t.length;
  (st.engines || []).forEach((e, i) => {
    let se = s.engines[i];
    if (!se) {
      se = s.engines[i] = { ordinal: e.ordinal };
      for (const k of ENGINE_KEYS) se[k] = new Array(n - 1).fill(null);
    }
    for (const k of ENGINE_KEYS) se[k].push(e[k]);
  });
  for (const g of st.gpus || []) {
    let sg = s.gpus.find((x) => x.engine === g.engine && x.device === g.device);
    if (!sg) {
      sg = { engine: g.engine, device: g.device, util: new Array(n - 1).fill(null), power: new Array(n - 1).fill(null) };
      s.gpus.push(sg);
    }
    sg.util.push(g.util);
    sg.power.push(g.power_w);
  }
  // Rings that got no value this tick (an engine or GPU that vanished) get a gap.
  for (const se of s.engines) for (const k of ENGINE_KEYS) while (se[k].length < n) se[k].push(null);
  for (const sg of s.gpus) {
    while (sg.util.length < n) sg.util.push(null);
    while (sg.power.length < n) sg.power.push(null);
  }
  if (st.hours) s.hours = st.hours;
  if (n > MAX_POINTS) {
    const cut = n - MAX_POINTS;
    s.t.splice(0, cut);
    for (const k of POINT_KEYS) s[k].splice(0, cut);
    for (const se of s.engines) for (const k of ENGINE_KEYS) se[k].splice(0, cut);
    for (const sg of s.gpus) { sg.util.splice(0, cut); sg.power.splice(0, cut); }
  }
}

function onState(st) {
  if (!st || !st.t) return;
  S.state = st;
  appendState(st);
  render();
}

function setConn(text, cls) {
  const c = $('#conn');
  c.textContent = text;
  c.className = 'conn ' + (cls || '');
}

let pollTimer = null;
function startPolling() {
  if (pollTimer) return;
  pollTimer = setInterval(async () => {
    try {
      onState(await getJSON('/api/v1/state'));
      setConn('polling', 'live');
    } catch (e) {
      setConn('disconnected', 'down');
    }
  }, 1000);
}

function connect() {
  if (!window.EventSource) { startPolling(); return; }
  const es = new EventSource('/api/v1/stream');
  es.addEventListener('state', (ev) => {
    S.live = true;
    setConn('live', 'live');
    try { onState(JSON.parse(ev.data)); } catch (e) { console.error(e); }
  });
  es.addEventListener('bye', () => { setConn('ramjet stopped', 'down'); es.close(); });
  es.onerror = () => {
    setConn('reconnecting…', 'down');
    // The server answers 503 when it has too many live clients: fall back to polling.
    if (es.readyState === EventSource.CLOSED) startPolling();
  };
}

// ------------------------------------------------------------------ charts (inline SVG)
function niceMax(v) {
  if (!isNum(v) || v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// lines: [{label, color, values, dash, width}]; opts: {t, fmt, max, height, unit}
function lineChart(el, lines, opts) {
  const t = opts.t || [];
  const W = Math.max(el.clientWidth || 560, 240);
  const H = opts.height || 180;
  const L = 46, R = 8, T = 8, B = 20;
  const pw = W - L - R, ph = H - T - B;
  let max = opts.max || 0;
  let any = false;
  for (const ln of lines) for (const v of ln.values) if (isNum(v)) { any = true; if (v > max) max = v; }
  if (!t.length || !any) {
    el.innerHTML = `<div class="empty">${esc(opts.empty || 'no data yet')}</div>`;
    return;
  }
  max = opts.fixedMax || (opts.integer ? Math.max(4, Math.ceil((max * 1.05) / 4) * 4) : niceMax(max * 1.05));
  const t1 = t[t.length - 1];
  // The time axis covers the data (at least a minute, at most the 15 min kept).
  const span = Math.min(MAX_POINTS * 1000, Math.max(60000, t1 - t[0]));
  const x = (ti) => L + pw * (1 - (t1 - ti) / span);
  const y = (v) => T + ph * (1 - Math.min(v, max) / max);
  const f = opts.fmt || ((v) => fmt(v));
  let g = '';
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4, yy = y(v);
    g += `<line x1="${L}" x2="${W - R}" y1="${yy}" y2="${yy}"/><text x="${L - 6}" y="${yy + 3}" text-anchor="end">${esc(f(v))}</text>`;
  }
  const step = [10, 15, 30, 60, 120, 300].find((st) => span / 1000 / st <= 6) || 300;
  for (let sec = 0; sec * 1000 <= span; sec += step) {
    const xx = Math.max(L + 12, L + pw * (1 - (sec * 1000) / span));
    const label = sec === 0 ? 'now' : sec < 60 ? `−${sec}s` : `−${sec / 60}m`;
    g += `<text x="${xx.toFixed(1)}" y="${H - 5}" text-anchor="middle">${label}</text>`;
  }
  let paths = '';
  for (const ln of lines) {
    let d = '', pen = false;
    for (let i = 0; i < t.length; i++) {
      const v = ln.values[i];
      if (!isNum(v) || t1 - t[i] > span) { pen = false; continue; }
      d += (pen ? 'L' : 'M') + x(t[i]).toFixed(1) + ' ' + y(v).toFixed(1);
      pen = true;
    }
    if (d) paths += `<path d="${d}" fill="none" stroke="${ln.color}" stroke-width="${ln.width || 1.6}"${ln.dash ? ' stroke-dasharray="4 3"' : ''} stroke-linejoin="round"/>`;
  }
  let legend = '';
  const shown = lines.filter((ln) => !ln.noLegend);
  for (const ln of shown) {
    let last = null;
    for (let i = ln.values.length - 1; i >= 0; i--) if (isNum(ln.values[i])) { last = ln.values[i]; break; }
    legend += `<span><i style="background:${ln.color}"></i>${esc(ln.label)}<b>${esc(isNum(last) ? f(last) : '—')}</b></span>`;
  }
  el.innerHTML = `<svg viewBox="0 0 ${W} ${H}" height="${H}"><g class="axis">${g}</g>${paths}</svg><div class="legend">${legend}</div>`;
}

function sparkline(values, max, color) {
  const n = values.length;
  if (!n) return '<svg></svg>';
  const W = 180, H = 28;
  let d = '', pen = false;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (!isNum(v)) { pen = false; continue; }
    d += (pen ? 'L' : 'M') + ((W * i) / Math.max(n - 1, 1)).toFixed(1) + ' ' + (H - 1 - ((H - 2) * Math.min(v, max)) / max).toFixed(1);
    pen = true;
  }
  return `<svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none"><path d="${d}" fill="none" stroke="${color}" stroke-width="1.3" vector-effect="non-scaling-stroke"/></svg>`;
}

// ------------------------------------------------------------------ overview
function tile(key, label, value, unit, sub) {
  return `<div class="tile" data-tile="${key}"><div class="label">${esc(label)}</div>` +
    `<div class="value">${esc(value)}${unit ? `<small>${esc(unit)}</small>` : ''}</div><div class="sub">${sub}</div></div>`;
}

function renderOverview() {
  const st = S.state;
  const k = st.tiles || {};
  const engines = st.engines || [];
  let kvMax = null, kvAt = null;
  for (const e of engines) if (isNum(e.kv_usage) && (kvMax === null || e.kv_usage > kvMax)) { kvMax = e.kv_usage; kvAt = e.ordinal; }
  const warming = engines.filter((e) => e.state === 'warming').length;
  const fenced = engines.filter((e) => e.state === 'unhealthy').length;
  const ejected = engines.filter((e) => e.state === 'ejected').length;
  $('#tiles').innerHTML = [
    tile('gen_tps', 'Generated tok/s', fmt(k.gen_tps_30s), 'tok/s', `30 s mean · now ${fmt(k.gen_tps)}`),
    tile('stream_tps', 'Per-stream tok/s', fmt(k.stream_p50), 'p50', `p05 <b class="v">${esc(fmt(k.stream_p05))}</b> tok/s · 30 s`),
    tile('ttft_p95', 'TTFT p95', fmtSec(k.ttft_p95), '', `p50 ${esc(fmtSec(k.ttft_p50))} · 30 s`),
    tile('inflight', 'In flight', fmt(k.inflight, 0), 'req', `${esc(fmt(k.req_rate))} req/s completed` +
      (isNum(st.waiting) ? ` · <b class="v">${esc(fmt(st.waiting, 0))}</b> waiting` : '')),
    tile('kv_usage', 'KV cache usage', isNum(k.kv_usage) ? pctOf(k.kv_usage) : '—', isNum(k.kv_usage) ? '%' : '',
      kvMax === null ? 'mean over engines' : `mean · max ${pctOf(kvMax)}% (engine ${kvAt})`),
    tile('cache_hit', 'Cache hit', isNum(k.cache_hit_lb) ? k.cache_hit_lb.toFixed(0) : '—', isNum(k.cache_hit_lb) ? '%' : '',
      `cached prompt tokens · engines' view ${esc(fmtPct(k.cache_hit_engine))}`),
    tile('engines', 'Engines healthy', `${st.healthy} / ${st.total}`, '',
      `${warming} warming · ${fenced} fenced · ${ejected} ejected` +
      `${st.fail_open ? ' · <b style="color:var(--red)">fail-open</b>' : ''}`),
  ].join('');
  renderHours();
  const s = S.series;
  lineChart($('#ov-tps'), [
    { label: '1 s', color: '#38bdf8', values: s.gen_tps, width: 1 },
    { label: '30 s mean', color: '#22c55e', values: s.gen_tps_30s, width: 2 },
  ], { t: s.t, height: 160 });
  const chip = (e) => {
    const k = kvShown(e);
    return `<span class="chip ${e.state}${isParked(e) ? ' parked' : ''}${kvUntrusted(k) ? ' kv-untrusted' : ''}" data-ordinal="${e.ordinal}"` +
      `${k ? ` data-kv="${esc(k)}" title="${esc(KV_INDEX[k] || '')}"` : ''}>` +
      `#${e.ordinal} ${profileShort(e.profile)} · ${esc(engineState(e))} · ${e.inflight} in flight` +
      `${kvUntrusted(k) ? ` · <b>${esc(kvLabel(k))}</b>` : ''}</span>`;
  };
  // Engines grouped by the models they serve, when they do not all serve the same.
  const byModel = new Map();
  for (const e of engines) {
    const m = e.models || '';
    if (!byModel.has(m)) byModel.set(m, []);
    byModel.get(m).push(e);
  }
  $('#ov-engines').innerHTML = [...byModel].map(([m, list]) =>
    (byModel.size > 1 ? `<span class="model-group">${esc(m || 'models not known yet')}</span>` : '') +
    list.map(chip).join('')).join('');
}

function renderHours() {
  const hours = (S.state && S.state.hours) || [];
  const el = $('#hours');
  const W = Math.max(el.clientWidth || 900, 300), H = 86, B = 16;
  const n = hours.length || 24;
  const bw = W / n;
  const max = niceMax(Math.max(1, ...hours.map((h) => h.tokens)));
  let bars = '', total = 0;
  hours.forEach((h, i) => {
    total += h.tokens;
    const bh = h.tokens > 0 ? Math.max(2, ((H - B - 4) * h.tokens) / max) : 0;
    const d = new Date(h.t);
    const label = String(d.getHours()).padStart(2, '0');
    const shade = h.tokens > 0 ? 0.35 + 0.65 * (h.tokens / max) : 0;
    bars += `<g><title>${esc(d.toLocaleString())}: ${h.tokens.toLocaleString()} tokens</title>` +
      `<rect x="${(i * bw + 1).toFixed(1)}" y="${H - B - bh}" width="${(bw - 2).toFixed(1)}" height="${bh}" rx="2" fill="rgba(56,189,248,${shade.toFixed(2)})"/>` +
      `<rect x="${(i * bw + 1).toFixed(1)}" y="${H - B - 2}" width="${(bw - 2).toFixed(1)}" height="2" fill="#2a333e"/>` +
      (i % 2 === 0 || bw > 40 ? `<text x="${(i * bw + bw / 2).toFixed(1)}" y="${H - 3}" text-anchor="middle">${label}</text>` : '') + '</g>';
  });
  el.innerHTML = `<svg viewBox="0 0 ${W} ${H}" height="${H}">${bars}</svg>` +
    `<div class="total">${total.toLocaleString()} completion tokens in the last 24 h · this hour ${(hours.length ? hours[hours.length - 1].tokens : 0).toLocaleString()}</div>`;
}

// ------------------------------------------------------------------ serving
function perEngine(key, opts = {}) {
  const s = S.series, n = s.engines.length;
  return s.engines.map((e, i) => ({
    label: `#${e.ordinal}${opts.suffix || ''}`,
    color: engineColor(i, n),
    values: opts.scale ? e[key].map((v) => (isNum(v) ? v * opts.scale : v)) : e[key],
    dash: opts.dash,
    noLegend: opts.noLegend,
  }));
}

function renderServing() {
  const s = S.series;
  const o = { t: s.t };
  lineChart($('#ch-tps'), [
    { label: 'generated (1 s)', color: '#38bdf8', values: s.gen_tps, width: 1 },
    { label: 'generated (30 s)', color: '#22c55e', values: s.gen_tps_30s, width: 2 },
  ], o);
  lineChart($('#ch-stream'), [
    { label: 'p50', color: '#22c55e', values: s.stream_p50, width: 2 },
    { label: 'p05', color: '#f59e0b', values: s.stream_p05 },
  ], o);
  lineChart($('#ch-ttft'), [
    { label: 'p50', color: '#38bdf8', values: s.ttft_p50 },
    { label: 'p95', color: '#ef4444', values: s.ttft_p95, width: 2 },
  ], Object.assign({ fmt: fmtSec }, o));
  lineChart($('#ch-tpot'), [
    { label: 'p95', color: '#f59e0b', values: s.tpot_p95.map((v) => (isNum(v) ? v * 1000 : v)), width: 2 },
  ], Object.assign({ empty: 'no TPOT measured yet (streamed responses of 2+ tokens)' }, o));
  lineChart($('#ch-inflight'), [
    { label: 'ramjet', color: '#38bdf8', values: s.inflight, width: 2 },
    ...perEngine('inflight'),
  ], Object.assign({ fmt: (v) => fmt(v, 0), integer: true }, o));
  lineChart($('#ch-runwait'), [
    ...perEngine('running', { suffix: ' running' }),
    ...perEngine('waiting', { suffix: ' waiting', dash: true }),
  ], Object.assign({ fmt: (v) => fmt(v, 0), integer: true, empty: 'no engine scrape yet' }, o));
  lineChart($('#ch-kv'), perEngine('kv_usage', { scale: 100 }),
    Object.assign({ fmt: (v) => pctOf(v / 100) + '%', fixedMax: 100, empty: 'no engine scrape yet' }, o));
  lineChart($('#ch-hit'), [
    { label: 'ramjet view (cached / prompt tokens)', color: '#22c55e', values: s.cache_hit_lb, width: 2 },
    { label: "engines' view (prefix hits / queries)", color: '#a78bfa', values: s.cache_hit_engine, width: 2, dash: true },
  ], Object.assign({ fmt: (v) => v.toFixed(0) + '%', fixedMax: 100 }, o));
  lineChart($('#ch-rate'), perEngine('req_rate'), Object.assign({ fmt: (v) => fmt(v, 1) }, o));
}

// ------------------------------------------------------------------ topology
const NODE_W = 200, GAP_X = 18, GAP_Y = 26, HUB_H = 62;
let NODE_H = 116;  // 134 with the KV-index row
let topoShape = '';

function topoLayout(n) {
  // At most 8 nodes a row; the SVG scales down to the page width (64 engines: 8 rows of 8).
  // Several rows are fed by buses (one a row, joined by a trunk on the left) and each node's
  // edge is its drop from its row's bus; one row gets a curve per node from ramjet.
  const perRow = Math.max(1, Math.min(n, 8));
  const rows = Math.ceil(n / perRow);
  const gapY = rows > 1 ? GAP_Y + 16 : GAP_Y;
  const W = Math.max(perRow * (NODE_W + GAP_X) - GAP_X, 260) + 40;
  const top = 20 + HUB_H + (rows > 1 ? 50 : 70);
  const H = top + rows * (NODE_H + gapY);
  const pos = [];
  for (let i = 0; i < n; i++) {
    const r = Math.floor(i / perRow), c = i % perRow;
    const inRow = Math.min(perRow, n - r * perRow);
    const rowW = inRow * (NODE_W + GAP_X) - GAP_X;
    pos.push({ x: (W - rowW) / 2 + c * (NODE_W + GAP_X), y: top + r * (NODE_H + gapY), row: r });
  }
  const busY = (r) => top + r * (NODE_H + gapY) - gapY / 2 - 2;
  return { W, H, pos, rows, busY, hub: { x: W / 2 - 110, y: 20, w: 220, h: HUB_H } };
}

function buildTopology(engines) {
  const el = $('#topo');
  const kv = engines.some((e) => e.kv_index);
  NODE_H = kv ? 134 : 116;
  const L = topoLayout(engines.length);
  const hubX = L.hub.x + L.hub.w / 2, hubY = L.hub.y + L.hub.h;
  let edges = '', nodes = '';
  if (L.rows > 1) {
    // Buses: hub -> down to row 0's bus; a trunk on the left joins every row's bus.
    const left = 12, right = L.W - 12, last = L.busY(L.rows - 1);
    edges += `<path class="bus" d="M${hubX} ${hubY} V${L.busY(0)} M${left} ${L.busY(0)} V${last}"/>`;
    for (let r = 0; r < L.rows; r++) edges += `<path class="bus" d="M${left} ${L.busY(r)} H${right}"/>`;
  }
  engines.forEach((e, i) => {
    const p = L.pos[i];
    const ex = p.x + NODE_W / 2, ey = p.y;
    if (L.rows > 1) {
      edges += `<path class="edge" data-ordinal="${e.ordinal}" d="M${ex} ${L.busY(p.row)} V${ey}"/>`;
    } else {
      const midY = hubY + (ey - hubY) * 0.45;
      edges += `<path class="edge" data-ordinal="${e.ordinal}" d="M${hubX} ${hubY} C${hubX} ${midY}, ${ex} ${midY}, ${ex} ${ey}"/>`;
    }
    nodes += `<g class="node" data-ordinal="${e.ordinal}" transform="translate(${p.x},${p.y})">` +
      `<rect class="box" width="${NODE_W}" height="${NODE_H}"/>` +
      `<text class="title" x="10" y="20">engine ${e.ordinal}</text>` +
      `<g class="badge" transform="translate(${NODE_W - 50},7)"><rect width="42" height="17"/><text x="21" y="12.5" text-anchor="middle"></text></g>` +
      `<text class="state" x="10" y="38"></text>` +
      `<text class="load small" x="10" y="56"></text>` +
      `<rect class="bar-bg" x="10" y="64" width="${NODE_W - 20}" height="6" rx="3"/><rect class="bar-fg kv" x="10" y="64" width="0" height="6" rx="3"/>` +
      `<text class="kvtext small" x="10" y="84"></text>` +
      `<text class="hit small" x="10" y="101"></text>` +
      (kv ? `<g class="kvrow"><title></title><rect class="kvband" x="6" y="108" width="${NODE_W - 12}" height="18" rx="3"/>` +
        `<text class="kvstate" x="10" y="121"></text></g>` : '') + '</g>';
  });
  const hub = `<g class="hub"><rect x="${L.hub.x}" y="${L.hub.y}" width="${L.hub.w}" height="${L.hub.h}"/>` +
    `<text class="title" x="${hubX}" y="${L.hub.y + 24}" text-anchor="middle">ramjet</text>` +
    `<text class="hubtext small" x="${hubX}" y="${L.hub.y + 44}" text-anchor="middle"></text></g>`;
  // Diagonal stripes: the band of an engine whose KV-event index exact routing cannot use.
  const defs = '<defs><pattern id="kv-hatch" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">' +
    '<rect width="8" height="8" class="kvhatch-bg"/><rect width="4" height="8" class="kvhatch-fg"/></pattern></defs>';
  el.innerHTML = `<svg viewBox="0 0 ${L.W} ${L.H}" width="${L.W}" height="${L.H}">${defs}${edges}${hub}${nodes}</svg>`;
  $('#kv-legend').hidden = !kv;
}

// Exact routing reads the trusted KV-event indexes and places a healthy engine whose index is not
// trusted on its fingerprint estimate (request/route/exact_overlap.h: exact_partial); with none
// trusted it falls back to the approximate index. One line says which.
function renderKvStatus(engines) {
  const el = $('#kv-status');
  if (!engines.some((e) => e.kv_index)) { el.hidden = true; return; }
  const healthy = engines.filter((e) => e.state === 'healthy');
  const blocking = healthy.filter((e) => kvUntrusted(kvShown(e) || 'none'));
  const which = blocking.map((e) => `engine ${e.ordinal} ${kvLabel(kvShown(e) || 'none')}`).join(', ');
  el.hidden = false;
  el.className = 'kv-status' + (blocking.length ? ' off' : '');
  el.textContent = !blocking.length
    ? 'Every healthy engine\'s KV-event index is trusted: exact routing (when on) can read them.'
    : blocking.length === healthy.length
      ? '⚠ Exact routing (when on) falls back to the approximate index for the whole fleet: ' + which + '.'
      : '⚠ Exact routing (when on) places these on their fingerprint estimates, the others exactly: ' + which + '.';
}

function renderTopology() {
  const st = S.state;
  const engines = st.engines || [];
  const el = $('#topo');
  const shape = engines.length + (engines.some((e) => e.kv_index) ? ':kv' : '');
  if (shape !== topoShape || !$('svg', el)) { buildTopology(engines); topoShape = shape; }
  renderKvStatus(engines);
  const k = st.tiles || {};
  $('.hubtext', el).textContent = `${fmt(k.inflight, 0)} in flight · ${fmt(k.gen_tps_30s)} tok/s · ${st.healthy}/${st.total} healthy` +
    (st.parked ? ` · ${st.parked} parked` : '');
  for (const e of engines) {
    const g = $(`g.node[data-ordinal="${e.ordinal}"]`, el);
    const edge = $(`path.edge[data-ordinal="${e.ordinal}"]`, el);
    if (!g || !edge) continue;
    g.setAttribute('class', `node ${e.state}${e.fail_open ? ' failopen' : ''}${isParked(e) ? ' parked' : ''}`);
    g.dataset.idleDrain = e.idle_drain || '';
    g.dataset.state = e.state;
    g.dataset.profile = e.profile;
    const badge = $('.badge', g);
    badge.setAttribute('class', 'badge ' + e.profile);
    $('.badge text', g).textContent = profileShort(e.profile);
    $('.state', g).textContent = engineState(e) + (e.fail_open ? ' · fail-open' : '');
    $('.load', g).textContent = `${e.inflight} in flight · load ${e.load_units} · ${fmt(e.req_rate)} req/s`;
    const kv = isNum(e.kv_usage) ? e.kv_usage : 0;
    $('.kv', g).setAttribute('width', ((NODE_W - 20) * Math.min(kv, 1)).toFixed(1));
    $('.kvtext', g).textContent = isNum(e.kv_usage)
      ? `KV ${pctOf(e.kv_usage)}% · run ${fmt(e.running, 0)} · wait ${fmt(e.waiting, 0)}`
      : `KV — ${e.scrape_ok ? '' : '· no engine scrape'}`;
    $('.hit', g).textContent = `cache hit ${fmtPct(e.cache_hit)} · ${fmt(e.gen_tps)} tok/s`;
    const kvrow = $('.kvrow', g);
    if (kvrow) {
      const k = kvShown(e) || 'none';
      g.dataset.kv = k;
      // Where the index comes from: the engine's own KV events, or its ramjet-companion's snapshot and tail.
      const companion = e.kv_source === 'companion';
      g.dataset.kvSource = e.kv_source || '';
      kvrow.setAttribute('class', 'kvrow ' + k);
      $('.kvstate', kvrow).textContent = (kvUntrusted(k) ? '⚠ ' : '') +
        (companion ? kvLabel(k).replace('KV index', 'companion index') : kvLabel(k));
      $('title', kvrow).textContent = (KV_INDEX[k] || '') +
        (companion ? ' The index comes from the engine\'s ramjet-companion (a digest snapshot, then its live tail).' : '');
    }
    // Edge: animated while traffic flows; faster and thicker with more of it.
    const busy = (isNum(e.req_rate) && e.req_rate > 0.01) || e.inflight > 0;
    if ((e.state === 'unhealthy' || e.state === 'ejected') && !e.fail_open) {
      edge.setAttribute('class', 'edge dead');
      edge.style.animationDuration = '';
      edge.style.strokeWidth = '';
    } else if (busy) {
      const rate = Math.max(isNum(e.req_rate) ? e.req_rate : 0, e.inflight * 0.2);
      edge.setAttribute('class', 'edge active');
      edge.style.animationDuration = Math.max(0.25, Math.min(3, 1.5 / (rate + 0.1))).toFixed(2) + 's';
      edge.style.strokeWidth = (1.5 + Math.min(4, rate)).toFixed(1);
    } else {
      edge.setAttribute('class', 'edge');
      edge.style.animationDuration = '';
      edge.style.strokeWidth = '';
    }
  }
}

// ------------------------------------------------------------------ GPUs
function renderGpus() {
  const st = S.state;
  const gpus = st.gpus || [];
  const el = $('#gpus');
  if (!gpus.length) {
    el.innerHTML = '<div class="card"><h2>GPUs</h2><div class="muted">No GPU telemetry: engines expose no DCGM series, no RJ_GPU_METRICS_URLS are set and nvidia-smi is not available locally.</div></div>';
    return;
  }
  const groups = new Map();
  for (const g of gpus) {
    const key = g.engine === null ? 'host' : g.engine;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(g);
  }
  const series = S.series.gpus;
  const last = 300;  // sparkline: the last 5 minutes
  let html = '';
  for (const [key, list] of groups) {
    const e = key === 'host' ? null : (st.engines || [])[key];
    const title = e ? `engine ${e.ordinal} <span class="muted">· ${esc(e.profile)}${e.models ? ' · ' + esc(e.models) : ''}</span><span class="state ${e.state}">${esc(stateLabel(e.state))}</span>` : 'host GPUs <span class="muted">(nvidia-smi)</span>';
    html += `<div class="card engine-group${list.length > 4 ? ' wide' : ''}" data-engine="${key}"><h2>${title} <span class="muted">· ${list.length} device${list.length === 1 ? '' : 's'}</span></h2><div class="gpu-grid">`;
    for (const g of list) {
      const total = isNum(g.fb_used_mib) && isNum(g.fb_free_mib) ? g.fb_used_mib + g.fb_free_mib : null;
      const memPct = total ? (100 * g.fb_used_mib) / total : null;
      const sg = series.find((x) => x.engine === g.engine && x.device === g.device);
      const util = sg ? sg.util.slice(-last) : [];
      const tempCls = isNum(g.temp_c) ? (g.temp_c >= 83 ? 'hot' : g.temp_c >= 75 ? 'warm' : '') : '';
      html += `<div class="gpu" data-engine="${key}" data-device="${esc(g.device)}">` +
        `<div class="head"><b>GPU ${esc(g.device)}</b><span class="util">${esc(fmtPct(g.util))}</span></div>` +
        `<div class="meter"><div style="width:${isNum(g.util) ? Math.min(100, g.util) : 0}%"></div></div>` +
        sparkline(util, 100, '#38bdf8') +
        `<div class="row"><span>memory</span><span>${total ? (g.fb_used_mib / 1024).toFixed(1) + ' / ' + (total / 1024).toFixed(1) + ' GiB' : '—'}</span></div>` +
        `<div class="meter mem"><div style="width:${memPct ? memPct.toFixed(0) : 0}%"></div></div>` +
        `<div class="row"><span>power</span><span>${isNum(g.power_w) ? g.power_w.toFixed(0) + ' W' : '—'}</span></div>` +
        `<div class="row"><span>temperature</span><span class="${tempCls}">${isNum(g.temp_c) ? g.temp_c.toFixed(0) + ' °C' : '—'}</span></div>` +
        `<div class="row"><span>clocks</span><span>${isNum(g.sm_clock_mhz) ? g.sm_clock_mhz.toFixed(0) : '—'} / ${isNum(g.mem_clock_mhz) ? g.mem_clock_mhz.toFixed(0) : '—'} MHz</span></div>` +
        '</div>';
    }
    html += '</div></div>';
  }
  el.innerHTML = html;
}

// ------------------------------------------------------------------ decisions
async function refreshDecisions(force) {
  const now = Date.now();
  if (!force && now - S.decisionsAt < 2000) return;
  S.decisionsAt = now;
  try {
    S.decisions = await getJSON('/api/v1/decisions?n=50');
    renderDecisions();
  } catch (e) { /* the next tick retries */ }
}

// The numeric terms come as the answer's `columns` (request/route/terms.h): a new term shows up
// here without a change. Profile, eligibility and failing are drawn by name.
function termCell(c, col) {
  const v = c[col.key];
  if (col.key === 'score') return `score ${isNum(v) ? v.toFixed(2) : '—'}`;
  if (col.key === 'load_units') return `load ${v}${c.failing ? ' · failing' : ''}`;
  return `${col.label} ${v}`;
}

// With exact routing, a decision whose prompt was looked up carries each candidate's predicted
// resident prompt tokens (exact_tokens): one more column for those decisions.
function candidateRow(c, chosen, columns, exact) {
  return `<tr class="${c.ordinal === chosen ? 'chosen' : ''}${c.eligible ? '' : ' inel'}">` +
    `<td>#${c.ordinal}</td><td>${profileShort(c.profile)}</td><td>${c.eligible ? 'eligible' : 'not eligible'}</td>` +
    columns.map((col) => `<td>${termCell(c, col)}</td>`).join('') +
    (exact ? `<td class="exact-tokens">exact ${isNum(c.exact_tokens) ? c.exact_tokens.toLocaleString() + ' tok' : '—'}</td>` : '') +
    '</tr>';
}

// How exact routing answered (ramjet_exact_route_total{outcome}); placed on exact overlaps or
// not, and why.
function exactNote(x) {
  if (x === 'exact') return 'placed on the engines\' exact resident tokens (KV events)';
  if (x === 'exact_partial') return 'placed on the trusted engines\' exact resident tokens and, for an engine whose ' +
    'KV-event index is not trusted, its fingerprint estimate (no predicted tokens shown for it)';
  if (x === 'shadow_agree') return 'shadow: the approximate choice holds the most of the prompt';
  if (x === 'shadow_would_move') return 'shadow: another engine holds more of the prompt';
  if (x === 'untrusted') return 'no healthy engine\'s KV-event index is trusted: placed on the approximate index';
  return 'placed on the approximate index';
}
// used: the exact overlaps placed it (or agreed); moved: shadow would have moved it; fallback: an
// engine's exact trust is missing (a fenced, replaying or absent index, withdrawn, unattested);
// approx: exact routing was not for this request (size, tokenization).
function exactClass(x) {
  if (x === 'exact' || x === 'exact_partial' || x === 'shadow_agree') return 'used';
  if (x === 'shadow_would_move') return 'moved';
  if (x === 'untrusted' || x === 'withdrawn' || x === 'unattested') return 'fallback';
  return 'approx';
}

function renderDecisions() {
  const d = S.decisions;
  if (!d) return;
  $('#dec-note').textContent = `newest first · ${d.decisions.length} of ${d.total} decisions (the last ${d.capacity} are kept) · terms per candidate, best ranked first`;
  const rows = d.decisions.map((r) => {
    const cands = r.candidates || [];
    const exact = cands.some((c) => isNum(c.exact_tokens));
    const row = (c) => candidateRow(c, r.chosen, d.columns || [], exact);
    const head = cands.slice(0, 4).map(row).join('');
    const rest = cands.length > 4
      ? `<details><summary>${cands.length - 4} more</summary><table class="cands">${cands.slice(4).map(row).join('')}</table></details>`
      : '';
    const x = r.exact;
    const exactTag = x
      ? ` <span class="exact ${exactClass(x)}"` +
        ` data-exact="${esc(x)}" title="${esc(exactNote(x))}">exact: ${esc(x)}</span>`
      : '';
    const time = new Date(r.unix_ms).toLocaleTimeString([], { hour12: false }) + '.' + String(r.unix_ms % 1000).padStart(3, '0');
    return `<tr class="decision" data-seq="${r.seq}"><td>${r.seq}</td><td>${time}</td><td>${esc(r.endpoint)}</td><td>${esc(r.policy)}</td>` +
      `<td><span class="outcome">${esc(r.outcome)}</span>${exactTag}${r.fail_open ? ' <b style="color:var(--red)">fail-open</b>' : ''}</td>` +
      `<td>${r.chosen === null ? '—' : '#' + r.chosen}</td><td>${r.request_bytes.toLocaleString()}</td><td>${r.cold ? 'cold' : ''}</td>` +
      `<td><table class="cands">${head}</table>${rest}</td></tr>`;
  });
  $('#decisions tbody').innerHTML = rows.join('') || '<tr><td colspan="9" class="muted">no routing decision yet</td></tr>';
}

// ------------------------------------------------------------------ shell
function renderHeader() {
  const st = S.state;
  $('#fleet-summary').textContent = `${st.healthy}/${st.total} engines healthy`;
  const b = $('#banner');
  if (st.fail_open) {
    const fo = (st.engines || []).filter((e) => e.fail_open).map((e) => '#' + e.ordinal);
    b.hidden = false;
    b.textContent = 'FAIL-OPEN: no engine is healthy — requests go to the best-ranked fenced engines' +
      (fo.length ? ` (${fo.join(', ')})` : '') + '.';
  } else {
    b.hidden = true;
  }
}

function render() {
  if (!S.state || !S.state.t || !S.series) return;
  renderHeader();
  try {
    if (S.tab === 'overview') renderOverview();
    else if (S.tab === 'serving') renderServing();
    else if (S.tab === 'topology') renderTopology();
    else if (S.tab === 'gpus') renderGpus();
    else if (S.tab === 'decisions') refreshDecisions(false);
  } catch (e) {
    console.error(e);
  }
  document.body.dataset.ready = '1';
}

function selectTab() {
  const want = (location.hash || '#overview').slice(1);
  S.tab = TABS.includes(want) ? want : 'overview';
  for (const t of TABS) $('#tab-' + t).hidden = t !== S.tab;
  for (const a of document.querySelectorAll('#tabs a')) a.classList.toggle('active', a.dataset.tab === S.tab);
  topoShape = '';
  window.scrollTo(0, 0);
  if (S.tab === 'decisions') refreshDecisions(true);
  render();
}

async function main() {
  window.addEventListener('hashchange', selectTab);
  let resizeTimer = null;
  window.addEventListener('resize', () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(render, 150); });
  try {
    S.series = await getJSON('/api/v1/series?window=' + MAX_POINTS);
    for (const k of POINT_KEYS) if (!S.series[k]) S.series[k] = [];
  } catch (e) {
    S.series = emptySeries();
  }
  try { onState(await getJSON('/api/v1/state')); } catch (e) { /* the stream brings it */ }
  selectTab();
  connect();
}

main();
