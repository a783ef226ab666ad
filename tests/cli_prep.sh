#!/usr/bin/env bash
# anvil prep from the command line: outputs, manifest, determinism, errors.
# Usage: cli_prep.sh /path/to/anvil
. "$(dirname "$0")/tools/cli_common.sh"
ANVIL=$anvil
WORK=$tmp
# The checks here are counted, not named.
pass=0
ok() { pass=$((pass + 1)); }

PY=$(command -v /usr/bin/python3 || command -v python3) || { missing "python3 is not installed"; finish; }

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

# JSON lines on 2 workers give the shards of 1: 60000 lines, 2 windows of 16
# chunks encoded at once (scripts/tsan.sh runs this under ThreadSanitizer).
"$PY" - "$WORK/many.jsonl" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(60000):
        f.write(json.dumps({"id": i, "text": "line %d: " % i + "in the beginning was the word " * (i % 7 + 1)}) + "\n")
EOF
for w in 1 2; do
    "$ANVIL" prep --out "$WORK/jw$w" --jsonl-field text --workers $w --val-fraction 0.1 --shard-tokens 200000 \
        "$WORK/many.jsonl" > "$WORK/jwlog" 2>&1 || bad "jsonl prep with $w workers: $(cat "$WORK/jwlog")"
done
grep -q '60000 documents' "$WORK/jwlog" && ok || bad "jsonl prep on 2 workers: $(cat "$WORK/jwlog")"
same=1
for f in "$WORK/jw1"/*; do cmp -s "$f" "$WORK/jw2/$(basename "$f")" || same=0; done
[ "$same" = 1 ] && [ "$(ls "$WORK/jw1" | wc -l)" -gt 10 ] && ok || bad "jsonl: 1 and 2 workers differ"

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

# Decompression bombs: 1 GiB of zeros in 4.7 MB of gzip (16 members of 64
# MiB) and in 37 KB of zstd (16 frames). Each is one document longer than
# --max-doc-bytes: prep inflates 64 MiB of it and stops with one line,
# before it writes anything. Inflated whole, as prep once did, it took 1 GiB.
# Peak RSS is counted above the same binary's for a one-line input: what the
# process maps before prep reads a byte (a CUDA build's cuBLASLt alone, about
# 205 MB) is not prep's.
rss_of() { # the command's exit status, its peak RSS in MB, its standard error
    "$PY" - "$@" <<'EOF'
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, p.stderr.decode().strip())
EOF
}
echo "one line" > "$WORK/one.txt"
read -r _ base _ <<< "$(rss_of "$ANVIL" prep --no-progress --out "$WORK/one" "$WORK/one.txt")"
head -c 67108864 /dev/zero | gzip -1 > "$WORK/z64.gz"
head -c 67108864 /dev/zero | zstd -q -1 -c > "$WORK/z64.zst"
for ext in gz zst; do
    for _ in $(seq 16); do cat "$WORK/z64.$ext"; done > "$WORK/bomb.$ext"
    read -r code rss err <<< "$(rss_of "$ANVIL" prep --no-progress --out "$WORK/bomb" "$WORK/bomb.$ext")"
    # Above the one-line input's, peak RSS measured 69 MB (release, 6823fad), 11 MB (release with
    # CUDA linked) and 222 MB (ASan+UBSan, whose shadow and quarantine count); 512 MB is twice the
    # largest and half of the 1035 MB the whole input took.
    if [ "$code" = 1 ] && [ $((rss - base)) -lt 512 ] && [ ! -e "$WORK/bomb" ] &&
        [[ $err == "anvil prep: error: input $WORK/bomb.$ext: the document at byte 0 is longer than --max-doc-bytes (67108864 bytes)"* ]]; then
        ok
    else
        bad "a .$ext bomb: exit $code, peak RSS $rss MB ($base MB for one line), $err"
    fi
done

# Resuming. A reference run with many small shards in both splits, BPE with
# 2 workers; every other run below goes to a copy and must end byte-identical
# to it (shards, manifest, tokenizer copy), whatever the worker count.
for i in $(seq 1 20); do cat "$WORK/a.txt"; printf '\n\n\n'; done > "$WORK/big.txt"
rprep() { # out workers
    "$ANVIL" prep --out "$1" --tokenizer tok/ranks/gpt2.tiktoken --workers "$2" --val-fraction 0.2 \
        --delimiter '\n\n\n' --shard-tokens 3000 "$WORK/big.txt"
}
same_as_ref() { # dir
    [ "$(ls -A "$WORK/ref")" = "$(ls -A "$1")" ] || return 1
    for f in "$WORK/ref"/*; do cmp -s "$f" "$1/$(basename "$f")" || return 1; done
}
rprep "$WORK/ref" 2 > /dev/null 2>&1 || bad "reference prep failed"
"$PY" - "$WORK/ref" <<'EOF' && ok || bad "manifest lacks checksums, sizes or sources"
import json, os, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
assert m["complete"] is True and m["options"]["shard_tokens"] == 3000, m["options"]
splits = [s["split"] for s in m["shards"]]
assert splits.count("train") > 3 and splits.count("val") > 1, splits
for s in m["shards"]:
    p = os.path.join(d, s["file"])
    assert os.path.getsize(p) == s["bytes"] == 1024 + 2 * s["tokens"], s
    assert len(s["crc32c"]) == 8 and s["next"]["chunk"] >= 0, s
t = m["tokenizer"]
tok = open(os.path.join(d, t["copy"]), "rb").read()
assert t["size"] == len(tok) == os.path.getsize("tok/ranks/gpt2.tiktoken"), t
(src,) = m["sources"]
assert src["path"].endswith("big.txt") and src["size"] == os.path.getsize(src["path"]) and "mtime" in src, src
assert src["documents"] > 0, src
EOF
# The checksums are CRC32C (Castagnoli), checked against a bitwise reference.
"$PY" - "$WORK/ref" <<'EOF' && ok || bad "a shard's crc32c is not the CRC32C of its file"
import json, os, sys
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xFFFFFFFF
d = sys.argv[1]
s = json.load(open(os.path.join(d, "manifest.json")))["shards"][-1]
assert "%08x" % crc32c(open(os.path.join(d, s["file"]), "rb").read()) == s["crc32c"], s
EOF

stamp() { stat -c '%n %i %.9Y' "$@"; }

# (a) A re-run finds everything done: it rewrites nothing and says so.
cp -a "$WORK/ref" "$WORK/r1"
before=$(stamp "$WORK/r1"/*)
rprep "$WORK/r1" 1 > /dev/null 2> "$WORK/rerr" || bad "re-run failed: $(cat "$WORK/rerr")"
[ "$before" = "$(stamp "$WORK/r1"/*)" ] && ok || bad "a re-run of a finished prep rewrote files"
grep -q 'skipped' "$WORK/rerr" && ok || bad "a re-run does not say it skipped: $(cat "$WORK/rerr")"
same_as_ref "$WORK/r1" && ok || bad "re-run output differs"

# (b) Interrupted: the manifest lists only the shards finished so far (the
# last ones of both splits are gone, as after a kill), so the run continues
# after them with another worker count; the kept shards are not rewritten.
cp -a "$WORK/ref" "$WORK/r2"
"$PY" - "$WORK/r2" <<'EOF' || bad "could not simulate an interruption"
import json, os, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
train = [s for s in m["shards"] if s["split"] == "train"]
val = [s for s in m["shards"] if s["split"] == "val"]
for s in train[-2:] + val[-1:]:
    os.unlink(os.path.join(d, s["file"]))
    m["shards"].remove(s)
m["complete"] = False
del m["sources"][0]["documents"]
json.dump(m, open(os.path.join(d, "manifest.json"), "w"))
EOF
kept_before=$(stamp "$WORK/r2/train_000000.bin" "$WORK/r2/val_000000.bin")
rprep "$WORK/r2" 1 > /dev/null 2> "$WORK/rerr" || bad "resumed run failed: $(cat "$WORK/rerr")"
grep -q 'kept .* shards' "$WORK/rerr" && ok || bad "a resumed run does not say what it kept: $(cat "$WORK/rerr")"
[ "$kept_before" = "$(stamp "$WORK/r2/train_000000.bin" "$WORK/r2/val_000000.bin")" ] && ok ||
    bad "a resumed run rewrote finished shards"
same_as_ref "$WORK/r2" && ok || bad "a resumed run differs from an uninterrupted one"

# (b') Killed for real between two shards, then run again: the result
# equals the reference, with no temporary file left. Every shard and every
# manifest goes into place by a rename; strace kills prep with SIGKILL as it
# enters its third rename, so the first shard and the manifest naming it are
# in place and the second shard is a temporary file, whatever the timing.
if ! command -v strace > /dev/null; then
    missing "strace is not installed: no kill between two shards"
else
    mkdir "$WORK/r3"
    { strace -f -qq -o /dev/null -e trace=rename -e inject=rename:signal=KILL:when=3 "$ANVIL" prep --out "$WORK/r3" \
        --tokenizer tok/ranks/gpt2.tiktoken --workers 1 --val-fraction 0.2 --delimiter '\n\n\n' --shard-tokens 3000 \
        "$WORK/big.txt" > /dev/null; } 2> /dev/null # (bash's own "Killed" line too)
    code=$?
    shards=$("$PY" -c 'import json, sys; print(*(s["file"] for s in json.load(open(sys.argv[1]))["shards"]))' \
        "$WORK/r3/manifest.json" 2> /dev/null)
    if [ $code -eq 137 ] && [ "$shards" = train_000000.bin ] && ls "$WORK/r3"/train_000001.bin.tmp.* > /dev/null 2>&1; then
        ok
    else
        bad "the kill at the third rename: exit $code, manifest shards '$shards', left $(ls "$WORK/r3" | tr '\n' ' ')"
    fi
    # A shard the kill caught half written is a temporary file; this run removes it.
    printf 'half' > "$WORK/r3/val_000000.bin.tmp.AbC123"
    rprep "$WORK/r3" 2 > /dev/null 2> "$WORK/rerr" || bad "run after a kill failed: $(cat "$WORK/rerr")"
    grep -q 'kept 1 shard' "$WORK/rerr" && ok || bad "the run after a kill does not keep the first shard: $(cat "$WORK/rerr")"
    same_as_ref "$WORK/r3" && ok || bad "the run after a kill differs from an uninterrupted one"

    # An input cut short while prep reads it (4 MiB at a time): strace stops
    # prep with SIGSTOP right after its first read of the file, the file is
    # truncated, and prep continues into the missing bytes. And an input
    # that changes before prep gets to it. One line each, naming the file and
    # the offset; the mapped reads of old ended in SIGBUS instead.
    stopped_prep() { # file-to-watch action prep-args...
        local watch=$1 action=$2 log="$WORK/stop.strace" pid
        shift 2
        rm -f "$log"
        # (LeakSanitizer cannot run under ptrace.)
        env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0" \
            strace -f -qq -o "$log" -P "$watch" -e trace=pread64 -e inject=pread64:signal=STOP:when=1 \
            "$ANVIL" prep --no-progress "$@" > /dev/null 2> "$WORK/stop.err" &
        local job=$!
        for _ in $(seq 600); do grep -q 'stopped by SIGSTOP' "$log" 2> /dev/null && break; sleep 0.1; done
        pid=$(sed -n 's/^\([0-9]*\) *--- stopped by SIGSTOP.*/\1/p' "$log")
        if [ -z "$pid" ]; then
            kill -9 $job
            wait $job
            return 99
        fi
        $action
        kill -CONT "$pid"
        wait $job
    }
    head -c 6000000 /dev/zero | tr '\0' 'x' | fold -w 99 > "$WORK/long.txt"
    cut_long() { truncate -s 5000000 "$WORK/long.txt"; }
    stopped_prep "$WORK/long.txt" cut_long --out "$WORK/cut" --delimiter '\n' "$WORK/long.txt"
    code=$?
    if [ $code = 1 ] && [ "$(wc -l < "$WORK/stop.err")" = 1 ] &&
        grep -q "input $WORK/long.txt: ends at byte 5000000, but had 6060606 bytes when prep started" "$WORK/stop.err"; then
        ok
    else
        bad "an input truncated while read: exit $code, $(cat "$WORK/stop.err")"
    fi
    printf 'one document\n' > "$WORK/first.txt"
    cp "$WORK/a.txt" "$WORK/second.txt"
    cut_second() { truncate -s 100 "$WORK/second.txt"; }
    stopped_prep "$WORK/first.txt" cut_second --out "$WORK/cut2" --delimiter '\n' "$WORK/first.txt" "$WORK/second.txt"
    code=$?
    [ $code = 1 ] && grep -q "input $WORK/second.txt: changed while prep ran" "$WORK/stop.err" && ok ||
        bad "an input changed before prep read it: exit $code, $(cat "$WORK/stop.err")"
fi

# (c) A finished shard that no longer matches its checksum is written again,
# with the shards of its split after it; the others are kept.
cp -a "$WORK/ref" "$WORK/r4"
printf 'XY' | dd of="$WORK/r4/train_000002.bin" bs=1 seek=2000 conv=notrunc 2> /dev/null
kept_before=$(stamp "$WORK/r4/train_000001.bin" "$WORK/r4/val_000000.bin")
rprep "$WORK/r4" 2 > /dev/null 2> "$WORK/rerr" || bad "run over a corrupt shard failed: $(cat "$WORK/rerr")"
grep -q 'train_000002.bin has CRC32C' "$WORK/rerr" && ok || bad "corruption not reported: $(cat "$WORK/rerr")"
[ "$kept_before" = "$(stamp "$WORK/r4/train_000001.bin" "$WORK/r4/val_000000.bin")" ] && ok ||
    bad "good shards were rewritten"
same_as_ref "$WORK/r4" && ok || bad "the repaired output differs from an uninterrupted one"

# Other options or a changed input start over, and say so.
cp -a "$WORK/ref" "$WORK/r5"
"$ANVIL" prep --out "$WORK/r5" --tokenizer tok/ranks/gpt2.tiktoken --val-fraction 0.2 --delimiter '\n\n\n' \
    --shard-tokens 2500 "$WORK/big.txt" > /dev/null 2> "$WORK/rerr" || bad "prep with new options failed"
grep -q 'options differ; starting over' "$WORK/rerr" && ok || bad "new options not reported: $(cat "$WORK/rerr")"
printf 'one more document\n' >> "$WORK/big.txt"
rprep "$WORK/r1" 2 > /dev/null 2> "$WORK/rerr" || bad "prep of a changed input failed"
grep -q "content differs; starting over" "$WORK/rerr" && ok || bad "a changed input not reported: $(cat "$WORK/rerr")"

# BPE end to end: a tokenizer trained on the text, prep with it, a tiny model
# that memorizes the text; train's sample and anvil sample (--data) decode
# through the tokenizer the manifest names, and the val loss comes with bits
# per byte.
for i in $(seq 1 60); do printf 'verse %d: the cat sat on the mat.\n\n' "$i"; done > "$WORK/cat.txt"
"$ANVIL" tokenizer train --vocab-size 300 --pattern gpt2 --out "$WORK/cat.tiktoken" "$WORK/cat.txt" > /dev/null 2>&1 ||
    bad "tokenizer training failed"
"$ANVIL" prep --out "$WORK/catd" --tokenizer "$WORK/cat.tiktoken" --delimiter '\n\n' --val-fraction 0.2 \
    "$WORK/cat.txt" > /dev/null 2>&1 || bad "bpe prep of cat.txt failed"
"$ANVIL" train --data "$WORK/catd" --layers 1 --heads 2 --embd 32 --seq 32 --batch 4 --steps 80 --lr 1e-2 \
    --val-batches 2 --sample-every 0 --sample-tokens 24 --no-progress --seed 3 --threads 1 --out "$WORK/catrun" \
    > "$WORK/catlog" 2>&1 || bad "training on bpe shards failed: $(tail -3 "$WORK/catlog")"
grep -A2 -e '--- sample at step 80' "$WORK/catlog" | grep -q 'cat sat on the mat' && ok ||
    bad "train's sample is not decoded text: $(grep -A2 -e '--- sample' "$WORK/catlog")"
grep -q 'val loss [0-9.]* ([0-9.]* bits/byte' "$WORK/catlog" && ok || bad "no bits per byte: $(tail -1 "$WORK/catlog")"
"$ANVIL" sample --model "$WORK/catrun/model.safetensors" --data "$WORK/catd" --prompt "verse 7: the" --tokens 8 \
    --temperature 0 > "$WORK/catsample" 2>&1
grep -q '^verse 7: the cat sat on the mat' "$WORK/catsample" && ok ||
    bad "anvil sample --data does not continue the prompt in text: $(cat "$WORK/catsample")"

# Llama 3's encoding: a vocabulary trained in its format (the 256 specials follow its ranks), and
# prep marks each document <|begin_of_text|> ... <|end_of_text|>, which decodes back to the text.
"$ANVIL" tokenizer train --vocab-size 600 --pattern llama3 --out "$WORK/cat3.tiktoken" "$WORK/cat.txt" \
    > /dev/null 2> "$WORK/cat3log" || bad "llama3 tokenizer training failed: $(cat "$WORK/cat3log")"
n3=$(grep -c . "$WORK/cat3.tiktoken")
grep -q "wrote .*: $n3 ranks, 256 specials from $n3 (beginning of text $n3, end of text $((n3 + 1)))" \
    "$WORK/cat3log" && ok || bad "train's llama3 summary: $(cat "$WORK/cat3log")"
printf '<|begin_of_text|>verse 1<|eot_id|>' | "$ANVIL" tokenizer encode --ranks "$WORK/cat3.tiktoken" \
    --encoding llama3 --allow-special > "$WORK/cat3ids" && read -r -a ids < "$WORK/cat3ids" &&
    [ "${ids[0]}" = "$n3" ] && [ "${ids[-1]}" = "$((n3 + 9))" ] && ok || bad "llama3 specials: $(cat "$WORK/cat3ids")"
"$ANVIL" prep --out "$WORK/cat3d" --tokenizer "$WORK/cat3.tiktoken" --pattern llama3 --delimiter '\n\n' \
    --val-fraction 0 "$WORK/cat.txt" > /dev/null 2>&1 || bad "llama3 prep of cat.txt failed"
"$PY" - "$WORK/cat3d" "$n3" "$WORK/cat3ids.txt" <<'EOF' && ok || bad "llama3 documents are not marked BOS ... EOS"
import json, os, struct, sys
d, bos = sys.argv[1], int(sys.argv[2])
m = json.load(open(os.path.join(d, "manifest.json")))
assert (m["bos"], m["eot"], m["vocab_size"]) == (bos, bos + 1, bos + 256), m
assert m["tokenizer"]["pattern"] == "llama3", m
raw = open(os.path.join(d, m["shards"][0]["file"]), "rb").read()
ver, n = struct.unpack("<2i", raw[4:12])
toks = struct.unpack("<%d%s" % (n, "H" if ver == 1 else "I"), raw[1024:])
starts = [i for i, t in enumerate(toks) if t == bos]
ends = [i for i, t in enumerate(toks) if t == bos + 1]
assert len(starts) == len(ends) == 60 and toks[0] == bos and toks[-1] == bos + 1, (starts[:3], ends[:3])
assert all(s < e < s2 for s, e, s2 in zip(starts, ends, starts[1:] + [len(toks)])), "unbalanced marks"
open(sys.argv[3], "w").write(" ".join(map(str, toks)))
EOF
"$ANVIL" tokenizer decode --ranks "$WORK/cat3.tiktoken" --encoding llama3 "$WORK/cat3ids.txt" > "$WORK/cat3back" &&
    "$PY" - "$WORK/cat.txt" "$WORK/cat3back" <<'EOF' && ok || bad "llama3 shard does not decode to the documents"
import sys
docs = [d for d in open(sys.argv[1]).read().split("\n\n") if d]
want = "".join("<|begin_of_text|>" + d + "<|end_of_text|>" for d in docs)
assert open(sys.argv[2]).read() == want
EOF

"$ANVIL" prep --help | grep -q -- '--shard-tokens' && ok || bad "--help lacks the options"

# Errors: nonzero exit, exactly one error line on stderr naming the problem.
# ---- progress ----
# Standard error not a terminal: a line at each tenth of the input bytes read
# (ten inputs, so each one read is a tenth), then a final one with every
# document and token; none with --no-progress.
for i in $(seq 0 9); do cp "$WORK/a.txt" "$WORK/part$i.txt"; done
"$ANVIL" prep --out "$WORK/prog" --delimiter '\n\n\n' "$WORK"/part?.txt > /dev/null 2> "$WORK/perr" ||
    bad "prep for progress failed: $(cat "$WORK/perr")"
msg=$(progress_lines "$WORK/perr" prep 5) && ok || bad "prep progress lines: $msg: $(cat "$WORK/perr")"
# The figures' units as the lines write them: bytes up to 10 KiB, then KiB, MiB, ...
scaled() { "$PY" -c 'import sys
n = float(sys.argv[1]); u = 0
while u < 4 and n >= 10240: n /= 1024; u += 1
print("%.1f/%.1f %s" % (n, n, ["B", "KiB", "MiB", "GiB", "TiB"][u]))' "$1"; }
size=$(stat -c %s "$WORK/a.txt")
want="prep: progress done 100% $(scaled $((10 * size))) | 3000 documents | $((10 * (size - 299 * 3 + 300))) tokens | "
grep -qF "$want" "$WORK/perr" && ok || bad "prep's final progress line, want '$want': $(tail -n 1 "$WORK/perr")"
"$ANVIL" prep --out "$WORK/prog_gz" --delimiter '\n\n\n' "$WORK/a.txt.gz" > /dev/null 2> "$WORK/perr" ||
    bad "prep of a .gz for progress failed"
want="prep: progress done 100% $(scaled "$(stat -c %s "$WORK/a.txt.gz")") | 300 documents"
grep -qF "$want" "$WORK/perr" && ok || bad "a .gz input's progress counts its compressed bytes, want '$want': $(cat "$WORK/perr")"
"$ANVIL" prep --no-progress --out "$WORK/prog_quiet" --delimiter '\n\n\n' "$WORK"/part?.txt > /dev/null 2> "$WORK/perr" &&
    ! grep -q progress "$WORK/perr" && ok || bad "prep --no-progress still printed: $(cat "$WORK/perr")"
# On a terminal: a bar redrawn in place (carriage return, line erased), with an ETA.
if command -v script > /dev/null; then
    script -q -c "'$ANVIL' prep --out '$WORK/prog_tty' --delimiter '\n\n\n' $(printf "'%s' " "$WORK"/part?.txt)" \
        /dev/null > "$WORK/ptty" 2>&1
    redraws=$(grep -o $'\r\033\\[K\\[[#.]*\\] ' "$WORK/ptty" | wc -l)
    [ "$redraws" -ge 2 ] && grep -q $'\\] 100% .*eta 00:00\r\n' "$WORK/ptty" && grep -q ' eta [0-9]' "$WORK/ptty" && ok ||
        bad "prep on a terminal: $redraws bar redraws: $(od -c "$WORK/ptty" | head -20)"
else
    missing "script (util-linux): prep's bar on a terminal is not checked"
fi

expect_error() { # want_code what args...
    local want=$1 what=$2
    shift 2
    # Progress lines would precede the one line these errors are.
    "$ANVIL" prep --no-progress "$@" > "$WORK/eout" 2> "$WORK/eerr"
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
expect_error 2 'option --out needs a value' "$WORK/a.txt" --out
expect_error 2 'out needs a folder' --out '' "$WORK/a.txt"
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
expect_error 1 "input $WORK/a.txt: the document at byte 0 is longer than --max-doc-bytes (1000 bytes)" \
    --out "$WORK/e" --max-doc-bytes 1000 "$WORK/a.txt"
expect_error 1 "j.jsonl:1: the line is longer than --max-doc-bytes (10 bytes)" --out "$WORK/e" --jsonl-field text \
    --max-doc-bytes 10 "$WORK/j.jsonl"
expect_error 2 "max-doc-bytes" --out "$WORK/e" --max-doc-bytes 0 "$WORK/a.txt"
[ ! -e "$WORK/e" ] && ok || bad "a failed run created its output folder"

echo "cli_prep: $pass checks passed"
finish
