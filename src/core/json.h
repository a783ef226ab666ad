/* Parsing JSON. cJSON's parser (1.7.15) writes a process-wide error position on every call, so
 * two threads parsing at once race (prep's workers, the job service's API and supervisor threads,
 * a checkpoint's writer thread). Every parse in the process goes through here, one at a time;
 * `json_parse_sites` (scripts/check_json.sh) fails on any other call of a cJSON_Parse function.
 * Building and printing JSON touch no shared state and need no such care. */
#ifndef ANVIL_CORE_JSON_H
#define ANVIL_CORE_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* Parses the len bytes at text (a NUL there or before it ends the text); NULL when they are not
 * one JSON value. end (may be NULL) gets where parsing stopped: just past the value, or at the
 * error. Whatever follows the value is the caller's to check. */
cJSON *anvil_json_parse(const char *text, size_t len, const char **end);
/* anvil_json_parse of a NUL-terminated string; NULL for a NULL text. */
cJSON *anvil_json_parse_str(const char *text);

#endif
