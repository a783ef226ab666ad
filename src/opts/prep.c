/* anvil prep's options. */
#include <stdint.h>

#include "opts/tables.h"

static const anvil_opt prep_opts[] = {
    [ANVIL_PREP_OUT] = {.name = "--out", .kind = ANVIL_OPT_URI_OUT, .metavar = "DIR", .run_folder = true,
                        .help = "output folder (created if missing); s3://bucket/prefix writes the\n"
                                "shards there, through a staging folder, and manifest.json last"},
    [ANVIL_PREP_VAL_FRACTION] = {.name = "--val-fraction", .kind = ANVIL_OPT_DOUBLE, .metavar = "F",
                                 .help = "share of documents for validation, in [0, 1] (default 0.01)"},
    [ANVIL_PREP_DELIMITER] = {.name = "--delimiter", .kind = ANVIL_OPT_TEXT, .metavar = "STR",
                              .help = "split the input into documents at STR; \\n \\t \\r \\\\ \\xHH\n"
                                      "escapes allowed, e.g. '\\n\\n\\n' (default: one document per file)"},
    [ANVIL_PREP_SHARD_TOKENS] = {.name = "--shard-tokens", .kind = ANVIL_OPT_I64, .metavar = "N", .lo = 1,
                                 .hi = INT32_MAX,
                                 .help = "tokens per shard; a split's last one holds the rest\n(default 100000000)"},
    [ANVIL_PREP_TOKENIZER] = {.name = "--tokenizer", .kind = ANVIL_OPT_PATH_IN, .metavar = "FILE",
                              .help = "BPE tokens from a .tiktoken rank file (default: bytes)"},
    [ANVIL_PREP_PATTERN] = {.name = "--pattern", .kind = ANVIL_OPT_TEXT, .metavar = "NAME",
                            .help = "the tokenizer's encoding: gpt2, cl100k_base, o200k_base,\nllama3 (default gpt2)"},
    [ANVIL_PREP_JSONL_FIELD] = {.name = "--jsonl-field", .kind = ANVIL_OPT_TEXT, .metavar = "NAME",
                                .help = "inputs are JSON lines; each line's string field NAME is a\n"
                                        "document (a bad line is skipped with a note naming it)"},
    [ANVIL_PREP_STRICT] = {.name = "--strict", .kind = ANVIL_OPT_FLAG,
                           .help = "with --jsonl-field: a bad line is an error instead"},
    [ANVIL_PREP_WORKERS] = {.name = "--workers", .kind = ANVIL_OPT_INT, .metavar = "N", .lo = 1, .hi = 1024,
                            .help = "encoding threads (default 1); the output is the same for any N"},
    [ANVIL_PREP_MAX_DOC_BYTES] = {.name = "--max-doc-bytes", .kind = ANVIL_OPT_I64, .metavar = "N", .lo = 1,
                                  .hi = INT64_MAX / 2,
                                  .help = "the longest document (or JSON line) allowed, held in memory\n"
                                          "whole; a longer one is an error (default 67108864, 64 MiB)"},
    [ANVIL_PREP_NO_PROGRESS] = {.name = "--no-progress", .kind = ANVIL_OPT_FLAG,
                                .help = "no progress on standard error (by default a bar on a terminal,\n"
                                        "else a line at every tenth of the input read or every 10 s)"},
    [ANVIL_PREP_HELP] = {.name = "--help", .kind = ANVIL_OPT_FLAG, .help = "show this help"},
};

_Static_assert(sizeof prep_opts / sizeof *prep_opts == ANVIL_PREP_NOPTS, "every prep option has an entry");

const anvil_optset anvil_prep_cmdline = {
    .command = "prep",
    .intro = "usage: anvil prep --out DIR [options] FILE... ('-' reads standard input)\n"
             "\n"
             "Turns text into llm.c token shards (bytes, or BPE with --tokenizer):\n"
             "DIR/train_NNNNNN.bin, DIR/val_NNNNNN.bin and DIR/manifest.json. Each\n"
             "document starts with the end-of-text token, or with --pattern llama3 lies\n"
             "between <|begin_of_text|> and <|end_of_text|>; a document goes to val when\n"
             "the FNV-1a hash of its bytes says so, so the split is the same on every run.\n"
             "Files ending in .gz or .zst are decompressed as they are read. A FILE may be\n"
             "s3://bucket/key: the object is downloaded whole to a private temporary folder\n"
             "first (the disk needs room for it) and read from there.\n"
             "\n"
             "Shards are written as they fill, and manifest.json (with each shard's size\n"
             "and CRC32C) after each one. Run again with the same inputs and options, an\n"
             "interrupted prep continues after its last verified shard, and a finished one\n"
             "is left as it is; a shard that fails its checksum is written again.\n"
             "\n"
             "options:\n",
    .opts = prep_opts,
    .nopts = ANVIL_PREP_NOPTS,
    .column = 23,
    .operand = &(const anvil_opt){.name = "FILE", .kind = ANVIL_OPT_URI_IN, .choices = "-"},
};
