# Included by segment.pyx: the zeros a write segment gets ahead of its
# writer (Segment.prefill says why), written by one thread of their own
# instead of the event loop. A stretch of 256 KiB took the loop 0.07-0.65 ms
# (page cache allocation), once per ~5,000 small messages: with publishers
# waiting for confirms, every such stall was added to the round trip of a
# whole window (lavinmqperf -c 1000 -p: up to a tenth of the loop's time). The job gets the stretch past the writer's reach
# (the writer waits for it before writing there, which a stretch handed out
# half a stretch early makes rare) and an fd of its own, opened by the loop:
# a path could name another queue's file by the time the thread got to it.
# A stretch the thread has not started when the writer needs it is taken
# back and written by the writer: the loop waits for one stretch at most,
# never for the queue of them.

from posix.unistd cimport getpid, sysconf, _SC_PAGESIZE
from lavinmq._core.pthreads cimport (
    pthread_t, pthread_mutex_t, pthread_cond_t, pthread_create, pthread_detach, pthread_mutex_init,
    pthread_mutex_lock, pthread_mutex_unlock, pthread_cond_init, pthread_cond_wait, pthread_cond_signal,
    pthread_cond_broadcast)


cdef enum:
    JOB_QUEUED = 0
    JOB_RUNNING = 1
    JOB_DONE = 2
    JOB_CANCELLED = 3       # the writer wrote the zeros itself; the thread frees the job


cdef struct PrefillJob:
    int fd                  # the job's own; the thread closes it
    Py_ssize_t pos          # where the zeros start (page aligned)
    Py_ssize_t end
    Py_ssize_t step         # bytes per pwrite
    Py_ssize_t reached      # written up to here when done (short: a failed write)
    int state               # JOB_*, under _pf_lock
    PrefillJob *next


cdef pthread_mutex_t _pf_lock
cdef pthread_cond_t _pf_work
cdef pthread_cond_t _pf_done
cdef PrefillJob *_pf_head = NULL
cdef PrefillJob *_pf_tail = NULL
cdef int _pf_pid = 0        # the process the thread runs in (0: none yet)
cdef bint _pf_hold = False  # tests: the thread starts no job
pthread_mutex_init(&_pf_lock, NULL)
pthread_cond_init(&_pf_work, NULL)
pthread_cond_init(&_pf_done, NULL)


# How many zeros per pwrite (Segment.zero_step). The page cache sizes a
# folio by the write that creates it (ext4 has large folios since Linux
# 6.16), and a mapped page dirties its whole folio: after one 256 KiB pwrite
# every fdatasync wrote the 256 KiB around the few KiB of new records. With
# -c 1000 -p and a consumer that was 441-510 MB/s to the disk for ~84 MB/s
# of messages. So a store whose commits come often (publisher confirms,
# transactions) gets its zeros in 16 KiB writes: at most 12 KiB more per
# fdatasync. The others keep one write per stretch: smaller writes cost the
# prefill thread calls, and the kernel's writeback and reads more folios,
# for nothing (4 KiB writes everywhere: 1p1c and acks 0.93x, 16 KiB
# everywhere: a backlog drained with LavinMQ's client 0.90-0.94x).
cdef Py_ssize_t ZERO_STEP_FINE = 16384
if sysconf(_SC_PAGESIZE) > ZERO_STEP_FINE:
    ZERO_STEP_FINE = sysconf(_SC_PAGESIZE)
# a commit this soon after the last one makes a store's writes fine: well
# under lavinmq.sync.LAZY_FLUSH, which commits an idle store once a second
cdef double FINE_WITHIN = 0.25


cdef Py_ssize_t write_zeros(int fd, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t step) noexcept nogil:
    """pwrite zeros over [pos, end), at most `step` bytes per call. -> where
    it got to."""
    cdef Py_ssize_t chunk, done
    if step <= 0 or step > PREFILL_CHUNK:
        step = PREFILL_CHUNK
    while pos < end:
        chunk = end - pos if end - pos < step else step
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
        if job is NULL or _pf_hold:
            pthread_cond_wait(&_pf_work, &_pf_lock)
            continue
        _pf_head = job.next
        if _pf_head is NULL:
            _pf_tail = NULL
        if job.state == JOB_CANCELLED:
            c_close(job.fd)
            free(job)
            continue
        job.state = JOB_RUNNING
        pthread_mutex_unlock(&_pf_lock)
        job.reached = write_zeros(job.fd, job.pos, job.end, job.step)
        c_close(job.fd)
        pthread_mutex_lock(&_pf_lock)
        job.state = JOB_DONE
        pthread_cond_broadcast(&_pf_done)
    return NULL


cdef PrefillJob *prefill_submit(int fd, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t step) noexcept:
    """Hand [pos, end) of the file to the thread, which closes fd; NULL
    when there is no thread (the caller keeps fd and writes the zeros)."""
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
    job.fd, job.pos, job.end, job.step = fd, pos, end, step
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
    done = job.state == JOB_DONE
    pthread_mutex_unlock(&_pf_lock)
    return done


cdef bint prefill_finish(PrefillJob *job) noexcept nogil:
    """The writer wants the job's bytes now. -> True when the thread wrote
    them (waited for if it is writing them: one stretch at most); False
    when it had not started, and now never will: the caller writes the
    zeros itself rather than wait for every job queued ahead of this one
    (1,000 queues' stretches, say), and must not touch the job again."""
    cdef bint done
    pthread_mutex_lock(&_pf_lock)
    if job.state == JOB_QUEUED:
        job.state = JOB_CANCELLED
        done = False
    else:
        while job.state != JOB_DONE:
            pthread_cond_wait(&_pf_done, &_pf_lock)
        done = True
    pthread_mutex_unlock(&_pf_lock)
    return done


def prefill_hold(bint on):
    """Tests: while on, the prefill thread starts no job."""
    global _pf_hold
    pthread_mutex_lock(&_pf_lock)
    _pf_hold = on
    pthread_cond_broadcast(&_pf_work)
    pthread_mutex_unlock(&_pf_lock)
