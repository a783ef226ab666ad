/* The goodput accounting (src/job/goodput.h) on timelines written by hand, whose parts are worked
 * out here interval by interval: one clean attempt; a fault, its retry and the steps it threw away;
 * a job that failed past its last checkpoint; records of another job and damaged lines ignored;
 * and, on random timelines with clocks that disagree, the parts never negative and always adding
 * up to the wall time; through a cache of parsed records, the same parts as a fresh parse while the
 * file grows (a half-written last line included), is rewritten in place or replaced. Also the chaos
 * schedule parser (src/job/chaos.h): what it takes and the
 * one-line refusals. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/rng.h"
#include "job/chaos.h"
#include "job/goodput.h"
#include "testutil.h"

static char metrics[128];

/* The metrics file: text written anew (mode "w") or appended ("a"). */
static void put_metrics(const char *text, const char *mode) {
    FILE *f = fopen(metrics, mode);
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void write_metrics(const char *text) { put_metrics(text, "w"); }

static bool near(double a, double b) { return fabs(a - b) < 1e-6; }

static double sum(const anvil_goodput *g) {
    double s = 0;
    for (int p = 0; p < ANVIL_GP_NPARTS; p++) s += g->total.s[p];
    return s;
}

static anvil_job_attempt attempt(int n, double start, double end) {
    return (anvil_job_attempt){.attempt = n, .started_at = start, .ended_at = end};
}

/* Submitted at 100, out of the queue at 101, one attempt 102-120: restart to its first record at 104,
 * four steps (step 3 waited 0.2 s on a checkpoint, step 4 0.1 s on validation), the end record at 110
 * (the final save), the service noticing the end at 120. */
static void test_clean(void) {
    write_metrics("{\"kind\":\"start\",\"step\":0,\"t\":104,\"job\":7,\"attempt\":1}\n"
                  "{\"kind\":\"train\",\"step\":1,\"t\":105,\"ckpt_ms\":0,\"eval_ms\":0}\n"
                  "{\"kind\":\"train\",\"step\":2,\"t\":106,\"ckpt_ms\":0,\"eval_ms\":0}\n"
                  "{\"kind\":\"train\",\"step\":3,\"t\":107,\"ckpt_ms\":200,\"eval_ms\":0}\n"
                  "{\"kind\":\"train\",\"step\":4,\"t\":108,\"ckpt_ms\":0,\"eval_ms\":100}\n"
                  "{\"kind\":\"end\",\"step\":4,\"t\":110,\"ckpt_ms\":50,\"eval_ms\":0,\"save_ms\":500}\n");
    anvil_job_attempt at[] = {attempt(1, 102, 120)};
    anvil_goodput_input in = {.job_id = 7, .submitted_at = 100, .left_queue_at = 101, .end = 120, .completed = true,
                              .attempts = at, .nattempts = 1, .metrics_path = metrics};
    anvil_goodput g;
    CHECK(anvil_goodput_account(&in, &g) == 0);
    CHECK(near(g.wall, 20) && near(sum(&g), 20));
    CHECK(near(g.total.s[ANVIL_GP_QUEUE], 1));
    CHECK(near(g.total.s[ANVIL_GP_RESTART], 3));
    CHECK(near(g.total.s[ANVIL_GP_PRODUCTIVE], 3.7));
    /* 0.2 s waited, then the last 2 s: the end record's checkpoint and save, and the rest of finishing. */
    CHECK(near(g.total.s[ANVIL_GP_CHECKPOINT], 2.2));
    CHECK(near(g.total.s[ANVIL_GP_EVAL], 0.1));
    CHECK(near(g.total.s[ANVIL_GP_DETECTION], 10));
    CHECK(near(g.total.s[ANVIL_GP_RECOMPUTED], 0));
    CHECK(near(g.ettr, 3.7 / 19));
    CHECK(g.nattempts == 1 && g.attempts[0].resumed_from == 0 && g.attempts[0].last_step == 4);
    anvil_goodput_free(&g);
}

/* Attempt 1 (102-130) trains steps 1-10 (104-113), checkpoints step 5, and a rank is killed at 115;
 * attempt 2 (132-150) resumes from step 5 at 134, trains 6-10 (135-139) and ends at 140. Steps 6-10 of
 * attempt 1 and its last 2 s were thrown away; detection is 115-130. Lines of another job, without a
 * time, or damaged, are not read. */
static void test_fault(void) {
    char text[4096];
    int n = snprintf(text, sizeof text, "{\"kind\":\"start\",\"step\":0,\"t\":103,\"job\":7,\"attempt\":1}\n");
    for (int s = 1; s <= 10; s++)
        n += snprintf(text + n, sizeof text - n, "{\"kind\":\"train\",\"step\":%d,\"t\":%d,\"ckpt_ms\":0}\n", s,
                      103 + s);
    n += snprintf(text + n, sizeof text - n,
                  "{\"kind\":\"ckpt\",\"step\":5}\n{\"kind\":\"train\",\"step\":11,\"loss\":2}\nnot json\n"
                  "{\"kind\":\"start\",\"step\":0,\"t\":131,\"job\":8,\"attempt\":1}\n"
                  "{\"kind\":\"train\",\"step\":1,\"t\":131.5}\n"
                  "{\"kind\":\"start\",\"step\":5,\"t\":134,\"job\":7,\"attempt\":2}\n");
    for (int s = 6; s <= 10; s++)
        n += snprintf(text + n, sizeof text - n, "{\"kind\":\"train\",\"step\":%d,\"t\":%d}\n", s, 129 + s);
    snprintf(text + n, sizeof text - n, "{\"kind\":\"end\",\"step\":10,\"t\":140}\n");
    write_metrics(text);
    anvil_job_attempt at[] = {attempt(1, 102, 130), attempt(2, 132, 150)};
    anvil_job_fault f = {.at = 115, .attempt = 1, .kind = "kill-rank", .target = "rank 1", .detail = ""};
    anvil_goodput_input in = {.job_id = 7, .submitted_at = 100, .left_queue_at = 101, .end = 150, .completed = true,
                              .attempts = at, .nattempts = 2, .faults = &f, .nfaults = 1, .metrics_path = metrics};
    anvil_goodput g;
    CHECK(anvil_goodput_account(&in, &g) == 0);
    CHECK(near(g.wall, 50) && near(sum(&g), 50));
    CHECK(near(g.total.s[ANVIL_GP_PRODUCTIVE], 10));
    CHECK(near(g.total.s[ANVIL_GP_RECOMPUTED], 7));
    CHECK(near(g.total.s[ANVIL_GP_DETECTION], 25)); /* 115-130, and 140-150 after the clean end */
    CHECK(near(g.total.s[ANVIL_GP_RESTART], 6));    /* 101-103, then 130-134 */
    CHECK(near(g.total.s[ANVIL_GP_CHECKPOINT], 1)); /* the end record's interval */
    CHECK(g.attempts[0].kept_through == 5 && g.attempts[0].last_step == 10 && g.attempts[1].resumed_from == 5);
    CHECK(g.nfaults == 1 && near(g.faults[0].detection, 15) && near(g.faults[0].recomputed, 7) &&
          near(g.faults[0].restart, 4));
    /* The JSON carries the submission's Unix time, which places the faults (Unix times too) on the
     * spans' axis (seconds since it): the fault at 15 s falls in attempt 1's recomputed span. */
    cJSON *o = anvil_goodput_json(&g, true);
    const cJSON *spans = cJSON_GetObjectItemCaseSensitive(o, "spans"), *s;
    double sub = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "submitted_at"));
    double fault_at = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "faults"), 0), "at"));
    CHECK(near(sub, 100) && near(fault_at - sub, 15));
    bool placed = false;
    cJSON_ArrayForEach(s, spans) placed = placed ||
        (cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(s, "t0")) <= fault_at - sub &&
         cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(s, "t1")) >= fault_at - sub &&
         !strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "part")), "recomputed"));
    CHECK(placed);
    cJSON_Delete(o);
    anvil_goodput_free(&g);

    /* The same job failing at its second attempt's end: its steps past the last checkpoint (5) are lost. */
    in.completed = false;
    in.failed = true;
    CHECK(anvil_goodput_account(&in, &g) == 0);
    CHECK(near(sum(&g), 50) && near(g.total.s[ANVIL_GP_PRODUCTIVE], 5) && near(g.total.s[ANVIL_GP_RECOMPUTED], 12));
    anvil_goodput_free(&g);
}

/* A job still running: its attempt's time after the last record is the step under way. */
static void test_running(void) {
    write_metrics("{\"kind\":\"start\",\"step\":0,\"t\":104,\"job\":7,\"attempt\":1}\n"
                  "{\"kind\":\"train\",\"step\":1,\"t\":105}\n");
    anvil_job_attempt at[] = {attempt(1, 102, 0)};
    anvil_goodput_input in = {.job_id = 7, .submitted_at = 100, .left_queue_at = 100, .end = 106.5,
                              .attempts = at, .nattempts = 1, .metrics_path = metrics};
    anvil_goodput g;
    CHECK(anvil_goodput_account(&in, &g) == 0);
    CHECK(near(sum(&g), 6.5) && near(g.total.s[ANVIL_GP_PRODUCTIVE], 2.5) && near(g.total.s[ANVIL_GP_RESTART], 4));
    anvil_goodput_free(&g);
}

/* The accounting of a running job of the file as it is now, through cache and afresh: the same. */
static void same_through_cache(anvil_goodput_cache *cache, double end, double productive, const char *when) {
    anvil_job_attempt at[] = {attempt(1, 102, 0)};
    anvil_goodput_input in = {.job_id = 7, .submitted_at = 100, .left_queue_at = 100, .end = end,
                              .attempts = at, .nattempts = 1, .metrics_path = metrics};
    anvil_goodput fresh, cached;
    CHECK(anvil_goodput_account(&in, &fresh) == 0);
    in.cache = cache;
    CHECK(anvil_goodput_account(&in, &cached) == 0);
    bool same = fresh.nattempts == cached.nattempts && fresh.attempts[0].last_step == cached.attempts[0].last_step;
    for (int p = 0; p < ANVIL_GP_NPARTS; p++) same = same && fresh.total.s[p] == cached.total.s[p];
    if (!same || !near(cached.total.s[ANVIL_GP_PRODUCTIVE], productive))
        printf("FAIL: %s: through the cache, productive %g, last step %lld; afresh %g, %lld; expected %g\n", when,
               cached.total.s[ANVIL_GP_PRODUCTIVE], (long long)cached.attempts[0].last_step,
               fresh.total.s[ANVIL_GP_PRODUCTIVE], (long long)fresh.attempts[0].last_step, productive);
    CHECK(same && near(cached.total.s[ANVIL_GP_PRODUCTIVE], productive));
    anvil_goodput_free(&fresh);
    anvil_goodput_free(&cached);
}

static void test_cache(void) {
    anvil_goodput_cache *cache = anvil_goodput_cache_new();
    CHECK(cache != NULL);
    write_metrics("{\"kind\":\"start\",\"step\":0,\"t\":104,\"job\":7,\"attempt\":1}\n"
                  "{\"kind\":\"train\",\"step\":1,\"t\":105}\n{\"kind\":\"train\",\"st");
    same_through_cache(cache, 106, 2, "a half-written line");
    put_metrics("ep\":2,\"t\":106}\n{\"kind\":\"train\",\"step\":3,\"t\":107}\n", "a");
    same_through_cache(cache, 108, 4, "the line finished, one more");
    /* Rewritten in place (the same inode), longer, its lines elsewhere: a step fewer trained. */
    write_metrics("{\"kind\":\"start\",\"step\":0,\"t\":104.5,\"job\":7,\"attempt\":1,\"pad\":\"........\"}\n"
                  "{\"kind\":\"train\",\"step\":1,\"t\":105.5,\"pad\":\"..........................\"}\n"
                  "{\"kind\":\"train\",\"step\":2,\"t\":106.5}\n");
    same_through_cache(cache, 108, 3.5, "rewritten in place");
    /* Replaced by a new file of the same size as the part parsed. */
    unlink(metrics);
    write_metrics("{\"kind\":\"start\",\"step\":0,\"t\":104,\"job\":7,\"attempt\":1}\n");
    same_through_cache(cache, 108, 4, "replaced");
    anvil_goodput_cache_free(cache);
}

/* Random timelines whose records may fall before their attempt's start or after its end (clocks of
 * other machines): every part >= 0, and the parts add up to the wall time. */
static void test_random(void) {
    anvil_rng rng;
    anvil_rng_seed(&rng, 42);
    for (int round = 0; round < 200; round++) {
        int na = 1 + (int)(anvil_rng_u64(&rng) % 4);
        anvil_job_attempt at[4];
        anvil_job_fault faults[4];
        int nf = 0;
        char text[16384];
        int n = 0;
        double t = 1000 + anvil_rng_uniform(&rng) * 5, step = 0;
        double submitted = 1000, left = t;
        for (int a = 0; a < na; a++) {
            double start = t + anvil_rng_uniform(&rng) * 3, span = 1 + anvil_rng_uniform(&rng) * 20;
            at[a] = attempt(a + 1, start, start + span);
            double rt = start + anvil_rng_uniform(&rng) * 2 - 0.5;
            step = step > 3 ? step - 3 : 0;
            n += snprintf(text + n, sizeof text - n, "{\"kind\":\"start\",\"step\":%.0f,\"t\":%.3f,\"job\":7,\"attempt\":%d}\n",
                          step, rt, a + 1);
            int steps = (int)(anvil_rng_u64(&rng) % 12);
            for (int s = 0; s < steps && n < (int)sizeof text - 200; s++) {
                rt += anvil_rng_uniform(&rng) * 2;
                n += snprintf(text + n, sizeof text - n,
                              "{\"kind\":\"train\",\"step\":%.0f,\"t\":%.3f,\"ckpt_ms\":%.0f,\"eval_ms\":%.0f}\n",
                              ++step, rt, anvil_rng_uniform(&rng) * 3000, anvil_rng_uniform(&rng) * 3000);
            }
            if (anvil_rng_u64(&rng) % 2) faults[nf++] = (anvil_job_fault){.at = start + anvil_rng_uniform(&rng) * span,
                                                                         .attempt = a + 1, .kind = "kill-rank",
                                                                         .target = "", .detail = ""};
            t = start + span;
        }
        write_metrics(text);
        double end = t + anvil_rng_uniform(&rng) * 2;
        anvil_goodput_input in = {.job_id = 7, .submitted_at = submitted, .left_queue_at = left, .end = end,
                                  .completed = anvil_rng_u64(&rng) % 2, .attempts = at, .nattempts = na,
                                  .faults = faults, .nfaults = nf, .metrics_path = metrics};
        anvil_goodput g;
        CHECK(anvil_goodput_account(&in, &g) == 0);
        bool nonneg = true;
        for (int p = 0; p < ANVIL_GP_NPARTS; p++) nonneg = nonneg && g.total.s[p] >= 0;
        CHECK(nonneg);
        if (fabs(sum(&g) - (end - submitted)) > 1e-6) {
            t_fail(__FILE__, __LINE__, "round %d: parts add up to %.9f, wall %.9f", round, sum(&g), end - submitted);
            break;
        }
        /* The timeline tiles [0, wall] in order, and its stretches of each part add up to the part. */
        double by_part[ANVIL_GP_NPARTS] = {0}, edge = 0;
        bool tiled = true;
        for (int i = 0; i < g.nspans; i++) {
            tiled = tiled && fabs(g.spans[i].t0 - edge) < 1e-6 && g.spans[i].t1 > g.spans[i].t0;
            by_part[g.spans[i].part] += g.spans[i].t1 - g.spans[i].t0;
            edge = g.spans[i].t1;
        }
        tiled = tiled && fabs(edge - (end - submitted)) < 1e-6;
        for (int p = 0; p < ANVIL_GP_NPARTS; p++) tiled = tiled && fabs(by_part[p] - g.total.s[p]) < 1e-6;
        if (!tiled) {
            t_fail(__FILE__, __LINE__, "round %d: the timeline does not tile the wall time part by part", round);
            break;
        }
        anvil_goodput_free(&g);
    }
}

/* One attempt (102-130) of 20 steps of 1 s from 103, every fifth checkpointing 0.5 s more; an S3
 * storm at 107.5 slows steps 5-7 (the fifth checkpointing) to 3, 2.5 and 1.2 s, and a daemon restart
 * at 125 slows nothing. The attempt went on through both and ended cleanly: no detection, recomputed
 * or restart for either, the storm's stall (3 - 1.5) + (2.5 - 1) = 3 s (step 7, within 1.5 times the
 * usual step, is back at pace), the restart's 0. Then the attempt breaks off after step 20 with the
 * storm its last fault: it ended the attempt, and is priced as detection and recomputed instead. */
static void test_stall(void) {
    char text[4096];
    int n = snprintf(text, sizeof text, "{\"kind\":\"start\",\"step\":0,\"t\":103,\"job\":7,\"attempt\":1}\n");
    double t = 103;
    for (int s = 1; s <= 20; s++) {
        double len = s == 5 ? 3 : s == 6 ? 2.5 : s == 7 ? 1.2 : s % 5 ? 1 : 1.5;
        t += len;
        n += snprintf(text + n, sizeof text - n, "{\"kind\":\"train\",\"step\":%d,\"t\":%.2f,\"ckpt_ms\":%d}\n", s,
                      t, s % 5 ? 0 : 500);
    }
    char clean[4200];
    snprintf(clean, sizeof clean, "%s{\"kind\":\"end\",\"step\":20,\"t\":%.2f}\n", text, t + 0.5);
    write_metrics(clean);
    anvil_job_attempt at[] = {attempt(1, 102, 130)};
    anvil_job_fault f[] = {{.at = 107.5, .attempt = 1, .kind = "s3-503", .target = "", .detail = ""},
                           {.at = 125, .attempt = 1, .kind = "daemon-kill", .target = "", .detail = ""}};
    anvil_goodput_input in = {.job_id = 7, .submitted_at = 100, .left_queue_at = 101, .end = 130, .completed = true,
                              .attempts = at, .nattempts = 1, .faults = f, .nfaults = 2, .metrics_path = metrics};
    anvil_goodput g;
    CHECK(anvil_goodput_account(&in, &g) == 0);
    CHECK(near(sum(&g), 30) && g.nfaults == 2);
    CHECK(near(g.faults[0].stall, 3) && g.faults[0].detection == 0 && g.faults[0].recomputed == 0 &&
          g.faults[0].restart == 0);
    CHECK(g.faults[1].stall == 0 && g.faults[1].detection == 0);
    anvil_goodput_free(&g);

    write_metrics(text);
    in.nfaults = 1;
    in.completed = false;
    in.failed = true;
    CHECK(anvil_goodput_account(&in, &g) == 0);
    CHECK(near(sum(&g), 30) && g.faults[0].stall == 0 && g.faults[0].detection > 0 && g.faults[0].recomputed > 0);
    anvil_goodput_free(&g);
}

static void test_schedule(void) {
    anvil_chaos_schedule s;
    CHECK(anvil_chaos_parse("20s kill-rank:1, step:300 stop-rank,1.5m daemon-kill ,2s host-lost:0, step:9 net-cut:1",
                            &s) == 0);
    CHECK(s.n == 5 && s.ev[0].at_s == 20 && s.ev[0].kind == ANVIL_FAULT_KILL_RANK && s.ev[0].target == 1);
    CHECK(s.ev[1].at_step == 300 && s.ev[1].at_s == -1 && s.ev[1].kind == ANVIL_FAULT_STOP_RANK && s.ev[1].target == -1);
    CHECK(s.ev[2].at_s == 90 && s.ev[2].kind == ANVIL_FAULT_DAEMON_KILL);
    CHECK(s.ev[3].kind == ANVIL_FAULT_HOST_LOST && s.ev[3].target == 0 && s.ev[3].count == -1);
    CHECK(s.ev[4].at_step == 9 && s.ev[4].kind == ANVIL_FAULT_NET_CUT && s.ev[4].target == 1);
    /* net-cut strikes a host, from the daemon's backend, and ends the attempt it strikes (through its hang). */
    CHECK(anvil_fault_kind_on_host(ANVIL_FAULT_NET_CUT) && anvil_fault_kind_in_daemon(ANVIL_FAULT_NET_CUT));
    CHECK(!anvil_fault_kind_on_host(ANVIL_FAULT_KILL_RANK) && !anvil_fault_kind_in_daemon(ANVIL_FAULT_DISK_FULL));
    CHECK(!strcmp(anvil_fault_kind_name(ANVIL_FAULT_NET_CUT), "net-cut"));
    CHECK(s.ev[3].kind == ANVIL_FAULT_HOST_LOST && s.ev[3].target == 0 && s.ev[3].count == -1);
    anvil_chaos_free(&s);
    /* An S3 fault's ":N" is its count of requests; without one, the defaults. */
    CHECK(anvil_chaos_parse("step:5 s3-503:12, 3s s3-reset, 1m s3-503", &s) == 0);
    CHECK(s.n == 3 && s.ev[0].kind == ANVIL_FAULT_S3_503 && s.ev[0].count == 12 && s.ev[0].target == -1);
    CHECK(s.ev[1].kind == ANVIL_FAULT_S3_RESET && s.ev[1].count == ANVIL_CHAOS_S3_RESET_N);
    CHECK(s.ev[2].count == ANVIL_CHAOS_S3_503_N && anvil_fault_kind_s3(s.ev[2].kind) && !anvil_fault_kind_in_daemon(s.ev[2].kind));
    anvil_chaos_free(&s);
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"", "event 1 is empty"},
        {"20s kill-rank,", "event 2 is empty"},
        {"20s", "event 1 '20s': expected WHEN KIND"},
        {"20x kill-rank", "event 1: WHEN '20x' is neither"},
        {"step:-3 kill-rank", "'step:' takes a step number"},
        {"5s kill-rnak", "unknown fault 'kill-rnak'"},
        {"5s kill-attempt:2", "kill-attempt takes no target"},
        {"5s kill-rank:x", "the target of kill-rank is a rank index"},
        {"5s host-lost:-1", "the target of host-lost is a host index"},
        {"5s net-cut:a", "the target of net-cut is a host index"},
        {"5s s3-503:0", "the count of s3-503 is a number of requests from 1"},
        {"5s s3-reset:x", "the count of s3-reset is a number of requests from 1"},
        {"5s s3-slow", "unknown fault 's3-slow' (kill-rank, stop-rank, kill-attempt, host-lost, net-cut, "
                       "disk-full, daemon-kill, s3-503, s3-reset)"},
        {"5s kill-rank\n", "a control character at byte 12"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = anvil_chaos_parse(bad[i].text, &s);
        if (rc == 0 || !strstr(anvil_errmsg(), bad[i].why) || strchr(anvil_errmsg(), '\n'))
            t_fail(__FILE__, __LINE__, "'%s': rc %d, message '%s', wanted '%s'", bad[i].text, rc, anvil_errmsg(),
                   bad[i].why);
    }
    anvil_fault_kind kinds[] = {ANVIL_FAULT_KILL_RANK, ANVIL_FAULT_STOP_RANK};
    anvil_chaos_schedule a, b;
    CHECK(anvil_chaos_random(7, 30, 600, kinds, 2, &a) == 0 && anvil_chaos_random(7, 30, 600, kinds, 2, &b) == 0);
    /* About 20 faults in 600 s at a 30 s MTBF; the same seed, the same schedule, in time order. */
    CHECK(a.n > 5 && a.n < 50 && a.n == b.n && !memcmp(a.ev, b.ev, sizeof *a.ev * (size_t)a.n));
    for (int i = 1; i < a.n; i++) CHECK(a.ev[i].at_s > a.ev[i - 1].at_s && a.ev[i].at_s < 600);
    anvil_chaos_free(&a);
    anvil_chaos_free(&b);
    CHECK(anvil_chaos_random(7, 0, 600, kinds, 2, &a) == -1 && strstr(anvil_errmsg(), "--mtbf"));
}

int main(void) {
    snprintf(metrics, sizeof metrics, "/tmp/test_goodput_%d.jsonl", (int)getpid());
    test_clean();
    test_fault();
    test_stall();
    test_running();
    test_cache();
    test_random();
    test_schedule();
    unlink(metrics);
    return t_done("test_goodput");
}
