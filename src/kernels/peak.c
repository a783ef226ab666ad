/* The peak that MFU divides by, kept per machine (kernels/isa.h, anvil_isa_peak).
 *
 * A probe measures the multiply-add throughput of the moment: on a machine busy with something
 * else it comes out low, and MFU then rose and fell with the load at each run's start. So the
 * figure is the best of the probes this machine has run, kept in a cache file with one entry per
 * CPU model, kernel path, dtype and thread count; a run reads it instead of probing. The file is
 * replaced atomically under a lock (flock on a file beside it), so ranks that start together on one
 * machine probe once, and a file that does not parse is ignored, with a note, and rewritten. */
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "core/json.h"
#include "kernels/isa.h"

#define CACHE_FORMAT "anvil-peak-cache"
#define CACHE_VERSION 1
/* A probe's length: long enough that its best of three runs rides out a short disturbance. */
#define PROBE_SECONDS 1.0
/* More than any machine needs (models x paths x dtypes x thread counts): the file stays small. */
#define MAX_ENTRIES 256
#define MAX_CACHE_BYTES (1 << 20)

void anvil_peak_cache_file(char *out, size_t cap) {
    const char *dir = getenv("ANVIL_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (dir && *dir) snprintf(out, cap, "%s/peak.json", dir);
    else if (xdg && xdg[0] == '/') snprintf(out, cap, "%s/anvil/peak.json", xdg);
    else if (home && *home) snprintf(out, cap, "%s/.cache/anvil/peak.json", home);
    else if (cap) out[0] = 0;
}

/* The CPU's model name, as /proc/cpuinfo gives it ("unknown CPU" without one). */
static void cpu_model(char *out, size_t cap) {
    snprintf(out, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v += 1 + strspn(v + 1, " \t");
        snprintf(out, cap, "%.*s", (int)strcspn(v, "\n"), v);
        break;
    }
    fclose(f);
}

/* The cache's entries, or NULL with why in note (a missing file is an empty cache, not a note). */
static cJSON *read_cache(const char *file, char *note, size_t cap) {
    char *text;
    size_t len;
    if (access(file, F_OK)) return cJSON_CreateArray();
    if (anvil_read_file_max(file, MAX_CACHE_BYTES, &text, &len)) {
        snprintf(note, cap, "ignoring the peak cache %s: %s", file, anvil_errmsg());
        return NULL;
    }
    cJSON *root = anvil_json_parse(text, len, NULL);
    free(text);
    cJSON *peaks = root ? cJSON_DetachItemFromObjectCaseSensitive(root, "peaks") : NULL;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    const char *why = !root ? anvil_errmsg()
                      : !cJSON_IsString(fmt) || strcmp(fmt->valuestring, CACHE_FORMAT) ? "not an anvil peak cache"
                      : !cJSON_IsNumber(ver) || ver->valuedouble != CACHE_VERSION ? "a version this build does not read"
                      : !cJSON_IsArray(peaks) ? "\"peaks\" is not a list"
                                                : NULL;
    if (why) snprintf(note, cap, "ignoring the peak cache %s: %s; probing again", file, why);
    cJSON_Delete(root);
    if (!why) return peaks;
    cJSON_Delete(peaks);
    return NULL;
}

static bool same_key(const cJSON *e, const anvil_peak *p) {
    const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(e, "cpu"), *path = cJSON_GetObjectItemCaseSensitive(e, "path");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype"), *th = cJSON_GetObjectItemCaseSensitive(e, "threads");
    return cJSON_IsString(cpu) && cJSON_IsString(path) && cJSON_IsString(dt) && cJSON_IsNumber(th) &&
           !strcmp(cpu->valuestring, p->cpu) && !strcmp(path->valuestring, p->path) &&
           !strcmp(dt->valuestring, p->dtype) && th->valuedouble == p->threads;
}

/* The entry of p's key, its figures into p: 1 when there is a sound one. */
static int take_entry(const cJSON *peaks, anvil_peak *p, cJSON **at) {
    cJSON *e;
    *at = NULL;
    cJSON_ArrayForEach(e, peaks) {
        if (!same_key(e, p)) continue;
        *at = e;
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(e, "gflops"), *n = cJSON_GetObjectItemCaseSensitive(e, "probes");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "probed_at");
        if (!cJSON_IsNumber(g) || !(g->valuedouble > 0) || !isfinite(g->valuedouble) || !cJSON_IsNumber(n) ||
            !cJSON_IsNumber(t))
            return 0;
        p->gflops = g->valuedouble;
        p->probes = (int)n->valuedouble;
        p->probed_at = t->valuedouble;
        return 1;
    }
    return 0;
}

/* Writes the entries back with p's in place of the old one (at), atomically. */
static int write_cache(const char *file, cJSON *peaks, cJSON *at, const anvil_peak *p) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "cpu", p->cpu);
    cJSON_AddStringToObject(e, "path", p->path);
    cJSON_AddStringToObject(e, "dtype", p->dtype);
    cJSON_AddNumberToObject(e, "threads", p->threads);
    cJSON_AddNumberToObject(e, "gflops", p->gflops);
    cJSON_AddNumberToObject(e, "probes", p->probes);
    cJSON_AddNumberToObject(e, "probed_at", p->probed_at);
    if (at) cJSON_ReplaceItemViaPointer(peaks, at, e);
    else if (cJSON_GetArraySize(peaks) < MAX_ENTRIES) cJSON_AddItemToArray(peaks, e);
    else cJSON_Delete(e);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", CACHE_FORMAT);
    cJSON_AddNumberToObject(root, "version", CACHE_VERSION);
    cJSON_AddItemReferenceToObject(root, "peaks", peaks);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return anvil_fail("%s: out of memory", file);
    size_t len = strlen(text);
    char *nl = realloc(text, len + 2);
    int rc = nl ? 0 : anvil_fail("%s: out of memory", file);
    if (nl) {
        nl[len] = '\n';
        rc = anvil_write_file_atomic(file, nl, len + 1);
    }
    free(nl ? nl : text);
    return rc;
}

/* Probes into p, keeping the best of it and what the cache held. */
static void probe(anvil_isa isa, anvil_bf16_kernel bf16, anvil_peak *p, int had) {
    double g = p->probed = anvil_isa_peak_gflops(isa, bf16, PROBE_SECONDS);
    if (!had || g > p->gflops) {
        p->gflops = g;
        p->probed_at = (double)time(NULL);
    }
    p->probes = had ? p->probes + 1 : 1;
    p->cached = false;
}

int anvil_isa_peak(anvil_isa isa, anvil_bf16_kernel bf16, bool reprobe, anvil_peak *p) {
    memset(p, 0, sizeof *p);
    /* The cache's dtype names the kernel too: vdpbf16ps keeps "bf16", its name before AMX had a probe. */
    const char *dtype = bf16 == ANVIL_BF16_AMX ? "bf16-amx" : bf16 == ANVIL_BF16_AVX512 ? "bf16" : "fp32";
    if (!anvil_isa_supported(isa) ||
        (bf16 != ANVIL_BF16_NONE && (isa != ANVIL_ISA_AVX512 || !anvil_isa_bf16_available(bf16))))
        return anvil_fail("peak: the %s path cannot run %s here", anvil_isa_name(isa), dtype);
    cpu_model(p->cpu, sizeof p->cpu);
    snprintf(p->path, sizeof p->path, "%s", anvil_isa_name(isa));
    snprintf(p->dtype, sizeof p->dtype, "%s", dtype);
    p->threads = omp_get_max_threads();
    anvil_peak_cache_file(p->file, sizeof p->file);
    if (!p->file[0]) {
        snprintf(p->note, sizeof p->note, "no cache folder (neither ANVIL_CACHE_DIR, XDG_CACHE_HOME nor HOME is set)");
        probe(isa, bf16, p, 0);
        return 0;
    }
    /* One process at a time reads, probes and writes: the others then find its figure. */
    char lockpath[sizeof p->file + 8];
    snprintf(lockpath, sizeof lockpath, "%s.lock", p->file);
    int lock = anvil_mkdir_parent(p->file) ? -1 : open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock >= 0) flock(lock, LOCK_EX);
    cJSON *peaks = lock >= 0 ? read_cache(p->file, p->note, sizeof p->note) : NULL;
    if (lock < 0) snprintf(p->note, sizeof p->note, "no peak cache: %s", anvil_errmsg());
    cJSON *at = NULL;
    int had = peaks && take_entry(peaks, p, &at);
    p->cached = had;
    if (!had || reprobe) {
        probe(isa, bf16, p, had);
        /* A cache that did not parse is replaced by one of this entry alone. */
        if (lock >= 0 && !peaks) peaks = cJSON_CreateArray();
        if (lock >= 0 && (!peaks || write_cache(p->file, peaks, at, p)))
            snprintf(p->note, sizeof p->note, "the peak cache was not written: %s", peaks ? anvil_errmsg() : "out of memory");
        else p->stored = lock >= 0;
    }
    cJSON_Delete(peaks);
    if (lock >= 0) close(lock);
    return 0;
}
