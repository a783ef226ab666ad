/* The option tables (opts/opts.h, opts/tables.h): the parser's rules (values, flags, operands, "--",
 * --help, the errors' wording, the conversions' ranges), the usage text made from a table, and the
 * tables themselves: every option has a kind, a value's name and help, the usage lists every one,
 * and each command the job service runs has exactly one --out, its run folder. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/suggest.h"
#include "model/model.h"
#include "opts/tables.h"
#include "testutil.h"

enum { T_NUM, T_LAYOUT, T_FLAG, T_PATH, T_N };
static const anvil_opt t_opts[] = {
    [T_NUM] = {.name = "--num", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 1, .hi = 9, .heading = "group:",
               .help = "a number\nof two lines"},
    [T_LAYOUT] = {.name = "--layout", .kind = ANVIL_OPT_ENUM, .metavar = "L", .choices = "a|bb",
                  .invalid = "--layout must be a or bb, not '%s'", .help = "a choice"},
    [T_FLAG] = {.name = "--a-rather-long-flag", .kind = ANVIL_OPT_FLAG, .help = "help on the next line",
                .note = "  a note\n"},
    [T_PATH] = {.name = "--path", .kind = ANVIL_OPT_PATH_IN, .metavar = "P", .choices = "auto"},
};
static const anvil_optset t_set = {.command = "t", .intro = "usage: t\n", .opts = t_opts, .nopts = T_N,
                                   .column = 16, .outro = "end\n"};
static const anvil_optset t_operands = {.command = "t", .intro = "", .opts = t_opts, .nopts = T_N, .column = 16,
                                        .operand = &(const anvil_opt){.name = "FILE", .kind = ANVIL_OPT_URI_IN}};

/* Parses the space-separated words of line (argv[0] "t" is added); the result of the parse, with
 * what it took as "id=text" words in *taken. */
static char taken[512];
static int parse(const anvil_optset *set, const char *line) {
    char buf[512], *argv[32] = {"t"};
    int argc = 1;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *w = strtok(buf, " "); w && argc < 32; w = strtok(NULL, " ")) argv[argc++] = strcmp(w, "''") ? w : "";
    anvil_opt_arg *args;
    int n;
    int rc = anvil_opts_collect(set, argc, argv, &args, &n);
    taken[0] = 0;
    for (int i = 0; !rc && i < n; i++) {
        size_t len = strlen(taken);
        snprintf(taken + len, sizeof taken - len, "%s%d=%s", i ? " " : "", args[i].id, args[i].text ? args[i].text : "");
    }
    if (!rc) free(args);
    return rc;
}

static void test_parse(void) {
    CHECK(parse(&t_set, "--num 3 --a-rather-long-flag --num 4") == 0 && !strcmp(taken, "0=3 2= 0=4"));
    CHECK(parse(&t_set, "--layout bb --path auto") == 0 && !strcmp(taken, "1=bb 3=auto"));
    /* A value is the next argument, whatever it looks like. */
    CHECK(parse(&t_set, "--path --num") == 0 && !strcmp(taken, "3=--num"));
    CHECK(parse(&t_set, "--num") == -1 && !strcmp(anvil_errmsg(), "option --num needs a value"));
    CHECK(parse(&t_set, "--num x") == -1 && !strcmp(anvil_errmsg(), "--num expects an integer, got 'x'"));
    CHECK(parse(&t_set, "--num 10") == -1 && !strcmp(anvil_errmsg(), "--num must be in 1..9, got 10"));
    CHECK(parse(&t_set, "--layout c") == -1 && !strcmp(anvil_errmsg(), "--layout must be a or bb, not 'c'"));
    CHECK(parse(&t_set, "--bogus 1") == -1 && !strcmp(anvil_errmsg(), "unknown option '--bogus'"));
    CHECK(parse(&t_set, "--num=3") == -1 && !strcmp(anvil_errmsg(), "unknown option '--num=3' (did you mean --num?)"));
    /* The nearest option when it is near enough to be a typo (a swap, a letter missing or added). */
    CHECK(parse(&t_set, "--nmu 3") == -1 && !strcmp(anvil_errmsg(), "unknown option '--nmu' (did you mean --num?)"));
    CHECK(parse(&t_set, "--layuot a") == -1 && !strcmp(anvil_errmsg(), "unknown option '--layuot' (did you mean --layout?)"));
    CHECK(parse(&t_set, "--a-rather-lng-flag") == -1 &&
          !strcmp(anvil_errmsg(), "unknown option '--a-rather-lng-flag' (did you mean --a-rather-long-flag?)"));
    CHECK(parse(&t_set, "x") == -1 && !strcmp(anvil_errmsg(), "unexpected argument 'x'"));
    CHECK(parse(&t_set, "-x") == -1 && !strcmp(anvil_errmsg(), "unexpected argument '-x'"));
    /* --help wins unless an error comes first. */
    CHECK(parse(&t_set, "--num 3 --help --bogus") == 1 && parse(&t_set, "-h") == 1);
    CHECK(parse(&t_set, "--bogus --help") == -1);
    /* Operands: what does not start with '-', '-' itself, and everything after "--". */
    CHECK(parse(&t_operands, "a - --num 2 b -- --num -h") == 0 && !strcmp(taken, "-1=a -1=- 0=2 -1=b -1=--num -1=-h"));
    CHECK(parse(&t_operands, "-x") == -1 && !strcmp(anvil_errmsg(), "unknown option '-x'"));
    int64_t v;
    double d;
    float f;
    CHECK(anvil_opt_i64("--n", "9223372036854775807", 0, INT64_MAX, &v) == 0 && v == INT64_MAX);
    CHECK(anvil_opt_i64("--n", "9223372036854775808", 0, INT64_MAX, &v) == -1);
    CHECK(anvil_opt_double("--x", "1e999", &d) == -1 && strstr(anvil_errmsg(), "expects a finite number"));
    CHECK(anvil_opt_double("--x", "nan", &d) == -1);
    CHECK(anvil_opt_float("--x", "1e39", &f) == -1 && !strcmp(anvil_errmsg(), "--x is out of range for a float: '1e39'"));
    CHECK(anvil_opt_float("--x", "6e-4", &f) == 0 && f == 6e-4f);
}

static void test_usage(void) {
    char *u = anvil_opts_usage(&t_set);
    CHECK(u && !strcmp(u, "usage: t\n"
                          "group:\n"
                          "  --num N       a number\n"
                          "                of two lines\n"
                          "  --layout L    a choice\n"
                          "  --a-rather-long-flag\n"
                          "                help on the next line\n"
                          "  a note\n"
                          "  --path P\n"
                          "end\n"));
    if (u) printf("%s", u);
    free(u);
}

/* Every table: kinds and values named, the usage lists each option, one --out run folder each. */
static void test_tables(void) {
    const anvil_optset *sets[] = {&anvil_train_cmdline, &anvil_prep_cmdline, &anvil_export_cmdline,
                                  &anvil_import_cmdline};
    for (size_t k = 0; k < sizeof sets / sizeof *sets; k++) {
        const anvil_optset *s = sets[k];
        char *u = anvil_opts_usage(s);
        CHECK(u != NULL);
        int run_folders = 0;
        for (int i = 0; u && i < s->nopts; i++) {
            const anvil_opt *o = &s->opts[i];
            char line[128];
            snprintf(line, sizeof line, "\n  %s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
            if (!o->name || !o->help || (o->kind != ANVIL_OPT_FLAG) != (o->metavar != NULL) || !strstr(u, line))
                fprintf(stderr, "  %s %s: bad entry or not in the usage\n", s->command, o->name ? o->name : "(none)");
            CHECK(o->name && o->help && (o->kind != ANVIL_OPT_FLAG) == (o->metavar != NULL) && strstr(u, line));
            CHECK(anvil_opts_find(s, o->name) == o);
            run_folders += o->run_folder;
            if (o->run_folder) CHECK(!strcmp(o->name, "--out"));
        }
        const anvil_optset *job = anvil_opts_job_command(s->command);
        CHECK(job == (run_folders == 1 ? s : NULL));
        free(u);
    }
    char names[128];
    anvil_opts_job_commands(names, sizeof names);
    CHECK(!strcmp(names, "train, prep, export"));
    CHECK(!anvil_opts_job_command("info") && !anvil_opts_job_command("serve") && !anvil_opts_job_command("import"));
}

/* anvil_suggest's distance (optimal string alignment) and its cut-off: at most a third of the longer
 * name apart; and the train command's table, with the preset names, as a user meets them. */
static void test_suggest(void) {
    const char *names[] = {"--val-every", "--val-steps", "--steps", "--seed"};
    CHECK(anvil_suggest("--val-evry", names, 4) == names[0]);   /* a letter missing */
    CHECK(anvil_suggest("--val-evrey", names, 4) == names[0]);  /* two letters swapped: 1 */
    CHECK(anvil_suggest("--stesp", names, 4) == names[2]);
    CHECK(anvil_suggest("--sede", names, 4) == names[3]);
    CHECK(anvil_suggest("--steps", names, 4) == NULL);          /* a name itself is no typo */
    CHECK(anvil_suggest("--frobnicate", names, 4) == NULL);
    CHECK(anvil_suggest("--v", names, 4) == NULL);              /* 8 off: far past a third */
    char *argv[] = {"train", "--val-evry", "5"};
    CHECK(anvil_opts_parse(&anvil_train_cmdline, 3, argv, NULL, NULL) == -1 &&
          !strcmp(anvil_errmsg(), "unknown option '--val-evry' (did you mean --val-every?)"));
    anvil_model_config c;
    CHECK(anvil_model_preset("gpt2-medum", &c) == -1 && strstr(anvil_errmsg(), "(did you mean gpt2-medium? known: "));
    CHECK(anvil_model_preset("quite-unlike-any", &c) == -1 && !strstr(anvil_errmsg(), "did you mean"));
}

/* train --preset's help names every preset of the registry, a line per family in the registry's order:
 * the table cannot ask the registry (src/opts/train.c), so a preset added there must be added here. */
static void test_preset_help(void) {
    const anvil_opt *o = anvil_opts_find(&anvil_train_cmdline, "--preset");
    char want[1024] = "the model, by family (default tiny; 'anvil info' shows the shapes):";
    const char *name;
    const anvil_model_family *f, *last = NULL;
    for (int i = 0; anvil_model_preset_at(i, &name, &f); i++) {
        size_t n = strlen(want);
        if (f != last) snprintf(want + n, sizeof want - n, "\n%s: %s", anvil_model_family_name(f), name);
        else snprintf(want + n, sizeof want - n, ", %s", name);
        last = f;
    }
    CHECK(o && o->help && strstr(want, "\nllama: llama-tiny, "));
    if (o && o->help && strcmp(o->help, want))
        t_fail(__FILE__, __LINE__, "--preset's help is\n%s\nbut the registry has\n%s", o->help, want);
}

int main(void) {
    test_parse();
    test_preset_help();
    test_suggest();
    test_usage();
    test_tables();
    return t_done("test_opts");
}
