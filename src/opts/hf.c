/* anvil export's and anvil import's options: a model in, a model out. */
#include "opts/tables.h"

#define NO_PROGRESS                                                                                            \
    {.name = "--no-progress", .kind = ANVIL_OPT_FLAG,                                                          \
     .help = "no progress on standard error (by default a bar on a terminal, else a\n"                        \
             "line at every tenth of the tensors converted or every 10 s)"}

static const anvil_opt export_opts[] = {
    [ANVIL_HF_IN] = {.name = "--model", .kind = ANVIL_OPT_URI_IN, .metavar = "PATH",
                     .help = "a model.safetensors, a checkpoint folder (verified first; sharded ones are\n"
                             "put back together) or a run folder (its model.safetensors, or without one\n"
                             "its newest valid checkpoint); the tokenizer.tiktoken that 'anvil train'\n"
                             "kept beside the model is copied along"},
    [ANVIL_HF_OUT] = {.name = "--out", .kind = ANVIL_OPT_URI_OUT, .metavar = "DIR", .run_folder = true,
                      .help = "the folder to write (created if needed)",
                      .note = "Either may be s3://bucket/prefix (an s3:// --model ending in .safetensors is that one object;\n"
                              "see 'anvil s3 --help' for credentials)."},
    [ANVIL_HF_NO_PROGRESS] = NO_PROGRESS,
};

static const anvil_opt import_opts[] = {
    [ANVIL_HF_IN] = {.name = "--hf", .kind = ANVIL_OPT_URI_IN, .metavar = "DIR", .help = "the Hugging Face folder"},
    [ANVIL_HF_OUT] = {.name = "--out", .kind = ANVIL_OPT_URI_OUT, .metavar = "FILE",
                      .help = "the anvil model.safetensors to write",
                      .note = "Either may be s3://: --hf a prefix holding the folder's files, --out an object key."},
    [ANVIL_HF_NO_PROGRESS] = NO_PROGRESS,
};

_Static_assert(sizeof export_opts / sizeof *export_opts == ANVIL_HF_NOPTS, "every export option has an entry");
_Static_assert(sizeof import_opts / sizeof *import_opts == ANVIL_HF_NOPTS, "every import option has an entry");

const anvil_optset anvil_export_cmdline = {
    .command = "export",
    .intro = "usage: anvil export --model PATH --out DIR [--no-progress]\n"
             "\n"
             "Writes a Hugging Face folder (model.safetensors with the family's tensor names, sharded\n"
             "with model.safetensors.index.json above 5 GB, and config.json) that transformers'\n"
             "GPT2LMHeadModel or LlamaForCausalLM .from_pretrained(DIR) loads; config.json names the\n"
             "model's tokenizer's bos and eos ids.\n",
    .opts = export_opts,
    .nopts = ANVIL_HF_NOPTS,
    .column = 17,
};

const anvil_optset anvil_import_cmdline = {
    .command = "import",
    .intro = "usage: anvil import --hf DIR --out FILE [--no-progress]\n"
             "\n"
             "Converts a Hugging Face folder into an anvil model file: config.json (its model_type,\n"
             "gpt2 or llama, picks the family; what anvil does not compute is refused, naming the field)\n"
             "and model.safetensors or the files model.safetensors.index.json names; F32, F16 or BF16;\n"
             "GPT-2's names with or without the 'transformer.' prefix.\n",
    .opts = import_opts,
    .nopts = ANVIL_HF_NOPTS,
    .column = 17,
};
