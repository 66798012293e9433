/* arenad.core._ladder: the ladder index of arenad/core/ladder.py in C (docs/performance.md).
 *
 * The same structure and the same answers as the Python Ladder: entries (key, id) in ascending
 * (key, id) order, kept in sorted blocks of about `load` entries (packed doubles and 32-bit ids)
 * under an array of block maxima, with a Fenwick tree over block lengths for positions. Only the
 * representation differs: no boxed floats, memmove inside a block. The Python class stays the
 * reference; tests/core/test_ladder.py drives both with the same operations.
 */
#include "_native.h"

/* (k1, i1) < (k2, i2) */
static inline int lt(double k1, uint32_t i1, double k2, uint32_t i2) {
    return k1 < k2 || (k1 == k2 && i1 < i2);
}

/* The largest block load: a block's capacity is 3 load + 2 entries, which must not overflow. */
#define LOAD_MAX (1 << 24)

static int block_alloc(LadderObject *self, Block *b) {
    /* A block holds at most 2 load entries between calls; a merge may reach 2.5 load before
     * it splits again (as in the Python Ladder). */
    Py_ssize_t cap = 3 * self->load + 2;
    b->keys = PyMem_Malloc(sizeof(double) * cap);
    b->ids = PyMem_Malloc(sizeof(uint32_t) * cap);
    b->len = 0;
    if (!b->keys || !b->ids) {
        PyMem_Free(b->keys);
        PyMem_Free(b->ids);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void block_free(Block *b) {
    PyMem_Free(b->keys);
    PyMem_Free(b->ids);
    b->keys = NULL;
    b->ids = NULL;
}

/* Insert an empty block at position pos. */
static int insert_block(LadderObject *self, Py_ssize_t pos) {
    if (self->nblocks == self->bcap) {
        Py_ssize_t cap = self->bcap ? 2 * self->bcap : 8;
        Block *nb = PyMem_Realloc(self->blocks, sizeof(Block) * cap);
        if (!nb) {
            PyErr_NoMemory();
            return -1;
        }
        self->blocks = nb;
        self->bcap = cap;
    }
    memmove(self->blocks + pos + 1, self->blocks + pos, sizeof(Block) * (self->nblocks - pos));
    self->nblocks++;
    if (block_alloc(self, &self->blocks[pos]) < 0) {
        memmove(self->blocks + pos, self->blocks + pos + 1, sizeof(Block) * (self->nblocks - pos - 1));
        self->nblocks--;
        return -1;
    }
    self->tree_ok = 0;
    return 0;
}

static void delete_block(LadderObject *self, Py_ssize_t pos) {
    block_free(&self->blocks[pos]);
    memmove(self->blocks + pos, self->blocks + pos + 1, sizeof(Block) * (self->nblocks - pos - 1));
    self->nblocks--;
    self->tree_ok = 0;
}

static int tree_build(LadderObject *self) {
    Py_ssize_t n = self->nblocks + 1;
    if (n > self->tree_cap) {
        Py_ssize_t *t = PyMem_Realloc(self->tree, sizeof(Py_ssize_t) * n * 2);
        if (!t) {
            PyErr_NoMemory();
            return -1;
        }
        self->tree = t;
        self->tree_cap = n * 2;
    }
    memset(self->tree, 0, sizeof(Py_ssize_t) * n);
    for (Py_ssize_t i = 1; i < n; i++) {
        self->tree[i] += self->blocks[i - 1].len;
        Py_ssize_t parent = i + (i & -i);
        if (parent < n) self->tree[parent] += self->tree[i];
    }
    self->tree_ok = 1;
    return 0;
}

static void tree_add(LadderObject *self, Py_ssize_t pos, Py_ssize_t delta) {
    if (!self->tree_ok) return;
    Py_ssize_t n = self->nblocks + 1;
    for (Py_ssize_t i = pos + 1; i < n; i += i & -i) self->tree[i] += delta;
}

/* Entries in blocks 0..pos-1; -1 with an exception set on failure. */
static Py_ssize_t before_block(LadderObject *self, Py_ssize_t pos) {
    if (!self->tree_ok && tree_build(self) < 0) return -1;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = pos; i > 0; i -= i & -i) total += self->tree[i];
    return total;
}

static inline double block_max(const Block *b) { return b->keys[b->len - 1]; }

/* First block whose last entry is >= (key, pid); the last block at most. */
static Py_ssize_t block_for(LadderObject *self, double key, uint32_t pid) {
    Py_ssize_t lo = 0, hi = self->nblocks;
    while (lo < hi) { /* first block with max >= key (bisect_left on maxima) */
        Py_ssize_t mid = (lo + hi) >> 1;
        if (block_max(&self->blocks[mid]) < key) lo = mid + 1;
        else hi = mid;
    }
    Py_ssize_t last = self->nblocks - 1;
    if (lo > last) return last;
    while (lo < last) {
        const Block *b = &self->blocks[lo];
        if (block_max(b) == key && b->ids[b->len - 1] < pid) lo++;
        else break;
    }
    return lo;
}

/* Index of the first entry >= (key, pid) within a block. */
static Py_ssize_t lower(const Block *b, double key, uint32_t pid) {
    Py_ssize_t lo = 0, hi = b->len;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) >> 1;
        if (lt(b->keys[mid], b->ids[mid], key, pid)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int split(LadderObject *self, Py_ssize_t pos) {
    if (insert_block(self, pos + 1) < 0) return -1;
    Block *b = &self->blocks[pos];
    Block *nb = &self->blocks[pos + 1];
    Py_ssize_t half = b->len >> 1;
    Py_ssize_t rest = b->len - half;
    memcpy(nb->keys, b->keys + half, sizeof(double) * rest);
    memcpy(nb->ids, b->ids + half, sizeof(uint32_t) * rest);
    nb->len = rest;
    b->len = half;
    return 0;
}

static int add_entry(LadderObject *self, double key, uint32_t pid) {
    if (self->nblocks == 0) {
        if (insert_block(self, 0) < 0) return -1;
        self->blocks[0].keys[0] = key;
        self->blocks[0].ids[0] = pid;
        self->blocks[0].len = 1;
        self->len = 1;
        self->changes++;
        return 0;
    }
    Py_ssize_t pos = block_for(self, key, pid);
    Block *b = &self->blocks[pos];
    Py_ssize_t idx = lower(b, key, pid);
    memmove(b->keys + idx + 1, b->keys + idx, sizeof(double) * (b->len - idx));
    memmove(b->ids + idx + 1, b->ids + idx, sizeof(uint32_t) * (b->len - idx));
    b->keys[idx] = key;
    b->ids[idx] = pid;
    b->len++;
    self->len++;
    self->changes++;
    if (b->len > 2 * self->load) return split(self, pos);
    tree_add(self, pos, 1);
    return 0;
}

static int delete_at(LadderObject *self, Py_ssize_t pos, Py_ssize_t idx) {
    Block *b = &self->blocks[pos];
    memmove(b->keys + idx, b->keys + idx + 1, sizeof(double) * (b->len - idx - 1));
    memmove(b->ids + idx, b->ids + idx + 1, sizeof(uint32_t) * (b->len - idx - 1));
    b->len--;
    self->len--;
    self->changes++;
    if (b->len > (self->load >> 1)) {
        tree_add(self, pos, -1);
        return 0;
    }
    self->tree_ok = 0;
    if (self->nblocks == 1) {
        if (b->len == 0) delete_block(self, 0);
        return 0;
    }
    if (pos == 0) pos = 1;
    Block *dst = &self->blocks[pos - 1];
    Block *src = &self->blocks[pos];
    memcpy(dst->keys + dst->len, src->keys, sizeof(double) * src->len);
    memcpy(dst->ids + dst->len, src->ids, sizeof(uint32_t) * src->len);
    dst->len += src->len;
    delete_block(self, pos);
    if (self->blocks[pos - 1].len > 2 * self->load) return split(self, pos - 1);
    return 0;
}

static int locate(LadderObject *self, double key, uint32_t pid, Py_ssize_t *pos, Py_ssize_t *idx) {
    if (self->nblocks == 0) goto missing;
    *pos = block_for(self, key, pid);
    const Block *b = &self->blocks[*pos];
    *idx = lower(b, key, pid);
    if (*idx == b->len || b->keys[*idx] != key || b->ids[*idx] != pid) goto missing;
    return 0;
missing: {
    PyObject *k = Py_BuildValue("(dk)", key, (unsigned long)pid);
    if (k) {
        PyErr_SetObject(PyExc_KeyError, k);
        Py_DECREF(k);
    }
    return -1;
}
}

static int parse_pid(PyObject *obj, uint32_t *out) {
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    if (v > 0xFFFFFFFFULL) {
        PyErr_SetString(PyExc_OverflowError, "player id does not fit in 32 bits");
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

/* ------------------------------------------------------------------ Python methods */
static PyObject *Ladder_add(LadderObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "add(key, pid)");
    double key = PyFloat_AsDouble(args[0]);
    uint32_t pid;
    if ((key == -1.0 && PyErr_Occurred()) || parse_pid(args[1], &pid) < 0) return NULL;
    if (add_entry(self, key, pid) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Ladder_remove(LadderObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "remove(key, pid)");
    double key = PyFloat_AsDouble(args[0]);
    uint32_t pid;
    Py_ssize_t pos, idx;
    if ((key == -1.0 && PyErr_Occurred()) || parse_pid(args[1], &pid) < 0) return NULL;
    if (locate(self, key, pid, &pos, &idx) < 0 || delete_at(self, pos, idx) < 0) return NULL;
    Py_RETURN_NONE;
}

/* Re-key pid from old to new (the entry must exist). */
int ladder_move(LadderObject *self, double old, double new, uint32_t pid) {
    Py_ssize_t pos, idx;
    if (locate(self, old, pid, &pos, &idx) < 0) return -1;
    Block *b = &self->blocks[pos];
    Py_ssize_t last = self->nblocks - 1;
    /* Same block when (new, pid) stays strictly between the neighbouring blocks' ends: shift
     * the entries between the old and the new place by one, no length changes. */
    if ((pos == 0 || new > block_max(&self->blocks[pos - 1])) &&
        (pos == last || new < self->blocks[pos + 1].keys[0])) {
        Py_ssize_t at;
        if (lt(new, pid, old, pid)) {
            Py_ssize_t lo = 0, hi = idx;
            while (lo < hi) {
                Py_ssize_t mid = (lo + hi) >> 1;
                if (lt(b->keys[mid], b->ids[mid], new, pid)) lo = mid + 1;
                else hi = mid;
            }
            at = lo;
            memmove(b->keys + at + 1, b->keys + at, sizeof(double) * (idx - at));
            memmove(b->ids + at + 1, b->ids + at, sizeof(uint32_t) * (idx - at));
        } else {
            Py_ssize_t lo = idx + 1, hi = b->len;
            while (lo < hi) {
                Py_ssize_t mid = (lo + hi) >> 1;
                if (lt(b->keys[mid], b->ids[mid], new, pid)) lo = mid + 1;
                else hi = mid;
            }
            at = lo - 1;
            memmove(b->keys + idx, b->keys + idx + 1, sizeof(double) * (at - idx));
            memmove(b->ids + idx, b->ids + idx + 1, sizeof(uint32_t) * (at - idx));
        }
        b->keys[at] = new;
        b->ids[at] = pid;
        self->changes++;
        return 0;
    }
    if (delete_at(self, pos, idx) < 0 || add_entry(self, new, pid) < 0) return -1;
    return 0;
}

static PyObject *Ladder_move(LadderObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "move(old, new, pid)");
    double old = PyFloat_AsDouble(args[0]);
    if (old == -1.0 && PyErr_Occurred()) return NULL;
    double new = PyFloat_AsDouble(args[1]);
    if (new == -1.0 && PyErr_Occurred()) return NULL;
    uint32_t pid;
    if (parse_pid(args[2], &pid) < 0) return NULL;
    if (ladder_move(self, old, new, pid) < 0) return NULL;
    Py_RETURN_NONE;
}

/* Entries with key < key (at_most: <= key); -1 with an exception set. */
static Py_ssize_t count_key(LadderObject *self, double key, int at_most) {
    Py_ssize_t lo = 0, hi = self->nblocks;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) >> 1;
        double m = block_max(&self->blocks[mid]);
        if (at_most ? m <= key : m < key) lo = mid + 1;
        else hi = mid;
    }
    if (lo == self->nblocks) return self->len;
    Py_ssize_t before = before_block(self, lo);
    if (before < 0) return -1;
    const Block *b = &self->blocks[lo];
    Py_ssize_t l = 0, h = b->len;
    while (l < h) {
        Py_ssize_t mid = (l + h) >> 1;
        if (at_most ? b->keys[mid] <= key : b->keys[mid] < key) l = mid + 1;
        else h = mid;
    }
    return before + l;
}

static PyObject *count(LadderObject *self, PyObject *arg, int at_most) {
    double key = PyFloat_AsDouble(arg);
    if (key == -1.0 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = count_key(self, key, at_most);
    return n < 0 ? NULL : PyLong_FromSsize_t(n);
}

/* A ladder left unchanged builds its rank column once it has counted this share of its length
 * in ranks: building costs about a pass over the entries, counting a few cache misses a rank,
 * so the column never costs more than about twice the counting it replaces. */
#define RANK_COLUMN_AFTER 32

/* rank_of[id] for every entry, in one pass in ladder order (competition ranks: a run of equal
 * keys shares the rank of its first entry, count_below + 1). -1 with an exception set. */
static int rank_column_build(LadderObject *self) {
    uint32_t top = 0;
    for (Py_ssize_t p = 0; p < self->nblocks; p++)
        for (Py_ssize_t i = 0; i < self->blocks[p].len; i++)
            if (self->blocks[p].ids[i] > top) top = self->blocks[p].ids[i];
    Py_ssize_t need = (Py_ssize_t)top + 1;
    if (need > self->rank_cap) {
        uint32_t *col = PyMem_Realloc(self->rank_of, sizeof(uint32_t) * need);
        if (!col) {
            PyErr_NoMemory();
            return -1;
        }
        self->rank_of = col;
        self->rank_cap = need;
    }
    memset(self->rank_of, 0, sizeof(uint32_t) * self->rank_cap);
    Py_ssize_t pos = 0, rank = 0;
    double prev = 0.0;
    for (Py_ssize_t p = 0; p < self->nblocks; p++) {
        const Block *b = &self->blocks[p];
        for (Py_ssize_t i = 0; i < b->len; i++, pos++) {
            if (pos == 0 || b->keys[i] != prev) rank = pos + 1;
            prev = b->keys[i];
            self->rank_of[b->ids[i]] = (uint32_t)rank;
        }
    }
    self->rank_changes = self->changes;
    return 0;
}

/* ranks(keys[, ids]): count_below(k) + 1 for each key of a list, in one call (a 256-player batch
 * answer asks for 256 ranks; the per-call overhead was most of their cost). ids, a buffer of
 * int64 (numpy intp), names each key's entry: keys[j] must be the key ids[j] has in the ladder;
 * with them a ladder unchanged for long enough answers from its rank column (above). */
static PyObject *Ladder_ranks(LadderObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) return PyErr_Format(PyExc_TypeError, "ranks(keys[, ids])");
    Py_buffer ids = {0};
    int have_ids = nargs == 2 && args[1] != Py_None;
    if (have_ids) {
        if (PyObject_GetBuffer(args[1], &ids, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return NULL;
        if (ids.itemsize != 8 || ids.format == NULL || (strcmp(ids.format, "q") && strcmp(ids.format, "l"))) {
            PyBuffer_Release(&ids);
            return PyErr_Format(PyExc_TypeError, "ranks: ids must be a buffer of int64");
        }
    }
    PyObject *seq = PySequence_Fast(args[0], "ranks(keys): keys must be a sequence of floats");
    if (seq == NULL) {
        if (have_ids) PyBuffer_Release(&ids);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = NULL;
    const int64_t *pid = have_ids ? (const int64_t *)ids.buf : NULL;
    if (have_ids && ids.len / 8 != n) {
        PyErr_Format(PyExc_ValueError, "ranks: %zd keys but %zd ids", n, ids.len / 8);
        goto done;
    }
    if (have_ids) {
        if (self->counted_at != self->changes) {
            self->counted_at = self->changes;
            self->counted = 0;
        }
        if (self->rank_of == NULL || self->rank_changes != self->changes) {
            if (self->counted >= self->len / RANK_COLUMN_AFTER) {
                if (rank_column_build(self) < 0) {
                    PyErr_Clear(); /* no memory for the column: count, as without ids */
                    self->counted = 0;
                }
            } else {
                self->counted += n;
            }
        }
    }
    int column = have_ids && self->rank_of != NULL && self->rank_changes == self->changes;
    out = PyList_New(n);
    if (out == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t c = -1;
        PyObject *v;
        if (column && pid[i] >= 0 && pid[i] < self->rank_cap && self->rank_of[pid[i]]) {
            c = (Py_ssize_t)self->rank_of[pid[i]] - 1;
        } else {
            double key = PyFloat_AsDouble(items[i]);
            if ((key == -1.0 && PyErr_Occurred()) || (c = count_key(self, key, 0)) < 0) goto fail;
        }
        if ((v = PyLong_FromSsize_t(c + 1)) == NULL) goto fail;
        PyList_SET_ITEM(out, i, v);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_DECREF(seq);
    if (have_ids) PyBuffer_Release(&ids);
    return out;
}

static PyObject *Ladder_count_below(LadderObject *self, PyObject *arg) { return count(self, arg, 0); }
static PyObject *Ladder_count_at_most(LadderObject *self, PyObject *arg) { return count(self, arg, 1); }

static PyObject *Ladder_index(LadderObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "index(key, pid)");
    double key = PyFloat_AsDouble(args[0]);
    uint32_t pid;
    Py_ssize_t pos, idx;
    if ((key == -1.0 && PyErr_Occurred()) || parse_pid(args[1], &pid) < 0) return NULL;
    if (locate(self, key, pid, &pos, &idx) < 0) return NULL;
    Py_ssize_t before = before_block(self, pos);
    if (before < 0) return NULL;
    return PyLong_FromSsize_t(before + idx);
}

static PyObject *Ladder_islice(LadderObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "islice(start, stop)");
    /* Clamped like Python slicing: an offset of 10**30 is past the end, not an error. */
    Py_ssize_t start = PyNumber_AsSsize_t(args[0], NULL);
    if (start == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t stop = PyNumber_AsSsize_t(args[1], NULL);
    if (stop == -1 && PyErr_Occurred()) return NULL;
    if (start < 0) start = 0;
    if (stop > self->len) stop = self->len;
    if (start >= stop) return PyList_New(0);
    if (!self->tree_ok && tree_build(self) < 0) return NULL;
    Py_ssize_t n = self->nblocks + 1, pos = 0, remaining = start, step = 1;
    while (step < n) step <<= 1;
    for (; step; step >>= 1) { /* walk the Fenwick tree down to the block holding `start` */
        Py_ssize_t nxt = pos + step;
        if (nxt < n && self->tree[nxt] <= remaining) {
            pos = nxt;
            remaining -= self->tree[nxt];
        }
    }
    PyObject *out = PyList_New(stop - start);
    if (!out) return NULL;
    Py_ssize_t k = 0;
    while (k < stop - start && pos < self->nblocks) {
        const Block *b = &self->blocks[pos];
        for (Py_ssize_t i = remaining; i < b->len && k < stop - start; i++) {
            PyObject *v = PyLong_FromUnsignedLong(b->ids[i]);
            if (!v) {
                Py_DECREF(out);
                return NULL;
            }
            PyList_SET_ITEM(out, k++, v);
        }
        remaining = 0;
        pos++;
    }
    return out;
}

static PyObject *all_ids(LadderObject *self) {
    PyObject *out = PyList_New(self->len);
    if (!out) return NULL;
    Py_ssize_t k = 0;
    for (Py_ssize_t p = 0; p < self->nblocks; p++) {
        const Block *b = &self->blocks[p];
        for (Py_ssize_t i = 0; i < b->len; i++) {
            PyObject *v = PyLong_FromUnsignedLong(b->ids[i]);
            if (!v) {
                Py_DECREF(out);
                return NULL;
            }
            PyList_SET_ITEM(out, k++, v);
        }
    }
    return out;
}

static PyObject *Ladder_iter(LadderObject *self) {
    PyObject *ids = all_ids(self);
    if (!ids) return NULL;
    PyObject *it = PyObject_GetIter(ids);
    Py_DECREF(ids);
    return it;
}

static PyObject *Ladder_entries(LadderObject *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyList_New(self->len);
    if (!out) return NULL;
    Py_ssize_t k = 0;
    for (Py_ssize_t p = 0; p < self->nblocks; p++) {
        const Block *b = &self->blocks[p];
        for (Py_ssize_t i = 0; i < b->len; i++) {
            PyObject *t = Py_BuildValue("(dk)", b->keys[i], (unsigned long)b->ids[i]);
            if (!t) {
                Py_DECREF(out);
                return NULL;
            }
            PyList_SET_ITEM(out, k++, t);
        }
    }
    PyObject *it = PyObject_GetIter(out);
    Py_DECREF(out);
    return it;
}

static PyObject *end_entry(LadderObject *self, int last) {
    if (!self->len) {
        PyErr_SetString(PyExc_IndexError, "empty ladder");
        return NULL;
    }
    const Block *b = &self->blocks[last ? self->nblocks - 1 : 0];
    Py_ssize_t i = last ? b->len - 1 : 0;
    return Py_BuildValue("(dk)", b->keys[i], (unsigned long)b->ids[i]);
}

static PyObject *Ladder_first(LadderObject *self, PyObject *Py_UNUSED(ignored)) { return end_entry(self, 0); }
static PyObject *Ladder_last(LadderObject *self, PyObject *Py_UNUSED(ignored)) { return end_entry(self, 1); }

static Py_ssize_t Ladder_len(LadderObject *self) { return self->len; }

static int Ladder_bool(LadderObject *self) { return self->len > 0; }

static void Ladder_dealloc(LadderObject *self) {
    for (Py_ssize_t p = 0; p < self->nblocks; p++) block_free(&self->blocks[p]);
    PyMem_Free(self->blocks);
    PyMem_Free(self->tree);
    PyMem_Free(self->rank_of);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Ladder(entries=(), load=1000): entries are (key, id) pairs in any order. */
static int Ladder_init(LadderObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"entries", "load", NULL};
    PyObject *entries = NULL;
    Py_ssize_t load = 1000;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|On", kwlist, &entries, &load)) return -1;
    if (load < 1 || load > LOAD_MAX) {
        PyErr_Format(PyExc_ValueError, "load must be between 1 and %d", LOAD_MAX);
        return -1;
    }
    self->load = load;
    self->changes++; /* whatever follows (a second __init__ included) drops the rank column */
    if (entries == NULL) return 0;
    PyObject *sorted = PySequence_List(entries);
    if (!sorted) return -1;
    if (PyList_Sort(sorted) < 0) {
        Py_DECREF(sorted);
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(sorted);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(sorted, i);
        double key;
        uint32_t pid;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "entries must be (key, id) pairs");
            Py_DECREF(sorted);
            return -1;
        }
        key = PyFloat_AsDouble(PyTuple_GET_ITEM(item, 0));
        if ((key == -1.0 && PyErr_Occurred()) || parse_pid(PyTuple_GET_ITEM(item, 1), &pid) < 0) {
            Py_DECREF(sorted);
            return -1;
        }
        if (i % load == 0 && insert_block(self, self->nblocks) < 0) {
            Py_DECREF(sorted);
            return -1;
        }
        Block *b = &self->blocks[self->nblocks - 1];
        b->keys[b->len] = key;
        b->ids[b->len] = pid;
        b->len++;
    }
    self->len = n;
    Py_DECREF(sorted);
    return 0;
}

/* Ladder.from_sorted(keys, ids, load=1000): a ladder of entries already in the index's order,
 * from two buffers (float64 keys, int64 ids), without a Python object per entry. Rebuilding a
 * million-player ladder from its ratings (a checkpoint restore, the inactivity sweep that moves
 * most of the ladder, a season reset) took 0.6 s through __init__'s list of tuples and its sort,
 * most of a restart's ladder work and all of a sweep's stall of the engine task. The order is
 * checked, not trusted: each entry must come strictly after the one before it (key, then id), so
 * a NaN key or a repeated entry is refused as __init__ would never have produced it. */
static int buffer_is(const Py_buffer *b, const char *code) {
    const char *f = b->format ? b->format : "B";
    if (*f == '@' || *f == '=') f++; /* native order and size */
    return b->itemsize == 8 && strcmp(f, code) == 0;
}

static PyObject *Ladder_from_sorted(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"keys", "ids", "load", NULL};
    PyObject *kobj, *iobj;
    Py_buffer kb = {0}, ib = {0};
    Py_ssize_t load = 1000;
    LadderObject *self = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|n", kwlist, &kobj, &iobj, &load)) return NULL;
    if (load < 1 || load > LOAD_MAX) {
        PyErr_Format(PyExc_ValueError, "load must be between 1 and %d", LOAD_MAX);
        return NULL;
    }
    if (PyObject_GetBuffer(kobj, &kb, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (PyObject_GetBuffer(iobj, &ib, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&kb);
        return NULL;
    }
    if (!buffer_is(&kb, "d") || !(buffer_is(&ib, "q") || buffer_is(&ib, "l"))) {
        PyErr_SetString(PyExc_TypeError, "from_sorted: keys must be a buffer of float64 and ids of int64");
        goto fail;
    }
    if (kb.ndim != 1 || ib.ndim != 1 || kb.len != ib.len) {
        PyErr_SetString(PyExc_ValueError, "from_sorted: keys and ids must be two columns of the same length");
        goto fail;
    }
    Py_ssize_t n = kb.len / (Py_ssize_t)sizeof(double);
    const double *keys = (const double *)kb.buf;
    const int64_t *ids = (const int64_t *)ib.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] > (int64_t)0xFFFFFFFF) {
            PyErr_Format(PyExc_OverflowError, "from_sorted: player id %lld does not fit in 32 bits", (long long)ids[i]);
            goto fail;
        }
        if (keys[i] != keys[i]) {
            PyErr_Format(PyExc_ValueError, "from_sorted: entry %zd has a NaN key", i);
            goto fail;
        }
        if (i && !lt(keys[i - 1], (uint32_t)ids[i - 1], keys[i], (uint32_t)ids[i])) { /* ids checked above */
            PyErr_Format(PyExc_ValueError, "from_sorted: entry %zd is not after the one before it (key, then id)", i);
            goto fail;
        }
    }
    self = (LadderObject *)type->tp_alloc(type, 0);
    if (!self) goto fail;
    self->load = load;
    self->changes++;
    for (Py_ssize_t start = 0; start < n; start += load) {
        Py_ssize_t len = n - start < load ? n - start : load;
        if (insert_block(self, self->nblocks) < 0) goto fail;
        Block *b = &self->blocks[self->nblocks - 1];
        memcpy(b->keys, keys + start, sizeof(double) * (size_t)len);
        for (Py_ssize_t i = 0; i < len; i++) b->ids[i] = (uint32_t)ids[start + i];
        b->len = len;
    }
    self->len = n;
    PyBuffer_Release(&kb);
    PyBuffer_Release(&ib);
    return (PyObject *)self;
fail:
    Py_XDECREF(self);
    PyBuffer_Release(&kb);
    PyBuffer_Release(&ib);
    return NULL;
}

static PyMethodDef Ladder_methods[] = {
    {"add", (PyCFunction)(void (*)(void))Ladder_add, METH_FASTCALL, "Insert (key, pid)."},
    {"remove", (PyCFunction)(void (*)(void))Ladder_remove, METH_FASTCALL, "Remove (key, pid)."},
    {"move", (PyCFunction)(void (*)(void))Ladder_move, METH_FASTCALL, "Re-key pid from old to new."},
    {"count_below", (PyCFunction)Ladder_count_below, METH_O, "Entries with key < key."},
    {"ranks", (PyCFunction)(void (*)(void))Ladder_ranks, METH_FASTCALL,
     "ranks(keys[, ids]): count_below(k) + 1 for each key of a list (ids: each key's entry, int64)."},
    {"count_at_most", (PyCFunction)Ladder_count_at_most, METH_O, "Entries with key <= key."},
    {"index", (PyCFunction)(void (*)(void))Ladder_index, METH_FASTCALL, "Position of (key, pid)."},
    {"islice", (PyCFunction)(void (*)(void))Ladder_islice, METH_FASTCALL, "Ids at start..stop-1."},
    {"entries", (PyCFunction)Ladder_entries, METH_NOARGS, "(key, id) pairs in order."},
    {"first", (PyCFunction)Ladder_first, METH_NOARGS, "The best entry."},
    {"last", (PyCFunction)Ladder_last, METH_NOARGS, "The worst entry."},
    {"from_sorted", (PyCFunction)(void (*)(void))Ladder_from_sorted, METH_CLASS | METH_VARARGS | METH_KEYWORDS,
     "from_sorted(keys, ids, load=1000): a ladder of entries already in order (float64 and int64 buffers; checked)."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Ladder_as_sequence = {.sq_length = (lenfunc)Ladder_len};
static PyNumberMethods Ladder_as_number = {.nb_bool = (inquiry)Ladder_bool};

PyTypeObject LadderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "arenad.core._ladder.Ladder",
    .tp_doc = "Sorted unique (key, id) entries; ascending order is the ladder order (best first).",
    .tp_basicsize = sizeof(LadderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Ladder_init,
    .tp_dealloc = (destructor)Ladder_dealloc,
    .tp_iter = (getiterfunc)Ladder_iter,
    .tp_methods = Ladder_methods,
    .tp_as_sequence = &Ladder_as_sequence,
    .tp_as_number = &Ladder_as_number,
};

static struct PyModuleDef ladder_module = {
    PyModuleDef_HEAD_INIT, "arenad.core._ladder", "The ladder index in C (docs/performance.md).", -1, NULL,
};

PyMODINIT_FUNC PyInit__ladder(void) {
    if (PyType_Ready(&LadderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&ladder_module);
    if (!m) return NULL;
    Py_INCREF(&LadderType);
    if (PyModule_AddObject(m, "Ladder", (PyObject *)&LadderType) < 0) {
        Py_DECREF(&LadderType);
        Py_DECREF(m);
        return NULL;
    }
    if (kernel_register(m) < 0 || sessions_register(m) < 0 || jsonl_register(m) < 0 ||
        lookup_register(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
