#include "cli/client.h"

#include <ctype.h>
#include <curl/curl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/exit.h"
#include "core/fsutil.h"
#include "core/json.h"

static size_t collect(char *p, size_t size, size_t n, void *cls) {
    client_buffer *b = cls;
    char *grown = realloc(b->data, b->len + size * n + 1);
    if (!grown) return 0;
    memcpy(grown + b->len, p, size * n);
    b->data = grown;
    b->len += size * n;
    b->data[b->len] = 0;
    return size * n;
}

/* One request of method to url with headers hdr and body (NULL: none) into out (set here); the curl
 * code, CURLE_OUT_OF_MEMORY when out cannot be made. */
static CURLcode perform(const char *url, const char *method, struct curl_slist *hdr, const char *body, long *code,
                        client_buffer *out) {
    out->data = calloc(1, 1);
    out->len = 0;
    CURL *h = out->data ? curl_easy_init() : NULL;
    if (!h) return CURLE_OUT_OF_MEMORY;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
    curl_easy_cleanup(h);
    return rc;
}

int client_http(const client *cl, const char *method, const char *path, const char *body, long *code,
                client_buffer *out) {
    char url[1024];
    snprintf(url, sizeof url, "%s%s", cl->url, path);
    size_t alen = strlen(cl->token) + 32;
    char *auth = malloc(alen);
    if (!auth) {
        out->data = NULL;
        return anvil_fail("out of memory");
    }
    snprintf(auth, alen, "Authorization: Bearer %s", cl->token);
    struct curl_slist *hdr = curl_slist_append(NULL, auth);
    if (body) hdr = curl_slist_append(hdr, "Content-Type: application/json");
    CURLcode rc = perform(url, method, hdr, body, code, out);
    curl_slist_free_all(hdr);
    memset(auth, 0, alen);
    free(auth);
    if (rc == CURLE_OUT_OF_MEMORY) return anvil_fail("out of memory");
    if (rc != CURLE_OK) return anvil_fail("%s: %s (is anvil serve running?)", url, curl_easy_strerror(rc));
    return 0;
}

int client_get_url(const char *url, long *code, client_buffer *out) {
    CURLcode rc = perform(url, "GET", NULL, NULL, code, out);
    if (rc == CURLE_OUT_OF_MEMORY) return anvil_fail("out of memory");
    return rc == CURLE_OK ? 0 : anvil_fail("%s: %s", url, curl_easy_strerror(rc));
}

int client_refused(const client *cl, long code, const char *answer) {
    cJSON *j = anvil_json_parse_str(answer);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    fprintf(stderr, "anvil %s: error: %s (HTTP %ld)\n", cl->cmd, cJSON_IsString(e) ? e->valuestring : "bad answer",
            code);
    cJSON_Delete(j);
    return code >= 400 && code < 500 ? ANVIL_EXIT_REFUSED : ANVIL_EXIT_ERROR;
}

int client_call(const client *cl, const char *method, const char *path, const char *body, cJSON **answer) {
    long code = 0;
    client_buffer b;
    *answer = NULL;
    if (client_http(cl, method, path, body, &code, &b)) {
        free(b.data);
        return cli_fail(cl->cmd);
    }
    cJSON *j = code < 400 ? anvil_json_parse_str(b.data) : NULL;
    int rc = j ? 0 : client_refused(cl, code, b.data);
    free(b.data);
    *answer = j;
    return rc;
}

const char *client_str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

double client_num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

const char *client_when(double t, char *buf, size_t cap) {
    if (t <= 0) return "-";
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(buf, cap, "%Y-%m-%d %H:%M:%SZ", &tm);
    return buf;
}

void client_print_json(const cJSON *j) {
    char *t = cJSON_Print(j);
    if (t) puts(t);
    free(t);
}

/* --state DIR's serve.port, as http://127.0.0.1:PORT. */
int client_find_daemon(client *cl) {
    char *dir = cli_state_dir(cl->state), path[PATH_MAX], *text = NULL;
    size_t len;
    if (!dir) return anvil_fail("out of memory");
    snprintf(path, sizeof path, "%s/serve.port", dir);
    free(dir);
    if (anvil_read_file_max(path, 32, &text, &len))
        return anvil_fail("%s: no daemon's port (is anvil serve running? or give --url)", path);
    int port = atoi(text);
    free(text);
    if (port <= 0 || port > 65535) return anvil_fail("%s: not a port number", path);
    snprintf(cl->url, sizeof cl->url, "http://127.0.0.1:%d", port);
    return 0;
}

/* The token: from the file given, else $ANVIL_TOKEN, else ~/.config/anvil/token. */
static int find_token(const char *file, client *cl) {
    const char *env = getenv("ANVIL_TOKEN"), *home = getenv("HOME");
    char path[PATH_MAX];
    if (!file && env && *env) {
        cl->token = strdup(env);
    } else {
        if (!file) {
            snprintf(path, sizeof path, "%s/.config/anvil/token", home && *home ? home : ".");
            file = path;
        }
        size_t len;
        if (anvil_read_file_max(file, 4096, &cl->token, &len)) {
            char why[512];
            snprintf(why, sizeof why, "%s", anvil_errmsg());
            return anvil_fail("no token: %s (set ANVIL_TOKEN, give --token-file, or keep the token that anvil serve "
                              "--init or anvil user add printed in ~/.config/anvil/token)",
                              why);
        }
    }
    if (!cl->token) return anvil_fail("out of memory");
    size_t n = strlen(cl->token);
    while (n && isspace((unsigned char)cl->token[n - 1])) cl->token[--n] = 0;
    for (size_t i = 0; i < n; i++)
        if (!isgraph((unsigned char)cl->token[i]))
            return anvil_fail("the token (from %s) holds a space or a control character", file ? file : "ANVIL_TOKEN");
    return 0;
}

int client_open(client *cl, const char *cmd, const char *usage, int argc, char **argv, int *n) {
    memset(cl, 0, sizeof *cl);
    cl->cmd = cmd;
    const char *state = NULL, *url = NULL, *token_file = NULL;
    *n = 0;
    bool past = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!past && !strcmp(a, "--")) past = true;
        if (!past && (!strcmp(a, "--help") || !strcmp(a, "-h"))) {
            fputs(usage, stdout);
            return 0;
        } else if (!past && !strcmp(a, "--json")) {
            cl->json = true;
        } else if (!past && (!strcmp(a, "--state") || !strcmp(a, "--url") || !strcmp(a, "--token-file"))) {
            const char *v = arg_value(cmd, argc, argv, &i);
            if (!v) return ANVIL_EXIT_USAGE;
            *(a[2] == 's' ? &state : a[2] == 'u' ? &url : &token_file) = v;
        } else {
            argv[(*n)++] = argv[i];
        }
    }
    cl->state = state;
    if (url) snprintf(cl->url, sizeof cl->url, "%s", url);
    else if (client_find_daemon(cl)) return cli_fail(cmd);
    if (find_token(token_file, cl)) {
        client_close(cl);
        return cli_fail(cmd);
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    cl->curl = true;
    return -1;
}

void client_close(client *cl) {
    if (cl->curl) curl_global_cleanup();
    if (cl->token) memset(cl->token, 0, strlen(cl->token));
    free(cl->token);
    cl->token = NULL;
    cl->curl = false;
}
