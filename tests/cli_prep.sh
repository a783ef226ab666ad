#!/usr/bin/env bash
# anvil prep from the command line: outputs, manifest, determinism, errors.
# Usage: cli_prep.sh /path/to/anvil
set -u
ANVIL=${1:?usage: cli_prep.sh /path/to/anvil}
WORK=$(mktemp -d /tmp/anvil_cli_prep.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

PY=$(command -v /usr/bin/python3 || command -v python3 || true)
if [ -z "$PY" ]; then
    echo "cli_prep.sh: needs python3 to check the manifest" >&2
    exit 1
fi

# 300 documents separated by three newlines, a second file, an empty one.
for i in $(seq 1 300); do
    printf 'Chapter %d\n\nIn the beginning was document %d, and it was good.\n' "$i" "$i"
    [ "$i" -lt 300 ] && printf '\n\n'
done > "$WORK/a.txt"
printf 'a file that is one whole document\n' > "$WORK/b.txt"
: > "$WORK/empty.txt"

# Checks the manifest against the shards on disk: fields, file sizes, headers.
check_manifest() {
    "$PY" - "$1" <<'EOF'
import json, os, struct, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
assert m["tokenizer"] == "bytes" and m["vocab_size"] == 257 and m["eot"] == 256, m
assert m["shards"], "no shards"
for s in m["shards"]:
    p = os.path.join(d, s["file"])
    assert s["split"] in ("train", "val"), s
    assert os.path.getsize(p) == 1024 + 2 * s["tokens"], (p, os.path.getsize(p), s["tokens"])
    magic, version, count = struct.unpack("<3i", open(p, "rb").read(12))
    assert (magic, version, count) == (20240520, 1, s["tokens"]), (p, magic, version, count)
listed = sorted(s["file"] for s in m["shards"])
on_disk = sorted(f for f in os.listdir(d) if f.endswith(".bin"))
assert listed == on_disk, (listed, on_disk)
print(len(m["shards"]), sum(s["tokens"] for s in m["shards"]))
EOF
}

out="$WORK/out"
if "$ANVIL" prep --out "$out" --val-fraction 0.1 --delimiter '\n\n\n' --shard-tokens 4000 \
    "$WORK/a.txt" "$WORK/empty.txt" "$WORK/b.txt" > "$WORK/log1" 2> "$WORK/err1"; then ok; else bad "prep failed: $(cat "$WORK/err1")"; fi
grep -q '301 documents' "$WORK/log1" && ok || bad "summary lacks the document count: $(cat "$WORK/log1")"
grep -q 'empty.txt' "$WORK/err1" && ok || bad "no note about the empty input"
[ -f "$out/train_000000.bin" ] && [ -f "$out/train_000001.bin" ] && [ -f "$out/val_000000.bin" ] && ok ||
    bad "expected shards missing: $(ls "$out")"
summary=$(check_manifest "$out") && ok || bad "manifest check failed"
# 301 documents: EOT each, plus every byte but the delimiters.
want=$(( $(stat -c %s "$WORK/a.txt") - 299 * 3 + $(stat -c %s "$WORK/b.txt") + 301 ))
[ "${summary#* }" = "$want" ] && ok || bad "token total ${summary#* }, want $want"

# Re-running gives bit-identical shards and manifest.
mkdir "$WORK/first" && cp "$out"/* "$WORK/first/"
"$ANVIL" prep --out "$out" --val-fraction 0.1 --delimiter '\n\n\n' --shard-tokens 4000 \
    "$WORK/a.txt" "$WORK/empty.txt" "$WORK/b.txt" > /dev/null 2>&1 || bad "second run failed"
same=1
for f in "$WORK/first"/*; do cmp -s "$f" "$out/$(basename "$f")" || same=0; done
[ "$same" = 1 ] && [ "$(ls "$out" | wc -l)" = "$(ls "$WORK/first" | wc -l)" ] && ok || bad "re-run differs"

# Standard input works and gives the same tokens as the file.
"$ANVIL" prep --out "$WORK/stdin" --val-fraction 0.1 --delimiter '\n\n\n' --shard-tokens 4000 - \
    < "$WORK/a.txt" > /dev/null 2>&1 || bad "prep from stdin failed"
"$ANVIL" prep --out "$WORK/fileonly" --val-fraction 0.1 --delimiter '\n\n\n' --shard-tokens 4000 "$WORK/a.txt" \
    > /dev/null 2>&1 || bad "prep of one file failed"
cmp -s "$WORK/stdin/train_000000.bin" "$WORK/fileonly/train_000000.bin" && ok || bad "stdin and file differ"

# Without a delimiter each file is one document.
"$ANVIL" prep --out "$WORK/whole" "$WORK/a.txt" "$WORK/b.txt" > "$WORK/log2" 2>&1 && ok || bad "whole-file prep failed"
grep -q '2 documents' "$WORK/log2" && ok || bad "whole files should be 2 documents: $(cat "$WORK/log2")"

# BPE: the manifest names the tokenizer, shards are uint16 for gpt2 and uint32
# (version 7) for cl100k_base, and the worker count never changes the bytes.
for w in 1 2; do
    "$ANVIL" prep --out "$WORK/bpe$w" --tokenizer tok/ranks/gpt2.tiktoken --workers $w --val-fraction 0.1 \
        --delimiter '\n\n\n' "$WORK/a.txt" > /dev/null 2>&1 || bad "bpe prep with $w workers failed"
done
same=1
for f in "$WORK/bpe1"/*; do cmp -s "$f" "$WORK/bpe2/$(basename "$f")" || same=0; done
[ "$same" = 1 ] && ok || bad "1 and 2 workers differ"
"$ANVIL" prep --out "$WORK/cl" --tokenizer tok/ranks/cl100k_base.tiktoken --pattern cl100k_base --val-fraction 0 \
    "$WORK/b.txt" > /dev/null 2>&1 || bad "cl100k prep failed"
"$PY" - "$WORK/bpe1" "$WORK/cl" <<'EOF' && ok || bad "bpe manifests or shard versions wrong"
import json, os, struct, sys
for d, pat, vocab, eot, ver in ((sys.argv[1], "gpt2", 50257, 50256, 1), (sys.argv[2], "cl100k_base", 100277, 100257, 7)):
    m = json.load(open(os.path.join(d, "manifest.json")))
    assert m["tokenizer"]["pattern"] == pat and m["tokenizer"]["file"].endswith(".tiktoken"), m
    assert (m["vocab_size"], m["eot"], m["shard_version"]) == (vocab, eot, ver), m
    for s in m["shards"]:
        p = os.path.join(d, s["file"])
        raw = open(p, "rb").read()
        magic, version, count = struct.unpack("<3i", raw[:12])
        assert version == ver and count == s["tokens"] and len(raw) == 1024 + (2 if ver == 1 else 4) * count, p
        first = struct.unpack("<H" if ver == 1 else "<I", raw[1024:1024 + (2 if ver == 1 else 4)])[0]
        assert first == eot, (p, first)
EOF

# JSON lines: bad lines are noted as file:line and skipped; --strict fails on the first.
printf '{"text":"one"}\nnot json\n{"other":1}\n{"text":"two"}\n' > "$WORK/j.jsonl"
"$ANVIL" prep --out "$WORK/jl" --jsonl-field text --val-fraction 0 "$WORK/j.jsonl" > "$WORK/jlog" 2> "$WORK/jerr" &&
    grep -q '2 documents' "$WORK/jlog" && grep -q "j.jsonl:2: not valid JSON" "$WORK/jerr" &&
    grep -q 'j.jsonl:3: no string field "text"' "$WORK/jerr" && ok || bad "jsonl prep: $(cat "$WORK/jlog" "$WORK/jerr")"

# Compressed inputs give the same shards as the plain file.
gzip -c "$WORK/a.txt" > "$WORK/a.txt.gz"
zstd -q -c "$WORK/a.txt" > "$WORK/a.txt.zst"
for ext in gz zst; do
    "$ANVIL" prep --out "$WORK/c$ext" --val-fraction 0.1 --delimiter '\n\n\n' --shard-tokens 4000 "$WORK/a.txt.$ext" \
        > /dev/null 2>&1 || bad "prep of a .$ext input failed"
    same=1
    for f in "$WORK/fileonly"/*.bin; do cmp -s "$f" "$WORK/c$ext/$(basename "$f")" || same=0; done
    [ "$same" = 1 ] && ok || bad ".$ext input gives different shards"
done
head -c 300 "$WORK/a.txt.gz" > "$WORK/cut.gz"
head -c 300 "$WORK/a.txt.zst" > "$WORK/cut.zst"
printf 'not zstd at all' > "$WORK/junk.zst"

"$ANVIL" prep --help | grep -q -- '--shard-tokens' && ok || bad "--help lacks the options"

# Errors: nonzero exit, exactly one error line on stderr naming the problem.
expect_error() { # want_code what args...
    local want=$1 what=$2
    shift 2
    "$ANVIL" prep "$@" > "$WORK/eout" 2> "$WORK/eerr"
    local code=$?
    local lines # notes (e.g. about an empty input) may precede the error
    lines=$(grep -vc '^anvil prep: note:' "$WORK/eerr")
    if [ "$code" = "$want" ] && [ "$lines" = 1 ] && grep -q "$what" "$WORK/eerr"; then
        ok
    else
        bad "prep $* -> exit $code (want $want), $lines stderr lines, want '$what': $(cat "$WORK/eerr")"
    fi
}
expect_error 2 'no input files' --out "$WORK/e"
expect_error 2 'out DIR is required' "$WORK/a.txt"
expect_error 2 'needs a folder' "$WORK/a.txt" --out
expect_error 2 "val-fraction" --out "$WORK/e" --val-fraction 1.5 "$WORK/a.txt"
expect_error 2 "val-fraction" --out "$WORK/e" --val-fraction abc "$WORK/a.txt"
expect_error 2 "shard-tokens" --out "$WORK/e" --shard-tokens 0 "$WORK/a.txt"
expect_error 2 "shard-tokens" --out "$WORK/e" --shard-tokens 12x "$WORK/a.txt"
expect_error 2 "workers" --out "$WORK/e" --workers 0 "$WORK/a.txt"
expect_error 2 "pattern needs --tokenizer" --out "$WORK/e" --pattern gpt2 "$WORK/a.txt"
expect_error 1 "nope" --out "$WORK/e" --tokenizer tok/ranks/gpt2.tiktoken --pattern nope "$WORK/a.txt"
expect_error 1 "$WORK/none.tiktoken" --out "$WORK/e" --tokenizer "$WORK/none.tiktoken" "$WORK/a.txt"
expect_error 1 "j.jsonl:2: not valid JSON" --out "$WORK/e" --jsonl-field text --strict "$WORK/j.jsonl"
expect_error 2 "strict needs --jsonl-field" --out "$WORK/e" --strict "$WORK/a.txt"
expect_error 2 "cannot be combined" --out "$WORK/e" --jsonl-field text --delimiter x "$WORK/a.txt"
expect_error 1 "$WORK/cut.gz" --out "$WORK/e" "$WORK/cut.gz"
expect_error 1 "$WORK/cut.zst: zstd data truncated" --out "$WORK/e" "$WORK/cut.zst"
expect_error 1 "$WORK/junk.zst: zstd error at compressed byte" --out "$WORK/e" "$WORK/junk.zst"
expect_error 2 "bad escape" --out "$WORK/e" --delimiter '\q' "$WORK/a.txt"
expect_error 2 "unknown option '--bogus'" --out "$WORK/e" --bogus "$WORK/a.txt"
expect_error 1 "$WORK/missing.txt" --out "$WORK/e" "$WORK/a.txt" "$WORK/missing.txt"
expect_error 1 "no documents" --out "$WORK/e" "$WORK/empty.txt"
[ ! -e "$WORK/e" ] && ok || bad "a failed run created its output folder"

echo "cli_prep: $pass passed, $fail failed"
[ "$fail" = 0 ]
