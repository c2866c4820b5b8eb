# The store of a priority queue: one MessageStore per priority level, in
# prio.000 ... prio.NNN subdirectories (LavinMQ's layout). A message's SP
# carries its level in the top byte of the segment id.
from lavinmq._core.segment cimport MessageStore, SP


cdef class PriorityMessageStore(MessageStore):
    cdef:
        readonly int max_priority
        list stores             # MessageStore per level, index = level
        int top                 # highest level that may hold ready messages

    cdef MessageStore level_store(self, SP *sp)
