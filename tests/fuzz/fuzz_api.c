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
 * rules on its own terms: env only the allowlist's and the role's, a command its table parses, and
 * every argument the table calls a path relative without '..', or absolute inside role r's
 * prefixes (written ones inside its output prefix), never s3:// (r has no S3 prefix).
 * Built and run by tests/fuzz/CMakeLists.txt (ANVIL_FUZZ) and scripts/fuzz.sh. */
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
#include "opts/tables.h"

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

typedef struct {
    anvil_store *st;
    anvil_backend *backend;
    anvil_supervisor *sup;
    char admin[ANVIL_TOKEN_SIZE], alice[ANVIL_TOKEN_SIZE], revoked[ANVIL_TOKEN_SIZE];
} fixture;

static void setup(fixture *f) {
    static const char role[] = "{\"name\": \"r\", \"input_prefixes\": [\"/tmp\", \"/usr/share\"],"
                               " \"output_prefixes\": [\"/tmp/anvil-fuzz\"], \"max_procs\": 4, \"max_runtime_s\": 100,"
                               " \"env\": {\"ROLE\": \"r\"}}";
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
        !(f->backend = anvil_backend_local_new("/tmp/anvil-fuzz", "/bin/false")) ||
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

/* Whether path lies at or under prefix, at a component boundary. */
static bool inside(const char *path, const char *prefix) {
    size_t n = strlen(prefix);
    return !strncmp(path, prefix, n) && (path[n] == 0 || path[n] == '/');
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
        if (!anvil_job_env_allowed(spec.env[i].key) && strcmp(spec.env[i].key, "ROLE")) __builtin_trap();
    const anvil_optset *set = anvil_opts_job_command(spec.argv[0]);
    anvil_opt_arg *args;
    int n;
    if (!set || anvil_opts_collect(set, spec.argc, spec.argv, &args, &n)) __builtin_trap();
    for (int i = 0; i < n; i++) {
        const anvil_opt *o = args[i].id < 0 ? set->operand : &set->opts[args[i].id];
        const char *a = spec.argv[args[i].argi];
        if (o->kind < ANVIL_OPT_PATH_IN || anvil_opt_is_choice(o, a, NULL)) continue;
        bool out = o->kind == ANVIL_OPT_PATH_OUT || o->kind == ANVIL_OPT_URI_OUT;
        char real[4096];
        if (!strncmp(a, "s3://", 5) && o->kind >= ANVIL_OPT_URI_IN) __builtin_trap();
        if (a[0] != '/') {
            for (const char *p = a; *p; p += strcspn(p, "/"), p += *p == '/')
                if (!strncmp(p, "..", 2) && (p[2] == '/' || !p[2])) __builtin_trap();
            continue;
        }
        /* A pattern's folder is what was checked; the stored one is its resolved form. */
        snprintf(real, sizeof real, "%s", a);
        if (strpbrk(real, "*?[")) *strrchr(real, '/') = 0;
        char resolved[4096];
        if (anvil_path_resolve(real[0] ? real : "/", resolved, sizeof resolved)) __builtin_trap();
        if (!(inside(resolved, "/tmp/anvil-fuzz") || (!out && (inside(resolved, "/tmp") || inside(resolved, "/usr/share")))))
            __builtin_trap();
    }
    free(args);
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
