// Encode time of src/render's tokenizer vs @anush008/tokenizers (the Rust HF tokenizers for
// Node) on the same ~4K, 20K and 80K-token texts, in the same run. Prints a markdown table.
//   node test/oracle/tokenizer_bench.mjs --bench build/<release>/src/render/tokenize/ramjet-tokenizer-bench \
//        [--testdata test/data/testdata]
// Texts: the goldens' chat renderings and tokenizer texts concatenated (file order, repeated)
// until the token count is reached, exactly as tokenizer_bench.cc builds them; they are written
// to a temporary directory that the Google Benchmark binary reads ($RAMJET_TOKENIZER_TEXTS).
// The oracle time is the median of repeated awaited encode() calls (napi call, Rust encode with
// its own word cache warm, Encoding object), after warm-up.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const testdata = args.testdata ?? path.join(here, '../data/testdata');
const { Tokenizer } = createRequire(import.meta.url)('@anush008/tokenizers');
const tok = Tokenizer.fromFile(path.join(testdata, 'models/qwen3/tokenizer.json'));
const count = async (s) => (await tok.encode(s, null, { addSpecialTokens: false })).getIds().length;

const parts = [];
for (const [file, key] of [['qwen3.jsonl', 'rendered'], ['deepseek-v3.1.jsonl', 'rendered'],
  ['qwen3-tokenize.jsonl', 'text'], ['deepseek-v3-tokenize.jsonl', 'text']]) {
  for (const line of fs.readFileSync(path.join(testdata, 'goldens', file), 'utf8').split('\n')) {
    if (line.trim()) parts.push(JSON.parse(line)[key]);
  }
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rj-tokbench-'));
const sizes = [['4k', 4000], ['20k', 20000], ['80k', 80000]];
const texts = {};
for (const [name, target] of sizes) {
  let text = '', n = 0;
  for (let i = 0; n < target; i = (i + 1) % parts.length) {
    text += parts[i] + '\n';
    n += await count(parts[i] + '\n');
  }
  texts[name] = text;
  fs.writeFileSync(path.join(tmp, `${name}.txt`), text);
}

const oracle = {};
for (const [name] of sizes) {
  const text = texts[name];
  for (let i = 0; i < 5; i++) await tok.encode(text, null, { addSpecialTokens: false });
  const times = [];
  const start = process.hrtime.bigint();
  while (times.length < 15 || (times.length < 200 && Number(process.hrtime.bigint() - start) < 3e9)) {
    const t0 = process.hrtime.bigint();
    await tok.encode(text, null, { addSpecialTokens: false });
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((a, b) => a - b);
  oracle[name] = { ms: times[times.length >> 1], tokens: await count(text), bytes: Buffer.byteLength(text) };
}

const run = spawnSync(args.bench, ['--benchmark_format=json', '--benchmark_filter=encode',
  '--benchmark_repetitions=5', '--benchmark_report_aggregates_only=true'],
{ env: { ...process.env, RAMJET_TOKENIZER_TEXTS: tmp }, maxBuffer: 1 << 26 });
fs.rmSync(tmp, { recursive: true, force: true });
if (run.status !== 0) {
  console.error(run.stderr.toString());
  process.exit(1);
}
const ours = {};
for (const b of JSON.parse(run.stdout.toString()).benchmarks) {
  if (b.aggregate_name !== 'median') continue;
  const name = b.run_name.split('/')[1];
  ours[name] = { ms: b.real_time, cpu: b.cpu_time, tokens: b.tokens };
}
console.log('| text | tokens | bytes | ramjet encode (median, ms) | @anush008/tokenizers encode (median, ms) | ratio |');
console.log('|---|---|---|---|---|---|');
for (const [name] of sizes) {
  const o = oracle[name], r = ours[name];
  if (r.tokens !== o.tokens) console.error(`${name}: token counts differ (${r.tokens} vs ${o.tokens})`);
  console.log(`| ${name} | ${o.tokens} | ${o.bytes} | ${r.ms.toFixed(2)} | ${o.ms.toFixed(2)} | ${(r.ms / o.ms).toFixed(3)} |`);
}
