/*
 * The agent (launch.h): one thread in each rank that publishes the rank's
 * progress and ends a rank that has stopped making any. MPI never notices a
 * hung peer: the other ranks wait in a collective forever, so each rank's
 * agent watches its own progress counter; the first to time out exits, and
 * mpirun then stops the others. The runner reads the heartbeat records to
 * name the rank that hung (the one furthest behind).
 *
 * It reads the counter through the caller's function and makes no library
 * call of the rank (MPI is initialised MPI_THREAD_FUNNELED).
 */
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    pthread_t th;
    bool running;
    atomic_bool stop;
    struct dp_agent_opts o;
    int fd;
    pthread_mutex_t mu;
    struct dp_heartbeat hb;
    double written_s, moved_s;
    uint64_t step_base; /* the counter when the current step started */
} ag = {.fd = -1, .mu = PTHREAD_MUTEX_INITIALIZER};

static long long real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Read the counter; true when it (or the step) moved. Caller holds ag.mu. */
static bool sample(void)
{
    const char *what = "";
    int step = 0;
    uint64_t c = ag.o.beat(&what, &step);
    snprintf(ag.hb.what, sizeof ag.hb.what, "%s", what ? what : "");
    if (c == ag.hb.count && step == ag.hb.step)
        return false;
    ag.hb.count = c;
    ag.hb.step = step;
    ag.hb.step_beats = c >= ag.step_base ? c - ag.step_base : 0;
    ag.hb.last_ns = real_ns();
    ag.moved_s = mono_s();
    return true;
}

/* Caller holds ag.mu. */
static void write_record(void)
{
    if (ag.fd < 0)
        return;
    char rec[DP_HB_RECORD];
    dp_launch_hb_format(&ag.hb, rec);
    if (pwrite(ag.fd, rec, DP_HB_RECORD, 0) != DP_HB_RECORD) {
        /* A full disk must not stop training; the runner then sees an old record. */
    }
    ag.written_s = mono_s();
}

static void *agent(void *arg)
{
    (void)arg;
    while (!atomic_load(&ag.stop)) {
        struct timespec ts = {0, 5000000}; /* 5 ms: the first rank to stop is the one named */
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&ag.mu);
        bool moved = sample();
        double now = mono_s();
        if (now - ag.written_s > (moved ? 0.1 : 0.5))
            write_record();
        /* Before the first step (start-up, checkpoint loading) allow at least a minute. */
        double limit = ag.hb.step > 0 ? ag.o.hang_timeout_s
                                      : (ag.o.hang_timeout_s > 60 ? ag.o.hang_timeout_s : 60);
        bool stalled = ag.o.enforce && now - ag.moved_s > limit;
        int step = ag.hb.step;
        char what[64];
        snprintf(what, sizeof what, "%s", ag.hb.what);
        if (stalled)
            write_record();
        pthread_mutex_unlock(&ag.mu);
        if (stalled) {
            if (ag.o.on_stall)
                ag.o.on_stall(ag.o.rank, limit, step, what);
            _exit(DP_EXIT_STALLED);
        }
    }
    return NULL;
}

int dp_launch_agent_start(const struct dp_agent_opts *o, struct dp_err *err)
{
    if (ag.running)
        return 0;
    ag.o = *o;
    const char *dir = getenv(DP_ENV_HEARTBEAT_DIR);
    int rc = 0;
    if (dir && *dir) {
        char path[4400];
        dp_launch_hb_path(path, sizeof path, dir, o->rank);
        ag.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (ag.fd < 0)
            rc = dp_err_set(err, DP_EIO, "%s: cannot create: %s (no heartbeat for the runner)",
                            path, strerror(errno));
    }
    if (ag.fd < 0 && !o->enforce)
        return rc;
    pthread_mutex_lock(&ag.mu);
    memset(&ag.hb, 0, sizeof ag.hb);
    ag.hb.seen = true;
    ag.hb.pid = (int)getpid();
    ag.moved_s = mono_s(); /* the clock of "no progress" starts now, not at boot */
    sample();
    write_record();
    pthread_mutex_unlock(&ag.mu);
    atomic_store(&ag.stop, false);
    ag.running = pthread_create(&ag.th, NULL, agent, NULL) == 0;
    return rc;
}

void dp_launch_agent_step(void)
{
    if (!ag.running)
        return;
    pthread_mutex_lock(&ag.mu);
    ag.step_base = ag.o.beat(NULL, NULL); /* no beat of this step yet */
    sample();
    ag.hb.step_beats = 0;
    write_record();
    pthread_mutex_unlock(&ag.mu);
}

void dp_launch_agent_stop(void)
{
    if (ag.running) {
        atomic_store(&ag.stop, true);
        pthread_join(ag.th, NULL);
        ag.running = false;
    }
    if (ag.fd >= 0) {
        pthread_mutex_lock(&ag.mu);
        sample();
        write_record();
        pthread_mutex_unlock(&ag.mu);
        close(ag.fd);
        ag.fd = -1;
    }
}
