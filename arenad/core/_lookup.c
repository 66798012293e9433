/* ids_of(index, names): the id of each name in a name index (a dict of str -> int), for the web's
 * batch answer (arenad/web/reader.py, docs/web.md "Readers").
 *
 * Why C: a forked web reader holds the daemon's name index copy-on-write, and a lookup in Python
 * increfs the int it finds, a write to a page shared with the daemon, so each of a 256-id batch's
 * ids can cost a page copy. Borrowed references only read the index.
 *
 * Why the prefetching: at a million names each lookup is a chain of four dependent cache misses
 * (the hash slot, the entry, the key string, the value int), about 0.8 us on the project's VM, so a
 * 256-id batch spent ~300 us waiting for memory one miss at a time. The lookups of a batch do not
 * depend on each other: walking a chunk of them one link at a time, with each link's line
 * prefetched for all of the chunk before the next link is read, overlaps the misses. The answer
 * still comes from PyDict_GetItemWithError alone; the walk only warms the cache, and reads
 * nothing past the dict's own tables (it needs CPython 3.11's dict layout, from its internal
 * header, and falls back to the plain loop on any other version or kind of dict). */
#include "_native.h"

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && defined(__GNUC__) && defined(__has_include)
#if __has_include("internal/pycore_dict.h") /* a distribution may ship Python.h without it */
#define LOOKUP_PREFETCH 1
#ifndef Py_BUILD_CORE
#define Py_BUILD_CORE
#define LOOKUP_DEFINED_BUILD_CORE
#endif
#include "internal/pycore_dict.h"
#ifdef LOOKUP_DEFINED_BUILD_CORE
#undef Py_BUILD_CORE
#endif
#endif
#endif

#define CHUNK 32 /* lookups in flight: 32 x ~4 lines stays well inside L1d + L2 */

#ifdef LOOKUP_PREFETCH
/* The first-probe entry index of ``hash`` in ``dk`` (perturbation comes after a collision, which
 * the plain lookup then follows from the cache as usual), or -1. */
static inline size_t first_slot(PyDictKeysObject *dk, Py_hash_t hash) {
    return (size_t)hash & (((size_t)1 << dk->dk_log2_size) - 1);
}

static inline Py_ssize_t first_index(PyDictKeysObject *dk, Py_hash_t hash) {
    size_t i = first_slot(dk, hash);
    uint8_t lg = dk->dk_log2_size;
    Py_ssize_t ix;
    if (lg < 8)
        ix = ((const int8_t *)dk->dk_indices)[i];
    else if (lg < 16)
        ix = ((const int16_t *)dk->dk_indices)[i];
    else if (lg < 32)
        ix = ((const int32_t *)dk->dk_indices)[i];
    else
        ix = (Py_ssize_t)((const int64_t *)dk->dk_indices)[i];
    return (ix >= 0 && ix < dk->dk_nentries) ? ix : -1;
}

static inline const void *slot_address(PyDictKeysObject *dk, Py_hash_t hash) {
    return dk->dk_indices + (first_slot(dk, hash) << (dk->dk_log2_index_bytes - dk->dk_log2_size));
}

/* Warm the cache for names[0..n) (n <= CHUNK), all of them one link at a time. */
static void warm(PyDictObject *mp, PyObject *const *names, Py_ssize_t n) {
    PyDictKeysObject *dk = mp->ma_keys;
    PyDictUnicodeEntry *entries = DK_UNICODE_ENTRIES(dk);
    Py_hash_t hashes[CHUNK];
    Py_ssize_t ixs[CHUNK];
    for (Py_ssize_t k = 0; k < n; k++) {
        hashes[k] = ((PyASCIIObject *)names[k])->hash;
        __builtin_prefetch(slot_address(dk, hashes[k]));
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        ixs[k] = first_index(dk, hashes[k]);
        if (ixs[k] >= 0) __builtin_prefetch(&entries[ixs[k]]);
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        if (ixs[k] < 0) continue;
        PyObject *key = entries[ixs[k]].me_key, *value = entries[ixs[k]].me_value;
        if (key != NULL) __builtin_prefetch(key);
        if (value != NULL) __builtin_prefetch(value);
    }
    /* The key's characters past its header's first line, where unicode_eq compares them. */
    for (Py_ssize_t k = 0; k < n; k++) {
        if (ixs[k] < 0) continue;
        PyObject *key = entries[ixs[k]].me_key;
        if (key != NULL) __builtin_prefetch((const char *)key + 64);
    }
    /* A prefetch is no side effect to GCC: without this, interprocedural analysis finds this
     * static function pure and drops its calls (it did with -DNDEBUG, pip's flags). */
    __asm__ volatile("" ::: "memory");
}
#endif

static PyObject *ids_of(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyDict_Check(args[0]))
        return PyErr_Format(PyExc_TypeError, "ids_of(index: dict, names: sequence of str)");
    PyObject *index = args[0];
    /* A tuple of our own: a list handed in could be changed under us by any Python code that
     * runs in a lookup (a general table's key's __eq__), leaving ``items`` dangling. */
    PyObject *seq = PySequence_Tuple(args[1]);
    if (seq == NULL) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject **items = &PyTuple_GET_ITEM(seq, 0);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL) goto fail;
    int64_t *dst = (int64_t *)PyBytes_AS_STRING(out);
    /* Exactly str: a subclass's own __eq__ or __hash__ could run Python code (and change the
     * sequence under us) in the middle of the lookup. Checked, and hashed, before any lookup. */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_CheckExact(items[i])) {
            PyErr_Format(PyExc_TypeError, "ids_of: names must be str, got %.100s", Py_TYPE(items[i])->tp_name);
            goto fail;
        }
        if (PyObject_Hash(items[i]) == -1) goto fail; /* cached in the str from here on */
    }
    for (Py_ssize_t base = 0; base < n; base += CHUNK) {
        Py_ssize_t end = base + CHUNK < n ? base + CHUNK : n;
#ifdef LOOKUP_PREFETCH
        /* Only a combined table of str keys has the layout warm() reads (PyDict_CheckExact: a
         * subclass may keep its keys elsewhere), asked again for each chunk. In such a table a
         * lookup of an exact str compares str with str and the ids must be exact ints, so no
         * Python code runs from here to the chunk's last lookup: the tables warm() reads are the
         * ones they use. */
        PyDictObject *mp = (PyDictObject *)index;
        if (PyDict_CheckExact(index) && mp->ma_values == NULL && mp->ma_keys->dk_kind == DICT_KEYS_UNICODE)
            warm(mp, items + base, end - base);
#endif
        for (Py_ssize_t i = base; i < end; i++) {
            PyObject *v = PyDict_GetItemWithError(index, items[i]); /* borrowed: nothing written */
            if (v == NULL) {
                if (PyErr_Occurred()) goto fail;
                dst[i] = -1;
                continue;
            }
            /* Exactly int: another value's __index__ would be Python code inside the lookup. */
            if (!PyLong_CheckExact(v)) {
                PyErr_Format(PyExc_TypeError, "ids_of: the index holds a %.100s, not an int id", Py_TYPE(v)->tp_name);
                goto fail;
            }
            long long id = PyLong_AsLongLong(v);
            if (id == -1 && PyErr_Occurred()) goto fail;
            if (id < 0) {
                PyErr_Format(PyExc_ValueError, "ids_of: a negative id (%lld) in the index", id);
                goto fail;
            }
            dst[i] = (int64_t)id;
        }
    }
    Py_DECREF(seq);
    return out;
fail:
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

static PyMethodDef lookup_methods[] = {
    {"ids_of", (PyCFunction)(void (*)(void))ids_of, METH_FASTCALL,
     "ids_of(index, names) -> bytes: each name's id in index (dict str -> int) as native int64, -1 where absent."},
    {NULL, NULL, 0, NULL},
};

int lookup_register(PyObject *module) { return PyModule_AddFunctions(module, lookup_methods); }
