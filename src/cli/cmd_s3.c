/* anvil s3: copy, list and remove objects, with the client anvil uses for
 * its s3:// paths (the same credentials, retries and counters). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/s3path.h"
#include "core/error.h"

static const char *usage =
    "usage: anvil s3 cp SRC DST [--stats]   (one of SRC, DST an s3://bucket/key, the other a local file)\n"
    "       anvil s3 ls s3://bucket[/prefix] [--stats]\n"
    "       anvil s3 rm s3://bucket/key [--stats]\n"
    "\n"
    "Objects on S3 or an S3-compatible store (path-style requests to AWS_ENDPOINT_URL).\n"
    "Credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, else the profile\n"
    "AWS_PROFILE (default: default) of ~/.aws/credentials; region: AWS_REGION, else the profile's\n"
    "region in ~/.aws/config, else us-east-1. Uploads over the part size (ANVIL_S3_PART_SIZE,\n"
    "default 16 MiB) go by multipart. Failed requests (503 SlowDown, 500, 408, 429, resets,\n"
    "timeouts) are retried with backoff (ANVIL_S3_MAX_ATTEMPTS, default 8).\n"
    "  ls prints 'SIZE KEY' per object.\n"
    "  --stats  print the requests made, by type, with retries, bytes and latency, on stderr\n";

static int ls_one(void *ctx, const char *key, uint64_t size) {
    (void)ctx;
    printf("%12" PRIu64 " %s\n", size, key);
    return 0;
}

static int run(anvil_s3 *s3, const char *verb, const char *a, const char *b) {
    if (!strcmp(verb, "cp")) {
        if (anvil_s3_is_uri(a) == anvil_s3_is_uri(b))
            return anvil_fail("cp: exactly one of '%s' and '%s' must be an s3:// URI", a, b);
        return anvil_s3_is_uri(a) ? s3path_fetch_file(s3, a, b) : s3path_push_file(s3, a, b);
    }
    char *bucket, *key;
    if (anvil_s3_parse_uri(a, &bucket, &key)) return -1;
    int rc;
    if (!strcmp(verb, "ls")) rc = anvil_s3_list(s3, bucket, key, ls_one, NULL);
    else if (key[0]) rc = anvil_s3_delete(s3, bucket, key);
    else rc = anvil_fail("rm: '%s' names a bucket, not an object", a);
    free(bucket);
    free(key);
    return rc;
}

int cmd_s3(int argc, char **argv) {
    const char *pos[3] = {NULL, NULL, NULL};
    int npos = 0, stats = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--stats")) stats = 1;
        else if (!strncmp(argv[i], "--", 2)) return cli_usage_error("s3", "unknown option '%s'", argv[i]);
        else if (npos == 3) return cli_usage_error("s3", "unexpected argument '%s'", argv[i]);
        else pos[npos++] = argv[i];
    }
    if (!npos) return cli_usage_error("s3", "a subcommand is required: cp, ls or rm");
    const char *verb = pos[0];
    int want = !strcmp(verb, "cp") ? 3 : !strcmp(verb, "ls") || !strcmp(verb, "rm") ? 2 : 0;
    if (!want) return cli_usage_error("s3", "unknown subcommand '%s'", verb);
    if (npos != want) return cli_usage_error("s3", "%s takes %d argument%s", verb, want - 1, want == 3 ? "s" : "");
    if (want == 2 && !anvil_s3_is_uri(pos[1])) return cli_usage_error("s3", "'%s' is not an s3:// URI", pos[1]);
    anvil_s3 *s3 = anvil_s3_open();
    if (!s3) return cli_config_fail("s3");
    int rc = run(s3, verb, pos[1], pos[2]);
    if (stats) s3path_print_stats(s3);
    anvil_s3_close(s3);
    return rc ? cli_fail("s3") : 0;
}
