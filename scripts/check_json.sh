#!/usr/bin/env bash
# Fails when code outside src/core/json.c calls one of cJSON's parse functions: they all write a
# process-wide error position, so every parse goes through core/json.h, which takes them one at a
# time (see there).
set -euo pipefail
cd "$(dirname "$0")/.."
if grep -rnE '\bcJSON_Parse[A-Za-z]*[[:space:]]*\(' src tests bench --include='*.[ch]' | grep -v '^src/core/json\.c:'; then
  echo "check_json: parse JSON with anvil_json_parse (src/core/json.h), not cJSON_Parse*" >&2
  exit 1
fi
echo "check_json: every JSON parse goes through src/core/json.h"
