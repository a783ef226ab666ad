#include "obs/heartbeat.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "core/json.h"

static const char *const phases[] = {"health", "loading", "training", "evaluating", "checkpointing", "finishing"};

double anvil_heartbeat_allowance(double bytes) { return 60.0 + bytes / 100e6; }

int anvil_heartbeat_write(const char *run_dir, const char *phase, int64_t step, double expect_s) {
    char path[PATH_MAX], tmp[PATH_MAX + 32], text[192];
    if ((size_t)snprintf(path, sizeof path, "%s/heartbeat.json", run_dir) >= sizeof path)
        return anvil_fail("%s: path too long", run_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    int n = snprintf(text, sizeof text, "{\"pid\":%ld,\"step\":%lld,\"phase\":\"%s\",\"time\":%.3f,\"expect_s\":%.3f}\n",
                     (long)getpid(), (long long)step, phase, anvil_epoch_now(), expect_s);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return anvil_fail("%s: cannot create: %s", tmp, strerror(errno));
    int rc = anvil_write_all(fd, text, (size_t)n, tmp);
    if (close(fd) && !rc) rc = anvil_fail("%s: close: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path)) rc = anvil_fail("%s: cannot rename into place: %s", path, strerror(errno));
    if (rc) unlink(tmp);
    return rc;
}

int anvil_heartbeat_parse(const char *text, size_t len, const char *what, anvil_heartbeat *hb) {
    memset(hb, 0, sizeof *hb);
    const char *end;
    cJSON *o = anvil_json_parse(text, len, &end);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return anvil_fail("%s: not a JSON object", what);
    }
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(o, "pid"), *step = cJSON_GetObjectItemCaseSensitive(o, "step"),
                *phase = cJSON_GetObjectItemCaseSensitive(o, "phase"),
                *t = cJSON_GetObjectItemCaseSensitive(o, "time"), *expect = cJSON_GetObjectItemCaseSensitive(o, "expect_s");
    const char *bad = !cJSON_IsNumber(pid) || !(pid->valuedouble >= 1 && pid->valuedouble <= INT_MAX) ? "pid"
                      : !cJSON_IsNumber(step) || !(step->valuedouble >= 0 && step->valuedouble < 9e15) ? "step"
                      : !cJSON_IsNumber(t) || !(t->valuedouble >= 0 && t->valuedouble < 1e11) ? "time"
                      : expect && (!cJSON_IsNumber(expect) || !(expect->valuedouble >= 0 && expect->valuedouble < 1e9))
                          ? "expect_s"
                      : !cJSON_IsString(phase) ? "phase" : NULL;
    if (!bad) {
        bad = "phase";
        for (size_t i = 0; i < sizeof phases / sizeof *phases; i++)
            if (!strcmp(phase->valuestring, phases[i])) bad = NULL;
    }
    if (!bad) {
        hb->pid = (long)pid->valuedouble;
        hb->step = (int64_t)step->valuedouble;
        hb->time = t->valuedouble;
        hb->expect_s = expect ? expect->valuedouble : 0;
        snprintf(hb->phase, sizeof hb->phase, "%s", phase->valuestring);
    }
    cJSON_Delete(o);
    return bad ? anvil_fail("%s: field '%s' missing or out of range", what, bad) : 0;
}

int anvil_heartbeat_read(const char *run_dir, anvil_heartbeat *hb) {
    char path[PATH_MAX], *text;
    size_t len;
    if ((size_t)snprintf(path, sizeof path, "%s/heartbeat.json", run_dir) >= sizeof path)
        return anvil_fail("%s: path too long", run_dir);
    if (access(path, F_OK) && errno == ENOENT) return 1;
    if (anvil_read_file_max(path, 4096, &text, &len)) return -1;
    int rc = anvil_heartbeat_parse(text, len, path, hb);
    free(text);
    return rc;
}
