/* Command lines described by tables.
 *
 * A subcommand's options are one table (opts/tables.h): each entry names an option, says whether it
 * takes a value and of what kind, and carries its help text. The CLI parses its arguments with the
 * table and prints the usage text made from it; the job service parses a job's command with the
 * same table (job/policy.h), so that it knows which arguments name files and objects, and refuses
 * a command the table does not parse. Parsing prints nothing: a refusal is one line through
 * anvil_fail, the same line the CLI prints as its usage error.
 *
 * What the parser accepts: "--name VALUE" (the next argument, whatever it is) and "--name" for a
 * flag; "--help" or "-h" anywhere asks for the usage text; options may repeat and come in any
 * order, and the caller takes them in order (so the last of a repeated one wins, as before). A
 * command with operands (positional arguments) takes every argument that does not start with '-',
 * and "-" itself; "--" makes every argument after it an operand. */
#ifndef ANVIL_OPTS_OPTS_H
#define ANVIL_OPTS_OPTS_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
    ANVIL_OPT_FLAG,     /* takes no value */
    ANVIL_OPT_INT,      /* a decimal integer in [lo, hi] (an int) */
    ANVIL_OPT_I64,      /* a decimal integer in [lo, hi] */
    ANVIL_OPT_FLOAT,    /* a finite number that a float holds */
    ANVIL_OPT_DOUBLE,   /* a finite number */
    ANVIL_OPT_ENUM,     /* one of choices */
    ANVIL_OPT_TEXT,     /* text that names no file and no object */
    ANVIL_OPT_PATH_IN,  /* a file or folder of this machine that the command reads */
    ANVIL_OPT_PATH_OUT, /* ... that it writes */
    ANVIL_OPT_URI_IN,   /* a local path or an s3://bucket/key URI that the command reads */
    ANVIL_OPT_URI_OUT,  /* ... that it writes */
    ANVIL_OPT_GLOB_IN,  /* files the command reads, local or on S3, named by a pattern whose wildcards
                           (* ? [) are in its last component only */
} anvil_opt_kind;

typedef struct {
    const char *name;    /* "--data"; an operand's name in messages ("FILE") */
    anvil_opt_kind kind;
    const char *metavar; /* the value as the usage shows it: "DIR" */
    const char *help;    /* lines separated by '\n'; NULL: none */
    int64_t lo, hi;      /* INT, I64 */
    /* ENUM: the choices, '|'-separated ("strided|contiguous"). The path kinds: values that are
     * keywords, not paths ("auto" for train --resume, "-" for standard input). INT and I64: words
     * taken besides numbers ("auto" for train --ckpt-every). */
    const char *choices;
    const char *invalid; /* ENUM: the message for another value, with one %s for it */
    const char *heading; /* a line the usage prints before the option ("data:") */
    const char *note;    /* lines the usage prints after it, as they are */
    /* The command's --out when the job service runs it: the daemon gives it the job's run folder,
     * and a job's command may not. Only commands with such an option can run as jobs. */
    bool run_folder;
} anvil_opt;

typedef struct {
    const char *command; /* "train" */
    const char *intro;   /* the usage text before the options */
    const anvil_opt *opts;
    int nopts;
    const char *outro;      /* after them; NULL: nothing */
    int column;             /* where the options' help text starts */
    const anvil_opt *operand; /* the kind of every operand; NULL: the command takes none */
} anvil_optset;

/* One argument as parsed. */
typedef struct {
    int id;           /* the option's index in its table; -1 for an operand */
    int argi;         /* where it is in argv (the value's place for an option with one) */
    const char *text; /* the value, or the operand; NULL for a flag */
    int64_t i;        /* INT, I64 */
    double d;         /* FLOAT, DOUBLE */
    int choice;       /* ENUM, and INT or I64 given a word: the index of the value among the choices (-1: a number) */
} anvil_opt_arg;

/* Parses argv[1..argc) (argv[0] is the command), calling fn with each argument in order; fn returns
 * 0 to go on, or -1 after anvil_fail to stop with that usage error. 0 when every argument was taken;
 * 1 when --help or -h came before any error; -1 after anvil_fail with the usage error, one line
 * without the command's name ("unknown option '--x'"). */
typedef int (*anvil_opt_fn)(void *ctx, const anvil_opt_arg *a);
int anvil_opts_parse(const anvil_optset *set, int argc, char *const *argv, anvil_opt_fn fn, void *ctx);
/* anvil_opts_parse into *args (malloc'd, *nargs of them, in order; NULL unless it returns 0). */
int anvil_opts_collect(const anvil_optset *set, int argc, char *const *argv, anvil_opt_arg **args, int *nargs);
/* The usage text, malloc'd; NULL when out of memory. */
char *anvil_opts_usage(const anvil_optset *set);
/* The option of the table named name, or NULL. */
const anvil_opt *anvil_opts_find(const anvil_optset *set, const char *name);
/* Whether value is one of the choices (or keywords) of opt. */
bool anvil_opt_is_choice(const anvil_opt *opt, const char *value, int *index);

/* The conversions the parser makes, for commands that parse by hand: -1 after anvil_fail naming opt
 * and the value ("--steps expects an integer, got 'x'", "--steps must be in 1..1073741824, got 0",
 * "--lr expects a finite number, got 'x'", "--lr is out of range for a float: '1e39'"). */
int anvil_opt_i64(const char *opt, const char *val, int64_t lo, int64_t hi, int64_t *out);
int anvil_opt_double(const char *opt, const char *val, double *out);
int anvil_opt_float(const char *opt, const char *val, float *out);

#endif
