/* A command's own word that it finished: the completion record RUN/completion.json.
 *
 * An exit status says how a process ended, not whether its work is done: a launcher that lost a
 * node (srun's "Node failure on n1") exits 0 while the node's ranks train on. So a command that
 * finished writes this record as the last thing it does, atomically (temporary file, fsync,
 * rename, folder fsync): which command, whose attempt (ANVIL_ATTEMPT, which the job service sets
 * for each attempt; "" outside it), its pid, host and time, for train the step it reached and
 * its target, and the size and CRC-32C of each file it leaves (read back from the disk, so the
 * record covers what a reader will find). The job service calls an attempt Completed only when
 * the record is there, is that attempt's, and every file it names still has its size and
 * checksum (job/supervisor.h); anything else is a failure, which anvil_completion_verify names.
 *
 * One record for every command a job may run: train writes its own at the end of the run (its
 * steps and model.safetensors); the others get one from the command-line front end when they
 * return 0 inside an attempt (ANVIL_ATTEMPT set), into ANVIL_RUN_DIR. */
#ifndef ANVIL_CKPT_COMPLETION_H
#define ANVIL_CKPT_COMPLETION_H

#include <stddef.h>
#include <stdint.h>

#define ANVIL_COMPLETION_FILE "completion.json"
#define ANVIL_COMPLETION_VERSION 1
#define ANVIL_COMPLETION_MAX_FILES 16

typedef struct {
    char name[128]; /* a plain file name inside the run folder */
    uint64_t size;
    uint32_t crc32c;
} anvil_completion_file;

typedef struct {
    int version;
    char command[32];  /* the subcommand: "train", "prep", ... */
    char attempt[64];  /* the job service's attempt ("<job>.<attempt>"); "" outside it */
    long long pid;
    char host[256];
    double finished_at; /* seconds since the epoch */
    long long step, target_steps; /* both -1 for a command without steps */
    int nfiles;
    anvil_completion_file files[ANVIL_COMPLETION_MAX_FILES];
} anvil_completion;

/* Writes dir/completion.json for command, which has reached step of target_steps (both -1: a
 * command without steps), naming the nfiles files (plain names inside dir), each checksummed
 * from the disk now. The attempt's identity comes from ANVIL_ATTEMPT. A step short of its target
 * is refused: such a command has not finished. 0, or -1 after anvil_fail naming the file. */
int anvil_completion_write(const char *dir, const char *command, long long step, long long target_steps,
                           const char *const *files, int nfiles);

/* Parses and checks a record's text (len bytes): -1 after anvil_fail naming the field. */
int anvil_completion_parse(const char *text, size_t len, anvil_completion *rec);

/* Whether dir holds the finished record of command in attempt (compared with its fields): the record is
 * there and parses, is that attempt's and that command's, reached its target step, and each file it names
 * is there with the size and CRC-32C recorded. 0 with *rec (may be NULL) filled; -1 after anvil_fail
 * with the first thing found wrong (the record missing, another attempt's, a file's size or checksum). */
int anvil_completion_verify(const char *dir, const char *attempt, const char *command, anvil_completion *rec);

/* Removes dir/completion.json, durably; none there is no error. 0, or -1 after anvil_fail. */
int anvil_completion_clear(const char *dir);

#endif
