/* What every handler of the API answers and audits with (api_internal.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "job/api_internal.h"
#include "job/spec.h"

int api_reply_json(anvil_api_call *c, unsigned code, cJSON *j) {
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    size_t len = text ? strlen(text) : 0;
    char *withnl = text ? realloc(text, len + 2) : NULL;
    if (!withnl) {
        free(text);
        c->rs->status = 500;
        c->rs->body = NULL;
        c->rs->len = 0;
        return -1;
    }
    withnl[len] = '\n';
    withnl[len + 1] = 0;
    c->rs->status = code;
    c->rs->body = withnl;
    c->rs->len = len + 1;
    c->rs->content_type = NULL;
    return code < 400 ? 0 : -1;
}

int api_reply_error(anvil_api_call *c, unsigned code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    c->error[strcspn(c->error, "\r\n")] = 0;
    /* It may quote the request (its path, a value cut short): the answer must stay UTF-8. */
    anvil_utf8_sanitize(c->error);
    cJSON *j = cJSON_CreateObject();
    if (j && !cJSON_AddStringToObject(j, "error", c->error)) {
        cJSON_Delete(j);
        j = NULL;
    }
    api_reply_json(c, code, j);
    return -1;
}

anvil_audit_entry api_audit(anvil_api_call *c, int result, const char *detail) {
    c->audited = true;
    anvil_utf8_sanitize(c->target);
    return (anvil_audit_entry){.user = c->who.user,
                               .token_id = c->who.token_id,
                               .action = c->action,
                               .target = c->target,
                               .result = result,
                               .detail = detail};
}

bool api_need_admin(anvil_api_call *c) {
    if (c->who.admin) return true;
    api_reply_error(c, 403, "%s: only admins may do this (%s is not one)", c->action, c->who.user);
    return false;
}

const char *api_arg(const anvil_api_call *c, const char *key) {
    for (int i = 0; i < c->rq->nargs; i++)
        if (!strcmp(c->rq->args[i].key, key)) return c->rq->args[i].value;
    return NULL;
}

bool api_known_args(anvil_api_call *c, const char *const *names) {
    for (int i = 0; i < c->rq->nargs; i++) {
        const char *k = c->rq->args[i].key;
        bool known = false;
        for (const char *const *n = names; *n && !known; n++) known = !strcmp(k, *n);
        for (int j = 0; j < i && known; j++) known = strcmp(k, c->rq->args[j].key) != 0;
        if (!known) {
            api_reply_error(c, 400, "query parameter '%.60s': unknown, or given twice", k);
            return false;
        }
    }
    return true;
}

cJSON *api_body_object(anvil_api_call *c, const char *what, const char *const *names) {
    if (c->rq->body_too_big) {
        api_reply_error(c, 413, "%s: larger than %d bytes", what, ANVIL_JOB_SPEC_MAX_BYTES);
        return NULL;
    }
    cJSON *o = anvil_json_parse_object(c->rq->body ? c->rq->body : "", c->rq->body_len, what);
    if (!o) {
        api_reply_error(c, 400, "%s", anvil_errmsg());
        return NULL;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, o) {
        bool known = false;
        for (const char *const *n = names; *n && !known; n++) known = !strcmp(e->string, *n);
        for (const cJSON *f = o->child; f != e && known; f = f->next) known = strcmp(f->string, e->string) != 0;
        if (!known) {
            api_reply_error(c, 400, "%s: field '%.100s': unknown, or given twice", what, e->string);
            cJSON_Delete(o);
            return NULL;
        }
    }
    return o;
}

bool api_parse_count(const char *s, long max, long *out) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : -1;
    if (!s || !*s || *end || errno || v < 0 || v > max) return false;
    *out = v;
    return true;
}

int api_internal_error(anvil_api_call *c, const char *detail) {
    char what[sizeof c->error];
    snprintf(what, sizeof what, "%s", detail ? detail : anvil_errmsg());
    api_reply_error(c, 500, "internal error: the daemon's log says what failed");
    /* The detail may name the daemon's files: it goes to the log and the audit trail (admins
     * only), not into the answer. */
    api_report(c->env, "%s %.150s: %s", c->rq->method, c->rq->path, what);
    snprintf(c->error, sizeof c->error, "%s", what);
    anvil_utf8_sanitize(c->error);
    return -1;
}

void api_report(const anvil_api_env *env, const char *fmt, ...) {
    if (!env->report) return;
    char line[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    env->report(env->report_ctx, line);
}
