// The dashboard in a real browser: Debian's chromium driven by playwright-core (no browser
// download), against ramjet in front of four ramjet-sim engines (two MTP, two standard, two
// synthetic GPUs each) with a little streaming traffic. Every tab must render live data; the
// topology shows the four engines with their profiles and their KV-event indexes trusted; an
// index fenced by a lost batch is drawn striped with its meaning in a tooltip while the engine
// stays healthy, and the Decisions tab shows exact routing's outcome and predicted tokens;
// killing one engine turns its node red; an engine that answers 500 to everything turns magenta
// (ejected); the GPU grid shows eight devices. Screenshots go to $ARTIFACTS_DIR (default
// build/dev/test-artifacts/browser).
//
// Environment: RAMJET_BIN, SIM_BIN (the binaries), CHROMIUM (default /usr/bin/chromium),
// ARTIFACTS_DIR. Exit 77 (ctest: skipped) when chromium or playwright-core is missing.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '..', '..');
const RAMJET = process.env.RAMJET_BIN || join(repo, 'build/dev/src/app/ramjet');
const SIM = process.env.SIM_BIN || join(repo, 'build/dev/sim/server/ramjet-sim');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = process.env.ARTIFACTS_DIR || join(repo, 'build/dev/test-artifacts/browser');
const SKIP = 77;
// ENGINES=64 runs the same checks at scale (the default, 4, is the ctest).
const N = Math.max(1, Number(process.env.ENGINES || 4));
const shot = (name) => join(ARTIFACTS, (N === 4 ? '' : `e${N}-`) + name + '.png');

let chromium;
try {
  ({ chromium } = await import('playwright-core'));
} catch (e) {
  console.log(`SKIP: playwright-core is not installed (npm ci --prefix test/browser): ${e.message}`);
  process.exit(SKIP);
}
if (!existsSync(CHROMIUM)) {
  console.log(`SKIP: ${CHROMIUM} not found (apt-get install chromium)`);
  process.exit(SKIP);
}
for (const b of [RAMJET, SIM]) {
  if (!existsSync(b)) {
    console.error(`FAIL: ${b} not built`);
    process.exit(1);
  }
}
mkdirSync(ARTIFACTS, { recursive: true });

// ------------------------------------------------------------------ processes
const procs = [];
const logs = new Map();
function start(name, cmd, args, env, ready) {
  return new Promise((resolvePromise, reject) => {
    const p = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    procs.push(p);
    let out = '';
    logs.set(name, () => out);
    const timer = setTimeout(() => reject(new Error(`${name} did not start:\n${out.slice(-2000)}`)), 20000);
    const onData = (d) => {
      out += d.toString();
      const m = out.match(ready);
      if (m && timer) {
        clearTimeout(timer);
        resolvePromise({ proc: p, match: m });
      }
    };
    p.stdout.on('data', onData);
    p.stderr.on('data', onData);
    p.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (${code}) before it was ready:\n${out.slice(-2000)}`));
    });
  });
}

function cleanEnv(extra) {
  const env = { PATH: process.env.PATH || '/usr/bin:/bin' };
  for (const k of ['ASAN_OPTIONS', 'UBSAN_OPTIONS', 'LSAN_OPTIONS']) if (process.env[k]) env[k] = process.env[k];
  return Object.assign(env, extra);
}

let stopping = false;
async function cleanup() {
  stopping = true;
  for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
}
process.on('exit', () => { for (const p of procs) try { p.kill('SIGKILL'); } catch (e) { /* gone */ } });

// ------------------------------------------------------------------ checks
let failures = 0, passes = 0;
function check(cond, what) {
  if (cond) { passes++; console.log(`ok   ${what}`); } else { failures++; console.log(`FAIL ${what}`); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(fn, timeoutMs, what) {
  const t0 = Date.now();
  let last;
  while (Date.now() - t0 < timeoutMs) {
    try { last = await fn(); if (last) return { value: last, ms: Date.now() - t0 }; } catch (e) { last = e.message; }
    await sleep(200);
  }
  console.log(`  (timed out after ${timeoutMs} ms waiting for ${what}; last: ${JSON.stringify(last)})`);
  return { value: null, ms: Date.now() - t0 };
}

// ------------------------------------------------------------------ traffic
const SYSTEM = [0, 1, 2].map((a) => `You are the assistant of app ${a}. ` + 'Follow the house rules carefully. '.repeat(120));
function traffic(apiPort, workers) {
  let n = 0;
  const one = async (w) => {
    while (!stopping) {
      const body = {
        model: 'ramjet-sim', stream: true, max_tokens: 40 + ((n * 7) % 60),
        stream_options: { include_usage: true },
        messages: [{ role: 'system', content: SYSTEM[(w + n) % 3] }, { role: 'user', content: `question ${n++} from ${w}` }],
      };
      try {
        const r = await fetch(`http://127.0.0.1:${apiPort}/v1/chat/completions`, {
          method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
          signal: AbortSignal.timeout(20000),
        });
        await r.text();
      } catch (e) {
        await sleep(100);
      }
    }
  };
  return Promise.all(Array.from({ length: workers }, (_, w) => one(w)));
}

// ------------------------------------------------------------------ main
let browser;
let code = 0;
try {
  // The first half MTP, the second half standard (4 engines: mtp,mtp,standard,standard).
  const profiles = Array.from({ length: N }, (_, i) => (i < Math.ceil(N / 2) ? 'mtp' : 'standard'));
  const presets = profiles.map((p) => (p === 'mtp' ? 'qwen3.8-27b-tp4-mtp' : 'qwen3.8-27b-tp4'));
  // Every engine publishes vLLM's KV events (live and replay endpoints on ports of its own).
  const kvConfig = JSON.stringify({ enable_kv_cache_events: true, publisher: 'zmq', topic: 'kv',
    endpoint: 'tcp://*:0', replay_endpoint: 'tcp://*:0', buffer_steps: 1000 });
  const sims = [];
  for (let i = 0; i < N; i++) {
    const s = await start(`sim${i}`, SIM, ['--host', '127.0.0.1', '--port', '0', '--preset', presets[i], '--speed', '2',
      '--enable-prompt-tokens-details', '--gpus', '2', '--seed', String(i + 1), '--kv-events-config', kvConfig],
    cleanEnv({}), /listening port=(\d+).* kv_endpoint=(\S+) kv_replay=(\S+)/);
    const local = (ep) => 'tcp://127.0.0.1:' + ep.split(':').pop();
    sims.push({ proc: s.proc, port: Number(s.match[1]), kv: local(s.match[2]), replay: local(s.match[3]) });
  }
  const upstreams = sims.map((s) => `http://127.0.0.1:${s.port}`).join(',');
  const env = {
    RJ_UPSTREAM: upstreams, RJ_UPSTREAM_PROFILES: profiles.join(','),
    RJ_LISTEN: '127.0.0.1:0', RJ_METRICS_LISTEN: '127.0.0.1:0', RJ_THREADS: '2',
    RJ_PROBE_INTERVAL_MS: '200', RJ_PROBE_TIMEOUT_MS: '500', RJ_PROBE_RECENT_SUCCESS_MS: '300',
    RJ_READY_SUCCESSES: '1', RJ_READY_STABLE_SECONDS: '0', RJ_SHUTDOWN_GRACE_MS: '3000',
  };
  // The engine scrape interval, when this build has the option (1 s keeps the test short).
  const help = execFileSync(RAMJET, ['--help'], { env: cleanEnv({}) }).toString();
  if (help.includes('RJ_ENGINE_SCRAPE_INTERVAL_MS')) env.RJ_ENGINE_SCRAPE_INTERVAL_MS = '1000';
  // Outlier ejection: quick to trigger, long enough to see (when this build has it).
  const ejects = help.includes('RJ_OUTLIER_CONSECUTIVE_FAILURES');
  if (ejects) Object.assign(env, { RJ_OUTLIER_CONSECUTIVE_FAILURES: '3', RJ_OUTLIER_PENALTY_MS: '100',
    RJ_OUTLIER_BASE_EJECTION_MS: '60000' });
  // Exact routing from the engines' KV events (when this build has it).
  const kv = help.includes('RJ_KV_EVENT_LIVE_ENDPOINTS');
  if (kv) Object.assign(env, { RJ_KV_EVENT_LIVE_ENDPOINTS: sims.map((s) => s.kv).join(','),
    RJ_KV_EVENT_REPLAY_ENDPOINTS: sims.map((s) => s.replay).join(','), RJ_KV_EVENT_TOPIC: 'kv',
    RJ_KV_EVENT_TIMEOUT_MS: '2000' });
  const rj = await start('ramjet', RAMJET, [], cleanEnv(env), /listening api=[0-9.]+:(\d+) metrics=[0-9.]+:(\d+)/);
  const apiPort = Number(rj.match[1]), metricsPort = Number(rj.match[2]);
  const base = `http://127.0.0.1:${metricsPort}`;
  console.log(`ramjet api :${apiPort} metrics :${metricsPort}; engines ${upstreams}`);
  const load = traffic(apiPort, Math.max(6, Math.min(N, 24)));

  browser = await chromium.launch({
    executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const external = [];
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (u.protocol !== 'data:' && u.host !== `127.0.0.1:${metricsPort}`) external.push(r.url());
  });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });

  await page.goto(base + '/');
  check(new URL(page.url()).pathname === '/ui/', `/ redirects to /ui/ (${page.url()})`);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 15000 });

  // ---- Overview: tiles with live values (the 30 s windows fill as traffic flows).
  const tileValue = (key) => page.$eval(`[data-tile="${key}"] .value`, (e) => e.textContent.trim());
  const live = await until(async () => {
    const v = {};
    for (const k of ['gen_tps', 'stream_tps', 'ttft_p95', 'inflight', 'kv_usage', 'cache_hit']) v[k] = await tileValue(k);
    const sub = await page.$eval('[data-tile="stream_tps"] .sub', (e) => e.textContent);
    return Object.values(v).every((x) => x && !x.startsWith('—')) && !sub.includes('—') ? v : null;
  }, 45000, 'every overview tile to show a value');
  check(live.value, `overview tiles live: ${JSON.stringify(live.value)}`);
  const bars = await page.$$eval('#hours rect[height]', (rs) => rs.filter((r) => Number(r.getAttribute('height')) > 2).length);
  check(bars >= 1, `tokens-per-hour strip has a bar for this hour (${bars})`);
  await sleep(1500);
  await page.screenshot({ path: shot('overview'), fullPage: true });

  // ---- Serving: every chart drew lines.
  await page.goto(base + '/ui/#serving');
  await page.waitForSelector('body[data-ready="1"]');
  // TPOT is charted when ramjet measures it (ramjet_time_per_output_token_seconds has counts).
  const prom = await (await fetch(base + '/metrics')).text();
  const tpotCount = Number((prom.match(/^ramjet_time_per_output_token_seconds_count(?:\{\})? (\S+)$/m) || [])[1] || 0);
  const charts = ['ch-tps', 'ch-stream', 'ch-ttft', 'ch-inflight', 'ch-runwait', 'ch-kv', 'ch-hit', 'ch-rate'];
  if (tpotCount > 0) charts.push('ch-tpot');
  const lines = () => Promise.all(charts.map((id) => page.$$eval(`#${id} svg path`, (p) => p.length)));
  await until(async () => (await lines()).every((n) => n > 0), 20000, 'lines in every serving chart');
  const counts = await lines();
  charts.forEach((id, i) => check(counts[i] > 0, `serving chart #${id} has ${counts[i]} line(s)`));
  if (tpotCount === 0) {
    const msg = await page.$eval('#ch-tpot', (e) => e.textContent);
    check(msg.includes('no TPOT'), `TPOT not measured by this ramjet: the chart says so (${msg.trim()})`);
  }
  await page.screenshot({ path: shot('serving'), fullPage: true });

  // ---- Topology: every engine, its declared profile, all healthy.
  await page.goto(base + '/ui/#topology');
  await page.waitForSelector('g.node[data-state]');
  const nodes = await page.$$eval('g.node', (gs) => gs.map((g) => ({ o: g.dataset.ordinal, p: g.dataset.profile, s: g.dataset.state })));
  check(nodes.length === N, `topology shows ${N} engine nodes (${nodes.length})`);
  check(JSON.stringify(nodes.map((n) => n.p)) === JSON.stringify(profiles),
    `topology profiles ${N > 8 ? '(' + N + ')' : profiles} (${N > 8 ? 'as declared' : nodes.map((n) => n.p)})`);
  check(nodes.every((n) => n.s === 'healthy'), `all nodes healthy (${nodes.map((n) => n.s)})`);
  if (kv) {
    const trusted = await until(() => page.$$eval('g.node', (gs) =>
      (gs.every((g) => g.dataset.kv === 'trusted') ? gs.length : 0)), 10000, 'every KV-event index trusted');
    check(trusted.value === N, `every node's KV-event index is trusted (${trusted.value})`);
  }
  const active = await until(() => page.$$eval('path.edge.active', (e) => e.length), 10000, 'an animated edge');
  check(active.value > 0, `edges animate with traffic (${active.value} active)`);
  await sleep(1000);
  await page.screenshot({ path: shot('topology'), fullPage: true });

  // ---- GPUs: every engine's 2 synthetic devices.
  await page.goto(base + '/ui/#gpus');
  const gpus = await until(() => page.$$eval('.gpu', (g, want) => (g.length === want ? g.length : 0), 2 * N), 15000,
    `${2 * N} GPU cards`);
  check(gpus.value === 2 * N, `GPU grid shows ${2 * N} devices (${gpus.value})`);
  const groups = await page.$$eval('.engine-group', (g) => g.length);
  check(groups === N, `GPU devices grouped by engine (${groups} groups)`);
  const utils = await page.$$eval('.gpu .util', (u) => u.map((e) => e.textContent));
  check(utils.length === 2 * N && utils.every((u) => u !== '—'), `every GPU shows utilization (${N > 8 ? utils.length : utils})`);
  await page.screenshot({ path: shot('gpus'), fullPage: true });

  // ---- Decisions: rows with each candidate's terms.
  await page.goto(base + '/ui/#decisions');
  const rows = await until(() => page.$$eval('tr.decision', (r) => r.length), 10000, 'decision rows');
  check(rows.value > 0, `decisions table has ${rows.value} rows`);
  const cands = await page.$$eval('tr.decision', (r) => r[0].querySelectorAll('table.cands tr').length);
  check(cands === N, `a decision lists its ${N} candidates (${cands})`);
  const text = await page.$eval('#decisions tbody', (t) => t.textContent);
  check(!text.includes('house rules') && !text.includes('127.0.0.1'), 'no prompt text or hosts in the decisions table');
  await page.screenshot({ path: shot('decisions'), fullPage: false });

  // ---- KV-event index: a long prompt is placed exactly (the Decisions tab says so, with each
  // candidate's predicted resident tokens); then engine 1 loses a batch its replay cannot fill:
  // its index is fenced — drawn striped, explained in a tooltip — while the engine stays healthy,
  // and the next long prompt is placed exactly on the others and engine 1's fingerprint estimate.
  if (kv && N > 1) {
    const longChat = async (k) => {
      const system = `Browser agent ${k}. ` + Array.from({ length: 1400 }, (_, i) => `rule ${k}.${i}: keep invariant ${(i * 7) % 13}.`).join(' ');
      const r = await fetch(`http://127.0.0.1:${apiPort}/v1/chat/completions`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: AbortSignal.timeout(30000),
        body: JSON.stringify({ model: 'ramjet-sim', max_tokens: 2,
          messages: [{ role: 'system', content: system }, { role: 'user', content: 'first question' }] }),
      });
      await r.text();
      return r.headers.get('x-ramjet-route') || '';
    };
    const placed = await longChat(1);
    check(placed.startsWith('exact'), `a long prompt is placed exactly (X-Ramjet-Route: ${placed})`);
    const exactRow = await until(() => page.$$eval('tr.decision', (rs) => {
      const r = rs.find((x) => x.querySelector('.exact[data-exact="exact"]'));
      return r ? { cells: r.querySelectorAll('td.exact-tokens').length, title: r.querySelector('.exact').title } : null;
    }), 10000, 'a decision row with exact: exact');
    check(exactRow.value && exactRow.value.cells >= Math.min(N, 4),
      `the exact decision shows each candidate's predicted tokens (${JSON.stringify(exactRow.value)})`);
    if (exactRow.value) {
      await page.locator('tr.decision:has(.exact[data-exact="exact"])').first().screenshot({ path: shot('decision-exact') });
    }

    await page.goto(base + '/ui/#topology');
    await page.waitForSelector('g.node[data-kv]');
    await fetch(`http://127.0.0.1:${sims[1].port}/sim/fault`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ kv_skip: 3 }),
    });
    // A prompt of its own, several blocks long, so the engine publishes a batch after the gap.
    await (await fetch(`http://127.0.0.1:${sims[1].port}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'ramjet-sim', max_tokens: 2, messages: [{ role: 'user', content: 'straight to the engine: ' + 'detail 7 '.repeat(300) }] }),
    })).text();
    const fencedKv = await until(() => page.$eval('g.node[data-ordinal="1"]', (g) => (g.dataset.kv === 'fenced' ? {
      state: g.dataset.state,
      band: getComputedStyle(g.querySelector('.kvband')).stroke,
      fill: getComputedStyle(g.querySelector('.kvband')).fill,
      text: g.querySelector('.kvrow .kvstate').textContent,
      tip: g.querySelector('.kvrow title').textContent,
    } : null)), 10000, "engine 1's index fenced");
    const f = fencedKv.value;
    check(f && f.state === 'healthy', `engine 1's index fenced, the engine itself healthy (${f && f.state})`);
    check(f && f.band === 'rgb(251, 146, 60)' && f.fill.includes('kv-hatch'),
      `the fenced index is drawn striped orange (stroke ${f && f.band}, fill ${f && f.fill})`);
    check(f && f.text.includes('fenced') && f.tip.includes('fingerprint) estimate'),
      `its label and tooltip say what it means (${f && f.text} / ${f && f.tip.slice(0, 60)}…)`);
    const legend = await page.$eval('#kv-legend', (l) => !l.hidden && l.textContent.includes('fenced'));
    check(legend, 'the topology legend explains the KV-index states');
    const status = await page.$eval('#kv-status', (e) => (e.hidden ? '' : e.textContent));
    check(status.includes('fingerprint estimates') && status.includes('engine 1 KV index fenced'),
      `the topology says which engine exact routing estimates, and why (${status})`);
    const othersKv = await page.$$eval('g.node', (gs) => gs.filter((g) => g.dataset.ordinal !== '1').map((g) => g.dataset.kv));
    check(othersKv.every((k) => k === 'trusted'), `the other indexes stay trusted (${N > 8 ? othersKv.length : othersKv})`);
    await sleep(1200);
    await page.screenshot({ path: shot('topology-kv-fenced'), fullPage: true });

    const fallback = await longChat(2);
    check(fallback.startsWith('exact_partial'), `with an index fenced, a long prompt is placed exactly on the others (X-Ramjet-Route: ${fallback})`);
    await page.goto(base + '/ui/#decisions');
    const untrusted = await until(() => page.$$eval('tr.decision .exact[data-exact="exact_partial"]', (e) => e.length),
      10000, 'a decision row with exact: exact_partial');
    check(untrusted.value > 0, `the Decisions tab shows it (${untrusted.value} row(s) exact: exact_partial)`);
    await page.screenshot({ path: shot('decisions-exact'), fullPage: false });
    await page.goto(base + '/ui/#overview');
    const chip = await until(() => page.$eval('.chip[data-ordinal="1"]', (c) =>
      (c.classList.contains('kv-untrusted') ? c.textContent : null)), 5000, "engine 1's chip marked");
    check(chip.value && chip.value.includes('KV index fenced'), `the overview chip says so (${chip.value})`);
  }

  // ---- Fencing: kill the last engine; its node turns red within a few seconds.
  await page.goto(base + '/ui/#topology');
  await page.waitForSelector('g.node[data-state]');
  const t0 = Date.now();
  const victim = String(N - 1);
  sims[N - 1].proc.kill('SIGKILL');
  const red = await until(() => page.$eval(`g.node[data-ordinal="${victim}"]`, (g) => {
    const stroke = getComputedStyle(g.querySelector('rect.box')).stroke;
    return g.dataset.state === 'unhealthy' ? stroke : null;
  }), 8000, `node ${victim} fenced`);
  check(red.value === 'rgb(239, 68, 68)', `killed engine's node is red (stroke ${red.value}) after ${Date.now() - t0} ms`);
  const others = await page.$$eval('g.node', (gs, v) => gs.filter((g) => g.dataset.ordinal !== v).map((g) => g.dataset.state), victim);
  check(others.every((s) => s === 'healthy'), `the other nodes stay healthy (${N > 8 ? others.length : others})`);
  await sleep(1200);
  await page.screenshot({ path: shot('topology-fenced'), fullPage: true });

  // ---- Ejection: engine 0 answers every request with 500 (its /health stays 200).
  if (ejects && N > 2) {
    await fetch(`http://127.0.0.1:${sims[0].port}/sim/fault`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ error_rate: 1, error_status: 500 }),
    });
    const magenta = await until(() => page.$eval('g.node[data-ordinal="0"]', (g) =>
      (g.dataset.state === 'ejected' ? getComputedStyle(g.querySelector('rect.box')).stroke : null)), 15000, 'node 0 ejected');
    check(magenta.value === 'rgb(232, 121, 249)', `the failing engine's node is magenta: ejected (stroke ${magenta.value})`);
    const label = await page.$eval('g.node[data-ordinal="0"] .state', (t) => t.textContent);
    check(label.startsWith('ejected'), `its label says so (${label})`);
    await page.goto(base + '/ui/#overview');
    const tile = await until(() => page.$eval('#tiles', (t) => (t.textContent.includes('1 ejected') ? t.textContent : null)),
      5000, 'the engines tile counts the ejected engine');
    check(tile.value.includes('1 ejected'), 'the engines tile counts it');
    await page.goto(base + '/ui/#topology');
    await sleep(1200);
    await page.screenshot({ path: shot('topology-ejected'), fullPage: true });
  }

  check(external.length === 0, `no request left the dashboard's origin (${external.slice(0, 3)})`);
  check(errors.length === 0, `no page errors (${errors.slice(0, 3)})`);

  // ---- Shutdown: SIGTERM ends the SSE stream and ramjet exits 0.
  await browser.close();
  browser = null;
  stopping = true;
  const exited = new Promise((r) => rj.proc.on('exit', (c, sig) => r({ c, sig })));
  rj.proc.kill('SIGTERM');
  const ex = await Promise.race([exited, sleep(10000).then(() => ({ c: 'timeout' }))]);
  check(ex.c === 0, `ramjet exits 0 on SIGTERM (${JSON.stringify(ex)})`);
  await Promise.race([load, sleep(3000)]);
  const out = logs.get('ramjet')();
  check(!/AddressSanitizer|runtime error:|LeakSanitizer/.test(out), 'no sanitizer report from ramjet');
  writeFileSync(join(ARTIFACTS, 'ramjet.log'), out);
} catch (e) {
  console.error(e);
  failures++;
  code = 1;
} finally {
  if (browser) await browser.close().catch(() => {});
  await cleanup();
}
console.log(`screenshots: ${ARTIFACTS}`);
console.log(`${passes} passed, ${failures} failed`);
process.exit(failures ? 1 : code);
