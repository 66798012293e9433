/* arenad.core._ladder.tally: the per-kill half of arenad/sessions.py `Sessions._tally_py` in C.
 *
 * For each kill record (a tuple (seq, t, attacker, victim, server, id)) of records[lo:hi] whose
 * two players the ladder tracks and that the engine took: one more kill for the attacker, one
 * more death for the victim (saturating at 2^32 - 1), and both players' server code set to the
 * record's. Anything else (None, a placement, a control record, an unknown player, a self-kill,
 * a kill the engine refused as out of order) is skipped, as in Python. "Took" is decided by the
 * engine's own rule on a running clock (``clock``: a kill more than ``tolerance`` before the
 * newest one taken is refused, any other moves the clock on), so a tally over any cut of the
 * records counts the same kills.
 *
 * Returns (next index, clock): hi when done, or the index of the first record whose server has
 * no code yet: the caller assigns one (Sessions.code) and calls again from there. The columns are reached through
 * the buffer protocol (no private array layout); tests/core/test_sessions.py checks the C and
 * the Python tallies give the same columns on random streams.
 */
#include "_native.h"

#include <math.h>

static int column(PyObject *o, Py_buffer *view, const char *format, const char *name) {
    if (PyObject_GetBuffer(o, view, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) return -1;
    if (!view->format || strcmp(view->format, format) != 0 || view->ndim != 1) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "tally: %s must be array('%s')", name, format);
        return -1;
    }
    return 0;
}

static PyObject *tally(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 10)
        return PyErr_Format(PyExc_TypeError,
                            "tally(records, lo, hi, ids, kills, deaths, server, codes, clock, tolerance)");
    PyObject *records = args[0], *ids = args[3], *codes = args[7];
    if (!PyList_CheckExact(records) || !PyDict_Check(ids) || !PyDict_Check(codes))
        return PyErr_Format(PyExc_TypeError, "tally: records must be a list, ids and codes dicts");
    Py_ssize_t lo = PyLong_AsSsize_t(args[1]), hi = PyLong_AsSsize_t(args[2]);
    if ((lo == -1 || hi == -1) && PyErr_Occurred()) return NULL;
    double clock = PyFloat_AsDouble(args[8]), tolerance = PyFloat_AsDouble(args[9]);
    if ((clock == -1.0 || tolerance == -1.0) && PyErr_Occurred()) return NULL;
    if (lo < 0) lo = 0;
    if (hi > PyList_GET_SIZE(records)) hi = PyList_GET_SIZE(records);
    Py_buffer kv, dv, sv;
    if (column(args[4], &kv, "I", "kills") < 0) return NULL;
    if (column(args[5], &dv, "I", "deaths") < 0) {
        PyBuffer_Release(&kv);
        return NULL;
    }
    if (column(args[6], &sv, "H", "server") < 0) {
        PyBuffer_Release(&kv);
        PyBuffer_Release(&dv);
        return NULL;
    }
    uint32_t *kills = (uint32_t *)kv.buf, *deaths = (uint32_t *)dv.buf;
    uint16_t *where = (uint16_t *)sv.buf;
    Py_ssize_t size = kv.len / 4;
    if (dv.len / 4 < size) size = dv.len / 4;
    if (sv.len / 2 < size) size = sv.len / 2;
    PyObject *last_server = NULL; /* borrowed: the records keep it; one datagram shares one object */
    uint16_t last_code = 0;
    Py_ssize_t k = lo, stop = hi;
    for (; k < hi; k++) {
        PyObject *rec = PyList_GET_ITEM(records, k);
        if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != 6) continue;
        PyObject *t_obj = PyTuple_GET_ITEM(rec, 1);
        if (!PyFloat_CheckExact(t_obj)) continue;
        double t = PyFloat_AS_DOUBLE(t_obj);
        if (!isfinite(t) || t < clock - tolerance) continue; /* refused by the engine */
        PyObject *a_obj = PyDict_GetItemWithError(ids, PyTuple_GET_ITEM(rec, 2));
        if (!a_obj) {
            if (PyErr_Occurred()) goto fail;
            continue;
        }
        PyObject *v_obj = PyDict_GetItemWithError(ids, PyTuple_GET_ITEM(rec, 3));
        if (!v_obj) {
            if (PyErr_Occurred()) goto fail;
            continue;
        }
        Py_ssize_t a = PyLong_AsSsize_t(a_obj), v = PyLong_AsSsize_t(v_obj);
        if ((a == -1 || v == -1) && PyErr_Occurred()) goto fail;
        if (a == v) continue;                                   /* a self-kill: refused */
        if (a < 0 || v < 0 || a >= size || v >= size) continue; /* columns not grown: Python's to do */
        PyObject *server = PyTuple_GET_ITEM(rec, 4);
        if (server != last_server) {
            PyObject *c = PyDict_GetItemWithError(codes, server);
            if (!c) {
                if (PyErr_Occurred()) goto fail;
                stop = k; /* a new server: the caller gives it a code */
                break;
            }
            long code = PyLong_AsLong(c);
            if (code == -1 && PyErr_Occurred()) goto fail;
            last_server = server;
            last_code = (uint16_t)(code < 0 || code > 0xFFFF ? 0 : code);
        }
        if (t > clock) clock = t;
        if (kills[a] != UINT32_MAX) kills[a]++;
        if (deaths[v] != UINT32_MAX) deaths[v]++;
        where[a] = last_code;
        where[v] = last_code;
    }
    PyBuffer_Release(&kv);
    PyBuffer_Release(&dv);
    PyBuffer_Release(&sv);
    return Py_BuildValue("nd", k < hi ? stop : hi, clock);
fail:
    PyBuffer_Release(&kv);
    PyBuffer_Release(&dv);
    PyBuffer_Release(&sv);
    return NULL;
}

static PyMethodDef tally_def = {"tally", (PyCFunction)(void (*)(void))tally, METH_FASTCALL,
                                "tally(records, lo, hi, ids, kills, deaths, server, codes, clock, tolerance) -> (next, clock)"};

int sessions_register(PyObject *module) {
    PyObject *f = PyCFunction_NewEx(&tally_def, NULL, NULL);
    if (!f) return -1;
    if (PyModule_AddObject(module, "tally", f) < 0) {
        Py_DECREF(f);
        return -1;
    }
    return 0;
}
