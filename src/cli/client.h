/* The job service's client side, shared by `anvil job`, `anvil user`, `anvil token` and
 * `anvil role`: finding the daemon, the caller's token, one HTTP request (libcurl). */
#ifndef ANVIL_CLI_CLIENT_H
#define ANVIL_CLI_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

typedef struct {
    const char *cmd; /* "job", "user", ...: the prefix of error lines */
    char url[512];
    const char *state; /* --state DIR as given, NULL for the default (cli_state_dir) */
    char *token; /* malloc'd; never printed */
    bool json;
    bool curl; /* libcurl initialized */
} client;

typedef struct {
    char *data;
    size_t len;
} client_buffer;

/* Takes the options every client command shares out of argv[1..argc) (only those before a '--'):
 * --state DIR, --url URL, --token-file F, --json, --help (prints usage). The rest stays in
 * argv[0..*n). Then finds the daemon (--url, else DIR/serve.port) and the token: --token-file F,
 * else $ANVIL_TOKEN, else ~/.config/anvil/token. Returns -1 to go on, else the exit status (0
 * after --help). */
int client_open(client *cl, const char *cmd, const char *usage, int argc, char **argv, int *n);
void client_close(client *cl);
/* The daemon's URL again, from its state folder's serve.port (a daemon started anew may listen on
 * another port); -1 after anvil_fail. */
int client_find_daemon(client *cl);

/* One request; *code the HTTP status. -1 with a message when the daemon cannot be reached. */
int client_http(const client *cl, const char *method, const char *path, const char *body, long *code,
                client_buffer *out);
/* A GET of url itself, with no token (a service other than the daemon); -1 with a message when it
 * cannot be reached. */
int client_get_url(const char *url, long *code, client_buffer *out);
/* The JSON answer of a request, or the exit status when there is none to show: 4 for a refusal
 * (its one-line reason printed), 1 for a daemon that cannot be reached or failed. */
int client_call(const client *cl, const char *method, const char *path, const char *body, cJSON **answer);
/* Prints the daemon's error line of a failed answer; returns the exit status (4 for a 4xx, else 1). */
int client_refused(const client *cl, long code, const char *answer);

/* A field of an answer, or "" / 0. */
const char *client_str(const cJSON *o, const char *k);
double client_num(const cJSON *o, const char *k);
/* Seconds since the epoch as "YYYY-MM-DD HH:MM:SSZ" ("-" for 0) in buf. */
const char *client_when(double t, char *buf, size_t cap);
void client_print_json(const cJSON *j);

#endif
