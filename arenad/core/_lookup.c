/* ids_of(index, names): the id of each name in a name index (a dict of str -> int), for the web's
 * batch answer (arenad/web/reader.py, docs/web.md "Readers").
 *
 * Why C: a forked web reader holds the daemon's name index copy-on-write, and a lookup in Python
 * increfs the int it finds, a write to a page shared with the daemon, so each of a 256-id batch's
 * ids can cost a page copy. Borrowed references only read the index. */
#include "_native.h"

static PyObject *ids_of(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyDict_Check(args[0]))
        return PyErr_Format(PyExc_TypeError, "ids_of(index: dict, names: sequence of str)");
    PyObject *index = args[0];
    PyObject *seq = PySequence_Fast(args[1], "ids_of: names must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL) goto fail;
    int64_t *dst = (int64_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        /* Exactly str: a subclass's own __eq__ or __hash__ could run Python code (and change
         * the sequence under us) in the middle of the lookup. */
        if (!PyUnicode_CheckExact(items[i])) {
            PyErr_Format(PyExc_TypeError, "ids_of: names must be str, got %.100s", Py_TYPE(items[i])->tp_name);
            goto fail;
        }
        PyObject *v = PyDict_GetItemWithError(index, items[i]); /* borrowed: nothing written */
        if (v == NULL) {
            if (PyErr_Occurred()) goto fail;
            dst[i] = -1;
            continue;
        }
        long long id = PyLong_AsLongLong(v);
        if (id == -1 && PyErr_Occurred()) goto fail;
        if (id < 0) {
            PyErr_Format(PyExc_ValueError, "ids_of: a negative id (%lld) in the index", id);
            goto fail;
        }
        dst[i] = (int64_t)id;
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
