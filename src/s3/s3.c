/* The S3 client: configuration, the pool of curl handles, one signed request
 * with its retries, and the operations on top. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "core/rng.h"
#include "s3/s3.h"

/* Latency histogram: 10 buckets per decade from 1 ms to 100 s. */
#define LAT_BUCKETS 50
#define POOL_MAX 16
/* Error bodies and XML answers kept from one response; list pages are a few hundred KB. */
#define MAX_ANSWER (8u << 20)
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct anvil_s3 {
    char *endpoint, *region, *key_id, *secret, *token, *sigv4;
    int max_attempts;
    long base_ms, cap_ms;
    size_t part_size;
    pthread_mutex_t mu; /* guards the pool, the counters and the jitter generator */
    CURL *pool[POOL_MAX];
    int npool;
    anvil_rng rng;
    anvil_s3_stats st;
    uint64_t lat[LAT_BUCKETS];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_init_rc;
static void curl_init(void) {
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

/* --- configuration --- */

static int read_aws_file(const char *env, const char *leaf, char **text, size_t *len) {
    char path[4096];
    const char *p = getenv(env), *home = getenv("HOME");
    if (p && *p) snprintf(path, sizeof path, "%s", p);
    else if (home && *home) snprintf(path, sizeof path, "%s/.aws/%s", home, leaf);
    else return 0;
    if (access(path, F_OK)) return 0;
    if (anvil_read_file_max(path, 1u << 20, text, len)) return -1;
    return 1;
}

static char *dup_env(const char *a, const char *b) {
    const char *v = getenv(a);
    if ((!v || !*v) && b) v = getenv(b);
    return v && *v ? strdup(v) : NULL;
}

/* The profile's value in the credentials file, then in the config file (section "profile NAME",
 * or "default"). */
static char *profile_value(const char *cred, size_t cred_len, const char *conf, size_t conf_len, const char *profile,
                           const char *key) {
    char v[2048], section[300];
    if (cred && anvil_s3_ini_get(cred, cred_len, profile, key, v, sizeof v) && v[0]) return strdup(v);
    if (strcmp(profile, "default")) snprintf(section, sizeof section, "profile %s", profile);
    else snprintf(section, sizeof section, "default");
    if (conf && anvil_s3_ini_get(conf, conf_len, section, key, v, sizeof v) && v[0]) return strdup(v);
    return NULL;
}

static int env_long(const char *name, long lo, long hi, long *out) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *e;
    errno = 0;
    long x = strtol(v, &e, 10);
    if (*e || errno || x < lo || x > hi) return anvil_fail("%s='%s': expected an integer in [%ld, %ld]", name, v, lo, hi);
    *out = x;
    return 0;
}

anvil_s3 *anvil_s3_open(void) {
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc) {
        anvil_fail("s3: curl_global_init failed");
        return NULL;
    }
    anvil_s3 *s = calloc(1, sizeof *s);
    if (!s) {
        anvil_fail("s3: out of memory");
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    char *cred = NULL, *conf = NULL;
    size_t cred_len = 0, conf_len = 0;
    const char *profile = getenv("AWS_PROFILE");
    if (!profile || !*profile) profile = "default";
    if (read_aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials", &cred, &cred_len) < 0 ||
        read_aws_file("AWS_CONFIG_FILE", "config", &conf, &conf_len) < 0)
        goto fail;
    s->key_id = dup_env("AWS_ACCESS_KEY_ID", NULL);
    if (s->key_id) {
        s->secret = dup_env("AWS_SECRET_ACCESS_KEY", NULL);
        s->token = dup_env("AWS_SESSION_TOKEN", NULL);
        if (!s->secret) {
            anvil_fail("s3: AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
            goto fail;
        }
    } else {
        s->key_id = profile_value(cred, cred_len, conf, conf_len, profile, "aws_access_key_id");
        s->secret = profile_value(cred, cred_len, conf, conf_len, profile, "aws_secret_access_key");
        s->token = profile_value(cred, cred_len, conf, conf_len, profile, "aws_session_token");
        if (!s->key_id || !s->secret) {
            anvil_fail("s3: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give profile '%s' "
                       "aws_access_key_id and aws_secret_access_key in ~/.aws/credentials",
                       profile);
            goto fail;
        }
    }
    s->region = dup_env("AWS_REGION", "AWS_DEFAULT_REGION");
    if (!s->region) s->region = profile_value(NULL, 0, conf, conf_len, profile, "region");
    if (!s->region) s->region = strdup("us-east-1");
    s->endpoint = dup_env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
    if (!s->endpoint) s->endpoint = profile_value(NULL, 0, conf, conf_len, profile, "endpoint_url");
    if (!s->endpoint) {
        char url[512];
        snprintf(url, sizeof url, "https://s3.%s.amazonaws.com", s->region);
        s->endpoint = strdup(url);
    }
    if (!s->region || !s->endpoint) {
        anvil_fail("s3: out of memory");
        goto fail;
    }
    for (char *c = s->region; *c; c++)
        if (!(*c == '-' || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9'))) {
            anvil_fail("s3: region '%s' is not a region name (letters, digits and '-')", s->region);
            goto fail;
        }
    if (strncmp(s->endpoint, "http://", 7) && strncmp(s->endpoint, "https://", 8)) {
        anvil_fail("s3: endpoint '%s' is not an http:// or https:// URL", s->endpoint);
        goto fail;
    }
    size_t el = strlen(s->endpoint);
    while (el && s->endpoint[el - 1] == '/') s->endpoint[--el] = 0;
    char sig[256];
    snprintf(sig, sizeof sig, "aws:amz:%s:s3", s->region);
    s->sigv4 = strdup(sig);
    long attempts = ANVIL_S3_MAX_ATTEMPTS, part = ANVIL_S3_PART_SIZE;
    s->base_ms = ANVIL_S3_RETRY_BASE_MS;
    s->cap_ms = ANVIL_S3_RETRY_CAP_MS;
    if (env_long("ANVIL_S3_MAX_ATTEMPTS", 1, 100, &attempts) || env_long("ANVIL_S3_RETRY_BASE_MS", 1, 60000, &s->base_ms) ||
        env_long("ANVIL_S3_RETRY_CAP_MS", 1, 600000, &s->cap_ms) ||
        env_long("ANVIL_S3_PART_SIZE", ANVIL_S3_MIN_PART_SIZE, 5L << 30, &part))
        goto fail;
    s->max_attempts = (int)attempts;
    s->part_size = (size_t)part;
    anvil_rng_seed(&s->rng, (uint64_t)getpid() ^ (uint64_t)(anvil_now() * 1e9));
    free(cred);
    free(conf);
    return s;
fail:
    free(cred);
    free(conf);
    anvil_s3_close(s);
    return NULL;
}

void anvil_s3_close(anvil_s3 *s) {
    if (!s) return;
    for (int i = 0; i < s->npool; i++) curl_easy_cleanup(s->pool[i]);
    if (s->secret) sodium_memzero(s->secret, strlen(s->secret));
    free(s->endpoint);
    free(s->region);
    free(s->key_id);
    free(s->secret);
    free(s->token);
    free(s->sigv4);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static double bucket_ms(int b) {
    double v = 1.0;
    for (int i = 0; i < b + 1; i++) v *= 1.2589254117941673; /* 10^(1/10) */
    return v;
}

static double percentile(const uint64_t *lat, double q) {
    uint64_t total = 0, seen = 0;
    for (int i = 0; i < LAT_BUCKETS; i++) total += lat[i];
    if (!total) return 0;
    for (int i = 0; i < LAT_BUCKETS; i++) {
        seen += lat[i];
        if ((double)seen >= q * (double)total) return bucket_ms(i);
    }
    return bucket_ms(LAT_BUCKETS - 1);
}

void anvil_s3_get_stats(anvil_s3 *s, anvil_s3_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    out->p50_ms = percentile(s->lat, 0.50);
    out->p99_ms = percentile(s->lat, 0.99);
    pthread_mutex_unlock(&s->mu);
}

void anvil_s3_format_stats(const anvil_s3_stats *st, char *out, size_t cap) {
    snprintf(out, cap,
             "requests get=%" PRIu64 " head=%" PRIu64 " put=%" PRIu64 " list=%" PRIu64 " delete=%" PRIu64
             " multipart=%" PRIu64 " retries=%" PRIu64 " bytes_down=%" PRIu64 " bytes_up=%" PRIu64
             " p50_ms=%.1f p99_ms=%.1f",
             st->requests[ANVIL_S3_GET], st->requests[ANVIL_S3_HEAD], st->requests[ANVIL_S3_PUT],
             st->requests[ANVIL_S3_LIST], st->requests[ANVIL_S3_DELETE], st->requests[ANVIL_S3_MULTIPART], st->retries,
             st->bytes_down, st->bytes_up, st->p50_ms, st->p99_ms);
}

int anvil_s3_is_uri(const char *path) {
    return path && !strncmp(path, "s3://", 5);
}

int anvil_s3_parse_uri(const char *uri, char **bucket, char **key) {
    *bucket = *key = NULL;
    if (!anvil_s3_is_uri(uri)) return anvil_fail("'%s' is not an s3://bucket/key URI", uri);
    const char *b = uri + 5, *slash = strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    if (bl < 3 || bl > 63) return anvil_fail("'%s': a bucket name is 3 to 63 characters", uri);
    for (size_t i = 0; i < bl; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-' || b[i] == '.'))
            return anvil_fail("'%s': a bucket name has only a-z, 0-9, '-' and '.'", uri);
    *bucket = strndup(b, bl);
    *key = strdup(slash ? slash + 1 : "");
    if (!*bucket || !*key) {
        free(*bucket);
        free(*key);
        *bucket = *key = NULL;
        return anvil_fail("out of memory");
    }
    if (strlen(*key) > 1024) {
        free(*bucket);
        free(*key);
        *bucket = *key = NULL;
        return anvil_fail("'%.60s...': an S3 key is at most 1024 bytes", uri);
    }
    return 0;
}

/* --- one request --- */

typedef struct {
    int op;
    const char *method, *bucket, *key;
    const char *query;  /* canonical: names sorted, names and values percent-encoded; or NULL */
    const void *body;   /* PUT and POST */
    size_t body_len;
    uint64_t range_off; /* a GET of range_len bytes from range_off, into dst */
    size_t range_len;
    int ranged;
    char *dst;
} request;

typedef struct {
    long status;
    char *answer; /* the body of a non-GET or failed request, NUL-terminated */
    size_t answer_len, got; /* got: bytes of dst filled */
    char etag[256];
    uint64_t content_length;
    int have_length;
    size_t body_off; /* read position in the request body */
    int overflow;
} response;

typedef struct {
    const request *rq;
    response *rs;
    CURL *h;
} transfer;

static size_t on_write(char *p, size_t sz, size_t n, void *ud) {
    transfer *t = ud;
    size_t len = sz * n;
    long status = 0;
    curl_easy_getinfo(t->h, CURLINFO_RESPONSE_CODE, &status);
    if (t->rq->dst && status / 100 == 2) {
        /* A store that ignored the Range would send the object from its start. */
        if (status != 206) {
            t->rs->overflow = 1;
            return 0;
        }
        size_t room = t->rq->range_len - t->rs->got;
        if (len > room) {
            t->rs->overflow = 1;
            return 0;
        }
        memcpy(t->rq->dst + t->rs->got, p, len);
        t->rs->got += len;
        return len;
    }
    if (t->rs->answer_len + len > MAX_ANSWER) {
        t->rs->overflow = 1;
        return 0;
    }
    char *a = realloc(t->rs->answer, t->rs->answer_len + len + 1);
    if (!a) return 0;
    memcpy(a + t->rs->answer_len, p, len);
    t->rs->answer = a;
    t->rs->answer_len += len;
    a[t->rs->answer_len] = 0;
    return len;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
    transfer *t = ud;
    size_t len = sz * n;
    if (len > 5 && !strncasecmp(p, "ETag:", 5)) {
        const char *v = p + 5, *e = p + len;
        while (v < e && (*v == ' ' || *v == '\t')) v++;
        while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ')) e--;
        size_t vl = (size_t)(e - v) < sizeof t->rs->etag - 1 ? (size_t)(e - v) : sizeof t->rs->etag - 1;
        memcpy(t->rs->etag, v, vl);
        t->rs->etag[vl] = 0;
    } else if (len > 15 && !strncasecmp(p, "Content-Length:", 15)) {
        t->rs->content_length = strtoull(p + 15, NULL, 10);
        t->rs->have_length = 1;
    }
    return len;
}

static size_t on_read(char *p, size_t sz, size_t n, void *ud) {
    transfer *t = ud;
    size_t room = t->rq->body_len - t->rs->body_off, len = sz * n < room ? sz * n : room;
    memcpy(p, (const char *)t->rq->body + t->rs->body_off, len);
    t->rs->body_off += len;
    return len;
}

static CURL *take_handle(anvil_s3 *s) {
    CURL *h = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->npool) h = s->pool[--s->npool];
    pthread_mutex_unlock(&s->mu);
    return h ? h : curl_easy_init();
}

static void give_handle(anvil_s3 *s, CURL *h) {
    pthread_mutex_lock(&s->mu);
    if (s->npool < POOL_MAX) {
        s->pool[s->npool++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    if (h) curl_easy_cleanup(h);
}

static void sha256_hex(const void *data, size_t len, char out[65]) {
    unsigned char d[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(d, data, len);
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* One attempt; returns the curl code (the HTTP status is in rs->status). */
static CURLcode attempt(anvil_s3 *s, CURL *h, const request *rq, response *rs, const char *payload_hash) {
    char *ekey = anvil_s3_encode(rq->key ? rq->key : "", 1);
    size_t ul = strlen(s->endpoint) + strlen(rq->bucket) + (ekey ? strlen(ekey) : 0) +
                (rq->query ? strlen(rq->query) : 0) + 8;
    char *url = malloc(ul);
    if (!ekey || !url) {
        free(ekey);
        free(url);
        return CURLE_OUT_OF_MEMORY;
    }
    snprintf(url, ul, "%s/%s%s%s%s%s", s->endpoint, rq->bucket, rq->key && rq->key[0] ? "/" : "", ekey,
             rq->query ? "?" : "", rq->query ? rq->query : "");
    free(ekey);
    transfer t = {rq, rs, h};
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    /* Keys may hold "..", which curl would otherwise fold away before signing. */
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s->sigv4);
    curl_easy_setopt(h, CURLOPT_USERNAME, s->key_id);
    curl_easy_setopt(h, CURLOPT_PASSWORD, s->secret);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    /* A stalled transfer (under 1 KiB/s for 30 s) counts as a timeout and is retried. */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 30L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
    struct curl_slist *hdr = NULL;
    char line[512];
    snprintf(line, sizeof line, "x-amz-content-sha256: %s", payload_hash);
    hdr = curl_slist_append(hdr, line);
    if (s->token) {
        size_t tl = strlen(s->token) + 32;
        char *tok = malloc(tl);
        if (tok) {
            snprintf(tok, tl, "x-amz-security-token: %s", s->token);
            hdr = curl_slist_append(hdr, tok);
            free(tok);
        }
    }
    char range[64];
    if (rq->ranged) {
        snprintf(range, sizeof range, "%" PRIu64 "-%" PRIu64, rq->range_off + rs->got,
                 rq->range_off + rq->range_len - 1);
        curl_easy_setopt(h, CURLOPT_RANGE, range);
    }
    if (!strcmp(rq->method, "HEAD")) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (!strcmp(rq->method, "PUT")) {
        rs->body_off = 0;
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, &t);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)rq->body_len);
    } else if (!strcmp(rq->method, "POST")) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->body ? (const char *)rq->body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
        hdr = curl_slist_append(hdr, "Content-Type: application/xml");
    } else if (strcmp(rq->method, "GET")) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, rq->method);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &rs->status);
    curl_slist_free_all(hdr);
    free(url);
    return rc;
}

static int retryable_curl(CURLcode c) {
    return c == CURLE_COULDNT_CONNECT || c == CURLE_OPERATION_TIMEDOUT || c == CURLE_RECV_ERROR ||
           c == CURLE_SEND_ERROR || c == CURLE_PARTIAL_FILE || c == CURLE_GOT_NOTHING || c == CURLE_SSL_CONNECT_ERROR;
}

static int retryable_status(long st) {
    return st == 500 || st == 502 || st == 503 || st == 504 || st == 408 || st == 429;
}

static void count(anvil_s3 *s, int op, double ms, size_t down, size_t up) {
    int b = 0;
    for (double v = 1.2589254117941673; b < LAT_BUCKETS - 1 && ms > v; b++) v *= 1.2589254117941673;
    pthread_mutex_lock(&s->mu);
    s->st.requests[op]++;
    s->st.bytes_down += down;
    s->st.bytes_up += up;
    s->lat[b]++;
    pthread_mutex_unlock(&s->mu);
}

static void backoff(anvil_s3 *s, int attempt_no) {
    double ceil_ms = (double)s->base_ms;
    for (int i = 0; i < attempt_no && ceil_ms < (double)s->cap_ms; i++) ceil_ms *= 2;
    if (ceil_ms > (double)s->cap_ms) ceil_ms = (double)s->cap_ms;
    pthread_mutex_lock(&s->mu);
    double u = (double)(anvil_rng_u64(&s->rng) >> 11) / 9007199254740992.0;
    pthread_mutex_unlock(&s->mu);
    anvil_sleep(u * ceil_ms / 1000);
}

/* The request with its retries: 0 on a 2xx (rs filled), -1 after anvil_fail. The status `also_ok`
 * (404 for HEAD, 416 past the end of a ranged GET; 0 for none) is returned as rs->status with 0. */
static int perform(anvil_s3 *s, const request *rq, response *rs, long also_ok) {
    char hash[65];
    if (rq->body && rq->body_len) sha256_hex(rq->body, rq->body_len, hash);
    else memcpy(hash, EMPTY_SHA256, 65);
    memset(rs, 0, sizeof *rs);
    CURL *h = take_handle(s);
    if (!h) return anvil_fail("s3: curl_easy_init failed");
    const char *key = rq->key ? rq->key : "";
    for (int a = 0;; a++) {
        free(rs->answer);
        rs->answer = NULL;
        rs->answer_len = 0;
        rs->status = 0;
        rs->overflow = 0;
        size_t got0 = rs->got;
        double t0 = anvil_now();
        CURLcode c = attempt(s, h, rq, rs, hash);
        double ms = (anvil_now() - t0) * 1e3;
        int retry_next = 0;
        if (c == CURLE_OK && rs->status / 100 == 2) {
            count(s, rq->op, ms, rs->got - got0 + rs->answer_len, rq->body_len);
            break;
        }
        count(s, rq->op, ms, rs->got - got0 + rs->answer_len, 0);
        if (c == CURLE_OK && also_ok && rs->status == also_ok) break;
        char why[512];
        if (c != CURLE_OK && c != CURLE_WRITE_ERROR) {
            retry_next = retryable_curl(c);
            snprintf(why, sizeof why, "%s", curl_easy_strerror(c));
        } else if (rs->overflow) {
            snprintf(why, sizeof why, "%s",
                     !rq->dst ? "an answer over 8 MiB" : rs->status != 206 ? "HTTP 200 to a Range request" : "more bytes than the range");
        } else if (c != CURLE_OK) {
            snprintf(why, sizeof why, "%s", curl_easy_strerror(c));
        } else {
            char code[128], msg[256];
            retry_next = retryable_status(rs->status);
            if (rs->answer && !anvil_s3_parse_error(rs->answer, rs->answer_len, code, sizeof code, msg, sizeof msg))
                snprintf(why, sizeof why, "HTTP %ld %s%s%s", rs->status, code, msg[0] ? ": " : "", msg);
            else
                snprintf(why, sizeof why, "HTTP %ld%s", rs->status,
                         rs->status == 404 ? " NotFound" : rs->status == 403 ? " Forbidden" : "");
        }
        if (!retry_next || a + 1 >= s->max_attempts) {
            give_handle(s, h);
            free(rs->answer);
            rs->answer = NULL;
            const char *verb = rq->op == ANVIL_S3_LIST ? "LIST" : rq->method;
            if (retry_next)
                return anvil_fail("s3: %s s3://%s/%s: %s (gave up after %d attempts)", verb, rq->bucket, key, why, a + 1);
            return anvil_fail("s3: %s s3://%s/%s: %s", verb, rq->bucket, key, why);
        }
        pthread_mutex_lock(&s->mu);
        s->st.retries++;
        pthread_mutex_unlock(&s->mu);
        backoff(s, a);
    }
    give_handle(s, h);
    return 0;
}

/* --- operations --- */

int anvil_s3_get_range(anvil_s3 *s, const char *bucket, const char *key, uint64_t off, size_t len, void *buf,
                       size_t *got) {
    *got = 0;
    if (!len) return 0;
    request rq = {ANVIL_S3_GET, "GET", bucket, key, NULL, NULL, 0, off, len, 1, buf};
    response rs;
    int rc = perform(s, &rq, &rs, 416);
    *got = rs.got;
    free(rs.answer);
    return rc;
}

int anvil_s3_head(anvil_s3 *s, const char *bucket, const char *key, uint64_t *size) {
    request rq = {ANVIL_S3_HEAD, "HEAD", bucket, key, NULL, NULL, 0, 0, 0, 0, NULL};
    response rs;
    if (perform(s, &rq, &rs, 404)) return -1;
    free(rs.answer);
    if (rs.status == 404) return 1;
    if (!rs.have_length) return anvil_fail("s3: HEAD s3://%s/%s: no Content-Length in the answer", bucket, key);
    *size = rs.content_length;
    return 0;
}

int anvil_s3_put(anvil_s3 *s, const char *bucket, const char *key, const void *data, size_t len) {
    request rq = {ANVIL_S3_PUT, "PUT", bucket, key, NULL, data, len, 0, 0, 0, NULL};
    response rs;
    int rc = perform(s, &rq, &rs, 0);
    free(rs.answer);
    return rc;
}

int anvil_s3_delete(anvil_s3 *s, const char *bucket, const char *key) {
    request rq = {ANVIL_S3_DELETE, "DELETE", bucket, key, NULL, NULL, 0, 0, 0, 0, NULL};
    response rs;
    int rc = perform(s, &rq, &rs, 0);
    free(rs.answer);
    return rc;
}

int anvil_s3_mpu_create(anvil_s3 *s, const char *bucket, const char *key, char **upload_id) {
    request rq = {ANVIL_S3_MULTIPART, "POST", bucket, key, "uploads=", NULL, 0, 0, 0, 0, NULL};
    response rs;
    *upload_id = NULL;
    if (perform(s, &rq, &rs, 0)) return -1;
    int rc = anvil_s3_parse_upload_id(rs.answer ? rs.answer : "", rs.answer_len, upload_id);
    free(rs.answer);
    return rc;
}

/* "partNumber=N&uploadId=ID" (sorted), or "uploadId=ID". */
static char *upload_query(int part, const char *upload_id) {
    char *id = anvil_s3_encode(upload_id, 0);
    if (!id) return NULL;
    size_t n = strlen(id) + 48;
    char *q = malloc(n);
    if (q) {
        if (part) snprintf(q, n, "partNumber=%d&uploadId=%s", part, id);
        else snprintf(q, n, "uploadId=%s", id);
    }
    free(id);
    return q;
}

int anvil_s3_mpu_part(anvil_s3 *s, const char *bucket, const char *key, const char *upload_id, int part,
                      const void *data, size_t len, char *etag, size_t etag_cap) {
    char *q = upload_query(part, upload_id);
    if (!q) return anvil_fail("out of memory");
    request rq = {ANVIL_S3_PUT, "PUT", bucket, key, q, data, len, 0, 0, 0, NULL};
    response rs;
    int rc = perform(s, &rq, &rs, 0);
    free(q);
    free(rs.answer);
    if (rc) return -1;
    if (!rs.etag[0]) return anvil_fail("s3: PUT part %d of s3://%s/%s: no ETag in the answer", part, bucket, key);
    snprintf(etag, etag_cap, "%s", rs.etag);
    return 0;
}

int anvil_s3_mpu_complete(anvil_s3 *s, const char *bucket, const char *key, const char *upload_id, int nparts,
                          char *const *etags) {
    size_t cap = 128 + (size_t)nparts * 320, n = 0;
    char *body = malloc(cap), *q = upload_query(0, upload_id);
    if (!body || !q) {
        free(body);
        free(q);
        return anvil_fail("out of memory");
    }
    n += (size_t)snprintf(body + n, cap - n, "<CompleteMultipartUpload>");
    for (int i = 0; i < nparts; i++)
        n += (size_t)snprintf(body + n, cap - n, "<Part><PartNumber>%d</PartNumber><ETag>%.256s</ETag></Part>", i + 1,
                              etags[i]);
    n += (size_t)snprintf(body + n, cap - n, "</CompleteMultipartUpload>");
    request rq = {ANVIL_S3_MULTIPART, "POST", bucket, key, q, body, n, 0, 0, 0, NULL};
    response rs;
    int rc = perform(s, &rq, &rs, 0);
    /* S3 may answer 200 and still fail the completion, with an Error document as the body. */
    char code[128], msg[256];
    if (!rc && rs.answer && !anvil_s3_parse_error(rs.answer, rs.answer_len, code, sizeof code, msg, sizeof msg))
        rc = anvil_fail("s3: POST s3://%s/%s (complete multipart): %s: %s", bucket, key, code, msg);
    free(rs.answer);
    free(body);
    free(q);
    return rc;
}

int anvil_s3_mpu_abort(anvil_s3 *s, const char *bucket, const char *key, const char *upload_id) {
    char *q = upload_query(0, upload_id);
    if (!q) return anvil_fail("out of memory");
    request rq = {ANVIL_S3_MULTIPART, "DELETE", bucket, key, q, NULL, 0, 0, 0, 0, NULL};
    response rs;
    int rc = perform(s, &rq, &rs, 0);
    free(q);
    free(rs.answer);
    return rc;
}

static int pread_all(int fd, char *buf, size_t len, uint64_t off, const char *path) {
    size_t done = 0;
    while (done < len) {
        ssize_t r = pread(fd, buf + done, len - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return anvil_fail("%s: read at offset %" PRIu64 ": %s", path, off + done, strerror(errno));
        if (r == 0) return anvil_fail("%s: shorter than it was at the start of the upload", path);
        done += (size_t)r;
    }
    return 0;
}

int anvil_s3_put_file(anvil_s3 *s, const char *bucket, const char *key, const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return anvil_fail("%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return anvil_fail("%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)sb.st_size;
    size_t part = s->part_size;
    if (size / part >= ANVIL_S3_MAX_PARTS) part = (size_t)((size + ANVIL_S3_MAX_PARTS - 1) / ANVIL_S3_MAX_PARTS);
    char *buf = malloc(size < part ? (size ? size : 1) : part);
    if (!buf) {
        close(fd);
        return anvil_fail("%s: out of memory for a %zu-byte part", path, part);
    }
    int rc;
    if (size <= part) {
        rc = pread_all(fd, buf, (size_t)size, 0, path) || anvil_s3_put(s, bucket, key, buf, (size_t)size) ? -1 : 0;
    } else {
        char *id = NULL;
        int nparts = (int)((size + part - 1) / part);
        char **etags = calloc((size_t)nparts, sizeof *etags);
        rc = etags ? anvil_s3_mpu_create(s, bucket, key, &id) : anvil_fail("out of memory");
        for (int i = 0; !rc && i < nparts; i++) {
            uint64_t off = (uint64_t)i * part;
            size_t n = size - off < part ? (size_t)(size - off) : part;
            char etag[256];
            rc = pread_all(fd, buf, n, off, path) || anvil_s3_mpu_part(s, bucket, key, id, i + 1, buf, n, etag, sizeof etag)
                     ? -1
                     : 0;
            if (!rc && !(etags[i] = strdup(etag))) rc = anvil_fail("out of memory");
        }
        if (!rc) rc = anvil_s3_mpu_complete(s, bucket, key, id, nparts, etags);
        if (rc && id) {
            /* The abort is best effort: the first error is the one to report. */
            char first[1024];
            snprintf(first, sizeof first, "%s", anvil_errmsg());
            anvil_s3_mpu_abort(s, bucket, key, id);
            anvil_fail("%s", first);
        }
        for (int i = 0; etags && i < nparts; i++) free(etags[i]);
        free(etags);
        free(id);
    }
    free(buf);
    close(fd);
    return rc;
}

int anvil_s3_get_file(anvil_s3 *s, const char *bucket, const char *key, const char *path) {
    uint64_t size;
    int h = anvil_s3_head(s, bucket, key, &size);
    if (h < 0) return -1;
    if (h) return anvil_fail("s3: s3://%s/%s: no such object", bucket, key);
    anvil_atomic_file f;
    if (anvil_atomic_open(&f, path)) return -1;
    size_t chunk = s->part_size;
    char *buf = malloc(chunk);
    if (!buf) {
        anvil_atomic_abort(&f);
        return anvil_fail("out of memory");
    }
    int rc = 0;
    for (uint64_t off = 0; !rc && off < size; off += chunk) {
        size_t want = size - off < chunk ? (size_t)(size - off) : chunk, got;
        rc = anvil_s3_get_range(s, bucket, key, off, want, buf, &got);
        if (!rc && got != want)
            rc = anvil_fail("s3: GET s3://%s/%s: the object ended at byte %" PRIu64 ", before its size %" PRIu64, bucket,
                            key, off + got, size);
        if (!rc) rc = anvil_write_all(f.fd, buf, got, path);
    }
    free(buf);
    if (rc) {
        anvil_atomic_abort(&f);
        return -1;
    }
    return anvil_atomic_commit(&f);
}

typedef struct {
    anvil_s3_keep_fn keep;
    void *ctx;
    anvil_s3_list_page *out;
    size_t cap;
} collector;

static int collect_one(void *ctx, const char *key, uint64_t size) {
    collector *c = ctx;
    if (c->keep && !c->keep(c->ctx, key)) return 0;
    char *k = strdup(key);
    if (!k || anvil_s3_list_page_add(c->out, &c->cap, k, size)) {
        free(k);
        return k ? -1 : anvil_fail("out of memory");
    }
    return 0;
}

int anvil_s3_list_collect(anvil_s3 *s3, const char *bucket, const char *prefix, anvil_s3_keep_fn keep, void *ctx,
                          anvil_s3_list_page *out) {
    memset(out, 0, sizeof *out);
    collector c = {keep, ctx, out, 0};
    int rc = anvil_s3_list(s3, bucket, prefix, collect_one, &c);
    if (rc) anvil_s3_list_page_free(out);
    return rc;
}

int anvil_s3_list(anvil_s3 *s, const char *bucket, const char *prefix, anvil_s3_list_fn fn, void *ctx) {
    char *token = NULL, *eprefix = anvil_s3_encode(prefix ? prefix : "", 0);
    if (!eprefix) return anvil_fail("out of memory");
    int rc = 0;
    for (;;) {
        char *etoken = token ? anvil_s3_encode(token, 0) : NULL;
        size_t ql = strlen(eprefix) + (etoken ? strlen(etoken) : 0) + 80;
        char *q = malloc(ql);
        if (!q || (token && !etoken)) {
            free(q);
            free(etoken);
            rc = anvil_fail("out of memory");
            break;
        }
        /* Parameters in byte order of their names, as SigV4's canonical query wants. */
        snprintf(q, ql, "%s%s%slist-type=2&max-keys=1000&prefix=%s", etoken ? "continuation-token=" : "",
                 etoken ? etoken : "", etoken ? "&" : "", eprefix);
        free(etoken);
        request rq = {ANVIL_S3_LIST, "GET", bucket, "", q, NULL, 0, 0, 0, 0, NULL};
        response rs;
        rc = perform(s, &rq, &rs, 0);
        free(q);
        if (rc) break;
        anvil_s3_list_page pg;
        rc = anvil_s3_parse_list(rs.answer ? rs.answer : "", rs.answer_len, &pg);
        free(rs.answer);
        if (rc) break;
        for (size_t i = 0; !rc && i < pg.n; i++) rc = fn(ctx, pg.objects[i].key, pg.objects[i].size);
        free(token);
        token = pg.next_token;
        pg.next_token = NULL;
        anvil_s3_list_page_free(&pg);
        if (rc || !token) break;
    }
    free(token);
    free(eprefix);
    return rc;
}
