# Included by segment.pyx: the zeros a write segment gets ahead of its
# writer (Segment.prefill says why), written by one thread of their own
# instead of the event loop. A stretch of 256 KiB took the loop 0.55-0.65 ms
# (page cache allocation, 2 us a page), once per ~5,000 small messages:
# with publishers waiting for confirms, every such stall was added to the
# round trip of a whole window (LavinMQ's lavinmqperf -c 1000 -p: a tenth
# of the loop's time). The job gets the stretch past the writer's reach
# (the writer waits for it before writing there, which a stretch handed out
# half a stretch early makes rare) and an fd of its own, opened by the loop:
# a path could name another queue's file by the time the thread got to it.

cdef extern from "<pthread.h>" nogil:
    ctypedef unsigned long pthread_t
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_create(pthread_t *t, const void *attr, void *(*fn)(void *) noexcept nogil, void *arg)
    int pthread_detach(pthread_t t)
    int pthread_mutex_init(pthread_mutex_t *m, const void *attr)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)
    int pthread_cond_init(pthread_cond_t *c, const void *attr)
    int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
    int pthread_cond_broadcast(pthread_cond_t *c)
    int pthread_cond_signal(pthread_cond_t *c)

cdef extern from "<unistd.h>" nogil:
    int getpid()


cdef struct PrefillJob:
    int fd                  # the job's own; the thread closes it
    Py_ssize_t pos          # where the zeros start (page aligned)
    Py_ssize_t end
    Py_ssize_t reached      # written up to here when done (short: a failed write)
    bint done
    PrefillJob *next


cdef pthread_mutex_t _pf_lock
cdef pthread_cond_t _pf_work
cdef pthread_cond_t _pf_done
cdef PrefillJob *_pf_head = NULL
cdef PrefillJob *_pf_tail = NULL
cdef int _pf_pid = 0        # the process the thread runs in (0: none yet)
pthread_mutex_init(&_pf_lock, NULL)
pthread_cond_init(&_pf_work, NULL)
pthread_cond_init(&_pf_done, NULL)


cdef Py_ssize_t write_zeros(int fd, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """pwrite zeros over [pos, end). -> where it got to."""
    cdef Py_ssize_t chunk, done
    while pos < end:
        chunk = end - pos if end - pos < PREFILL_CHUNK else PREFILL_CHUNK
        done = pwrite(fd, ZEROS, chunk, pos)
        if done <= 0:
            break
        pos += done
    return pos


cdef void *_prefill_thread(void *arg) noexcept nogil:
    global _pf_head, _pf_tail
    cdef PrefillJob *job
    pthread_mutex_lock(&_pf_lock)
    while True:
        job = _pf_head
        if job is NULL:
            pthread_cond_wait(&_pf_work, &_pf_lock)
            continue
        _pf_head = job.next
        if _pf_head is NULL:
            _pf_tail = NULL
        pthread_mutex_unlock(&_pf_lock)
        job.reached = write_zeros(job.fd, job.pos, job.end)
        c_close(job.fd)
        pthread_mutex_lock(&_pf_lock)
        job.done = True
        pthread_cond_broadcast(&_pf_done)
    return NULL


cdef PrefillJob *prefill_submit(int fd, Py_ssize_t pos, Py_ssize_t end) noexcept:
    """Hand [pos, end) of the file to the thread; NULL when there is no
    thread (the caller writes the zeros itself). Takes fd either way."""
    global _pf_pid, _pf_head, _pf_tail
    cdef pthread_t t
    cdef PrefillJob *job
    if _pf_pid != getpid():         # first use, or a forked child: threads do not survive fork
        _pf_head = _pf_tail = NULL
        # (nor does a lock the thread held at the fork)
        pthread_mutex_init(&_pf_lock, NULL)
        pthread_cond_init(&_pf_work, NULL)
        pthread_cond_init(&_pf_done, NULL)
        if pthread_create(&t, NULL, _prefill_thread, NULL) != 0:
            return NULL
        pthread_detach(t)
        _pf_pid = getpid()
    job = <PrefillJob *>calloc(1, sizeof(PrefillJob))
    if job is NULL:
        return NULL
    job.fd, job.pos, job.end = fd, pos, end
    pthread_mutex_lock(&_pf_lock)
    if _pf_tail is NULL:
        _pf_head = job
    else:
        _pf_tail.next = job
    _pf_tail = job
    pthread_cond_signal(&_pf_work)
    pthread_mutex_unlock(&_pf_lock)
    return job


cdef bint prefill_done(PrefillJob *job) noexcept:
    cdef bint done
    pthread_mutex_lock(&_pf_lock)
    done = job.done
    pthread_mutex_unlock(&_pf_lock)
    return done


cdef void prefill_wait(PrefillJob *job) noexcept nogil:
    pthread_mutex_lock(&_pf_lock)
    while not job.done:
        pthread_cond_wait(&_pf_done, &_pf_lock)
    pthread_mutex_unlock(&_pf_lock)
