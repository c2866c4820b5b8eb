# Included by queue.pyx: the delivery scheduler.

# Queues with work to do (new messages, freed consumer capacity, pending ack
# positions) are collected here and served once per loop iteration, so a
# read batch of N publishes costs one delivery pass, not N.
cdef list _dirty = []
cdef bint _pending = False
cdef list _after_hooks = []     # run after each delivery pass (flush sockets)


def add_after_delivery_hook(fn):
    _after_hooks.append(fn)


def run_delivery_pass():
    global _pending, _dirty
    cdef Queue q
    _pending = False
    work = _dirty
    _dirty = []
    for x in work:
        q = <Queue>x
        q.scheduled = False
        if q.closed:
            continue
        try:
            q.deliver_pending()
            q.store.flush_acks()
        except Exception:
            log.exception("delivery failed on queue %s", q.name)
            q.closed = True
    for fn in _after_hooks:
        fn()


cdef int schedule_queue(Queue q) except -1:
    global _pending
    if q.scheduled:
        return 0
    q.scheduled = True
    _dirty.append(q)
    if not _pending:
        _pending = True
        asyncio.get_running_loop().call_soon(run_delivery_pass)
    return 0
