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
 * most `safe`; an integer id of at most 18 digits. Anything else (arrays, null, escapes, non-ASCII
 * bytes, blank lines, another key, an oversized line) is not refused here, only handed back.
 *
 * The number must be the double Python's float() makes of it (json.loads uses float()), which is
 * the correctly rounded one (round half to even, Python/dtoa.c). A number of at most 19
 * significant digits whose decimal exponent is within +-19 is rounded here exactly, in 128-bit
 * integers (exact_double); any other goes through PyOS_string_to_double, the routine behind
 * float() itself. tests/test_decode.py `TestExactDouble` compares the two on Hypothesis numbers,
 * ties and near-ties included.
 *
 * The names come out interned through a NameTable (a map from a name's bytes to its str) when
 * the caller passes one: a name seen before is the same str object again, so it is neither built
 * nor hashed again, and the engine's `ids` lookup compares it by identity.
 */
#include "_native.h"

#include <math.h>

enum { F_T, F_ATTACKER, F_VICTIM, F_SERVER, F_WEAPON, F_ID, NFIELDS };

typedef struct {
    const char *p; /* a string's first byte, or the number's */
    Py_ssize_t len;
} Span;

/* A JSON number's parts, gathered while it is scanned: value = (-1)^neg * m * 10^(exp - frac). */
typedef struct {
    uint64_t m;   /* the significant digits while there are at most 19 of them */
    int digits;   /* significant digits (leading zeros not counted), capped at 20 */
    int frac;     /* digits after the point, capped at 2^24 */
    int exp;      /* the exponent part, capped at +-10,000 (beyond, exact_double declines) */
    int neg;
    int frac_exp; /* a fraction or an exponent: json.loads makes it a float, else an int */
} Decimal;

static inline const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p;
}

/* The bytes a plain string may hold: printable ASCII but '"' and '\\'. */
static unsigned char plain_byte[256];

static void plain_init(void) {
    for (int c = 0x20; c <= 0x7e; c++) plain_byte[c] = c != '"' && c != '\\';
}

/* A string of printable ASCII without escapes starting at p (on the opening quote); the byte
 * after the closing quote, or NULL when the string is of another kind. */
static inline const char *plain_string(const char *p, const char *end, Span *out) {
    const char *s = ++p;
    /* eight bytes at a time while none is a quote, a backslash, a control byte, DEL or beyond
     * ASCII (each test exact for the word as a whole), then byte by byte */
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\'), del = w ^ (ones * 0x7f);
        uint64_t bad = ((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((b - ones) & ~b) | ((del - ones) & ~del) | w;
        if (bad & highs) break;
        p += 8;
    }
    while (p < end && plain_byte[(unsigned char)*p]) p++;
    if (p >= end || *p != '"') return NULL;
    out->p = s;
    out->len = p - s;
    return p + 1;
}

/* Digits from p, folded into d (significant ones into d->m while there are at most 19). */
/* plain_string at p when a string starts there, else NULL. */
static inline const char *quoted(const char *p, const char *end, Span *out) {
    return p < end && *p == '"' ? plain_string(p, end, out) : NULL;
}

static inline const char *digits(const char *p, const char *end, Decimal *d, int is_frac) {
    const char *s = p;
    if (!d->digits)
        while (p < end && *p == '0') p++; /* leading zeros are not significant */
    uint64_t m = d->m;
    int n = d->digits;
    /* eight digits at a time while they fit in the 19 (the multiply-and-shift of fast_float's
     * parse_eight_digits_unrolled, little-endian), then digit by digit */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (n <= 11 && end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        if (((w & 0xF0F0F0F0F0F0F0F0ULL) | (((w + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) >> 4)) !=
            0x3333333333333333ULL)
            break;
        w -= 0x3030303030303030ULL;
        w = w * 10 + (w >> 8);
        w = (((w & 0x000000FF000000FFULL) * 0x000F424000000064ULL) +
             (((w >> 16) & 0x000000FF000000FFULL) * 0x0000271000000001ULL)) >> 32;
        m = m * 100000000 + w;
        n += 8;
        p += 8;
    }
#endif
    for (; p < end && (unsigned char)(*p - '0') < 10; p++) {
        if (n < 19) m = m * 10 + (unsigned)(*p - '0');
        n += n < 20;
    }
    d->m = m;
    d->digits = n;
    if (is_frac) d->frac = p - s > (1 << 24) ? 1 << 24 : (int)(p - s); /* beyond, exact_double declines */
    return p;
}

/* A JSON number at p: '-'? ('0' | [1-9][0-9]*) ('.' [0-9]+)? ([eE] [+-]? [0-9]+)?; NULL when it
 * is not a number of that grammar. */
static inline const char *number(const char *p, const char *end, Span *out, Decimal *d) {
    const char *s = p;
    *d = (Decimal){0};
    if (p < end && *p == '-') {
        d->neg = 1;
        p++;
    }
    if (p >= end) return NULL;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') p = digits(p, end, d, 0);
    else return NULL;
    if (p < end && *p == '.') {
        const char *q = digits(p + 1, end, d, 1);
        if (q == p + 1) return NULL;
        p = q;
        d->frac_exp = 1;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = 0;
        if (p < end && (*p == '+' || *p == '-')) eneg = *p++ == '-';
        const char *q = p;
        int e = 0;
        for (; q < end && *q >= '0' && *q <= '9'; q++)
            if (e < 10000) e = e * 10 + (*q - '0');
        if (q == p) return NULL;
        p = q;
        d->exp = eneg ? -e : e;
        d->frac_exp = 1;
    }
    out->p = s;
    out->len = p - s;
    return p;
}

static const uint64_t pow10_u64[20] = {
    1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL, 100000000ULL,
    1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL, 10000000000000ULL,
    100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL, 100000000000000000ULL,
    1000000000000000000ULL, 10000000000000000000ULL};

static inline int bitlen64(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }

static inline int bitlen128(unsigned __int128 x) {
    uint64_t hi = (uint64_t)(x >> 64);
    return hi ? 64 + bitlen64(hi) : bitlen64((uint64_t)x);
}

/* The correctly rounded double of d (round half to even, as float() rounds), when d has at most
 * 19 significant digits and a decimal exponent within +-19: 1 with *out set, else 0 (the caller
 * asks PyOS_string_to_double). The quotient m * 2^s / 10^k is taken in 128-bit integers with s
 * chosen so that it has 54 or 55 bits; those and whether the division left a remainder are all
 * the rounding needs. Every such value lies between 1e-19 and 1e38: a normal double, so the
 * final scaling by a power of two is exact. */
static int exact_double(const Decimal *d, double *out) {
    if (d->digits > 19) return 0;
    int e10 = d->exp - d->frac;
    if (d->m == 0) {
        *out = d->neg ? -0.0 : 0.0;
        return 1;
    }
    if (e10 < -19 || e10 > 19) return 0;
    unsigned __int128 n = d->m;
    int shift = 0, sticky = 0;
    if (e10 >= 0) {
        n *= pow10_u64[e10]; /* < 10^38 < 2^128 */
    } else {
        uint64_t den = pow10_u64[-e10];
        shift = 54 + bitlen64(den) - bitlen64(d->m); /* at most 54 + 64 - 1: n stays below 2^118 */
        if (shift < 0) shift = 0;
        n <<= shift;
        unsigned __int128 q = n / den;
        sticky = n - q * den != 0;
        n = q; /* at least 2^53 */
    }
    int extra = bitlen128(n) - 53;
    uint64_t mant;
    if (extra > 0) {
        unsigned __int128 rem = n & (((unsigned __int128)1 << extra) - 1);
        unsigned __int128 half = (unsigned __int128)1 << (extra - 1);
        mant = (uint64_t)(n >> extra);
        if (rem > half || (rem == half && (sticky || (mant & 1)))) mant++; /* 2^53 at most: exact */
    } else {
        mant = (uint64_t)n; /* below 2^53 with nothing left over (sticky is 0 here) */
        extra = 0;
    }
    double v = ldexp((double)mant, extra - shift);
    *out = d->neg ? -v : v;
    return 1;
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

/* The number's double as float() makes it: 1 with *out, 0 when the scanner must hand it back
 * (not finite, or PyOS_string_to_double refused it). */
static int to_double(const Span *s, const Decimal *d, double *out) {
    double v;
    if (!exact_double(d, &v)) {
        char buf[64];
        if (s->len >= (Py_ssize_t)sizeof buf) return 0;
        memcpy(buf, s->p, (size_t)s->len);
        buf[s->len] = '\0';
        char *stop = NULL;
        v = PyOS_string_to_double(buf, &stop, NULL); /* NULL: overflow gives +-inf, no error */
        if (v == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        if (stop != buf + s->len) return 0;
    }
    if (!isfinite(v)) return 0;
    *out = v;
    return 1;
}

/* attacker and victim as the schema takes them: 1 to `safe` characters each, and different. */
static inline int two_players(const Span *a, const Span *v, Py_ssize_t safe) {
    return a->len >= 1 && a->len <= safe && v->len >= 1 && v->len <= safe &&
           !(a->len == v->len && memcmp(a->p, v->p, (size_t)v->len) == 0);
}

/* One line from p (data ending at end): the end of its content (before its terminator, which
 * is at that position or the data ends there) with *t and the two names' spans when the scanner
 * takes it, NULL when Python must. The line's content has no '\n' or '\r' by construction: no
 * production above takes either byte. */
static const char *take_line(const char *p, const char *end, Py_ssize_t safe, double *t, Span *att, Span *vic) {
    Span f[NFIELDS];
    Decimal num;
    int seen = 0;
    p = skip_ws(p, end);
    if (p >= end || *p != '{') return NULL;
    p = skip_ws(p + 1, end);
    for (;;) {
        Span key;
        if (!(p = quoted(p, end, &key))) return NULL;
        int which = field_of(&key);
        if (which < 0 || (seen & (1 << which))) return NULL;
        seen |= 1 << which;
        p = skip_ws(p, end);
        if (p >= end || *p != ':') return NULL;
        p = skip_ws(p + 1, end);
        if (p >= end) return NULL;
        if (which == F_T) {
            if (!(p = number(p, end, &f[F_T], &num)) || !num.frac_exp) return NULL;
            if (!to_double(&f[F_T], &num, t)) return NULL;
        } else if (*p == '"') {
            if (!(p = quoted(p, end, &f[which]))) return NULL;
        } else if (which == F_ID) {
            Decimal id;
            const char *s = p;
            if (!(p = number(p, end, &f[F_ID], &id)) || id.frac_exp || p - s > 18) return NULL;
        } else {
            return NULL;
        }
        p = skip_ws(p, end);
        if (p >= end) return NULL;
        if (*p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (*p != '}') return NULL;
        p = skip_ws(p + 1, end);
        if (p < end && *p != '\n' && *p != '\r') return NULL;
        break;
    }
    const int need = (1 << F_T) | (1 << F_ATTACKER) | (1 << F_VICTIM);
    if ((seen & need) != need || !two_players(&f[F_ATTACKER], &f[F_VICTIM], safe)) return NULL;
    for (int k = F_SERVER; k <= F_ID; k++)
        if ((seen & (1 << k)) && f[k].len > safe) return NULL;
    *att = f[F_ATTACKER];
    *vic = f[F_VICTIM];
    return p;
}

/* A literal at p, or NULL: the byte after it. */
#define LITERAL(p, end, lit) ((end) - (p) >= (Py_ssize_t)sizeof(lit) - 1 && memcmp((p), (lit), sizeof(lit) - 1) == 0 \
                                  ? (p) + sizeof(lit) - 1 : NULL)

/* take_line for the compact shape most writers emit, {"t":N,"attacker":"A","victim":"V"} with
 * an optional ,"server":"S" last, no whitespace: matched literally (no key to identify, no
 * whitespace to skip), NULL for anything else, which take_line then reads in full. */
static inline const char *fast_line(const char *p, const char *end, Py_ssize_t safe, double *t, Span *att,
                                    Span *vic) {
    Span ts, a, v, srv;
    Decimal num;
    if (!(p = LITERAL(p, end, "{\"t\":")) || !(p = number(p, end, &ts, &num)) || !num.frac_exp ||
        !(p = LITERAL(p, end, ",\"attacker\":")) || !(p = quoted(p, end, &a)) ||
        !(p = LITERAL(p, end, ",\"victim\":")) || !(p = quoted(p, end, &v)))
        return NULL;
    const char *q = LITERAL(p, end, ",\"server\":");
    if (q && (!(p = quoted(q, end, &srv)) || srv.len > safe)) return NULL;
    if (p >= end || *p != '}') return NULL;
    p++;
    if (p < end && *p != '\n' && *p != '\r') return NULL;
    if (!two_players(&a, &v, safe) || !to_double(&ts, &num, t)) return NULL;
    *att = a;
    *vic = v;
    return p;
}

static PyObject *ascii_str(const Span *s) {
    PyObject *o = PyUnicode_New(s->len, 127);
    if (o) memcpy(PyUnicode_DATA(o), s->p, (size_t)s->len);
    return o;
}

/* ---- NameTable: a name's bytes -> its str, for the names of one replay ---- */

typedef struct {
    uint64_t hash; /* 0: empty */
    PyObject *name;
} NameSlot;

typedef struct {
    PyObject_HEAD
    NameSlot *slots;
    size_t cap, n; /* cap: a power of two, or 0 before the first name */
} NameTableObject;

/* A probe never goes further than this: past it a name is built afresh and not kept, so a file
 * of names chosen to collide costs a bounded search each, and nothing else (interning only saves
 * work; an equal str in its place changes no result). */
#define NAME_PROBES 32

static inline uint64_t name_hash(const char *p, Py_ssize_t len) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)len;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
        p += 8;
        len -= 8;
    }
    if (len) {
        uint64_t w = 0;
        memcpy(&w, p, (size_t)len);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
    }
    h ^= h >> 29;
    h *= 0xC4CEB9FE1A85EC53ULL;
    h ^= h >> 32;
    return h | 1; /* never 0, the empty slot */
}

static int names_grow(NameTableObject *self) {
    size_t cap = self->cap ? self->cap * 2 : 1024;
    NameSlot *slots = PyMem_Calloc(cap, sizeof(NameSlot));
    if (!slots) return PyErr_NoMemory(), -1;
    for (size_t i = 0; i < self->cap; i++) {
        NameSlot s = self->slots[i];
        if (!s.hash) continue;
        size_t j = (size_t)s.hash & (cap - 1);
        while (slots[j].hash) j = (j + 1) & (cap - 1);
        slots[j] = s;
    }
    PyMem_Free(self->slots);
    self->slots = slots;
    self->cap = cap;
    return 0;
}

/* The str of the ASCII name at s: the table's (a new reference) or a new one, kept when there
 * is room within NAME_PROBES. */
static PyObject *names_get(NameTableObject *self, const Span *s) {
    if (self->n * 2 >= self->cap && names_grow(self) < 0) return NULL;
    uint64_t h = name_hash(s->p, s->len);
    size_t mask = self->cap - 1, j = (size_t)h & mask;
    for (int probe = 0; probe < NAME_PROBES; probe++, j = (j + 1) & mask) {
        NameSlot *slot = &self->slots[j];
        if (!slot->hash) {
            PyObject *o = ascii_str(s);
            if (!o) return NULL;
            Py_INCREF(o);
            slot->hash = h;
            slot->name = o;
            self->n++;
            return o;
        }
        if (slot->hash == h && PyUnicode_GET_LENGTH(slot->name) == s->len &&
            memcmp(PyUnicode_DATA(slot->name), s->p, (size_t)s->len) == 0) {
            Py_INCREF(slot->name);
            return slot->name;
        }
    }
    return ascii_str(s);
}

static void NameTable_dealloc(NameTableObject *self) {
    for (size_t i = 0; i < self->cap; i++)
        if (self->slots[i].hash) Py_DECREF(self->slots[i].name);
    PyMem_Free(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t NameTable_len(NameTableObject *self) { return (Py_ssize_t)self->n; }

static PySequenceMethods NameTable_as_sequence = {.sq_length = (lenfunc)NameTable_len};

static PyTypeObject NameTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "arenad.core._ladder.NameTable",
    .tp_basicsize = sizeof(NameTableObject),
    .tp_dealloc = (destructor)NameTable_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "NameTable(): the names scan_kills has made, by their bytes, so that each is made once.",
    .tp_new = PyType_GenericNew,
    .tp_as_sequence = &NameTable_as_sequence,
};

static int append_new(PyObject *list, PyObject *item) {
    if (!item) return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

/* The start of the line after the one at line: past its \n, \r or \r\n, as bytes.splitlines()
 * ends a line. */
static const char *next_line(const char *line, const char *end) {
    const char *eol = line;
    while (eol < end && *eol != '\n' && *eol != '\r') eol++;
    if (eol < end) eol += (*eol == '\r' && eol + 1 < end && eol[1] == '\n') ? 2 : 1;
    return eol;
}

/* scan_kills(data, pos, attackers, victims, times, limit, safe, max_line, names) -> (stop, next). */
static PyObject *scan_kills(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 9 || !PyBytes_CheckExact(args[0]) || !PyList_CheckExact(args[2]) || !PyList_CheckExact(args[3]) ||
        !PyList_CheckExact(args[4]) || (args[8] != Py_None && Py_TYPE(args[8]) != &NameTableType))
        return PyErr_Format(PyExc_TypeError,
                            "scan_kills(data: bytes, pos, attackers: list, victims: list, times: list, limit, safe, "
                            "max_line, names: NameTable | None)");
    PyObject *att_list = args[2], *vic_list = args[3], *t_list = args[4];
    NameTableObject *names = args[8] == Py_None ? NULL : (NameTableObject *)args[8];
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[5]);
    Py_ssize_t safe = PyLong_AsSsize_t(args[6]);
    Py_ssize_t max_line = PyLong_AsSsize_t(args[7]);
    if ((pos == -1 || limit == -1 || safe == -1 || max_line == -1) && PyErr_Occurred()) return NULL;
    const char *base = PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    if (pos < 0 || pos > size) return PyErr_Format(PyExc_ValueError, "scan_kills: pos %zd outside the data", pos);
    const char *end = base + size;
    Py_ssize_t taken = 0;
    while (pos < size && taken < limit) {
        const char *line = base + pos;
        double t = 0.0;
        Span a, v;
        const char *eol = fast_line(line, end, safe, &t, &a, &v);
        if (!eol) eol = take_line(line, end, safe, &t, &a, &v);
        if (!eol || eol - line > max_line)
            return Py_BuildValue("(nn)", pos, (Py_ssize_t)(next_line(line, end) - base));
        PyObject *ao = names ? names_get(names, &a) : ascii_str(&a);
        PyObject *vo = ao ? (names ? names_get(names, &v) : ascii_str(&v)) : NULL;
        if (!vo) {
            Py_XDECREF(ao);
            return NULL;
        }
        if (append_new(att_list, ao) < 0) {
            Py_DECREF(vo);
            return NULL;
        }
        if (append_new(vic_list, vo) < 0 || append_new(t_list, PyFloat_FromDouble(t)) < 0) return NULL;
        taken++;
        if (eol < end) eol += (*eol == '\r' && eol + 1 < end && eol[1] == '\n') ? 2 : 1;
        pos = eol - base;
    }
    return Py_BuildValue("(nn)", pos, pos);
}

static PyMethodDef jsonl_methods[] = {
    {"scan_kills", (PyCFunction)(void (*)(void))scan_kills, METH_FASTCALL,
     "scan_kills(data, pos, attackers, victims, times, limit, safe, max_line, names) -> (stop, next): kills of "
     "the common JSON-line shape appended from byte pos; stop is the first line not taken, next the line after it."},
    {NULL, NULL, 0, NULL},
};

int jsonl_register(PyObject *module) {
    plain_init();
    if (PyType_Ready(&NameTableType) < 0) return -1;
    Py_INCREF(&NameTableType);
    if (PyModule_AddObject(module, "NameTable", (PyObject *)&NameTableType) < 0) {
        Py_DECREF(&NameTableType);
        return -1;
    }
    return PyModule_AddFunctions(module, jsonl_methods);
}
