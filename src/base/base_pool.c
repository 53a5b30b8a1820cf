/*
 * base_pool: the thread pool of base_pool.h. One mutex guards the queue, the finished list and
 * the stopping flag; a condition variable wakes idle threads; an eventfd (in the loop) says the
 * finished list is not empty. The list of every live job is the loop thread's alone.
 *
 * Trust: none involved. Entry points: base_pool.h.
 */
#include "base_pool.h"

#include <errno.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define MAX_THREADS 64

struct cs_pool_job {
    cs_pool_work_fn work;
    cs_pool_done_fn done;
    void *arg;
    struct cs_cancel cancel;
    struct cs_pool_job *next;                /* queue or finished list (under mu) */
    struct cs_pool_job *all_prev, *all_next; /* every live job (loop thread only) */
};

struct cs_pool {
    struct cs_loop *loop;
    int efd;
    struct cs_loop_fd *w;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;                                     /* under mu */
    struct cs_pool_job *queue_head, *queue_tail;       /* under mu */
    struct cs_pool_job *finished_head, *finished_tail; /* under mu */
    struct cs_pool_job *all;                           /* loop thread */
    size_t pending;                                    /* loop thread */
    pthread_t th[MAX_THREADS];
    unsigned n_threads;
};

static void *thread_main(void *arg)
{
    struct cs_pool *p = arg;
    /* File work gives way to the loop: on a box whose CPUs busy jobs fill, the loop thread
     * (replies, pings, timers) runs at a better priority than the pool's threads. Raising one's
     * own nice value needs no privilege; a failure only loses the preference. */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), CS_POOL_NICE);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->queue_head && !p->stopping)
            pthread_cond_wait(&p->cv, &p->mu);
        struct cs_pool_job *j = p->queue_head;
        if (!j)
            break; /* stopping, and nothing left to run */
        p->queue_head = j->next;
        if (!p->queue_head)
            p->queue_tail = NULL;
        j->next = NULL;
        pthread_mutex_unlock(&p->mu);
        j->work(j->arg, &j->cancel);
        pthread_mutex_lock(&p->mu);
        if (p->finished_tail)
            p->finished_tail->next = j;
        else
            p->finished_head = j;
        p->finished_tail = j;
        /* Wake the loop. An eventfd counter cannot overflow at one increment per job. */
        uint64_t one = 1;
        ssize_t wr;
        do
            wr = write(p->efd, &one, sizeof one);
        while (wr < 0 && errno == EINTR);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Takes the finished list and runs each job's done on this (the loop) thread. */
static void run_finished(struct cs_pool *p)
{
    pthread_mutex_lock(&p->mu);
    struct cs_pool_job *j = p->finished_head;
    p->finished_head = p->finished_tail = NULL;
    pthread_mutex_unlock(&p->mu);
    while (j) {
        struct cs_pool_job *next = j->next;
        if (j->all_prev)
            j->all_prev->all_next = j->all_next;
        else
            p->all = j->all_next;
        if (j->all_next)
            j->all_next->all_prev = j->all_prev;
        p->pending--;
        j->done(j->arg);
        free(j);
        j = next;
    }
}

static void on_ready(void *arg, int fd, unsigned events)
{
    (void)events;
    struct cs_pool *p = arg;
    uint64_t n;
    while (read(fd, &n, sizeof n) < 0 && errno == EINTR)
        ;
    run_finished(p);
}

/* Stops and joins the threads started so far. */
static void stop_threads(struct cs_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    for (struct cs_pool_job *j = p->all; j; j = j->all_next)
        cs_cancel_set(&j->cancel);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->n_threads; i++)
        pthread_join(p->th[i], NULL);
    p->n_threads = 0;
}

struct cs_pool *cs_pool_new(struct cs_loop *loop, unsigned threads)
{
    if (threads == 0 || threads > MAX_THREADS) {
        errno = EINVAL;
        return NULL;
    }
    struct cs_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->loop = loop;
    p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (p->efd < 0) {
        free(p);
        return NULL;
    }
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        close(p->efd);
        free(p);
        errno = ENOMEM;
        return NULL;
    }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        close(p->efd);
        free(p);
        errno = ENOMEM;
        return NULL;
    }
    int e = 0;
    p->w = cs_loop_fd_add(loop, p->efd, CS_LOOP_READ, on_ready, p);
    if (!p->w)
        e = errno;
    /* Threads inherit the creator's signal mask: create them with every signal blocked. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (e == 0 && p->n_threads < threads) {
        e = pthread_create(&p->th[p->n_threads], NULL, thread_main, p);
        if (e == 0) {
            (void)pthread_setname_np(p->th[p->n_threads], "cs-files");
            p->n_threads++;
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
        cs_pool_free(p);
        errno = e;
        return NULL;
    }
    return p;
}

void cs_pool_free(struct cs_pool *p)
{
    if (!p)
        return;
    stop_threads(p);
    /* Every job has run its work now (queued ones too, with their flag set). */
    run_finished(p);
    cs_loop_fd_del(p->w);
    close(p->efd);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

struct cs_pool_job *cs_pool_submit(struct cs_pool *p, cs_pool_work_fn work, cs_pool_done_fn done,
                                   void *arg)
{
    struct cs_pool_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->work = work;
    j->done = done;
    j->arg = arg;
    pthread_mutex_lock(&p->mu);
    if (p->stopping) {
        pthread_mutex_unlock(&p->mu);
        free(j);
        return NULL;
    }
    if (p->queue_tail)
        p->queue_tail->next = j;
    else
        p->queue_head = j;
    p->queue_tail = j;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    j->all_next = p->all;
    if (p->all)
        p->all->all_prev = j;
    p->all = j;
    p->pending++;
    return j;
}

void cs_pool_cancel(struct cs_pool_job *j)
{
    cs_cancel_set(&j->cancel);
}

size_t cs_pool_pending(const struct cs_pool *p)
{
    return p->pending;
}
