// Regenerates the tokenizer's exactness fixtures from the official tiktoken
// npm package (its WASM build of tiktoken's Rust core):
//   ranks/<enc>.tiktoken   the rank tables the package ships, in tiktoken's
//                          own file format, for anvil's loader
//   cases.bin              the test texts (UTF-8) and how specials are treated
//   expected/<enc>.bin     tiktoken's ids for every case
//   expected/llama3.bin    the same for Llama 3's encoding: tiktoken built
//                          with Meta's pattern and 256 specials over the
//                          vocabulary expected/train_llama3_1456.tiktoken
//                          (train_ref.js, run first by gen.sh), the
//                          specials numbered from its 1200 ranks as Meta's
//                          tokenizer.py numbers them
// Run through gen.sh (which installs the package first). Input: real.txt
// (committed prose) plus the adversarial texts built below.
//
// cases.bin: u32 count, then per case u32 mode (0 encode_ordinary, 1
// allowed_special "all", 2 tiktoken's default encode, which refuses special
// text), u32 byte length, the bytes. expected/<enc>.bin: per case u32 id
// count (0xFFFFFFFF where tiktoken threw), then the ids; all little-endian.
'use strict';
const fs = require('fs');
const path = require('path');
const { get_encoding, Tiktoken } = require('tiktoken');

const here = __dirname;
const encodings = ['gpt2', 'cl100k_base', 'o200k_base', 'llama3'];

// Llama 3's pre-tokenization regex, as Meta's tokenizer.py (meta-llama/llama3 and llama-models)
// spells it. It is cl100k_base's pattern as the npm package ships it, character for character:
// Llama 3 and cl100k differ in their ranks and specials only.
const LLAMA3_PAT = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
if (LLAMA3_PAT !== require('tiktoken/encoders/cl100k_base.json').pat_str)
  throw new Error("Llama 3's pattern is no longer the package's cl100k_base pattern");
// Meta's Llama 3.1 list (llama-models): 11 named, then reserved ones from number 2, 256 in all.
const LLAMA3_NAMED = ['<|begin_of_text|>', '<|end_of_text|>', '<|reserved_special_token_0|>',
  '<|reserved_special_token_1|>', '<|finetune_right_pad_id|>', '<|step_id|>', '<|start_header_id|>',
  '<|end_header_id|>', '<|eom_id|>', '<|eot_id|>', '<|python_tag|>'];
const llama3Specials = (nRanks) => {
  const names = [...LLAMA3_NAMED];
  for (let i = 0; names.length < 256; i++) names.push(`<|reserved_special_token_${2 + i}|>`);
  return Object.fromEntries(names.map((n, i) => [n, nRanks + i]));
};
const llama3 = () => {
  const ranks = fs.readFileSync(path.join(here, 'expected', 'train_llama3_1456.tiktoken'), 'utf8');
  const n = ranks.split('\n').filter((l) => l).length;
  return new Tiktoken(ranks, llama3Specials(n), LLAMA3_PAT);
};

// The package's encoder JSON stores ranks as lines "! <first rank> <base64>
// <base64> ..." with consecutive ranks; a .tiktoken file is one
// "<base64> <rank>" per line.
fs.mkdirSync(path.join(here, 'ranks'), { recursive: true });
for (const enc of encodings.filter((e) => e !== 'llama3')) {
  const j = require(`tiktoken/encoders/${enc}.json`);
  const out = [];
  for (const line of j.bpe_ranks.split('\n')) {
    if (!line) continue;
    const f = line.split(' ');
    let r = Number(f[1]);
    for (let k = 2; k < f.length; k++) out.push(`${f[k]} ${r++}`);
  }
  fs.writeFileSync(path.join(here, 'ranks', `${enc}.tiktoken`), out.join('\n') + '\n');
}

// Deterministic pseudo-random choices, so the fixtures only change when this
// script does.
let seed = 12345;
const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
const pick = (a) => a[rnd(a.length)];

const cases = []; // [mode, string]
const add = (s, mode = 0) => cases.push([mode, s]);

add('');
add(fs.readFileSync(path.join(here, 'real.txt'), 'utf8'));
const emoji = ['😀', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🧑🏿‍🚀', '❤️', '🇩🇪', '✋🏻', '👩🏾‍💻', '🤷‍♀️'];
const words = ['the', 'The', 'THE', 'naïve', 'café', 'Straße', 'ΑΘΗΝΑ', 'Москва', 'こんにちは', '世界', '北京市',
  '안녕하세요', 'مرحبا', 'שלום', 'हिन्दी', 'ไทย', 'e\u0301', 'a\u0308\u0304', 'Z\u0351\u036b\u0343\u036a',
  'ǅungla', 'ſtar', 'ﬁne', 'x²', '½', '٣٤٥', '१२३', 'Ⅻ', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', '𠀋𠀍', 'I\u0307', 'ß', 'İstanbul', 'ǈ',
  'µ', 'ª', 'ʰ', 'ᵃ', '〆', 'Ⓐ', '\u180e', '\u00a0', '\u3000', '\u2028', '\u200b', '\u2060', '\ufeff',
  '\u0085', '\u001c', '\u000b', '\u000c', 'ʼn', 'Ǆ', 'Ǳ',
  // Unicode 15 additions (CJK Ext. H, Kawi, Nag Mundari, new emoji): PCRE2
  // 10.42 knows Unicode 14 only.
  '\u{31350}\u{31351}', '\u{11F04}\u{11F05}', '\u{1E4D0}\u{1E4F0}', '\u{1FA77}\u{1F6DC}'];
const contr = ["'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'rE", "'ve", "'VE", "'Ve", "'vE", "'m", "'M",
  "'ll", "'LL", "'Ll", "'lL", "'d", "'D", "'ſ", "'\u017f", "’s"];
const punct = ['.', ',', '!', '?', '...', '--', '—', '–', '(', ')', '[]', '{}', '<>', '/', '\\', '//', '#', '@',
  '$', '%', '^', '&&', '*', '+=', '=>', '"', "'", '`', '~', '|', ';', ':', '::', '«»', '¿', '¡', '…', '·'];
const spaces = [' ', '  ', '   ', '\t', '\t\t', ' \t', '\t ', '\n', '\n\n', '\r\n', '\r\n\r\n', ' \n', '\n ',
  '\r', '\u00a0', '\u3000', '\u2003', '\u180e', '    ', '\n\t', ' \r\n '];

for (const e of emoji) add(e), add(` ${e}${e}${e} `), add(`a${e}b`);
for (const w of words) add(w), add(` ${w}`), add(`${w}${w} ${w}\n`);
for (const c of contr) add(`it${c}`), add(`IT${c} x`), add(`${c}`), add(` ${c}`), add(`x ${c}${c}`), add(`${c}123`);
for (const p of punct) add(p.repeat(7)), add(` ${p}${p}\n`), add(`a${p}b`);
for (let n = 1; n <= 100; n++) {
  let d = '';
  for (let k = 0; k < n; k++) d += String(rnd(10));
  add(d), add(` ${d}`), add(`x${d}y`);
}
for (const s of spaces) {
  add(s), add(`a${s}b`), add(`a${s}`), add(`${s}a`);
  for (const k of [2, 3, 17, 100]) add(`x${s.repeat(k)}y`), add(`x${s.repeat(k)}`);
}
add(' '.repeat(5000) + 'end'), add('\t'.repeat(3000)), add('\n'.repeat(3000) + 'x'), add('a'.repeat(20000));
add('ab'.repeat(10000)), add('1'.repeat(10001)), add('\r\n'.repeat(500)), add(' \t \n'.repeat(700));
add('😀'.repeat(2000)), add('Ω'.repeat(4000)), add('hello world, this is a test. '.repeat(50));
add('//////////\n//'), add('path/to/file.c\n'), add('a\r\nb\r\n\r\nc'), add('trailing spaces   ');
add('mixed \t\t  \n\n \r\n   end   \n'), add('x  \t'), add('\n\n\n  x'), add("don't won't I'M we'RE");

// Characters PCRE2 10.42 (Unicode 14) classifies differently from tiktoken
// (Unicode 16), in contexts where the class changes the ids, plus some
// Unicode 17 ones tiktoken does not know yet. See unicode_delta.js.
const newer = [0x1c89, 0x1c8a, 0xa7cb, 0xa7dc, 0x105c0, 0x10d40, 0x10d4e, 0x10d50, 0x10d69, 0x10d70, 0x11380,
  0x113b8, 0x11bc0, 0x11bf0, 0x11f00, 0x11f04, 0x11f50, 0x13460, 0x143fa, 0x16100, 0x1611e, 0x16130, 0x16d40,
  0x16d70, 0x1ccf0, 0x1d2c0, 0x1df25, 0x1e030, 0x1e08f, 0x1e4d0, 0x1e4ec, 0x1e4f0, 0x1e5d0, 0x1e5f1, 0x2b739,
  0x2ebf0, 0x2ee5d, 0x31350, 0x323af, 0x295, 0x897, 0xcf3, 0xece,
  0x323b0, 0x10940, 0x11dc0, 0x16ea0, 0x1e6c0];
for (const cp of newer) {
  const c = String.fromCodePoint(cp);
  for (const ctx of [`${c}'RE`, `${c}'re`, `x${c}'s`, ` ${c}abc`, `${c}123`, `A${c}B${c}c'LL`, `'${c}`, `${c}${c} ${c}\n`,
    `1${c}2`, `Ab${c}`, `.${c}.`]) add(ctx);
}

// Long words from a small alphabet: pieces past 96 bytes take anvil's heap
// merge instead of the array scan.
for (let i = 0; i < 60; i++) {
  let w = '';
  const n = 90 + rnd(400);
  for (let k = 0; k < n; k++) w += 'aeinorst'[rnd(8)];
  add(w), add(` ${w.toUpperCase()} ${w}`);
}

// Random mixtures of everything above.
const atoms = [...emoji, ...words, ...contr, ...punct, ...spaces, '0', '12', '345', '6789', 'a', 'Ab', 'CD'];
for (let i = 0; i < 400; i++) {
  let s = '';
  const n = 1 + rnd(40);
  for (let k = 0; k < n; k++) s += pick(atoms);
  add(s);
}

// Special tokens in text, under all three treatments.
const specials = {
  gpt2: ['<|endoftext|>'],
  cl100k_base: ['<|endoftext|>', '<|fim_prefix|>', '<|fim_middle|>', '<|fim_suffix|>', '<|endofprompt|>'],
  o200k_base: ['<|endoftext|>', '<|endofprompt|>'],
};
const stexts = ['<|endoftext|>', 'a<|endoftext|>b', 'Hello world<|endoftext|>  \n<|endoftext|>',
  'x   <|endoftext|>   y', '<|endoftext', '<|<|endoftext|>|>', 'end.<|endofprompt|>', '<|fim_prefix|>def f():<|fim_suffix|>',
  '<|endoftext|><|endoftext|>', 'no specials here <| |>', '\n\n<|endoftext|>\n\n',
  '<|begin_of_text|>In the beginning<|end_of_text|>', '<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>',
  '<|reserved_special_token_246|> <|reserved_special_token_247|> <|reserved_special_token_2|>',
  "<|python_tag|>x = 1<|eom_id|><|finetune_right_pad_id|><|step_id|>", '<|begin_of_text|<|begin_of_text|>|>'];
for (const s of stexts) for (const mode of [0, 1, 2]) add(s, mode);

const buf = [];
const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v >>> 0); buf.push(b); };
u32(cases.length);
for (const [mode, s] of cases) {
  const b = Buffer.from(s, 'utf8');
  u32(mode), u32(b.length), buf.push(b);
}
fs.writeFileSync(path.join(here, 'cases.bin'), Buffer.concat(buf));

fs.mkdirSync(path.join(here, 'expected'), { recursive: true });
for (const enc of encodings) {
  const t = enc === 'llama3' ? llama3() : get_encoding(enc);
  const out = [];
  for (const [mode, s] of cases) {
    let ids;
    try {
      ids = mode === 0 ? t.encode_ordinary(s) : mode === 1 ? t.encode(s, 'all') : t.encode(s);
    } catch (e) {
      ids = null;
    }
    const b = Buffer.alloc(4 + 4 * (ids ? ids.length : 0));
    b.writeUInt32LE(ids ? ids.length : 0xFFFFFFFF);
    if (ids) ids.forEach((v, k) => b.writeUInt32LE(v, 4 + 4 * k));
    out.push(b);
    // The fixtures are only meaningful if tiktoken round-trips them itself.
    if (ids && mode !== 1 && Buffer.compare(Buffer.from(t.decode(ids)), Buffer.from(s, 'utf8')) !== 0)
      throw new Error(`${enc}: tiktoken does not round-trip case ${JSON.stringify(s.slice(0, 40))}`);
  }
  t.free();
  fs.writeFileSync(path.join(here, 'expected', `${enc}.bin`), Buffer.concat(out));
}
console.log(`${cases.length} cases, ${encodings.length} encodings`);
