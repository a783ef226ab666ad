/* Hugging Face safetensors files: the format our checkpoints, exports and
 * PyTorch test fixtures share with the rest of the ecosystem.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON, then the
 * data region. Each JSON entry is {"dtype", "shape", "data_offsets":[b,e]}
 * with offsets relative to the data region; an optional "__metadata__"
 * object maps strings to strings.
 *
 * The reader validates everything before handing out a pointer (a
 * checkpoint from a crashed writer or a foreign tool must not turn into a
 * crash or a silently wrong model): sizes agree with shapes, tensors tile the
 * data region exactly with no overlap or hole, names are unique. */
#ifndef ANVIL_CKPT_SAFETENSORS_H
#define ANVIL_CKPT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    ANVIL_ST_F32,
    ANVIL_ST_F16,
    ANVIL_ST_BF16,
    ANVIL_ST_F64,
    ANVIL_ST_I32,
    ANVIL_ST_I64,
    ANVIL_ST_I16,
    ANVIL_ST_I8,
    ANVIL_ST_U8,
    ANVIL_ST_U16,
    ANVIL_ST_U32,
    ANVIL_ST_U64,
    ANVIL_ST_BOOL
} anvil_st_dtype;

#define ANVIL_ST_MAX_DIMS 8

typedef struct {
    const char *name;
    anvil_st_dtype dtype;
    int ndim; /* 0 is a scalar (one element) */
    int64_t shape[ANVIL_ST_MAX_DIMS];
    uint64_t nbytes;
    /* Aligned to the element size, so an F32 tensor can be read as float*
     * in place (the reader copies a tensor that the file misaligns). */
    const void *data;
} anvil_st_tensor;

typedef struct anvil_st_file anvil_st_file;

/* Reads and validates a whole file. NULL plus anvil_fail() naming the file
 * and the tensor or field at fault on any problem. */
anvil_st_file *anvil_st_open(const char *path);
/* The same from bytes in memory (copied, so buf may be freed afterwards);
 * name only labels the error messages. */
anvil_st_file *anvil_st_open_mem(const void *buf, size_t len, const char *name);
/* The header only, checked as anvil_st_open checks it, with the data left on disk (every tensor's
 * data pointer NULL), for a reader that needs a part of a large file: anvil_st_read reads n bytes of
 * tensor t from byte off of its data into dst. They return NULL or -1 after anvil_fail. */
anvil_st_file *anvil_st_open_index(const char *path);
int anvil_st_read(const anvil_st_file *f, const anvil_st_tensor *t, uint64_t off, uint64_t n, void *dst);
void anvil_st_close(anvil_st_file *f);

/* Tensors in the order of the JSON header. Pointers stay valid until close. */
int anvil_st_count(const anvil_st_file *f);
const anvil_st_tensor *anvil_st_at(const anvil_st_file *f, int i);
/* NULL if absent, which is not an error and records no message. */
const anvil_st_tensor *anvil_st_find(const anvil_st_file *f, const char *name);
/* A "__metadata__" value, or NULL if absent. */
const char *anvil_st_meta(const anvil_st_file *f, const char *key);

/* Bytes per element; 1 for BOOL. */
size_t anvil_st_dtype_size(anvil_st_dtype d);
/* "F32", "BF16", ...: the spelling used in the header. */
const char *anvil_st_dtype_name(anvil_st_dtype d);

/* Writes n tensors in the given order (each nbytes must equal its shape's
 * element count times the dtype size) and n_meta_pairs metadata entries
 * given as meta_kv = {key0, value0, key1, value1, ...}.
 *
 * Crash-safe: the bytes go to a temporary file in the destination folder,
 * which is fsync'ed and renamed over path, then the folder is fsync'ed, so
 * a reader sees either the old file or the complete new one. The header is
 * padded with spaces to a multiple of 8 bytes so the data region is 8-byte
 * aligned. Returns 0, or -1 with anvil_fail(). */
int anvil_st_write(const char *path, const anvil_st_tensor *tensors, int n, const char *const *meta_kv,
                   int n_meta_pairs);

/* anvil_st_write in pieces, for a writer that never holds every tensor at once: open writes the
 * header of tensors (their data pointers are not used) to the temporary file; the data then comes
 * in order, in pieces of any size, and commit checks that exactly the announced bytes came before
 * it renames the file into place. Commit and abort free the stream; NULL or -1 after anvil_fail. */
typedef struct anvil_st_stream anvil_st_stream;
anvil_st_stream *anvil_st_stream_open(const char *path, const anvil_st_tensor *tensors, int n,
                                      const char *const *meta_kv, int n_meta_pairs);
int anvil_st_stream_write(anvil_st_stream *s, const void *data, size_t n);
int anvil_st_stream_commit(anvil_st_stream *s);
void anvil_st_stream_abort(anvil_st_stream *s);

/* A file in anvil_st_write's layout built in memory, for writers that put the tensors' bytes in
 * place themselves (a checkpoint's snapshot copies the training state straight into its files) and
 * then write it whole with anvil_write_new_file_direct: bytes is aligned and padded as that wants.
 * Start from {0}; a layout reuses the buffer when it is large enough. */
typedef struct {
    unsigned char *bytes; /* the whole file: the header, then the tensors' data */
    size_t len, cap;
    uint64_t *offsets; /* tensor i's data starts at bytes + offsets[i] */
    int noffsets;
} anvil_st_image;

/* Lays out tensors (their data pointers are not used) and metadata, checked as anvil_st_write
 * checks them, and writes the header; name labels the messages. */
int anvil_st_image_layout(anvil_st_image *img, const char *name, const anvil_st_tensor *tensors, int n,
                          const char *const *meta_kv, int n_meta_pairs);
void anvil_st_image_free(anvil_st_image *img);

#endif
