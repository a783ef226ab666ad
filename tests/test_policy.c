/* The job service's principals and policies without a daemon: path normalization (symbolic links
 * resolved before '..', the missing rest taken lexically, dangling links refused), prefixes at
 * component boundaries, a spec checked against a role (what is refused, what is filled in),
 * the environment a job inherits, and tokens (made, checked, wrong, revoked, the last admin's). */
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "job/audit.h"
#include "job/auth.h"
#include "job/hooks.h"
#include "job/policy.h"
#include "job/slurm_internal.h"
#include "testutil.h"

static char dir[64];

static const char *in(const char *leaf) {
    static char path[4][256];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s%s", dir, leaf);
    return p;
}

/* Whether path resolves to dir + want. */
static int resolves(const char *path, const char *want) {
    char out[PATH_MAX];
    if (anvil_path_resolve(path, out, sizeof out)) return 0;
    if (strcmp(out, in(want))) fprintf(stderr, "  %s -> %s, not %s\n", path, out, in(want));
    return !strcmp(out, in(want));
}

static void test_resolve(void) {
    char out[PATH_MAX];
    CHECK(resolves(in("/data/a"), "/data/a"));
    CHECK(resolves(in("/data//a/./"), "/data/a"));
    CHECK(resolves(in("/data/a/../ab"), "/data/ab"));
    CHECK(resolves(in("/data/a/new/deeper"), "/data/a/new/deeper"));
    CHECK(resolves(in("/data/a/new/../../ab/x"), "/data/ab/x"));
    /* The link is followed before '..': out/.. is dir, not data/a. */
    CHECK(resolves(in("/data/a/out"), "/secret"));
    CHECK(resolves(in("/data/a/out/../data"), "/data"));
    CHECK(resolves(in("/data/a/out/../nothing/x"), "/nothing/x"));
    CHECK(anvil_path_resolve("/", out, sizeof out) == 0 && !strcmp(out, "/"));
    CHECK(anvil_path_resolve("/../../etc/./", out, sizeof out) == 0 && !strcmp(out, "/etc"));
    CHECK(anvil_path_resolve("data/a", out, sizeof out) == -1 && strstr(anvil_errmsg(), "not an absolute path"));
    CHECK(anvil_path_resolve(in("/data/a/dangling/x"), out, sizeof out) == -1 &&
          strstr(anvil_errmsg(), "cannot be resolved"));
    CHECK(anvil_path_resolve(in("/data/a/loop"), out, sizeof out) == -1);
    /* The link that cannot be followed is named as given, not where the links before it lead. */
    CHECK(anvil_path_resolve(in("/data/a/out/gone/x"), out, sizeof out) == -1 &&
          strstr(anvil_errmsg(), "/data/a/out/gone cannot be resolved") && !strstr(anvil_errmsg(), "/secret"));
    CHECK(anvil_path_under("/data/a", "/data/a") && anvil_path_under("/data/a/x", "/data/a"));
    CHECK(!anvil_path_under("/data/ab", "/data/a") && !anvil_path_under("/data", "/data/a"));
    CHECK(anvil_path_under("/anything", "/"));
}

static int role_of(const char *json, anvil_role *r) { return anvil_role_parse(json, strlen(json), r); }

/* The last refusal's message. */
static char last_why[2048];

/* 1 when spec (JSON) is refused under role r with a message holding want, 0 when allowed; the
 * checked spec is left in *s when s is not NULL. */
static int refused(const anvil_role *r, const char *json, const char *want, anvil_job_spec *s) {
    anvil_job_spec local;
    anvil_job_spec *sp = s ? s : &local;
    if (anvil_job_spec_parse(json, strlen(json), sp)) {
        fprintf(stderr, "  spec: %s\n", anvil_errmsg());
        return -1;
    }
    char why[2048] = "";
    int rc = anvil_policy_check(r, sp, why, sizeof why);
    snprintf(last_why, sizeof last_why, "%s", why);
    if (rc == 1 && want && !strstr(why, want)) fprintf(stderr, "  refused, but: %s\n", why);
    int out = rc == 1 && (!want || strstr(why, want)) ? 1 : rc == 0 ? 0 : -1;
    if (!s) anvil_job_spec_free(&local);
    return out;
}

static char spec[4096];

/* A spec running train with more arguments (each ", \"arg\"") and more fields (", \"f\": v"). */
static const char *spec_of(const char *args, const char *fields) {
    snprintf(spec, sizeof spec, "{\"name\": \"j\", \"command\": [\"train\"%s]%s}", args, fields);
    return spec;
}

static void test_policy(void) {
    char json[2048], fields[2048];
    anvil_role r;
    snprintf(json, sizeof json,
             "{\"name\": \"t\", \"input_prefixes\": [\"%s\"], \"output_prefixes\": [\"%s\"], \"max_procs\": 2,"
             " \"max_runtime_s\": 60, \"env\": {\"ROLE\": \"yes\"}}",
             in("/data/a"), in("/runs"));
    CHECK(role_of("{\"name\": \"t\", \"input_prefixes\": [\"/\"], \"output_prefixes\": [\"/\"], \"max_procs\": 2}",
                  &r) == -1 &&
          strstr(anvil_errmsg(), "role: max_runtime_s: missing"));
    CHECK(role_of("{\"name\": \"t\", \"input_prefixes\": [], \"output_prefixes\": [\"/\"], \"max_procs\": 1,"
                  " \"max_runtime_s\": 0}",
                  &r) == -1 &&
          strstr(anvil_errmsg(), "input_prefixes: must be an array of 1 to"));
    CHECK(role_of("{\"name\": \"t\", \"input_prefixes\": [\"/\"], \"output_prefixes\": [\"/\"], \"max_procs\": 1,"
                  " \"max_runtime_s\": 0, \"env\": {\"ANVIL_JOB_ID\": \"7\"}}",
                  &r) == -1 &&
          strstr(anvil_errmsg(), "env.ANVIL_JOB_ID"));
    CHECK(role_of(json, &r) == 0 && r.max_procs == 2 && r.nenv == 1);
    CHECK(refused(&r, spec_of("", ""), NULL, NULL) == 0);
    snprintf(fields, sizeof fields, ", \"channels\": {\"c\": \"%s\"}", in("/data/ab"));
    CHECK(refused(&r, spec_of("", fields), "channels.c", NULL) == 1);
    /* Where a link leads is not said: the host's links are not the submitter's to map. */
    snprintf(fields, sizeof fields, ", \"channels\": {\"c\": \"%s\"}", in("/data/a/out/x"));
    CHECK(refused(&r, spec_of("", fields), "/data/a/out/x is outside role t's input prefixes", NULL) == 1 &&
          !strstr(last_why, "/secret") && !strstr(last_why, "resolved"));
    snprintf(fields, sizeof fields, ", \"output\": \"%s\"", in("/data/a/new"));
    CHECK(refused(&r, spec_of("", fields), "output prefixes", NULL) == 1);
    CHECK(refused(&r, spec_of(", \"--init\", \"/etc/passwd\"", ""), "command[2] (--init): /etc/passwd", NULL) == 1);
    CHECK(refused(&r, spec_of(", \"--init\", \"../x\"", ""), "'..'", NULL) == 1);
    CHECK(refused(&r, spec_of(", \"--preset\", \"tiny\", \"--init\", \"sub/x\"", ""), NULL, NULL) == 0);
    CHECK(refused(&r, spec_of("", ", \"resources\": {\"procs_per_host\": 3}"), "max_procs 2", NULL) == 1);
    CHECK(refused(&r, spec_of("", ", \"max_runtime_s\": 61"), "max_runtime_s 60", NULL) == 1);
    CHECK(refused(&r, spec_of("", ", \"env\": {\"ROLE\": \"no\"}"), "env.ROLE: set by role t", NULL) == 1);
    CHECK(refused(&r, spec_of("", ", \"env\": {\"LD_PRELOAD\": \"x\"}"), "env.LD_PRELOAD", NULL) == 1);
    CHECK(refused(&r, spec_of("", ", \"env\": {\"PATH\": \"/x\"}"), "env.PATH", NULL) == 1);
    /* Allowed: the channel and output stored resolved, the runtime and the variables the role's. */
    anvil_job_spec s;
    snprintf(fields, sizeof fields, ", \"channels\": {\"c\": \"%s\"}, \"output\": \"%s\", \"env\": {\"OMP_NUM_THREADS\": \"1\"}",
             in("/data/a/../a/new"), in("/runs/x/../y"));
    CHECK(refused(&r, spec_of(", \"--init\", \"rel/x\"", fields), NULL, &s) == 0);
    CHECK(s.nchannels == 1 && !strcmp(s.channels[0].value, in("/data/a/new")));
    CHECK(s.output && !strcmp(s.output, in("/runs/y")));
    CHECK(s.max_runtime_s == 60);
    CHECK(s.nenv == 2 && !strcmp(s.env[0].key, "OMP_NUM_THREADS") && !strcmp(s.env[1].key, "ROLE"));
    /* The command's paths are stored resolved: the relative --init taken from the output. */
    CHECK(s.argc == 3 && !strcmp(s.argv[2], in("/runs/y/rel/x")));
    anvil_job_spec_free(&s);
    anvil_role_free(&r);
    /* A prefix reached through a link admits the paths it names; a role's runtime 0 is no limit. */
    snprintf(json, sizeof json,
             "{\"name\": \"l\", \"input_prefixes\": [\"%s\"], \"output_prefixes\": [\"/nonexistent\"],"
             " \"max_procs\": 1, \"max_runtime_s\": 0}",
             in("/data/a/out"));
    CHECK(role_of(json, &r) == 0);
    snprintf(fields, sizeof fields, ", \"channels\": {\"c\": \"%s\"}", in("/secret/f"));
    CHECK(refused(&r, spec_of("", fields), NULL, NULL) == 0);
    CHECK(refused(&r, spec_of("", ", \"max_runtime_s\": 1e9"), NULL, NULL) == 0);
    anvil_role_free(&r);
}

static void test_env(void) {
    CHECK(anvil_job_env_inherited("PATH=/bin") && anvil_job_env_inherited("OMPI_MCA_x=1"));
    CHECK(anvil_job_env_inherited("ANVIL_ISA=avx2") && !anvil_job_env_inherited("ANVIL_TOKEN=anv_x"));
    CHECK(!anvil_job_env_inherited("SECRET=1") && !anvil_job_env_inherited("OMP_") &&
          !anvil_job_env_inherited("PATHS=1") && !anvil_job_env_inherited("AWS_SECRET_ACCESS_KEY=x"));
    CHECK(anvil_job_env_allowed("OMP_NUM_THREADS") && anvil_job_env_allowed("ANVIL_ISA") &&
          anvil_job_env_allowed("ANVIL_S3_MAX_ATTEMPTS"));
    /* Whatever decides which programs run, with which libraries, or where data goes. */
    static const char *const never[] = {"OMPI_MCA_orte_fork_agent", "OMPI_MCA_plm_rsh_agent", "OPAL_PREFIX",
                                        "PMIX_MCA_ptl", "SLURM_CONF", "LD_PRELOAD", "LD_LIBRARY_PATH", "PATH",
                                        "BASH_ENV", "ENV", "SHELL", "IFS", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
                                        "AWS_CONFIG_FILE", "ASAN_OPTIONS", "PYTHONPATH", "HOME", "ANVIL_JOB_ID",
                                        "OMP_NUM_THREADSX", "omp_num_threads"};
    for (size_t i = 0; i < sizeof never / sizeof *never; i++) {
        if (anvil_job_env_allowed(never[i])) fprintf(stderr, "  %s is allowed\n", never[i]);
        CHECK(!anvil_job_env_allowed(never[i]));
    }
    char list[512];
    anvil_job_env_allowlist(list, sizeof list);
    CHECK(strstr(list, "OMP_NUM_THREADS, ") == list && strstr(list, "ANVIL_HEALTH_FAULT"));
    CHECK(!anvil_job_env_inherited("ANVIL_JOB_PREFIXES=/") && anvil_job_env_reserved("ANVIL_JOB_PREFIXES"));
    CHECK(anvil_job_env_reserved("ANVIL_CHANNEL_X") && anvil_job_env_reserved("AWS_ACCESS_KEY_ID") &&
          !anvil_job_env_reserved("LD_PRELOAD") && !anvil_job_env_reserved("OMP_NUM_THREADS"));
}

/* The command's arguments as its table says, not as they look: a bare '..', an operand, patterns,
 * keywords, s3:// URIs against the role's S3 prefixes; and the commands a table cannot parse. */
static void test_command(void) {
    char json[2048], fields[2048];
    anvil_role r;
    snprintf(json, sizeof json,
             "{\"name\": \"c\", \"input_prefixes\": [\"%s\", \"s3://corpora/nlp\"], \"output_prefixes\": [\"%s\","
             " \"s3://models/nlp/\"], \"max_procs\": 2, \"max_runtime_s\": 0}",
             in("/data/a"), in("/runs"));
    CHECK(role_of(json, &r) == 0);
    snprintf(fields, sizeof fields, ", \"output\": \"%s\"", in("/runs"));
    /* A bare '..' is a path when the table says so: from the output /runs it is the folder above. */
    CHECK(refused(&r, spec_of(", \"--data\", \"..\"", fields), "command[2] (--data): ", NULL) == 1);
    CHECK(refused(&r, spec_of(", \"--data\", \"..\"", fields), "/runs/.. is outside role c's", NULL) == 1 &&
          !strstr(last_why, "resolved"));
    CHECK(refused(&r, spec_of(", \"--data\", \"..\"", ""), "'..' would leave the job's run folder", NULL) == 1);
    CHECK(refused(&r, spec_of(", \"--resume\", \"auto\"", fields), NULL, NULL) == 0);
    CHECK(refused(&r, spec_of(", \"--resume\", \"..\"", fields), "command[2] (--resume)", NULL) == 1);
    CHECK(refused(&r, spec_of(", \"--profile\", \"p\"", fields), NULL, NULL) == 0);
    /* Written paths need an output prefix; a read one may lie under either. */
    snprintf(json, sizeof json, ", \"--profile\", \"%s\"", in("/data/a/p"));
    CHECK(refused(&r, spec_of(json, fields), "outside role c's output prefixes", NULL) == 1);
    /* An S3 URI is checked against the S3 prefixes, at component boundaries, its key taken literally. */
    CHECK(refused(&r, spec_of(", \"--data\", \"s3://corpora/nlp/set1\"", fields), NULL, NULL) == 0);
    CHECK(refused(&r, spec_of(", \"--data\", \"s3://models/nlp/run1\"", fields), NULL, NULL) == 0);
    CHECK(refused(&r, spec_of(", \"--data\", \"s3://corpora/nlpx\"", fields), "S3 input and output prefixes",
                  NULL) == 1);
    CHECK(refused(&r, spec_of(", \"--data\", \"s3://other/x\"", fields), "outside role c's S3", NULL) == 1);
    CHECK(refused(&r, spec_of(", \"--data\", \"s3://corpora/nlp/../x\"", fields), "no empty, '.' or '..'", NULL) ==
          1);
    CHECK(refused(&r, spec_of(", \"--data\", \"s3://corpora/nlp//x\"", fields), "no empty", NULL) == 1);
    CHECK(refused(&r, spec_of(", \"--ckpt-uri\", \"s3://corpora/nlp/ck\"", fields), "S3 output prefixes (s3://models",
                  NULL) == 1);
    CHECK(refused(&r, spec_of(", \"--ckpt-uri\", \"s3://models/nlp/ck\"", fields), NULL, NULL) == 0);
    CHECK(refused(&r, spec_of(", \"--train\", \"s3://corpora/nlp/train_*.bin\"", fields), NULL, NULL) == 0);
    CHECK(refused(&r, spec_of(", \"--train\", \"s3://corpora/*/train_*.bin\"", fields), "last component", NULL) == 1);
    CHECK(refused(&r, spec_of(", \"--train\", \"s3://corp*\"", fields), "last component", NULL) == 1);
    /* A local pattern: its folder resolved, what it matches now too (data/a/evil_1.bin leads to secret/). */
    snprintf(json, sizeof json, ", \"--train\", \"%s\"", in("/data/a/../a/train_*.bin"));
    anvil_job_spec s;
    CHECK(refused(&r, spec_of(json, fields), NULL, &s) == 0);
    CHECK(s.argc == 3 && !strcmp(s.argv[2], in("/data/a/train_*.bin")));
    anvil_job_spec_free(&s);
    snprintf(json, sizeof json, ", \"--train\", \"%s\"", in("/data/a/evil_*.bin"));
    CHECK(refused(&r, spec_of(json, fields), "/data/a/evil_1.bin is outside role c's", NULL) == 1 &&
          !strstr(last_why, "/secret"));
    snprintf(json, sizeof json, ", \"--val\", \"%s\"", in("/data/*/x.bin"));
    CHECK(refused(&r, spec_of(json, fields), "wildcards in a folder's name", NULL) == 1);
    anvil_role_free(&r);

    /* prep: every operand is an input, '-' standard input; s3:// under no S3 prefix is refused. */
    snprintf(json, sizeof json,
             "{\"name\": \"p\", \"input_prefixes\": [\"%s\"], \"output_prefixes\": [\"%s\"], \"max_procs\": 1,"
             " \"max_runtime_s\": 0}",
             in("/data/a"), in("/runs"));
    CHECK(role_of(json, &r) == 0);
    char spec_text[2048];
    snprintf(spec_text, sizeof spec_text, "{\"name\": \"p\", \"command\": [\"prep\", \"-\", \"%s\", \"/etc/passwd\"]}",
             in("/data/a/x.txt"));
    CHECK(refused(&r, spec_text, "command[3]: /etc/passwd", NULL) == 1);
    CHECK(refused(&r, "{\"name\": \"p\", \"command\": [\"prep\", \"s3://bucket/doc.txt\"]}",
                  "outside role p's S3 input and output prefixes (none)", NULL) == 1);
    CHECK(refused(&r, "{\"name\": \"p\", \"command\": [\"prep\", \"--\", \"--tokenizer\"]}", NULL, NULL) == 0);
    snprintf(spec_text, sizeof spec_text, "{\"name\": \"p\", \"command\": [\"prep\", \"--tokenizer\", \"%s\"]}",
             in("/secret/t"));
    CHECK(refused(&r, spec_text, "command[2] (--tokenizer)", NULL) == 1);
    snprintf(spec_text, sizeof spec_text, "{\"name\": \"e\", \"command\": [\"export\", \"--model\", \"%s\"]}",
             in("/secret/m"));
    CHECK(refused(&r, spec_text, "command[2] (--model)", NULL) == 1);
    anvil_role_free(&r);

    /* What the tables cannot parse never becomes a job. */
    static const char *const bad[][2] = {
        {"[\"train\", \"--frobnicate\", \"1\"]", "unknown option '--frobnicate'"},
        {"[\"train\", \"--steps\"]", "option --steps needs a value"},
        {"[\"train\", \"--steps\", \"many\"]", "--steps expects an integer"},
        {"[\"train\", \"--data-layout\", \"x\"]", "--data-layout must be strided or contiguous"},
        {"[\"train\", \"/etc/passwd\"]", "unexpected argument '/etc/passwd'"},
        {"[\"train\", \"--data=/x\"]", "unknown option '--data=/x'"},
        {"[\"train\", \"--help\"]", "--help asks for the usage text"},
        {"[\"prep\", \"-x\"]", "unknown option '-x'"},
        {"[\"info\"]", "not an anvil subcommand a job can run (train, prep, export)"},
        {"[\"import\", \"--hf\", \"/d\"]", "not an anvil subcommand a job can run"},
        {"[\"train\", \"--out\", \"/x\"]", "--out is not allowed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(spec_text, sizeof spec_text, "{\"name\": \"b\", \"command\": %s}", bad[i][0]);
        CHECK(anvil_job_spec_parse(spec_text, strlen(spec_text), &s) == -1 && strstr(anvil_errmsg(), bad[i][1]));
        if (!strstr(anvil_errmsg(), bad[i][1])) fprintf(stderr, "  %s: %s\n", bad[i][0], anvil_errmsg());
    }
}

/* Control characters, in any path of a spec or a role and wherever a link leads (a batch script's
 * #SBATCH line cannot hold a newline), and the ports below 1024 for --metrics-port. */
static void test_control_and_ports(void) {
    char json[2048], fields[2048];
    anvil_role r;
    snprintf(json, sizeof json,
             "{\"name\": \"k\", \"input_prefixes\": [\"%s\", \"s3://corpora/nlp\"], \"output_prefixes\": [\"%s\"],"
             " \"max_procs\": 1, \"max_runtime_s\": 0}",
             in("/data/a"), in("/runs"));
    CHECK(role_of(json, &r) == 0);
    /* The spec's own strings hold none below 0x20 (job/spec.h); DEL, and where a link leads, are
     * the policy's to refuse. */
    static const char *const leaves[] = {"/runs/nl", "/runs/nl/x", "/runs/d\\u007fx"};
    for (size_t i = 0; i < sizeof leaves / sizeof *leaves; i++) {
        snprintf(fields, sizeof fields, ", \"output\": \"%s\"", in(leaves[i]));
        CHECK(refused(&r, spec_of("", fields), "output: ", NULL) == 1 && strstr(last_why, "control character") &&
              !strchr(last_why, '\n'));
    }
    snprintf(fields, sizeof fields, ", \"output\": \"%s\"", in("/runs"));
    CHECK(refused(&r, spec_of(", \"--init\", \"nl/x\"", fields), "command[2] (--init): ", NULL) == 1 &&
          strstr(last_why, "nl/x leads to a path with a control character"));
    CHECK(refused(&r, spec_of(", \"--init\", \"a\\u007fb\"", ""), "command[2] (--init): a path may not hold a control",
                  NULL) == 1);
    CHECK(refused(&r, spec_of(", \"--data\", \"s3://corpora/nlp/a\\u007fb\"", ""),
                  "command[2] (--data): a path may not", NULL) == 1);
    snprintf(json, sizeof json, ", \"--data\", \"%s\"", in("/data/a/../../runs/nl"));
    CHECK(refused(&r, spec_of(json, fields), "control character", NULL) == 1);
    static const char *const ports[][2] = {{"80", "80 is a privileged port"}, {"1", "1 is a privileged port"},
                                           {"1023", "1023 is a privileged port"}, {"0", NULL}, {"1024", NULL},
                                           {"65535", NULL}};
    for (size_t i = 0; i < sizeof ports / sizeof *ports; i++) {
        snprintf(json, sizeof json, ", \"--metrics-port\", \"%s\"", ports[i][0]);
        CHECK(refused(&r, spec_of(json, ""), ports[i][1], NULL) == (ports[i][1] ? 1 : 0));
    }
    anvil_role_free(&r);
    CHECK(role_of("{\"name\": \"k\", \"input_prefixes\": [\"/data\\u007f\"], \"output_prefixes\": [\"/\"],"
                  " \"max_procs\": 1, \"max_runtime_s\": 0}",
                  &r) == -1 &&
          strstr(anvil_errmsg(), "role: input_prefixes[0]: may not hold a control character"));
}

/* Roles: s3:// prefixes, and no AWS variable of their own (the daemon's --s3-config holds those). */
static void test_roles(void) {
    anvil_role r;
    CHECK(role_of("{\"name\": \"s\", \"input_prefixes\": [\"s3://my-bucket.x/data\"], \"output_prefixes\": [\"/\"],"
                  " \"max_procs\": 1, \"max_runtime_s\": 0}",
                  &r) == 0);
    anvil_role_free(&r);
    static const char *const bad[][2] = {
        {"\"s3://Upper/x\"", "must be s3://BUCKET"},
        {"\"s3://b/x/../y\"", "must be s3://BUCKET"},
        {"\"s3://\"", "must be s3://BUCKET"},
        {"\"relative\"", "must be an absolute path or an s3:// prefix"},
    };
    char json[512];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(json, sizeof json,
                 "{\"name\": \"s\", \"input_prefixes\": [%s], \"output_prefixes\": [\"/\"], \"max_procs\": 1,"
                 " \"max_runtime_s\": 0}",
                 bad[i][0]);
        CHECK(role_of(json, &r) == -1 && strstr(anvil_errmsg(), bad[i][1]));
    }
    CHECK(role_of("{\"name\": \"s\", \"input_prefixes\": [\"/\"], \"output_prefixes\": [\"/\"], \"max_procs\": 1,"
                  " \"max_runtime_s\": 0, \"env\": {\"AWS_ENDPOINT_URL\": \"http://x\"}}",
                  &r) == -1 &&
          strstr(anvil_errmsg(), "env.AWS_ENDPOINT_URL: set by the daemon") && strstr(anvil_errmsg(), "--s3-config"));
}

/* What Slurm makes of a file name pattern with no replacement in it (slurmstepd's fname.c): with a
 * backslash, a doubled one is one and a lone one is dropped, '%' as it stands; else "%%" is '%'. */
static void slurm_expand(const char *pattern, char *out) {
    bool escaped = strchr(pattern, '\\') != NULL;
    for (const char *p = pattern; *p; p++) {
        if (escaped && *p == '\\' && p[1] != '\\') continue;
        *out++ = *p;
        if ((escaped && *p == '\\') || (!escaped && *p == '%' && p[1] == '%')) p++;
    }
    *out = 0;
}

/* sbatch --output's pattern for a run folder: Slurm expands it back to the folder's name, whatever
 * that holds ('%', which once became a replacement; a backslash, which once turned them off). */
static void test_slurm_patterns(void) {
    static const char *const dirs[] = {"/runs/plain-1.x", "/runs/a b#c'd\"e$f`g%j%%N", "/runs/x\\y%j", "/runs/\\\\z"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        char pattern[256], back[256], want[256];
        CHECK(anvil_slurm_file_pattern(dirs[i], "/logs/launcher.log", pattern, sizeof pattern) == 0);
        slurm_expand(pattern, back);
        snprintf(want, sizeof want, "%s/logs/launcher.log", dirs[i]);
        if (strcmp(back, want)) fprintf(stderr, "  %s: the pattern %s expands to %s\n", dirs[i], pattern, back);
        CHECK(!strcmp(back, want));
    }
    char small[8];
    CHECK(anvil_slurm_file_pattern("/runs/%%%%", "", small, sizeof small) == -1 && strstr(anvil_errmsg(), "too long"));
}

/* Hook URLs as libcurl's URL parser reads them: loopback hosts only, nothing before the host. */
static void test_hook_urls(void) {
    static const char *const good[] = {"http://127.0.0.1:9000/x", "http://localhost/", "http://LOCALHOST:1/a?b=c",
                                       "http://[::1]:8080/e", "http://127.1.2.3/", "http://2130706433/"};
    static const char *const bad[][2] = {
        {"http://localhost:junk@127.0.0.1:9/x", "a user name, password"},
        {"http://localhost:80@example.invalid/", "a user name, password"},
        {"http://user@127.0.0.1/", "a user name, password"},
        {"http://:pw@127.0.0.1/", "a user name, password"},
        {"http://127.0.0.1.example.invalid/", "loopback"},
        {"http://example.invalid/", "loopback"},
        {"http://[fe80::1%25lo]/", "loopback"},
        {"http://[::2]/", "loopback"},
        {"https://127.0.0.1/", "only http://"},
        {"file:///etc/passwd", "only http://"},
        {"127.0.0.1:80/x", "not a URL"},
        {"http://127.0.0.1 /x", "not a URL"},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        anvil_hook h = {.kind = ANVIL_HOOK_URL, .target = good[i]};
        if (anvil_hook_check(&h)) fprintf(stderr, "  %s: %s\n", good[i], anvil_errmsg());
        CHECK(anvil_hook_check(&h) == 0);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        anvil_hook h = {.kind = ANVIL_HOOK_URL, .target = bad[i][0]};
        int rc = anvil_hook_check(&h);
        if (!rc || !strstr(anvil_errmsg(), bad[i][1])) fprintf(stderr, "  %s: %s\n", bad[i][0], rc ? anvil_errmsg() : "accepted");
        CHECK(rc == -1 && strstr(anvil_errmsg(), bad[i][1]));
    }
}

/* The number of audit rows after row `after` whose detail starts with prefix (NULL: any). */
static int audit_rows(anvil_store *st, int after, const char *prefix, long *counted) {
    cJSON *o = anvil_audit_list(st, NULL, 100000);
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "audit")) {
        const char *d = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "detail"));
        if (cJSON_GetObjectItemCaseSensitive(e, "id")->valueint <= after || (prefix && !strstr(d, prefix))) continue;
        n++;
        if (counted) *counted += strtol(d, NULL, 10);
    }
    cJSON_Delete(o);
    return n;
}

/* The 401s' rate limit: 10 rows per address per window, the rest counted into one row once the
 * window ends, each address apart up to the table's size, the others together. */
static void test_audit_limiter(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/audit.db", dir);
    anvil_store *st = anvil_store_open(path);
    anvil_audit_limiter *l = anvil_audit_limiter_new();
    CHECK(st && l);
    if (!st || !l) return;
    int taken = 0;
    for (int i = 0; i < 1000; i++) taken += anvil_audit_limiter_take(l, "127.0.0.1", "GET /x: bad token", 100.0 + i * 1e-3);
    CHECK(taken == ANVIL_AUDIT_UNAUTH_ROWS);
    CHECK(anvil_audit_limiter_take(l, "127.0.0.2", "GET /y", 100.5));
    CHECK(anvil_audit_limiter_flush(l, st, 109.9) == 0 && audit_rows(st, 0, NULL, NULL) == 0);
    CHECK(anvil_audit_limiter_flush(l, st, 110.0) == 1);
    long counted = 0;
    CHECK(audit_rows(st, 0, "more unauthenticated requests from 127.0.0.1 in 10 s", &counted) == 1 && counted == 990);
    CHECK(audit_rows(st, 0, "the last: GET /x: bad token", NULL) == 1);
    /* A window over is a new one: its first rows are recorded again. */
    CHECK(anvil_audit_limiter_take(l, "127.0.0.1", "GET /x", 111.0));
    /* Addresses beyond the table share the last window. */
    taken = 0;
    for (int i = 0; i < ANVIL_AUDIT_UNAUTH_ADDRS + 20; i++) {
        char addr[32];
        snprintf(addr, sizeof addr, "127.1.%d.%d", i / 256, i % 256);
        taken += anvil_audit_limiter_take(l, addr, "GET /z", 112.0) + anvil_audit_limiter_take(l, addr, "GET /z", 112.0);
    }
    CHECK(taken == 2 * (ANVIL_AUDIT_UNAUTH_ADDRS - 2) + ANVIL_AUDIT_UNAUTH_ROWS);
    int before = audit_rows(st, 0, NULL, NULL);
    counted = 0;
    CHECK(anvil_audit_limiter_flush(l, st, INFINITY) == 1);
    CHECK(audit_rows(st, 0, "more unauthenticated requests from other addresses", &counted) == 1 &&
          counted == 2 * 22 - ANVIL_AUDIT_UNAUTH_ROWS && audit_rows(st, 0, NULL, NULL) == before + 1);
    anvil_audit_limiter_free(l);
    anvil_store_close(st);
}

static void test_tokens(void) {
    char path[128], admin[ANVIL_TOKEN_SIZE], alice[ANVIL_TOKEN_SIZE], again[ANVIL_TOKEN_SIZE], header[128];
    snprintf(path, sizeof path, "%s/state.db", dir);
    anvil_store *st = anvil_store_open(path);
    CHECK(st != NULL);
    if (!st) return;
    anvil_audit_entry e = {.user = "test", .action = "test", .result = 201};
    anvil_principal who;
    char why[256];
    int n = -1;
    CHECK(anvil_auth_user_count(st, &n) == 0 && n == 0);
    CHECK(anvil_auth_init(st, "admin", admin) == 0 && strlen(admin) == ANVIL_TOKEN_SIZE - 1);
    CHECK(anvil_auth_init(st, "admin", again) == 1);
    CHECK(anvil_auth_add_user(st, "alice", false, &e, alice) == 0 && strcmp(admin, alice));
    CHECK(anvil_auth_add_user(st, "alice", true, &e, again) == 1);
    snprintf(header, sizeof header, "Bearer %s", alice);
    CHECK(anvil_auth_check(st, header, &who, why, sizeof why) == 0 && !strcmp(who.user, "alice") && !who.admin &&
          !strncmp(who.token_id, alice + 4, ANVIL_TOKEN_ID_LEN));
    snprintf(header, sizeof header, "bearer   %s ", admin);
    CHECK(anvil_auth_check(st, header, &who, why, sizeof why) == 0 && !strcmp(who.user, "admin") && who.admin);
    snprintf(header, sizeof header, "Bearer %s", alice);
    char *last = header + strlen(header) - 1;
    *last = *last == '0' ? '1' : '0';
    CHECK(anvil_auth_check(st, header, &who, why, sizeof why) == 1 && strstr(why, "wrong secret") &&
          !who.user[0] && who.token_id[0]);
    CHECK(anvil_auth_check(st, NULL, &who, why, sizeof why) == 1 && strstr(why, "no Authorization"));
    CHECK(anvil_auth_check(st, "Basic YTpi", &who, why, sizeof why) == 1);
    CHECK(anvil_auth_check(st, "Bearer anv_zz", &who, why, sizeof why) == 1 && strstr(why, "not an anvil token"));
    char id[ANVIL_TOKEN_ID_LEN + 1], *user = NULL;
    snprintf(id, sizeof id, "%.16s", alice + 4);
    CHECK(anvil_auth_revoke(st, id, &e, &user) == 0 && user && !strcmp(user, "alice"));
    free(user);
    CHECK(anvil_auth_revoke(st, id, &e, &user) == 2 && !user);
    snprintf(header, sizeof header, "Bearer %s", alice);
    CHECK(anvil_auth_check(st, header, &who, why, sizeof why) == 1 && strstr(why, "revoked"));
    snprintf(id, sizeof id, "%.16s", admin + 4);
    CHECK(anvil_auth_revoke(st, id, &e, &user) == 3);
    CHECK(anvil_auth_add_token(st, "admin", &e, again) == 0 && anvil_auth_revoke(st, id, &e, &user) == 0);
    free(user);
    CHECK(anvil_auth_add_token(st, "nobody", &e, again) == 1);
    CHECK(anvil_auth_revoke(st, "0000000000000000", &e, &user) == 1);
    anvil_store_close(st);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/anvil-test-policy-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char target[300];
    static const char *const dirs[] = {"/data", "/data/a", "/data/ab", "/secret", "/runs"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) CHECK(mkdir(in(dirs[i]), 0755) == 0);
    snprintf(target, sizeof target, "%s", in("/secret"));
    CHECK(symlink(target, in("/data/a/out")) == 0);
    CHECK(symlink(in("/nowhere/file"), in("/data/a/dangling")) == 0);
    CHECK(symlink(in("/data/a/loop"), in("/data/a/loop")) == 0);
    FILE *f = fopen(in("/data/a/train_1.bin"), "w");
    CHECK(f && fclose(f) == 0);
    f = fopen(in("/secret/shard"), "w");
    CHECK(f && fclose(f) == 0);
    CHECK(symlink(in("/secret/shard"), in("/data/a/evil_1.bin")) == 0);
    CHECK(symlink(in("/nowhere"), in("/secret/gone")) == 0);
    CHECK(mkdir(in("/runs/a\nb"), 0755) == 0 && symlink(in("/runs/a\nb"), in("/runs/nl")) == 0);
    test_resolve();
    test_policy();
    test_env();
    test_command();
    test_control_and_ports();
    test_roles();
    test_hook_urls();
    test_slurm_patterns();
    test_audit_limiter();
    test_tokens();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return t_done("test_policy");
}
