/* The completion record (src/ckpt/completion.h): a command's word that it finished. Written and
 * verified back; refused when it is another attempt's or command's, when a file it names changed
 * (one byte flipped, cut short) or is gone, when it is missing or malformed (each refusal naming
 * what), and a step short of its target is never recorded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/completion.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "testutil.h"

static char dir[64];

static const char *in(const char *leaf) {
    static char path[4][256];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", dir, leaf);
    return p;
}

static void put(const char *leaf, const char *text) {
    CHECK(anvil_write_file_atomic(in(leaf), text, strlen(text)) == 0);
}

static const char *const model[] = {"model.safetensors"};

static void test_round_trip(void) {
    put("model.safetensors", "0123456789abcdef");
    setenv("ANVIL_ATTEMPT", "7.2", 1);
    CHECK(anvil_completion_write(dir, "train", 100, 100, model, 1) == 0);
    anvil_completion r;
    CHECK(anvil_completion_verify(dir, "7.2", "train", &r) == 0);
    CHECK(!strcmp(r.command, "train") && !strcmp(r.attempt, "7.2") && r.pid == getpid() && r.step == 100 &&
          r.target_steps == 100 && r.nfiles == 1 && r.files[0].size == 16 && !strcmp(r.files[0].name, model[0]));
    /* The checksum of the bytes on the disk: CRC-32C of "0123456789abcdef", by a bitwise reference
     * (Castagnoli, reflected 0x82F63B78) that gives the standard check value 0xe3069283 for "123456789". */
    CHECK(r.files[0].crc32c == 0x42d3119eu);
    CHECK(anvil_completion_verify(dir, "7.3", "train", NULL) != 0 && strstr(anvil_errmsg(), "is attempt '7.2''s") &&
          strstr(anvil_errmsg(), "not this attempt's ('7.3')"));
    CHECK(anvil_completion_verify(dir, "7.2", "health", NULL) != 0 &&
          strstr(anvil_errmsg(), "record of 'train', not of this attempt's command 'health'"));
    /* A command without steps or files: the others a job may run. */
    CHECK(anvil_completion_write(dir, "prep", -1, -1, NULL, 0) == 0);
    CHECK(anvil_completion_verify(dir, "7.2", "prep", &r) == 0 && r.step == -1 && r.nfiles == 0);
    unsetenv("ANVIL_ATTEMPT");
    CHECK(anvil_completion_write(dir, "prep", -1, -1, NULL, 0) == 0);
    CHECK(anvil_completion_verify(dir, "", "prep", &r) == 0 && !r.attempt[0]);
}

static void test_files_changed(void) {
    setenv("ANVIL_ATTEMPT", "1.1", 1);
    put("model.safetensors", "0123456789abcdef");
    CHECK(anvil_completion_write(dir, "train", 5, 5, model, 1) == 0);
    put("model.safetensors", "0123456789abcdeF");
    CHECK(anvil_completion_verify(dir, "1.1", "train", NULL) != 0 &&
          strstr(anvil_errmsg(), "model.safetensors has CRC-32C"));
    put("model.safetensors", "0123456789");
    CHECK(anvil_completion_verify(dir, "1.1", "train", NULL) != 0 &&
          strstr(anvil_errmsg(), "model.safetensors is 10 bytes, the completion record says 16"));
    CHECK(unlink(in("model.safetensors")) == 0);
    CHECK(anvil_completion_verify(dir, "1.1", "train", NULL) != 0 && strstr(anvil_errmsg(), "model.safetensors"));
    /* Short of the target: not finished, so no record (the one before stays, and is that run's). */
    put("model.safetensors", "x");
    CHECK(anvil_completion_write(dir, "train", 4, 5, model, 1) != 0 &&
          strstr(anvil_errmsg(), "step 4 is short of the target 5"));
    CHECK(anvil_completion_write(dir, "train", 5, 5, (const char *const[]){"../model"}, 1) != 0 &&
          strstr(anvil_errmsg(), "not a plain file name"));
    CHECK(anvil_completion_clear(dir) == 0 && access(in(ANVIL_COMPLETION_FILE), F_OK) != 0);
    CHECK(anvil_completion_clear(dir) == 0);
    CHECK(anvil_completion_verify(dir, "1.1", "train", NULL) != 0 &&
          strstr(anvil_errmsg(), "completion.json is missing"));
    unsetenv("ANVIL_ATTEMPT");
}

/* Each malformed record is refused naming what is wrong. */
static void test_malformed(void) {
    static const struct {
        const char *text, *says;
    } cases[] = {
        {"not json", "not JSON"},
        {"[]", "not a JSON object"},
        {"{\"format\": \"other\", \"version\": 1}", "format: 'other'"},
        {"{\"format\": \"anvil-completion\", \"version\": 2}", "version 2"},
        {"{\"format\": \"anvil-completion\", \"version\": 1, \"command\": \"train\", \"attempt\": \"\", \"pid\": 0}",
         "pid: must be a whole number"},
        {"{\"format\": \"anvil-completion\", \"version\": 1, \"command\": \"train\", \"attempt\": \"\", \"pid\": 5,"
         " \"host\": \"h\", \"step\": 3, \"target_steps\": -1, \"finished_at\": 1, \"files\": []}",
         "both or neither"},
        {"{\"format\": \"anvil-completion\", \"version\": 1, \"command\": \"train\", \"attempt\": \"\", \"pid\": 5,"
         " \"host\": \"h\", \"step\": 3, \"target_steps\": 3, \"finished_at\": 1,"
         " \"files\": [{\"name\": \"../etc/passwd\", \"size\": 1, \"crc32c\": \"00000000\"}]}",
         "files[0]: name '../etc/passwd' is not a plain file name"},
        {"{\"format\": \"anvil-completion\", \"version\": 1, \"command\": \"train\", \"attempt\": \"\", \"pid\": 5,"
         " \"host\": \"h\", \"step\": 3, \"target_steps\": 3, \"finished_at\": 1,"
         " \"files\": [{\"name\": \"m\", \"size\": 1, \"crc32c\": \"0000000G\"}]}",
         "files[0]: crc32c must be 8 lowercase hex digits"},
        {"{\"format\": \"anvil-completion\", \"version\": 1, \"command\": \"train\", \"attempt\": \"\", \"pid\": 5,"
         " \"host\": \"h\", \"step\": 3, \"target_steps\": 3, \"finished_at\": 1, \"files\": []} {}",
         "text after the object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        anvil_completion r;
        int rc = anvil_completion_parse(cases[i].text, strlen(cases[i].text), &r);
        if (rc == 0 || !strstr(anvil_errmsg(), cases[i].says))
            t_fail(__FILE__, __LINE__, "case %zu: rc %d, '%s' (want '%s')", i, rc, anvil_errmsg(), cases[i].says);
    }
    put(ANVIL_COMPLETION_FILE, "{\"format\": \"anvil-completion\"");
    CHECK(anvil_completion_verify(dir, "", "train", NULL) != 0 &&
          strstr(anvil_errmsg(), "completion.json: completion record: not JSON"));
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/anvil-completion-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_files_changed();
    test_malformed();
    anvil_remove_tree(dir);
    return t_done("test_completion");
}
