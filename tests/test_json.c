/* Strict JSON (core/json.h): what cJSON lets pass and anvil refuses, each named by its field: a
 * \u0000 escape, a raw control character, bytes that are not UTF-8 (overlong, surrogate, past
 * U+10FFFF, cut short), a key given twice at any depth; and what stays accepted: every valid UTF-8
 * length, escaped surrogate pairs, an escaped backslash before "u0000". */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/json.h"
#include "testutil.h"

/* 1 when text parses, 0 when it is refused with a message holding want. */
static int parses(const char *text, const char *want) {
    cJSON *j = anvil_json_parse(text, strlen(text), NULL);
    cJSON_Delete(j);
    if (j) return 1;
    if (want && !strstr(anvil_errmsg(), want)) fprintf(stderr, "  %s: refused with '%s'\n", text, anvil_errmsg());
    return want && strstr(anvil_errmsg(), want) ? 0 : -1;
}

int main(void) {
    CHECK(parses("{\"a\": 1, \"b\": [1, {\"c\": \"x\"}]}", NULL) == 1);
    CHECK(parses("{\"a\": 1,", "malformed JSON near byte 7") == 0);
    CHECK(parses("{\"name\": \"ab\\u0000cd\"}", "name: a string may not hold \\u0000 (NUL) (byte 12)") == 0);
    CHECK(parses("{\"env\": {\"OK\\u0000LD\": \"x\"}}", "env.OK\\u0000LD: a string may not hold \\u0000") == 0);
    CHECK(parses("[\"a\", \"\\u0000\"]", "[1]: a string may not hold") == 0);
    CHECK(parses("{\"a\": \"\\\\u0000\"}", NULL) == 1);
    CHECK(parses("{\"a\": \"x\ty\"}", "a: a string may not hold a raw control character") == 0);
    CHECK(parses("{\"a\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}", NULL) == 1);
    CHECK(parses("{\"a\": \"\\ud83d\\ude00\"}", NULL) == 1);
    static const char *const bad_utf8[] = {"\xe9", "\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xed\xa0\x80",
                                           "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xc3", "\xe2\x82", "\x80"};
    for (size_t i = 0; i < sizeof bad_utf8 / sizeof *bad_utf8; i++) {
        char text[64];
        snprintf(text, sizeof text, "{\"k\": {\"deep\": \"x%sy\"}}", bad_utf8[i]);
        CHECK(parses(text, "k.deep: not valid UTF-8 (byte 17)") == 0);
    }
    /* A key that is not UTF-8 is named with its bytes escaped, so that the message is UTF-8. */
    CHECK(parses("{\"b\xe9\": 1}", "b\\xe9: not valid UTF-8") == 0);
    CHECK(parses("{\"a\": 1, \"a\": 2}", "a: given twice") == 0);
    CHECK(parses("{\"r\": {\"hosts\": 1, \"x\": 0, \"hosts\": 2}}", "r.hosts: given twice") == 0);
    CHECK(parses("{\"a\": [{\"b\": 1}, {\"c\": {\"d\": 1, \"d\": 1}}]}", "a[1].c.d: given twice") == 0);
    CHECK(parses("[{\"x\": 1}, {\"x\": 1}]", NULL) == 1);
    /* cJSON skips any byte up to 32 between tokens, NUL too; JSON allows four. */
    static const char nul_space[] = "[1,\0 2]";
    cJSON *j = anvil_json_parse(nul_space, sizeof nul_space - 1, NULL);
    CHECK(!j && strstr(anvil_errmsg(), "a control character between tokens (byte 3)"));
    cJSON_Delete(j);
    CHECK(parses("{\"a\":\x01 1}", "a: a control character between tokens") == 0);
    CHECK(parses(" {\"a\": [1 ,\t2\r\n]} ", NULL) == 1);
    /* 300 keys, all different: no quadratic search is needed to tell. */
    char many[8192] = "{";
    for (int i = 0; i < 300; i++) snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"k%d\": %d", i ? ", " : "", i, i);
    strcat(many, "}");
    CHECK(parses(many, NULL) == 1);
    many[strlen(many) - 1] = 0;
    strcat(many, ", \"k7\": 0}");
    CHECK(parses(many, "k7: given twice") == 0);
    return t_done("test_json");
}
