// A deliberately naive BPE trainer, the reference for anvil's incremental
// one: it recounts every pair of every unique word before each merge.
// Same rules as anvil_tok_train: words from the encoding's regex (gpt2, or
// llama3's, Meta's pattern with its case-insensitive contractions spelled
// out, as JS has no inline (?i:)), ranks 0..255 are the bytes, the most
// frequent pair wins, ties go to the lower left id then the lower right id,
// a merge whose bytes already form a token reuses it, vocab_size counts the
// specials that follow the ranks (not written): gpt2's <|endoftext|>,
// llama3's 256.
//   node train_ref.js TEXT VOCAB_SIZE OUT.tiktoken [gpt2|llama3]
// The text must be ASCII-whitespace-only (JS's \s differs from tiktoken's
// beyond ASCII) and hold no end-of-text text, which real.txt is and does.
'use strict';
const fs = require('fs');
const [file, vs, out, pattern = 'gpt2'] = process.argv.slice(2);
const text = fs.readFileSync(file);
const patterns = {
  gpt2: [/'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu, 1],
  llama3: [/'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu, 256],
};
const [re, specials] = patterns[pattern];
const counts = new Map();
for (const m of text.toString('utf8').matchAll(re)) counts.set(m[0], (counts.get(m[0]) || 0) + 1);
const words = [...counts].map(([w, c]) => [Array.from(Buffer.from(w, 'utf8')), c]);
const tokens = [];
for (let b = 0; b < 256; b++) tokens.push(Buffer.from([b]));
const byBytes = new Map(tokens.map((t, i) => [t.toString('latin1'), i]));
while (tokens.length < Number(vs) - specials) {
  const pc = new Map();
  for (const [w, c] of words)
    for (let i = 0; i + 1 < w.length; i++) {
      const k = w[i] * 16777216 + w[i + 1];
      pc.set(k, (pc.get(k) || 0) + c);
    }
  let best = -1, bc = 0;
  for (const [k, c] of pc) if (c > bc || (c === bc && k < best)) { best = k; bc = c; }
  if (best < 0) break;
  const a = Math.floor(best / 16777216), b = best % 16777216;
  const bytes = Buffer.concat([tokens[a], tokens[b]]), key = bytes.toString('latin1');
  let t = byBytes.get(key);
  if (t === undefined) { t = tokens.length; tokens.push(bytes); byBytes.set(key, t); }
  for (const wc of words) {
    const w = wc[0], o = [];
    for (let i = 0; i < w.length;) {
      if (i + 1 < w.length && w[i] === a && w[i + 1] === b) { o.push(t); i += 2; } else o.push(w[i++]);
    }
    wc[0] = o;
  }
}
fs.writeFileSync(out, tokens.map((t, i) => `${t.toString('base64')} ${i}`).join('\n') + '\n');
