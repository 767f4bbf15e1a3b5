/* printf-style float text for whole float32/float64 buffers, at compiled speed; and, in a section
 * of its own below ("rapidjson"), the text rapidjson's Writer writes for doubles (Triton's JSON).
 *
 * The rules (gateway/core/floattext.py has the prose): each finite value is written as C's
 * "%.<short>g" when that text reads back (strtof for float32, strtod for float64) to the same
 * value, else as "%.<long>g"; a suffix (".0") is appended when the text has neither '.' nor 'e';
 * NaN and +-infinity are fixed texts.  PROTOBUF's float32 writer also takes the long text for
 * every subnormal value (its safe_strtof fails on glibc's ERANGE).
 *
 * Fast path: for a normal value m * 2^q the correctly rounded (half-even, as glibc's printf) P
 * significant digits and "does this decimal read back to the same binary value" are computed with
 * exact 128-bit integer arithmetic, no printf and no strtod: v * 10^j = m * 5^j * 2^(q+j) when the
 * decimal exponent is below P, v / 10^k otherwise.  Values outside the range that arithmetic
 * covers (subnormals, float64 below ~1e-15 at 17 digits, huge magnitudes) take snprintf +
 * strtof/strtod, i.e. the C library itself.  tests/unit/core/test_floattext.py checks both paths
 * against the C library and the numpy reference writer.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE /* memmem */
#include <Python.h>

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef __SIZEOF_INT128__
#error "gateway.core._floattext needs a C compiler with unsigned __int128 (gcc or clang)"
#endif

typedef unsigned __int128 u128;

#define MAX_POW5 55   /* 5^55 < 2^128 */
#define MAX_POW10 38  /* 10^38 < 2^127 */
#define P10D_OFF 350
#define P10D_LEN 700

static u128 POW5[MAX_POW5 + 1];
static int POW5_BITS[MAX_POW5 + 1];
static u128 POW10[MAX_POW10 + 1];
static int POW10_BITS[MAX_POW10 + 1];
static double POW10_D[P10D_LEN]; /* POW10_D[i]: the double nearest 10^(i - P10D_OFF) */

static int bitlen(u128 x)
{
    uint64_t hi = (uint64_t)(x >> 64), lo = (uint64_t)x;
    if (hi)
        return 128 - __builtin_clzll(hi);
    return lo ? 64 - __builtin_clzll(lo) : 0;
}

static void init_tables(void)
{
    char text[16];
    POW5[0] = 1;
    for (int i = 1; i <= MAX_POW5; i++)
        POW5[i] = POW5[i - 1] * 5;
    for (int i = 0; i <= MAX_POW5; i++)
        POW5_BITS[i] = bitlen(POW5[i]);
    POW10[0] = 1;
    for (int i = 1; i <= MAX_POW10; i++)
        POW10[i] = POW10[i - 1] * 10;
    for (int i = 0; i <= MAX_POW10; i++)
        POW10_BITS[i] = bitlen(POW10[i]);
    for (int i = 0; i < P10D_LEN; i++) {
        snprintf(text, sizeof text, "1e%d", i - P10D_OFF);
        POW10_D[i] = strtod(text, NULL); /* correctly rounded; 0 or inf at the ends */
    }
}

/* The P significant digits of v = m * 2^q (m has its top bit at mbits - 1), correctly rounded
 * half-even: *D (exactly P digits), *X (decimal exponent of the first digit, after rounding) and
 * *rt: whether that decimal reads back (round to nearest, ties to even) as v.  lower_half: the
 * gap below v is half the gap above (v is a power of two above the smallest normal).
 * Returns 0 when v is outside the range of the 128-bit arithmetic. */
static inline __attribute__((always_inline)) int fast_digits(double v, uint64_t m, int q, int mbits,
                                                            int lower_half, int P, uint64_t *D, int *X, int *rt,
                                                            int *x_io)
{
    int x = *x_io; /* floor(log10(v)) when known (a second call), else INT_MIN */
    if (x == INT_MIN) {
        int b = q + mbits - 1;   /* v in [2^b, 2^(b+1)) */
        x = (b * 78913) >> 18;   /* floor(b * log10(2)) for |b| < 1650 (arithmetic shift): X or X - 1 */
        if (x + 1 + P10D_OFF >= 0 && x + 1 + P10D_OFF < P10D_LEN && v >= POW10_D[x + 1 + P10D_OFF])
            x++;
    }
    const u128 lo = POW10[P - 1], hi = POW10[P];
    for (int tries = 0; tries < 3; tries++) {
        int k = x - P + 1; /* D ~ v / 10^k */
        u128 Df, R, err;
        int up, ok;
        if (k <= 0) {
            /* v * 10^j = m * 5^j * 2^(q + j) = N / 2^sh */
            int j = -k;
            if (j > MAX_POW5 || POW5_BITS[j] + mbits > 127)
                return 0;
            u128 N = (u128)m * POW5[j];
            int sh = -(q + j);
            if (sh <= 0) {
                if (-sh + bitlen(N) > 127)
                    return 0;
                Df = N << -sh;
                R = 0;
                up = 0;
                err = 0;
                ok = 1;
            } else if (POW5_BITS[j] + mbits <= 64 && sh < 64) {
                /* the same in 64 bits (float32's usual range) */
                uint64_t N64 = (uint64_t)N, one = (uint64_t)1 << sh, half = one >> 1;
                uint64_t Df64 = N64 >> sh, R64 = N64 & (one - 1);
                up = (R64 > half) | ((R64 == half) & (int)(Df64 & 1)); /* branch-free: random data */
                uint64_t err64 = up ? one - R64 : R64;
                Df = Df64;
                err = err64;
                R = R64;
                /* err < 2^63 and 5^j < 2^40 here: no overflow in the shifted 128-bit compare */
                ok = ((u128)err64 << (1 + (lower_half & !up))) < POW5[j];
            } else {
                if (sh > 126)
                    return 0;
                u128 one = (u128)1 << sh, half = one >> 1;
                Df = N >> sh;
                R = N & (one - 1);
                up = (R > half) | ((R == half) & (int)(Df & 1));
                err = up ? one - R : R;
                /* |d - v| = err * 2^q / 5^j against the half gap 2^(q-1) (2^(q-2) below a power of
                 * two): never a tie, 5^j being odd. err < 2^sh <= 2^114 (P >= 6: Df >= 10^4): no overflow */
                ok = (err << (1 + (lower_half & !up))) < POW5[j];
            }
        } else {
            if (k > MAX_POW10)
                return 0;
            if (q >= 0) {
                /* v / 10^k = (m << q) / 10^k; |d - v| = err against 2^(q-1) (2^(q-2) below) */
                if (q + mbits > 124 || POW10_BITS[k] > 124)
                    return 0;
                u128 num = (u128)m << q, den = POW10[k];
                Df = num / den;
                R = num - Df * den;
                up = R > den - R || (R == den - R && (Df & 1));
                err = up ? den - R : R;
                u128 e = (lower_half && !up) ? 4 * err : 2 * err, gap = (u128)1 << q;
                ok = e < gap || (e == gap && !(m & 1));
            } else {
                /* v / 10^k = m / (10^k << -q); |d - v| = err * 2^q: reads back only when exact */
                if (POW10_BITS[k] - q > 127)
                    return 0;
                u128 den = POW10[k] << -q;
                Df = (u128)m / den;
                R = (u128)m - Df * den;
                up = R > den - R || (R == den - R && (Df & 1));
                err = up ? den - R : R;
                ok = err == 0;
            }
        }
        if (Df >= hi) {
            x++;
            continue;
        }
        if (Df < lo) {
            x--;
            continue;
        }
        *x_io = x;
        Df += up;
        if (Df == hi) {
            Df = lo;
            x++;
        }
        *D = (uint64_t)Df;
        *X = x;
        *rt = ok;
        return 1;
    }
    return 0;
}

/* Short copies are fixed-size (SLACK bytes, inlined as a few moves): every source has SLACK readable
 * bytes and the output buffer SLACK spare bytes at its end. */
#define SLACK 32

typedef struct {
    const char *text;
    Py_ssize_t len;
    char pad[SLACK]; /* the text, zero-padded, when it is at most SLACK bytes */
} Text;

static inline char *put_text(char *p, const Text *t)
{
    if (t->len <= SLACK)
        memcpy(p, t->pad, SLACK);
    else
        memcpy(p, t->text, t->len);
    return p + t->len;
}

static const char DIGITS2[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                              "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                              "8081828384858687888990919293949596979899";

/* %.<P>g of the decimal D * 10^(X - P + 1) (D has P digits), as glibc prints it. */
/* The nd digits of D written straight into the output (no bounce through a scratch buffer, whose
 * byte-wise stores a wide copy would stall on), a '.' after the first `dot` of them (dot >= nd:
 * none); returns the end. */
static inline char *put_digits(char *p, uint64_t D, int nd, int dot)
{
    int gap = dot < nd;
    char *end = p + nd + gap;
    int k = nd - 1; /* index of the digit being written, most significant is 0 */
    while (k >= 1) {
        uint64_t q = D / 100;
        unsigned r = (unsigned)(D - q * 100);
        D = q;
        p[k + (gap && k >= dot)] = DIGITS2[2 * r + 1];
        p[k - 1 + (gap && k - 1 >= dot)] = DIGITS2[2 * r];
        k -= 2;
    }
    if (k == 0)
        p[0] = (char)('0' + D);
    if (gap)
        p[dot] = '.';
    return end;
}

static char *write_g(char *p, int neg, uint64_t D, int P, int X, int *plain)
{
    int nd = P;
    while (nd > 1 && D % 10 == 0) {
        D /= 10;
        nd--;
    }
    if (neg)
        *p++ = '-';
    *plain = 0;
    if (X < -4 || X >= P) {
        p = put_digits(p, D, nd, 1);
        *p++ = 'e';
        int e = X;
        if (e < 0) {
            *p++ = '-';
            e = -e;
        } else {
            *p++ = '+';
        }
        if (e >= 100) {
            *p++ = (char)('0' + e / 100);
            e %= 100;
        }
        *p++ = (char)('0' + e / 10);
        *p++ = (char)('0' + e % 10);
    } else if (X >= 0) {
        int ip = X + 1;
        if (nd <= ip) {
            p = put_digits(p, D, nd, nd);
            memset(p, '0', SLACK);
            p += ip - nd;
            *plain = 1;
        } else {
            p = put_digits(p, D, nd, ip);
        }
    } else {
        memcpy(p, "0.00000", 8); /* "0." and up to four zeros */
        p += 2 + (-X - 1);
        p = put_digits(p, D, nd, nd);
    }
    return p;
}

typedef struct {
    int f32, shortp, longp, subnormal_long;
    Text suffix, nan, inf, ninf;
} Style;

/* The C library's own answer: snprintf("%.*g"), read back with strtof/strtod. */
static char *slow_one(char *p, double v, const Style *s, int *plain)
{
    char buf[48];
    int n = snprintf(buf, sizeof buf, "%.*g", s->shortp, v);
    int ok;
    if (s->f32) {
        ok = strtof(buf, NULL) == (float)v;
        if (ok && s->subnormal_long && v != 0 && fabs(v) < FLT_MIN)
            ok = 0;
    } else {
        ok = strtod(buf, NULL) == v;
    }
    if (!ok)
        n = snprintf(buf, sizeof buf, "%.*g", s->longp, v);
    memcpy(p, buf, n);
    *plain = memchr(buf, '.', n) == NULL && memchr(buf, 'e', n) == NULL;
    return p + n;
}

static char *format_one(char *p, double v, uint64_t bits, const Style *s)
{
    int neg, e, q, mbits, lower_half, plain, X, rt;
    uint64_t m, D;
    if (s->f32) {
        uint32_t b = (uint32_t)bits;
        neg = b >> 31;
        e = (b >> 23) & 0xff;
        m = b & 0x7fffff;
        if (e == 0xff) {
            goto special;
        }
        if (e == 0) {
            if (m == 0)
                goto zero;
            goto slow; /* subnormal */
        }
        lower_half = m == 0 && e > 1;
        m |= 1u << 23;
        q = e - 150;
        mbits = 24;
    } else {
        neg = bits >> 63;
        e = (bits >> 52) & 0x7ff;
        m = bits & 0xfffffffffffffull;
        if (e == 0x7ff)
            goto special;
        if (e == 0) {
            if (m == 0)
                goto zero;
            goto slow;
        }
        lower_half = m == 0 && e > 1;
        m |= 1ull << 52;
        q = e - 1075;
        mbits = 53;
    }
    {
        double a = fabs(v);
        int P = s->shortp, x0 = INT_MIN;
        if (!fast_digits(a, m, q, mbits, lower_half, P, &D, &X, &rt, &x0))
            goto slow;
        if (!rt) {
            P = s->longp;
            if (!fast_digits(a, m, q, mbits, lower_half, P, &D, &X, &rt, &x0))
                goto slow;
        }
        p = write_g(p, neg, D, P, X, &plain);
        goto suffix;
    }
zero:
    if (neg)
        *p++ = '-';
    *p++ = '0';
    plain = 1;
    goto suffix;
slow:
    p = slow_one(p, v, s, &plain);
suffix:
    return plain ? put_text(p, &s->suffix) : p;
special:
    return put_text(p, m != 0 ? &s->nan : neg ? &s->ninf : &s->inf);
}

static Py_ssize_t max_text(const Style *s)
{
    Py_ssize_t n = 32 + s->suffix.len; /* sign, 17 digits, '.', "0.000" or "e-308" */
    if (s->nan.len > n)
        n = s->nan.len;
    if (s->inf.len > n)
        n = s->inf.len;
    if (s->ninf.len > n)
        n = s->ninf.len;
    return n;
}

/* Format n values from the buffer; ends[i] (if given) is the end offset of value i's text.
 * No Python API: runs without the GIL. */
static Py_ssize_t format_all(char *out, const void *data, Py_ssize_t n, const Style *s, const Text *sep,
                             Py_ssize_t *ends)
{
    char *p = out;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i && sep)
            p = put_text(p, sep);
        if (s->f32) {
            float f;
            uint32_t b;
            memcpy(&f, (const char *)data + 4 * i, 4);
            memcpy(&b, &f, 4);
            p = format_one(p, (double)f, b, s);
        } else {
            double d;
            uint64_t b;
            memcpy(&d, (const char *)data + 8 * i, 8);
            memcpy(&b, &d, 8);
            p = format_one(p, d, b, s);
        }
        if (ends)
            ends[i] = p - out;
    }
    return p - out;
}

static int ascii_arg(PyObject *o, Text *t, const char *what)
{
    if (!PyUnicode_Check(o) || !PyUnicode_IS_ASCII(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an ASCII str", what);
        return 0;
    }
    t->text = PyUnicode_AsUTF8AndSize(o, &t->len);
    if (!t->text)
        return 0;
    memset(t->pad, 0, SLACK);
    if (t->len <= SLACK)
        memcpy(t->pad, t->text, t->len);
    return 1;
}

/* (buffer, f32, short, long, suffix, nan, inf, ninf, subnormal_long) -> view + style */
static int parse_common(PyObject *const *args, Py_buffer *view, Style *s)
{
    int f32 = PyObject_IsTrue(args[1]);
    if (f32 < 0)
        return 0;
    s->f32 = f32;
    s->shortp = (int)PyLong_AsLong(args[2]);
    s->longp = (int)PyLong_AsLong(args[3]);
    if (PyErr_Occurred())
        return 0;
    /* at least 6 digits: the quotients then have 4+ digits, which bounds the shifts in fast_digits */
    if (s->shortp < 6 || s->shortp > 17 || s->longp < 6 || s->longp > 17) {
        PyErr_SetString(PyExc_ValueError, "digits must be 6..17");
        return 0;
    }
    if (!ascii_arg(args[4], &s->suffix, "suffix") || !ascii_arg(args[5], &s->nan, "nan") ||
        !ascii_arg(args[6], &s->inf, "inf") || !ascii_arg(args[7], &s->ninf, "ninf"))
        return 0;
    s->subnormal_long = PyObject_IsTrue(args[8]);
    if (s->subnormal_long < 0)
        return 0;
    if (PyObject_GetBuffer(args[0], view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return 0;
    const char *fmt = view->format ? view->format : "B";
#if PY_BIG_ENDIAN
    const char native = '>';
#else
    const char native = '<';
#endif
    if (*fmt == '@' || *fmt == '=' || *fmt == native)
        fmt++; /* native byte order only */
    char want = s->f32 ? 'f' : 'd';
    if (fmt[0] != want || fmt[1] != '\0' || view->itemsize != (s->f32 ? 4 : 8)) {
        PyErr_Format(PyExc_TypeError, "expected a contiguous native %s buffer, got format '%s'",
                     s->f32 ? "float32" : "float64", view->format ? view->format : "B");
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(join_doc, "join(buffer, f32, short, long, suffix, nan, inf, ninf, subnormal_long, sep) -> str\n\n"
                       "The text of every value of a contiguous float32 (f32) or float64 buffer, joined with sep.");

/* The text written into ``out`` (ASCII, ``len`` bytes) as a str; ``out`` is freed. */
static PyObject *ascii_result(char *out, Py_ssize_t len)
{
    PyObject *res = PyUnicode_New(len, 127);
    if (res)
        memcpy(PyUnicode_DATA(res), out, len);
    PyMem_RawFree(out);
    return res;
}

static PyObject *ft_join(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Style s;
    Text sep;
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "join takes 10 arguments");
        return NULL;
    }
    if (!ascii_arg(args[9], &sep, "sep") || !parse_common(args, &view, &s))
        return NULL;
    Py_ssize_t n = view.len / view.itemsize;
    if (n == 0) {
        PyBuffer_Release(&view);
        return PyUnicode_New(0, 127);
    }
    Py_ssize_t cap = n * (max_text(&s) + sep.len) + SLACK;
    char *out = PyMem_RawMalloc(cap);
    if (!out) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    Py_ssize_t len;
    Py_BEGIN_ALLOW_THREADS
    len = format_all(out, view.buf, n, &s, &sep, NULL);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return ascii_result(out, len);
}

PyDoc_STRVAR(tokens_doc, "tokens(buffer, f32, short, long, suffix, nan, inf, ninf, subnormal_long) -> list[str]\n\n"
                         "The text of every value of a contiguous float32 (f32) or float64 buffer.");

static PyObject *ft_tokens(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Style s;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "tokens takes 9 arguments");
        return NULL;
    }
    if (!parse_common(args, &view, &s))
        return NULL;
    Py_ssize_t n = view.len / view.itemsize;
    char *out = PyMem_RawMalloc(n * max_text(&s) + SLACK);
    Py_ssize_t *ends = PyMem_RawMalloc((n + 1) * sizeof(Py_ssize_t));
    PyObject *list = NULL;
    if (!out || !ends) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    format_all(out, view.buf, n, &s, NULL, ends);
    Py_END_ALLOW_THREADS
    list = PyList_New(n);
    if (!list)
        goto done;
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyUnicode_New(ends[i] - start, 127);
        if (!t) {
            Py_CLEAR(list);
            goto done;
        }
        memcpy(PyUnicode_DATA(t), out + start, ends[i] - start);
        PyList_SET_ITEM(list, i, t);
        start = ends[i];
    }
done:
    PyBuffer_Release(&view);
    PyMem_RawFree(out);
    PyMem_RawFree(ends);
    return list;
}

#define MAX_RANK 64

PyDoc_STRVAR(nested_doc,
             "nested(buffer, f32, short, long, suffix, nan, inf, ninf, subnormal_long, shape, opens, seps, closes) -> str\n\n"
             "The values of a contiguous float32 (f32) or float64 buffer laid out as nested arrays of the given shape\n"
             "(no zero dimension): level i opens with opens[i], separates its items with seps[i], closes with closes[i].");

static PyObject *ft_nested(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Style s;
    Text open[MAX_RANK], sep[MAX_RANK], close[MAX_RANK];
    Py_ssize_t shape[MAX_RANK], idx[MAX_RANK];
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "nested takes 13 arguments");
        return NULL;
    }
    PyObject *const *lists = args + 10;
    if (!PyTuple_Check(args[9]) || !PyTuple_Check(lists[0]) || !PyTuple_Check(lists[1]) || !PyTuple_Check(lists[2])) {
        PyErr_SetString(PyExc_TypeError, "shape, opens, seps and closes must be tuples");
        return NULL;
    }
    Py_ssize_t rank = PyTuple_GET_SIZE(args[9]), total = 1, extra = 0;
    if (rank < 1 || rank > MAX_RANK || PyTuple_GET_SIZE(lists[0]) != rank || PyTuple_GET_SIZE(lists[1]) != rank ||
        PyTuple_GET_SIZE(lists[2]) != rank) {
        PyErr_SetString(PyExc_ValueError, "shape, opens, seps and closes must have one item per level (1..64)");
        return NULL;
    }
    for (Py_ssize_t lv = 0; lv < rank; lv++) {
        shape[lv] = PyLong_AsSsize_t(PyTuple_GET_ITEM(args[9], lv));
        if (shape[lv] == -1 && PyErr_Occurred())
            return NULL;
        if (shape[lv] < 1) {
            PyErr_SetString(PyExc_ValueError, "every dimension must be at least 1");
            return NULL;
        }
        total *= shape[lv];
        idx[lv] = 0;
        if (!ascii_arg(PyTuple_GET_ITEM(lists[0], lv), &open[lv], "opens") ||
            !ascii_arg(PyTuple_GET_ITEM(lists[1], lv), &sep[lv], "seps") ||
            !ascii_arg(PyTuple_GET_ITEM(lists[2], lv), &close[lv], "closes"))
            return NULL;
        extra += open[lv].len + sep[lv].len + close[lv].len;
    }
    if (!parse_common(args, &view, &s))
        return NULL;
    Py_ssize_t n = view.len / view.itemsize;
    if (n != total) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the buffer does not hold prod(shape) values");
        return NULL;
    }
    /* before each value at most one separator, every close and every open */
    Py_ssize_t cap = n * (max_text(&s) + extra) + extra + SLACK;
    char *out = PyMem_RawMalloc(cap);
    if (!out) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    char *p = out;
    const int f32 = s.f32;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t lv = 0; lv < rank; lv++)
        p = put_text(p, &open[lv]);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i) {
            Py_ssize_t lv = rank - 1;
            while (++idx[lv] == shape[lv]) {
                idx[lv] = 0;
                lv--;
            }
            for (Py_ssize_t c = rank - 1; c > lv; c--)
                p = put_text(p, &close[c]);
            p = put_text(p, &sep[lv]);
            for (Py_ssize_t o = lv + 1; o < rank; o++)
                p = put_text(p, &open[o]);
        }
        uint64_t b;
        if (f32) {
            float f;
            uint32_t b32;
            memcpy(&f, (const char *)view.buf + 4 * i, 4);
            memcpy(&b32, &f, 4);
            b = b32;
            p = format_one(p, (double)f, b, &s);
        } else {
            double d;
            memcpy(&d, (const char *)view.buf + 8 * i, 8);
            memcpy(&b, &d, 8);
            p = format_one(p, d, b, &s);
        }
    }
    for (Py_ssize_t lv = rank - 1; lv >= 0; lv--)
        p = put_text(p, &close[lv]);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    Py_ssize_t len = p - out;
    return ascii_result(out, len);
}

PyDoc_STRVAR(has_bool_doc, "has_bool_token(buffer) -> bool\n\n"
                           "Whether the bytes hold 'true' or 'false' (b'true' in b or b'false' in b), by memchr (memmem where the first letter is common).");

/* memchr for the first letter (numbers never hold 't' or 'f': a body of numbers is skipped at
 * memory speed); where that letter is common (text), glibc's memmem, linear in the worst case. */
static int holds(const char *p, Py_ssize_t n, const char *word, size_t wlen)
{
    const char *end = p + n;
    for (int misses = 0; misses < 256 && (size_t)(end - p) >= wlen; misses++) {
        const char *c = memchr(p, word[0], (size_t)(end - p) - wlen + 1);
        if (!c)
            return 0;
        if (memcmp(c + 1, word + 1, wlen - 1) == 0)
            return 1;
        p = c + 1;
    }
    return (size_t)(end - p) >= wlen && memmem(p, (size_t)(end - p), word, wlen) != NULL;
}

static PyObject *ft_has_bool_token(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int found = holds(view.buf, view.len, "true", 4) || holds(view.buf, view.len, "false", 5);
    PyBuffer_Release(&view);
    return PyBool_FromLong(found);
}


/* -- dense_array: the structure of a JSON array of numbers, without parsing the numbers ------- */

PyDoc_STRVAR(dense_doc, "dense_array(buffer, start) -> (end, shape) | None\n\n"
                        "The JSON array at buffer[start] ('['), when it holds only numbers nested as a dense\n"
                        "array: every level non-empty, every array of a level as long as the first, every\n"
                        "number at the last level, at most 32 levels, no integer of more than 15 digits.\n"
                        "end: the offset just past its ']'. The numbers' own syntax is not checked. None\n"
                        "for anything else (true/false/null, strings, objects, ragged or empty arrays).");

#define DENSE_MAX_RANK 32

/* the characters of a JSON number: 1 digit, 2 '.' 'e' 'E' (not an integer), 3 a sign */
static const unsigned char num_class[256] = {
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,
    ['.'] = 2, ['e'] = 2, ['E'] = 2, ['+'] = 3, ['-'] = 3,
};

static PyObject *ft_dense_array(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "dense_array(buffer, start)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t n = view.len, i = start;
    Py_ssize_t shape[DENSE_MAX_RANK], count[DENSE_MAX_RANK];
    int depth = 0, rank = -1, ok = 0;
    enum { VALUE, AFTER } want = VALUE; /* a value (or ']' right after '['), else ',' or ']' */
    int just_opened = 0;
    for (int d = 0; d < DENSE_MAX_RANK; d++)
        shape[d] = -1;
    if (start < 0 || start >= n || b[start] != '[')
        goto done;
    Py_BEGIN_ALLOW_THREADS
    while (i < n) {
        unsigned char c = b[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            i++;
            continue;
        }
        if (c == '[') {
            if (want != VALUE || depth == DENSE_MAX_RANK || (rank >= 0 && depth >= rank))
                break;
            count[depth++] = 0;
            just_opened = 1;
            i++;
            continue;
        }
        if (c == ']') {
            if (want == VALUE && !just_opened)
                break; /* "[1,]" */
            Py_ssize_t items = count[depth - 1];
            if (items == 0) /* an empty level */
                break;
            if (shape[depth - 1] < 0)
                shape[depth - 1] = items;
            else if (shape[depth - 1] != items)
                break;
            depth--;
            i++;
            if (depth == 0) {
                ok = 1;
                break;
            }
            count[depth - 1]++;
            want = AFTER;
            just_opened = 0;
            continue;
        }
        if (c == ',') {
            if (want != AFTER)
                break;
            want = VALUE;
            just_opened = 0;
            i++;
            continue;
        }
        if ((c >= '0' && c <= '9') || c == '-') {
            if (want != VALUE || (rank >= 0 && depth != rank))
                break;
            Py_ssize_t digits = 0;
            int integer = 1;
            for (unsigned char k; i < n && (k = num_class[b[i]]) != 0; i++) {
                digits += k == 1;
                integer &= k != 2;
            }
            if (integer && digits > 15)
                break; /* past 2**53 the cast to float32 may round twice: the general path decides */
            if (rank < 0)
                rank = depth; /* the first number sits at the last level: its depth is the rank */
            count[depth - 1]++;
            want = AFTER;
            just_opened = 0;
            continue;
        }
        break; /* any other token: true, false, null, a string, an object */
    }
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&view);
    if (!ok || rank < 1)
        Py_RETURN_NONE;
    PyObject *dims = PyTuple_New(rank);
    if (!dims)
        return NULL;
    for (int d = 0; d < rank; d++)
        PyTuple_SET_ITEM(dims, d, PyLong_FromSsize_t(shape[d]));
    return Py_BuildValue("(nN)", i, dims);
}

/* -- rapidjson: the text rapidjson's Writer::Double writes (Triton's HTTP/REST JSON) ---------------
 *
 * rapidjson 1.1.0's internal::dtoa (Grisu2 digits, then Prettify's layout with maxDecimalPlaces
 * 324), which Triton's TritonJson writer uses for every double (FP32 outputs widened to double):
 * "3.0", "0.000001", "1e-7", "100000000000000000000.0", "1e21", "1.5e300", "-0.0", and with
 * kWriteNanAndInfFlag "NaN", "Infinity", "-Infinity".  Grisu2 is not always shortest: float32 0.3
 * is "0.30000001192092898" (shortest: ...896).  1.1.0 differs from later rapidjson in one place:
 * the last digit of a number whose digits run 9 or more places past the binary point of the
 * cached power is not rounded (DigitGen's "index < 9").  tests/unit/core/rapidjson_reference.py is
 * the same algorithm in Python (the test oracle); its cached powers, computed there from exact
 * integers (round to nearest), are the table below. */

typedef struct {
    uint64_t f;
    int e;
} DiyFp;

/* 10^(-348 + 8 i) ~ RJ_POW_F[i] * 2^RJ_POW_E[i] */
static const uint64_t RJ_POW_F[87] = {
    0xfa8fd5a0081c0288ull, 0xbaaee17fa23ebf76ull, 0x8b16fb203055ac76ull,
    0xcf42894a5dce35eaull, 0x9a6bb0aa55653b2dull, 0xe61acf033d1a45dfull,
    0xab70fe17c79ac6caull, 0xff77b1fcbebcdc4full, 0xbe5691ef416bd60cull,
    0x8dd01fad907ffc3cull, 0xd3515c2831559a83ull, 0x9d71ac8fada6c9b5ull,
    0xea9c227723ee8bcbull, 0xaecc49914078536dull, 0x823c12795db6ce57ull,
    0xc21094364dfb5637ull, 0x9096ea6f3848984full, 0xd77485cb25823ac7ull,
    0xa086cfcd97bf97f4ull, 0xef340a98172aace5ull, 0xb23867fb2a35b28eull,
    0x84c8d4dfd2c63f3bull, 0xc5dd44271ad3cdbaull, 0x936b9fcebb25c996ull,
    0xdbac6c247d62a584ull, 0xa3ab66580d5fdaf6ull, 0xf3e2f893dec3f126ull,
    0xb5b5ada8aaff80b8ull, 0x87625f056c7c4a8bull, 0xc9bcff6034c13053ull,
    0x964e858c91ba2655ull, 0xdff9772470297ebdull, 0xa6dfbd9fb8e5b88full,
    0xf8a95fcf88747d94ull, 0xb94470938fa89bcfull, 0x8a08f0f8bf0f156bull,
    0xcdb02555653131b6ull, 0x993fe2c6d07b7facull, 0xe45c10c42a2b3b06ull,
    0xaa242499697392d3ull, 0xfd87b5f28300ca0eull, 0xbce5086492111aebull,
    0x8cbccc096f5088ccull, 0xd1b71758e219652cull, 0x9c40000000000000ull,
    0xe8d4a51000000000ull, 0xad78ebc5ac620000ull, 0x813f3978f8940984ull,
    0xc097ce7bc90715b3ull, 0x8f7e32ce7bea5c70ull, 0xd5d238a4abe98068ull,
    0x9f4f2726179a2245ull, 0xed63a231d4c4fb27ull, 0xb0de65388cc8ada8ull,
    0x83c7088e1aab65dbull, 0xc45d1df942711d9aull, 0x924d692ca61be758ull,
    0xda01ee641a708deaull, 0xa26da3999aef774aull, 0xf209787bb47d6b85ull,
    0xb454e4a179dd1877ull, 0x865b86925b9bc5c2ull, 0xc83553c5c8965d3dull,
    0x952ab45cfa97a0b3ull, 0xde469fbd99a05fe3ull, 0xa59bc234db398c25ull,
    0xf6c69a72a3989f5cull, 0xb7dcbf5354e9beceull, 0x88fcf317f22241e2ull,
    0xcc20ce9bd35c78a5ull, 0x98165af37b2153dfull, 0xe2a0b5dc971f303aull,
    0xa8d9d1535ce3b396ull, 0xfb9b7cd9a4a7443cull, 0xbb764c4ca7a44410ull,
    0x8bab8eefb6409c1aull, 0xd01fef10a657842cull, 0x9b10a4e5e9913129ull,
    0xe7109bfba19c0c9dull, 0xac2820d9623bf429ull, 0x80444b5e7aa7cf85ull,
    0xbf21e44003acdd2dull, 0x8e679c2f5e44ff8full, 0xd433179d9c8cb841ull,
    0x9e19db92b4e31ba9ull, 0xeb96bf6ebadf77d9ull, 0xaf87023b9bf0ee6bull,
};
static const int16_t RJ_POW_E[87] = {
    -1220, -1193, -1166, -1140, -1113, -1087, -1060, -1034, -1007, -980,
    -954, -927, -901, -874, -847, -821, -794, -768, -741, -715,
    -688, -661, -635, -608, -582, -555, -529, -502, -475, -449,
    -422, -396, -369, -343, -316, -289, -263, -236, -210, -183,
    -157, -130, -103, -77, -50, -24, 3, 30, 56, 83,
    109, 136, 162, 189, 216, 242, 269, 295, 322, 348,
    375, 402, 428, 455, 481, 508, 534, 561, 588, 614,
    641, 667, 694, 720, 747, 774, 800, 827, 853, 880,
    907, 933, 960, 986, 1013, 1039, 1066,
};

static const uint32_t RJ_POW10[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000};

#define RJ_HIDDEN (1ull << 52)

static inline DiyFp rj_mul(DiyFp a, DiyFp b)
{
    u128 p = (u128)a.f * b.f;
    uint64_t h = (uint64_t)(p >> 64), l = (uint64_t)p;
    if (l & (1ull << 63)) /* rounding */
        h++;
    return (DiyFp){h, a.e + b.e + 64};
}

static inline void rj_round(char *buf, int len, uint64_t delta, uint64_t rest, uint64_t ten_kappa, uint64_t wp_w)
{
    while (rest < wp_w && delta - rest >= ten_kappa && (rest + ten_kappa < wp_w || wp_w - rest > rest + ten_kappa - wp_w)) {
        buf[len - 1]--;
        rest += ten_kappa;
    }
}

static inline int rj_count_digits(uint32_t n)
{
    if (n < 10) return 1;
    if (n < 100) return 2;
    if (n < 1000) return 3;
    if (n < 10000) return 4;
    if (n < 100000) return 5;
    if (n < 1000000) return 6;
    if (n < 10000000) return 7;
    if (n < 100000000) return 8;
    return 9;
}

/* The digits of W (within delta of Mp), written at buf; returns their count, adjusts *K. */
static inline int rj_digit_gen(DiyFp W, DiyFp Mp, uint64_t delta, char *buf, int *K)
{
    const int shift = -Mp.e; /* 32..60: the cached power puts Mp's exponent in [-60, -32] */
    const uint64_t one = 1ull << shift;
    const uint64_t wp_w = Mp.f - W.f;
    uint32_t p1 = (uint32_t)(Mp.f >> shift);
    uint64_t p2 = Mp.f & (one - 1);
    int kappa = rj_count_digits(p1), len = 0;
    if (p2 > delta && p1 != 0 && p1 < 1000000000) {
        /* no digit of p1 can end the digits (what remains is at least p2 > delta): all of them at
         * once, the same digits and the same kappa (0) as the loop below gives */
        put_digits(buf, p1, kappa, kappa);
        len = kappa;
        kappa = 0;
    }
    while (kappa > 0) {
        uint32_t d;
        switch (kappa) { /* constant divisors: multiplications, not divisions */
        case 9: d = p1 / 100000000; p1 %= 100000000; break;
        case 8: d = p1 / 10000000; p1 %= 10000000; break;
        case 7: d = p1 / 1000000; p1 %= 1000000; break;
        case 6: d = p1 / 100000; p1 %= 100000; break;
        case 5: d = p1 / 10000; p1 %= 10000; break;
        case 4: d = p1 / 1000; p1 %= 1000; break;
        case 3: d = p1 / 100; p1 %= 100; break;
        case 2: d = p1 / 10; p1 %= 10; break;
        default: d = p1; p1 = 0; break;
        }
        if (d || len)
            buf[len++] = (char)('0' + d);
        kappa--;
        uint64_t tmp = ((uint64_t)p1 << shift) + p2;
        if (tmp <= delta) {
            *K += kappa;
            rj_round(buf, len, delta, tmp, (uint64_t)RJ_POW10[kappa] << shift, wp_w);
            return len;
        }
    }
    for (;;) {
        p2 *= 10;
        delta *= 10;
        char d = (char)(p2 >> shift);
        if (d || len)
            buf[len++] = (char)('0' + d);
        p2 &= one - 1;
        kappa--;
        if (p2 < delta) {
            *K += kappa;
            int index = -kappa;
            rj_round(buf, len, delta, p2, one, wp_w * (index < 9 ? RJ_POW10[index] : 0)); /* 1.1.0: 9 */
            return len;
        }
    }
}

/* Grisu2 of a positive finite double: v ~ digits * 10^K; returns the number of digits. */
static inline int rj_grisu2(uint64_t bits, char *buf, int *K)
{
    int biased = (int)((bits >> 52) & 0x7ff);
    uint64_t sig = bits & (RJ_HIDDEN - 1);
    DiyFp v = biased ? (DiyFp){sig + RJ_HIDDEN, biased - 1075} : (DiyFp){sig, -1074};
    DiyFp plus = {(v.f << 1) + 1, v.e - 1};
    while (!(plus.f & (RJ_HIDDEN << 1))) {
        plus.f <<= 1;
        plus.e--;
    }
    plus.f <<= 10; /* 64 - 52 - 2 */
    plus.e -= 10;
    DiyFp minus = v.f == RJ_HIDDEN ? (DiyFp){(v.f << 2) - 1, v.e - 2} : (DiyFp){(v.f << 1) - 1, v.e - 1};
    minus.f <<= minus.e - plus.e;
    minus.e = plus.e;
    double dk = (-61 - plus.e) * 0.30102999566398114 + 347; /* rapidjson's ceiling, as it computes it */
    int k = (int)dk;
    if (dk - k > 0.0)
        k++;
    unsigned index = (unsigned)((k >> 3) + 1);
    *K = -(-348 + (int)(index << 3));
    DiyFp c = {RJ_POW_F[index], RJ_POW_E[index]};
    int s = __builtin_clzll(v.f);
    DiyFp W = rj_mul((DiyFp){v.f << s, v.e - s}, c);
    DiyFp Wp = rj_mul(plus, c), Wm = rj_mul(minus, c);
    Wm.f++;
    Wp.f--;
    return rj_digit_gen(W, Wp, Wp.f - Wm.f, buf, K);
}

static inline char *rj_exponent(char *p, int K)
{
    if (K < 0) {
        *p++ = '-';
        K = -K;
    }
    if (K >= 100) {
        *p++ = (char)('0' + K / 100);
        K %= 100;
        *p++ = DIGITS2[2 * K];
        *p++ = DIGITS2[2 * K + 1];
    } else if (K >= 10) {
        *p++ = DIGITS2[2 * K];
        *p++ = DIGITS2[2 * K + 1];
    } else {
        *p++ = (char)('0' + K);
    }
    return p;
}

#define RJ_MAX_TEXT 32 /* "-0.00000" and 17 digits, or 21 digits and ".0", or "-1.2345678901234567e-308" */

/* rapidjson's Writer::Double text of the double with these bits; returns the end. */
static char *rj_double(char *p, uint64_t bits)
{
    if (((bits >> 52) & 0x7ff) == 0x7ff) {
        if (bits & (RJ_HIDDEN - 1)) {
            memcpy(p, "NaN", 3);
            return p + 3;
        }
        if (bits >> 63)
            *p++ = '-';
        memcpy(p, "Infinity", 8);
        return p + 8;
    }
    if (bits >> 63)
        *p++ = '-';
    bits &= ~(1ull << 63);
    if (bits == 0) {
        memcpy(p, "0.0", 3);
        return p + 3;
    }
    char d[24];
    int K;
    int length = rj_grisu2(bits, d, &K);
    int kk = length + K; /* 10^(kk-1) <= v < 10^kk */
    if (K >= 0 && kk <= 21) { /* 1234e7 -> 12340000000.0 */
        memcpy(p, d, length);
        p += length;
        for (int i = length; i < kk; i++)
            *p++ = '0';
        *p++ = '.';
        *p++ = '0';
    } else if (0 < kk && kk <= 21) { /* 1234e-2 -> 12.34 (maxDecimalPlaces 324: never cut) */
        memcpy(p, d, kk);
        p += kk;
        *p++ = '.';
        memcpy(p, d + kk, length - kk);
        p += length - kk;
    } else if (-6 < kk && kk <= 0) { /* 1234e-6 -> 0.001234 */
        *p++ = '0';
        *p++ = '.';
        for (int i = 0; i < -kk; i++)
            *p++ = '0';
        memcpy(p, d, length);
        p += length;
    } else if (kk < -324) { /* below maxDecimalPlaces (not reached by a double's digits) */
        memcpy(p, "0.0", 3);
        p += 3;
    } else if (length == 1) { /* 1e30 */
        *p++ = d[0];
        *p++ = 'e';
        p = rj_exponent(p, kk - 1);
    } else { /* 1234e30 -> 1.234e33 */
        *p++ = d[0];
        *p++ = '.';
        memcpy(p, d + 1, length - 1);
        p += length - 1;
        *p++ = 'e';
        p = rj_exponent(p, kk - 1);
    }
    return p;
}

/* Every value followed by ','; returns the end.  No Python API: runs without the GIL. */
static char *rj_all(char *p, const char *data, Py_ssize_t n, int f32)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t b;
        if (f32) {
            float f;
            memcpy(&f, data + 4 * i, 4);
            double v = f;
            memcpy(&b, &v, 8);
        } else {
            memcpy(&b, data + 8 * i, 8);
        }
        p = rj_double(p, b);
        *p++ = ',';
    }
    return p;
}

PyDoc_STRVAR(rj_array_doc, "rapidjson_array(buffer, f32) -> bytes\n\n"
                           "'[v,...]': every value of the buffer (native float32 when f32, else float64; any\n"
                           "buffer whose length is a multiple of the size) as rapidjson's Writer::Double writes it,\n"
                           "float32 widened to double.");

static PyObject *ft_rapidjson_array(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "rapidjson_array(buffer, f32)");
        return NULL;
    }
    int f32 = PyObject_IsTrue(args[1]);
    if (f32 < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t size = f32 ? 4 : 8, n = view.len / size;
    if (view.len % size) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the buffer's length is not a multiple of the value size");
        return NULL;
    }
    PyObject *res = PyBytes_FromStringAndSize(NULL, n * (RJ_MAX_TEXT + 1) + 2);
    if (!res) {
        PyBuffer_Release(&view);
        return NULL;
    }
    char *out = PyBytes_AS_STRING(res), *p = out;
    *p++ = '[';
    if (n > 256) { /* a large array: without the GIL */
        Py_BEGIN_ALLOW_THREADS
        p = rj_all(p, view.buf, n, f32);
        Py_END_ALLOW_THREADS
    } else {
        p = rj_all(p, view.buf, n, f32);
    }
    if (n)
        p--; /* the last ',' */
    *p++ = ']';
    PyBuffer_Release(&view);
    if (_PyBytes_Resize(&res, p - out) < 0)
        return NULL;
    return res;
}

PyDoc_STRVAR(rj_double_doc, "rapidjson_double(x) -> str\n\nrapidjson's Writer::Double text of the float x.");

static PyObject *ft_rapidjson_double(PyObject *self, PyObject *arg)
{
    double v = PyFloat_AsDouble(arg);
    if (v == -1.0 && PyErr_Occurred())
        return NULL;
    char buf[RJ_MAX_TEXT];
    uint64_t b;
    memcpy(&b, &v, 8);
    char *end = rj_double(buf, b);
    return PyUnicode_FromStringAndSize(buf, end - buf);
}

static PyMethodDef methods[] = {
    {"join", (PyCFunction)(void (*)(void))ft_join, METH_FASTCALL, join_doc},
    {"tokens", (PyCFunction)(void (*)(void))ft_tokens, METH_FASTCALL, tokens_doc},
    {"nested", (PyCFunction)(void (*)(void))ft_nested, METH_FASTCALL, nested_doc},
    {"has_bool_token", ft_has_bool_token, METH_O, has_bool_doc},
    {"dense_array", (PyCFunction)(void (*)(void))ft_dense_array, METH_FASTCALL, dense_doc},
    {"rapidjson_array", (PyCFunction)(void (*)(void))ft_rapidjson_array, METH_FASTCALL, rj_array_doc},
    {"rapidjson_double", ft_rapidjson_double, METH_O, rj_double_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gateway.core._floattext",
    "printf-style float text (%g, then more digits when that does not round-trip) for whole buffers, and "
    "rapidjson's Writer::Double text (Grisu2).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__floattext(void)
{
    init_tables();
    return PyModule_Create(&module);
}
