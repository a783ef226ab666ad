/* anvil pool: the job service's warm pools (Slurm allocations kept after a job, job/backend.h). */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"

static const char *usage =
    "usage: anvil pool [--state DIR | --url URL] [--token-file F] [--json] <command> ...\n"
    "\n"
    "  list                                   your warm pools (an admin's: all)\n"
    "  release ID                             end warm pool ID now (its allocation goes back to Slurm)\n"
    "\n"
    "A job with keep_alive_s > 0 that completes on the Slurm backend leaves its allocation held for that\n"
    "long; a later job of the same role (else user), hosts and procs_per_host runs in it. ID is the\n"
    "holding Slurm job's ID. Exit status: 0 done, 1 error, 2 bad usage, 4 the daemon refused (one line\n"
    "says why: no such pool, or it has ended).\n";

static int list(const client *cl) {
    cJSON *all;
    int rc = client_call(cl, "GET", "/v1/pools", NULL, &all);
    if (rc) return rc;
    if (cl->json) {
        client_print_json(all);
    } else {
        char t[32];
        printf("%-10s %-11s %-12s %-12s %-6s %-6s %-16s %-6s %s\n", "ID", "STATUS", "USER", "OWNER", "HOSTS", "PROCS",
               "NODES", "JOB", "EXPIRES");
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(all, "pools"))
            printf("%-10s %-11s %-12s %-12s %-6.0f %-6.0f %-16s %-6.0f %s\n", client_str(p, "id"), client_str(p, "status"),
                   client_str(p, "user"), client_str(p, "owner"), client_num(p, "hosts"), client_num(p, "procs_per_host"),
                   client_str(p, "nodes"), client_num(p, "job"), client_when(client_num(p, "expires"), t, sizeof t));
    }
    cJSON_Delete(all);
    return 0;
}

static int release(const client *cl, int argc, char **argv) {
    size_t n = argc == 2 ? strlen(argv[1]) : 0;
    if (!n || n > 20 || argv[1][strspn(argv[1], "0123456789")])
        return cli_usage_error("pool", "release takes one pool ID (a Slurm job ID)");
    char path[64];
    snprintf(path, sizeof path, "/v1/pools/%s/release", argv[1]);
    cJSON *j;
    int rc = client_call(cl, "POST", path, "", &j);
    if (rc) return rc;
    if (cl->json) client_print_json(j);
    else printf("pool %s: %s\n", client_str(j, "id"), client_str(j, "status"));
    cJSON_Delete(j);
    return 0;
}

int cmd_pool(int argc, char **argv) {
    client cl;
    int n, rc = client_open(&cl, "pool", usage, argc, argv, &n);
    if (rc >= 0) return rc;
    if (!n) rc = cli_usage_error("pool", "which command? (list, release)");
    else if (!strcmp(argv[0], "list")) rc = n == 1 ? list(&cl) : cli_usage_error("pool", "list takes no argument");
    else if (!strcmp(argv[0], "release")) rc = release(&cl, n, argv);
    else rc = cli_usage_error("pool", "unknown command '%s'", argv[0]);
    client_close(&cl);
    return rc;
}
