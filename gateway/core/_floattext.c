/* printf-style float text for whole float32/float64 buffers, at compiled speed.
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

static PyMethodDef methods[] = {
    {"join", (PyCFunction)(void (*)(void))ft_join, METH_FASTCALL, join_doc},
    {"tokens", (PyCFunction)(void (*)(void))ft_tokens, METH_FASTCALL, tokens_doc},
    {"nested", (PyCFunction)(void (*)(void))ft_nested, METH_FASTCALL, nested_doc},
    {"has_bool_token", ft_has_bool_token, METH_O, has_bool_doc},
    {"dense_array", (PyCFunction)(void (*)(void))ft_dense_array, METH_FASTCALL, dense_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gateway.core._floattext",
    "printf-style float text (%g, then more digits when that does not round-trip) for whole buffers.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__floattext(void)
{
    init_tables();
    return PyModule_Create(&module);
}
