// Derives the code points PCRE2 (Unicode 14 in 10.42) misclassifies relative
// to tiktoken's Rust regex engine, for src/tok/pretok.c's U16_* macros.
//   node unicode_delta.js /tmp/pcre_classes.txt     (see pcre_classes.c)
// Candidates are the code points whose class differs between PCRE2 and
// node's own (newer) Unicode tables. Each newly assigned candidate is kept
// only if the npm tiktoken treats it as its new class: a letter or number
// takes a following "'RE" contraction as its own piece in cl100k_base, and
// a mark takes "'re" in o200k_base; a character tiktoken's tables do not
// know yet instead joins the apostrophe as punctuation.
'use strict';
const fs = require('fs');
const { get_encoding } = require('tiktoken');
const names = ['L', 'N', 'M', 'Lu', 'Lt', 'Lm', 'Lo', 'Ll'];
const cls = names.map((n) => new RegExp(`^\\p{${n}}`, 'u'));
const pcre = new Map();
for (const l of fs.readFileSync(process.argv[2], 'utf8').split('\n')) {
  if (!l) continue;
  const [cp, m] = l.split(' ').map(Number);
  pcre.set(cp, m);
}
const cl = get_encoding('cl100k_base'), o2 = get_encoding('o200k_base');
const last = (t, s) => { const a = t.encode_ordinary(s); return a[a.length - 1]; };
const RE = last(cl, "'RE"), re = last(o2, "'re");
const add = [], changed = [];
let rejected = 0;
for (let cp = 0; cp <= 0x10ffff; cp++) {
  if (cp >= 0xd800 && cp <= 0xdfff) continue;
  const c = String.fromCodePoint(cp);
  let m = 0;
  cls.forEach((r, k) => { if (r.test(c)) m |= 1 << k; });
  const p = pcre.get(cp) || 0;
  if (m === p) continue;
  if (p) { changed.push([cp, p, m]); continue; }
  const known = m & 3 ? last(cl, c + "'RE") === RE : m & 4 ? last(o2, c + "'re") === re : false;
  if (known) add.push([cp, m]); else rejected++;
}
console.error(`node Unicode ${process.versions.unicode}: ${add.length} code points added, ${rejected} unknown to tiktoken, ` +
  `changed class: ${JSON.stringify(changed)} (handle these by hand)`);
const emit = (name, mask, extra = []) => {
  const cps = add.filter(([, m]) => m & mask).map(([cp]) => cp).concat(extra).sort((a, b) => a - b);
  const r = [];
  for (const cp of cps) { const l = r[r.length - 1]; if (l && l[1] === cp - 1) l[1] = cp; else r.push([cp, cp]); }
  const hex = (v) => `\\\\x{${v.toString(16).toUpperCase()}}`;
  const lines = [];
  let cur = '';
  for (const [a, b] of r) {
    const part = hex(a) + (b > a ? '-' + hex(b) : '');
    if (cur.length + part.length > 100) { lines.push(cur); cur = ''; }
    cur += part;
  }
  if (cur) lines.push(cur);
  console.log(`#define ${name} \\\n    "` + lines.join('" \\\n    "') + '"');
};
// U+0295 is the one changed class (Ll -> Lo in Unicode 16): PCRE2 already
// has it in the lower-case class, so only o200k's upper class needs it.
emit('U16_L', 1); emit('U16_N', 2); emit('U16_M', 4);
emit('U16_UPPER', 8 | 16 | 32 | 64 | 4, [0x295]); emit('U16_LOWER', 128 | 32 | 64 | 4);
