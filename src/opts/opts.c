#include "opts/opts.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/strbuf.h"
#include "core/suggest.h"

int anvil_opt_i64(const char *opt, const char *val, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (errno || end == val || *end) return anvil_fail("%s expects an integer, got '%s'", opt, val);
    if (v < lo || v > hi) return anvil_fail("%s must be in %lld..%lld, got %lld", opt, (long long)lo, (long long)hi, v);
    *out = v;
    return 0;
}

int anvil_opt_double(const char *opt, const char *val, double *out) {
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (errno || end == val || *end || !isfinite(v)) return anvil_fail("%s expects a finite number, got '%s'", opt, val);
    *out = v;
    return 0;
}

int anvil_opt_float(const char *opt, const char *val, float *out) {
    double v = 0;
    if (anvil_opt_double(opt, val, &v)) return -1;
    if (!isfinite((float)v)) return anvil_fail("%s is out of range for a float: '%s'", opt, val);
    *out = (float)v;
    return 0;
}

bool anvil_opt_is_choice(const anvil_opt *opt, const char *value, int *index) {
    size_t n = strlen(value);
    int k = 0;
    for (const char *p = opt->choices; p && *p; k++) {
        size_t len = strcspn(p, "|");
        if (len == n && !strncmp(p, value, n)) {
            if (index) *index = k;
            return true;
        }
        p += len + (p[len] == '|');
    }
    return false;
}

const anvil_opt *anvil_opts_find(const anvil_optset *set, const char *name) {
    for (int i = 0; i < set->nopts; i++)
        if (!strcmp(set->opts[i].name, name)) return &set->opts[i];
    return NULL;
}

/* The value of opt, converted into a as its kind says. */
static int convert(const anvil_opt *opt, const char *v, anvil_opt_arg *a) {
    a->text = v;
    switch (opt->kind) {
    case ANVIL_OPT_INT:
    case ANVIL_OPT_I64:
        if (opt->choices && anvil_opt_is_choice(opt, v, &a->choice)) return 0;
        a->choice = -1;
        return anvil_opt_i64(opt->name, v, opt->lo, opt->hi, &a->i);
    case ANVIL_OPT_FLOAT: {
        float f = 0;
        if (anvil_opt_float(opt->name, v, &f)) return -1;
        a->d = f;
        return 0;
    }
    case ANVIL_OPT_DOUBLE:
        return anvil_opt_double(opt->name, v, &a->d);
    case ANVIL_OPT_ENUM:
        if (anvil_opt_is_choice(opt, v, &a->choice)) return 0;
        return anvil_fail(opt->invalid ? opt->invalid : "unexpected value '%s'", v);
    default:
        return 0;
    }
}

/* The error for an option no table row names, with the nearest one that does. */
static int unknown_option(const anvil_optset *set, const char *s) {
    const char **names = malloc(sizeof *names * (size_t)(set->nopts > 0 ? set->nopts : 1));
    if (!names) return anvil_fail("unknown option '%s'", s);
    for (int i = 0; i < set->nopts; i++) names[i] = set->opts[i].name;
    const char *near = anvil_suggest(s, names, set->nopts);
    int rc = near ? anvil_fail("unknown option '%s' (did you mean %s?)", s, near) : anvil_fail("unknown option '%s'", s);
    free(names);
    return rc;
}

static bool is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

/* One argument at argv[*i] (advancing *i past its value): an option, or an operand. */
static int take(const anvil_optset *set, int argc, char *const *argv, int *i, bool operands_only, anvil_opt_arg *a) {
    const char *s = argv[*i];
    *a = (anvil_opt_arg){.id = -1, .argi = *i, .text = s};
    bool operand = operands_only || (set->operand && (s[0] != '-' || !strcmp(s, "-")));
    if (operand) return 0;
    if (!set->operand && strncmp(s, "--", 2)) return anvil_fail("unexpected argument '%s'", s);
    const anvil_opt *opt = anvil_opts_find(set, s);
    if (!opt) return unknown_option(set, s);
    a->id = (int)(opt - set->opts);
    a->text = NULL;
    if (opt->kind == ANVIL_OPT_FLAG) return 0;
    if (*i + 1 >= argc) return anvil_fail("option %s needs a value", s);
    a->argi = ++*i;
    return convert(opt, argv[*i], a);
}

int anvil_opts_parse(const anvil_optset *set, int argc, char *const *argv, anvil_opt_fn fn, void *ctx) {
    bool operands_only = false;
    for (int i = 1; i < argc; i++) {
        if (!operands_only && is_help(argv[i])) return 1;
        if (!operands_only && set->operand && !strcmp(argv[i], "--")) {
            operands_only = true;
            continue;
        }
        anvil_opt_arg a;
        if (take(set, argc, argv, &i, operands_only, &a) || fn(ctx, &a)) return -1;
    }
    return 0;
}

typedef struct {
    anvil_opt_arg *args;
    int n;
} collected;

static int collect(void *ctx, const anvil_opt_arg *a) {
    collected *c = ctx;
    c->args[c->n++] = *a;
    return 0;
}

int anvil_opts_collect(const anvil_optset *set, int argc, char *const *argv, anvil_opt_arg **args, int *nargs) {
    collected c = {calloc(argc > 0 ? (size_t)argc : 1, sizeof *c.args), 0};
    *args = NULL;
    *nargs = 0;
    if (!c.args) return anvil_fail("out of memory");
    int rc = anvil_opts_parse(set, argc, argv, collect, &c);
    if (rc) {
        free(c.args);
        return rc;
    }
    *args = c.args;
    *nargs = c.n;
    return 0;
}

/* Appends text's lines, the first after what is on the line already, each later one at column. */
static void put_lines(anvil_strbuf *b, const char *text, int column) {
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        anvil_strbuf_printf(b, "%.*s\n", (int)len, p);
        p += len + (p[len] == '\n');
        if (*p) anvil_strbuf_printf(b, "%*s", column, "");
    }
}

char *anvil_opts_usage(const anvil_optset *set) {
    anvil_strbuf b = {0};
    anvil_strbuf_puts(&b, set->intro);
    for (int i = 0; i < set->nopts; i++) {
        const anvil_opt *o = &set->opts[i];
        if (o->heading) anvil_strbuf_printf(&b, "%s\n", o->heading);
        int width = (int)(2 + strlen(o->name) + (o->metavar ? 1 + strlen(o->metavar) : 0));
        anvil_strbuf_printf(&b, "  %s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
        if (!o->help) {
            anvil_strbuf_putc(&b, '\n');
        } else {
            /* A name too long for the column puts its help on the next line. */
            if (width + 2 > set->column) anvil_strbuf_printf(&b, "\n%*s", set->column, "");
            else anvil_strbuf_printf(&b, "%*s", set->column - width, "");
            put_lines(&b, o->help, set->column);
        }
        if (o->note) put_lines(&b, o->note, 0);
    }
    if (set->outro) anvil_strbuf_puts(&b, set->outro);
    if (b.oom) {
        anvil_strbuf_free(&b);
        return NULL;
    }
    return b.s;
}
