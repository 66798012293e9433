/* arenad.core._ladder.Kernel: Engine.apply's common case in C (docs/performance.md).
 *
 * The kernel is the second compiled piece. It runs one kill between two tracked players through
 * exactly the steps of arenad/core/engine.py `Engine._apply_py` (the reference): the same
 * operations on the same doubles in the same order, so its results are bit-identical
 * (tests/core/test_native_kernel.py compares whole engine states after random streams, and every
 * golden-vector and replay test runs on it). Every column, sum and counter stays in the Engine
 * object, read from its __slots__ on each call, so the rest of the engine (recalibration,
 * sweeps, season resets, export and import) is unchanged Python. The one state it holds itself
 * is the §2.1 cooldown (cd_*): adopted from Engine._cooldown / _cooldown_log at its next event
 * (both slots None while it holds them) and given back by Kernel.cooldown_release whenever
 * Python reads them (Engine._cooldown_py: _apply_py, export_state).
 *
 * It handles only what is common; it returns None *before changing anything* when an event
 * needs the Python path: a newcomer beyond the player cap, a self-kill, a non-finite or
 * too-late time, or a time that is not a float. The rare steps inside an update call back into
 * the Engine's own Python methods: §2.3 expiry, §8.2/§8.3 pooling, a §6.1 placement during a
 * season (Engine._n0 set), and the window's exact re-sum (math.fsum itself).
 *
 * Compiled with -ffp-contract=off: a fused multiply-add would round differently from Python.
 */
#include "_native.h"

#include <math.h>
#include <stddef.h>
#include <string.h>
#include <structmember.h>

/* CPython 3.11's array.array object (Modules/arraymodule.c). The layout is private, so
 * Kernel_init checks it for every column against the buffer protocol (same pointer, same
 * length, same item size) and refuses to build otherwise; the engine then stays on Python. */
typedef struct {
    PyObject_VAR_HEAD
    char *ob_item;
    Py_ssize_t allocated;
    const char *ob_descr; /* struct arraydescr *: its first member is the typecode */
    PyObject *weakreflist;
    Py_ssize_t ob_exports;
} ArrayObject;

enum { C_R, C_SIGMA, C_STREAK, C_PHI, C_POOL, C_N, C_LAST, C_WSUM, C_RET, C_H, C_WSLOT, C_WRING, C_ARING, C_DISP, C_PREY, NCOLS };
static const char *const col_attr[NCOLS] = {"_r",   "_sigma", "_streak", "_phi",   "_pool",  "_n",    "_last",
                                            "_wsum", "_ret",   "_h",      "_wslot", "_wring", "_aring", "_disp",
                                            "_prey"};
/* How the kernel reads each column (checked against Engine.KERNEL_COLUMNS at start-up). */
static const char col_code[NCOLS] = {'d', 'd', 'q', 'd', 'd', 'q', 'd', 'd', 'l', 'd', 'I', 'd', 'd', 'd', 'q'};
#define DISPLAY_K 3.0 /* engine.DISPLAY_K */

enum {
    K_CLOCK, K_LATE, K_FILTERED, K_NACTIVE, K_SUM_ACTIVE, K_SUM_ALL, K_SUM_SIGMA, K_RLO, K_RHI,
    K_DELTA_A, K_DELTA_B, K_APPLIED, K_NAMES, K_IDS, K_COOLDOWN, K_LOG, K_EXPIRY, K_ACTIVE,
    K_LADDER, K_TIER, K_BOUNDS, K_CAL, K_CAL_INFO, K_CAL_N, K_QRING, K_QN, K_RECAL_APPLIED, K_LADDER_OK,
    K_NEG_BOUNDS, K_TIER_COUNTS, K_TIER_ACTIVE, K_TIER_CHANGES, NKEYS
};
static const char *const key_names[NKEYS] = {
    "clock", "late_applied", "filtered", "_n_active", "_sum_r_active", "_sum_r_all", "_sum_sigma",
    "_r_lo", "_r_hi", "last_delta_attacker", "last_delta_victim", "applied", "names", "ids",
    "_cooldown", "_cooldown_log", "_expiry", "_active", "_ladder", "_tier", "_bounds", "_cal", "_cal_info", "_cal_n", "_qring", "_qn", "recal_applied",
    "_ladder_ok", "_neg_bounds", "_tier_counts", "_tier_active", "tier_changes"};

static PyObject *keys[NKEYS];
static PyObject *col_keys[NCOLS];
static PyObject *s_append, *s_popleft, *s_expire, *s_pooled, *s_tiers, *s_window;
static PyObject *s_next_recal, *s_repeat, *s_add, *s_n0, *s_offset, *s_ladder_add;
static PyTypeObject *array_type;
static PyObject *deque_type;
static PyObject *fsum_fn, *heappush_fn;

#define TIER_COUNT 15
#define ID_BITS 32
#define INV_PI (1.0 / 3.141592653589793)
#define K4PI (4.0 / 3.141592653589793) /* engine._K4PI */
#define CAL_MIN 0.125
#define CAL_MAX 8.0
#define CAL_WARMUP_MIN 20.0 /* engine.CAL_WARMUP_MIN */

#define CD_EMPTY UINT64_MAX /* no pair: ids are below 2**32 - 1 */
typedef struct {
    uint64_t key, seq;
    double t;
} CdSlot;
typedef struct {
    double t;
    uint64_t pair;
} CdLog;

typedef struct {
    PyObject_HEAD
    PyObject *engine;
    /* Where each attribute lives in the Engine object: Engine declares __slots__, so an
     * attribute is one pointer at a fixed offset (read from its member descriptor at init). */
    Py_ssize_t koff[NKEYS];
    Py_ssize_t coff[NCOLS];
    Py_ssize_t off_next_recal;
    Py_ssize_t off_n0, off_offset; /* Engine._n0 and Engine.offset: read by add_player only */
    double mu0, sigma0;            /* ADRParams.mu0 / sigma0 (the params are frozen) */
    char ccode[NCOLS]; /* the type codes Engine.KERNEL_COLUMNS declares */
    PyObject *applied_obj, *filtered_obj;
    /* ADRParams as derived by engine.kernel_constants, read by name from Engine._kc. */
    double t_return_s, tau_s, drift_s, smax, smin, theta, lam, speak, speak2, eta_min, span;
    double rho_s, rho_v_w, gamma_phi, c_loss, dmax, inv_g2, lp, keep_phi;
    double late_tolerance, t_cooldown, sigma_place, h_req, active_window_s;
    double h_toward, h_away;         /* ADRParams.tier_pull's two thresholds (tier_need) */
    double tier_p[TIER_COUNT + 1];   /* 0, then the targets p_k (Engine._kc["tier_p"]) */
    double cal_keep, cal_warm, cal_mem, grace_s, repeat_w, farm_k;
    int64_t returning_events, wlen, s_max, n_act, n_min, max_players, recal_min_events;
    int corrected, pool_losses, decay_on, logistic, cap_decay, sweep_sigma, display_cap;
    /* The engine's scalars (clock, sums, counters, calibration) while a batch runs (feed_many,
     * score_many, run: `batch` set): each read from its slot on first use, written back (only
     * those that changed) before a Python method of the engine runs and when the batch returns,
     * so a batch builds no float or int object per event for them, and Python never sees a
     * stale value: it only runs in those two places. One event (apply, feed) reads and writes
     * the slots directly, as it did before, which costs it less than the write-back would.
     * Indexed by the K_ keys. */
    double sd[NKEYS];
    long long si[NKEYS];
    uint64_t s_loaded, s_dirty;
    int batch;
    /* The §2.1 cooldown while the kernel owns it (the engine's _cooldown slot is None then; see
     * cd_adopt and Kernel.cooldown_release): an open-addressing table (linear probing, backward-
     * shift deletion) of pair -> time of the last counted kill, each entry with the sequence
     * number of its insertion so that the dict's iteration order is kept, and a ring of
     * (time, pair) in time order: exactly Engine._apply_py's dict and deque. */
    CdSlot *cd_tab;
    size_t cd_cap, cd_n; /* cd_cap: a power of two, 0 before the first adoption */
    int cd_bits;
    uint64_t cd_seq;
    CdLog *cd_log;
    size_t cd_lcap, cd_lhead, cd_llen; /* cd_lcap: a power of two */
} KernelObject;

/* The scalars that are Python ints (the others are floats). */
#define INT_KEYS                                                                                                 \
    ((1ULL << K_LATE) | (1ULL << K_FILTERED) | (1ULL << K_NACTIVE) | (1ULL << K_APPLIED) | (1ULL << K_QN) |     \
     (1ULL << K_RECAL_APPLIED) | (1ULL << K_TIER_CHANGES))

static inline double *dcol(PyObject *o) { return (double *)((ArrayObject *)o)->ob_item; }
static inline int64_t *icol(PyObject *o) { return (int64_t *)((ArrayObject *)o)->ob_item; }

/* The engine's attribute at `off` (borrowed); NULL with AttributeError when unset. */
static inline PyObject *slot_at(PyObject *engine, Py_ssize_t off, PyObject *name) {
    PyObject *v = *(PyObject **)((char *)engine + off);
    if (!v) PyErr_SetObject(PyExc_AttributeError, name);
    return v;
}
#define ITEM(K) slot_at(self->engine, self->koff[K], keys[K])

/* Sets the engine's attribute at `off` to `v`, a new reference (stolen). */
static inline int slot_set(PyObject *engine, Py_ssize_t off, PyObject *v) {
    if (!v) return -1;
    PyObject **p = (PyObject **)((char *)engine + off);
    Py_XSETREF(*p, v);
    return 0;
}

/* The float scalar k (see KernelObject.sd). */
static inline __attribute__((always_inline)) int get_double(KernelObject *self, int k, double *out) {
    if (!self->batch) {
        PyObject *v = ITEM(k);
        if (!v) return -1;
        *out = PyFloat_AsDouble(v);
        return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
    }
    if (!(self->s_loaded & (1ULL << k))) {
        PyObject *v = ITEM(k);
        if (!v) return -1;
        double x = PyFloat_AsDouble(v);
        if (x == -1.0 && PyErr_Occurred()) return -1;
        self->sd[k] = x;
        self->s_loaded |= 1ULL << k;
    }
    *out = self->sd[k];
    return 0;
}

static inline __attribute__((always_inline)) int set_double(KernelObject *self, int k, double x) {
    if (!self->batch) return slot_set(self->engine, self->koff[k], PyFloat_FromDouble(x));
    self->sd[k] = x;
    self->s_loaded |= 1ULL << k;
    self->s_dirty |= 1ULL << k;
    return 0;
}

/* The int scalar k. */
static inline __attribute__((always_inline)) int get_int(KernelObject *self, int k, long long *out) {
    if (!self->batch) {
        PyObject *v = ITEM(k);
        if (!v) return -1;
        *out = PyLong_AsLongLong(v);
        return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
    }
    if (!(self->s_loaded & (1ULL << k))) {
        PyObject *v = ITEM(k);
        if (!v) return -1;
        long long n = PyLong_AsLongLong(v);
        if (n == -1 && PyErr_Occurred()) return -1;
        self->si[k] = n;
        self->s_loaded |= 1ULL << k;
    }
    *out = self->si[k];
    return 0;
}

static inline __attribute__((always_inline)) int set_int(KernelObject *self, int k, long long n) {
    if (!self->batch) return slot_set(self->engine, self->koff[k], PyLong_FromLongLong(n));
    self->si[k] = n;
    self->s_loaded |= 1ULL << k;
    self->s_dirty |= 1ULL << k;
    return 0;
}

/* engine.<k> += 1, as Python's int. */
static inline int increment(KernelObject *self, int k) {
    long long n;
    if (get_int(self, k, &n) < 0) return -1;
    return set_int(self, k, n + 1);
}

/* The changed scalars back into the engine's slots. */
static int scalars_flush(KernelObject *self) {
    uint64_t dirty = self->s_dirty;
    self->s_dirty = 0;
    while (dirty) {
        int k = __builtin_ctzll(dirty);
        dirty &= dirty - 1;
        PyObject *v = (INT_KEYS >> k) & 1 ? PyLong_FromLongLong(self->si[k]) : PyFloat_FromDouble(self->sd[k]);
        if (slot_set(self->engine, self->koff[k], v) < 0) return -1;
    }
    return 0;
}

/* A batch starts: the scalars are held here until scalars_done. */
static inline void scalars_begin(KernelObject *self) {
    self->batch = 1;
    self->s_loaded = self->s_dirty = 0;
}

/* A batch returns to Python: the scalars written back and forgotten (Python may change them
 * before the next call). Keeps `result` and any exception already set. */
static PyObject *scalars_done(KernelObject *self, PyObject *result) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    int rc = scalars_flush(self);
    self->s_loaded = 0;
    self->batch = 0;
    if (rc < 0) {
        Py_XDECREF(result);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        return NULL;
    }
    PyErr_Restore(et, ev, tb);
    return result;
}

static PyObject *call_method(PyObject *obj, PyObject *name, PyObject **args, size_t nargs) {
    PyObject *full[5];
    full[0] = obj;
    for (size_t i = 0; i < nargs; i++) full[i + 1] = args[i];
    return PyObject_VectorcallMethod(name, full, (nargs + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* self.engine.<name>(*args): the scalars written back first and read again after (the method
 * may read and change them). */
static PyObject *engine_call(KernelObject *self, PyObject *name, PyObject **args, size_t nargs) {
    if (scalars_flush(self) < 0) return NULL;
    int batch = self->batch;
    self->batch = 0; /* should the method enter the kernel again, it reads and writes the slots */
    PyObject *res = call_method(self->engine, name, args, nargs);
    self->batch = batch;
    self->s_loaded = 0;
    return res;
}

/* self.engine.<name>(i, x, y[, z]) with floats built here; returns a new reference. */
static PyObject *callback(KernelObject *self, PyObject *name, Py_ssize_t i, int nfloats, double x, double y,
                          double z) {
    PyObject *args[4] = {NULL, NULL, NULL, NULL};
    PyObject *res = NULL;
    size_t n = 0;
    if (i >= 0 && !(args[n++] = PyLong_FromSsize_t(i))) goto done;
    double vals[3] = {x, y, z};
    for (int k = 0; k < nfloats; k++)
        if (!(args[n++] = PyFloat_FromDouble(vals[k]))) goto done;
    res = engine_call(self, name, args, n);
done:
    for (size_t k = 0; k < 4; k++) Py_XDECREF(args[k]);
    return res;
}

/* Engine._tier_counts[k] (or _tier_active[k]) += d; 0, or -1 with an error. The list is
 * checked by the caller (tier_list). */
static int tier_count_add(PyObject *counts, Py_ssize_t k, long d) {
    PyObject *old = PyList_GET_ITEM(counts, k);
    long n = PyLong_AsLong(old);
    if (n == -1 && PyErr_Occurred()) return -1;
    PyObject *v = PyLong_FromLong(n + d);
    if (!v) return -1;
    PyList_SET_ITEM(counts, k, v);
    Py_DECREF(old);
    return 0;
}

/* Engine._tier_counts (K_TIER_COUNTS) or _tier_active (K_TIER_ACTIVE) when C may read and
 * change it: a list of TIER_COUNT + 1 exact ints; NULL (no error) when Python must, or with an
 * error. */
static PyObject *tier_list(KernelObject *self, int key) {
    PyObject *counts = ITEM(key);
    if (!counts) return NULL;
    if (!PyList_CheckExact(counts) || PyList_GET_SIZE(counts) != TIER_COUNT + 1) return NULL;
    for (Py_ssize_t k = 0; k <= TIER_COUNT; k++)
        if (!PyLong_CheckExact(PyList_GET_ITEM(counts, k))) return NULL;
    return counts;
}

/* Engine._activate(i, n, t, r_now) in C (§2.3): player i, at its n-th counted event, joins the
 * active set when the n_active-th latest of its events is within the look-back window: its
 * activity byte, the active count and sum, its tier's count of active players when it is placed,
 * and (horizon, i) pushed on Engine._expiry by the heapq module's own heappush. */
static int activate(KernelObject *self, const double *aring, char *active, const char *tier, PyObject *expiry,
                    Py_ssize_t i, int64_t n, double t, double r_now) {
    double horizon = aring[i * self->n_act + n % self->n_act] + self->active_window_s;
    if (!(horizon > t)) return 0;
    long long n_active;
    double sum_active;
    if (get_int(self, K_NACTIVE, &n_active) < 0 || get_double(self, K_SUM_ACTIVE, &sum_active) < 0) return -1;
    int k = (unsigned char)tier[i];
    /* checked before the event began (Kernel's validation), so not NULL here but for a bug */
    PyObject *tier_active = k ? tier_list(self, K_TIER_ACTIVE) : NULL;
    if (k && !tier_active) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "Engine._tier_active changed during an event");
        return -1;
    }
    PyObject *entry = Py_BuildValue("(dn)", horizon, i);
    if (!entry) return -1;
    PyObject *args[2] = {expiry, entry};
    PyObject *res = PyObject_Vectorcall(heappush_fn, args, 2, NULL);
    Py_DECREF(entry);
    if (!res) return -1;
    Py_DECREF(res);
    active[i] = 1;
    if (set_int(self, K_NACTIVE, n_active + 1) < 0 || set_double(self, K_SUM_ACTIVE, sum_active + r_now) < 0)
        return -1;
    /* the tier's count and, at index 0, the total */
    return tier_active ? (tier_count_add(tier_active, k, 1) < 0 ? -1 : tier_count_add(tier_active, 0, 1)) : 0;
}

/* ---- the §2.1 cooldown in C ---- */
static inline size_t cd_home(const KernelObject *self, uint64_t key) {
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> (64 - self->cd_bits));
}

static inline CdSlot *cd_find(KernelObject *self, uint64_t key) {
    if (!self->cd_n) return NULL;
    size_t mask = self->cd_cap - 1;
    for (size_t i = cd_home(self, key);; i = (i + 1) & mask) {
        CdSlot *s = &self->cd_tab[i];
        if (s->key == key) return s;
        if (s->key == CD_EMPTY) return NULL;
    }
}

/* Puts an entry into a table with room (no growth, key absent). */
static inline void cd_place(KernelObject *self, uint64_t key, uint64_t seq, double t) {
    size_t mask = self->cd_cap - 1, i = cd_home(self, key);
    while (self->cd_tab[i].key != CD_EMPTY) i = (i + 1) & mask;
    self->cd_tab[i].key = key;
    self->cd_tab[i].seq = seq;
    self->cd_tab[i].t = t;
    self->cd_n++;
}

/* A table of 2**bits slots holding the current entries; -1 with MemoryError. */
static int cd_resize(KernelObject *self, int bits) {
    size_t cap = (size_t)1 << bits;
    CdSlot *tab = PyMem_Malloc(cap * sizeof(CdSlot));
    if (!tab) return PyErr_NoMemory(), -1;
    for (size_t i = 0; i < cap; i++) tab[i].key = CD_EMPTY;
    CdSlot *old = self->cd_tab;
    size_t old_cap = self->cd_cap;
    self->cd_tab = tab;
    self->cd_cap = cap;
    self->cd_bits = bits;
    self->cd_n = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key != CD_EMPTY) cd_place(self, old[i].key, old[i].seq, old[i].t);
    PyMem_Free(old);
    return 0;
}

/* Room for one more table entry and one more log entry (at most half the table in use), so
 * that the event's cooldown step cannot fail once it has started. */
static int cd_reserve(KernelObject *self) {
    if ((self->cd_n + 1) * 2 > self->cd_cap && cd_resize(self, self->cd_cap ? self->cd_bits + 1 : 10) < 0) return -1;
    if (self->cd_llen == self->cd_lcap) {
        size_t cap = self->cd_lcap ? self->cd_lcap * 2 : 1024;
        CdLog *log = PyMem_Malloc(cap * sizeof(CdLog));
        if (!log) return PyErr_NoMemory(), -1;
        for (size_t k = 0; k < self->cd_llen; k++) log[k] = self->cd_log[(self->cd_lhead + k) & (self->cd_lcap - 1)];
        PyMem_Free(self->cd_log);
        self->cd_log = log;
        self->cd_lcap = cap;
        self->cd_lhead = 0;
    }
    return 0;
}

/* cooldown[key] = t (an existing key keeps its place in the order) and log.append((t, key));
 * cd_reserve first. */
static inline void cd_count(KernelObject *self, uint64_t key, double t) {
    CdSlot *s = cd_find(self, key);
    if (s) s->t = t;
    else cd_place(self, key, self->cd_seq++, t);
    self->cd_log[(self->cd_lhead + self->cd_llen++) & (self->cd_lcap - 1)] = (CdLog){t, key};
}

/* del cooldown[key] for the entry at s: backward-shift deletion. */
static void cd_delete(KernelObject *self, CdSlot *s) {
    size_t mask = self->cd_cap - 1, i = (size_t)(s - self->cd_tab);
    for (size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        CdSlot *e = &self->cd_tab[j];
        if (e->key == CD_EMPTY) break;
        size_t h = cd_home(self, e->key);
        /* e may move to the hole at i when its home is not cyclically in (i, j] */
        if (((j - h) & mask) >= ((j - i) & mask)) {
            self->cd_tab[i] = *e;
            i = j;
        }
    }
    self->cd_tab[i].key = CD_EMPTY;
    self->cd_n--;
}

/* The §2.1 cooldown log: forget pairs whose last counted kill left the window, at most four per
 * event (Engine._apply_py). */
static inline void cd_trim(KernelObject *self, double horizon) {
    for (int step = 0; step < 4 && self->cd_llen; step++) {
        CdLog old = self->cd_log[self->cd_lhead];
        if (old.t > horizon) break;
        self->cd_lhead = (self->cd_lhead + 1) & (self->cd_lcap - 1);
        self->cd_llen--;
        CdSlot *s = cd_find(self, old.pair);
        if (s && s->t == old.t) cd_delete(self, s);
    }
}

static void cd_empty(KernelObject *self) {
    for (size_t i = 0; i < self->cd_cap; i++) self->cd_tab[i].key = CD_EMPTY;
    self->cd_n = 0;
    self->cd_seq = 0;
    self->cd_lhead = self->cd_llen = 0;
}

static int cd_key(PyObject *o, uint64_t *out) {
    unsigned long long k = PyLong_Check(o) ? PyLong_AsUnsignedLongLong(o) : (unsigned long long)-1;
    if (k == (unsigned long long)-1) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "cooldown pairs must be ints below 2**64 - 1");
        return -1;
    }
    *out = k;
    return 0;
}

/* The engine's _cooldown dict and _cooldown_log deque into the C table (Python changed them
 * since the kernel last owned the cooldown, or never gave them to it), then both slots None:
 * the kernel owns the cooldown until Kernel.cooldown_release. */
static int cd_adopt(KernelObject *self, PyObject *cooldown) {
    PyObject *log = ITEM(K_LOG);
    if (!log) return -1;
    if (!PyDict_CheckExact(cooldown) || Py_TYPE(log) != (PyTypeObject *)deque_type)
        return PyErr_Format(PyExc_TypeError, "Engine._cooldown must be a dict and _cooldown_log a deque"), -1;
    cd_empty(self);
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(cooldown, &pos, &k, &v)) {
        uint64_t key;
        if (cd_key(k, &key) < 0) return -1;
        double t = PyFloat_AsDouble(v);
        if (t == -1.0 && PyErr_Occurred()) return -1;
        if (cd_reserve(self) < 0) return -1;
        cd_place(self, key, self->cd_seq++, t);
    }
    PyObject *it = PyObject_GetIter(log);
    if (!it) return -1;
    PyObject *e;
    while ((e = PyIter_Next(it))) {
        uint64_t key;
        double t = -1.0;
        int bad = !PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2;
        if (bad) PyErr_SetString(PyExc_TypeError, "cooldown log entries must be (time, pair)");
        else if ((t = PyFloat_AsDouble(PyTuple_GET_ITEM(e, 0))) == -1.0 && PyErr_Occurred()) bad = 1;
        else if (cd_key(PyTuple_GET_ITEM(e, 1), &key) < 0 || cd_reserve(self) < 0) bad = 1;
        Py_DECREF(e);
        if (bad) {
            Py_DECREF(it);
            cd_empty(self);
            return -1;
        }
        self->cd_log[(self->cd_lhead + self->cd_llen++) & (self->cd_lcap - 1)] = (CdLog){t, key};
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return cd_empty(self), -1;
    if (cd_reserve(self) < 0) return -1;
    Py_INCREF(Py_None);
    Py_INCREF(Py_None);
    slot_set(self->engine, self->koff[K_COOLDOWN], Py_None);
    slot_set(self->engine, self->koff[K_LOG], Py_None);
    return 0;
}

/* The kernel owns the cooldown (adopting it first when Python holds it); room for one event. */
static inline int cd_ensure(KernelObject *self) {
    PyObject *cooldown = ITEM(K_COOLDOWN);
    if (!cooldown) return -1;
    if (cooldown != Py_None) return cd_adopt(self, cooldown);
    return cd_reserve(self);
}

static int seq_order(const void *x, const void *y) {
    uint64_t a = (*(const CdSlot *const *)x)->seq, b = (*(const CdSlot *const *)y)->seq;
    return a < b ? -1 : a > b;
}

/* Kernel.cooldown_release(): the cooldown back to Python as the engine's _cooldown dict (in
 * the insertion order Python's dict would have) and _cooldown_log deque; the kernel adopts
 * them again at its next event. Nothing to do when Python holds them. */
static PyObject *Kernel_cooldown_release(KernelObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!self->engine) return PyErr_Format(PyExc_RuntimeError, "Kernel is not bound to an engine");
    PyObject *cur = ITEM(K_COOLDOWN);
    if (!cur) return NULL;
    if (cur != Py_None) Py_RETURN_NONE;
    CdSlot **order = PyMem_Malloc((self->cd_n ? self->cd_n : 1) * sizeof(CdSlot *));
    if (!order) return PyErr_NoMemory();
    size_t n = 0;
    for (size_t i = 0; i < self->cd_cap; i++)
        if (self->cd_tab[i].key != CD_EMPTY) order[n++] = &self->cd_tab[i];
    qsort(order, n, sizeof(CdSlot *), seq_order);
    PyObject *dict = PyDict_New(), *items = PyList_New((Py_ssize_t)self->cd_llen), *log = NULL;
    if (!dict || !items) goto fail;
    for (size_t k = 0; k < n; k++) {
        PyObject *key = PyLong_FromUnsignedLongLong(order[k]->key), *t = PyFloat_FromDouble(order[k]->t);
        int rc = key && t ? PyDict_SetItem(dict, key, t) : -1;
        Py_XDECREF(key);
        Py_XDECREF(t);
        if (rc < 0) goto fail;
    }
    for (size_t k = 0; k < self->cd_llen; k++) {
        CdLog e = self->cd_log[(self->cd_lhead + k) & (self->cd_lcap - 1)];
        PyObject *tup = Py_BuildValue("(dK)", e.t, (unsigned long long)e.pair);
        if (!tup) goto fail;
        PyList_SET_ITEM(items, (Py_ssize_t)k, tup);
    }
    log = PyObject_CallOneArg(deque_type, items);
    if (!log) goto fail;
    Py_DECREF(items);
    PyMem_Free(order);
    slot_set(self->engine, self->koff[K_COOLDOWN], dict);
    slot_set(self->engine, self->koff[K_LOG], log);
    cd_empty(self);
    Py_RETURN_NONE;
fail:
    PyMem_Free(order);
    Py_XDECREF(dict);
    Py_XDECREF(items);
    return NULL;
}

/* §3.1 P from z = (r_a - r_b) / D: engine.link_p. */
static inline double link_p(const KernelObject *self, double z) {
    if (self->logistic) {
        double u = K4PI * z;
        if (u < -700.0) u = -700.0;
        return 1.0 / (1.0 + exp(-u));
    }
    return 0.5 + INV_PI * atan(z);
}

/* Engine._predicted: the calibrated prediction into the quality ring, one calibration step. */
static int predicted(KernelObject *self, double z) {
    double cal;
    if (get_double(self, K_CAL, &cal) < 0) return -1;
    PyObject *ring = ITEM(K_QRING);
    if (!ring) return -1;
    if (Py_TYPE(ring) != array_type || *((ArrayObject *)ring)->ob_descr != 'd' || Py_SIZE(ring) < 1)
        return PyErr_Format(PyExc_TypeError, "Engine._qring must be a non-empty array('d')"), -1;
    long long qn;
    if (get_int(self, K_QN, &qn) < 0) return -1;
    double cz = cal * z, p, q, dp;
    if (self->logistic) {
        double u = K4PI * cz;
        if (u < -700.0) u = -700.0;
        p = 1.0 / (1.0 + exp(-u));
        q = p * (1.0 - p);
        dp = q * K4PI * z;
    } else {
        p = 0.5 + INV_PI * atan(cz);
        q = p * (1.0 - p);
        dp = INV_PI * z / (1.0 + cz * cz);
    }
    double grad = 0.0, fisher = 0.0;
    if (q > 0.0) {
        grad = dp / p;
        fisher = dp * dp / q;
    }
    dcol(ring)[qn % Py_SIZE(ring)] = p;
    if (set_int(self, K_QN, qn + 1) < 0) return -1;
    if (self->cal_mem != 0.0) { /* a Newton step with the remembered information */
        double info, n, keep = self->cal_keep;
        if (get_double(self, K_CAL_N, &n) < 0) return -1;
        n += 1.0;
        if (set_double(self, K_CAL_N, n) < 0) return -1;
        if (self->cal_warm != 0.0) { /* the warm-up (ADRParams.calibration_warmup) */
            double m = self->cal_warm * n;
            if (m < CAL_WARMUP_MIN) m = CAL_WARMUP_MIN;
            if (m < self->cal_mem) keep = 1.0 - 1.0 / m;
        }
        if (get_double(self, K_CAL_INFO, &info) < 0) return -1;
        info = info * keep + fisher;
        if (set_double(self, K_CAL_INFO, info) < 0) return -1;
        if (info > 0.0) { /* none yet (a memory of one kill, a certain prediction): no step */
            double c = cal + grad / info;
            c = c < CAL_MIN ? CAL_MIN : c > CAL_MAX ? CAL_MAX : c;
            if (set_double(self, K_CAL, c) < 0) return -1;
        }
    }
    return 0;
}

/* Room for `n` more items in an array.array, as array_resize (Modules/arraymodule.c) grows it:
 * the same allocation, so memory use does not depend on which path added the player. */
static int array_grow(PyObject *o, Py_ssize_t n, Py_ssize_t itemsize) {
    ArrayObject *a = (ArrayObject *)o;
    Py_ssize_t size = Py_SIZE(a), newsize = size + n;
    if (a->allocated >= newsize && a->ob_item != NULL) return 0;
    Py_ssize_t alloc = (newsize >> 4) + (size < 8 ? 3 : 7) + newsize;
    if (alloc > PY_SSIZE_T_MAX / itemsize) return PyErr_NoMemory(), -1;
    char *items = PyMem_Realloc(a->ob_item, (size_t)(alloc * itemsize));
    if (!items) return PyErr_NoMemory(), -1;
    a->ob_item = items;
    a->allocated = alloc;
    return 0;
}

/* Engine._new_window(i) in C: player i's §2.2 ring block at its second counted event, appended
 * to Engine._wring as its extend() would grow it, holding its first |change| (the window's sum
 * so far) in slot 0; 1 + the block, 0 when Python must (the ring's buffer is exported, or the
 * block number does not fit _wslot), -1 with an error. */
static Py_ssize_t new_window(KernelObject *self, PyObject *ring, const double *wsum, uint32_t *wslot, Py_ssize_t i) {
    ArrayObject *w = (ArrayObject *)ring;
    Py_ssize_t size = Py_SIZE(w), block = size / self->wlen;
    if (w->ob_exports || block + 1 > (Py_ssize_t)UINT32_MAX) return 0;
    if (array_grow(ring, self->wlen, 8) < 0) return -1;
    double *cells = (double *)w->ob_item + size;
    memset(cells, 0, (size_t)self->wlen * sizeof(double));
    Py_SET_SIZE(w, size + self->wlen);
    ((double *)w->ob_item)[block * self->wlen] = wsum[i];
    wslot[i] = (uint32_t)(block + 1);
    return block + 1;
}

/* Engine._add_player(name) in C: the same columns, lists, dict entries, ladder entry and sums,
 * in the same state. 1 when added, 0 when Python's _add_player must do it (a season's _n0
 * column, an exported buffer on a column), -1 with an error (nothing changed). */
static int add_player(KernelObject *self, PyObject *name) {
    PyObject *n0 = slot_at(self->engine, self->off_n0, s_n0);
    PyObject *names = ITEM(K_NAMES), *ids = ITEM(K_IDS), *tier = ITEM(K_TIER), *active = ITEM(K_ACTIVE);
    PyObject *off_obj = slot_at(self->engine, self->off_offset, s_offset);
    PyObject *ladder_ok = ITEM(K_LADDER_OK);
    if (!n0 || !names || !ids || !tier || !active || !off_obj || !ladder_ok) return -1;
    if (n0 != Py_None || !PyList_CheckExact(names) || !PyDict_CheckExact(ids) || !PyByteArray_CheckExact(tier) ||
        !PyByteArray_CheckExact(active) || !PyFloat_CheckExact(off_obj) || !PyBool_Check(ladder_ok))
        return 0;
    PyObject *col[NCOLS];
    for (int c = 0; c < NCOLS; c++) {
        PyObject *o = slot_at(self->engine, self->coff[c], col_keys[c]);
        if (!o) return -1;
        if (Py_TYPE(o) != array_type || *((ArrayObject *)o)->ob_descr != col_code[c] || ((ArrayObject *)o)->ob_exports)
            return 0;
        col[c] = o;
    }
    Py_ssize_t i = PyList_GET_SIZE(names);
    double r0 = self->mu0 - PyFloat_AS_DOUBLE(off_obj);
    double sum_all, sum_sigma;
    if (get_double(self, K_SUM_ALL, &sum_all) < 0 || get_double(self, K_SUM_SIGMA, &sum_sigma) < 0) return -1;
    /* everything that can fail, first */
    for (int c = 0; c < NCOLS; c++) {
        if (c == C_WRING) continue;
        if (array_grow(col[c], c == C_ARING ? self->n_act : 1, c == C_WSLOT ? 4 : 8) < 0) return -1;
    }
    PyObject *id = PyLong_FromSsize_t(i);
    if (!id) return -1;
    if (PyList_Append(names, name) < 0) return Py_DECREF(id), -1;
    if (PyDict_SetItem(ids, name, id) < 0) {
        Py_DECREF(id);
        PyList_SetSlice(names, i, i + 1, NULL);
        return -1;
    }
    Py_DECREF(id);
    for (int c = 0; c < NCOLS; c++) {
        if (c == C_WRING) continue;
        ArrayObject *a = (ArrayObject *)col[c];
        Py_ssize_t at = Py_SIZE(a);
        if (c == C_ARING) {
            memset(a->ob_item + at * 8, 0, (size_t)self->n_act * 8);
            Py_SET_SIZE(a, at + self->n_act);
            continue;
        }
        if (c == C_WSLOT) ((uint32_t *)a->ob_item)[at] = 0;
        else if (col_code[c] == 'd') ((double *)a->ob_item)[at] =
            c == C_R ? r0 : c == C_SIGMA ? self->sigma0 : c == C_LAST ? -INFINITY : c == C_DISP ? r0 - DISPLAY_K * self->sigma0 : 0.0;
        else ((int64_t *)a->ob_item)[at] = 0;
        Py_SET_SIZE(a, at + 1);
    }
    Py_ssize_t nt = PyByteArray_GET_SIZE(tier), nact = PyByteArray_GET_SIZE(active);
    if (PyByteArray_Resize(tier, nt + 1) < 0 || PyByteArray_Resize(active, nact + 1) < 0) return -1;
    PyByteArray_AS_STRING(tier)[nt] = 0;
    PyByteArray_AS_STRING(active)[nact] = 0;
    if (ladder_ok == Py_True) {
        PyObject *ladder = ITEM(K_LADDER);
        if (!ladder) return -1;
        PyObject *args[2] = {PyFloat_FromDouble(-r0), PyLong_FromSsize_t(i)};
        PyObject *res = args[0] && args[1] ? call_method(ladder, s_ladder_add, args, 2) : NULL;
        Py_XDECREF(args[0]);
        Py_XDECREF(args[1]);
        if (!res) return -1;
        Py_DECREF(res);
    }
    if (set_double(self, K_SUM_ALL, sum_all + r0) < 0 || set_double(self, K_SUM_SIGMA, sum_sigma + self->sigma0) < 0)
        return -1;
    return 1;
}


/* Engine._move_tier(i, old, new): 1 when done, 0 when Python must (the counts' shape), -1 with
 * an error. */
static int tier_move(KernelObject *self, PyObject *tier_obj, const char *active, double *acc, Py_ssize_t i, int old,
                     int new) {
    PyObject *counts = tier_list(self, K_TIER_COUNTS);
    if (!counts) return PyErr_Occurred() ? -1 : 0;
    PyObject *on = NULL;
    if (active[i] && !(on = tier_list(self, K_TIER_ACTIVE))) return PyErr_Occurred() ? -1 : 0;
    if (tier_count_add(counts, old, -1) < 0 || tier_count_add(counts, new, 1) < 0) return -1;
    if (on && (tier_count_add(on, old, -1) < 0 || tier_count_add(on, new, 1) < 0)) return -1;
    PyByteArray_AS_STRING(tier_obj)[i] = (char)new;
    acc[i] = 0.0;
    return increment(self, K_TIER_CHANGES) < 0 ? -1 : 1;
}

/* §6.1 placement of player i at rating r, for an engine without a season's counts (_n0 None):
 * the tier 1 + bisect_left(Engine._neg_bounds, -r), its count, a zero accumulator. 1 when done,
 * 0 when Python must (_n0 set, bounds or counts of another shape), -1 with an error. The
 * caller has checked n_min and sigma_place against the event count since the engine began. */
static int tier_place(KernelObject *self, PyObject *tier_obj, const char *active, double *acc, Py_ssize_t i,
                      double r) {
    PyObject *n0 = slot_at(self->engine, self->off_n0, s_n0);
    PyObject *neg = ITEM(K_NEG_BOUNDS);
    if (!n0 || !neg) return -1;
    if (n0 != Py_None || !PyList_CheckExact(neg)) return 0;
    PyObject *counts = tier_list(self, K_TIER_COUNTS);
    if (!counts) return PyErr_Occurred() ? -1 : 0;
    PyObject *on = NULL;
    if (active[i] && !(on = tier_list(self, K_TIER_ACTIVE))) return PyErr_Occurred() ? -1 : 0;
    double x = -r;
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(neg);
    while (lo < hi) { /* bisect_left, comparing floats as Python does */
        Py_ssize_t mid = (lo + hi) / 2;
        PyObject *b = PyList_GET_ITEM(neg, mid);
        if (!PyFloat_CheckExact(b)) return 0;
        if (PyFloat_AS_DOUBLE(b) < x) lo = mid + 1;
        else hi = mid;
    }
    Py_ssize_t k = 1 + lo;
    if (k > TIER_COUNT) return 0;
    if (tier_count_add(counts, k, 1) < 0 || (on && (tier_count_add(on, k, 1) < 0 || tier_count_add(on, 0, 1) < 0)))
        return -1;
    PyByteArray_AS_STRING(tier_obj)[i] = (char)k;
    acc[i] = 0.0;
    return 1;
}

/* Engine._tier_threshold(active, old, new): the §6.4 accumulator a move between neighbouring
 * tiers needs (ADRParams.tier_pull), the same numbers in the same order: h_req for an inactive
 * player (its move changes no count), else h_toward when the source's excess of active placed
 * players over p_k * N beats the destination's by more than one, else h_away. A negative value
 * (no error) when Python must decide (_tier_active of another shape). */
static double tier_need(KernelObject *self, int active, int old, int new) {
    if (self->h_toward == self->h_away) return self->h_toward;
    if (!active) return self->h_req;
    /* Three items only (the two tiers and, at index 0, the total): this runs for every event
     * outside its player's band, so it does not check the whole list as tier_list does. */
    PyObject *on = ITEM(K_TIER_ACTIVE);
    if (!on) return -1.0;
    if (!PyList_CheckExact(on) || PyList_GET_SIZE(on) != TIER_COUNT + 1) return -1.0;
    PyObject *items[3] = {PyList_GET_ITEM(on, 0), PyList_GET_ITEM(on, old), PyList_GET_ITEM(on, new)};
    long long c[3];
    for (int q = 0; q < 3; q++) {
        if (!PyLong_CheckExact(items[q])) return -1.0;
        c[q] = PyLong_AsLongLong(items[q]);
        if (c[q] == -1 && PyErr_Occurred()) return -1.0;
    }
    double nd = (double)c[0];
    double x = ((double)c[1] - self->tier_p[old] * nd) - ((double)c[2] - self->tier_p[new] * nd);
    return x > 1.0 ? self->h_toward : self->h_away;
}

/* attacker == victim as Python compares them; -1 with an error. Two ready exact strs are
 * compared here as unicode_compare_eq does (length, kind, then the code units). */
static inline int same_player(PyObject *attacker, PyObject *victim) {
    if (attacker == victim) return 1;
    if (PyUnicode_CheckExact(attacker) && PyUnicode_CheckExact(victim) && PyUnicode_IS_READY(attacker) &&
        PyUnicode_IS_READY(victim)) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(attacker);
        int kind = PyUnicode_KIND(attacker);
        return n == PyUnicode_GET_LENGTH(victim) && kind == PyUnicode_KIND(victim) &&
               memcmp(PyUnicode_DATA(attacker), PyUnicode_DATA(victim), (size_t)n * (size_t)kind) == 0;
    }
    return PyObject_RichCompareBool(attacker, victim, Py_EQ);
}

/* Kernel.apply's body. `a_obj` and `b_obj` are the two players' ids from Engine.ids (borrowed,
 * NULL for a newcomer) when `known` (score_many has just looked them up), else looked up here. */
static PyObject *apply_event(KernelObject *self, PyObject *attacker, PyObject *victim, PyObject *t_obj,
                             int known, PyObject *a_obj, PyObject *b_obj) {
    if (!PyFloat_CheckExact(t_obj)) Py_RETURN_NONE;
    double t = PyFloat_AS_DOUBLE(t_obj);
    if (!isfinite(t)) Py_RETURN_NONE;
    int same = same_player(attacker, victim);
    if (same < 0) return NULL;
    if (same) Py_RETURN_NONE;
    PyObject *ids = ITEM(K_IDS);
    if (!ids) return NULL;
    if (!PyDict_CheckExact(ids)) return PyErr_Format(PyExc_TypeError, "Engine.ids must be a dict");
    if (!known) {
        a_obj = PyDict_GetItemWithError(ids, attacker);
        if (!a_obj && PyErr_Occurred()) return NULL;
        b_obj = PyDict_GetItemWithError(ids, victim);
        if (!b_obj && PyErr_Occurred()) return NULL;
    }
    double clock;
    if (get_double(self, K_CLOCK, &clock) < 0) return NULL;
    if (t < clock && t < clock - self->late_tolerance) Py_RETURN_NONE; /* out_of_order: Python counts it */
    if (!a_obj || !b_obj) {
        /* Step 1, newcomers, through Engine._add_player (attacker first, as Python): only when the
         * player cap leaves room (a refusal is Python's to count), and only for an event that is
         * otherwise valid (checked above), so nothing is added for an event that is refused. */
        PyObject *names_now = ITEM(K_NAMES);
        if (!names_now) return NULL;
        if (!PyList_CheckExact(names_now)) return PyErr_Format(PyExc_TypeError, "Engine.names must be a list");
        if (PyList_GET_SIZE(names_now) + (!a_obj) + (!b_obj) > self->max_players) Py_RETURN_NONE;
        PyObject *who[2] = {attacker, victim};
        PyObject **got[2] = {&a_obj, &b_obj};
        for (int side = 0; side < 2; side++) {
            if (*got[side]) continue;
            int added = add_player(self, who[side]);
            if (added < 0) return NULL;
            if (!added) {
                PyObject *res = engine_call(self, s_add, &who[side], 1);
                if (!res) return NULL;
                Py_DECREF(res);
            }
            *got[side] = PyDict_GetItemWithError(ids, who[side]); /* borrowed: ids keeps it */
            if (!*got[side]) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_KeyError, "player not added");
        }
    }
    PyObject *players_obj[2] = {a_obj, b_obj};
    Py_ssize_t a = PyLong_AsSsize_t(a_obj);
    if (a == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t b = PyLong_AsSsize_t(b_obj);
    if (b == -1 && PyErr_Occurred()) return NULL;

    /* Every column, checked before anything changes: an array of the expected type code that
     * holds both players. */
    PyObject *col[NCOLS];
    Py_ssize_t hi_id = a > b ? a : b;
    if (a < 0 || b < 0) return PyErr_Format(PyExc_IndexError, "player ids %zd, %zd", a, b);
    const Py_ssize_t need = hi_id + 1, need_ring = need * self->n_act;
    /* unrolled, so that each column's type code and stride are constants (the loop is on every
     * event's path) */
#pragma GCC unroll 16
    for (int c = 0; c < NCOLS; c++) {
        PyObject *o = slot_at(self->engine, self->coff[c], col_keys[c]);
        if (!o) return NULL;
        if (Py_TYPE(o) != array_type || *((ArrayObject *)o)->ob_descr != col_code[c])
            return PyErr_Format(PyExc_TypeError, "Engine.%s must be array('%c')", col_attr[c], col_code[c]);
        /* _wring is a pool of blocks, checked where a block is used */
        if (c != C_WRING && Py_SIZE(o) < (c == C_ARING ? need_ring : need))
            return PyErr_Format(PyExc_IndexError, "Engine.%s is shorter than player %zd", col_attr[c], hi_id);
        col[c] = o;
    }
    PyObject *active_obj = ITEM(K_ACTIVE);
    PyObject *tier_obj = ITEM(K_TIER);
    PyObject *bounds = ITEM(K_BOUNDS);
    PyObject *names = ITEM(K_NAMES);
    PyObject *ladder = ITEM(K_LADDER);
    PyObject *expiry = ITEM(K_EXPIRY);
    if (!active_obj || !tier_obj || !bounds || !names || !ladder || !expiry) return NULL;
    /* The C ladder only: the engine builds a PyLadder where the extension (kernel included) is
     * missing, or ARENAD_NATIVE=0, which turns the kernel off as well. */
    if (!PyByteArray_CheckExact(active_obj) || !PyByteArray_CheckExact(tier_obj) || !PyList_CheckExact(bounds) ||
        !PyList_CheckExact(names) || !PyList_CheckExact(expiry) ||
        Py_TYPE(ladder) != &LadderType)
        return PyErr_Format(PyExc_TypeError, "Engine state has an unexpected type");
    if (PyByteArray_GET_SIZE(active_obj) <= hi_id || PyByteArray_GET_SIZE(tier_obj) <= hi_id ||
        PyList_GET_SIZE(bounds) != TIER_COUNT + 1)
        return PyErr_Format(PyExc_IndexError, "Engine tier or activity columns are too short");
    /* activate() changes the counts of active placed players in C, with no Python to hand back
     * to: when this event can activate a placed player (inactive, placed, at its n_active-th
     * counted event or later), their list is checked here, before anything of the event is
     * written. Only then: the check reads 16 items, and most events activate nobody. */
    {
        const char *act = PyByteArray_AS_STRING(active_obj), *tr = PyByteArray_AS_STRING(tier_obj);
        const int64_t *cnt = icol(col[C_N]);
        int may_a = !act[a] && tr[a] && cnt[a] + 1 >= self->n_act;
        int may_b = !act[b] && tr[b] && cnt[b] + 1 >= self->n_act;
        if ((may_a || may_b) && !tier_list(self, K_TIER_ACTIVE))
            return PyErr_Occurred() ? NULL
                                    : PyErr_Format(PyExc_TypeError, "Engine._tier_active must be a list of 16 ints");
    }
    if (cd_ensure(self) < 0) return NULL;

    /* --- from here on the event is valid: the same steps as Engine._apply_py --- */
    if (t < clock) {
        /* A slightly late event is applied at the engine clock (docs/adr.md). */
        t = clock;
        if (increment(self, K_LATE) < 0) return NULL;
    }
    if (set_double(self, K_CLOCK, t) < 0) return NULL;
    /* §2.1 cooldown, before anything changes. */
    uint64_t pair = ((uint64_t)a << ID_BITS) | (uint64_t)b;
    CdSlot *last_kill = cd_find(self, pair);
    if (last_kill) {
        double lk = last_kill->t;
        if (t - lk < self->t_cooldown) {
            /* Engine._repeat: predicted and calibrated on; learnt in Python when repeat_weight > 0. */
            if (self->repeat_w != 0.0) {
                PyObject *rargs[4] = {PyLong_FromSsize_t(a), PyLong_FromSsize_t(b), PyFloat_FromDouble(t),
                                      PyFloat_FromDouble(t - lk)};
                PyObject *res = NULL;
                if (rargs[0] && rargs[1] && rargs[2] && rargs[3]) res = engine_call(self, s_repeat, rargs, 4);
                for (int q = 0; q < 4; q++) Py_XDECREF(rargs[q]);
                if (!res) return NULL;
                Py_DECREF(res);
            } else {
                PyObject *names_r = ITEM(K_NAMES);
                if (!names_r) return NULL;
                double ssum;
                if (get_double(self, K_SUM_SIGMA, &ssum) < 0) return NULL;
                PyObject *rcol = slot_at(self->engine, self->coff[C_R], col_keys[C_R]);
                if (!rcol) return NULL;
                const double *rr = dcol(rcol);
                double z = (rr[a] - rr[b]) / (self->theta + self->lam * ssum / (double)PyList_GET_SIZE(names_r));
                if (predicted(self, z) < 0) return NULL;
            }
            if (increment(self, K_FILTERED) < 0) return NULL;
            Py_INCREF(self->filtered_obj);
            return self->filtered_obj;
        }
    }
    cd_count(self, pair, t);
    cd_trim(self, t - self->t_cooldown);

    double *r_arr = dcol(col[C_R]), *s_arr = dcol(col[C_SIGMA]), *last_arr = dcol(col[C_LAST]);
    int64_t *n_arr = icol(col[C_N]), *ret = icol(col[C_RET]);
    double *aring = dcol(col[C_ARING]);
    const int64_t n_act = self->n_act, wlen = self->wlen;
    int64_t na = n_arr[a], nb = n_arr[b];
    double ra_old = r_arr[a], rb_old = r_arr[b];
    double ra = ra_old, rb = rb_old;
    double sa_old = s_arr[a], sb_old = s_arr[b];
    double sa = sa_old, sb = sb_old;
    double la = last_arr[a], lb = last_arr[b];

    /* Step 2: returning players (§8.2/§8.3 for the next `returning_events` events), counted from
     * the newest slot of the activity ring. */
    int64_t ret_a = ret[a], ret_b = ret[b];
    double ev_a = na ? aring[a * n_act + (na - 1) % n_act] : la;
    double ev_b = nb ? aring[b * n_act + (nb - 1) % n_act] : lb;
    if (na && t - ev_a > self->t_return_s) {
        ret_a = self->returning_events;
        ret[a] = ret_a;
    }
    if (nb && t - ev_b > self->t_return_s) {
        ret_b = self->returning_events;
        ret[b] = ret_b;
    }

    /* Step 3: §2.3 expiry, one snapshot of the active mean, then §5 decay. */
    if (PyList_GET_SIZE(expiry) > 0) {
        PyObject *top = PyList_GET_ITEM(expiry, 0);
        if (!PyTuple_Check(top) || PyTuple_GET_SIZE(top) < 1)
            return PyErr_Format(PyExc_TypeError, "expiry heap entries must be (time, id)");
        double due = PyFloat_AsDouble(PyTuple_GET_ITEM(top, 0));
        if (due == -1.0 && PyErr_Occurred()) return NULL;
        if (due <= t) {
            PyObject *res = callback(self, s_expire, -1, 1, t, 0.0, 0.0);
            if (!res) return NULL;
            Py_DECREF(res);
        }
    }
    long long n_active;
    if (get_int(self, K_NACTIVE, &n_active) < 0) return NULL;
    Py_ssize_t n_players = PyList_GET_SIZE(names);
    double sum_active, sum_all, sum_sigma_old;
    if (get_double(self, K_SUM_ACTIVE, &sum_active) < 0 || get_double(self, K_SUM_ALL, &sum_all) < 0 ||
        get_double(self, K_SUM_SIGMA, &sum_sigma_old) < 0)
        return NULL;
    double mean = n_active ? sum_active / (double)n_active : sum_all / (double)n_players;
    /* Decay from the last decay point or decay_grace after the last counted event, whichever is
     * later; sigma drifts from the last decay point (sweep_sigma) or the last counted event. */
    if (self->decay_on && na) {
        if (t > la) {
            double start = ev_a + self->grace_s;
            if (start < la) start = la;
            if (t > start) ra = mean + (ra - mean) * exp(-(t - start) / self->tau_s);
        }
        double since = self->sweep_sigma ? la : ev_a;
        if (t > since) {
            sa += self->drift_s * (t - since);
            if (sa > self->smax) sa = self->smax;
        }
    }
    if (self->decay_on && nb) {
        if (t > lb) {
            double start = ev_b + self->grace_s;
            if (start < lb) start = lb;
            if (t > start) rb = mean + (rb - mean) * exp(-(t - start) / self->tau_s);
        }
        double since = self->sweep_sigma ? lb : ev_b;
        if (t > since) {
            sb += self->drift_s * (t - since);
            if (sb > self->smax) sb = self->smax;
        }
    }

    /* Step 4: §3.1 kill probability with §3.2 diffusion over all tracked players. */
    double sum_sigma = sum_sigma_old - sa_old - sb_old + sa + sb;
    double z = (ra - rb) / (self->theta + self->lam * sum_sigma / (double)n_players);
    double p_ab = link_p(self, z);
    double surprise = 1.0 - p_ab;
    if (predicted(self, z) < 0) return NULL;

    /* Step 5: §4.1 learning rates with the §8.1 peak-shaped base. */
    double *wsum = dcol(col[C_WSUM]), *phi = dcol(col[C_PHI]), *pool = dcol(col[C_POOL]);
    int64_t *streak = icol(col[C_STREAK]);
    int64_t sk = streak[a];
    double eta_a = (self->eta_min + self->span * (2.0 * sa * self->speak) / (sa * sa + self->speak2)) *
                   (1.0 + self->rho_s * (double)(sk < self->s_max ? sk : self->s_max)) /
                   (1.0 + self->rho_v_w * (na ? wsum[a] / (double)(na < wlen ? na : wlen) : 0.0));
    double phi_a = phi[a];
    if (phi_a > 0.0) eta_a *= 1.0 + self->gamma_phi * phi_a;
    sk = streak[b];
    double eta_b = (self->eta_min + self->span * (2.0 * sb * self->speak) / (sb * sb + self->speak2)) *
                   (1.0 + self->rho_s * (double)(sk < self->s_max ? sk : self->s_max)) /
                   (1.0 + self->rho_v_w * (nb ? wsum[b] / (double)(nb < wlen ? nb : wlen) : 0.0)) * self->c_loss;
    double phi_b = phi[b];
    if (phi_b > 0.0) eta_b *= 1.0 + self->gamma_phi * phi_b;
    /* Farming past the cooldown (Engine._apply_py, docs/adr.md): the run of this attacker's
     * counted kills on this victim damps both sides, as much as the kill was expected; the
     * victim killing back ends its run. */
    int64_t *prey = icol(col[C_PREY]);
    int64_t run = 0;
    if ((prey[a] >> 16) == (int64_t)b + 1) {
        run = (prey[a] & 0xFFFF) + 1;
        if (run > 0xFFFF) run = 0xFFFF;
    }
    prey[a] = (((int64_t)b + 1) << 16) | run;
    if ((prey[b] >> 16) == (int64_t)a + 1) prey[b] = 0;
    if (run && self->farm_k != 0.0) {
        double damp = surprise + p_ab / (1.0 + (double)run / self->farm_k);
        eta_a *= damp;
        eta_b *= damp;
    }

    /* Step 6: §4.2 raw change, §8.2/§8.3 pooling (Python), §8.4 cap, §4.2 clip. */
    double da = eta_a * surprise;
    double db = -eta_b * (self->corrected ? surprise : p_ab);
    if (ret_a || pool[a] != 0.0) {
        PyObject *res = callback(self, s_pooled, a, 2, da, sa, 0.0);
        if (!res) return NULL;
        da = PyFloat_AsDouble(res);
        Py_DECREF(res);
        if (da == -1.0 && PyErr_Occurred()) return NULL;
    }
    if ((ret_b && self->pool_losses) || (!ret_b && pool[b] != 0.0)) {
        PyObject *res = callback(self, s_pooled, b, 2, db, sb, 0.0);
        if (!res) return NULL;
        db = PyFloat_AsDouble(res);
        Py_DECREF(res);
        if (db == -1.0 && PyErr_Occurred()) return NULL;
    }
    const double dmax = self->dmax;
    if (da > dmax) da = dmax;
    else if (da < -dmax) da = -dmax;
    if (db > dmax) db = dmax;
    else if (db < -dmax) db = -dmax;
    double lo, hi;
    if (get_double(self, K_RLO, &lo) < 0 || get_double(self, K_RHI, &hi) < 0) return NULL;
    double ra_new = ra + da;
    if (ra_new > hi) ra_new = hi;
    else if (ra_new < lo) ra_new = lo;
    double rb_new = rb + db;
    if (rb_new > hi) rb_new = hi;
    else if (rb_new < lo) rb_new = lo;
    da = ra_new - ra;
    db = rb_new - rb;
    if (set_double(self, K_DELTA_A, da) < 0 || set_double(self, K_DELTA_B, db) < 0) return NULL;
    if (self->cap_decay) { /* §8.4 over the whole visible change, decay included */
        if (ra_new > ra_old + dmax) ra_new = ra_old + dmax;
        else if (ra_new < ra_old - dmax) ra_new = ra_old - dmax;
        if (rb_new > rb_old + dmax) rb_new = rb_old + dmax;
        else if (rb_new < rb_old - dmax) rb_new = rb_old - dmax;
    }

    /* Step 7: §4.3 two-stage sigma from the final visible change. */
    double sa_new = 1.0 / sqrt(1.0 / (sa * sa + da * da) + self->inv_g2);
    if (sa_new < self->smin) sa_new = self->smin;
    else if (sa_new > self->smax) sa_new = self->smax;
    double sb_new = 1.0 / sqrt(1.0 / (sb * sb + db * db) + self->inv_g2);
    if (sb_new < self->smin) sb_new = self->smin;
    else if (sb_new > self->smax) sb_new = self->smax;
    /* §4.4 trend with the same P_ab. */
    phi_a = self->keep_phi * phi_a + self->lp * surprise;
    phi[a] = phi_a < 1.0 ? phi_a : 1.0;
    phi_b = self->keep_phi * phi_b - self->lp * surprise;
    phi[b] = phi_b > -1.0 ? phi_b : -1.0;
    /* §4.5 streak, window, count, last event time. */
    streak[a] += 1;
    streak[b] = 0;
    uint32_t *wslot = (uint32_t *)((ArrayObject *)col[C_WSLOT])->ob_item;
    da = fabs(da);
    db = fabs(db);
    Py_ssize_t players[2] = {a, b};
    int64_t counts[2] = {na, nb};
    double deltas[2] = {da, db};
    for (int side = 0; side < 2; side++) {
        Py_ssize_t i = players[side];
        int64_t n = counts[side];
        if (!n) { /* the first change is the whole window (Engine._new_window) */
            wsum[i] += deltas[side];
            continue;
        }
        Py_ssize_t base = (Py_ssize_t)wslot[i];
        if (!base) { /* the second counted event: the player's ring block */
            base = new_window(self, col[C_WRING], wsum, wslot, i);
            if (base < 0) return NULL;
        }
        if (!base) { /* Python's, when the ring is exported or full */
            PyObject *res = engine_call(self, s_window, &players_obj[side], 1);
            if (!res) return NULL;
            base = PyLong_AsSsize_t(res);
            Py_DECREF(res);
            if (base == -1 && PyErr_Occurred()) return NULL;
        }
        base -= 1;
        if (base < 0 || Py_SIZE(col[C_WRING]) < (base + 1) * wlen)
            return PyErr_Format(PyExc_IndexError, "Engine._wring has no block %zd", base);
        double *wring = dcol(col[C_WRING]); /* after the call: the pool may have grown */
        Py_ssize_t slot = base * wlen + n % wlen;
        wsum[i] += deltas[side] - wring[slot];
        wring[slot] = deltas[side];
        if (n % wlen == wlen - 1) { /* re-sum once per lap so rounding never accumulates */
            PyObject *lap = PySequence_GetSlice(col[C_WRING], base * wlen, (base + 1) * wlen);
            if (!lap) return NULL;
            PyObject *exact = PyObject_CallOneArg(fsum_fn, lap);
            Py_DECREF(lap);
            if (!exact) return NULL;
            double v = PyFloat_AsDouble(exact);
            Py_DECREF(exact);
            if (v == -1.0 && PyErr_Occurred()) return NULL;
            wsum = dcol(col[C_WSUM]);
            wsum[i] = v;
        }
    }
    n_arr[a] = na + 1;
    n_arr[b] = nb + 1;
    last_arr[a] = t;
    last_arr[b] = t;
    if (ret_a) ret[a] = ret_a - 1;
    if (ret_b) ret[b] = ret_b - 1;

    /* Store, keeping the aggregates and the ladder index in step. */
    r_arr[a] = ra_new;
    r_arr[b] = rb_new;
    s_arr[a] = sa_new;
    s_arr[b] = sb_new;
    {
        double *disp = dcol(col[C_DISP]);
        double rn[2] = {ra_new, rb_new}, sn[2] = {sa_new, sb_new};
        double ro[2] = {ra_old, rb_old}, so[2] = {sa_old, sb_old};
        int64_t back[2] = {ret_a, ret_b};
        for (int side = 0; side < 2; side++) {
            Py_ssize_t i = players[side];
            double d = disp[i];
            /* bounded while returning (§8) or still catching up after a return */
            if (self->display_cap && (back[side] || d != ro[side] - DISPLAY_K * so[side])) {
                double step = rn[side] - DISPLAY_K * sn[side] - d;
                disp[i] = d + (step > dmax ? dmax : step < -dmax ? -dmax : step);
            } else {
                disp[i] = rn[side] - DISPLAY_K * sn[side];
            }
        }
    }
    if (set_double(self, K_SUM_SIGMA, sum_sigma - sa - sb + sa_new + sb_new) < 0 ||
        set_double(self, K_SUM_ALL, sum_all + (ra_new - ra_old + rb_new - rb_old)) < 0)
        return NULL;
    const char *active = PyByteArray_AS_STRING(active_obj);
    int active_a = active[a], active_b = active[b];
    if (active_a || active_b) {
        double inc = (active_a ? ra_new - ra_old : 0.0) + (active_b ? rb_new - rb_old : 0.0);
        if (set_double(self, K_SUM_ACTIVE, sum_active + inc) < 0) return NULL;
    }
    /* The ladder index, unless a batch deferred it (Engine.defer_ladder: rebuilt when read). */
    PyObject *ladder_ok = ITEM(K_LADDER_OK);
    if (!ladder_ok) return NULL;
    double olds[2] = {ra_old, rb_old}, news[2] = {ra_new, rb_new};
    for (int side = 0; side < 2 && ladder_ok == Py_True; side++)
        if (news[side] != olds[side] &&
            ladder_move((LadderObject *)ladder, -olds[side], -news[side], (uint32_t)players[side]) < 0)
            return NULL;
    /* §2.3 activity ring: the time of this counted event. */
    aring[a * n_act + na % n_act] = t;
    aring[b * n_act + nb % n_act] = t;
    if (!active_a && na + 1 >= n_act &&
        activate(self, aring, PyByteArray_AS_STRING(active_obj), PyByteArray_AS_STRING(tier_obj), expiry, a, na + 1,
                 t, ra_new) < 0)
        return NULL;
    if (!active_b && nb + 1 >= n_act &&
        activate(self, aring, PyByteArray_AS_STRING(active_obj), PyByteArray_AS_STRING(tier_obj), expiry, b, nb + 1,
                 t, rb_new) < 0)
        return NULL;
    /* §6.1 placement and §6.4 accumulators as Engine._tiers_after_event does them, inline
     * (same comparisons, same arithmetic), the placement and the move included (tier_place,
     * tier_move); Engine._tiers_after_event is called back only when those decline (a season's
     * counts, tier counts of another shape). */
    double r_new[2] = {ra_new, rb_new}, s_new[2] = {sa_new, sb_new};
    for (int side = 0; side < 2; side++) {
        Py_ssize_t i = players[side];
        int k = (unsigned char)PyByteArray_AS_STRING(tier_obj)[i];
        double r = r_new[side];
        if (k) {
            double lower = PyFloat_AsDouble(PyList_GET_ITEM(bounds, k));
            double upper = PyFloat_AsDouble(PyList_GET_ITEM(bounds, k - 1));
            if (PyErr_Occurred()) return NULL;
            double *acc = dcol(col[C_H]);
            if (lower <= r && r < upper) {
                if (acc[i] != 0.0) acc[i] = 0.0;
                continue;
            }
            double h = acc[i];
            if (r >= upper || r < lower) { /* not a NaN: Python's else branch is its to take */
                int up = r >= upper, to = up ? k - 1 : k + 1;
                h = up ? (h > 0.0 ? h : 0.0) + (r - upper) : (h < 0.0 ? -h : 0.0) + (lower - r);
                /* Below the lower of tier_pull's thresholds no move is due whichever applies, so
                 * the counts are read (tier_need) only for an accumulator that reached it. */
                double need = h >= self->h_toward ? tier_need(self, PyByteArray_AS_STRING(active_obj)[i], k, to)
                                                  : self->h_toward;
                if (PyErr_Occurred()) return NULL;
                if (need >= 0.0) {
                    if (!(h >= need)) {
                        acc[i] = up ? h : -h;
                        continue;
                    }
                    int moved = tier_move(self, tier_obj, PyByteArray_AS_STRING(active_obj), acc, i, k, to);
                    if (moved < 0) return NULL;
                    if (moved) continue;
                }
            }
        } else if (counts[side] + 1 < self->n_min || !(s_new[side] <= self->sigma_place)) {
            continue;
        } else {
            int placed = tier_place(self, tier_obj, PyByteArray_AS_STRING(active_obj), dcol(col[C_H]), i, r);
            if (placed < 0) return NULL;
            if (placed) continue;
        }
        PyObject *res = callback(self, s_tiers, i, 2, r_new[side], s_new[side], 0.0);
        if (!res) return NULL;
        Py_DECREF(res);
    }
    if (increment(self, K_APPLIED) < 0) return NULL;
    Py_INCREF(self->applied_obj);
    return self->applied_obj;
}

/* Kernel.apply(attacker, victim, t) -> Outcome.APPLIED | Outcome.FILTERED | None (Python path). */
static PyObject *Kernel_apply(KernelObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "apply(attacker, victim, t)");
    return apply_event(self, args[0], args[1], args[2], 0, NULL, NULL);
}

/* The constants the kernel reads from Engine._kc, by name (engine.kernel_constants declares them). */
enum { KC_DOUBLE, KC_INT, KC_BOOL };
#define KC(name, kind) {#name, kind, offsetof(KernelObject, name)}
static const struct {
    const char *name;
    int kind;
    size_t offset;
} constants[] = {
    KC(t_return_s, KC_DOUBLE),     KC(returning_events, KC_INT), KC(tau_s, KC_DOUBLE),
    KC(drift_s, KC_DOUBLE),        KC(smax, KC_DOUBLE),          KC(smin, KC_DOUBLE),
    KC(theta, KC_DOUBLE),          KC(lam, KC_DOUBLE),           KC(speak, KC_DOUBLE),
    KC(speak2, KC_DOUBLE),         KC(eta_min, KC_DOUBLE),       KC(span, KC_DOUBLE),
    KC(wlen, KC_INT),              KC(rho_s, KC_DOUBLE),         KC(s_max, KC_INT),
    KC(rho_v_w, KC_DOUBLE),        KC(gamma_phi, KC_DOUBLE),     KC(c_loss, KC_DOUBLE),
    KC(corrected, KC_BOOL),        KC(pool_losses, KC_BOOL),     KC(dmax, KC_DOUBLE),
    KC(inv_g2, KC_DOUBLE),         KC(lp, KC_DOUBLE),            KC(keep_phi, KC_DOUBLE),
    KC(n_act, KC_INT),             KC(n_min, KC_INT),            KC(decay_on, KC_BOOL),
    KC(logistic, KC_BOOL),         KC(cal_keep, KC_DOUBLE),      KC(cal_warm, KC_DOUBLE),
    KC(cal_mem, KC_DOUBLE),        KC(grace_s, KC_DOUBLE),
    KC(cap_decay, KC_BOOL),        KC(sweep_sigma, KC_BOOL),     KC(repeat_w, KC_DOUBLE),
    KC(display_cap, KC_BOOL),      KC(farm_k, KC_DOUBLE),        KC(late_tolerance, KC_DOUBLE),
    KC(t_cooldown, KC_DOUBLE),
    KC(sigma_place, KC_DOUBLE),    KC(h_req, KC_DOUBLE),         KC(max_players, KC_INT),
    KC(h_toward, KC_DOUBLE),       KC(h_away, KC_DOUBLE),
    KC(recal_min_events, KC_INT),  KC(active_window_s, KC_DOUBLE),
};

/* The columns and attributes the kernel touches must be declared in Engine.KERNEL_COLUMNS (with
 * the array type code the kernel reads them as) and Engine.KERNEL_ATTRIBUTES: the one table, in
 * engine.py, that both sides read. 0, or -1 with an error naming what is not declared. */
static int check_contract(KernelObject *self, PyObject *engine) {
    PyObject *cls = (PyObject *)Py_TYPE(engine);
    PyObject *cols = PyObject_GetAttrString(cls, "KERNEL_COLUMNS");
    PyObject *attrs = cols ? PyObject_GetAttrString(cls, "KERNEL_ATTRIBUTES") : NULL;
    int rc = -1;
    if (!cols || !attrs) goto done;
    if (!PyDict_Check(cols)) {
        PyErr_SetString(PyExc_TypeError, "Engine.KERNEL_COLUMNS must be a dict of name -> type code");
        goto done;
    }
    for (int c = 0; c < NCOLS; c++) {
        PyObject *code = PyDict_GetItemString(cols, col_attr[c]);
        const char *text = code && PyUnicode_Check(code) ? PyUnicode_AsUTF8(code) : NULL;
        if (!text || strlen(text) != 1) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "the kernel reads Engine.%s, not declared in KERNEL_COLUMNS", col_attr[c]);
            goto done;
        }
        if (text[0] != col_code[c]) {
            PyErr_Format(PyExc_TypeError, "KERNEL_COLUMNS declares Engine.%s as '%c'; the kernel reads it as '%c'",
                         col_attr[c], text[0], col_code[c]);
            goto done;
        }
        self->ccode[c] = text[0];
    }
    for (int i = 0; i < NKEYS; i++) {
        int has = PySequence_Contains(attrs, keys[i]);
        if (has < 0) goto done;
        if (!has) {
            PyErr_Format(PyExc_TypeError, "the kernel touches Engine.%U, not declared in KERNEL_ATTRIBUTES", keys[i]);
            goto done;
        }
    }
    int has = PySequence_Contains(attrs, s_next_recal);
    if (has <= 0) {
        if (!has) PyErr_SetString(PyExc_TypeError, "next_recalibration is not declared in KERNEL_ATTRIBUTES");
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(cols);
    Py_XDECREF(attrs);
    return rc;
}

/* The offset of `name`, an object slot (__slots__) of the engine's type; -1 with an error. */
static Py_ssize_t slot_offset(PyObject *engine, PyObject *name) {
    PyObject *desc = PyObject_GetAttr((PyObject *)Py_TYPE(engine), name);
    if (!desc) return -1;
    Py_ssize_t off = -1;
    if (Py_IS_TYPE(desc, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)desc)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY)) off = m->offset;
    }
    Py_DECREF(desc);
    if (off < 0) PyErr_Format(PyExc_TypeError, "Engine.%U must be declared in __slots__", name);
    return off;
}

/* Kernel(engine, applied, filtered): bound to one Engine; checks its slots and columns first. */
static int Kernel_init(KernelObject *self, PyObject *args, PyObject *kwds) {
    PyObject *engine, *applied, *filtered;
    if (!PyArg_ParseTuple(args, "OOO", &engine, &applied, &filtered)) return -1;
    if (check_contract(self, engine) < 0) return -1;
    for (int i = 0; i < NKEYS; i++)
        if ((self->koff[i] = slot_offset(engine, keys[i])) < 0) return -1;
    for (int c = 0; c < NCOLS; c++)
        if ((self->coff[c] = slot_offset(engine, col_keys[c])) < 0) return -1;
    if ((self->off_next_recal = slot_offset(engine, s_next_recal)) < 0) return -1;
    if ((self->off_n0 = slot_offset(engine, s_n0)) < 0 || (self->off_offset = slot_offset(engine, s_offset)) < 0)
        return -1;
    {
        PyObject *params = PyObject_GetAttrString(engine, "params");
        if (!params) return -1;
        PyObject *mu0 = PyObject_GetAttrString(params, "mu0"), *sigma0 = PyObject_GetAttrString(params, "sigma0");
        Py_DECREF(params);
        self->mu0 = mu0 ? PyFloat_AsDouble(mu0) : -1.0;
        self->sigma0 = sigma0 ? PyFloat_AsDouble(sigma0) : -1.0;
        Py_XDECREF(mu0);
        Py_XDECREF(sigma0);
        if (PyErr_Occurred()) return -1;
    }
    for (int c = 0; c < NCOLS; c++) {
        PyObject *o = slot_at(engine, self->coff[c], col_keys[c]);
        if (!o) return -1;
        if (Py_TYPE(o) != array_type || *((ArrayObject *)o)->ob_descr != col_code[c]) {
            PyErr_Format(PyExc_TypeError, "Engine.%s must be array('%c')", col_attr[c], col_code[c]);
            return -1;
        }
    }
    /* The constants, by name, from Engine._kc (engine.kernel_constants): nothing positional. */
    PyObject *kc = PyObject_GetAttrString(engine, "_kc");
    if (!kc) return -1;
    if (!PyDict_Check(kc)) {
        Py_DECREF(kc);
        PyErr_SetString(PyExc_TypeError, "Engine._kc must be the dict of kernel_constants()");
        return -1;
    }
    for (size_t i = 0; i < sizeof(constants) / sizeof(constants[0]); i++) {
        PyObject *v = PyDict_GetItemString(kc, constants[i].name); /* borrowed */
        char *field = (char *)self + constants[i].offset;
        if (!v) {
            PyErr_Format(PyExc_KeyError, "the kernel needs constant %s, missing from Engine._kc", constants[i].name);
        } else if (constants[i].kind == KC_DOUBLE) {
            if (PyBool_Check(v) || !(PyFloat_Check(v) || PyLong_Check(v)))
                PyErr_Format(PyExc_TypeError, "Engine._kc[%s] must be a number", constants[i].name);
            else *(double *)field = PyFloat_AsDouble(v);
        } else if (constants[i].kind == KC_INT) {
            if (!PyLong_Check(v) || PyBool_Check(v))
                PyErr_Format(PyExc_TypeError, "Engine._kc[%s] must be an int", constants[i].name);
            else *(int64_t *)field = PyLong_AsLongLong(v);
        } else {
            if (!PyBool_Check(v)) PyErr_Format(PyExc_TypeError, "Engine._kc[%s] must be a bool", constants[i].name);
            else *(int *)field = v == Py_True;
        }
        if (PyErr_Occurred()) {
            Py_DECREF(kc);
            return -1;
        }
    }
    /* tier_pull's targets: a tuple of TIER_COUNT + 1 floats, 0 then p_1..p_15 */
    PyObject *tp = PyDict_GetItemString(kc, "tier_p"); /* borrowed */
    if (!tp || !PyTuple_CheckExact(tp) || PyTuple_GET_SIZE(tp) != TIER_COUNT + 1) {
        Py_DECREF(kc);
        PyErr_SetString(PyExc_TypeError, "Engine._kc[tier_p] must be a tuple of 16 numbers");
        return -1;
    }
    for (int k = 0; k <= TIER_COUNT; k++) {
        self->tier_p[k] = PyFloat_AsDouble(PyTuple_GET_ITEM(tp, k));
        if (PyErr_Occurred()) {
            Py_DECREF(kc);
            return -1;
        }
    }
    Py_DECREF(kc);
    if (PyErr_Occurred() || self->wlen < 1 || self->n_act < 1) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "window_len and n_active must be >= 1");
        return -1;
    }
    Py_INCREF(engine);
    Py_INCREF(applied);
    Py_INCREF(filtered);
    Py_XSETREF(self->engine, engine);
    Py_XSETREF(self->applied_obj, applied);
    Py_XSETREF(self->filtered_obj, filtered);
    return 0;
}

static int Kernel_traverse(KernelObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->engine);
    Py_VISIT(self->applied_obj);
    Py_VISIT(self->filtered_obj);
    return 0;
}

static int Kernel_clear(KernelObject *self) {
    Py_CLEAR(self->engine);
    Py_CLEAR(self->applied_obj);
    Py_CLEAR(self->filtered_obj);
    return 0;
}

static void Kernel_dealloc(KernelObject *self) {
    PyObject_GC_UnTrack(self);
    Kernel_clear(self);
    PyMem_Free(self->cd_tab);
    PyMem_Free(self->cd_log);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Kernel_call_apply(KernelObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!self->engine) return PyErr_Format(PyExc_RuntimeError, "Kernel is not bound to an engine");
    return Kernel_apply(self, args, nargs);
}

static int recal_due(KernelObject *self, double t, double next_recal);

/* Kernel.run(records, start, stop) -> (next, applied, filtered): apply journal records
 * (seq, t, attacker, victim, server, id) from `start` while the kernel can take them as they
 * come; stops before `stop`, before a record of another shape, one due a recalibration
 * (t >= next_recalibration: Engine.feed's rule) and one the kernel hands back to Python. */
static PyObject *run_body(KernelObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!self->engine) return PyErr_Format(PyExc_RuntimeError, "Kernel is not bound to an engine");
    if (nargs != 3 || !PyList_Check(args[0])) return PyErr_Format(PyExc_TypeError, "run(records: list, start, stop)");
    PyObject *records = args[0];
    Py_ssize_t k = PyLong_AsSsize_t(args[1]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[2]);
    if ((k == -1 || stop == -1) && PyErr_Occurred()) return NULL;
    double next_recal;
    PyObject *nr = slot_at(self->engine, self->off_next_recal, s_next_recal);
    if (!nr) return NULL;
    next_recal = PyFloat_AsDouble(nr);
    if (next_recal == -1.0 && PyErr_Occurred()) return NULL;
    Py_ssize_t applied = 0, filtered = 0;
    if (k < 0) k = 0;
    for (; k < stop && k < PyList_GET_SIZE(records); k++) {
        PyObject *rec = PyList_GET_ITEM(records, k);
        if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != 6) break;
        PyObject *t_obj = PyTuple_GET_ITEM(rec, 1);
        if (!PyFloat_CheckExact(t_obj)) break;
        int due = recal_due(self, PyFloat_AS_DOUBLE(t_obj), next_recal);
        if (due < 0) return NULL;
        if (due) break;
        PyObject *argv[3] = {PyTuple_GET_ITEM(rec, 2), PyTuple_GET_ITEM(rec, 3), t_obj};
        Py_INCREF(rec); /* the record's items stay alive whatever a callback does to the list */
        PyObject *out = Kernel_apply(self, argv, 3);
        Py_DECREF(rec);
        if (!out) return NULL;
        int stop_here = out == Py_None;
        if (out == self->applied_obj) applied++;
        else if (out == self->filtered_obj) filtered++;
        Py_DECREF(out);
        if (stop_here) break;
    }
    return Py_BuildValue("(nnn)", k, applied, filtered);
}

static PyObject *Kernel_run(KernelObject *self, PyObject *const *args, Py_ssize_t nargs) {
    scalars_begin(self);
    return scalars_done(self, run_body(self, args, nargs));
}

/* Whether Engine.recalibration_due_before's schedule part holds at t (time reached and, with
 * recalibrate_min_events, enough kills applied since the last one): 1, 0, or -1 with an error.
 * Python then decides the rest (a valid event, the player cap). */
static int recal_due(KernelObject *self, double t, double next_recal) {
    if (t < next_recal) return 0;
    if (self->recal_min_events <= 0) return 1;
    long long a, s;
    if (get_int(self, K_APPLIED, &a) < 0 || get_int(self, K_RECAL_APPLIED, &s) < 0) return -1;
    return a - s >= self->recal_min_events;
}

/* The engine's next_recalibration as a double; -1 with an error. */
static int next_recalibration(KernelObject *self, double *out) {
    PyObject *nr = slot_at(self->engine, self->off_next_recal, s_next_recal);
    if (!nr) return -1;
    *out = PyFloat_AsDouble(nr);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* Kernel.feed(attacker, victim, t): Engine.feed's common case (no recalibration due at t),
 * or None for Python (a recalibration due, a time that is not a float, or whatever apply hands
 * back). */
static PyObject *Kernel_feed(KernelObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!self->engine) return PyErr_Format(PyExc_RuntimeError, "Kernel is not bound to an engine");
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "feed(attacker, victim, t)");
    if (!PyFloat_CheckExact(args[2])) Py_RETURN_NONE;
    double next_recal;
    if (next_recalibration(self, &next_recal) < 0) return NULL;
    int due = recal_due(self, PyFloat_AS_DOUBLE(args[2]), next_recal);
    if (due < 0) return NULL;
    if (due) Py_RETURN_NONE;
    return Kernel_apply(self, args, 3);
}

/* Kernel.feed_many(attackers, victims, times, start, stop) -> (next, applied, filtered): Engine.feed
 * over three parallel lists from `start` while each event is the kernel's (Kernel.feed's rule);
 * stops before `stop` and before the first event that needs Python. */
static PyObject *feed_many_body(KernelObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!self->engine) return PyErr_Format(PyExc_RuntimeError, "Kernel is not bound to an engine");
    if (nargs != 5 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1]) || !PyList_CheckExact(args[2]))
        return PyErr_Format(PyExc_TypeError, "feed_many(attackers: list, victims: list, times: list, start, stop)");
    PyObject *att = args[0], *vic = args[1], *times = args[2];
    Py_ssize_t k = PyLong_AsSsize_t(args[3]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[4]);
    if ((k == -1 || stop == -1) && PyErr_Occurred()) return NULL;
    double next_recal;
    if (next_recalibration(self, &next_recal) < 0) return NULL;
    Py_ssize_t applied = 0, filtered = 0;
    if (k < 0) k = 0;
    for (; k < stop && k < PyList_GET_SIZE(att) && k < PyList_GET_SIZE(vic) && k < PyList_GET_SIZE(times); k++) {
        PyObject *t_obj = PyList_GET_ITEM(times, k);
        if (!PyFloat_CheckExact(t_obj)) break;
        int due = recal_due(self, PyFloat_AS_DOUBLE(t_obj), next_recal);
        if (due < 0) return NULL;
        if (due) break;
        PyObject *argv[3] = {PyList_GET_ITEM(att, k), PyList_GET_ITEM(vic, k), t_obj};
        Py_INCREF(argv[0]);
        Py_INCREF(argv[1]);
        Py_INCREF(t_obj);
        PyObject *out = Kernel_apply(self, argv, 3);
        Py_DECREF(argv[0]);
        Py_DECREF(argv[1]);
        Py_DECREF(t_obj);
        if (!out) return NULL;
        int stop_here = out == Py_None;
        if (out == self->applied_obj) applied++;
        else if (out == self->filtered_obj) filtered++;
        Py_DECREF(out);
        if (stop_here) break;
    }
    return Py_BuildValue("(nnn)", k, applied, filtered);
}

static PyObject *Kernel_feed_many(KernelObject *self, PyObject *const *args, Py_ssize_t nargs) {
    scalars_begin(self);
    return scalars_done(self, feed_many_body(self, args, nargs));
}

/* ADRModel.predict(a, b): Engine.predict for two tracked players (the same expressions:
 * D = theta + lambda * (sum_sigma / n), then the calibrated link), 0.5 otherwise. */
static int predict_names(KernelObject *self, PyObject *ids, PyObject *a_name, PyObject *b_name, double *out,
                         PyObject **ia_out, PyObject **ib_out) {
    PyObject *ia = PyDict_GetItemWithError(ids, a_name);
    if (!ia && PyErr_Occurred()) return -1;
    PyObject *ib = PyDict_GetItemWithError(ids, b_name);
    if (!ib && PyErr_Occurred()) return -1;
    *ia_out = ia;
    *ib_out = ib;
    if (!ia || !ib) {
        *out = 0.5;
        return 0;
    }
    Py_ssize_t i = PyLong_AsSsize_t(ia), j = PyLong_AsSsize_t(ib);
    if ((i == -1 || j == -1) && PyErr_Occurred()) return -1;
    PyObject *names = ITEM(K_NAMES);
    PyObject *rcol = slot_at(self->engine, self->coff[C_R], col_keys[C_R]);
    if (!names || !rcol) return -1;
    Py_ssize_t n = PyList_GET_SIZE(names);
    if (i < 0 || j < 0 || i >= Py_SIZE(rcol) || j >= Py_SIZE(rcol) || n <= 0)
        return PyErr_Format(PyExc_IndexError, "player id beyond Engine._r"), -1;
    double ssum, cal;
    if (get_double(self, K_SUM_SIGMA, &ssum) < 0 || get_double(self, K_CAL, &cal) < 0) return -1;
    const double *r = dcol(rcol);
    double d = self->theta + self->lam * (ssum / (double)n);
    *out = link_p(self, cal * ((r[i] - r[j]) / d));
    return 0;
}

/* Kernel.score_many(attackers, victims, times, learn, out, start, stop) -> (next, pending): the
 * walk-forward harness for one ADR model (arenad.evaluation.walkforward with ADRModel): event k's
 * prediction goes to out[k], then it is learnt through Engine.feed's common case when learn[k].
 * Stops before an event to learn with a recalibration due or a time that is not a float
 * (pending 0: nothing done for it), or after predicting one that apply hands back (pending 1:
 * Python feeds it). */
static PyObject *score_many_body(KernelObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!self->engine) return PyErr_Format(PyExc_RuntimeError, "Kernel is not bound to an engine");
    if (nargs != 7 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1]) || !PyList_CheckExact(args[2]))
        return PyErr_Format(PyExc_TypeError, "score_many(attackers, victims, times, learn, out, start, stop)");
    PyObject *att = args[0], *vic = args[1], *times = args[2];
    Py_buffer learn, out;
    if (PyObject_GetBuffer(args[3], &learn, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[4], &out, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&learn);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t k = PyLong_AsSsize_t(args[5]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[6]);
    Py_ssize_t n_out = out.len / (Py_ssize_t)sizeof(double);
    int pending = 0;
    if ((k == -1 || stop == -1) && PyErr_Occurred()) goto done;
    if (!out.format || out.format[0] != 'd' || out.itemsize != sizeof(double)) {
        PyErr_SetString(PyExc_TypeError, "score_many: out must be a buffer of doubles");
        goto done;
    }
    double next_recal;
    if (next_recalibration(self, &next_recal) < 0) goto done;
    PyObject *ids = ITEM(K_IDS);
    if (!ids) goto done;
    if (!PyDict_CheckExact(ids)) {
        PyErr_SetString(PyExc_TypeError, "Engine.ids must be a dict");
        goto done;
    }
    const unsigned char *lrn = (const unsigned char *)learn.buf;
    double *dst = (double *)out.buf;
    if (k < 0) k = 0;
    Py_ssize_t end = stop;
    if (end > PyList_GET_SIZE(att)) end = PyList_GET_SIZE(att);
    if (end > PyList_GET_SIZE(vic)) end = PyList_GET_SIZE(vic);
    if (end > PyList_GET_SIZE(times)) end = PyList_GET_SIZE(times);
    if (end > learn.len) end = learn.len;
    if (end > n_out) end = n_out;
    for (; k < end; k++) {
        PyObject *t_obj = PyList_GET_ITEM(times, k);
        if (!PyFloat_CheckExact(t_obj)) break;
        if (lrn[k]) {
            int due = recal_due(self, PyFloat_AS_DOUBLE(t_obj), next_recal);
            if (due < 0) goto done;
            if (due) break;
        }
        PyObject *argv[3] = {PyList_GET_ITEM(att, k), PyList_GET_ITEM(vic, k), t_obj};
        PyObject *ia, *ib; /* borrowed from ids, which nothing changes before apply_event reads them */
        if (predict_names(self, ids, argv[0], argv[1], &dst[k], &ia, &ib) < 0) goto done;
        if (!lrn[k]) continue;
        Py_INCREF(argv[0]);
        Py_INCREF(argv[1]);
        Py_INCREF(t_obj);
        PyObject *o = apply_event(self, argv[0], argv[1], t_obj, 1, ia, ib);
        Py_DECREF(argv[0]);
        Py_DECREF(argv[1]);
        Py_DECREF(t_obj);
        if (!o) goto done;
        int back = o == Py_None;
        Py_DECREF(o);
        if (back) {
            pending = 1;
            break;
        }
        ids = ITEM(K_IDS); /* the same dict, unless a callback replaced it */
        if (!ids || !PyDict_CheckExact(ids)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Engine.ids must be a dict");
            goto done;
        }
    }
    result = Py_BuildValue("(ni)", k, pending);
done:
    PyBuffer_Release(&learn);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *Kernel_score_many(KernelObject *self, PyObject *const *args, Py_ssize_t nargs) {
    scalars_begin(self);
    return scalars_done(self, score_many_body(self, args, nargs));
}

static PyMethodDef Kernel_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))Kernel_feed, METH_FASTCALL,
     "feed(attacker, victim, t): Engine.feed's common case, or None when Python must take it."},
    {"feed_many", (PyCFunction)(void (*)(void))Kernel_feed_many, METH_FASTCALL,
     "feed_many(attackers, victims, times, start, stop) -> (next, applied, filtered)."},
    {"score_many", (PyCFunction)(void (*)(void))Kernel_score_many, METH_FASTCALL,
     "score_many(attackers, victims, times, learn, out, start, stop) -> (next, pending)."},
    {"apply", (PyCFunction)(void (*)(void))Kernel_call_apply, METH_FASTCALL,
     "apply(attacker, victim, t): APPLIED or FILTERED, or None when the event needs Engine's Python path."},
    {"cooldown_release", (PyCFunction)Kernel_cooldown_release, METH_NOARGS,
     "cooldown_release(): the §2.1 cooldown back into Engine._cooldown / _cooldown_log (the kernel "
     "adopts them again at its next event)."},
    {"run", (PyCFunction)(void (*)(void))Kernel_run, METH_FASTCALL,
     "run(records, start, stop) -> (next, applied, filtered): journal records while the kernel can."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "arenad.core._ladder.Kernel",
    .tp_doc = "Engine.apply's common case in C, bit-identical to the Python path (docs/performance.md).",
    .tp_basicsize = sizeof(KernelObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Kernel_init,
    .tp_dealloc = (destructor)Kernel_dealloc,
    .tp_traverse = (traverseproc)Kernel_traverse,
    .tp_clear = (inquiry)Kernel_clear,
    .tp_methods = Kernel_methods,
};

/* Whether array.array objects have the layout ArrayObject assumes: one probe per type code the
 * kernel reads, compared with what the buffer protocol reports. */
static int layout_known(void) {
    const char codes[] = {'d', 'q', 'l', 'I'};
    const Py_ssize_t sizes[] = {8, 8, 8, 4};
    for (int c = 0; c < 4; c++) {
        PyObject *probe = PyObject_CallFunction((PyObject *)array_type, "C(iii)", codes[c], 1, 2, 3);
        if (!probe) return -1;
        Py_buffer view;
        if (PyObject_GetBuffer(probe, &view, PyBUF_FORMAT) < 0) {
            Py_DECREF(probe);
            return -1;
        }
        ArrayObject *arr = (ArrayObject *)probe;
        int ok = view.buf == (void *)arr->ob_item && view.itemsize == sizes[c] && Py_SIZE(probe) == 3 &&
                 view.len == 3 * sizes[c] && view.format && view.format[0] == codes[c] && *arr->ob_descr == codes[c];
        PyBuffer_Release(&view);
        Py_DECREF(probe);
        if (!ok) return 0;
    }
    return 1;
}

int kernel_register(PyObject *module) {
    for (int i = 0; i < NKEYS; i++)
        if (!(keys[i] = PyUnicode_InternFromString(key_names[i]))) return -1;
    for (int c = 0; c < NCOLS; c++)
        if (!(col_keys[c] = PyUnicode_InternFromString(col_attr[c]))) return -1;
    if (!(s_append = PyUnicode_InternFromString("append")) || !(s_popleft = PyUnicode_InternFromString("popleft")) ||
        !(s_expire = PyUnicode_InternFromString("_expire")) || !(s_pooled = PyUnicode_InternFromString("_pooled")) ||
        !(s_tiers = PyUnicode_InternFromString("_tiers_after_event")) ||
        !(s_window = PyUnicode_InternFromString("_new_window")) ||
        !(s_next_recal = PyUnicode_InternFromString("next_recalibration")) ||
        !(s_repeat = PyUnicode_InternFromString("_repeat")) ||
        !(s_add = PyUnicode_InternFromString("_add_player")) || !(s_n0 = PyUnicode_InternFromString("_n0")) ||
        !(s_offset = PyUnicode_InternFromString("offset")) || !(s_ladder_add = PyUnicode_InternFromString("add")))
        return -1;
    PyObject *array_mod = PyImport_ImportModule("array");
    if (!array_mod) return -1;
    array_type = (PyTypeObject *)PyObject_GetAttrString(array_mod, "array");
    Py_DECREF(array_mod);
    if (!array_type) return -1;
    PyObject *coll_mod = PyImport_ImportModule("collections");
    if (!coll_mod) return -1;
    deque_type = PyObject_GetAttrString(coll_mod, "deque");
    Py_DECREF(coll_mod);
    if (!deque_type) return -1;
    PyObject *math_mod = PyImport_ImportModule("math");
    if (!math_mod) return -1;
    fsum_fn = PyObject_GetAttrString(math_mod, "fsum");
    Py_DECREF(math_mod);
    if (!fsum_fn) return -1;
    PyObject *heapq_mod = PyImport_ImportModule("heapq");
    if (!heapq_mod) return -1;
    heappush_fn = PyObject_GetAttrString(heapq_mod, "heappush");
    Py_DECREF(heapq_mod);
    if (!heappush_fn) return -1;
    int known = layout_known();
    if (known < 0) return -1;
    if (!known) return 0; /* another array layout: no Kernel, the engine stays on Python */
    if (PyType_Ready(&KernelType) < 0) return -1;
    Py_INCREF(&KernelType);
    if (PyModule_AddObject(module, "Kernel", (PyObject *)&KernelType) < 0) {
        Py_DECREF(&KernelType);
        return -1;
    }
    return 0;
}
