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
expect_error 2 "bad escape" --out "$WORK/e" --delimiter '\q' "$WORK/a.txt"
expect_error 2 "unknown option '--bogus'" --out "$WORK/e" --bogus "$WORK/a.txt"
expect_error 1 "$WORK/missing.txt" --out "$WORK/e" "$WORK/a.txt" "$WORK/missing.txt"
expect_error 1 "no documents" --out "$WORK/e" "$WORK/empty.txt"
[ ! -e "$WORK/e" ] && ok || bad "a failed run created its output folder"

echo "cli_prep: $pass passed, $fail failed"
[ "$fail" = 0 ]
