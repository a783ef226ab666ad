/* anvil profile: read the traces `anvil train --profile` writes. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "obs/trace.h"

static const char *usage =
    "usage: anvil profile summary FILE [--top N]\n"
    "\n"
    "Summarizes a trace that 'anvil train --profile DIR' wrote (DIR/trace_rank<R>.json; any Chrome\n"
    "Trace Event Format file of complete events reads): per thread, the spans with the most self\n"
    "time (their own, less the spans nested in them), with their count and their share of the\n"
    "profiled steps' time. On the training thread the shares add up to 100%: the row 'step' is the\n"
    "time no span covers. The communication and checkpoint-writer threads run beside the steps.\n"
    "  --top N   rows per thread (default 15)\n";

int cmd_profile(int argc, char **argv) {
    const char *cmd = "profile";
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "summary")) return cli_usage_error(cmd, "expected 'summary FILE'");
    const char *file = NULL;
    int top = 15;
    for (int i = 2; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--top")) {
            if (!(v = arg_value(cmd, argc, argv, &i)) || arg_int(cmd, "--top", v, 1, 1 << 20, &top)) return 2;
        } else if (!strncmp(argv[i], "--", 2) || file) {
            return cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
        } else {
            file = argv[i];
        }
    }
    if (!file) return cli_usage_error(cmd, "summary needs a trace FILE");
    if (anvil_trace_summary(file, stdout, top)) return cli_fail(cmd);
    return 0;
}
