/* libFuzzer entry point for the S3 client's parsers of what a server sends:
 * error bodies, InitiateMultipartUpload answers and ListObjectsV2 pages (all
 * three on every input), and the INI parser of the AWS credentials and config
 * files. Each must accept or refuse with a message, never crash, leak or read
 * out of bounds, and an accepted list page must be consistent. Built and run
 * by tests/fuzz/CMakeLists.txt (ANVIL_FUZZ) and scripts/fuzz.sh. */
#include "core/error.h"
#include "s3/s3.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *x = (const char *)data;
    char code[64], msg[128], v[256];
    if (anvil_s3_parse_error(x, size, code, sizeof code, msg, sizeof msg) == 0 && strlen(code) >= sizeof code)
        __builtin_trap();
    char *id = NULL;
    anvil_fail("%s", "");
    if (anvil_s3_parse_upload_id(x, size, &id)) {
        if (id || !anvil_errmsg()[0]) __builtin_trap();
    } else if (!id || !id[0]) {
        __builtin_trap();
    }
    free(id);
    anvil_s3_list_page pg;
    anvil_fail("%s", "");
    if (anvil_s3_parse_list(x, size, &pg)) {
        if (pg.n || pg.objects || pg.next_token || !anvil_errmsg()[0]) __builtin_trap();
    } else {
        if (pg.truncated != !!pg.next_token) __builtin_trap();
        for (size_t i = 0; i < pg.n; i++)
            if (!pg.objects[i].key) __builtin_trap();
        anvil_s3_list_page_free(&pg);
    }
    if (anvil_s3_ini_get(x, size, "default", "aws_access_key_id", v, sizeof v) == 1 && strlen(v) >= sizeof v)
        __builtin_trap();
    return 0;
}
