/* prep's manifest.json: what it records (the tokenizer, the options and the
 * inputs as a fingerprint of the run, and every finished shard), how a run
 * takes over the verified shards of an earlier one with the same
 * fingerprint, and the readers that training and sampling use. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/confine.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "core/json.h"
#include "data/bytetok.h"
#include "data/prep_internal.h"

void prep_crc_hex(uint32_t crc, char hex[9]) { snprintf(hex, 9, "%08" PRIx32, crc); }

static cJSON *sources_json(const run *r, int with_docs) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < r->nsrc; i++) {
        const source *s = &r->src[i];
        cJSON *e = cJSON_CreateObject();
        int ok = e && cJSON_AddStringToObject(e, "path", s->name) && cJSON_AddItemToArray(a, e);
        if (!ok) {
            cJSON_Delete(e);
            cJSON_Delete(a);
            return NULL;
        }
        if (s->is_file) {
            char mtime[64];
            snprintf(mtime, sizeof mtime, "%lld.%09lld", (long long)s->mtime_s, (long long)s->mtime_ns);
            ok = cJSON_AddNumberToObject(e, "size", (double)s->file_size) &&
                 cJSON_AddStringToObject(e, "mtime", mtime);
        } else {
            char hex[9];
            prep_crc_hex(s->crc, hex);
            ok = cJSON_AddStringToObject(e, "crc32c", hex) != NULL;
        }
        /* Known once the input has been read to its end (decompressed, for .gz and .zst). */
        if (ok && with_docs)
            ok = cJSON_AddNumberToObject(e, "bytes", (double)s->bytes) &&
                 cJSON_AddNumberToObject(e, "documents", (double)s->docs);
        if (!ok) {
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

int prep_write_manifest(run *r, int complete) {
    const anvil_prep_opts *o = r->o;
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", o->out_dir);
    cJSON *root = cJSON_CreateObject();
    int vocab = r->tk ? anvil_tok_vocab_size(r->tk) : ANVIL_BYTETOK_VOCAB;
    int ok = root && cJSON_AddItemToObject(root, "tokenizer", cJSON_Duplicate(r->tokenizer, 1)) &&
             cJSON_AddNumberToObject(root, "vocab_size", vocab) &&
             cJSON_AddNumberToObject(root, "eot", r->tk ? anvil_tok_eot(r->tk) : ANVIL_BYTETOK_EOT) &&
             (!r->tk || anvil_tok_bos(r->tk) < 0 || cJSON_AddNumberToObject(root, "bos", anvil_tok_bos(r->tk))) &&
             cJSON_AddNumberToObject(root, "shard_version", r->version) &&
             cJSON_AddNumberToObject(root, "val_fraction", o->val_fraction);
    if (ok && o->delimiter) {
        /* cJSON stops at a NUL; a delimiter holding one is recorded up to it
         * here (options.delimiter_hex has all of it). */
        char *delim = strndup(o->delimiter, o->delimiter_len);
        ok = delim && cJSON_AddStringToObject(root, "delimiter", delim);
        free(delim);
    } else if (ok) {
        ok = cJSON_AddNullToObject(root, "delimiter") != NULL;
    }
    if (ok && o->jsonl_field) ok = cJSON_AddStringToObject(root, "jsonl_field", o->jsonl_field) != NULL;
    ok = ok && cJSON_AddItemToObject(root, "options", cJSON_Duplicate(r->options, 1)) &&
         cJSON_AddBoolToObject(root, "complete", complete);
    /* By split and index rather than in order of completion, so that the
     * manifest does not depend on where earlier runs stopped. */
    cJSON *shards = ok ? cJSON_AddArrayToObject(root, "shards") : NULL;
    ok = shards != NULL;
    for (int s = 0; ok && s < NSPLITS; s++) {
        const cJSON *e;
        cJSON_ArrayForEach(e, r->shards[s]) ok = ok && cJSON_AddItemReferenceToArray(shards, (cJSON *)e);
    }
    /* Text bytes beside tokens give bits per byte, a loss comparable across
     * tokenizers. */
    for (int s = 0; ok && complete && s < NSPLITS; s++) {
        cJSON *splits = cJSON_GetObjectItemCaseSensitive(root, "splits");
        if (!splits) splits = cJSON_AddObjectToObject(root, "splits");
        cJSON *e = splits ? cJSON_AddObjectToObject(splits, prep_split_name[s]) : NULL;
        ok = e && cJSON_AddNumberToObject(e, "documents", (double)r->docs[s]) &&
             cJSON_AddNumberToObject(e, "tokens", (double)(r->so[s].tokens + r->so[s].open_tokens)) &&
             cJSON_AddNumberToObject(e, "text_bytes", (double)r->text_bytes[s]);
    }
    if (ok) {
        cJSON *sources = sources_json(r, complete);
        ok = sources && cJSON_AddItemToObject(root, "sources", sources);
        if (!ok) cJSON_Delete(sources);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return anvil_fail("%s: out of memory building the manifest", path);
    size_t len = strlen(text);
    char *withnl = realloc(text, len + 2);
    if (!withnl) {
        free(text);
        return anvil_fail("%s: out of memory building the manifest", path);
    }
    withnl[len] = '\n';
    int rc = anvil_write_file_atomic(path, withnl, len + 1);
    free(withnl);
    return rc;
}

/* ---- resuming ---- */

int prep_build_fingerprint(run *r) {
    const anvil_prep_opts *o = r->o;
    if (r->tk) {
        char hex[9];
        prep_crc_hex(anvil_crc32c(0, r->tok_data, r->tok_len), hex);
        r->tokenizer = cJSON_CreateObject();
        if (!r->tokenizer || !cJSON_AddStringToObject(r->tokenizer, "file", o->tokenizer_file) ||
            !cJSON_AddStringToObject(r->tokenizer, "pattern", anvil_tok_pattern_name(r->tk)) ||
            !cJSON_AddNumberToObject(r->tokenizer, "size", (double)r->tok_len) ||
            !cJSON_AddStringToObject(r->tokenizer, "crc32c", hex) ||
            !cJSON_AddStringToObject(r->tokenizer, "copy", prep_tok_copy_name))
            return anvil_fail("prep: out of memory");
    } else if (!(r->tokenizer = cJSON_CreateString("bytes"))) {
        return anvil_fail("prep: out of memory");
    }
    r->options = cJSON_CreateObject();
    int ok = r->options && cJSON_AddNumberToObject(r->options, "val_fraction", o->val_fraction);
    if (ok && o->delimiter) {
        char *hex = malloc(2 * o->delimiter_len + 1);
        for (size_t i = 0; hex && i < o->delimiter_len; i++)
            snprintf(hex + 2 * i, 3, "%02x", (unsigned char)o->delimiter[i]);
        ok = hex && cJSON_AddStringToObject(r->options, "delimiter_hex", hex);
        free(hex);
    } else if (ok) {
        ok = cJSON_AddNullToObject(r->options, "delimiter_hex") != NULL;
    }
    ok = ok && (o->jsonl_field ? cJSON_AddStringToObject(r->options, "jsonl_field", o->jsonl_field)
                               : cJSON_AddNullToObject(r->options, "jsonl_field"));
    ok = ok && cJSON_AddNumberToObject(r->options, "shard_tokens", (double)o->shard_tokens) &&
         cJSON_AddNumberToObject(r->options, "chunk_bytes", (double)r->unit);
    return ok ? 0 : anvil_fail("prep: out of memory");
}

/* Whether a and b agree on each of the keys (absent in both counts as agreeing). */
static int same_keys(const cJSON *a, const cJSON *b, const char *const *keys) {
    for (; *keys; keys++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(a, *keys), *y = cJSON_GetObjectItemCaseSensitive(b, *keys);
        if ((x == NULL) != (y == NULL) || (x && !cJSON_Compare(x, y, 1))) return 0;
    }
    return 1;
}

/* What differs between the earlier run's manifest and this run, or NULL. */
static const char *fingerprint_diff(const run *r, const cJSON *old) {
    static const char *const tok_keys[] = {"pattern", "size", "crc32c", NULL};
    static const char *const src_keys[] = {"path", "size", "mtime", "crc32c", NULL};
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(old, "tokenizer");
    if (!t || cJSON_IsObject(t) != cJSON_IsObject(r->tokenizer) ||
        (cJSON_IsObject(t) ? !same_keys(t, r->tokenizer, tok_keys) : !cJSON_Compare(t, r->tokenizer, 1)))
        return "the tokenizer differs";
    if (!cJSON_Compare(cJSON_GetObjectItemCaseSensitive(old, "options"), r->options, 1)) return "the options differ";
    const cJSON *srcs = cJSON_GetObjectItemCaseSensitive(old, "sources");
    if (!cJSON_IsArray(srcs) || cJSON_GetArraySize(srcs) != r->nsrc) return "the list of inputs differs";
    cJSON *now = sources_json(r, 0);
    const char *why = now ? NULL : "out of memory";
    for (int i = 0; !why && i < r->nsrc; i++)
        if (!same_keys(cJSON_GetArrayItem(srcs, i), cJSON_GetArrayItem(now, i), src_keys))
            why = "an input's size, mtime or content differs";
    cJSON_Delete(now);
    return why;
}

static int get_i64(const cJSON *obj, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(obj, key);
    double v = cJSON_IsNumber(x) ? x->valuedouble : NAN;
    /* (double)INT64_MAX rounds up to 2^63, which would pass the bound and make the cast undefined. */
    if (!(v >= (double)lo && v <= (double)hi && v < 0x1p63) || v != (double)(int64_t)v) return 0;
    *out = (int64_t)v;
    return 1;
}

/* Checks one shard entry of the earlier manifest and the file it names;
 * NULL when it can be kept as the next shard of its split. Where it says
 * the next shard starts (*at, *input, *offset) is checked once this run
 * gets there: the inputs are cut into chunks as they are read. */
static const char *check_old_shard(const run *r, const cJSON *e, int s, int64_t *tokens, int64_t *at, int64_t *skip,
                                   const char **input, int64_t *offset, char *why, size_t cap) {
    const split_out *so = &r->so[s];
    char want[64], path[4096];
    snprintf(want, sizeof want, "%s_%06lld.bin", prep_split_name[s], (long long)so->next_shard);
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "file"));
    const char *hex = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "crc32c"));
    const cJSON *next = cJSON_GetObjectItemCaseSensitive(e, "next");
    int64_t bytes;
    if (!file || strcmp(file, want)) return "is out of sequence";
    *input = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(next, "input"));
    if (!get_i64(e, "tokens", 1, r->o->shard_tokens, tokens) || !get_i64(e, "bytes", 0, INT64_MAX, &bytes) || !hex ||
        strlen(hex) != 8 || !get_i64(next, "chunk", 0, INT64_MAX, at) || !get_i64(next, "tokens", 0, INT64_MAX, skip) ||
        !get_i64(next, "offset", 0, INT64_MAX, offset) || !*input)
        return "has a missing or malformed field";
    snprintf(path, sizeof path, "%s/%s", r->o->out_dir, file);
    uint64_t got_bytes;
    uint32_t crc;
    if (access(path, F_OK) != 0) return "is missing";
    if (anvil_crc32c_file(path, &got_bytes, &crc)) {
        snprintf(why, cap, "cannot be read (%s)", anvil_errmsg());
        return why;
    }
    char got[9];
    prep_crc_hex(crc, got);
    if ((int64_t)got_bytes != bytes) {
        snprintf(why, cap, "has %lld bytes, the manifest says %lld", (long long)got_bytes, (long long)bytes);
        return why;
    }
    if (strcmp(got, hex)) {
        snprintf(why, cap, "has CRC32C %s, the manifest says %s", got, hex);
        return why;
    }
    return NULL;
}

int prep_load_previous(run *r, int *all_done) {
    const anvil_prep_opts *o = r->o;
    *all_done = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", o->out_dir);
    if (access(path, F_OK) != 0) return 0;
    char *text;
    size_t len;
    if (anvil_read_file(path, &text, &len)) {
        prep_note(o, "cannot read %s (%s); starting over", path, anvil_errmsg());
        return 0;
    }
    cJSON *old = anvil_json_parse(text, len, NULL);
    free(text);
    const char *why = old ? fingerprint_diff(r, old) : "not valid JSON";
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(old, "shards");
    if (!why && !cJSON_IsArray(shards)) why = "no list of shards";
    if (why) {
        prep_note(o, "%s: %s; starting over", path, why);
        cJSON_Delete(old);
        return 0;
    }
    int dropped[NSPLITS] = {0, 0}, total = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, shards) {
        total++;
        const char *split = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "split"));
        int s = split && !strcmp(split, "val") ? VAL : split && !strcmp(split, "train") ? TRAIN : -1;
        if (s < 0 || dropped[s]) continue;
        int64_t tokens, at, skip, offset;
        const char *input;
        char buf[512];
        const char *bad = check_old_shard(r, e, s, &tokens, &at, &skip, &input, &offset, buf, sizeof buf);
        if (bad) {
            const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "file"));
            prep_note(o, "%s/%s %s; writing it and the %s shards after it again", o->out_dir, file ? file : "(a shard)",
                      bad, prep_split_name[s]);
            dropped[s] = 1;
            continue;
        }
        cJSON *copy = cJSON_Duplicate(e, 1);
        if (!copy || !cJSON_AddItemToArray(r->shards[s], copy)) {
            cJSON_Delete(copy);
            cJSON_Delete(old);
            return anvil_fail("prep: out of memory");
        }
        split_out *so = &r->so[s];
        free(so->from_input);
        if (!(so->from_input = strdup(input))) {
            cJSON_Delete(old);
            return anvil_fail("prep: out of memory");
        }
        so->next_shard++;
        so->tokens += tokens;
        so->from_chunk = at;
        so->skip = skip;
        so->from_offset = (uint64_t)offset;
        r->kept++;
    }
    int complete = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(old, "complete"));
    cJSON_Delete(old);
    r->dir_ready = 1;
    *all_done = complete && r->kept == total;
    if (*all_done)
        prep_note(o,
                  "all %d shards in %s were finished by an earlier run with the same inputs and options and their "
                  "checksums verify; skipped them",
                  r->kept, o->out_dir);
    else if (r->kept)
        prep_note(o,
                  "kept %d shard%s finished by an earlier run with the same inputs and options (checksums "
                  "verified); continuing after them",
                  r->kept, r->kept == 1 ? "" : "s");
    return 0;
}

/* ---- reading the manifest back ---- */

static int is_int_in(const cJSON *x, double lo, double hi) {
    return cJSON_IsNumber(x) && x->valuedouble >= lo && x->valuedouble <= hi &&
           x->valuedouble == (double)(long long)x->valuedouble;
}

static cJSON *load_manifest(const char *dir, char *path, size_t cap) {
    snprintf(path, cap, "%s/manifest.json", dir);
    if (anvil_confined(path, "manifest")) return NULL;
    char *text;
    size_t len;
    if (anvil_read_file(path, &text, &len)) {
        char why[1024];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        anvil_fail("manifest %s", why);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = anvil_json_parse(text, len, &end);
    if (!root) anvil_fail("manifest %s: not valid JSON near byte %td", path, end ? end - text : (ptrdiff_t)0);
    free(text);
    return root;
}

int anvil_data_manifest_vocab(const char *dir, int *vocab_size, int *eot) {
    char path[4096];
    cJSON *root = load_manifest(dir, path, sizeof path);
    if (!root) return -1;
    int rc = 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "vocab_size");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "eot");
    if (!is_int_in(v, 1, INT32_MAX))
        rc = anvil_fail("manifest %s: field \"vocab_size\" is missing or not a positive integer", path);
    else if (!is_int_in(e, 0, v->valuedouble - 1))
        rc = anvil_fail("manifest %s: field \"eot\" is missing or not an integer in [0, vocab_size)", path);
    else {
        *vocab_size = (int)v->valuedouble;
        *eot = (int)e->valuedouble;
    }
    cJSON_Delete(root);
    return rc;
}

/* Whether name is a file of the manifest's own folder: not empty, no '/', not '.' or '..'. A
 * manifest may come from anyone who can write where the data lies (an S3 prefix, a shared folder);
 * one that named any path would have the reader open it, as whoever runs the reader. */
static bool plain_name(const char *name) {
    return name[0] && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
}

int anvil_data_manifest_tokenizer(const char *dir, anvil_tok **tok, char *file, size_t cap) {
    char path[4096];
    *tok = NULL;
    if (file && cap) file[0] = 0;
    cJSON *root = load_manifest(dir, path, sizeof path);
    if (!root) return -1;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokenizer");
    const char *copy = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "copy"));
    const char *orig = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "file"));
    const char *pattern = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "pattern"));
    /* Folders from before the copy existed name only the tokenizer's file, which must then lie
     * beside the manifest too. */
    const char *name = copy ? copy : orig, *field = copy ? "tokenizer.copy" : "tokenizer.file";
    int rc = 0;
    if (cJSON_IsString(t) && !strcmp(t->valuestring, "bytes")) {
        rc = 0;
    } else if (!name || !pattern) {
        rc = anvil_fail("manifest %s: field \"tokenizer\" is neither \"bytes\" nor an object with \"copy\" (a file "
                        "name) or \"file\", and \"pattern\"",
                        path);
    } else if (!plain_name(name)) {
        rc = anvil_fail("manifest %s: field \"%s\" must name a file in the manifest's own folder (no '/', not '.' or "
                        "'..')%s",
                        path, field,
                        copy ? "" : "; a manifest from before prep kept a copy: put the tokenizer beside it and name "
                                    "it in \"tokenizer.copy\"");
    } else {
        char rank_file[4096 + 256];
        snprintf(rank_file, sizeof rank_file, "%s/%s", dir, name);
        *tok = anvil_confined(rank_file, "tokenizer") ? NULL : anvil_tok_load(rank_file, pattern);
        if (!*tok) rc = -1;
        else if (file && cap) snprintf(file, cap, "%s", rank_file);
    }
    cJSON_Delete(root);
    return rc;
}

int anvil_data_manifest_split(const char *dir, const char *split, int64_t *tokens, int64_t *text_bytes) {
    char path[4096];
    cJSON *root = load_manifest(dir, path, sizeof path);
    if (!root) return -1;
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "splits"), split);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(sp, "tokens");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(sp, "text_bytes");
    int rc = 0;
    if (!is_int_in(t, 0, 9e15) || !is_int_in(b, 0, 9e15))
        rc = anvil_fail("manifest %s: field \"splits.%s\" is missing or lacks integer \"tokens\" and \"text_bytes\"",
                        path, split);
    else {
        *tokens = (int64_t)t->valuedouble;
        *text_bytes = (int64_t)b->valuedouble;
    }
    cJSON_Delete(root);
    return rc;
}
