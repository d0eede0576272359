/*
 * Many searches at once (`dplan whatif`'s systems x sizes): a pool of threads taking the
 * next job under a lock. The search itself keeps no state outside its arguments.
 */
#include "planner.h"

#include <pthread.h>
#include <stdlib.h>

struct pool {
    const struct dp_model *m;
    struct dp_search_job *jobs;
    int njobs, next, ndone, failed;
    void (*done)(const struct dp_search_job *, int, int, void *);
    void *ctx;
    pthread_mutex_t lock;
};

static void *worker(void *arg)
{
    struct pool *p = arg;
    struct dp_search_result *r = malloc(sizeof *r);
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int i = p->next < p->njobs ? p->next++ : -1;
        pthread_mutex_unlock(&p->lock);
        if (i < 0)
            break;
        struct dp_search_job *j = &p->jobs[i];
        if (!r) {
            j->rc = dp_err_set(&j->err, DP_ENOMEM, "out of memory for a search result (%zu bytes)",
                               sizeof *r);
        } else {
            j->rc = dp_plan_search(p->m, &j->cl, &j->so, r, &j->err);
            j->n = r->n;
            if (r->n > 0)
                j->best = r->top[0];
            j->lowest_peak = r->lowest_peak;
            j->alt_gbs = r->alt_gbs;
        }
        pthread_mutex_lock(&p->lock);
        p->failed |= !r;
        p->ndone++;
        if (p->done)
            p->done(j, p->ndone, p->njobs, p->ctx);
        pthread_mutex_unlock(&p->lock);
    }
    free(r);
    return NULL;
}

int dp_plan_search_batch(
    const struct dp_model *m, struct dp_search_job *jobs, int njobs, int threads,
    void (*done)(const struct dp_search_job *j, int ndone, int njobs, void *ctx), void *ctx)
{
    struct pool p = {.m = m, .jobs = jobs, .njobs = njobs, .done = done, .ctx = ctx};
    pthread_mutex_init(&p.lock, NULL);
    if (threads > njobs)
        threads = njobs;
    enum { MAX_THREADS = 256 };
    pthread_t tid[MAX_THREADS];
    int started = 0;
    for (int t = 1; t < threads && t < MAX_THREADS; t++)
        if (pthread_create(&tid[started], NULL, worker, &p) == 0)
            started++;
    worker(&p); /* this thread works too; if no thread could start, it does every job */
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&p.lock);
    return p.failed ? DP_ENOMEM : 0;
}
