/* libFuzzer entry point for the job service's request handling (anvil_api_handle: authentication,
 * routing, the bodies of every endpoint, the role checks of a spec), without a socket. Each run
 * gets a fresh in-memory state: users admin and alice (role "r", granted), a revoked token, one
 * job of alice's. The input is
 *   METHOD PATH[?QUERY]\n   where @A, @U, @R in PATH stand for the admin's, alice's and the
 *                           revoked token's IDs
 *   WHO\n                   A: the admin's token, U: alice's, R: the revoked one, -: no header,
 *                           anything else: the Authorization header as is
 *   BODY
 * Whatever it is, the answer must be a known status with a body (one line of JSON, an object with
 * a one-line "error" for a 4xx); anything but the two valid tokens gets 401, but for the dashboard
 * page (GET /), which is answered to anyone; a 4xx changes no
 * state; and the audit trail grows by exactly one entry for each refusal or change. A body that is
 * not strict JSON by this file's own reading (bytes that are not UTF-8, a \u0000 escape, a key
 * spelled twice in one object) is never accepted; and a job that is stored passes the service's
 * rules as this file reads them, asking nothing of the code under test (not its env allowlist, not
 * its option tables, not its path resolution): env only the variables README lists and the role's;
 * the command walked with this file's own list of each command's flags and path options, every
 * path (local or s3://, read or written, a pattern's folder and what it matches) inside role r's
 * prefixes by realpath(3) and a prefix compare (written ones inside its output prefixes), a
 * relative one only without an output and never climbing; no control character in any argument or
 * where a path leads; no --metrics-port below 1024.
 * Built and run by tests/fuzz/CMakeLists.txt (ANVIL_FUZZ) and scripts/fuzz.sh. */
#include <glob.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/json.h"
#include "job/api.h"
#include "job/auth.h"
#include "job/backend.h"
#include "job/policy.h"
#include "job/spec.h"
#include "job/store_internal.h"

#define MAX_ARGS 64

/* The state's digest: every table but the audit trail, and the audit trail's length apart. */
static char *digest(anvil_store *st, long *audit_rows) {
    sqlite3_stmt *s = NULL;
    const char *sql = "SELECT (SELECT group_concat(id || status || secondary || stop, ';') FROM jobs) || '|' ||"
                      " (SELECT COUNT(*) FROM history) || '|' || (SELECT group_concat(name || admin, ';') FROM users)"
                      " || '|' || (SELECT group_concat(id || user || revoked_at, ';') FROM tokens) || '|' ||"
                      " (SELECT group_concat(name || policy, ';') FROM roles) || '|' ||"
                      " (SELECT group_concat(role || user, ';') FROM grants) || '|' ||"
                      " COALESCE((SELECT group_concat(kind || name || running_jobs || hosts || procs || max_runtime_s,"
                      " ';') FROM quotas), ''), (SELECT COUNT(*) FROM audit)";
    if (sqlite3_prepare_v2(st->db, sql, -1, &s, NULL) != SQLITE_OK || sqlite3_step(s) != SQLITE_ROW) __builtin_trap();
    char *d = strdup((const char *)sqlite3_column_text(s, 0));
    *audit_rows = sqlite3_column_int64(s, 1);
    sqlite3_finalize(s);
    if (!d) __builtin_trap();
    return d;
}

/* Role r's prefixes, the fixture's: what a stored job's paths must lie under. */
static const char *const in_prefixes[] = {"/tmp", "/usr/share", "s3://fuzz-bucket/in"};
static const char *const out_prefixes[] = {"/tmp/anvil-fuzz", "s3://fuzz-bucket/out"};
#define ROLE_JSON                                                                                                \
    "{\"name\": \"r\", \"input_prefixes\": [\"/tmp\", \"/usr/share\", \"s3://fuzz-bucket/in\"],"                \
    " \"output_prefixes\": [\"/tmp/anvil-fuzz\", \"s3://fuzz-bucket/out/\"], \"max_procs\": 4,"                 \
    " \"max_runtime_s\": 100, \"env\": {\"ROLE\": \"r\"}}"

typedef struct {
    anvil_store *st;
    anvil_backend *backend;
    anvil_supervisor *sup;
    char admin[ANVIL_TOKEN_SIZE], alice[ANVIL_TOKEN_SIZE], revoked[ANVIL_TOKEN_SIZE];
} fixture;

static void setup(fixture *f) {
    static const char role[] = ROLE_JSON;
    static const char spec[] = "{\"name\":\"j\",\"command\":[\"train\"],\"role\":\"r\"}";
    anvil_audit_entry e = {.user = "admin", .action = "setup", .result = 201};
    anvil_role r;
    int64_t id;
    anvil_job_new job = {.name = "j", .spec = spec, .owner = "alice", .role = "r"};
    if (!(f->st = anvil_store_open(":memory:")) || anvil_auth_init(f->st, "admin", f->admin) ||
        anvil_auth_add_user(f->st, "alice", false, &e, f->alice) ||
        anvil_auth_add_token(f->st, "alice", &e, f->revoked) || anvil_role_parse(role, strlen(role), &r) ||
        anvil_auth_add_role(f->st, &r, &e) || anvil_auth_grant(f->st, "r", "alice", &e) ||
        anvil_store_submit(f->st, &job, "/tmp/anvil-fuzz/runs", &e, &id) ||
        !(f->backend = anvil_backend_local_new("/tmp/anvil-fuzz", "/bin/false", NULL)) ||
        !(f->sup = anvil_supervisor_new(f->st, &f->backend, 1, &(anvil_supervisor_options){.grace_s = 1})))
        __builtin_trap();
    anvil_role_free(&r);
    char rid[ANVIL_TOKEN_ID_LEN + 1], *user = NULL;
    memcpy(rid, f->revoked + 4, ANVIL_TOKEN_ID_LEN);
    rid[ANVIL_TOKEN_ID_LEN] = 0;
    if (anvil_auth_revoke(f->st, rid, &e, &user)) __builtin_trap();
    free(user);
}

/* path with @A, @U, @R replaced by the tokens' IDs, malloc'd. */
static char *expand(const fixture *f, const char *path) {
    char *out = malloc(strlen(path) * ANVIL_TOKEN_ID_LEN + 1), *o = out;
    if (!out) __builtin_trap();
    for (const char *p = path; *p; p++) {
        const char *tok = p[0] == '@' ? p[1] == 'A' ? f->admin : p[1] == 'U' ? f->alice : p[1] == 'R' ? f->revoked : NULL
                                      : NULL;
        if (tok) {
            memcpy(o, tok + 4, ANVIL_TOKEN_ID_LEN);
            o += ANVIL_TOKEN_ID_LEN;
            p++;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
    return out;
}

/* Whether the n bytes at p are UTF-8 (RFC 3629), read here without core/json's code. */
static bool utf8(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = p[i], len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n || (len == 2 && c < 0xc2)) return false;
        unsigned cp = len == 1 ? c : c & (0x7f >> len);
        for (unsigned k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (p[i + k] & 0x3f);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
            return false;
        i += len;
    }
    return true;
}

/* Whether the body has, inside a string, a \u0000 escape, or, in one object, a key spelled the same
 * twice: a scan of strings, braces and brackets that needs no valid JSON (what it finds in text that
 * is not JSON does not matter: such a body is refused anyway). */
static bool odd_json(const char *b, size_t n) {
    enum { MAXD = 64, MAXK = 64 };
    struct {
        bool object;
        int nkeys;
        const char *key[MAXK];
        size_t len[MAXK];
    } *st = calloc(MAXD, sizeof *st);
    if (!st) __builtin_trap();
    int depth = -1;
    bool odd = false, expect_key = false;
    for (size_t i = 0; i < n && !odd; i++) {
        char c = b[i];
        if ((c == '{' || c == '[') && depth + 1 < MAXD) {
            depth++;
            st[depth].object = c == '{';
            st[depth].nkeys = 0;
            expect_key = c == '{';
        } else if ((c == '}' || c == ']') && depth >= 0) {
            depth--;
            expect_key = false;
        } else if (c == ',') {
            expect_key = depth >= 0 && st[depth].object;
        } else if (c == '"') {
            size_t j = i + 1;
            for (; j < n && b[j] != '"'; j++) {
                if (b[j] != '\\') continue;
                if (j + 5 < n && b[j + 1] == 'u' && !memcmp(b + j + 2, "0000", 4)) odd = true;
                j++;
            }
            if (expect_key && depth >= 0) {
                for (int k = 0; k < st[depth].nkeys && !odd; k++)
                    odd = st[depth].len[k] == j - i - 1 && !memcmp(st[depth].key[k], b + i + 1, j - i - 1);
                if (st[depth].nkeys < MAXK) {
                    st[depth].key[st[depth].nkeys] = b + i + 1;
                    st[depth].len[st[depth].nkeys++] = j - i - 1;
                }
            }
            expect_key = false;
            i = j;
        }
    }
    free(st);
    return odd;
}

/* What README's "The job service" lets a spec's env hold, and the role's own variable: written out
 * here, not asked of the code under test. */
static const char *const allowed_env[] = {"OMP_NUM_THREADS",        "OMP_PROC_BIND",          "OMP_PLACES",
                                          "ANVIL_ISA",              "ANVIL_BF16",             "ANVIL_S3_MAX_ATTEMPTS",
                                          "ANVIL_S3_RETRY_BASE_MS", "ANVIL_S3_RETRY_CAP_MS",  "ANVIL_S3_PART_SIZE",
                                          "ANVIL_HEALTH_FAULT",     "ANVIL_TEST_NO_COMPLETION", "ROLE"};

static bool listed(const char *s, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s, list[i])) return true;
    return false;
}

/* Whether path lies at or under prefix (trailing '/' ignored), at a component boundary. */
static bool inside(const char *path, const char *prefix) {
    size_t n = strlen(prefix);
    while (n > 1 && prefix[n - 1] == '/') n--;
    if (n == 1 && prefix[0] == '/') return path[0] == '/';
    return !strncmp(path, prefix, n) && (path[n] == 0 || path[n] == '/');
}

static bool has_control(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return true;
    return false;
}

/* This file's own resolution of an absolute path: realpath(3) of the longest part that exists, the
 * rest taken lexically ('.' dropped, '..' one up). false when the path is too long. */
static bool resolve(const char *path, char *out, size_t cap) {
    char head[4096];
    if (snprintf(head, sizeof head, "%s", path) >= (int)sizeof head) return false;
    size_t end = strlen(head);
    char real[4096];
    for (;;) {
        char keep = head[end];
        head[end] = 0;
        bool ok = realpath(end ? head : "/", real) != NULL;
        head[end] = keep;
        if (ok) break;
        while (end > 0 && head[end - 1] != '/') end--;
        while (end > 0 && head[end - 1] == '/') end--;
    }
    if (snprintf(out, cap, "%s", real) >= (int)cap) return false;
    for (const char *p = head + end; *p;) {
        while (*p == '/') p++;
        size_t c = strcspn(p, "/");
        if (!c) break;
        size_t len = strlen(out);
        if (c == 2 && !strncmp(p, "..", 2)) {
            char *slash = strrchr(out, '/');
            slash[slash == out] = 0;
        } else if (!(c == 1 && p[0] == '.')) {
            if (len + c + 2 > cap) return false;
            snprintf(out + len, cap - len, "%s%.*s", len == 1 ? "" : "/", (int)c, p);
        }
        p += c;
    }
    return true;
}

/* A local path the job reads (or writes) lies under role r's prefixes. */
static bool local_ok(const char *path, bool written) {
    char real[4096];
    if (!resolve(path, real, sizeof real) || has_control(real)) return false;
    for (size_t i = 0; i < sizeof out_prefixes / sizeof *out_prefixes; i++)
        if (inside(real, out_prefixes[i])) return true;
    for (size_t i = 0; !written && i < sizeof in_prefixes / sizeof *in_prefixes; i++)
        if (inside(real, in_prefixes[i])) return true;
    return false;
}

/* An s3:// argument lies under role r's S3 prefixes, its key free of '.' and '..' components and of
 * empty ones but a trailing slash. */
static bool s3_ok(const char *uri, bool written) {
    const char *key = strchr(uri + 5, '/');
    for (const char *p = key ? key + 1 : NULL; p;) {
        size_t c = strcspn(p, "/");
        if ((c == 0 && p[c]) || (c == 1 && p[0] == '.') || (c == 2 && !strncmp(p, "..", 2))) return false;
        p = p[c] ? p + c + 1 : NULL;
    }
    bool ok = false;
    for (size_t i = 0; i < sizeof out_prefixes / sizeof *out_prefixes; i++) ok |= inside(uri, out_prefixes[i]);
    for (size_t i = 0; !written && i < sizeof in_prefixes / sizeof *in_prefixes; i++) ok |= inside(uri, in_prefixes[i]);
    return ok;
}

/* One argument that names a file, a folder, an object (uri: it may be s3://) or a pattern of files:
 * within role r. A relative one is kept only when the job has no output (its run folder is new, and the daemon's),
 * and may not climb out of it. */
static bool arg_ok(const char *a, bool written, bool pattern, bool uri, bool has_output) {
    const char *last = strrchr(a, '/'), *wild = pattern ? strpbrk(a, "*?[") : NULL;
    if (wild && last && wild < last) return false;
    if (uri && !strncmp(a, "s3://", 5)) {
        const char *key = strchr(a + 5, '/');
        if (wild && (!key || wild < key)) return false;
        char lit[4096];
        snprintf(lit, sizeof lit, "%.*s", wild ? (int)(last - a) : (int)strlen(a), a);
        return s3_ok(lit, written);
    }
    if (a[0] != '/') {
        if (has_output) return false;
        for (const char *p = a; *p; p += strcspn(p, "/"), p += *p == '/')
            if (!strncmp(p, "..", 2) && (p[2] == '/' || !p[2])) return false;
        return true;
    }
    if (!wild) return local_ok(a, written);
    char folder[4096];
    snprintf(folder, sizeof folder, "%.*s", last == a ? 1 : (int)(last - a), a);
    if (!local_ok(folder, false)) return false;
    glob_t g;
    bool ok = true;
    if (glob(a, GLOB_NOSORT, NULL, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc && ok; i++) ok = local_ok(g.gl_pathv[i], false);
    globfree(&g);
    return ok;
}

/* The command's options as README and each command's --help name them, written out here: which
 * take no value, which name what the command reads or writes (and which of those are patterns),
 * and the values that are keywords rather than paths. A flag added to a command must be added here:
 * read as an option with a value, it would fail loudly at the end of a command. */
typedef struct {
    const char *command;
    const char *const *flags, *const *read, *const *written, *const *patterns, *const *uris, *const *keywords;
    bool operands; /* its operands are files or objects it reads */
} command_rules;

static const char *const train_flags[] = {"--synthetic", "--shuffle", "--ckpt-sync", "--sequence-parallel",
                                          "--summary-json", "--no-progress", "--no-health", NULL};
static const char *const train_read[] = {"--data", "--train", "--val", "--init", "--resume", NULL};
static const char *const train_written[] = {"--profile", "--ckpt-uri", "--out", NULL};
static const char *const train_patterns[] = {"--train", "--val", NULL};
static const char *const train_uris[] = {"--data", "--train", "--val", "--ckpt-uri", "--out", NULL};
static const char *const train_keywords[] = {"auto", NULL};
static const char *const prep_flags[] = {"--strict", "--no-progress", NULL};
static const char *const prep_read[] = {"--tokenizer", NULL};
static const char *const out_only[] = {"--out", NULL};
static const char *const dash[] = {"-", NULL};
static const char *const export_flags[] = {"--no-progress", NULL};
static const char *const export_read[] = {"--model", NULL};
static const char *const export_uris[] = {"--model", "--out", NULL};
static const char *const none[] = {NULL};
static const command_rules rules[] = {
    {"train", train_flags, train_read, train_written, train_patterns, train_uris, train_keywords, false},
    {"prep", prep_flags, prep_read, out_only, none, out_only, dash, true},
    {"export", export_flags, export_read, out_only, none, export_uris, none, false},
};

static bool in_list(const char *s, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(s, *list)) return true;
    return false;
}

/* Whether value is --metrics-port's, and a port below 1024 other than 0. */
static bool privileged_port(const char *option, const char *value) {
    char *end;
    long port = strtol(value, &end, 10);
    return !strcmp(option, "--metrics-port") && !*end && port > 0 && port < 1024;
}

/* The stored command, walked by the rules above: every path within role r, no control character
 * anywhere, no privileged metrics port. */
static void check_command(int argc, char *const *argv, bool has_output) {
    const command_rules *r = NULL;
    for (size_t i = 0; i < sizeof rules / sizeof *rules; i++)
        if (!strcmp(argv[0], rules[i].command)) r = &rules[i];
    if (!r) __builtin_trap();
    bool operands_only = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (has_control(a)) __builtin_trap();
        if (!operands_only && !strcmp(a, "--")) {
            operands_only = true;
        } else if (!operands_only && a[0] == '-' && a[1]) {
            if (in_list(a, r->flags)) continue;
            if (i + 1 >= argc) __builtin_trap();
            const char *v = argv[++i];
            if (has_control(v) || privileged_port(a, v)) __builtin_trap();
            bool read = in_list(a, r->read), written = in_list(a, r->written);
            if ((read || written) && !in_list(v, r->keywords) &&
                !arg_ok(v, written, in_list(a, r->patterns), in_list(a, r->uris), has_output))
                __builtin_trap();
        } else if (!r->operands || (!in_list(a, r->keywords) && !arg_ok(a, false, false, true, has_output))) {
            __builtin_trap();
        }
    }
}

/* The newest stored job, checked against the service's rules by this file's own reading. */
static void check_stored(anvil_store *st) {
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(st->db, "SELECT spec FROM jobs ORDER BY id DESC LIMIT 1", -1, &s, NULL) != SQLITE_OK ||
        sqlite3_step(s) != SQLITE_ROW)
        __builtin_trap();
    const char *text = (const char *)sqlite3_column_text(s, 0);
    anvil_job_spec spec;
    if (anvil_job_spec_parse(text, strlen(text), &spec)) __builtin_trap();
    sqlite3_finalize(s);
    for (int i = 0; i < spec.nenv; i++)
        if (!listed(spec.env[i].key, allowed_env, sizeof allowed_env / sizeof *allowed_env)) __builtin_trap();
    if (spec.output && !local_ok(spec.output, true)) __builtin_trap();
    for (int i = 0; i < spec.nchannels; i++)
        if (!local_ok(spec.channels[i].value, false)) __builtin_trap();
    check_command(spec.argc, spec.argv, spec.output != NULL);
    anvil_job_spec_free(&spec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char *line1 = text, *nl1 = memchr(text, '\n', size);
    char *line2 = nl1 ? nl1 + 1 : NULL, *nl2 = line2 ? memchr(line2, '\n', size - (size_t)(line2 - text)) : NULL;
    char *sp = strchr(line1, ' ');
    if (!nl1 || !nl2 || !sp || sp > nl1 || memchr(text, 0, (size_t)(nl2 - text))) {
        free(text);
        return 0;
    }
    *nl1 = *nl2 = *sp = 0;
    fixture f;
    setup(&f);
    char *path = expand(&f, sp + 1), *query = strchr(path, '?');
    anvil_api_arg args[MAX_ARGS];
    int nargs = 0;
    if (query) {
        *query++ = 0;
        for (char *kv = strtok(query, "&"); kv && nargs < MAX_ARGS; kv = strtok(NULL, "&")) {
            char *eq = strchr(kv, '=');
            if (eq) *eq = 0;
            args[nargs++] = (anvil_api_arg){kv, eq ? eq + 1 : NULL};
        }
    }
    char header[ANVIL_TOKEN_SIZE + 8];
    const char *auth = line2;
    bool valid = false;
    if (!strcmp(line2, "-")) {
        auth = NULL;
    } else if (strlen(line2) == 1 && strchr("AUR", line2[0])) {
        valid = line2[0] != 'R';
        snprintf(header, sizeof header, "Bearer %s", line2[0] == 'A' ? f.admin : line2[0] == 'U' ? f.alice : f.revoked);
        auth = header;
    }
    const char *body = nl2 + 1;
    size_t body_len = size - (size_t)(body - text);
    anvil_api_request rq = {.method = line1, .path = path, .args = args, .nargs = nargs, .authorization = auth,
                            .body = body, .body_len = body_len, .body_too_big = body_len > ANVIL_JOB_SPEC_MAX_BYTES};
    anvil_api_env env = {.st = f.st, .sup = f.sup, .runs_dir = "/tmp/anvil-fuzz/runs"};
    long audit_before, audit_after;
    char *before = digest(f.st, &audit_before);
    anvil_api_response rs;
    anvil_api_handle(&env, &rq, &rs);
    char *after = digest(f.st, &audit_after);
    static const unsigned known[] = {200, 201, 202, 400, 401, 403, 404, 405, 409, 413, 429};
    bool known_status = false;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++) known_status |= rs.status == known[i];
    if (!known_status || !rs.body) __builtin_trap();
    /* The dashboard page is the one answer without a token, whatever the query: it holds no data. */
    bool page = !strcmp(line1, "GET") && !strcmp(path, "/");
    if (!valid && rs.status != 401 && !page) __builtin_trap();
    if (page && (rs.status != 200 || strcmp(rs.content_type, "text/html; charset=utf-8"))) __builtin_trap();
    if (rs.status >= 400 && strcmp(before, after)) __builtin_trap();
    bool submitted = !strcmp(line1, "POST") && !strcmp(path, "/v1/jobs") && rs.status == 201;
    if (submitted && (!utf8((const unsigned char *)body, body_len) || odd_json(body, body_len))) __builtin_trap();
    if (submitted) check_stored(f.st);
    bool mutating = strcmp(line1, "GET") != 0;
    if (audit_after - audit_before != (rs.status >= 400 || (mutating && rs.status < 300) ? 1 : 0)) __builtin_trap();
    if (!rs.content_type) {
        if (rs.len < 2 || rs.body[rs.len - 1] != '\n' || memchr(rs.body, '\n', rs.len - 1)) __builtin_trap();
        cJSON *j = anvil_json_parse(rs.body, rs.len, NULL);
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
        if (!cJSON_IsObject(j) || (rs.status >= 400) != cJSON_IsString(err)) __builtin_trap();
        cJSON_Delete(j);
    }
    free(rs.body);
    free(before);
    free(after);
    free(path);
    free(text);
    anvil_supervisor_free(f.sup);
    f.backend->ops->free(f.backend);
    anvil_store_close(f.st);
    return 0;
}
