/* anvil user, anvil token, anvil role, anvil quota: managing the job service's principals and
 * policies (admins only; `anvil role list` and `anvil quota` also show a user their own). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/exit.h"

#define COMMON_OPTIONS                                                                                     \
    "Options of every command: --state DIR | --url URL (the daemon: DIR/serve.port, default\n"           \
    "~/.local/share/anvil), --token-file F (else $ANVIL_TOKEN, else ~/.config/anvil/token), --json (the\n" \
    "daemon's answer as is). Exit status: 0 done, 1 error, 2 bad usage, 4 refused by the daemon.\n"

static const char *user_usage =
    "usage: anvil user add NAME [--admin]   a user and its first token, printed once on stdout\n"
    "       anvil user list                 users, their roles and token IDs\n"
    "\n" COMMON_OPTIONS;

static const char *token_usage =
    "usage: anvil token add USER            a new token for USER, printed once on stdout\n"
    "       anvil token revoke TOKEN_ID     the token stops working (the ID: anvil user list)\n"
    "\n" COMMON_OPTIONS;

static const char *role_usage =
    "usage: anvil role add NAME --input-prefix P [--input-prefix P ...] --output-prefix P [...]\n"
    "                     --max-procs N --max-runtime-s S [--env NAME=VALUE ...]\n"
    "       anvil role grant ROLE USER      USER may submit jobs under ROLE\n"
    "       anvil role list                 roles (a user who is not an admin: their own)\n"
    "\n"
    "A job under a role reads and writes only under its prefixes (absolute; '..' and symbolic links\n"
    "are resolved before the check), starts at most N processes, runs at most S seconds (0: no\n"
    "limit) and gets the role's variables in its environment.\n"
    "\n" COMMON_OPTIONS;

static const char *quota_usage =
    "usage: anvil quota                     quotas with their usage (a user who is not an admin: their\n"
    "                                       own and their roles')\n"
    "       anvil quota set (--user U | --role R) [--running-jobs N] [--hosts N] [--procs N]\n"
    "                       [--max-runtime-s S]\n"
    "\n"
    "A user's quota bounds their jobs together, a role's every job under it: jobs not ended, the hosts\n"
    "and processes they hold, and the largest max_runtime_s one may ask for. A limit left out is none;\n"
    "set with none at all removes the quota. A submission over one is refused at once (HTTP 429,\n"
    "ResourceLimitExceeded, naming the quota and its figures), never held. The hosts in use include\n"
    "those that warm pools of the user's or role's jobs hold (Slurm backend), shown as \"(N warm)\".\n"
    "\n" COMMON_OPTIONS;

/* Posts body (taken over) to path; prints the new token alone on stdout (or the JSON answer). */
static int post(const client *cl, const char *path, cJSON *body, bool token, cJSON **answer) {
    char *text = body ? cJSON_PrintUnformatted(body) : NULL;
    cJSON_Delete(body);
    if (!text) {
        anvil_fail("out of memory");
        return cli_fail(cl->cmd);
    }
    int rc = client_call(cl, "POST", path, text, answer);
    free(text);
    if (rc) return rc;
    if (cl->json) client_print_json(*answer);
    else if (token) printf("%s\n", client_str(*answer, "token"));
    if (token && !cl->json)
        fprintf(stderr, "anvil %s: token %s of user %s, shown this once: keep it (e.g. in ~/.config/anvil/token)\n",
                cl->cmd, client_str(*answer, "token_id"), client_str(*answer, "user"));
    return 0;
}

static int user_add(const client *cl, int argc, char **argv) {
    const char *name = NULL;
    bool admin = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--admin")) admin = true;
        else if (!name && argv[i][0] != '-') name = argv[i];
        else return cli_usage_error("user", "add: unexpected '%s'", argv[i]);
    }
    if (!name) return cli_usage_error("user", "add needs a NAME");
    cJSON *body = cJSON_CreateObject(), *answer = NULL;
    if (body) cJSON_AddStringToObject(body, "name", name), cJSON_AddBoolToObject(body, "admin", admin);
    int rc = post(cl, "/v1/users", body, true, &answer);
    cJSON_Delete(answer);
    return rc;
}

/* The strings of an array joined by ", " into buf ("-" when empty). */
static const char *joined(const cJSON *arr, char *buf, size_t cap) {
    buf[0] = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        const char *s = cJSON_IsString(e) ? e->valuestring : client_str(e, "id");
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", s);
    }
    return buf[0] ? buf : "-";
}

static int user_list(const client *cl) {
    cJSON *all;
    int rc = client_call(cl, "GET", "/v1/users", NULL, &all);
    if (rc) return rc;
    if (cl->json) {
        client_print_json(all);
    } else {
        printf("%-16s %-5s %-30s %s\n", "NAME", "ADMIN", "ROLES", "TOKENS (valid)");
        const cJSON *u;
        cJSON_ArrayForEach(u, cJSON_GetObjectItemCaseSensitive(all, "users")) {
            cJSON *live = cJSON_CreateArray();
            const cJSON *t;
            cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(u, "tokens")) {
                if (client_num(t, "revoked_at") == 0) cJSON_AddItemToArray(live, cJSON_CreateString(client_str(t, "id")));
            }
            char roles[1024], tokens[1024];
            printf("%-16s %-5s %-30s %s\n", client_str(u, "name"),
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(u, "admin")) ? "yes" : "no",
                   joined(cJSON_GetObjectItemCaseSensitive(u, "roles"), roles, sizeof roles),
                   joined(live, tokens, sizeof tokens));
            cJSON_Delete(live);
        }
    }
    cJSON_Delete(all);
    return 0;
}

int cmd_user(int argc, char **argv) {
    client cl;
    int n, rc = client_open(&cl, "user", user_usage, argc, argv, &n);
    if (rc >= 0) return rc;
    if (!n) rc = cli_usage_error("user", "which command? (add, list)");
    else if (!strcmp(argv[0], "add")) rc = user_add(&cl, n, argv);
    else if (!strcmp(argv[0], "list")) rc = n == 1 ? user_list(&cl) : cli_usage_error("user", "list takes no argument");
    else rc = cli_usage_error("user", "unknown command '%s'", argv[0]);
    client_close(&cl);
    return rc;
}

int cmd_token(int argc, char **argv) {
    client cl;
    int n, rc = client_open(&cl, "token", token_usage, argc, argv, &n);
    if (rc >= 0) return rc;
    cJSON *answer = NULL;
    if (n != 2 || (strcmp(argv[0], "add") && strcmp(argv[0], "revoke"))) {
        rc = cli_usage_error("token", "give 'add USER' or 'revoke TOKEN_ID'");
    } else if (!strcmp(argv[0], "add")) {
        cJSON *body = cJSON_CreateObject();
        if (body) cJSON_AddStringToObject(body, "user", argv[1]);
        rc = post(&cl, "/v1/tokens", body, true, &answer);
    } else if (strlen(argv[1]) > 64 || strchr(argv[1], '/') || strchr(argv[1], '?')) {
        rc = cli_usage_error("token", "revoke: '%s' is not a token ID (16 hex digits)", argv[1]);
    } else {
        char path[128];
        snprintf(path, sizeof path, "/v1/tokens/%s/revoke", argv[1]);
        rc = post(&cl, path, cJSON_CreateObject(), false, &answer);
        if (!rc && !cl.json)
            printf("revoked token %s of user %s\n", client_str(answer, "token_id"), client_str(answer, "user"));
    }
    cJSON_Delete(answer);
    client_close(&cl);
    return rc;
}

/* Adds value to the array field of o, creating it. */
static void append(cJSON *o, const char *field, const char *value) {
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, field);
    if (!arr) arr = cJSON_AddArrayToObject(o, field);
    if (arr) cJSON_AddItemToArray(arr, cJSON_CreateString(value));
}

static int role_add(const client *cl, int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-') return cli_usage_error("role", "add needs a NAME");
    cJSON *r = cJSON_CreateObject(), *env = NULL;
    if (!r) {
        anvil_fail("out of memory");
        return cli_fail("role");
    }
    cJSON_AddStringToObject(r, "name", argv[1]);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = arg_value("role", argc, argv, &i);
        int procs;
        double secs;
        if (!v) return cJSON_Delete(r), ANVIL_EXIT_USAGE;
        if (!strcmp(a, "--input-prefix")) append(r, "input_prefixes", v);
        else if (!strcmp(a, "--output-prefix")) append(r, "output_prefixes", v);
        else if (!strcmp(a, "--max-procs") && !arg_int("role", a, v, 1, 1 << 20, &procs))
            cJSON_AddNumberToObject(r, "max_procs", procs);
        else if (!strcmp(a, "--max-runtime-s") && !arg_double("role", a, v, &secs))
            cJSON_AddNumberToObject(r, "max_runtime_s", secs);
        else if (!strcmp(a, "--env") && strchr(v, '=') && strchr(v, '=') != v) {
            if (!env) env = cJSON_AddObjectToObject(r, "env");
            char *key = strndup(v, strcspn(v, "="));
            if (key) cJSON_AddStringToObject(env, key, strchr(v, '=') + 1);
            free(key);
        } else {
            cJSON_Delete(r);
            if (!strcmp(a, "--env")) return cli_usage_error("role", "add: --env takes NAME=VALUE");
            return strcmp(a, "--max-procs") && strcmp(a, "--max-runtime-s")
                       ? cli_usage_error("role", "add: unknown option '%s'", a)
                       : ANVIL_EXIT_USAGE;
        }
    }
    static const char *const needed[][2] = {{"input_prefixes", "--input-prefix"},
                                            {"output_prefixes", "--output-prefix"},
                                            {"max_procs", "--max-procs"},
                                            {"max_runtime_s", "--max-runtime-s"}};
    for (size_t k = 0; k < sizeof needed / sizeof *needed; k++)
        if (!cJSON_GetObjectItemCaseSensitive(r, needed[k][0])) {
            cJSON_Delete(r);
            return cli_usage_error("role", "add: %s is required", needed[k][1]);
        }
    cJSON *answer = NULL;
    int rc = post(cl, "/v1/roles", r, false, &answer);
    if (!rc && !cl->json) printf("added role %s\n", client_str(answer, "name"));
    cJSON_Delete(answer);
    return rc;
}

static int role_list(const client *cl) {
    cJSON *all;
    int rc = client_call(cl, "GET", "/v1/roles", NULL, &all);
    if (rc) return rc;
    if (cl->json) {
        client_print_json(all);
    } else {
        const cJSON *r;
        cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(all, "roles")) {
            char in[2048], out[2048], users[1024], env[2048] = "";
            const cJSON *e;
            cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(r, "env")) {
                size_t len = strlen(env);
                snprintf(env + len, sizeof env - len, "%s%s=%s", len ? " " : "", e->string,
                         cJSON_IsString(e) ? e->valuestring : "");
            }
            printf("%s: max_procs %.0f, max_runtime_s %g%s\n  input:  %s\n  output: %s\n  env:    %s\n  users:  %s\n",
                   client_str(r, "name"), client_num(r, "max_procs"), client_num(r, "max_runtime_s"),
                   client_num(r, "max_runtime_s") == 0 ? " (no limit)" : "",
                   joined(cJSON_GetObjectItemCaseSensitive(r, "input_prefixes"), in, sizeof in),
                   joined(cJSON_GetObjectItemCaseSensitive(r, "output_prefixes"), out, sizeof out), env[0] ? env : "-",
                   joined(cJSON_GetObjectItemCaseSensitive(r, "users"), users, sizeof users));
        }
    }
    cJSON_Delete(all);
    return 0;
}

static int quota_set(const client *cl, int argc, char **argv) {
    cJSON *q = cJSON_CreateObject();
    if (!q) {
        anvil_fail("out of memory");
        return cli_fail("quota");
    }
    static const char *const limits[][2] = {{"--running-jobs", "running_jobs"}, {"--hosts", "hosts"},
                                            {"--procs", "procs"},               {"--max-runtime-s", "max_runtime_s"}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = arg_value("quota", argc, argv, &i);
        if (!v) return cJSON_Delete(q), ANVIL_EXIT_USAGE;
        size_t k = 0;
        while (k < 4 && strcmp(a, limits[k][0])) k++;
        double d;
        if (!strcmp(a, "--user") || !strcmp(a, "--role")) {
            cJSON_AddStringToObject(q, a + 2, v);
        } else if (k < 4 && !arg_double("quota", a, v, &d)) {
            cJSON_AddNumberToObject(q, limits[k][1], d);
        } else {
            cJSON_Delete(q);
            return k < 4 ? ANVIL_EXIT_USAGE : cli_usage_error("quota", "set: unknown option '%s'", a);
        }
    }
    cJSON *answer = NULL;
    int rc = post(cl, "/v1/quotas", q, false, &answer);
    if (!rc && !cl->json) printf("quota set\n");
    cJSON_Delete(answer);
    return rc;
}

static int quota_list(const client *cl) {
    cJSON *all;
    int rc = client_call(cl, "GET", "/v1/quotas", NULL, &all);
    if (rc) return rc;
    if (cl->json) {
        client_print_json(all);
    } else {
        printf("%-24s %-14s %-14s %-14s %s\n", "QUOTA", "RUNNING JOBS", "HOSTS", "PROCS", "MAX RUNTIME S");
        const cJSON *q;
        cJSON_ArrayForEach(q, cJSON_GetObjectItemCaseSensitive(all, "quotas")) {
            const cJSON *lim = cJSON_GetObjectItemCaseSensitive(q, "limits"),
                        *use = cJSON_GetObjectItemCaseSensitive(q, "usage");
            char who[80], cells[3][80], rt[32];
            bool role = cJSON_GetObjectItemCaseSensitive(q, "role") != NULL;
            snprintf(who, sizeof who, "%s %s", role ? "role" : "user", client_str(q, role ? "role" : "user"));
            static const char *const keys[] = {"running_jobs", "hosts", "procs"};
            for (int k = 0; k < 3; k++) {
                const cJSON *l = cJSON_GetObjectItemCaseSensitive(lim, keys[k]);
                double warm = k == 1 ? client_num(use, "warm_pool_hosts") : 0;
                char used[48];
                /* The hosts in use include those the warm pools hold, which are named. */
                if (warm > 0) snprintf(used, sizeof used, "%g (%g warm)", client_num(use, keys[k]), warm);
                else snprintf(used, sizeof used, "%g", client_num(use, keys[k]));
                if (cJSON_IsNumber(l)) snprintf(cells[k], sizeof cells[k], "%s / %g", used, l->valuedouble);
                else snprintf(cells[k], sizeof cells[k], "%s / -", used);
            }
            const cJSON *l = cJSON_GetObjectItemCaseSensitive(lim, "max_runtime_s");
            if (cJSON_IsNumber(l)) snprintf(rt, sizeof rt, "%g", l->valuedouble);
            else snprintf(rt, sizeof rt, "-");
            printf("%-24s %-14s %-14s %-14s %s\n", who, cells[0], cells[1], cells[2], rt);
        }
    }
    cJSON_Delete(all);
    return 0;
}

int cmd_quota(int argc, char **argv) {
    client cl;
    int n, rc = client_open(&cl, "quota", quota_usage, argc, argv, &n);
    if (rc >= 0) return rc;
    if (!n) rc = quota_list(&cl);
    else if (!strcmp(argv[0], "set")) rc = quota_set(&cl, n, argv);
    else rc = cli_usage_error("quota", "unknown command '%s' (none, or set)", argv[0]);
    client_close(&cl);
    return rc;
}

int cmd_role(int argc, char **argv) {
    client cl;
    int n, rc = client_open(&cl, "role", role_usage, argc, argv, &n);
    if (rc >= 0) return rc;
    if (!n) {
        rc = cli_usage_error("role", "which command? (add, grant, list)");
    } else if (!strcmp(argv[0], "add")) {
        rc = role_add(&cl, n, argv);
    } else if (!strcmp(argv[0], "list")) {
        rc = n == 1 ? role_list(&cl) : cli_usage_error("role", "list takes no argument");
    } else if (!strcmp(argv[0], "grant")) {
        char path[128];
        if (n != 3 || strlen(argv[1]) > 64 || strchr(argv[1], '/') || strchr(argv[1], '?')) {
            rc = cli_usage_error("role", "grant takes ROLE USER");
        } else {
            snprintf(path, sizeof path, "/v1/roles/%s/grant", argv[1]);
            cJSON *body = cJSON_CreateObject(), *answer = NULL;
            if (body) cJSON_AddStringToObject(body, "user", argv[2]);
            rc = post(&cl, path, body, false, &answer);
            if (!rc && !cl.json) printf("granted role %s to %s\n", argv[1], argv[2]);
            cJSON_Delete(answer);
        }
    } else {
        rc = cli_usage_error("role", "unknown command '%s'", argv[0]);
    }
    client_close(&cl);
    return rc;
}
