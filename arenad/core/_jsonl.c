/* arenad.core._ladder.scan_kills: the batch replay's JSON-lines decoder for the common line shape
 * (docs/performance.md "Batch replay").
 *
 * arenad/decode.py `decode_json_line` is the reference: the standard library's parser, then the
 * wire schema's checks. This scanner takes a line only when it is *certain* of what that reference
 * makes of it, a kill `(t, attacker, victim)` with nothing to refuse, and stops at the first line
 * it is not certain about, which Python then decodes (tests/test_decode.py compares the two on
 * Hypothesis-generated lines, hostile ones included). A line it takes is, exactly:
 *
 *   ws* '{' ws* member (ws* ',' ws* member)* ws* '}' ws*      ws = space or tab
 *   member = '"' key '"' ws* ':' ws* value
 *
 * with each key one of t, attacker, victim, server, weapon, id, at most once (a duplicate is
 * Python's: the standard library keeps the last), t, attacker and victim present; t a JSON number
 * with a fraction or an exponent (an integer `t` is a Python int, which the fast path does not
 * take), finite once parsed; every string printable ASCII without escapes (0x20-0x7e, no '"' or
 * '\\'): the schema's length rules then count bytes as characters and nothing needs decoding;
 * attacker and victim 1 to `safe` characters and different, server, weapon and a string id at
 * most `safe`; an integer id of at most 18 digits. The number is parsed by PyOS_string_to_double,
 * the routine behind Python's float(), which json.loads uses: the same double, bit for bit.
 * Anything else (arrays, null, escapes, non-ASCII bytes, blank lines, another key, an oversized
 * line) is not refused here, only handed back.
 */
#include "_native.h"

#include <math.h>

enum { F_T, F_ATTACKER, F_VICTIM, F_SERVER, F_WEAPON, F_ID, NFIELDS };

typedef struct {
    const char *p; /* a string's first byte, or the number's */
    Py_ssize_t len;
} Span;

static inline const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p;
}

/* A string of printable ASCII without escapes starting at p (on the opening quote); the byte
 * after the closing quote, or NULL when the string is of another kind. */
static inline const char *plain_string(const char *p, const char *end, Span *out) {
    const char *s = ++p;
    while (p < end) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            out->p = s;
            out->len = p - s;
            return p + 1;
        }
        if (c < 0x20 || c > 0x7e || c == '\\') return NULL;
        p++;
    }
    return NULL;
}

static inline const char *digits(const char *p, const char *end) {
    while (p < end && *p >= '0' && *p <= '9') p++;
    return p;
}

/* A JSON number at p: '-'? ('0' | [1-9][0-9]*) ('.' [0-9]+)? ([eE] [+-]? [0-9]+)?. Sets *frac_exp
 * when it has a fraction or an exponent (json.loads makes it a float, else an int); NULL when it
 * is not a number of that grammar. */
static inline const char *number(const char *p, const char *end, Span *out, int *frac_exp) {
    const char *s = p;
    *frac_exp = 0;
    if (p < end && *p == '-') p++;
    if (p >= end) return NULL;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') p = digits(p, end);
    else return NULL;
    if (p < end && *p == '.') {
        const char *q = digits(p + 1, end);
        if (q == p + 1) return NULL;
        p = q;
        *frac_exp = 1;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const char *q = digits(p, end);
        if (q == p) return NULL;
        p = q;
        *frac_exp = 1;
    }
    out->p = s;
    out->len = p - s;
    return p;
}

/* Which field a key names (its bytes between the quotes), or -1. */
static inline int field_of(const Span *k) {
    switch (k->len) {
        case 1: return k->p[0] == 't' ? F_T : -1;
        case 2: return memcmp(k->p, "id", 2) == 0 ? F_ID : -1;
        case 6:
            if (memcmp(k->p, "victim", 6) == 0) return F_VICTIM;
            if (memcmp(k->p, "server", 6) == 0) return F_SERVER;
            if (memcmp(k->p, "weapon", 6) == 0) return F_WEAPON;
            return -1;
        case 8: return memcmp(k->p, "attacker", 8) == 0 ? F_ATTACKER : -1;
        default: return -1;
    }
}

/* One line [p, end): 1 with *t and the two names' spans when the scanner takes it, 0 when Python
 * must. */
static int take_line(const char *p, const char *end, Py_ssize_t safe, double *t, Span *att, Span *vic) {
    Span f[NFIELDS];
    int seen = 0;
    p = skip_ws(p, end);
    if (p >= end || *p != '{') return 0;
    p = skip_ws(p + 1, end);
    for (;;) {
        Span key;
        if (p >= end || *p != '"' || !(p = plain_string(p, end, &key))) return 0;
        int which = field_of(&key);
        if (which < 0 || (seen & (1 << which))) return 0;
        seen |= 1 << which;
        p = skip_ws(p, end);
        if (p >= end || *p != ':') return 0;
        p = skip_ws(p + 1, end);
        if (p >= end) return 0;
        if (which == F_T) {
            int frac_exp;
            if (!(p = number(p, end, &f[F_T], &frac_exp)) || !frac_exp) return 0;
        } else if (*p == '"') {
            if (!(p = plain_string(p, end, &f[which]))) return 0;
        } else if (which == F_ID) {
            int frac_exp;
            const char *s = p;
            if (!(p = number(p, end, &f[F_ID], &frac_exp)) || frac_exp || p - s > 18) return 0;
        } else {
            return 0;
        }
        p = skip_ws(p, end);
        if (p >= end) return 0;
        if (*p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (*p != '}') return 0;
        if (skip_ws(p + 1, end) != end) return 0;
        break;
    }
    const int need = (1 << F_T) | (1 << F_ATTACKER) | (1 << F_VICTIM);
    if ((seen & need) != need) return 0;
    if (f[F_ATTACKER].len < 1 || f[F_ATTACKER].len > safe || f[F_VICTIM].len < 1 || f[F_VICTIM].len > safe)
        return 0;
    if (f[F_ATTACKER].len == f[F_VICTIM].len && memcmp(f[F_ATTACKER].p, f[F_VICTIM].p, f[F_VICTIM].len) == 0)
        return 0;
    for (int k = F_SERVER; k <= F_ID; k++)
        if ((seen & (1 << k)) && f[k].len > safe) return 0;
    char buf[64];
    if (f[F_T].len >= (Py_ssize_t)sizeof buf) return 0;
    memcpy(buf, f[F_T].p, f[F_T].len);
    buf[f[F_T].len] = '\0';
    char *stop = NULL;
    double v = PyOS_string_to_double(buf, &stop, NULL); /* NULL: overflow gives +-inf, no error */
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (stop != buf + f[F_T].len || !isfinite(v)) return 0;
    *t = v;
    *att = f[F_ATTACKER];
    *vic = f[F_VICTIM];
    return 1;
}

static PyObject *ascii_str(const Span *s) {
    PyObject *o = PyUnicode_New(s->len, 127);
    if (o) memcpy(PyUnicode_DATA(o), s->p, (size_t)s->len);
    return o;
}

static int append_new(PyObject *list, PyObject *item) {
    if (!item) return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

/* scan_kills(data, pos, attackers, victims, times, limit, safe, max_line) -> (stop, next). */
static PyObject *scan_kills(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 8 || !PyBytes_CheckExact(args[0]) || !PyList_CheckExact(args[2]) || !PyList_CheckExact(args[3]) ||
        !PyList_CheckExact(args[4]))
        return PyErr_Format(PyExc_TypeError,
                            "scan_kills(data: bytes, pos, attackers: list, victims: list, times: list, limit, safe, "
                            "max_line)");
    PyObject *att_list = args[2], *vic_list = args[3], *t_list = args[4];
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[5]);
    Py_ssize_t safe = PyLong_AsSsize_t(args[6]);
    Py_ssize_t max_line = PyLong_AsSsize_t(args[7]);
    if ((pos == -1 || limit == -1 || safe == -1 || max_line == -1) && PyErr_Occurred()) return NULL;
    const char *base = PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    if (pos < 0 || pos > size) return PyErr_Format(PyExc_ValueError, "scan_kills: pos %zd outside the data", pos);
    Py_ssize_t taken = 0;
    while (pos < size && taken < limit) {
        const char *line = base + pos;
        /* the line's end as bytes.splitlines() finds it: \n, \r or \r\n */
        const char *eol = line;
        const char *end = base + size;
        while (eol < end && *eol != '\n' && *eol != '\r') eol++;
        const char *next = eol;
        if (next < end) next += (*next == '\r' && next + 1 < end && next[1] == '\n') ? 2 : 1;
        double t;
        Span a, v;
        if (eol - line > max_line || !take_line(line, eol, safe, &t, &a, &v))
            return Py_BuildValue("(nn)", pos, (Py_ssize_t)(next - base));
        if (append_new(att_list, ascii_str(&a)) < 0 || append_new(vic_list, ascii_str(&v)) < 0 ||
            append_new(t_list, PyFloat_FromDouble(t)) < 0)
            return NULL;
        taken++;
        pos = next - base;
    }
    return Py_BuildValue("(nn)", pos, pos);
}

static PyMethodDef jsonl_methods[] = {
    {"scan_kills", (PyCFunction)(void (*)(void))scan_kills, METH_FASTCALL,
     "scan_kills(data, pos, attackers, victims, times, limit, safe, max_line) -> (stop, next): kills of the "
     "common JSON-line shape appended from byte pos; stop is the first line not taken, next the line after it."},
    {NULL, NULL, 0, NULL},
};

int jsonl_register(PyObject *module) { return PyModule_AddFunctions(module, jsonl_methods); }
