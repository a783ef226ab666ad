#include "train/ckpt_remote.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "core/json.h"
#include "s3/s3.h"

/* The index of a checkpoint is at most this big: a few dozen objects of a hundred bytes each. */
#define MAX_INDEX_BYTES (1u << 20)

typedef struct job {
    int64_t step;
    char dir[PATH_MAX]; /* the staging folder, removed once uploaded */
    int commit;         /* rank 0: put the index once the markers of hosts[] are there */
    int *hosts, nhosts;
    struct job *next;
} job;

struct anvil_ckpt_remote {
    anvil_s3 *s3;
    char *bucket, *prefix; /* prefix without a trailing '/' ("" for the bucket's root) */
    char *run_dir, *host;
    int nprefixes, keep_last, rank;
    int64_t keep_every;
    char run_id[17];
    FILE *log;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail;
    int closing, failed;
};

static int split_uri(const char *uri, char **bucket, char **prefix) {
    if (anvil_s3_parse_uri(uri, bucket, prefix)) return -1;
    size_t n = strlen(*prefix);
    while (n && (*prefix)[n - 1] == '/') (*prefix)[--n] = 0;
    return 0;
}

/* A path or key into out; -1 after anvil_fail when it does not fit. */
static int fmt(char *out, size_t cap, const char *f, ...) ANVIL_PRINTF(3, 4);
static int fmt(char *out, size_t cap, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(out, cap, f, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= cap ? anvil_fail("checkpoint upload: a path or key longer than %zu bytes", cap) : 0;
}

/* "<prefix>/<rest>", or rest alone at the bucket's root. */
static int key_join(char *out, size_t cap, const char *prefix, const char *rest) {
    return fmt(out, cap, "%s%s%s", prefix, prefix[0] ? "/" : "", rest);
}

/* The key of step's index, the checkpoint's commit point. */
static int index_key(char *out, size_t cap, const char *prefix, int64_t step) {
    char rest[64];
    snprintf(rest, sizeof rest, "step_%08" PRId64 "/manifest.json", step);
    return key_join(out, cap, prefix, rest);
}

/* The key of the marker of step's uploader rank. */
static int marker_key(char *out, size_t cap, const char *prefix, int64_t step, int rank) {
    char rest[64];
    snprintf(rest, sizeof rest, "step_%08" PRId64 "/hosts/rank_%05d.json", step, rank);
    return key_join(out, cap, prefix, rest);
}

/* The staging folder of step's files on the host whose uploader is rank uploader. */
static int stage_dir(char *out, size_t cap, const char *run_dir, int64_t step, int uploader) {
    return fmt(out, cap, "%s/ckpt/upload-step_%08" PRId64 "-host_%d", run_dir, step, uploader);
}

/* The step of an index key "<prefix>/step_<digits>/manifest.json", or -1. */
static int64_t index_step(const char *prefix, const char *key) {
    size_t n = strlen(prefix);
    if (n && (strncmp(key, prefix, n) || key[n] != '/')) return -1;
    const char *p = key + n + (n ? 1 : 0);
    if (strncmp(p, "step_", 5)) return -1;
    p += 5;
    const char *d = p;
    while (*p >= '0' && *p <= '9') p++;
    if (p == d || p - d > 15 || strcmp(p, "/manifest.json")) return -1;
    return strtoll(d, NULL, 10);
}

typedef struct {
    int64_t *steps;
    size_t n;
} step_list;

static int is_index(void *prefix, const char *key) { return index_step(prefix, key) >= 0; }

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* The steps whose index exists on S3, newest first. */
static int list_steps(anvil_s3 *s3, const char *bucket, const char *prefix, step_list *l) {
    char lp[PATH_MAX];
    anvil_s3_list_page pg;
    if (key_join(lp, sizeof lp, prefix, "step_") ||
        anvil_s3_list_collect(s3, bucket, lp, is_index, (void *)prefix, &pg))
        return -1;
    if (pg.n && !(l->steps = malloc(pg.n * sizeof *l->steps))) {
        anvil_s3_list_page_free(&pg);
        return anvil_fail("checkpoint upload: out of memory");
    }
    for (l->n = 0; l->n < pg.n; l->n++) l->steps[l->n] = index_step(prefix, pg.objects[l->n].key);
    anvil_s3_list_page_free(&pg);
    if (l->n) qsort(l->steps, l->n, sizeof *l->steps, cmp_desc);
    return 0;
}

/* An index or a marker: a JSON object with an "objects" array; NULL after anvil_fail, with
 * *missing set (when missing is not NULL) if the key does not exist. */
static cJSON *get_json(anvil_s3 *s3, const char *bucket, const char *key, int *missing) {
    uint64_t size;
    int h = anvil_s3_head(s3, bucket, key, &size);
    if (missing) *missing = h > 0;
    if (h) {
        if (h > 0) anvil_fail("s3://%s/%s: no such checkpoint index", bucket, key);
        return NULL;
    }
    if (size > MAX_INDEX_BYTES) {
        anvil_fail("s3://%s/%s: %" PRIu64 " bytes, more than a checkpoint index holds", bucket, key, size);
        return NULL;
    }
    char *text = malloc((size_t)size + 1);
    size_t got = 0;
    if (!text || anvil_s3_get_range(s3, bucket, key, 0, (size_t)size, text, &got)) {
        if (!text) anvil_fail("checkpoint download: out of memory");
        free(text);
        return NULL;
    }
    text[got] = 0;
    cJSON *j = anvil_json_parse(text, got, NULL);
    free(text);
    if (!j || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "objects"))) {
        cJSON_Delete(j);
        anvil_fail("s3://%s/%s: not a checkpoint index (no \"objects\" array)", bucket, key);
        return NULL;
    }
    return j;
}

/* One entry of an index: its file name, key and CRC-32C; -1 after anvil_fail when malformed. */
static int index_entry(const cJSON *o, const char *where, const char **name, const char **key, uint32_t *crc) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "name"), *k = cJSON_GetObjectItemCaseSensitive(o, "key"),
                *c = cJSON_GetObjectItemCaseSensitive(o, "crc32c");
    if (!cJSON_IsString(n) || !cJSON_IsString(k) || !cJSON_IsString(c) || strchr(n->valuestring, '/') ||
        !n->valuestring[0] || n->valuestring[0] == '.' || strlen(c->valuestring) != 8 ||
        strspn(c->valuestring, "0123456789abcdef") != 8)
        return anvil_fail("%s: an object without a plain name, key or 8-hex-digit crc32c", where);
    *name = n->valuestring;
    *key = k->valuestring;
    *crc = (uint32_t)strtoul(c->valuestring, NULL, 16);
    return 0;
}

/* ---- uploading ---- */

/* The object key of a checkpoint file: under one of nprefixes two-hex-digit prefixes, by a hash of
 * its name, so that a checkpoint's shards spread over prefixes S3 scales apart. */
static int object_key(const anvil_ckpt_remote *r, int64_t step, const char *name, char *out, size_t cap) {
    uint32_t h = anvil_crc32c(0, name, strlen(name)) % (uint32_t)r->nprefixes;
    char rest[PATH_MAX];
    return fmt(rest, sizeof rest, "%02" PRIx32 "/step_%08" PRId64 "/%s", h, step, name) ||
           key_join(out, cap, r->prefix, rest);
}

static int keep_all(void *ctx, const char *key) {
    (void)ctx;
    (void)key;
    return 1;
}

/* Deletes the markers of step's hosts. */
static int delete_markers(anvil_ckpt_remote *r, int64_t step) {
    char lp[PATH_MAX], rest[64];
    anvil_s3_list_page pg;
    snprintf(rest, sizeof rest, "step_%08" PRId64 "/hosts/", step);
    if (key_join(lp, sizeof lp, r->prefix, rest) || anvil_s3_list_collect(r->s3, r->bucket, lp, keep_all, NULL, &pg))
        return -1;
    int rc = 0;
    for (size_t i = 0; !rc && i < pg.n; i++) rc = anvil_s3_delete(r->s3, r->bucket, pg.objects[i].key);
    anvil_s3_list_page_free(&pg);
    return rc;
}

/* Every step's index beyond the newest keep_last (but multiples of keep_every) is deleted first,
 * then its objects and its hosts' markers: a crash between leaves objects no index names, never
 * an index without them. */
static int prune(anvil_ckpt_remote *r) {
    step_list l = {0};
    int rc = list_steps(r->s3, r->bucket, r->prefix, &l);
    for (size_t i = (size_t)r->keep_last; !rc && i < l.n; i++) {
        if (r->keep_every && l.steps[i] % r->keep_every == 0) continue;
        char ik[PATH_MAX];
        cJSON *j = index_key(ik, sizeof ik, r->prefix, l.steps[i]) ? NULL : get_json(r->s3, r->bucket, ik, NULL);
        if (!j || anvil_s3_delete(r->s3, r->bucket, ik)) {
            cJSON_Delete(j);
            rc = -1;
            break;
        }
        const cJSON *o;
        cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(j, "objects")) {
            const char *name, *key;
            uint32_t crc;
            if (index_entry(o, ik, &name, &key, &crc) || anvil_s3_delete(r->s3, r->bucket, key)) {
                rc = -1;
                break;
            }
        }
        cJSON_Delete(j);
        if (!rc) rc = delete_markers(r, l.steps[i]);
    }
    free(l.steps);
    return rc;
}

/* Uploads the staged files of a job, adding an entry per object to objects. */
static int upload_files(anvil_ckpt_remote *r, const job *jb, cJSON *objects) {
    DIR *d = opendir(jb->dir);
    if (!d) return anvil_fail("%s: cannot list: %s", jb->dir, strerror(errno));
    int rc = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[PATH_MAX], key[PATH_MAX], hex[9];
        uint64_t bytes;
        uint32_t crc;
        if (fmt(path, sizeof path, "%s/%s", jb->dir, e->d_name) || object_key(r, jb->step, e->d_name, key, sizeof key) ||
            anvil_crc32c_file(path, &bytes, &crc) || anvil_s3_put_file(r->s3, r->bucket, key, path)) {
            rc = -1;
            break;
        }
        snprintf(hex, sizeof hex, "%08" PRIx32, crc);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", e->d_name);
        cJSON_AddStringToObject(o, "key", key);
        cJSON_AddNumberToObject(o, "bytes", (double)bytes);
        cJSON_AddStringToObject(o, "crc32c", hex);
        cJSON_AddItemToArray(objects, o);
    }
    closedir(d);
    return rc;
}

static int put_json(anvil_ckpt_remote *r, const char *key, const cJSON *j) {
    char *text = cJSON_PrintUnformatted(j);
    int rc = !text ? anvil_fail("checkpoint upload: out of memory") : anvil_s3_put(r->s3, r->bucket, key, text, strlen(text));
    free(text);
    return rc;
}

/* An uploader other than rank 0: its host's files, then its marker, which says why when they failed. */
static int upload_host(anvil_ckpt_remote *r, const job *jb) {
    char mk[PATH_MAX];
    if (marker_key(mk, sizeof mk, r->prefix, jb->step, r->rank)) return -1;
    cJSON *marker = cJSON_CreateObject(), *objects = cJSON_AddArrayToObject(marker, "objects");
    cJSON_AddStringToObject(marker, "run", r->run_id);
    cJSON_AddStringToObject(marker, "host", r->host);
    cJSON_AddNumberToObject(marker, "step", (double)jb->step);
    int rc = upload_files(r, jb, objects);
    if (rc) cJSON_AddStringToObject(marker, "failed", anvil_errmsg());
    /* A failed host's marker still goes up, so that rank 0 stops waiting for it at once. */
    if (put_json(r, mk, marker)) rc = -1;
    cJSON_Delete(marker);
    return rc;
}

/* Rank 0 waits for uploader rank host's marker of the step and adds its objects to the index's;
 * -1 after anvil_fail with one line when the host failed or its marker did not come in time. */
static int take_marker(anvil_ckpt_remote *r, const job *jb, int host, cJSON *objects) {
    char mk[PATH_MAX];
    if (marker_key(mk, sizeof mk, r->prefix, jb->step, host)) return -1;
    double waited = 0, pause = 0.05;
    for (;;) {
        int missing;
        cJSON *m = get_json(r->s3, r->bucket, mk, &missing);
        if (!m && !missing) return -1;
        const cJSON *run = cJSON_GetObjectItemCaseSensitive(m, "run");
        if (m && cJSON_IsString(run) && !strcmp(run->valuestring, r->run_id)) {
            const cJSON *why = cJSON_GetObjectItemCaseSensitive(m, "failed"),
                        *key = cJSON_GetObjectItemCaseSensitive(m, "host");
            int rc = 0;
            if (cJSON_IsString(why))
                rc = anvil_fail("host %s (uploader rank %d) failed to upload: %s",
                                cJSON_IsString(key) ? key->valuestring : "?", host, why->valuestring);
            const cJSON *o;
            cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(m, "objects")) {
                const char *name, *k;
                uint32_t crc;
                if (rc || (rc = index_entry(o, mk, &name, &k, &crc))) break;
                cJSON_AddItemToArray(objects, cJSON_Duplicate(o, 1));
            }
            cJSON_Delete(m);
            return rc;
        }
        /* A marker of an earlier run (killed at this step) is as good as none. */
        cJSON_Delete(m);
        if (waited >= ANVIL_CKPT_REMOTE_MARKER_WAIT_S)
            return anvil_fail("no marker from uploader rank %d's host after %.0f s (s3://%s/%s)", host, waited,
                              r->bucket, mk);
        anvil_sleep(pause);
        waited += pause;
        pause = pause * 2 > 5 ? 5 : pause * 2;
    }
}

/* Rank 0: its files, every host's marker, then the index, the commit point; then retention. */
static int upload_commit(anvil_ckpt_remote *r, const job *jb) {
    cJSON *index = cJSON_CreateObject(), *objects = cJSON_AddArrayToObject(index, "objects");
    cJSON_AddNumberToObject(index, "step", (double)jb->step);
    int rc = upload_files(r, jb, objects);
    for (int i = 0; !rc && i < jb->nhosts; i++) rc = take_marker(r, jb, jb->hosts[i], objects);
    char ik[PATH_MAX];
    if (!rc) rc = index_key(ik, sizeof ik, r->prefix, jb->step) || put_json(r, ik, index) ? -1 : 0;
    cJSON_Delete(index);
    if (!rc) rc = prune(r);
    return rc;
}

static void *upload_main(void *arg) {
    anvil_ckpt_remote *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->head && !r->closing) pthread_cond_wait(&r->cv, &r->mu);
        job *jb = r->head;
        if (!jb) break;
        pthread_mutex_unlock(&r->mu);
        int rc = jb->commit ? upload_commit(r, jb) : upload_host(r, jb);
        if (rc)
            fprintf(r->log, "error: checkpoint step %" PRId64 " not %s s3://%s/%s: %s\n", jb->step,
                    jb->commit ? "committed to" : "uploaded by this host to", r->bucket, r->prefix, anvil_errmsg());
        else if (jb->commit)
            fprintf(r->log, "checkpoint step %" PRId64 " uploaded to s3://%s/%s\n", jb->step, r->bucket, r->prefix);
        anvil_remove_tree(jb->dir);
        pthread_mutex_lock(&r->mu);
        if (rc) r->failed = 1;
        r->head = jb->next;
        if (!r->head) r->tail = NULL;
        free(jb->hosts);
        free(jb);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static void free_remote(anvil_ckpt_remote *r) {
    anvil_s3_close(r->s3);
    free(r->bucket);
    free(r->prefix);
    free(r->run_dir);
    free(r->host);
    free(r);
}

anvil_ckpt_remote *anvil_ckpt_remote_open(const anvil_ckpt_remote_config *cfg) {
    if (cfg->nprefixes < 1 || cfg->nprefixes > ANVIL_CKPT_REMOTE_MAX_PREFIXES) {
        anvil_fail("--ckpt-prefixes %d: must be 1..%d", cfg->nprefixes, ANVIL_CKPT_REMOTE_MAX_PREFIXES);
        return NULL;
    }
    anvil_ckpt_remote *r = calloc(1, sizeof *r);
    if (!r) {
        anvil_fail("checkpoint upload: out of memory");
        return NULL;
    }
    int rc = split_uri(cfg->uri, &r->bucket, &r->prefix);
    if (!rc && (!(r->run_dir = strdup(cfg->run_dir)) || !(r->host = strdup(cfg->host))))
        rc = anvil_fail("checkpoint upload: out of memory");
    if (rc || !(r->s3 = anvil_s3_open())) {
        free_remote(r);
        return NULL;
    }
    r->nprefixes = cfg->nprefixes;
    r->keep_last = cfg->keep_last < 1 ? 1 : cfg->keep_last;
    r->keep_every = cfg->keep_every;
    r->rank = cfg->rank;
    snprintf(r->run_id, sizeof r->run_id, "%016" PRIx64, cfg->run_id);
    r->log = cfg->log;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (pthread_create(&r->thread, NULL, upload_main, r)) {
        free_remote(r);
        anvil_fail("checkpoint upload: cannot start its thread");
        return NULL;
    }
    return r;
}

int anvil_ckpt_remote_stage(const char *run_dir, int64_t step, int uploader, const char *path) {
    char dir[PATH_MAX], to[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (stage_dir(dir, sizeof dir, run_dir, step, uploader) ||
        fmt(to, sizeof to, "%s/%s", dir, slash ? slash + 1 : path) || anvil_mkdir(dir))
        return -1;
    /* Already there: rank 0 staging its committed folder meets the files its host's writers linked. */
    if (link(path, to) && errno != EEXIST) return anvil_fail("%s: cannot link into %s: %s", path, dir, strerror(errno));
    return 0;
}

static void enqueue(anvil_ckpt_remote *r, job *jb) {
    pthread_mutex_lock(&r->mu);
    if (r->tail) r->tail->next = jb;
    else r->head = jb;
    r->tail = jb;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static job *new_job(anvil_ckpt_remote *r, int64_t step) {
    job *jb = calloc(1, sizeof *jb);
    if (!jb) {
        anvil_fail("checkpoint upload: out of memory");
        return NULL;
    }
    jb->step = step;
    if (stage_dir(jb->dir, sizeof jb->dir, r->run_dir, step, r->rank)) {
        free(jb);
        return NULL;
    }
    return jb;
}

int anvil_ckpt_remote_push(anvil_ckpt_remote *r, const char *ckpt_dir, int64_t step, const char *const *skip,
                           int nskip, const int *hosts, int nhosts) {
    job *jb = new_job(r, step);
    if (!jb) return -1;
    jb->commit = 1;
    DIR *d = NULL;
    int rc = anvil_mkdir(jb->dir);
    if (!rc && nhosts) {
        if (!(jb->hosts = malloc((size_t)nhosts * sizeof *jb->hosts))) rc = anvil_fail("checkpoint upload: out of memory");
        else memcpy(jb->hosts, hosts, (size_t)nhosts * sizeof *hosts);
        jb->nhosts = nhosts;
    }
    if (!rc && !(d = opendir(ckpt_dir))) rc = anvil_fail("%s: cannot list: %s", ckpt_dir, strerror(errno));
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        int skipped = 0;
        for (int i = 0; i < nskip && !skipped; i++) skipped = !strcmp(skip[i], e->d_name);
        char from[PATH_MAX];
        if (!skipped && (fmt(from, sizeof from, "%s/%s", ckpt_dir, e->d_name) ||
                         anvil_ckpt_remote_stage(r->run_dir, step, r->rank, from)))
            rc = -1;
    }
    if (d) closedir(d);
    if (rc) {
        anvil_remove_tree(jb->dir);
        free(jb->hosts);
        free(jb);
        return -1;
    }
    enqueue(r, jb);
    return 0;
}

int anvil_ckpt_remote_push_host(anvil_ckpt_remote *r, int64_t step) {
    job *jb = new_job(r, step);
    if (!jb) return -1;
    enqueue(r, jb);
    return 0;
}

int anvil_ckpt_remote_close(anvil_ckpt_remote *r) {
    if (!r) return 0;
    pthread_mutex_lock(&r->mu);
    r->closing = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    int failed = r->failed;
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free_remote(r);
    return failed ? anvil_fail("a checkpoint upload failed (logged above)") : 0;
}

/* ---- downloading ---- */

static int fetch(anvil_s3 *s3, const char *bucket, const char *prefix, int64_t step, const char *tmp) {
    char ik[PATH_MAX];
    cJSON *j = index_key(ik, sizeof ik, prefix, step) ? NULL : get_json(s3, bucket, ik, NULL);
    if (!j) return -1;
    int rc = anvil_mkdir(tmp);
    const cJSON *o;
    cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(j, "objects")) {
        const char *name, *key;
        uint32_t want, got;
        uint64_t bytes;
        char path[PATH_MAX];
        if (rc || (rc = index_entry(o, ik, &name, &key, &want))) break;
        if ((rc = fmt(path, sizeof path, "%s/%s", tmp, name)) || (rc = anvil_s3_get_file(s3, bucket, key, path)) || (rc = anvil_crc32c_file(path, &bytes, &got))) break;
        if (got != want) {
            rc = anvil_fail("s3://%s/%s: CRC-32C %08" PRIx32 ", the checkpoint index says %08" PRIx32
                            "; refusing the checkpoint", bucket, key, got, want);
            break;
        }
    }
    cJSON_Delete(j);
    return rc;
}

void anvil_ckpt_remote_stats(anvil_ckpt_remote *r, anvil_s3_stats *st) { anvil_s3_get_stats(r->s3, st); }

int anvil_ckpt_remote_clean(const char *run_dir) {
    char ckdir[PATH_MAX];
    if (fmt(ckdir, sizeof ckdir, "%s/ckpt", run_dir)) return -1;
    DIR *d = opendir(ckdir);
    if (!d) return errno == ENOENT ? 0 : anvil_fail("%s: cannot list: %s", ckdir, strerror(errno));
    int rc = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (strncmp(e->d_name, "upload-step_", 12) && strncmp(e->d_name, "download-step_", 14)) continue;
        char path[PATH_MAX];
        rc = fmt(path, sizeof path, "%s/%s", ckdir, e->d_name) || anvil_remove_tree(path) ? -1 : 0;
    }
    closedir(d);
    return rc;
}

int anvil_ckpt_remote_fetch_latest(const char *uri, const char *run_dir, char *out, size_t cap) {
    char *bucket, *prefix;
    if (split_uri(uri, &bucket, &prefix)) return -1;
    anvil_s3 *s3 = anvil_s3_open();
    step_list l = {0};
    int rc = s3 ? list_steps(s3, bucket, prefix, &l) : -1;
    if (!rc && l.n) {
        char ckdir[PATH_MAX], tmp[PATH_MAX];
        if (fmt(ckdir, sizeof ckdir, "%s/ckpt", run_dir) ||
            fmt(tmp, sizeof tmp, "%s/download-step_%08" PRId64, ckdir, l.steps[0]) ||
            fmt(out, cap, "%s/step_%08" PRId64, ckdir, l.steps[0])) {
            rc = -1;
        } else {
            anvil_remove_tree(tmp); /* left by a download that was cut off */
            rc = anvil_mkdir_p(ckdir) || fetch(s3, bucket, prefix, l.steps[0], tmp) || anvil_rename_durable(tmp, out)
                     ? -1
                     : 1;
            if (rc < 0) anvil_remove_tree(tmp);
        }
    }
    free(l.steps);
    anvil_s3_close(s3);
    free(bucket);
    free(prefix);
    return rc;
}
