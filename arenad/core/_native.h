/* Shared between the parts of arenad.core._ladder: the ladder index (_ladder.c), the ADR update
 * kernel (_kernel.c), which re-keys players in the ladder without a Python call, and the batch
 * replay's JSON-lines scanner (_jsonl.c). */
#ifndef ARENAD_NATIVE_H
#define ARENAD_NATIVE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    double *keys;
    uint32_t *ids;
    Py_ssize_t len;
} Block;

typedef struct {
    PyObject_HEAD
    Block *blocks;
    Py_ssize_t nblocks;
    Py_ssize_t bcap;
    Py_ssize_t len;
    Py_ssize_t load;
    Py_ssize_t *tree; /* Fenwick tree, 1-based, nblocks + 1 entries; valid while tree_ok */
    Py_ssize_t tree_cap;
    int tree_ok;
    /* Rank column (ranks with ids): rank_of[id] = count_below(key of id) + 1, 0 for an id not
     * in the ladder; valid while changes == rank_changes. Built only once a ladder left unchanged
     * has answered len / RANK_COLUMN_AFTER ranks by counting (a forked web reader's snapshot),
     * so a ladder that changes between batches never pays for it. */
    uint64_t changes; /* entries added, removed or moved, ever */
    uint64_t rank_changes;
    uint64_t counted_at; /* `changes` when `counted` began */
    Py_ssize_t counted;  /* ranks counted since then */
    uint32_t *rank_of;
    Py_ssize_t rank_cap;
} LadderObject;

extern PyTypeObject LadderType;

/* Re-key pid from old to new; -1 with an exception set when (old, pid) is not in the ladder. */
int ladder_move(LadderObject *self, double old, double new, uint32_t pid);

/* Adds the Kernel type to the module. */
int kernel_register(PyObject *module);

/* Adds ids_of(), the web batch's name lookup without writes (_lookup.c), to the module. */
int lookup_register(PyObject *module);

/* Adds tally(), the per-kill count of arenad/sessions.py, to the module (_sessions.c). */
int sessions_register(PyObject *module);

/* Adds scan_kills, the JSON-lines scanner of the batch replay (_jsonl.c), to the module. */
int jsonl_register(PyObject *module);

#endif
