# POSIX threads, as the modules that run work off the event loop use them
# (flusher.pyx: the group commit's fsyncs; _prefill.pxi: a segment's zeros).
cdef extern from "<pthread.h>" nogil:
    ctypedef unsigned long pthread_t
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    ctypedef struct pthread_attr_t:
        pass
    int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *) noexcept nogil, void *arg)
    int pthread_detach(pthread_t t)
    int pthread_mutex_init(pthread_mutex_t *m, const void *attr)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)
    int pthread_cond_init(pthread_cond_t *c, const void *attr)
    int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
    int pthread_cond_signal(pthread_cond_t *c)
    int pthread_cond_broadcast(pthread_cond_t *c)
