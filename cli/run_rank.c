/*
 * dplan run as one rank (run.h): what it prints while and after it trains.
 * Its callbacks turn each step and checkpoint into a log record (run_log.c)
 * and a progress bar on a terminal; its agent (launch.h) publishes the
 * heartbeat and ends a rank that stops making progress; at the end it says
 * how the run ended, writes summary.json and plan.json (rank 0) and picks
 * the exit code. The executor trains; nothing here does.
 */
#include "run.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------ while training */

static void clear_bar(struct cli_run *r)
{
    if (r->tty)
        fputs("\r\033[K", stderr);
}

static void draw_bar(struct cli_run *r, const struct dp_step_info *in)
{
    if (!r->tty)
        return;
    const int width = 24;
    int done = (int)((double)width * in->step / in->steps);
    char bar[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < done ? '#' : '.';
    bar[width] = '\0';
    double elapsed = now_s() - r->t_start;
    double eta = elapsed / in->step * (in->steps - in->step);
    fprintf(stderr, "\r\033[Kstep %d/%d [%s] loss %.4f  %.0f tok/s  ETA %d:%02d", in->step,
            in->steps, bar, in->loss, in->tokens_per_s, (int)eta / 60, (int)eta % 60);
    if (in->step == in->steps)
        fputc('\n', stderr);
    fflush(stderr);
}

static void on_step(const struct dp_step_info *in, void *ctx)
{
    struct cli_run *r = ctx;
    if (!r->logs_here)
        return;
    cJSON *o = cli_log_record(&r->lg, in->step == in->steps ? "done" : "running");
    cJSON_AddNumberToObject(o, "step", in->step);
    cJSON_AddNumberToObject(o, "steps", in->steps);
    cJSON_AddNumberToObject(o, "loss", in->loss);
    cJSON_AddNumberToObject(o, "lr", in->lr);
    cJSON_AddNumberToObject(o, "grad_norm", in->grad_norm);
    if (in->loss_scale > 0) { /* fp16 runs: the scale this step used, and whether it was
                               * skipped for an overflow (grad_norm is then null) */
        cJSON_AddNumberToObject(o, "loss_scale", in->loss_scale);
        cJSON_AddBoolToObject(o, "skipped", in->skipped);
    }
    cJSON_AddNumberToObject(o, "tokens_per_sec", in->tokens_per_s);
    cJSON_AddNumberToObject(o, "throughput_samples_per_sec", in->samples_per_s);
    cJSON_AddNumberToObject(o, "step_time_s", in->step_time_s);
    /* The step's wait for the DP gradient reduction after the backward (executor/overlap.c):
     * what overlapping buckets with the backward left exposed. */
    cJSON_AddNumberToObject(o, "dp_comm_exposed_s", in->dp_exposed_s);
    cJSON_AddBoolToObject(o, "dp_overlap", in->dp_overlap);
    cJSON_AddNumberToObject(o, "memory_used_bytes", (double)in->mem_used_bytes);
    cJSON_AddNumberToObject(o, "memory_peak_bytes", (double)in->mem_peak_bytes);
    cJSON_AddNumberToObject(o, "memory_predicted_bytes", (double)in->mem_predicted_bytes);
    cJSON_AddNumberToObject(o, "rss_bytes", (double)in->rss_bytes);
    if (in->device_peak_bytes > 0) { /* device backends only (docs/gpu.md) */
        cJSON_AddNumberToObject(o, "device_peak_bytes", (double)in->device_peak_bytes);
        cJSON_AddNumberToObject(o, "device_used_bytes", (double)in->device_used_bytes);
    }
    cJSON *mem = cJSON_AddObjectToObject(o, "memory_peak_by_pool");
    for (int p = 0; p < DP_NPOOLS; p++)
        cJSON_AddNumberToObject(mem, dp_pool_name((enum dp_pool)p), (double)in->pool_peak_bytes[p]);
    cJSON_AddNumberToObject(o, "stage", in->stage);
    cJSON_AddNumberToObject(o, "tp_rank", in->tp_rank);
    cJSON_AddNumberToObject(o, "dp_rank", in->dp_rank);
    cli_ckpt_annotate(&r->ck, o);
    clear_bar(r);
    cli_log_write(&r->lg, o, true);
    if (in->rank == 0)
        draw_bar(r, in);
}

/* At the start of each step: the heartbeat's step, then the TEST-ONLY fault of
 * DPLAN_FAULT_INJECT when it names this rank and step (launch.h). */
static void before_step(int step, int rank, void *ctx)
{
    struct cli_run *r = ctx;
    dp_launch_agent_step();
    dp_launch_fault_before_step(&r->ck.fault, step, rank);
}

/* The agent's thread: say why the rank ends (no library call: MPI is FUNNELED). */
static void on_stall(int rank, double seconds, int step, const char *what)
{
    fprintf(stderr,
            "dplan: error: rank %d: no progress for %.0f s at step %d (%s): a peer rank died or "
            "hung; aborting the job\n",
            rank, seconds, step, what);
    fflush(stderr);
}

/* ------------------------------------------------------------------ summary */

static void write_summary(struct cli_run *r, const struct dp_exec_result *res, const char *dir)
{
    /* The step-time model on this machine as probed (executor/predict.c). */
    /* The threads each rank used, as the backend chose them (its thread policy). */
    int threads = res->threads;
    struct dp_err pe = {0};
    struct dp_exec_machine cr = {.world = res->world,
                                 .ranks_per_node =
                                     r->env.local_world > 0 ? r->env.local_world : res->world,
                                 .threads = threads,
                                 .allreduce_small_s = res->allreduce_small_s,
                                 .allreduce_1mib_s = res->allreduce_1mib_s,
                                 .flash = res->flash};
    /* With --calibration: the profile's costs at this split instead of a probe now. */
    struct dp_exec_costs costs;
    if (r->cal)
        cli_calibration_machine(r->cal, threads, threads * cr.ranks_per_node, &costs, &cr);
    /* DPLAN_TEST_NO_PROBE=1 (TEST-ONLY): no probe, so no prediction unless a calibration
     * gives the costs. The executor's tests of losses, weights and memory skip what the
     * probe takes per run (0.5 s here, 3 s under AddressSanitizer); the tests of the
     * prediction leave it unset (tests/executor/CMakeLists.txt). */
    const char *np = getenv("DPLAN_TEST_NO_PROBE");
    bool probe = r->cal || !(np && strcmp(np, "1") == 0);
    struct dp_exec_prediction cp;
    r->cpu_pred_s = 0;
    if (probe && !dp_exec_predict(&r->m, &r->l, &cr, &cp, &pe))
        r->cpu_pred_s = cp.step_s;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", r->m.name);
    cJSON_AddItemToObject(o, "layout", dp_layout_to_json(&r->l));
    cJSON_AddStringToObject(o, "backend", "cpu");
    cJSON_AddStringToObject(o, "attention", res->flash ? "flash" : "math");
    cJSON_AddNumberToObject(o, "world_size", res->world);
    cJSON_AddNumberToObject(o, "steps", res->steps_done);
    cJSON_AddNumberToObject(o, "first_loss", res->first_loss);
    cJSON_AddNumberToObject(o, "final_loss", res->final_loss);
    cJSON_AddNumberToObject(o, "tokens_per_step", (double)res->tokens_per_step);
    cJSON_AddNumberToObject(o, "data_epochs", r->epochs);
    if (r->cpu_pred_s > 0) {
        cJSON_AddNumberToObject(o, "predicted_step_time_s", r->cpu_pred_s);
        /* The prediction by kind (executor/predict.c), for checking it against profiles. */
        cJSON_AddItemToObject(o, "cpu_prediction", cli_cpu_prediction_json(&cp));
    }
    cJSON_AddNumberToObject(o, "threads_per_rank", threads);
    if (r->plan && r->plan->has_prediction) {
        cJSON *p = cJSON_AddObjectToObject(o, "plan_prediction");
        cJSON_AddNumberToObject(p, "step_time_s", r->plan->prediction.step_time_s);
        cJSON_AddNumberToObject(p, "peak_bytes", (double)r->plan->prediction.peak_bytes);
    }
    cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
    for (int i = 0; i < res->world; i++) {
        const struct dp_rank_summary *s = &res->ranks[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "rank", s->rank);
        cJSON_AddNumberToObject(e, "stage", s->stage);
        cJSON_AddNumberToObject(e, "tp_rank", s->tp_rank);
        cJSON_AddNumberToObject(e, "dp_rank", s->dp_rank);
        cJSON_AddNumberToObject(e, "step_time_mean_s", s->step_time_mean_s);
        cJSON_AddNumberToObject(e, "step_time_median_s", s->step_time_median_s);
        cJSON_AddNumberToObject(e, "dp_comm_exposed_mean_s", s->dp_exposed_mean_s);
        cJSON_AddBoolToObject(e, "dp_overlap", s->dp_overlap);
        cJSON_AddNumberToObject(e, "rss_peak_bytes", (double)s->rss_peak_bytes);
        cJSON_AddNumberToObject(e, "rss_base_bytes", (double)s->rss_base_bytes);
        cJSON_AddNumberToObject(e, "rss_train_peak_bytes", (double)s->rss_train_peak_bytes);
        cJSON_AddBoolToObject(e, "rss_peak_since_base", s->rss_peak_since_base);
        cJSON_AddNumberToObject(e, "reserved_bytes", (double)s->reserved_bytes);
        cJSON_AddNumberToObject(e, "flat_grads_bytes", (double)s->flat_grads_bytes);
        cJSON *meas = cJSON_AddObjectToObject(e, "measured_peak_bytes");
        cJSON *pred = cJSON_AddObjectToObject(e, "predicted_bytes");
        for (int p = 0; p < DP_NPOOLS; p++) {
            cJSON_AddNumberToObject(meas, dp_pool_name((enum dp_pool)p),
                                    (double)s->pool_peak_bytes[p]);
            cJSON_AddNumberToObject(pred, dp_pool_name((enum dp_pool)p),
                                    (double)s->pool_predicted_bytes[p]);
        }
        cJSON_AddItemToArray(ranks, e);
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    struct dp_err e = {0};
    if (dp_json_save_file(path, o, &e))
        fprintf(stderr, "dplan: warning: %s\n", e.msg);
    cJSON_Delete(o);
    /* The effective plan (fp32, the CPU backend's precision). */
    struct dp_plan p;
    memset(&p, 0, sizeof p);
    p.version = DP_PLAN_VERSION;
    p.model = r->m;
    p.layout = r->l;
    snprintf(p.created_by, sizeof p.created_by, "dplan %s run", DPLAN_VERSION);
    snprintf(path, sizeof path, "%s/plan.json", dir);
    dp_err_clear(&e);
    if (dp_plan_save(path, &p, NULL, &e))
        fprintf(stderr, "dplan: warning: %s\n", e.msg);
}

static void print_summary(struct cli_run *r, const struct dp_exec_result *res, const char *dir,
                          const char *logpath)
{
    char lay[192];
    dp_layout_format(&r->l, lay, sizeof lay);
    fprintf(stderr,
            "dplan run: %s, %d step%s on %d rank%s (%s gbs=%lld seq=%lld): loss %.4f -> %.4f\n",
            r->m.name, res->steps_done, res->steps_done == 1 ? "" : "s", res->world,
            res->world == 1 ? "" : "s", lay, (long long)r->l.gbs, (long long)r->l.seq_len,
            res->first_loss, res->final_loss);
    if (r->o.precision != DP_FP32) /* fp32 runs print what they always did */
        fprintf(stderr,
                "precision: %s storage on the %s backend (in 2-byte words: the working weights "
                "but under ZeRO-3, the kept activations but with experts or full recompute; the "
                "other stored tensors rounded to nearest even in fp32 buffers); fp32 master "
                "weights, gradients and AdamW state\n",
                dp_precision_name(r->o.precision), r->o.backend ? r->o.backend : "cpu");
    if (res->flash) /* math runs print what they always did */
        fprintf(stderr, "attention: flash (only the log-sum-exp kept, no T x T probabilities)\n");
    if (r->l.gemm == DP_GEMM_FP8)
        fprintf(stderr,
                "fp8: the transformer layers' linear GEMMs in FP8 (%s, current "
                "per-tensor scaling); attention core, norms and output layer bf16\n",
                r->l.fp8_format == DP_FP8_E4M3 ? "E4M3 everywhere"
                                               : "E4M3 forward, E5M2 gradients");
    if (r->o.precision == DP_FP16)
        fprintf(stderr, "loss scale: %.0f after the last step; %d step%s skipped for an overflow\n",
                res->loss_scale, res->steps_skipped, res->steps_skipped == 1 ? "" : "s");
    fprintf(stderr, "%5s %5s %3s %3s %14s %14s %14s %8s %12s\n", "rank", "stage", "tp", "dp",
            "step (median)", "memory peak", "predicted", "diff", "rss peak");
    double worst = 0;
    for (int i = 0; i < res->world; i++) {
        const struct dp_rank_summary *s = &res->ranks[i];
        int64_t meas = 0, pred = 0;
        for (int p = 0; p < DP_NPOOLS; p++) {
            meas += s->pool_peak_bytes[p];
            pred += s->pool_predicted_bytes[p];
            if (s->pool_predicted_bytes[p] > 0) {
                double e =
                    fabs((double)s->pool_peak_bytes[p] / (double)s->pool_predicted_bytes[p] - 1);
                worst = e > worst ? e : worst;
            }
        }
        fprintf(stderr, "%5d %5d %3d %3d %11.1f ms %10.2f MiB %10.2f MiB %+7.2f%% %8.1f MiB\n",
                s->rank, s->stage, s->tp_rank, s->dp_rank, 1e3 * s->step_time_median_s,
                (double)meas / 1048576.0, (double)pred / 1048576.0,
                pred ? 100.0 * ((double)meas / (double)pred - 1) : 0.0,
                (double)s->rss_peak_bytes / 1048576.0);
    }
    fprintf(stderr,
            "memory: accounted pools (params, grads, optimizer, activations, comm) against the "
            "CPU memory model; worst pool differs by %.2f%%\n",
            100 * worst);
    /* The same buffers against the processes' real resident memory: what each rank grew by
     * during the steps beyond what its buffers occupy (tests/executor/compare_runs.c says
     * what that holds and bounds it). */
    int un_rank = -1;
    double un_max = 0, un_grew = 0, un_occupy = 0;
    for (int i = 0; i < res->world; i++) {
        const struct dp_rank_summary *s = &res->ranks[i];
        double grew = (double)(s->rss_train_peak_bytes - s->rss_base_bytes);
        double un = grew - (double)s->reserved_bytes;
        if (!s->rss_peak_since_base) {
            un_rank = -1;
            break;
        }
        if (un_rank < 0 || un > un_max) {
            un_rank = s->rank;
            un_max = un;
            un_grew = grew;
            un_occupy = (double)s->reserved_bytes;
        }
    }
    if (un_rank >= 0)
        fprintf(stderr,
                "resident: rank %d grew by %.2f MiB during the steps, its buffers occupy %.2f "
                "MiB (the pools in whole allocator pages): %+.2f MiB for MPI, OpenBLAS and code "
                "(the most of any rank)\n",
                un_rank, un_grew / 1048576.0, un_occupy / 1048576.0, un_max / 1048576.0);
    /* The DP gradient reduction's exposed part, the most of any rank. */
    int dx = 0;
    for (int i = 1; i < res->world; i++)
        if (res->ranks[i].dp_exposed_mean_s > res->ranks[dx].dp_exposed_mean_s)
            dx = i;
    if (res->world > 1)
        fprintf(stderr,
                "gradient reduction: %s, %.2f ms of the step exposed after the backward (rank "
                "%d's mean, the most of any rank; its step %.2f ms)\n",
                res->ranks[dx].dp_overlap ? "buckets overlapped with the backward" : "blocking",
                1e3 * res->ranks[dx].dp_exposed_mean_s, dx, 1e3 * res->ranks[dx].step_time_mean_s);
    if (r->plan && r->plan->has_prediction)
        fprintf(stderr,
                "plan prediction (for %s): step %.3f s, peak %.2f GiB per GPU; this CPU run: step "
                "%.3f s\n",
                r->plan->has_cluster ? r->plan->cluster.gpu.name : "its GPUs",
                r->plan->prediction.step_time_s, cli_gib(r->plan->prediction.peak_bytes),
                res->ranks[0].step_time_median_s);
    if (r->cpu_pred_s > 0)
        fprintf(stderr,
                "step time: measured %.1f ms (rank 0 median), predicted %.1f ms (%+.0f%%) by "
                "the CPU step model from %s%s (executor/predict.c)\n",
                1e3 * res->ranks[0].step_time_median_s, 1e3 * r->cpu_pred_s,
                100.0 * (r->cpu_pred_s / res->ranks[0].step_time_median_s - 1),
                r->cal ? "the calibration " : "this machine's probe", r->cal ? r->calibration : "");
    fprintf(stderr, "wrote %s/model.safetensors, %s, %s/summary.json, %s/plan.json\n", dir, logpath,
            dir, dir);
}

/* ------------------------------------------------------------------ the rank */

/* Open this rank's log (rank 0's, or every rank's with --log-all-ranks). */
static int open_log(struct cli_run *r, struct dp_err *err)
{
    int rank = r->env.rank;
    r->lg = (struct cli_log){.rank = rank, .world = r->world, .attempt = dp_launch_attempt()};
    r->logs_here = rank == 0 || r->log_all;
    if (!r->logs_here)
        return 0;
    char path[4300];
    if (rank == 0)
        snprintf(path, sizeof path, "%s", r->log_path);
    else
        snprintf(path, sizeof path, "%s.rank%d", r->log_path, rank);
    r->lg.f = fopen(path, cli_ckpt_append_log(&r->ck) ? "a" : "w");
    if (!r->lg.f)
        return dp_err_set(err, DP_EIO, "%s: cannot create: %s", path, strerror(errno));
    return 0;
}

int cli_run_rank(struct cli_run *r, struct dp_err *err)
{
    struct dp_tokens tok;
    int rc = r->data ? dp_tokens_load(r->data, (enum dp_data_format)r->fmt, r->m.vocab, &tok, err)
                     : dp_tokens_default(getenv("DPLAN_DEFAULT_CORPUS"), r->m.vocab, &tok, err);
    if (rc)
        return rc;
    const int rank = r->env.rank, world = r->world;
    const char *dir = r->out_dir;
    if (rank == 0 || r->log_all)
        rc = dp_mkdirs(dir, err);
    if (!rc)
        rc = open_log(r, err);
    if (rc) {
        dp_tokens_release(&tok);
        return rc;
    }
    /* Batches wrap around the data (schedule.c): say so once when they will. */
    r->epochs = dp_tokens_epochs(&tok, &r->l, r->o.steps);
    if (rank == 0 && r->epochs > 1)
        fprintf(stderr,
                "dplan: note: %d steps x gbs %lld = %lld sequences of %lld tokens; %s holds "
                "%lld: the data is read %.2f times (the batches wrap around to its start)\n",
                r->o.steps, (long long)r->l.gbs, (long long)r->o.steps * r->l.gbs,
                (long long)r->l.seq_len, tok.source,
                (long long)dp_tokens_windows(&tok, r->l.seq_len), r->epochs);
    r->tty = rank == 0 && (isatty(2) || getenv(DP_ENV_TTY));
    r->o.data = &tok;
    r->o.out_dir = dir;
    r->o.threads = r->threads;
    r->o.on_step = on_step;
    r->o.before_step = before_step;
    r->o.ctx = r;
    r->o.ckpt = &r->ck.opts;
    r->ck.log = &r->lg;
    r->ck.logs_here = r->logs_here;
    r->t_start = now_s();

    /* The agent ends a rank that stops making progress when a peer can wait for it
     * forever (world > 1) or a runner watches it. */
    struct dp_agent_opts ao = {.rank = rank,
                               .hang_timeout_s = r->hang_timeout_s,
                               .enforce = world > 1 || dp_launch_is_rank(),
                               .beat = dp_exec_heartbeat,
                               .on_stall = on_stall};
    struct dp_err aerr = {0};
    if (dp_launch_agent_start(&ao, &aerr))
        fprintf(stderr, "dplan: warning: %s\n", aerr.msg);
    struct dp_exec_result res;
    bool collective = false;
    rc = dp_exec_run(&r->m, &r->l, &r->o, &res, &collective, err);
    dp_launch_agent_stop();
    clear_bar(r);
    /* A run whose checkpoints all failed trained, but nothing can resume it: it fails
     * (after writing its weights and summary), every rank alike. */
    bool lost = !rc && res.ckpt_tried > 0 && res.ckpt_saved == 0;
    struct dp_err lerr = {0};
    if (lost)
        dp_err_set(&lerr, DP_EIO,
                   "--ckpt-dir %s: every checkpoint this run requested failed (%d of %d; see "
                   "the messages above): it trained, but left nothing to resume from",
                   r->ck.dir, res.ckpt_tried, res.ckpt_tried);
    if (r->lg.f && ((rc && (rank == 0 || !collective)) || lost)) {
        /* The log's last record says how the run ended. */
        cJSON *o = cli_log_record(&r->lg, "failed");
        if (lost)
            cJSON_AddNumberToObject(o, "step", res.steps_done);
        cJSON_AddStringToObject(o, "error", lost ? lerr.msg : err->msg);
        cli_log_write(&r->lg, o, false);
    }
    if (!rc && !lost && r->logs_here) {
        cJSON *o = cli_log_record(&r->lg, "finished");
        cJSON_AddNumberToObject(o, "step", r->o.steps);
        cJSON_AddNumberToObject(o, "final_loss", res.final_loss);
        cJSON_AddNumberToObject(o, "restarts", dp_launch_attempt());
        cli_ckpt_annotate(&r->ck, o);
        cli_log_write(&r->lg, o, true);
    }
    if (r->lg.f)
        fclose(r->lg.f);
    r->lg.f = NULL;
    if (!rc && rank == 0) {
        write_summary(r, &res, dir);
        print_summary(r, &res, dir, r->log_path);
    }
    dp_exec_result_release(&res);
    dp_tokens_release(&tok);
    if (lost) {
        *err = lerr;
        rc = lerr.code;
        collective = true;
    }
    if (rc && world > 1) {
        if (collective) {
            if (rank == 0)
                cli_fail(err);
            dp_exec_finalize();
            exit(dp_launch_is_rank() ? DP_EXIT_REPORTED : DP_EXIT_FAILED);
        }
        fprintf(stderr, "dplan: error: rank %d: %s\n", rank, err->msg);
        fflush(stderr);
        dp_exec_abort(DP_EXIT_FAILED);
    }
    dp_exec_finalize();
    return rc ? cli_fail(err) : 0;
}
