#include "data/prep.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "core/json.h"

size_t anvil_jsonl_next_line(const unsigned char *data, size_t len, size_t *off, size_t *line_len) {
    size_t start = *off;
    const unsigned char *nl = memchr(data + start, '\n', len - start);
    size_t n = nl ? (size_t)(nl - (data + start)) : len - start;
    *off = start + n + (nl != NULL);
    *line_len = n;
    return start;
}

/* Whether the line escapes a NUL. Backslashes occur only inside JSON
 * strings, so a scan that skips each escaped character sees every escape. */
static int escapes_nul(const unsigned char *line, size_t len) {
    for (size_t i = 0; i + 1 < len; i++) {
        if (line[i] != '\\') continue;
        if (line[i + 1] == 'u' && i + 5 < len && !memcmp(line + i + 2, "0000", 4)) return 1;
        i++;
    }
    return 0;
}

int anvil_jsonl_field(const unsigned char *line, size_t len, const char *field, void **hold, const char **doc,
                      size_t *doc_len) {
    *hold = NULL;
    *doc = NULL;
    *doc_len = 0;
    if (len && line[len - 1] == '\r') len--;
    if (!len) return ANVIL_JSONL_BLANK;
    /* Workers parse one line at a time each, under core/json.h's lock
     * (bench/RESULTS.md, "JSON lines": it costs less than a parser without one). */
    const char *end = NULL;
    cJSON *j = anvil_json_parse((const char *)line, len, &end);
    /* core/json.h refuses a \u0000 escape; prep names it apart from other bad JSON. */
    if (!j) return escapes_nul(line, len) ? ANVIL_JSONL_NUL : ANVIL_JSONL_BAD_JSON;
    /* Text after the value ("{...} junk", two objects on a line) would
     * otherwise be dropped without a word. */
    for (const char *p = end; p < (const char *)line + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r') {
            cJSON_Delete(j);
            return ANVIL_JSONL_BAD_JSON;
        }
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, field);
    if (!cJSON_IsString(f)) {
        cJSON_Delete(j);
        return ANVIL_JSONL_NO_FIELD;
    }
    *hold = j;
    *doc = f->valuestring;
    *doc_len = strlen(f->valuestring);
    return ANVIL_JSONL_DOC;
}

void anvil_jsonl_release(void *hold) { cJSON_Delete(hold); }
