/* An S3 client on libcurl, for AWS and S3-compatible stores (path-style
 * addressing): ranged GET, HEAD, PUT, multipart upload, ListObjectsV2 and
 * DELETE, signed with SigV4 by curl (CURLOPT_AWS_SIGV4).
 *
 * Credentials, region and endpoint come from where the AWS tools take them:
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else the
 * profile AWS_PROFILE (or "default") of ~/.aws/credentials
 * (AWS_SHARED_CREDENTIALS_FILE); AWS_REGION / AWS_DEFAULT_REGION, else the
 * profile's region in ~/.aws/config (AWS_CONFIG_FILE), else us-east-1;
 * AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else the profile's endpoint_url,
 * else https://s3.REGION.amazonaws.com. No secret is ever put in a message.
 *
 * Retries: a request that fails with 500, 502, 503 (SlowDown), 504, 408 or
 * 429, or with a connection reset, refused connection or timeout, is tried
 * again after a random wait in [0, min(cap, base * 2^attempt)] ("full
 * jitter"), up to a limit of attempts; every retry is counted. Any other
 * status is final: one line naming the operation, bucket, key, HTTP status
 * and the S3 error Code. A GET that breaks off mid-body continues from the
 * byte it reached.
 *
 * A client may be used from several threads at once: each request takes a
 * curl handle (with its open connection) from the client's pool. */
#ifndef ANVIL_S3_S3_H
#define ANVIL_S3_S3_H

#include <stddef.h>
#include <stdint.h>

typedef struct anvil_s3 anvil_s3;

/* The retry policy's defaults; ANVIL_S3_MAX_ATTEMPTS, ANVIL_S3_RETRY_BASE_MS and
 * ANVIL_S3_RETRY_CAP_MS override them. */
#define ANVIL_S3_MAX_ATTEMPTS 8
#define ANVIL_S3_RETRY_BASE_MS 100
#define ANVIL_S3_RETRY_CAP_MS 20000
/* Multipart part size (ANVIL_S3_PART_SIZE overrides it); S3 refuses parts under 5 MiB but the last. */
#define ANVIL_S3_PART_SIZE (16u << 20)
#define ANVIL_S3_MIN_PART_SIZE (5u << 20)
#define ANVIL_S3_MAX_PARTS 10000

enum { ANVIL_S3_GET, ANVIL_S3_HEAD, ANVIL_S3_PUT, ANVIL_S3_LIST, ANVIL_S3_DELETE, ANVIL_S3_MULTIPART, ANVIL_S3_NOPS };

/* Counters since anvil_s3_open. Requests count every attempt, retries included. */
typedef struct {
    uint64_t requests[ANVIL_S3_NOPS];
    uint64_t retries, bytes_down, bytes_up;
    double p50_ms, p99_ms; /* request latency, from a histogram of 1 ms .. 100 s */
} anvil_s3_stats;

/* Reads credentials, region and endpoint from the environment and the AWS files; NULL after
 * anvil_fail when no credentials are found or a setting is malformed. */
anvil_s3 *anvil_s3_open(void);
void anvil_s3_close(anvil_s3 *s3);
void anvil_s3_get_stats(anvil_s3 *s3, anvil_s3_stats *out);
/* "requests get=N head=N ... retries=N bytes_down=N bytes_up=N p50_ms=X p99_ms=X", one line. */
void anvil_s3_format_stats(const anvil_s3_stats *st, char *out, size_t cap);

/* 1 when path starts with "s3://". */
int anvil_s3_is_uri(const char *path);
/* Splits "s3://bucket/key" into malloc'd bucket and key (key may be ""); -1 after anvil_fail. */
int anvil_s3_parse_uri(const char *uri, char **bucket, char **key);

/* Reads len bytes at off into buf (a Range GET; resumed where a broken body stopped). *got is
 * the number read, less than len only at the end of the object. */
int anvil_s3_get_range(anvil_s3 *s3, const char *bucket, const char *key, uint64_t off, size_t len, void *buf,
                       size_t *got);
/* Size of an object: 0 with *size, 1 when there is no such object, -1 after anvil_fail. */
int anvil_s3_head(anvil_s3 *s3, const char *bucket, const char *key, uint64_t *size);
int anvil_s3_put(anvil_s3 *s3, const char *bucket, const char *key, const void *data, size_t len);
int anvil_s3_delete(anvil_s3 *s3, const char *bucket, const char *key);

/* Multipart upload: parts are numbered from 1; etag receives the part's ETag (quotes kept). */
int anvil_s3_mpu_create(anvil_s3 *s3, const char *bucket, const char *key, char **upload_id);
int anvil_s3_mpu_part(anvil_s3 *s3, const char *bucket, const char *key, const char *upload_id, int part,
                      const void *data, size_t len, char *etag, size_t etag_cap);
int anvil_s3_mpu_complete(anvil_s3 *s3, const char *bucket, const char *key, const char *upload_id, int nparts,
                          char *const *etags);
int anvil_s3_mpu_abort(anvil_s3 *s3, const char *bucket, const char *key, const char *upload_id);

/* Uploads a local file: one PUT up to the part size, multipart above it (aborted on failure). */
int anvil_s3_put_file(anvil_s3 *s3, const char *bucket, const char *key, const char *path);
/* Downloads an object into path, atomically, with ranged GETs of the part size. */
int anvil_s3_get_file(anvil_s3 *s3, const char *bucket, const char *key, const char *path);

/* Calls fn for every object under prefix, in key order, following continuation tokens; a
 * nonzero return from fn stops the listing and is returned. */
typedef int (*anvil_s3_list_fn)(void *ctx, const char *key, uint64_t size);
int anvil_s3_list(anvil_s3 *s3, const char *bucket, const char *prefix, anvil_s3_list_fn fn, void *ctx);

/* Sequential reading of one object for the data loader: ranged GETs of `range` bytes on block
 * boundaries, each block fetched once, up to `inflight` GETs at once (its own threads, started at
 * the first read), keeping ANVIL_S3_READ_AHEAD blocks past the caller's queued while each read
 * continues where the last one ended (after a jump, only the blocks the read needs). The first
 * read (a shard's header) reads only its block; the second reads ahead wherever it lands, as the
 * start of the caller's reading. One block ahead is 16 MiB, minutes of tokens for a training
 * rank; deeper, a job's ranks that reach a new shard together would each queue that many GETs
 * at once (ARCHITECTURE.md, request rates at scale). */
#define ANVIL_S3_READ_RANGE (16u << 20)
#define ANVIL_S3_MIN_READ_RANGE (4u << 20)
#define ANVIL_S3_READ_INFLIGHT 4
#define ANVIL_S3_READ_AHEAD 1
typedef struct anvil_s3_reader anvil_s3_reader;
anvil_s3_reader *anvil_s3_reader_open(anvil_s3 *s3, const char *bucket, const char *key, uint64_t size, size_t range,
                                      int inflight);
/* Bytes [off, off+len) of the object into buf; -1 after anvil_fail (a GET that failed past its
 * retries, or a range outside the object). */
int anvil_s3_reader_read(anvil_s3_reader *r, uint64_t off, size_t len, void *buf);
void anvil_s3_reader_close(anvil_s3_reader *r);

/* The objects under prefix that keep(ctx, key) accepts (keep NULL: all), in key order, collected
 * into out's objects and n (free with anvil_s3_list_page_free); -1 after anvil_fail. */
typedef struct anvil_s3_list_page anvil_s3_list_page;
typedef int (*anvil_s3_keep_fn)(void *ctx, const char *key);
int anvil_s3_list_collect(anvil_s3 *s3, const char *bucket, const char *prefix, anvil_s3_keep_fn keep, void *ctx,
                          anvil_s3_list_page *out);

/* --- The parsers behind the client, public for their tests and fuzz target. --- */

/* Percent-encodes s as SigV4 wants: every byte but A-Z a-z 0-9 - _ . ~ becomes %XX (upper-case),
 * and '/' too unless keep_slash. Returns a malloc'd string. */
char *anvil_s3_encode(const char *s, int keep_slash);

/* The value of key in [section] of an INI text (~/.aws/credentials, ~/.aws/config): 1 when found
 * (copied, truncated to cap), 0 when not. */
int anvil_s3_ini_get(const char *text, size_t len, const char *section, const char *key, char *out, size_t cap);

/* <Error><Code> and <Message> of an S3 error body: 0 when a Code was found. */
int anvil_s3_parse_error(const char *xml, size_t len, char *code, size_t code_cap, char *msg, size_t msg_cap);
/* <UploadId> of InitiateMultipartUploadResult: a malloc'd string, or -1 after anvil_fail. */
int anvil_s3_parse_upload_id(const char *xml, size_t len, char **upload_id);

typedef struct {
    char *key;
    uint64_t size;
} anvil_s3_object;
struct anvil_s3_list_page {
    anvil_s3_object *objects;
    size_t n;
    int truncated;
    char *next_token; /* NULL when not truncated */
};
/* One ListObjectsV2 page; -1 after anvil_fail (malformed XML, a Size that is not a number, a
 * truncated page without a continuation token). */
int anvil_s3_parse_list(const char *xml, size_t len, anvil_s3_list_page *page);
void anvil_s3_list_page_free(anvil_s3_list_page *page);
/* Appends an object (key taken over, freed with the page) to a page of *cap slots, growing it; -1
 * after anvil_fail (the key is then the caller's). */
int anvil_s3_list_page_add(anvil_s3_list_page *page, size_t *cap, char *key, uint64_t size);

#endif
