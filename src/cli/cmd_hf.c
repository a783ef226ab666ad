/* anvil export / anvil import: Hugging Face folders of every family (GPT2LMHeadModel, LlamaForCausalLM). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/checkpoint.h"
#include "ckpt/hf.h"
#include "ckpt/model_file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/s3path.h"
#include "core/error.h"
#include "data/bytetok.h"
#include "obs/metrics.h"
#include "opts/tables.h"
#include "tok/tokenizer.h"

static const anvil_device cpu = {ANVIL_DEVICE_CPU, 0};

typedef struct {
    const char *in, *out;
    int show_progress;
} hf_args;

static int take(void *ctx, const anvil_opt_arg *a) {
    hf_args *h = ctx;
    switch ((enum anvil_hf_opt)a->id) {
    case ANVIL_HF_IN: h->in = a->text; break;
    case ANVIL_HF_OUT: h->out = a->text; break;
    case ANVIL_HF_NO_PROGRESS: h->show_progress = 0; break;
    case ANVIL_HF_NOPTS: break;
    }
    return 0;
}

/* Parses "--model/--hf X --out Y [--no-progress]" with the command's table; returns -1 for done (help
 * printed: *rc 0) or a usage error. */
static int two_paths(const anvil_optset *set, int argc, char **argv, hf_args *h, int *rc) {
    *h = (hf_args){.show_progress = 1};
    int parsed = anvil_opts_parse(set, argc, argv, take, h);
    if (parsed == 1) {
        char *usage = anvil_opts_usage(set);
        fputs(usage ? usage : "out of memory\n", stdout);
        free(usage);
        *rc = usage ? 0 : 1;
        return -1;
    }
    if (parsed) {
        *rc = cli_usage_error(set->command, "%s", anvil_errmsg());
        return -1;
    }
    if (!h->in || !h->out) {
        *rc = cli_usage_error(set->command, "%s and --out are required", set->opts[ANVIL_HF_IN].name);
        return -1;
    }
    return 0;
}

static void tensors_done(void *ctx, uint64_t done, uint64_t total) {
    anvil_meter_update(ctx, (double)done, (double)total, "");
}

/* The ids config.json names, from the model's own tokenizer (own, with its encoding) or a byte-level
 * vocabulary's end-of-text; *known 0 when neither tells them. */
static int special_ids(const anvil_model *m, const char *own, const char *pattern, anvil_model_special_ids *ids,
                       int *known) {
    *known = 1;
    ids->bos = -1;
    ids->eos = -1;
    if (own[0]) {
        anvil_tok *tk = anvil_tok_load(own, pattern);
        if (!tk) return -1;
        ids->bos = anvil_tok_bos(tk);
        ids->eos = anvil_tok_eot(tk);
        anvil_tok_free(tk);
    } else if (m->cfg.vocab_size == ANVIL_BYTETOK_VOCAB) {
        ids->eos = ANVIL_BYTETOK_EOT;
    } else {
        *known = 0;
    }
    return 0;
}

/* export from a local model to a local folder; *tokenizer says whether the model's tokenizer.tiktoken
 * went along, *sharded whether the weights are in several files. -1 after anvil_fail. */
static int export_local(const char *in, const char *out, int show_progress, int *tokenizer, int *sharded) {
    anvil_model m;
    char warn[4096];
    int rc = anvil_model_load_any(in, anvil_kernels_for(cpu, ANVIL_MATMUL_F32), &m, warn, sizeof warn);
    fputs(warn, stderr);
    if (rc) return -1;
    char own[4096], pattern[32];
    anvil_model_special_ids ids;
    int known = 0;
    anvil_meter meter;
    anvil_meter_start(&meter, stderr, anvil_meter_mode(stderr, show_progress), "export", "tensors");
    rc = anvil_model_tokenizer_for(in, NULL, own, sizeof own, pattern) || special_ids(&m, own, pattern, &ids, &known) ||
         anvil_hf_export(&m, out, 0, known ? &ids : NULL, meter.mode != ANVIL_METER_OFF ? tensors_done : NULL,
                         &meter) ||
         (own[0] && anvil_model_tokenizer_keep(own, out));
    anvil_model_free(&m);
    if (rc) {
        anvil_meter_break(&meter);
        return -1;
    }
    anvil_meter_finish(&meter, meter.done, meter.total, "");
    *tokenizer = own[0] != 0;
    char index[4096];
    struct stat sb;
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", out);
    *sharded = stat(index, &sb) == 0;
    return 0;
}

int cmd_export(int argc, char **argv) {
    hf_args h;
    int rc, tokenizer = 0, sharded = 0;
    if (two_paths(&anvil_export_cmdline, argc, argv, &h, &rc)) return rc;
    const char *in = h.in, *out = h.out;
    int show_progress = h.show_progress;
    s3path_stage sin, sout;
    memset(&sout, 0, sizeof sout);
    rc = s3path_in(&sin, in, ".safetensors", "model.safetensors") || s3path_out(&sout, out, NULL) ||
         export_local(sin.local, sout.local, show_progress, &tokenizer, &sharded) || s3path_out_push(&sout);
    s3path_done(&sin);
    s3path_done(&sout);
    if (rc) return cli_fail("export");
    printf("wrote %s/%s and %s/config.json%s\n", out,
           sharded ? "model-*-of-*.safetensors, model.safetensors.index.json" : "model.safetensors", out,
           tokenizer ? " and the model's tokenizer.tiktoken" : "");
    return 0;
}

int cmd_import(int argc, char **argv) {
    hf_args h;
    int rc;
    if (two_paths(&anvil_import_cmdline, argc, argv, &h, &rc)) return rc;
    const char *in = h.in, *out = h.out;
    int show_progress = h.show_progress;
    s3path_stage sin, sout;
    memset(&sout, 0, sizeof sout);
    if (s3path_in(&sin, in, NULL, NULL) || s3path_out(&sout, out, "model.safetensors")) {
        s3path_done(&sin);
        s3path_done(&sout);
        return cli_fail("import");
    }
    anvil_model m;
    anvil_meter meter;
    anvil_meter_start(&meter, stderr, anvil_meter_mode(stderr, show_progress), "import", "tensors");
    if (anvil_hf_import(sin.local, anvil_kernels_for(cpu, ANVIL_MATMUL_F32), &m,
                        meter.mode != ANVIL_METER_OFF ? tensors_done : NULL, &meter)) {
        anvil_meter_break(&meter);
        s3path_done(&sin);
        s3path_done(&sout);
        return cli_fail("import");
    }
    rc = anvil_model_save(sout.local, &m, NULL) || s3path_out_push(&sout);
    s3path_done(&sin);
    s3path_done(&sout);
    if (rc) anvil_meter_break(&meter);
    else anvil_meter_finish(&meter, meter.done, meter.total, "");
    if (!rc)
        printf("wrote %s (n_layer %d, n_head %d, n_embd %d, block_size %d, vocab_size %d)\n", out, m.cfg.n_layer,
               m.cfg.n_head, m.cfg.n_embd, m.cfg.block_size, m.cfg.vocab_size);
    anvil_model_free(&m);
    return rc ? cli_fail("import") : 0;
}
