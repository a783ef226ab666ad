/* GET /v1/jobs/ID/goodput (job/goodput.h) and POST /v1/jobs/ID/faults (anvil chaos, job/chaos.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "job/api_internal.h"
#include "job/chaos.h"
#include "job/goodput.h"
#include "job/spec.h"

cJSON *api_goodput_json(const anvil_api_env *env, const anvil_job *j, bool timeline) {
    anvil_goodput g;
    if (anvil_goodput_of(env->st, env->goodput, j, anvil_store_now(), &g)) return NULL;
    cJSON *o = anvil_goodput_json(&g, timeline);
    anvil_goodput_free(&g);
    return o;
}

int api_job_goodput(anvil_api_call *c, const anvil_job *j) {
    cJSON *o = api_goodput_json(c->env, j, true);
    return o ? api_reply_json(c, 200, o) : api_internal_error(c, NULL);
}

/* The fault's kind, target, and for one the chaos client carried out itself, when and what it did,
 * from the body; false after answering 400. */
typedef struct {
    int kind, target;
    double at;
    char detail[400];
} fault_request;

static bool read_request(anvil_api_call *c, const anvil_job *j, const anvil_job_spec *spec, fault_request *f) {
    static const char *const fields[] = {"kind", "target", "at", "detail", NULL};
    cJSON *o = api_body_object(c, "fault", fields);
    if (!o) return false;
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind"), *target = cJSON_GetObjectItemCaseSensitive(o, "target"),
                *at = cJSON_GetObjectItemCaseSensitive(o, "at"), *detail = cJSON_GetObjectItemCaseSensitive(o, "detail");
    bool ok = false;
    f->kind = cJSON_IsString(kind) ? anvil_fault_kind_parse(kind->valuestring) : -1;
    bool on_host = f->kind >= 0 && anvil_fault_kind_on_host(f->kind);
    int limit = on_host ? spec->hosts : spec->hosts * spec->procs_per_host;
    if (f->kind < 0) {
        api_reply_error(c, 400, "fault: kind: one of %s", anvil_fault_kind_list());
    } else if (anvil_fault_kind_targeted(f->kind) != (target != NULL)) {
        api_reply_error(c, 400, "fault: target: %s for %s", target ? "not taken" : "required", kind->valuestring);
    } else if (target && (!cJSON_IsNumber(target) || target->valuedouble != floor(target->valuedouble) ||
                          target->valuedouble < 0 || target->valuedouble >= limit)) {
        api_reply_error(c, 400, "fault: target: a %s index in [0, %d)", on_host ? "host" : "rank", limit);
    } else if (anvil_fault_kind_in_daemon(f->kind) ? at || detail : !at || !detail) {
        api_reply_error(c, 400, "fault: at and detail: %s for %s", anvil_fault_kind_in_daemon(f->kind) ? "not taken" :
                        "required (the chaos client carried it out)", kind->valuestring);
    } else if (at && (!cJSON_IsNumber(at) || !(at->valuedouble >= j->submitted_at) ||
                      at->valuedouble > anvil_store_now() + 1)) {
        api_reply_error(c, 400, "fault: at: a Unix time between the job's submission and now");
    } else if (detail && (!cJSON_IsString(detail) || strlen(detail->valuestring) >= sizeof f->detail)) {
        api_reply_error(c, 400, "fault: detail: a string of less than %zu bytes", sizeof f->detail);
    } else {
        f->target = target ? (int)target->valuedouble : -1;
        f->at = at ? at->valuedouble : 0;
        snprintf(f->detail, sizeof f->detail, "%s", detail ? detail->valuestring : "");
        ok = true;
    }
    cJSON_Delete(o);
    return ok;
}

/* The attempt of job j that was running at time at (a fault the chaos client carried out is recorded
 * after it, by which time a retry may run): the last one started by then; j's current one if none. */
static int attempt_at(const anvil_api_env *env, const anvil_job *j, double at) {
    anvil_job_attempt *a;
    int n, found = j->attempt;
    if (anvil_store_attempts(env->st, j->id, &a, &n)) return found;
    for (int i = 0; i < n; i++)
        if (a[i].started_at <= at) found = a[i].attempt;
    anvil_job_attempts_free(a, n);
    return found;
}

int api_job_fault(anvil_api_call *c, const anvil_job *j) {
    if (!api_need_admin(c)) return -1;
    anvil_job_spec spec;
    if (anvil_job_spec_parse(j->spec, strlen(j->spec), &spec)) return api_internal_error(c, NULL);
    fault_request f;
    bool ok = read_request(c, j, &spec, &f);
    int per_host = spec.procs_per_host;
    anvil_job_spec_free(&spec);
    if (!ok) return -1;
    char target[64] = "";
    if (f.target >= 0) snprintf(target, sizeof target, "%s %d", anvil_fault_kind_on_host(f.kind) ? "host" : "rank", f.target);
    if (anvil_fault_kind_in_daemon(f.kind)) {
        anvil_backend *b = j->handle[0] ? anvil_supervisor_backend_named(c->env->sup, j->backend) : NULL;
        if (!b || !b->ops->inject || j->status != ANVIL_JOB_RUNNING)
            return api_reply_error(c, 409, "job %lld has no running attempt to inject a fault into (%s)",
                                   (long long)j->id, anvil_job_status_name(j->status));
        anvil_attempt_ref a = {.job_id = j->id, .attempt = j->attempt, .handle = j->handle};
        int rc = b->ops->inject(b, &a, f.kind, f.target, per_host, f.detail, sizeof f.detail);
        /* When the backend has struck, not when it was asked: on Slurm a step must reach the node first
         * (srun, most of a second), which is not the detection's. */
        f.at = anvil_store_now();
        if (rc < 0) return api_internal_error(c, NULL);
        if (rc) return api_reply_error(c, rc == 2 ? 422 : 409, "job %lld: %s", (long long)j->id, f.detail);
    }
    int attempt = anvil_fault_kind_in_daemon(f.kind) ? j->attempt : attempt_at(c->env, j, f.at);
    anvil_job_fault rec = {.at = f.at, .attempt = attempt, .kind = (char *)anvil_fault_kind_name(f.kind),
                           .target = target, .detail = f.detail};
    if (anvil_store_fault_add(c->env->st, j->id, &rec)) return api_internal_error(c, NULL);
    cJSON *o = cJSON_CreateObject();
    if (o && (!cJSON_AddNumberToObject(o, "at", rec.at) || !cJSON_AddNumberToObject(o, "attempt", rec.attempt) ||
              !cJSON_AddStringToObject(o, "kind", rec.kind) || !cJSON_AddStringToObject(o, "target", target) ||
              !cJSON_AddStringToObject(o, "detail", rec.detail))) {
        cJSON_Delete(o);
        o = NULL;
    }
    return o ? api_reply_json(c, 201, o) : api_internal_error(c, NULL);
}
