# The topic exchange: a trie over the words of binding keys, as RabbitMQ keeps
# it, matched by walking all live trie states word by word (an NFA run): each
# node is visited at most once per word, so a routing key of W words costs
# at most W x (trie nodes) steps, whatever the wildcards. Runs of wildcards
# are normalised when bound ("#.#" -> "#", "#.*" -> "*.#": they match the
# same keys), so the pathological "#.#.#..." costs one node. Included by
# routing.pyx.

cdef enum:
    TW_WORD = 0
    TW_STAR = 1
    TW_HASH = 2
    LAST_KEY_MAX = 255      # routing keys are shortstrs
    LAST_NODES_MAX = 8


cdef struct TNode:
    TNode *parent
    TNode *star
    TNode *hash
    TNode *all_prev         # every node of the trie, for freeing
    TNode *all_next
    DestSet dests
    uint64_t mark           # the step that last put it in a state list
    uint32_t refs           # bindings whose key passes through (or ends at) this node
    uint32_t nwords         # word edges out of this node
    uint8_t kind            # how the parent reaches it
    char *word              # TW_WORD: the edge's word (owned)
    uint32_t wlen


def normalise_topic_key(bytes key):
    """Binding key -> list of words, with every run of wildcards rewritten as
    its stars followed by at most one '#'. An empty key has no words (it
    matches only the empty routing key), as in RabbitMQ."""
    if not key:
        return []
    out = []
    stars = 0
    hashes = False
    for w in key.split(b"."):
        if w == b"*":
            stars += 1
        elif w == b"#":
            hashes = True
        else:
            out.extend([b"*"] * stars)
            if hashes:
                out.append(b"#")
            stars, hashes = 0, False
            out.append(w)
    out.extend([b"*"] * stars)
    if hashes:
        out.append(b"#")
    return out


cdef class TopicMatcher(Matcher):
    cdef TNode *root
    cdef TNode *all_nodes
    cdef KeyMap edges           # (parent node, word) -> child
    cdef TNode **cur
    cdef TNode **nxt
    cdef Py_ssize_t scratch_cap
    cdef readonly Py_ssize_t node_count
    cdef readonly Py_ssize_t binding_count
    cdef uint64_t mark
    # The answer for the last routing key: publishers often repeat a key,
    # and then a memcmp replaces the walk. Any bind or unbind drops it.
    cdef char last_key[LAST_KEY_MAX]
    cdef Py_ssize_t last_len
    cdef TNode *last_nodes[LAST_NODES_MAX]
    cdef int last_n

    def __cinit__(self):
        self.last_len = -1

    def __dealloc__(self):
        self.clear_all()
        free(self.cur)
        free(self.nxt)

    cdef void clear_all(self) noexcept:
        cdef TNode *n = self.all_nodes
        cdef TNode *nx
        self.last_len = -1
        while n is not NULL:
            nx = n.all_next
            ds_clear(&n.dests)
            free(n.word)
            free(n)
            n = nx
        self.all_nodes = NULL
        self.root = NULL
        km_free(&self.edges)
        self.node_count = 0
        self.binding_count = 0

    cdef TNode *new_node(self, TNode *parent, uint8_t kind, const char *w, Py_ssize_t wlen) except NULL:
        cdef TNode *n
        cdef TNode **a
        cdef TNode **b
        cdef Py_ssize_t cap
        if self.node_count + 1 > self.scratch_cap:
            cap = self.scratch_cap * 2 if self.scratch_cap else 64
            a = <TNode **>realloc(self.cur, cap * sizeof(TNode *))
            if a is NULL:
                raise MemoryError()
            self.cur = a
            b = <TNode **>realloc(self.nxt, cap * sizeof(TNode *))
            if b is NULL:
                raise MemoryError()
            self.nxt = b
            self.scratch_cap = cap
        n = <TNode *>calloc(1, sizeof(TNode))
        if n is NULL:
            raise MemoryError()
        n.parent = parent
        n.kind = kind
        if kind == TW_WORD:
            n.word = <char *>malloc(wlen if wlen else 1)
            if n.word is NULL:
                free(n)
                raise MemoryError()
            memcpy(n.word, w, wlen)
            n.wlen = <uint32_t>wlen
        n.all_next = self.all_nodes
        if self.all_nodes is not NULL:
            self.all_nodes.all_prev = n
        self.all_nodes = n
        self.node_count += 1
        return n

    cdef void free_node(self, TNode *n) noexcept:
        cdef KMEntry *e
        if n.parent is not NULL:
            if n.kind == TW_STAR:
                n.parent.star = NULL
            elif n.kind == TW_HASH:
                n.parent.hash = NULL
            else:
                e = km_find(&self.edges, lq_hash_tag(hash_bytes(n.word, n.wlen), <uint64_t><uintptr_t>n.parent),
                            <uint64_t><uintptr_t>n.parent, n.word, n.wlen)
                if e is not NULL:
                    km_remove(&self.edges, e)
                    n.parent.nwords -= 1
        if n.all_prev is not NULL:
            n.all_prev.all_next = n.all_next
        else:
            self.all_nodes = n.all_next
        if n.all_next is not NULL:
            n.all_next.all_prev = n.all_prev
        if n is self.root:
            self.root = NULL
        ds_clear(&n.dests)
        free(n.word)
        free(n)
        self.node_count -= 1

    cdef TNode *child(self, TNode *n, bytes w, bint create) except? NULL:
        cdef uint64_t tag = <uint64_t><uintptr_t>n
        cdef uint64_t h
        cdef KMEntry *e
        cdef TNode *c
        if w == b"*":
            if n.star is NULL and create:
                n.star = self.new_node(n, TW_STAR, NULL, 0)
            return n.star
        if w == b"#":
            if n.hash is NULL and create:
                n.hash = self.new_node(n, TW_HASH, NULL, 0)
            return n.hash
        h = lq_hash_tag(hash_bytes(w, len(w)), tag)
        e = km_find(&self.edges, h, tag, w, len(w))
        if e is not NULL:
            return <TNode *>e.value
        if not create:
            return NULL
        c = self.new_node(n, TW_WORD, w, len(w))
        try:
            km_insert(&self.edges, h, tag, w, len(w), c)
        except BaseException:
            c.parent = NULL
            self.free_node(c)
            raise
        n.nwords += 1
        return c

    def add(self, bytes key, dest, bint is_exchange):
        cdef TNode *n
        cdef TNode *p
        self.last_len = -1
        if self.root is NULL:
            self.root = self.new_node(NULL, TW_WORD, b"", 0)
        n = self.root
        for w in normalise_topic_key(key):
            n = self.child(n, w, True)
        ds_add(&n.dests, dest, is_exchange)
        p = n
        while p is not NULL:
            p.refs += 1
            p = p.parent
        self.binding_count += 1

    def remove(self, bytes key, dest):
        cdef TNode *n = self.root
        cdef TNode *p
        self.last_len = -1
        if n is NULL:
            return False
        for w in normalise_topic_key(key):
            n = self.child(n, w, False)
            if n is NULL:
                return False
        if ds_remove(&n.dests, dest) == -2:
            return False
        self.binding_count -= 1
        while n is not NULL:
            p = n.parent
            n.refs -= 1
            if n.refs == 0:
                self.free_node(n)
            n = p
        return True

    cdef inline void add_state(self, TNode **lst, Py_ssize_t *cnt, TNode *n, uint64_t mark) noexcept:
        # a node and the '#' nodes below it: '#' may match zero words
        while n is not NULL and n.mark != mark:
            n.mark = mark
            lst[cnt[0]] = n
            cnt[0] += 1
            n = n.hash

    cdef int match(self, RouteOut out, const char *rk, Py_ssize_t rklen) except -1:
        cdef TNode **cur = self.cur
        cdef TNode **nxt = self.nxt
        cdef TNode **tmp
        cdef TNode *n
        cdef KMEntry *e
        cdef Py_ssize_t ncur = 0, nn, i, pos = 0, end
        cdef const char *dot
        cdef uint64_t wh, tag
        cdef bint words_edges
        if self.root is NULL:
            return 0
        if rklen == self.last_len and memcmp(rk, self.last_key, rklen) == 0:
            for i in range(self.last_n):
                out.add_dests(&self.last_nodes[i].dests)
            return 0
        words_edges = self.edges.used > 0
        self.mark += 1
        self.add_state(cur, &ncur, self.root, self.mark)
        if rklen > 0:           # an empty routing key has no words
            while True:
                dot = <const char *>memchr(rk + pos, b'.', rklen - pos)
                end = (dot - rk) if dot is not NULL else rklen
                self.mark += 1
                nn = 0
                wh = hash_bytes(rk + pos, end - pos) if words_edges else 0
                for i in range(ncur):
                    n = cur[i]
                    if n.kind == TW_HASH:
                        self.add_state(nxt, &nn, n, self.mark)
                    if n.star is not NULL:
                        self.add_state(nxt, &nn, n.star, self.mark)
                    if words_edges and n.nwords:
                        tag = <uint64_t><uintptr_t>n
                        e = km_find(&self.edges, lq_hash_tag(wh, tag), tag, rk + pos, end - pos)
                        if e is not NULL:
                            self.add_state(nxt, &nn, <TNode *>e.value, self.mark)
                tmp = cur
                cur = nxt
                nxt = tmp
                ncur = nn
                if ncur == 0 or dot is NULL:
                    break
                pos = end + 1
        self.last_len = -1
        nn = 0
        for i in range(ncur):
            n = cur[i]
            if n.dests.n:
                out.add_dests(&n.dests)
                if nn < LAST_NODES_MAX:
                    self.last_nodes[nn] = n
                nn += 1
        if nn <= LAST_NODES_MAX and rklen <= LAST_KEY_MAX:
            memcpy(self.last_key, rk, rklen)
            self.last_n = <int>nn
            self.last_len = rklen
        return 0
