// Differential test: src/render's tokenizer (through the ramjet-tokenize CLI) against the Rust HF
// `tokenizers` crate compiled for Node (@anush008/tokenizers, the engine vLLM uses), on
// thousands of generated strings per tokenizer: CJK, emoji (ZWJ, flags, skin tones), combining
// marks, digits, code, whitespace runs (incl. NEL, NBSP, U+2028, U+3000), special-token
// look-alikes, case-folding traps, other scripts and random code points.
//
//   node tokenizer_diff.mjs --bin build/dev/src/render/tokenize/ramjet-tokenize \
//        --testdata test/data/testdata [--count 3000] [--seed 1]
// Exit 0: identical ids everywhere; 1: a difference (the first ones are printed);
// 77: skipped (node_modules or the testdata is absent).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const count = Number(args.count ?? 3000);
const testdata = args.testdata ?? path.join(here, '../data/testdata');

let Tokenizer;
try {
  Tokenizer = createRequire(import.meta.url)('@anush008/tokenizers').Tokenizer;
} catch (e) {
  console.log('SKIP: @anush008/tokenizers is not installed (npm ci --prefix test/oracle)');
  process.exit(77);
}
if (!fs.existsSync(path.join(testdata, 'models/qwen3/tokenizer.json'))) {
  console.log(`SKIP: no tokenizer files under ${testdata}`);
  process.exit(77);
}
if (!args.bin || !fs.existsSync(args.bin)) {
  console.error('--bin ramjet-tokenize is required');
  process.exit(2);
}

// ---- deterministic generator (splitmix32-ish) ----
let state = Number(args.seed ?? 1) >>> 0;
const rnd = () => {
  state = (state + 0x9e3779b9) >>> 0;
  let z = state;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
  return ((z ^ (z >>> 16)) >>> 0) / 4294967296;
};
const int = (n) => Math.floor(rnd() * n);
const pick = (xs) => xs[int(xs.length)];
const rep = (s, n) => Array.from({ length: n }, () => s).join('');
const cp = (lo, hi) => String.fromCodePoint(lo + int(hi - lo + 1));

const specials = ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<think>', '</think>', '<tool_call>',
  '</tool_call>', '<tool_response>', '<|vision_start|>', '<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>',
  '<｜User｜>', '<｜Assistant｜>', '<｜tool▁calls▁begin｜>', '<｜tool▁sep｜>', '<｜search▁begin｜>'];
const lookalike = () => {
  const s = pick(specials);
  switch (int(6)) {
    case 0: return s.slice(0, 1 + int(s.length - 1));
    case 1: return s.slice(int(s.length - 1));
    case 2: return s.toUpperCase();
    case 3: return s.replace('|', '｜');
    case 4: return s + s;
    default: return ' ' + s + ' ';
  }
};
const pieces = [
  () => pick(['Hello', 'world', 'the', 'The', 'tokenizer', 'don\'t', 'I\'M', 'we\'LL', 'it\'s', 'ſ', 'ﬁ', 'K', 'straße',
    'Ǆ', 'İstanbul', 'café', 'naïve', 'Ωmega']),
  () => Array.from({ length: 1 + int(12) }, () => cp(0x4e00, 0x9fff)).join(''),  // CJK
  () => Array.from({ length: 1 + int(8) }, () => cp(0x3040, 0x30ff)).join(''),   // kana
  () => Array.from({ length: 1 + int(6) }, () => cp(0xac00, 0xd7a3)).join(''),   // Hangul
  () => pick(['😀', '👍🏽', '👨‍👩‍👧‍👦', '🇺🇸🇯🇵', '🏳️‍🌈', '❤️', '🫠', '1️⃣', '🧑🏿‍🚀']),
  () => pick(['e', 'a', 'o', 'n', 'क', 'ก']) + Array.from({ length: 1 + int(4) }, () => cp(0x300, 0x36f)).join(''),
  () => String(int(10 ** (1 + int(9)))) + pick(['', '.5', ',000', 'e-3', '٣', '²', '½', '１２']),
  () => pick(['def f(x):\n    return x**2\n', 'if (a != b) { return {"k": [1, 2]}; }', '#include <vector>\r\n',
    'SELECT * FROM t WHERE id=1;', '\tfoo_bar = baz->qux(0x1F);', 'x => x + 1', '<div class="a">&nbsp;</div>',
    '// comment\n\n\n', '$ ls -la | grep "x"', '```python\nprint(1)\n```']),
  () => rep(pick([' ', '\n', '\t', '\r\n', '  \n', '\u00a0', '\u0085', '\u2028', '\u3000', '\u000b', '\u000c', ' \t ']), 1 + int(12)),
  lookalike,
  () => pick(['مرحبا بالعالم', 'שלום', 'नमस्ते दुनिया', 'สวัสดีครับ', 'Привет, мир!', 'Γειά σου', 'ሰላም', 'ᚠᛇᚻ', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', '𐍈']),
  () => rep(pick(['a', 'ab', '!', '=', '-', '_', '.', '0', '中']), 2 + int(60)),
  () => Array.from({ length: 1 + int(5) }, () => {
    let c;
    do { c = int(0x30000); } while (c >= 0xd800 && c <= 0xdfff);
    return String.fromCodePoint(c);
  }).join(''),
  () => pick(['\'s', '\'S', '\'ll', '\'Re', '\'ve', '\'D', '\'m', '\'ſ', '\'K']),
  () => pick(['!', '?', '...', '—', '–', '«»', '“”', '（）', '。', '，', '、', '・', '€', '∑', '©', '™']),
];
const gen = () => {
  const n = 1 + int(8);
  let s = '';
  for (let i = 0; i < n; i++) {
    s += pick(pieces)();
    if (rnd() < 0.4) s += pick([' ', '', '\n', '  ', ',', ' ']);
  }
  return s;
};
const texts = [''];
while (texts.length < count) texts.push(gen());

// ---- tokenizers ----
const qwenPath = path.join(testdata, 'models/qwen3/tokenizer.json');
const dsPath = path.join(testdata, 'models/deepseek-v3/tokenizer.json');
const overridePath = path.join(testdata, 'models/deepseek-v3.1/added_tokens_override.json');
const dsJson = JSON.parse(fs.readFileSync(dsPath, 'utf8'));
for (const t of JSON.parse(fs.readFileSync(overridePath, 'utf8')).added_tokens) {
  const i = dsJson.added_tokens.findIndex((a) => a.id === t.id);
  if (i >= 0) dsJson.added_tokens[i] = t; else dsJson.added_tokens.push(t);
}
const configs = [
  { name: 'qwen3', oracle: Tokenizer.fromFile(qwenPath), cli: ['--tokenizer', qwenPath] },
  { name: 'deepseek-v3', oracle: Tokenizer.fromFile(dsPath), cli: ['--tokenizer', dsPath] },
  { name: 'deepseek-v3.1', oracle: Tokenizer.fromString(JSON.stringify(dsJson)),
    cli: ['--tokenizer', dsPath, '--added-tokens', overridePath] },
];

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rj-tokdiff-'));
const input = path.join(tmp, 'texts.jsonl');
fs.writeFileSync(input, texts.map((t) => JSON.stringify(t)).join('\n') + '\n');
let failures = 0;
for (const c of configs) {
  const run = spawnSync(args.bin, [...c.cli, '--jsonl'], { input: fs.readFileSync(input),
    maxBuffer: 1 << 30, env: { ...process.env, ASAN_OPTIONS: 'detect_leaks=0' } });
  if (run.status !== 0) {
    console.error(`${c.name}: ramjet-tokenize exited ${run.status}: ${run.stderr}`);
    process.exit(1);
  }
  const ours = run.stdout.toString('utf8').split('\n');
  let diffs = 0, tokens = 0;
  for (let i = 0; i < texts.length; i++) {
    const want = (await c.oracle.encode(texts[i], null, { addSpecialTokens: false })).getIds().join(',');
    tokens += want ? want.split(',').length : 0;
    if (ours[i] !== want) {
      if (diffs < 10) {
        console.log(`${c.name} DIFF #${i} ${JSON.stringify(texts[i])}\n  ours:   ${ours[i]}\n  oracle: ${want}`);
      }
      diffs++;
    }
  }
  console.log(`${c.name}: ${texts.length} strings, ${tokens} tokens, ${diffs} differences`);
  failures += diffs;
}
fs.rmSync(tmp, { recursive: true, force: true });
process.exit(failures ? 1 : 0);
