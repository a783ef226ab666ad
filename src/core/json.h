/* Parsing JSON. cJSON's parser (1.7.15) writes a process-wide error position on every call, so
 * two threads parsing at once race (prep's workers, the job service's API and supervisor threads,
 * a checkpoint's writer thread). Every parse in the process goes through here, one at a time;
 * `json_parse_sites` (scripts/check_json.sh) fails on any other call of a cJSON_Parse function.
 * Building and printing JSON touch no shared state and need no such care. */
#ifndef ANVIL_CORE_JSON_H
#define ANVIL_CORE_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* Parses the len bytes at text (a NUL there or before it ends the text); NULL after anvil_fail when
 * they are not one JSON value, or break a rule of strict JSON (RFC 8259) that cJSON lets pass: a
 * string holding \u0000 (which a C string would cut short there), a raw control character or bytes
 * that are not UTF-8, and a key given twice in one object (cJSON keeps both, a lookup finds the
 * first); the message names the field ("env.LD_X: a string may not hold \u0000 (NUL) (byte 57)",
 * "resources.hosts: given twice") or, for malformed text, the byte ("malformed JSON near byte 12").
 * end (may be NULL) gets where parsing stopped: just past the value, or at the error. Whatever
 * follows the value is the caller's to check. */
cJSON *anvil_json_parse(const char *text, size_t len, const char **end);
/* Replaces each byte of s that is not part of a UTF-8 sequence with '?', so that text taken from
 * outside (a request's path, a value cut at a byte count) can go into JSON that stays valid. */
void anvil_utf8_sanitize(char *s);
/* anvil_json_parse of a NUL-terminated string; NULL for a NULL text. */
cJSON *anvil_json_parse_str(const char *text);

#endif
