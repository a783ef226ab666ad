#include "ckpt/completion.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/clock.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "core/json.h"

#define FORMAT "anvil-completion"
/* A record is a few hundred bytes; anything much larger is not one. */
#define MAX_RECORD (64 * 1024)

/* A name verification may open: a plain file in the run folder, never a path out of it. */
static bool plain_name(const char *s) {
    size_t n = strlen(s);
    if (!n || n >= sizeof ((anvil_completion_file *)0)->name || s[0] == '.') return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", s[i])) return false;
    return true;
}

/* anvil_fail with prefix before the message already set (which the call must not read while writing it). */
static int fail_with_prefix(const char *prefix) {
    char why[1024];
    snprintf(why, sizeof why, "%s", anvil_errmsg());
    return anvil_fail("%s: %s", prefix, why);
}

static void record_path(const char *dir, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", dir, ANVIL_COMPLETION_FILE);
}

static cJSON *record_json(const anvil_completion *r) {
    cJSON *o = cJSON_CreateObject(), *files = NULL;
    bool ok = o && cJSON_AddStringToObject(o, "format", FORMAT) &&
              cJSON_AddNumberToObject(o, "version", r->version) && cJSON_AddStringToObject(o, "command", r->command) &&
              cJSON_AddStringToObject(o, "attempt", r->attempt) && cJSON_AddNumberToObject(o, "pid", (double)r->pid) &&
              cJSON_AddStringToObject(o, "host", r->host) &&
              cJSON_AddNumberToObject(o, "finished_at", r->finished_at) &&
              cJSON_AddNumberToObject(o, "step", (double)r->step) &&
              cJSON_AddNumberToObject(o, "target_steps", (double)r->target_steps) &&
              (files = cJSON_AddArrayToObject(o, "files"));
    for (int i = 0; ok && i < r->nfiles; i++) {
        char crc[9];
        snprintf(crc, sizeof crc, "%08x", r->files[i].crc32c);
        cJSON *f = cJSON_CreateObject();
        ok = f && cJSON_AddItemToArray(files, f) && cJSON_AddStringToObject(f, "name", r->files[i].name) &&
             cJSON_AddNumberToObject(f, "size", (double)r->files[i].size) && cJSON_AddStringToObject(f, "crc32c", crc);
        if (f && !ok) cJSON_Delete(f);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int anvil_completion_write(const char *dir, const char *command, long long step, long long target_steps,
                           const char *const *files, int nfiles) {
    if (step < target_steps)
        return anvil_fail("%s: step %lld is short of the target %lld: no completion record", command, step,
                          target_steps);
    if (nfiles < 0 || nfiles > ANVIL_COMPLETION_MAX_FILES)
        return anvil_fail("%s: a completion record names at most %d files", command, ANVIL_COMPLETION_MAX_FILES);
    /* Test hook: a command that ends with exit 0 without its word, as one cut off by a lost node may. */
    if (getenv("ANVIL_TEST_NO_COMPLETION")) return 0;
    anvil_completion r = {.version = ANVIL_COMPLETION_VERSION, .pid = getpid(), .step = step,
                          .target_steps = target_steps, .nfiles = nfiles};
    const char *attempt = getenv("ANVIL_ATTEMPT");
    snprintf(r.command, sizeof r.command, "%s", command);
    snprintf(r.attempt, sizeof r.attempt, "%s", attempt ? attempt : "");
    if (gethostname(r.host, sizeof r.host - 1)) snprintf(r.host, sizeof r.host, "unknown host");
    r.finished_at = anvil_epoch_now();
    char path[PATH_MAX + 160];
    for (int i = 0; i < nfiles; i++) {
        if (!plain_name(files[i])) return anvil_fail("%s: '%s' is not a plain file name of %s", command, files[i], dir);
        snprintf(r.files[i].name, sizeof r.files[i].name, "%s", files[i]);
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (anvil_crc32c_file(path, &r.files[i].size, &r.files[i].crc32c)) return -1;
    }
    cJSON *o = record_json(&r);
    char *json = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    size_t len = json ? strlen(json) : 0;
    char *text = json ? malloc(len + 1) : NULL;
    if (text) {
        memcpy(text, json, len);
        text[len] = '\n';
    }
    free(json);
    if (!text) return anvil_fail("%s: out of memory", command);
    record_path(dir, path, sizeof path);
    int rc = anvil_write_file_atomic(path, text, len + 1);
    free(text);
    return rc;
}

/* A string field of at most cap - 1 bytes into out; at names the object ("" or "files[1].") in messages. */
static int take_string(const cJSON *o, const char *at, const char *key, char *out, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v)) return anvil_fail("completion record: %s%s: must be a string", at, key);
    if (strlen(v->valuestring) >= cap)
        return anvil_fail("completion record: %s%s: longer than %zu bytes", at, key, cap - 1);
    memcpy(out, v->valuestring, strlen(v->valuestring) + 1);
    return 0;
}

/* A whole number field in [lo, hi]. */
static int take_int(const cJSON *o, const char *at, const char *key, double lo, double hi, long long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < lo || v->valuedouble > hi)
        return anvil_fail("completion record: %s%s: must be a whole number in [%.0f, %.0f]", at, key, lo, hi);
    *out = (long long)v->valuedouble;
    return 0;
}

static int take_file(const cJSON *f, int i, anvil_completion_file *out) {
    char crc[16], at[32];
    long long size = 0;
    snprintf(at, sizeof at, "files[%d].", i);
    if (!cJSON_IsObject(f)) return anvil_fail("completion record: files[%d]: must be an object", i);
    /* 2^53: the largest size a JSON number holds exactly. */
    if (take_string(f, at, "name", out->name, sizeof out->name) ||
        take_int(f, at, "size", 0, 9007199254740992.0, &size) || take_string(f, at, "crc32c", crc, sizeof crc))
        return -1;
    if (!plain_name(out->name))
        return anvil_fail("completion record: files[%d]: name '%s' is not a plain file name", i, out->name);
    char *end;
    unsigned long v = strtoul(crc, &end, 16);
    if (strlen(crc) != 8 || *end || crc[strspn(crc, "0123456789abcdef")])
        return anvil_fail("completion record: files[%d]: crc32c must be 8 lowercase hex digits", i);
    out->size = (uint64_t)size;
    out->crc32c = (uint32_t)v;
    return 0;
}

static int parse_fields(const cJSON *o, anvil_completion *r) {
    char format[32];
    long long version = 0, pid = 0;
    if (!cJSON_IsObject(o)) return anvil_fail("completion record: not a JSON object");
    if (take_string(o, "", "format", format, sizeof format) || take_int(o, "", "version", 1, 1e6, &version)) return -1;
    if (strcmp(format, FORMAT)) return anvil_fail("completion record: format: '%s', not '%s'", format, FORMAT);
    if (version != ANVIL_COMPLETION_VERSION)
        return anvil_fail("completion record: version %lld, this anvil reads %d", version, ANVIL_COMPLETION_VERSION);
    r->version = (int)version;
    if (take_string(o, "", "command", r->command, sizeof r->command) ||
        take_string(o, "", "attempt", r->attempt, sizeof r->attempt) || take_int(o, "", "pid", 1, 4194304, &pid) ||
        take_string(o, "", "host", r->host, sizeof r->host) || take_int(o, "", "step", -1, 1e15, &r->step) ||
        take_int(o, "", "target_steps", -1, 1e15, &r->target_steps))
        return -1;
    r->pid = pid;
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(o, "finished_at");
    if (!cJSON_IsNumber(at) || !isfinite(at->valuedouble) || at->valuedouble < 0)
        return anvil_fail("completion record: finished_at: must be a time (seconds since the epoch)");
    r->finished_at = at->valuedouble;
    if (!r->command[0]) return anvil_fail("completion record: command: empty");
    if ((r->step < 0) != (r->target_steps < 0))
        return anvil_fail("completion record: step and target_steps: both or neither must be given");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(o, "files"), *f;
    if (!cJSON_IsArray(files)) return anvil_fail("completion record: files: must be an array");
    if (cJSON_GetArraySize(files) > ANVIL_COMPLETION_MAX_FILES)
        return anvil_fail("completion record: files: more than %d", ANVIL_COMPLETION_MAX_FILES);
    cJSON_ArrayForEach(f, files) {
        if (take_file(f, r->nfiles, &r->files[r->nfiles])) return -1;
        for (int k = 0; k < r->nfiles; k++)
            if (!strcmp(r->files[k].name, r->files[r->nfiles].name))
                return anvil_fail("completion record: files: %s named twice", r->files[k].name);
        r->nfiles++;
    }
    return 0;
}

int anvil_completion_parse(const char *text, size_t len, anvil_completion *rec) {
    memset(rec, 0, sizeof *rec);
    const char *end;
    cJSON *o = anvil_json_parse(text, len, &end);
    if (!o) return anvil_fail("completion record: not JSON (at byte %zu)", (size_t)(end - text));
    while ((size_t)(end - text) < len && strchr(" \t\r\n", *end)) end++;
    int rc = (size_t)(end - text) < len ? anvil_fail("completion record: text after the object (byte %zu)",
                                                     (size_t)(end - text))
                                        : parse_fields(o, rec);
    cJSON_Delete(o);
    if (rc) memset(rec, 0, sizeof *rec);
    return rc;
}

static int verify_file(const char *dir, const anvil_completion_file *f) {
    char path[PATH_MAX + 160];
    uint64_t size;
    uint32_t crc;
    snprintf(path, sizeof path, "%s/%s", dir, f->name);
    if (anvil_crc32c_file(path, &size, &crc)) return -1;
    if (size != f->size)
        return anvil_fail("%s is %llu bytes, the completion record says %llu", path, (unsigned long long)size,
                          (unsigned long long)f->size);
    if (crc != f->crc32c)
        return anvil_fail("%s has CRC-32C %08x, the completion record says %08x", path, crc, f->crc32c);
    return 0;
}

int anvil_completion_verify(const char *dir, const char *attempt, const char *command, anvil_completion *rec) {
    char path[PATH_MAX + 32], *text;
    size_t len;
    anvil_completion r;
    record_path(dir, path, sizeof path);
    if (access(path, F_OK) && errno == ENOENT)
        return anvil_fail("%s is missing: the command never said it finished", path);
    if (anvil_read_file_max(path, MAX_RECORD, &text, &len)) return -1;
    int rc = anvil_completion_parse(text, len, &r);
    free(text);
    if (rc) return fail_with_prefix(path);
    if (strcmp(r.attempt, attempt))
        return anvil_fail("%s is attempt '%s''s (pid %lld on %s), not this attempt's ('%s')", path, r.attempt, r.pid,
                          r.host, attempt);
    if (strcmp(r.command, command))
        return anvil_fail("%s is the record of '%s', not of this attempt's command '%s'", path, r.command, command);
    if (r.step < r.target_steps)
        return anvil_fail("%s: step %lld is short of the target %lld", path, r.step, r.target_steps);
    for (int i = 0; i < r.nfiles; i++)
        if (verify_file(dir, &r.files[i])) return -1;
    if (rec) *rec = r;
    return 0;
}

int anvil_completion_clear(const char *dir) {
    char path[PATH_MAX + 32];
    record_path(dir, path, sizeof path);
    if (unlink(path)) return errno == ENOENT ? 0 : anvil_fail("%s: cannot remove: %s", path, strerror(errno));
    return anvil_fsync_dir(dir);
}
