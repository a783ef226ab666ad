#!/usr/bin/env bash
# The README's command blocks, run as a user would run them on a fresh clone (issue 32: "the
# README's Usage examples run as written"):
#   - every ```sh block of README.md, in order, is either run or skipped, as the table below says,
#     a skip with its reason printed; a block the table names nowhere fails the test, and so does
#     an entry that names no block (or several), so the README cannot drift from this test;
#   - the blocks run in a scratch folder laid out like a fresh clone: the tracked top-level files
#     and folders, and build/ leading to the build under test; the inputs the README names are
#     small stand-ins made first (and listed);
#   - each block runs under bash -e -o pipefail (and -x, into its log): a command that fails
#     fails its block, whose log's end is shown; then the files it must have left are checked;
#   - one substitution, printed where it applies: --steps N above 8 runs as --steps 8. The
#     README's runs are sized for a user's few minutes, the suite has seconds for each; eight
#     steps still write, validate, sample, checkpoint and profile (its --profile-steps 5-7).
. "$(dirname "$0")/tools/cli_common.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(dirname "$(readlink -f "$anvil")")
# One thread a process: the launch blocks put 2 ranks on this machine's cores. The ranks run as
# root here, which Open MPI refuses unless told.
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under ASan: fontconfig's own leaks (the plot block's PNG) are not anvil's (tests/tools/lsan_fontconfig.supp).
export LSAN_OPTIONS="${LSAN_OPTIONS:-}:suppressions=$root/tests/tools/lsan_fontconfig.supp"
steps_cap=8

# ---- the table: each block named by a string only it holds, then run or skip ----
# `block MARK run PROGRAMS CHECK`: run it when the PROGRAMS it needs are here, then CHECK (a shell
# condition, in the clone, $log the block's log) must hold; the need "unsanitized" runs it only in a
# build without sanitizers (a benchmark: what it times means nothing there, and it takes minutes).
# `block MARK skip WHY`: not run, because WHY.
marks=() actions=() needs=() checks=() whys=()
block() {
  marks+=("$1") actions+=("$2")
  if [ "$2" = run ]; then needs+=("$3") checks+=("$4") whys+=(""); else needs+=("") checks+=("") whys+=("$3"); fi
}
block "scripts/test.sh   # build, run the whole test suite" skip \
  "demo.sh installs packages and trains for 3 minutes; test.sh runs the suite this test belongs to"
block "build/anvil prep --out data/mycorpus --delimiter" run "" \
  '[ -f data/mycorpus/manifest.json ] && [ -f data/web/manifest.json ] && [ -f data/mycorpus-bpe/manifest.json ] &&
   [ -f data/l3meta/manifest.json ] && [ -s runs/mine/model.safetensors ] && [ -f runs/mine/ckpt/latest ] &&
   [ -f hf/mine/config.json ] && [ -s gpt2.safetensors ]'
block "build/anvil tokenizer train --vocab-size 8192 --pattern llama3" run mpirun \
  '[ -s runs/llama/model.safetensors ] && [ -s runs/llama-tp/model.safetensors ] && [ -f hf/llama/config.json ]'
block "build/anvil import --hf path/to/Llama-3.2-1B" skip \
  "it needs Meta's Llama-3.2-1B and its tokenizer.model (downloads under Meta's license) and fine-tunes a 1.24B model"
block "--keep-every 5000 --resume auto" run "" \
  '[ -s runs/long/model.safetensors ] && grep -q "^resumed from runs/long/ckpt/step_0*$steps_cap " "$log"'
block "ANVIL_ISA=avx2 build/anvil train ..." skip "its options are elided (...): a pattern, not a command"
block "build/tests/test_cuda_kernels " skip "it needs an NVIDIA GPU"
block "--hosts node1:4,node2:4" skip "it needs hosts node1 and node2 over ssh, and its options are elided (...)"
block "--zero 3 --out runs/z3" skip "it needs 8 ranks, trains GPT-2 124M on 4, and elides options (...)"
block "build/anvil launch -n 4 -- health" skip \
  "its 4 ranks judge each other's speed, which other work on a shared machine skews (tests/cli_health.sh checks it)"
block "--tp 2 --pp 2 --total-batch-tokens 16384" skip "it needs 8 ranks, and its options are elided (...)"
block "build/bench/bench_pp -- 1f1b" run "mpirun unsanitized" 'grep -q "\"schedule\":\"1f1b\"" "$log"'
block "--metrics-port 9464" skip \
  "its curl is for a second terminal while the training above it runs (tests/cli_metrics.sh reads the page)"
block "--metric 'ms=" run "" 'grep -q "\"kind\":\"log\".*\"ms\":[0-9]" runs/logged/metrics.jsonl'
block "build/anvil plot runs/mine runs/logged" run "" '[ -s loss.svg ] && [ -s runs/mine/figure.png ]'
block "--profile-steps 5-7" run "" 'grep -q "^runs/profiled/profile/trace_rank0.json: 3 steps" "$log"'
block "export AWS_ACCESS_KEY_ID" skip "it needs an S3 server and its keys (tests/cli_s3.sh runs these against Ceph's radosgw)"
block "build/anvil serve --state ~/anvil-state --port 0 &" skip \
  "it starts a daemon of your own, with a 2000-step job on /data/mycorpus that stop and wait end with exit 3 (tests/cli_serve.sh runs the service)"
block "goodput 7                       # the table" skip "it asks a daemon for job 7 and plots it (tests/cli_chaos.sh and tests/cli_plot.sh)"
block "goodput 1     # the table" skip "it needs the daemon of the job service's first block and a job (tests/cli_chaos.sh)"
block '--schedule "step:200 kill-rank' skip "it strikes a running job of that daemon (tests/cli_chaos.sh runs chaos)"
block "--sim-hosts 2 &" skip "it needs root and a spec.json, and strikes a job (tests/cli_netcut.sh runs it)"
block "tools/s3_faultproxy.py https://s3.example.com" skip "it needs an S3 store and a running job of the daemon (tests/cli_s3.sh runs the proxy and chaos's S3 faults)"
block "quota --state ~/anvil-state set --role nlp" skip "it needs the daemon that the job service's first block starts (tests/cli_serve.sh)"
block "--hook-command 'jq -c ." skip "it runs the daemon in the foreground until it is stopped (tests/cli_serve.sh)"
block "export SLURM_CONF=/etc/slurm/slurm.conf" skip "it needs a Slurm cluster (tests/cli_slurm.sh brings up its own)"
block "build/anvil user add alice " skip "it needs a daemon on the default state folder and its admin's token (tests/cli_serve.sh)"
block "sqlite3 state.db .dump" run sqlite3 \
  '[ -s state.db.damaged ] && [ "$(sqlite3 state.db "SELECT name FROM users")" = admin ] && grep -qx ok "$log"'
block 'A="Authorization: Bearer $T"' skip "it needs a running daemon, P and T set as the text says, and a spec.json (tests/cli_serve.sh)"

# ---- the blocks, numbered in README order; --steps capped in the copies that run ----
mkdir "$tmp/blocks"
python3 - "$root/README.md" "$tmp/blocks" "$steps_cap" << 'PY' || bad "reading the README's blocks"
import re, sys
readme, out, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = open(readme).read().split("\n")
n, i = 0, 0
while i < len(lines):
    if not re.fullmatch(r"```(sh|bash|shell)\s*", lines[i]):
        i += 1
        continue
    end = i + 1
    while end < len(lines) and lines[end].rstrip() != "```":
        end += 1
    if end == len(lines):
        sys.exit(f"README.md:{i + 1}: the block never ends")
    n += 1
    body = "\n".join(lines[i + 1:end]) + "\n"
    subs = []
    def cap_steps(m):
        if int(m.group(1)) <= cap:
            return m.group(0)
        subs.append(f"{m.group(0)} -> --steps {cap}")
        return f"--steps {cap}"
    run = re.sub(r"--steps ([0-9]+)", cap_steps, body)
    for ext, text in (("sh", body), ("run.sh", run), ("line", f"{i + 1}\n"), ("subs", "".join(s + "\n" for s in subs))):
        open(f"{out}/{n:02d}.{ext}", "w").write(text)
    i = end + 1
PY
nblocks=$(find "$tmp/blocks" -name '*.line' | wc -l)
[ "$nblocks" -gt 0 ] || bad "no \`\`\`sh block found in README.md"

# Which entry names each block: exactly one, and each entry exactly one block.
declare -A entry_of=()
for e in "${!marks[@]}"; do
  hits=$(grep -lF -- "${marks[$e]}" "$tmp"/blocks/*[0-9].sh 2> /dev/null)
  if [ "$(printf '%s' "$hits" | grep -c .)" != 1 ]; then
    bad "the table's entry '${marks[$e]}' names $(printf '%s' "$hits" | grep -c .) README blocks, not one"
    continue
  fi
  b=$(basename "$hits" .sh)
  [ -n "${entry_of[$b]:-}" ] && bad "README.md:$(cat "$tmp/blocks/$b.line"): named by two entries, '${marks[${entry_of[$b]}]}' and '${marks[$e]}'"
  entry_of[$b]=$e
done

# ---- a fresh clone's working folder, and the inputs the README names ----
clone=$tmp/clone
mkdir "$clone"
tracked=$(git -C "$root" ls-files 2> /dev/null | cut -d/ -f1 | sort -u)
[ -n "$tracked" ] || { bad "$root is not a git checkout: no list of what a clone holds"; finish; }
for name in $tracked; do ln -s "$root/$name" "$clone/$name"; done
ln -s "$build" "$clone/build"
echo "clone: $clone (the tracked top level, and build -> $build)"
if ! command -v bible > /dev/null || ! command -v zstd > /dev/null; then
  missing "bible (bible-kjv) or zstd is not installed: no corpus for the README's commands"
  finish
fi
(
  cd "$clone" || exit 1
  # Verses as paragraphs: the README splits documents at blank lines. 0.5 MB: the 1% val split of
  # the BPE shards still holds a batch of 8 x 128 tokens.
  bible -f "gen1:1-lev27:34" | sed G > corpus.txt &&
    python3 -c 'import json, sys
for line in open(sys.argv[1]):
    if line.strip(): print(json.dumps({"text": line.strip()}))' corpus.txt | zstd -q -o web.jsonl.zst &&
    printf '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWho begat Enoch?<|eot_id|>\n' > chat.txt &&
    "$anvil" tokenizer train --no-progress --vocab-size 2048 --pattern llama3 --out tokenizer.model corpus.txt > /dev/null &&
    "$anvil" train --synthetic --preset tiny --batch 2 --seq 16 --steps 1 --no-progress --sample-every -1 \
      --out "$tmp/gpt2run" > /dev/null 2>&1 &&
    "$anvil" export --no-progress --model "$tmp/gpt2run" --out path/to/gpt2 > /dev/null &&
    "$anvil" serve --init --state "$tmp/state" > /dev/null 2>&1 && cp "$tmp/state/state.db" state.db
) > "$tmp/fixtures.log" 2>&1 || { bad "making the inputs: $(tail -n 3 "$tmp/fixtures.log")"; finish; }
echo "input: corpus.txt: Genesis to Leviticus (bible-kjv), a verse a paragraph, $(wc -c < "$clone/corpus.txt") bytes"
echo "input: web.jsonl.zst: the same verses as JSON lines {\"text\": ...}, zstd-compressed"
echo "input: chat.txt: one Llama 3 chat turn with its special tokens"
echo "input: tokenizer.model: Meta's stands in: a 2048-id rank file trained here with --pattern llama3"
echo "input: path/to/gpt2: a GPT2LMHeadModel folder, a 1-step tiny GPT-2 exported"
echo "input: state.db: a state database fresh from 'anvil serve --init', for the salvage to read"

# ---- run or skip each block ----
runs=0
for f in "$tmp"/blocks/*[0-9].sh; do
  b=$(basename "$f" .sh)
  where="README.md:$(cat "$tmp/blocks/$b.line")"
  first=$(grep -v '^#' "$f" | grep -m 1 . | cut -c1-70)
  e=${entry_of[$b]:-}
  if [ -z "$e" ]; then
    bad "$where ($first): neither run nor skipped: name it in tests/cli_readme.sh's table"
    continue
  fi
  if [ "${actions[$e]}" = skip ]; then
    echo "skip: $where ($first): ${whys[$e]}"
    continue
  fi
  if [[ " ${needs[$e]} " == *" unsanitized "* ]] && ldd "$anvil" | grep -q 'libasan\|libtsan'; then
    echo "skip: $where ($first): a benchmark, run in the build without sanitizers"
    continue
  fi
  for p in ${needs[$e]/unsanitized/}; do command -v "$p" > /dev/null || { missing "$where: $p is not installed"; continue 2; }; done
  while read -r s; do [ -n "$s" ] && echo "substituted in $where: $s"; done < "$tmp/blocks/$b.subs"
  log=$tmp/blocks/$b.log
  env=()
  # Open MPI's allocations outlive LeakSanitizer (as in cli_dist.sh): a block that launches ranks
  # runs without its check, the commands beside the launch too (other tests check those).
  grep -q 'anvil launch' "$f" && env=("ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0")
  start=$(date +%s%N)
  (cd "$clone" && env "${env[@]}" timeout 900 bash -e -o pipefail -x "$tmp/blocks/$b.run.sh") < /dev/null > "$log" 2>&1
  rc=$?
  took=$((($(date +%s%N) - start) / 1000000))
  runs=$((runs + 1))
  if [ $rc != 0 ]; then
    bad "$where ($first): exit $rc after $took ms; the end of its log:"
    tail -n 15 "$log" | sed 's/^/    /' >&2
  elif [ -n "${checks[$e]}" ] && ! (cd "$clone" && eval "${checks[$e]}"); then
    bad "$where ($first): ran, but its check failed: ${checks[$e]}"
  else ok "$where ($first): ran in $took ms"; fi
done
echo "$runs of $nblocks README blocks run"
finish
