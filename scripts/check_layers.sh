#!/usr/bin/env bash
# Fails when a file under src/ includes a header from its own layer's
# neighbours or from a layer above it: the dependency graph of the modules
# only points down. Every folder under src/ is a module and must have a layer
# here, so a new module cannot slip in unplaced.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A layer=(
  [core]=0
  [kernels]=1 [tok]=1 [obs]=1 [s3]=1
  [model]=2 [data]=2 [optim]=2 [opts]=2
  [ckpt]=3 [dist]=3 [sample]=3
  [train]=4 [job]=4
  [cli]=5
)
bad=0
for dir in src/*/; do
  m=$(basename "$dir")
  [ -n "${layer[$m]:-}" ] || { echo "check_layers: src/$m has no layer in scripts/check_layers.sh" >&2; bad=1; }
done
while IFS=: read -r file line text; do
  from=${file#src/}; from=${from%%/*}
  to=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([a-z_0-9]+)\/.*/\1/' <<<"$text")
  [ "$from" = "$to" ] && continue
  [ -n "${layer[$to]:-}" ] || { echo "$file:$line: includes unknown module '$to'" >&2; bad=1; continue; }
  [ -n "${layer[$from]:-}" ] || continue
  if [ "${layer[$to]}" -ge "${layer[$from]}" ]; then
    echo "$file:$line: $from (layer ${layer[$from]}) includes $to (layer ${layer[$to]}): includes must point to a lower layer" >&2
    bad=1
  fi
done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_0-9]+/' src --include='*.[ch]')
[ "$bad" -eq 0 ] && echo "check_layers: every include points down"
exit "$bad"
