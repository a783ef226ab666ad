#!/usr/bin/env bash
# What a resume reads, rank by rank: the bytes each rank's process read (rchar of /proc/PID/io, taken
# as it exits) over a run that only resumes (--steps at the checkpoint's step) on 4 ranks, minus what
# a run of 2 fresh steps reads (the binary's libraries and whatever else a run reads), for
# (DP, PP, TP) = (1, 2, 2) and (4, 1, 1), GPT-2 124M shapes with 4 layers, synthetic data, this
# build against an older one (--old or --old-rev). Before the ranks shared the checksums each rank
# verified every file of the checkpoint twice (once finding the newest that verifies, once loading
# it), then read its own pieces.
# usage: bench/bench_resume_io.sh [--anvil PATH] [--old PATH | --old-rev REV]
# Needs mpirun; runtime about 2 minutes on 2 cores (plus 1-3 minutes to build --old-rev).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
anvil=build/anvil
old=""
old_rev=""
while (($#)); do
  case "$1" in
    --anvil) anvil=$2; shift 2 ;;
    --old) old=$2; shift 2 ;;
    --old-rev) old_rev=$2; shift 2 ;;
    *) echo "bench_resume_io: unknown option $1" >&2; exit 2 ;;
  esac
done
dir=$(mktemp -d /tmp/bench_resume_io.XXXXXX)
trap 'rm -rf "$dir"' EXIT
if [ -n "$old_rev" ]; then
  git -C "$here/.." worktree add --detach "$dir/old-src" "$old_rev" > /dev/null 2>&1
  "$dir/old-src/scripts/build.sh" "$dir/old-build" --target anvil_cli > /dev/null
  old=$dir/old-build/anvil
fi
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(--preset gpt2 --layers 4 --synthetic --batch 4 --seq 64 --no-progress --sample-every -1 --threads 1)
# The rank's command, then its rchar on standard error as "rchar RANK BYTES".
cat > "$dir/rankio.py" << 'PY'
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
io = dict(line.split(": ") for line in open(f"/proc/{pid}/io").read().splitlines())
_, status = os.waitpid(pid, 0)
print("rchar", os.environ.get("OMPI_COMM_WORLD_RANK", "0"), io["rchar"], file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))
PY
# Per-rank rchar of `train ARGS` on 4 ranks, space-separated in rank order.
rchar() {
  mpirun -n 4 /usr/bin/python3 "$dir/rankio.py" "$@" 2>&1 > /dev/null | awk '$1 == "rchar" { r[$2] = $3 }
    END { printf "%d %d %d %d\n", r[0], r[1], r[2], r[3] }'
}
echo "| layout | build | checkpoint MB | MB read per rank at resume (ranks 0-3) | all ranks, x checkpoint |"
echo "|---|---|---:|---|---:|"
for layout in "--pp 2 --tp 2" ""; do
  name=$([ -n "$layout" ] && echo "(1, 2, 2)" || echo "(4, 1, 1)")
  for build in new old; do
    bin=$anvil
    [ $build = old ] && { [ -n "$old" ] || continue; bin=$old; }
    run=$dir/run
    rm -rf "$run"
    # shellcheck disable=SC2086
    mpirun -n 4 "$bin" train "${common[@]}" $layout --steps 2 --ckpt-every 2 --out "$run" > /dev/null 2>&1
    ck=$(cat "$run/ckpt/latest")
    mb=$(du -sm --apparent-size "$run/ckpt/$ck" | cut -f1)
    rm -rf "$dir/base"
    # shellcheck disable=SC2086
    base=($(rchar "$bin" train "${common[@]}" $layout --steps 2 --out "$dir/base"))
    # shellcheck disable=SC2086
    got=($(rchar "$bin" train "${common[@]}" $layout --steps 2 --resume auto --out "$run"))
    python3 - "$name" "$build" "$mb" "${base[@]}" "${got[@]}" << 'PY'
import sys
name, build, mb = sys.argv[1], sys.argv[2], float(sys.argv[3])
v = [int(x) for x in sys.argv[4:]]
d = [(v[4 + i] - v[i]) / 2**20 for i in range(4)]
print(f"| {name} | {build} | {mb:.0f} | {' / '.join(f'{x:.0f}' for x in d)} | {sum(d) / mb:.2f} |")
PY
  done
done
