#!/usr/bin/env bash
# Fails when a file under src/ includes a header from its own layer's
# neighbours or from a layer above it: the dependency graph of the modules
# only points down; and when code outside src/model names a model family's
# internals (anvil_gpt2_*, model/family.h, a family's folder). Every folder under src/ is a module and must have a layer
# here, so a new module cannot slip in unplaced.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A layer=(
  [core]=0
  [kernels]=1 [tok]=1 [obs]=1 [s3]=1 [launch]=1
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
done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_0-9]+/' src --include='*.[ch]' --include='*.cu' --include='*.cuh')
# A model family is reached only through model/model.h: its own names and headers (model/family.h, a
# family's folder) stay inside src/model.
while IFS=: read -r file line _; do
  echo "$file:$line: a model family's internals outside src/model: reach it through model/model.h" >&2
  bad=1
done < <(grep -rnE 'anvil_gpt2_|ANVIL_GPT2_|"model/family\.h"|"model/[a-z0-9_]+/' src --include='*.[ch]' |
  grep -v '^src/model/')
[ "$bad" -eq 0 ] && echo "check_layers: every include points down, and model families stay behind model/model.h"
exit "$bad"
