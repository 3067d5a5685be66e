/*
 * rmqfs: the compiled core of the columnar decoder (engine/read/columnar.py).
 *
 * rmq_decode decodes the common CommitLog record (V1 magic, IPv4 hosts, plain body, no inner
 * batch; engine/format/message.py) in one pass per record, straight into Arrow column
 * buffers: the checks against the record's ConsumeQueue unit, the walk of its variable part,
 * the body CRC-32 (carry-less multiplication where the CPU has it), the properties split of
 * MessageDecoder.string2messageProperties, the numeric fields, msgId and host texts. The
 * JSON lines of messages.jsonl come from rmq_json_lines; rmq_crc32 and rmq_utf8_check are the
 * primitives the decoder is built from, exported for the tests. The store's put path
 * (engine/service/putmessage.py) encodes and places a batch of records with rmq_put and writes
 * IndexFile items, chains and header into the file's mapping with rmq_index_put_mapped. Every
 * function works on positions the caller has already checked against the mapping's length;
 * none allocates, none keeps a pointer after it returns, none calls back into Python (cffi
 * releases the GIL around each call). The record layout itself is not here: the caller passes
 * field offsets and widths from engine/format/message.py's field table.
 *
 * Built by the build backend as the extension module engine.read._kernel_cffi (cffi,
 * engine/read/_kernel_build.py; `pip install`, `pip wheel`, `make kernel`). What the Python
 * side uses is declared in _kernel.h, which the compiler checks cffi's cdef against.
 */
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include "_kernel.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define BE16(v) (v)
#define BE32(v) (v)
#define BE64(v) (v)
#else
#define BE16(v) __builtin_bswap16(v)
#define BE32(v) __builtin_bswap32(v)
#define BE64(v) __builtin_bswap64(v)
#endif

#define PREFETCH_AHEAD 8

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define RMQ_CLMUL 1
/*
 * CRC-32/IEEE of len bytes (len >= 64, a multiple of 16) by carry-less multiplication folding
 * (Gopal et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", Intel 2009;
 * the bit-reflected constants of its appendix). crc is the running value, not inverted.
 */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_clmul(const uint8_t *buf,
                                                                     size_t len, uint32_t crc)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i mask32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)~crc));
    buf += 64;
    len -= 64;
    while (len >= 64) { /* four lanes of 128 bits, folded 512 bits ahead */
        __m128i x5 = _mm_clmulepi64_si128(x1, k1k2, 0x00);
        __m128i x6 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
        __m128i x7 = _mm_clmulepi64_si128(x3, k1k2, 0x00);
        __m128i x8 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k1k2, 0x11);
        x2 = _mm_clmulepi64_si128(x2, k1k2, 0x11);
        x3 = _mm_clmulepi64_si128(x3, k1k2, 0x11);
        x4 = _mm_clmulepi64_si128(x4, k1k2, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(buf + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(buf + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(buf + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(buf + 0x30)));
        buf += 64;
        len -= 64;
    }
    /* the four lanes into one */
    __m128i x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x2), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x3), x5);
    x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), x4), x5);
    while (len >= 16) { /* what is left, 128 bits at a time */
        x5 = _mm_clmulepi64_si128(x1, k3k4, 0x00);
        x1 = _mm_clmulepi64_si128(x1, k3k4, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, _mm_loadu_si128((const __m128i *)buf)), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 bits to 64 */
    x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, mask32);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, k5k0, 0x00), x2);
    /* Barrett reduction to 32 bits */
    x2 = _mm_and_si128(x1, mask32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x10);
    x2 = _mm_and_si128(x2, mask32);
    x2 = _mm_clmulepi64_si128(x2, poly, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return ~(uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

/* Whether the CPU folds by carry-less multiplication (crc32_clmul may run). */
static int have_clmul(void)
{
#ifdef RMQ_CLMUL
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#else
    return 0;
#endif
}

/* CRC-32/IEEE (zlib's crc32, what UtilAll.crc32 computes) of l bytes at p: by carry-less
 * multiplication where clmul (the first multiple of 16 bytes of a piece of 64 bytes or more),
 * zlib for the rest. */
static inline uint32_t crc32_piece(const uint8_t *p, size_t l, int clmul)
{
    uint32_t crc = 0;
#ifdef RMQ_CLMUL
    if (clmul && l >= 64) {
        size_t chunk = l & ~(size_t)15;
        crc = crc32_clmul(p, chunk, 0);
        p += chunk;
        l -= chunk;
    }
#else
    (void)clmul;
#endif
    return l ? (uint32_t)crc32_z(crc, p, (z_size_t)l) : crc;
}

/* The CRC-32 of each piece buf[start[i] : start[i] + len[i]] (crc32_piece). */
void rmq_crc32(const uint8_t *buf, const int64_t *start, const int64_t *len, int64_t n,
               uint32_t *out)
{
    const int clmul = have_clmul();
    for (int64_t i = 0; i < n; i++) {
        if (i + PREFETCH_AHEAD < n)
            __builtin_prefetch(buf + start[i + PREFETCH_AHEAD]);
        out[i] = crc32_piece(buf + start[i], (size_t)len[i], clmul);
    }
}

/* Strict UTF-8 (what Python's bytes.decode("utf-8") accepts: no overlongs, no surrogates,
 * nothing above U+10FFFF). */
static int utf8_ok(const uint8_t *s, int64_t n)
{
    int64_t i = 0;
    while (i < n) {
        /* ASCII runs, eight bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ULL)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80)
                return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n)
                return 0;
            uint8_t c1 = s[i + 1], c2 = s[i + 2];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80)
                return 0;
            if (c == 0xE0 && c1 < 0xA0)
                return 0; /* overlong */
            if (c == 0xED && c1 > 0x9F)
                return 0; /* surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n)
                return 0;
            uint8_t c1 = s[i + 1], c2 = s[i + 2], c3 = s[i + 3];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80 || (c3 & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && c1 < 0x90)
                return 0; /* overlong */
            if (c == 0xF4 && c1 > 0x8F)
                return 0; /* above U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* 1 when every piece is strict UTF-8; else 0 and *first_bad = the first piece that is not. */
int rmq_utf8_check(const uint8_t *buf, const int64_t *start, const int64_t *len, int64_t n,
                   int64_t *first_bad)
{
    for (int64_t i = 0; i < n; i++) {
        if (!utf8_ok(buf + start[i], len[i])) {
            *first_bad = i;
            return 0;
        }
    }
    return 1;
}

/* ---- the decoder of the common record (engine/read/columnar.py) --------------------------- */

static inline uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return BE32(v);
}

static inline uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return BE64(v);
}

/* The walk of CommitLog records by TOTALSIZE (engine.format.commitlog.walk_segment's rules, in
 * its order: a header cut short, the blank magic, a zero header, another magic or a size <= 0,
 * a record running past len). Reads only buf[0..len); writes at most cap entries. */
int64_t rmq_walk(const uint8_t *buf, int64_t len, uint32_t magic_v1, uint32_t magic_v2,
                 uint32_t magic_blank, int64_t *starts, int64_t *sizes, int64_t cap,
                 int64_t *end, int32_t *kind)
{
    int64_t pos = 0, n = 0;
    for (;;) {
        if (pos + 8 > len) {
            *kind = pos < len ? RMQ_WALK_TORN : RMQ_WALK_END;
            break;
        }
        const int32_t total = (int32_t)rd32(buf + pos);
        const uint32_t magic = rd32(buf + pos + 4);
        if (magic == magic_blank) {
            *kind = RMQ_WALK_BLANK;
            break;
        }
        if (total == 0 && magic == 0) {
            *kind = RMQ_WALK_ZEROS;
            break;
        }
        if ((magic != magic_v1 && magic != magic_v2) || total <= 0) {
            *kind = RMQ_WALK_NOT_RECORD;
            break;
        }
        if (pos + total > len) {
            *kind = RMQ_WALK_PAST_END;
            break;
        }
        if (n >= cap) {
            *kind = RMQ_WALK_FULL;
            break;
        }
        starts[n] = pos;
        sizes[n] = total;
        n++;
        pos += total;
    }
    *end = pos;
    return n;
}

/* The DLedger entry walk (see _kernel.h): one step per entry, as scan_raw's entry_step and
 * record_step, stopping where scan_raw would say something (a filler, damage, the end). */
int64_t rmq_walk_entries(const uint8_t *buf, int64_t len, int64_t base, int64_t committed,
                         const int32_t *layout, uint32_t magic_v1, uint32_t magic_v2,
                         int64_t *state, int64_t *starts, int64_t *sizes, int64_t *entries,
                         int64_t cap, int64_t *end, int32_t *kind)
{
    const int64_t hs = layout[0];
    const int32_t at_size = layout[1], at_index = layout[2], at_term = layout[3];
    const int32_t at_pos = layout[4], at_body = layout[5];
    const int32_t entry_magic = layout[6], filler_magic = layout[7];
    const int64_t min_entry = hs + 8; /* a header and a record's TOTALSIZE and MAGICCODE */
    int64_t pos = 0, n = 0, last_index = state[0], last_term = state[1];
    if (hs < 8 || at_size < 0 || at_size > hs - 4 || at_index < 0 || at_index > hs - 8 ||
        at_term < 0 || at_term > hs - 8 || at_pos < 0 || at_pos > hs - 8 || at_body < 0 ||
        at_body > hs - 4) { /* a layout whose fields lie outside its header: nothing read */
        *kind = RMQ_WALK_DAMAGED;
        *end = 0;
        return 0;
    }
    for (;;) {
        if (pos + 8 > len) {
            *kind = pos < len ? RMQ_WALK_TORN : RMQ_WALK_END;
            break;
        }
        const int32_t emagic = (int32_t)rd32(buf + pos);
        const int32_t esize = (int32_t)rd32(buf + pos + at_size);
        if (emagic == filler_magic) {
            *kind = RMQ_WALK_FILLER;
            break;
        }
        if (emagic == 0 && esize == 0) {
            *kind = RMQ_WALK_ZEROS;
            break;
        }
        if (pos + (esize > min_entry ? esize : min_entry) > len) {
            *kind = RMQ_WALK_PAST_END;
            break;
        }
        const int64_t index = (int64_t)rd64(buf + pos + at_index);
        const int64_t term = (int64_t)rd64(buf + pos + at_term);
        const int64_t epos = (int64_t)rd64(buf + pos + at_pos);
        const int32_t body = (int32_t)rd32(buf + pos + at_body);
        if (emagic != entry_magic || epos != base + pos || body <= 0 || esize != body + hs ||
            (last_index != -1 && (last_index == INT64_MAX || index != last_index + 1)) ||
            term < last_term) {
            *kind = RMQ_WALK_DAMAGED;
            break;
        }
        if (index > committed) {
            *kind = RMQ_WALK_COMMITTED;
            break;
        }
        const int32_t total = (int32_t)rd32(buf + pos + hs);
        const uint32_t magic = rd32(buf + pos + hs + 4);
        if ((magic != magic_v1 && magic != magic_v2) || total != body) {
            *kind = RMQ_WALK_DAMAGED;
            break;
        }
        if (n >= cap) {
            *kind = RMQ_WALK_FULL;
            break;
        }
        starts[n] = pos + hs;
        sizes[n] = total;
        entries[2 * n] = index;
        entries[2 * n + 1] = term;
        n++;
        last_index = index;
        last_term = term;
        pos += esize;
    }
    state[0] = last_index;
    state[1] = last_term;
    *end = pos;
    return n;
}

/* The unsigned big-endian integer of width bytes (1 to 8) at p. */
static inline uint64_t load_be(const uint8_t *p, int32_t width)
{
    uint64_t v = 0;
    for (int32_t k = 0; k < width; k++)
        v = (v << 8) | p[k];
    return v;
}

static inline int put(rmq_strings *s, int64_t row, const uint8_t *src, int64_t len)
{
    if (s->len + len > s->cap)
        return 0;
    memcpy(s->data + s->len, src, (size_t)len);
    s->len += len;
    s->offsets[row + 1] = (int32_t)s->len;
    return 1;
}

/* "a.b.c.d:port" of an IPv4 host (4 address bytes, then a big-endian int32 port), as
 * message.host_to_str writes it; returns its length (at most 27). */
static int host_text(const uint8_t *h, uint8_t *o)
{
    int n = 0;
    for (int k = 0; k < 4; k++) {
        unsigned v = h[k];
        if (k)
            o[n++] = '.';
        if (v >= 100)
            o[n++] = (uint8_t)('0' + v / 100);
        if (v >= 10)
            o[n++] = (uint8_t)('0' + v / 10 % 10);
        o[n++] = (uint8_t)('0' + v % 10);
    }
    o[n++] = ':';
    int64_t port = (int32_t)rd32(h + 4);
    uint8_t digits[12];
    int d = 0;
    uint64_t u = port < 0 ? (uint64_t)(-port) : (uint64_t)port;
    do {
        digits[d++] = (uint8_t)('0' + u % 10);
        u /= 10;
    } while (u);
    if (port < 0)
        o[n++] = '-';
    while (d)
        o[n++] = digits[--d];
    return n;
}

/* A host column: the text of the last host seen is kept, since a batch usually has one. */
typedef struct {
    uint8_t raw[8];
    uint8_t text[32];
    int len;
} host_memo;

static inline int put_host(rmq_strings *s, int64_t row, const uint8_t *h, host_memo *m)
{
    if (m->len == 0 || memcmp(m->raw, h, 8) != 0) {
        memcpy(m->raw, h, 8);
        m->len = host_text(h, m->text);
    }
    return put(s, row, m->text, m->len);
}

/* Whether any byte of p[0..n) has its high bit set (not ASCII). */
static inline int any_high(const uint8_t *p, int64_t n)
{
    uint64_t acc = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        acc |= w;
    }
    uint8_t tail = 0;
    for (; i < n; i++)
        tail |= p[i];
    return ((acc & 0x8080808080808080ULL) != 0) | (tail >> 7);
}

/* The pairs of one properties area (MessageDecoder.string2messageProperties): pairs are
 * separated by pair_sep (\x02), a pair is kept when its first name_sep (\x01) lies strictly
 * inside it (a name and a value of at least one byte each), and a name seen again keeps its
 * first position and takes the later value (a HashMap's put). Names are compared only when
 * the map itself is wanted; TAGS and KEYS take their last value either way. Returns 0 when
 * the area goes record by record instead: not strict UTF-8 (the per-record decoder replaces
 * bad bytes) or more than max_pairs pairs. */
typedef struct {
    int32_t n, tag, keys;
    int32_t name_at[256], name_len[256], value_at[256], value_len[256];
} props_found;

/* The pair of a properties area that starts at p (the one rule of
 * MessageDecoder.string2messageProperties both loops below follow): where it ends (its pair_sep,
 * or alen), and *name_len, *value_len of the name and value; *value_len is 0 for a pair that is
 * not kept (no name_sep strictly inside it: an empty name or value). The value starts at
 * p + *name_len + 1. */
static inline int64_t prop_pair(const uint8_t *area, int64_t p, int64_t alen, uint8_t pair_sep,
                                uint8_t name_sep, int64_t *name_len, int64_t *value_len)
{
    const uint8_t *hit = memchr(area + p, pair_sep, (size_t)(alen - p));
    const int64_t e = hit ? hit - area : alen;
    const uint8_t *sep = memchr(area + p, name_sep, (size_t)(e - p));
    *name_len = *value_len = 0;
    if (sep) {
        const int64_t s = sep - area, nl = s - p, vl = e - s - 1;
        if (nl > 0 && vl > 0)
            *name_len = nl, *value_len = vl;
    }
    return e;
}

static int props_scan(const rmq_decode_args *a, const uint8_t *area, int64_t alen, int names,
                      props_found *f)
{
    f->n = 0;
    f->tag = f->keys = -1;
    if (any_high(area, alen) && !utf8_ok(area, alen))
        return 0;
    int64_t p = 0;
    while (p < alen) {
        int64_t nl, vl;
        const int64_t e = prop_pair(area, p, alen, a->pair_sep, a->name_sep, &nl, &vl);
        if (vl > 0) {
            int32_t j = f->n;
            if (names) {
                for (j = 0; j < f->n; j++)
                    if (f->name_len[j] == nl &&
                        memcmp(area + f->name_at[j], area + p, (size_t)nl) == 0)
                        break;
            }
            if (j == f->n) {
                if (f->n >= a->max_pairs)
                    return 0;
                f->name_at[j] = (int32_t)p;
                f->name_len[j] = (int32_t)nl;
                f->n++;
            }
            f->value_at[j] = (int32_t)(p + nl + 1);
            f->value_len[j] = (int32_t)vl;
            if (nl == a->tag_len && memcmp(area + p, a->tag_name, (size_t)nl) == 0)
                f->tag = j;
            else if (nl == a->keys_len && memcmp(area + p, a->keys_name, (size_t)nl) == 0)
                f->keys = j;
        }
        p = e + 1;
    }
    return 1;
}

static const char hex_upper[] = "0123456789ABCDEF";

/*
 * Decode the common records (V1 magic, IPv4 hosts, plain body, no inner batch, properties in
 * strict UTF-8 with at most max_pairs pairs) among n records into Arrow column buffers, in
 * one pass over each record. Every record is first checked against its unit (MAGICCODE V1
 * or V2, TOTALSIZE, PHYSICALOFFSET, QUEUEID): the first that fails stops the call (bad,
 * bad_code, bad_value; returns 1). A record that is not common, or whose lengths do not add
 * up to its TOTALSIZE, or whose topic is not the expected one (or not UTF-8), gets fast = 0
 * and no row: the caller decodes it record by record (which names what is wrong with it). A
 * common record whose BODYCRC is not the CRC-32 of its body (RMQ_CHECK_CRC; an empty body is
 * not checked, as MessageDecoder.decode) stops the call as damage. Returns 2 if an output
 * buffer was too small (the caller sized them from the records' sizes: never), else 0.
 */
int32_t rmq_decode(rmq_decode_args *a)
{
    const uint8_t *buf = a->buf;
    const int want = a->want;
    const int want_props = want & (RMQ_WANT_TAGS | RMQ_WANT_KEYS | RMQ_WANT_PROPS);
    const int clmul = have_clmul();
    host_memo born = {{0}, {0}, 0}, store = {{0}, {0}, 0};
    props_found f;
    int64_t k = 0, items = 0, pairs = 0;
    f.n = 0;
    f.tag = f.keys = -1;
    a->bad = -1;
    a->body.len = a->topics.len = a->tags.len = a->key_items.len = 0;
    a->prop_names.len = a->prop_values.len = a->born_host.len = a->store_host.len = 0;
    a->body.offsets[0] = a->topics.offsets[0] = a->tags.offsets[0] = 0;
    a->key_items.offsets[0] = a->prop_names.offsets[0] = a->prop_values.offsets[0] = 0;
    a->born_host.offsets[0] = a->store_host.offsets[0] = 0;
    a->key_lists[0] = a->prop_maps[0] = 0;
    for (int64_t i = 0; i < a->n; i++) {
        const uint8_t *r = buf + a->pos[i];
        if (i + PREFETCH_AHEAD < a->n) { /* records are scattered: ask for the next early */
            __builtin_prefetch(buf + a->pos[i + PREFETCH_AHEAD]);
            __builtin_prefetch(buf + a->pos[i + PREFETCH_AHEAD] + 64);
        }
        a->fast[i] = 0;
        const uint32_t magic = rd32(r + a->at_magic);
        const int64_t total = (int32_t)rd32(r + a->at_total);
        const int64_t phys = (int64_t)rd64(r + a->at_phys);
        int32_t code = 0;
        int64_t value = 0;
        if (magic != a->magic_v1 && magic != a->magic_v2)
            code = RMQ_BAD_MAGIC, value = magic;
        else if (total != a->size[i])
            code = RMQ_BAD_TOTAL, value = total;
        else if (phys != a->phys[i])
            code = RMQ_BAD_PHYS, value = phys;
        else if (a->queue_id >= 0 && (int32_t)rd32(r + a->at_queue) != a->queue_id)
            code = RMQ_BAD_QUEUE, value = (int32_t)rd32(r + a->at_queue);
        else if (a->qoff && (int64_t)rd64(r + a->at_qoff) != a->qoff[i])
            code = RMQ_BAD_QOFF, value = (int64_t)rd64(r + a->at_qoff);
        if (code) {
            a->bad = i, a->bad_code = code, a->bad_value = value;
            a->rows = k;
            return 1;
        }
        if (magic != a->magic_v1 || (rd32(r + a->at_sysflag) & a->rare_flags))
            continue;
        /* the variable part: body, topic length and topic, properties length and properties,
         * ending exactly at the record's end */
        const int64_t blen = (int32_t)rd32(r + a->at_body_len);
        const int64_t end = a->size[i];
        const int64_t t = a->fixed + blen;
        if (blen < 0 || t + a->tl_size + a->pl_size > end)
            continue;
        const int64_t tl = (int64_t)load_be(r + t, a->tl_size);
        const int64_t pp = t + a->tl_size + tl;
        if (tl > a->max_topic || pp + a->pl_size > end)
            continue;
        const int64_t pl = (int64_t)load_be(r + pp, a->pl_size);
        if (pl > a->max_props || pp + a->pl_size + pl != end)
            continue;
        const uint8_t *topic = r + t + a->tl_size;
        if (a->topic_len >= 0) {
            if (tl != a->topic_len || memcmp(topic, a->topic, (size_t)tl) != 0)
                continue;
        } else if ((want & RMQ_WANT_TOPIC) && any_high(topic, tl) && !utf8_ok(topic, tl)) {
            continue;
        }
        const uint8_t *area = r + pp + a->pl_size;
        if (want_props && !props_scan(a, area, pl, want & RMQ_WANT_PROPS, &f))
            continue;
        const uint8_t *body = r + a->fixed;
        if ((want & RMQ_CHECK_CRC) && blen > 0) {
            const uint32_t crc = crc32_piece(body, (size_t)blen, clmul);
            const uint32_t stored = rd32(r + a->at_crc);
            if ((crc & a->crc_mask) != stored) {
                a->bad = i, a->bad_code = RMQ_BAD_CRC, a->bad_value = (int64_t)(crc & a->crc_mask);
                a->rows = k;
                return 1;
            }
        }
        /* a common record: its row */
        a->fast[i] = 1;
        for (int32_t c = 0; c < a->nfix; c++) {
            const uint8_t *p = r + a->fix_at[c];
            if (a->fix_width[c] == 8)
                ((int64_t *)a->fix_dst[c])[k] = (int64_t)rd64(p);
            else
                ((int32_t *)a->fix_dst[c])[k] = (int32_t)rd32(p);
        }
        int ok = 1;
        if (want & RMQ_WANT_BODY)
            ok &= put(&a->body, k, body, blen);
        if ((want & RMQ_WANT_TOPIC) && a->topic_len < 0)
            ok &= put(&a->topics, k, topic, tl);
        if (want & RMQ_WANT_MSGID) { /* MessageDecoder.createMessageId: store host, offset */
            uint8_t *o = a->msg_id + 32 * k;
            const uint8_t *h = r + a->at_store_host;
            for (int b = 0; b < 8; b++) {
                o[2 * b] = (uint8_t)hex_upper[h[b] >> 4];
                o[2 * b + 1] = (uint8_t)hex_upper[h[b] & 15];
            }
            const uint8_t *q = r + a->at_phys;
            for (int b = 0; b < 8; b++) {
                o[16 + 2 * b] = (uint8_t)hex_upper[q[b] >> 4];
                o[16 + 2 * b + 1] = (uint8_t)hex_upper[q[b] & 15];
            }
        }
        if (want & RMQ_WANT_BORN_HOST)
            ok &= put_host(&a->born_host, k, r + a->at_born_host, &born);
        if (want & RMQ_WANT_STORE_HOST)
            ok &= put_host(&a->store_host, k, r + a->at_store_host, &store);
        if (want & RMQ_WANT_TAGS) {
            if (f.tag >= 0) {
                ok &= put(&a->tags, k, area + f.value_at[f.tag], f.value_len[f.tag]);
                a->tags_valid[k >> 3] |= (uint8_t)(1u << (k & 7));
            } else {
                a->tags.offsets[k + 1] = (int32_t)a->tags.len;
                a->tags_valid[k >> 3] &= (uint8_t)~(1u << (k & 7));
            }
        }
        if (want & RMQ_WANT_KEYS) { /* KEYS split on KEY_SEPARATOR, empty parts dropped */
            if (f.keys >= 0) {
                const uint8_t *v = area + f.value_at[f.keys];
                const int64_t vl = f.value_len[f.keys];
                int64_t p = 0;
                while (p < vl) {
                    const uint8_t *hit = memchr(v + p, a->key_sep, (size_t)(vl - p));
                    const int64_t e = hit ? hit - v : vl;
                    if (e > p)
                        ok &= put(&a->key_items, items++, v + p, e - p);
                    p = e + 1;
                }
            }
            a->key_lists[k + 1] = (int32_t)items;
        }
        if (want & RMQ_WANT_PROPS) {
            for (int32_t j = 0; j < f.n; j++, pairs++) {
                ok &= put(&a->prop_names, pairs, area + f.name_at[j], f.name_len[j]);
                ok &= put(&a->prop_values, pairs, area + f.value_at[j], f.value_len[j]);
            }
            a->prop_maps[k + 1] = (int32_t)pairs;
        }
        k++;
        if (!ok) {
            a->rows = k;
            return 2;
        }
    }
    a->rows = k;
    return 0;
}

/* ---- JSON lines (a messages.jsonl line: engine/read/jsonline.py's build_line) ------------- */

/* Extra bytes json.dumps(ensure_ascii=False) writes for a byte of a string: 0, 1 for the
 * two-character escapes (\" \\ \n \r \t \b \f), 5 for the other controls (\u00XX). */
static const uint8_t esc_extra[256] = {
    5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 5, 1, 1, 5, 5, /* \b \t \n \f \r: short escapes */
    5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
    ['"'] = 1, ['\\'] = 1,
};
static const char esc_short[256] = {
    ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f', ['\r'] = 'r', ['"'] = '"',
    ['\\'] = '\\',
};

/* Whether any of the 8 bytes of w needs an escape (< 0x20, '"' or '\\'): exact, by the
 * "has a byte less than" and "has a zero byte" word tricks. */
static inline uint64_t esc_word(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    const uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
    return (((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((b - ones) & ~b)) & high;
}

static uint8_t *str_put(uint8_t *o, const uint8_t *s, int64_t n)
{
    static const char hex[] = "0123456789abcdef";
    *o++ = '"';
    int64_t run = 0, i = 0;
    while (i < n) {
        if (i + 8 <= n) { /* skip words without a byte to escape */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!esc_word(w)) {
                i += 8;
                continue;
            }
        }
        const int64_t stop = i + 8 < n ? i + 8 : n;
        for (; i < stop; i++) {
            uint8_t c = s[i];
            if (!esc_extra[c])
                continue;
            memcpy(o, s + run, (size_t)(i - run));
            o += i - run;
            run = i + 1;
            *o++ = '\\';
            if (esc_extra[c] == 1) {
                *o++ = (uint8_t)esc_short[c];
            } else {
                memcpy(o, "u00", 3);
                o[3] = (uint8_t)hex[c >> 4];
                o[4] = (uint8_t)hex[c & 15];
                o += 5;
            }
        }
    }
    memcpy(o, s + run, (size_t)(n - run));
    o += n - run;
    *o++ = '"';
    return o;
}

static int digits(uint64_t u)
{
    static const uint64_t pow10[] = {
        10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL, 100000000ULL,
        1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL, 10000000000000ULL,
        100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL,
        100000000000000000ULL, 1000000000000000000ULL, 10000000000000000000ULL,
    };
    int d = 1;
    while (d < 20 && u >= pow10[d - 1])
        d++;
    return d;
}

static uint8_t *int_put(uint8_t *o, int64_t v)
{
    static const char pairs[] = "00010203040506070809101112131415161718192021222324252627282930"
                                "31323334353637383940414243444546474849505152535455565758596061"
                                "62636465666768697071727374757677787980818283848586878889909192"
                                "93949596979899";
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    if (v < 0)
        *o++ = '-';
    int d = digits(u);
    uint8_t *e = o + d;
    while (u >= 100) { /* two digits a step, from the end */
        unsigned r = (unsigned)(u % 100);
        u /= 100;
        e -= 2;
        e[0] = (uint8_t)pairs[2 * r];
        e[1] = (uint8_t)pairs[2 * r + 1];
    }
    if (u >= 10) {
        e -= 2;
        e[0] = (uint8_t)pairs[2 * u];
        e[1] = (uint8_t)pairs[2 * u + 1];
    } else {
        *--e = (uint8_t)('0' + u);
    }
    return o + d;
}

static uint8_t *b64_put(uint8_t *o, const uint8_t *s, int64_t n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    int64_t i = 0;
    *o++ = '"';
    for (; i + 3 <= n; i += 3) {
        uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8) | s[i + 2];
        o[0] = (uint8_t)a[v >> 18];
        o[1] = (uint8_t)a[(v >> 12) & 63];
        o[2] = (uint8_t)a[(v >> 6) & 63];
        o[3] = (uint8_t)a[v & 63];
        o += 4;
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)s[i] << 16;
        o[0] = (uint8_t)a[v >> 18];
        o[1] = (uint8_t)a[(v >> 12) & 63];
        o[2] = o[3] = '=';
        o += 4;
    } else if (n - i == 2) {
        uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8);
        o[0] = (uint8_t)a[v >> 18];
        o[1] = (uint8_t)a[(v >> 12) & 63];
        o[2] = (uint8_t)a[(v >> 6) & 63];
        o[3] = '=';
        o += 4;
    }
    *o++ = '"';
    return o;
}

/* The most bytes one line can take (every string byte escaped as \u00XX; a body as base64). */
static int64_t line_bound(int64_t i, int32_t nf, const int32_t *kind, const int32_t *lit_off,
                          void *const *p0, void *const *p1, void *const *p3)
{
    int64_t b = lit_off[nf + 2]; /* every literal */
    for (int32_t f = 0; f < nf; f++) {
        switch (kind[f]) {
        case JL_INT:
            b += 20;
            break;
        case JL_STR:
        case JL_BODY: {
            const int32_t *so = p0[f];
            b += 6 * (int64_t)(so[i + 1] - so[i]) + 4;
            break;
        }
        default: { /* JL_STRLIST, JL_MAP: items' strings lie contiguously in the child */
            const int32_t *lo = p0[f];
            const int32_t *ko = p1[f];
            int64_t items = lo[i + 1] - lo[i];
            b += 2 + 4 * items + 6 * (int64_t)(ko[lo[i + 1]] - ko[lo[i]]);
            if (kind[f] == JL_MAP) { /* the values: quotes, ':' and bytes */
                const int32_t *vo = p3[f];
                b += 4 * items + 6 * (int64_t)(vo[lo[i + 1]] - vo[lo[i]]);
            }
            break;
        }
        }
    }
    return b;
}

/*
 * JSON lines of nf fields each, rows [first, n): line i is, for each field f, the literal
 * lit[lit_off[f] : lit_off[f + 1]] then field f's value of row i, then (after a body that is
 * not UTF-8, written as base64) the literal lit[lit_off[nf] : lit_off[nf + 1]], then
 * lit[lit_off[nf + 1] : lit_off[nf + 2]] (the line's end). A field's value, by kind[f]:
 *   JL_INT     p0 int64 values: the decimal number;
 *   JL_STR     p0 int32 offsets, p1 data, p2 one byte per row (0: null) or NULL: a JSON
 *              string escaped as json.dumps(ensure_ascii=False) escapes it, or null;
 *   JL_STRLIST p0 int32 list offsets, p1/p2 the strings' offsets/data: [s, ...];
 *   JL_MAP     p0 int32 map offsets, p1/p2 names, p3/p4 values: {name: value, ...};
 *   JL_BODY    p0 int32 offsets, p1 data: the text when it is strict UTF-8, else base64.
 * Lines are written to out from *at on, while the next line's bound fits in cap; line_end[i]
 * is the end of line i. Returns the first row not written (n when all are), *at updated:
 * the caller grows out and calls again from there. Nothing is allocated.
 */
int64_t rmq_json_lines(int64_t first, int64_t n, int32_t nf, const int32_t *kind,
                       const uint8_t *lit, const int32_t *lit_off, void *const *p0,
                       void *const *p1, void *const *p2, void *const *p3, void *const *p4,
                       int64_t *line_end, uint8_t *out, int64_t cap, int64_t *at)
{
    uint8_t *o = out + *at;
    for (int64_t i = first; i < n; i++) {
        if ((o - out) + line_bound(i, nf, kind, lit_off, p0, p1, p3) > cap) {
            *at = o - out;
            return i;
        }
        for (int32_t f = 0; f < nf; f++) {
            const int64_t ll = lit_off[f + 1] - lit_off[f];
            memcpy(o, lit + lit_off[f], (size_t)ll);
            o += ll;
            switch (kind[f]) {
            case JL_INT:
                o = int_put(o, ((const int64_t *)p0[f])[i]);
                break;
            case JL_STR: {
                const int32_t *so = p0[f];
                const uint8_t *valid = p2[f];
                if (valid && !valid[i]) {
                    memcpy(o, "null", 4);
                    o += 4;
                } else {
                    o = str_put(o, (const uint8_t *)p1[f] + so[i], so[i + 1] - so[i]);
                }
                break;
            }
            case JL_STRLIST:
            case JL_MAP: {
                const int32_t *lo = p0[f];
                const int32_t *ko = p1[f];
                const uint8_t *kd = p2[f];
                const int map = kind[f] == JL_MAP;
                *o++ = map ? '{' : '[';
                for (int32_t j = lo[i]; j < lo[i + 1]; j++) {
                    if (j > lo[i])
                        *o++ = ',';
                    o = str_put(o, kd + ko[j], ko[j + 1] - ko[j]);
                    if (map) {
                        const int32_t *vo = p3[f];
                        *o++ = ':';
                        o = str_put(o, (const uint8_t *)p4[f] + vo[j], vo[j + 1] - vo[j]);
                    }
                }
                *o++ = map ? '}' : ']';
                break;
            }
            default: { /* JL_BODY */
                const int32_t *bo = p0[f];
                const uint8_t *b = (const uint8_t *)p1[f] + bo[i];
                const int64_t bl = bo[i + 1] - bo[i];
                if (utf8_ok(b, bl)) {
                    o = str_put(o, b, bl);
                } else {
                    const int64_t el = lit_off[nf + 1] - lit_off[nf];
                    o = b64_put(o, b, bl);
                    memcpy(o, lit + lit_off[nf], (size_t)el);
                    o += el;
                }
                break;
            }
            }
        }
        const int64_t tl = lit_off[nf + 2] - lit_off[nf + 1];
        memcpy(o, lit + lit_off[nf + 1], (size_t)tl);
        o += tl;
        line_end[i] = o - out;
    }
    *at = o - out;
    return n;
}

/* ---- the put path's encoder (engine/service/putmessage.py) -------------------------------- */

static inline void wr16(uint8_t *p, uint16_t v)
{
    v = BE16(v);
    memcpy(p, &v, 2);
}

static inline void wr32(uint8_t *p, uint32_t v)
{
    v = BE32(v);
    memcpy(p, &v, 4);
}

static inline void wr64(uint8_t *p, uint64_t v)
{
    v = BE64(v);
    memcpy(p, &v, 8);
}

/* IndexFile.indexKeyHashMethod: abs of the signed hash, Integer.MIN_VALUE as 0. */
static inline uint32_t index_hash(uint32_t h)
{
    if (h & 0x80000000u) {
        h = 0u - h;
        return h > 0x7FFFFFFFu ? 0 : h;
    }
    return h;
}

/* Java's String.hashCode continued from h over the UTF-16 code units of n bytes of UTF-8 (a
 * 4-byte sequence is a surrogate pair). The caller passes strict UTF-8 only: text Python
 * encoded (rmq_put), or stored bytes utf8_ok accepted first (rmq_index_keys). */
static uint32_t java_hash_utf8(uint32_t h, const uint8_t *s, int64_t n)
{
    int64_t i = 0;
    while (i < n) {
        uint32_t c = s[i];
        if (c < 0x80) {
            i += 1;
        } else if (c < 0xE0 && i + 1 < n) {
            c = ((c & 0x1F) << 6) | (s[i + 1] & 0x3F);
            i += 2;
        } else if (c < 0xF0 && i + 2 < n) {
            c = ((c & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
            i += 3;
        } else if (i + 3 < n) {
            c = ((c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
            i += 4;
            c -= 0x10000;
            h = 31u * h + (0xD800u + (c >> 10));
            c = 0xDC00u + (c & 0x3FFu);
        } else {
            i += 1; /* cut short: cannot come from Python's encoder */
        }
        h = 31u * h + c;
    }
    return h;
}

/* The END_OF_FILE blank at *pos, the rest of the segment; the next chunk starts the next one. */
static void put_roll(rmq_put_args *a, int64_t *need, int64_t *nchunks, int64_t *pos,
                     int64_t *seg_end, int64_t fs)
{
    *need += 8;
    a->chunks[3 * *nchunks + 2] = *need;
    (*nchunks)++;
    *pos = *seg_end;
    *seg_end += fs;
    a->chunks[3 * *nchunks] = *pos;
    a->chunks[3 * *nchunks + 1] = *need;
}

/* The keys of a KEYS value k[0..kl): its non-empty runs between key_sep bytes (what
 * IndexService.buildIndex indexes, MessageExt.getKeys split on KEY_SEPARATOR). */
static int32_t count_keys(const uint8_t *k, int32_t kl, uint8_t sep)
{
    int32_t keys = 0;
    for (int32_t j = 0; j < kl; j++)
        keys += k[j] != sep && (j == 0 || k[j - 1] == sep);
    return keys;
}

/* The index entries ("topic#key": the topic's hash continued over each key) of the keys of
 * k[0..kl) of the record at p, from a->idx + 3 * nidx; returns the entries after them. */
static int64_t put_key_entries(const rmq_put_args *a, int64_t nidx, uint32_t topic_hash,
                               const uint8_t *k, int32_t kl, int64_t p)
{
    for (int32_t j = 0; j < kl;) {
        int32_t j2 = j;
        while (j2 < kl && k[j2] != a->key_sep)
            j2++;
        if (j2 > j) {
            int64_t *e = a->idx + 3 * nidx;
            e[0] = index_hash(java_hash_utf8(topic_hash, k + j, j2 - j));
            e[1] = p;
            e[2] = a->now;
            nidx++;
        }
        j = j2 + 1;
    }
    return nidx;
}

/* Encode, place and dispatch a batch of plain records (see _kernel.h). Three passes: sizes,
 * checks and CommitLog positions (nothing changes when one fails, or when out is too small);
 * queues and queue offsets; then the bytes, the ConsumeQueue units and the index entries. */
int32_t rmq_put(rmq_put_args *a)
{
    const int64_t n = a->n;
    const int64_t fs = a->file_size;
    const int32_t uniq_item = a->uniq_name_len + a->uniq_len + 1;
    int64_t pos = a->start;
    int64_t seg_end = pos - pos % fs + fs;
    int64_t need = 0, nchunks = 0, nidx = 0, batch = 0;
    a->bad = -1;
    a->chunks[0] = pos;
    a->chunks[1] = 0;
    int64_t too_wide = -1; /* the first record larger than a segment */
    const int32_t *mkl = a->keys_len; /* each message's own KEYS, NULL: in the heads */
    for (int64_t i = 0; i < n; i++) { /* each record's size, and the rules it must meet */
        const int64_t blen = a->body_end[i] - (i ? a->body_end[i - 1] : 0);
        const int32_t t = a->topic_of[i], h = a->head_of[i];
        int64_t plen = (a->head_end[h] - (h ? a->head_end[h - 1] : 0)) + uniq_item;
        if (mkl) {
            if (mkl[i] < -1) {
                a->bad = i;
                return 3;
            }
            if (mkl[i] >= 0) /* (int64: any length is refused below as too long) */
                plen += (int64_t)a->keys_name_len + mkl[i] + 1;
        }
        const int64_t total = a->topic_base[t] + blen + plen;
        /* what encoding refuses, message by message (MessageExtEncoder.encode) */
        if (plen > a->max_props || total > a->max_total) {
            a->bad = i;
            a->bad_code = plen > a->max_props ? RMQ_PUT_PROPS : RMQ_PUT_TOO_LARGE;
            a->bad_value = plen > a->max_props ? plen : total;
            return 1;
        }
        /* what appending refuses, once every message is encoded; a MessageBatch is checked
         * whole below (CommitLog.append(together) checks it first) */
        if (!a->together && total + 8 > fs && too_wide < 0)
            too_wide = i;
        a->size[i] = (int32_t)total;
        batch += total;
    }
    if (too_wide >= 0) {
        a->bad = too_wide;
        a->bad_code = RMQ_PUT_SEGMENT;
        a->bad_value = a->size[too_wide];
        return 1;
    }
    if (a->together && n > 0) { /* a MessageBatch goes whole into one segment */
        if (batch + 8 > fs) {
            a->bad = 0;
            a->bad_code = RMQ_PUT_BATCH;
            a->bad_value = batch;
            return 1;
        }
        if (pos + batch + 8 > seg_end)
            put_roll(a, &need, &nchunks, &pos, &seg_end, fs);
    }
    int64_t ko = 0; /* where message i's own KEYS value starts in a->keys */
    for (int64_t i = 0; i < n; i++) {
        const int32_t h = a->head_of[i];
        const int64_t total = a->size[i];
        if (pos + total + 8 > seg_end) /* END_OF_FILE blank, the next segment */
            put_roll(a, &need, &nchunks, &pos, &seg_end, fs);
        a->pos[i] = pos;
        pos += total;
        need += total;
        if (a->want_index) {
            const uint8_t *k = a->heads + (h ? a->head_end[h - 1] : 0) + a->head_keys_at[h];
            nidx += 1 + count_keys(k, a->head_keys_len[h], a->key_sep);
            if (mkl && mkl[i] > 0)
                nidx += count_keys(a->keys + ko, mkl[i], a->key_sep);
        }
        if (mkl && mkl[i] > 0)
            ko += mkl[i];
    }
    a->chunks[3 * nchunks + 2] = need;
    a->nchunks = nchunks + 1;
    a->end = pos;
    a->need = need;
    a->nidx = nidx;
    if (need > a->cap || nidx > a->idx_cap)
        return 2;

    /* queues: round robin per topic where none is given; queue offsets per (topic, queue) */
    for (int32_t s = 0; s <= a->nslots; s++)
        a->slot_units[s] = 0;
    for (int64_t i = 0; i < n; i++) {
        const int32_t t = a->topic_of[i];
        int32_t q = a->queue_of[i];
        if (q < 0)
            q = (int32_t)(a->topic_rr[t]++ % a->topic_nwq[t]);
        a->queue[i] = q;
        const int32_t s = a->topic_slot[t] + q;
        a->qoff[i] = a->slot_next[s]++;
        a->slot_units[s + 1]++;
    }
    for (int32_t s = 0; s < a->nslots; s++)
        a->slot_units[s + 1] += a->slot_units[s];

    const int clmul = have_clmul();
    int64_t *next_unit = a->unit_fill; /* the next unit of each slot */
    for (int32_t s = 0; s < a->nslots; s++)
        next_unit[s] = a->slot_units[s];
    int64_t op = 0, c = 0;
    nidx = 0;
    ko = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t b0 = i ? a->body_end[i - 1] : 0, blen = a->body_end[i] - b0;
        const int32_t t = a->topic_of[i], h = a->head_of[i];
        const int64_t h0 = h ? a->head_end[h - 1] : 0, hlen = a->head_end[h] - h0;
        const int64_t p = a->pos[i];
        const int32_t total = a->size[i];
        while (c + 1 < a->nchunks && p >= a->chunks[3 * (c + 1)]) { /* the blank first */
            uint8_t *o = a->out + op;
            const int64_t gap = a->chunks[3 * (c + 1)] - (a->chunks[3 * c] + (op - a->chunks[3 * c + 1]));
            wr32(o, (uint32_t)gap);
            wr32(o + 4, a->magic_blank);
            op += 8;
            c++;
        }
        uint8_t *o = a->out + op;
        const uint8_t *body = a->body_at ? a->body_at[i] : a->bodies + b0;
        memset(o, 0, (size_t)a->fixed);
        wr32(o + a->at_total, (uint32_t)total);
        wr32(o + a->at_magic, a->topic_magic[t]);
        wr32(o + a->at_crc, crc32_piece(body, (size_t)blen, clmul) & a->crc_mask);
        wr32(o + a->at_queue, (uint32_t)a->queue[i]);
        wr32(o + a->at_flag, a->flag ? (uint32_t)a->flag[i] : 0);
        wr64(o + a->at_qoff, (uint64_t)a->qoff[i]);
        wr64(o + a->at_phys, (uint64_t)p);
        const int64_t born = a->born && a->born[i] ? a->born[i] : a->now;
        wr64(o + a->at_born, (uint64_t)born);
        memcpy(o + a->at_born_host, a->born_host ? a->born_host + 8 * i : a->default_born, 8);
        wr64(o + a->at_store_ts, (uint64_t)a->now);
        memcpy(o + a->at_store_host, a->store_host, 8);
        wr32(o + a->at_body_len, (uint32_t)blen);
        o += a->fixed;
        memcpy(o, body, (size_t)blen);
        o += blen;
        const int32_t tf0 = t ? a->topic_field_end[t - 1] : 0;
        const int32_t tfl = a->topic_field_end[t] - tf0;
        memcpy(o, a->topic_field + tf0, (size_t)tfl);
        o += tfl;
        const int32_t kl = mkl ? mkl[i] : -1; /* the message's own KEYS */
        const uint8_t *mk = kl >= 0 ? a->keys + ko : NULL;
        const int64_t kitem = kl >= 0 ? a->keys_name_len + kl + 1 : 0;
        wr16(o, (uint16_t)(hlen + kitem + a->uniq_name_len + a->uniq_len + 1));
        o += 2;
        memcpy(o, a->heads + h0, (size_t)hlen);
        o += hlen;
        if (kl >= 0) {
            memcpy(o, a->keys_name, (size_t)a->keys_name_len);
            o += a->keys_name_len;
            memcpy(o, mk, (size_t)kl);
            o += kl;
            *o++ = a->prop_end;
            ko += kl;
        }
        memcpy(o, a->uniq_name, (size_t)a->uniq_name_len);
        o += a->uniq_name_len;
        const uint8_t *uniq = a->uniq + (int64_t)a->uniq_len * i;
        memcpy(o, uniq, (size_t)a->uniq_len);
        o += a->uniq_len;
        *o = a->prop_end;
        op += total;

        static const char hex[] = "0123456789ABCDEF";
        uint8_t *id = a->msg_id + 33 * i;
        memcpy(id, a->msg_id_prefix, 16);
        for (int32_t j = 0; j < 16; j++)
            id[16 + j] = (uint8_t)hex[((uint64_t)p >> (60 - 4 * j)) & 15];
        id[32] = '\n';

        uint8_t *u = a->units + 20 * next_unit[a->topic_slot[t] + a->queue[i]]++;
        wr64(u, (uint64_t)p);
        wr32(u + 8, (uint32_t)total);
        wr64(u + 12, (uint64_t)a->head_tags_code[h]);

        if (a->want_index) { /* "topic#UNIQ_KEY", then "topic#key" of each key */
            int64_t *e = a->idx + 3 * nidx;
            uint32_t hash = a->topic_hash[t];
            for (int32_t j = 0; j < a->uniq_len; j++)
                hash = 31u * hash + uniq[j];
            e[0] = index_hash(hash);
            e[1] = p;
            e[2] = a->now;
            nidx++;
            nidx = put_key_entries(a, nidx, a->topic_hash[t], a->heads + h0 + a->head_keys_at[h],
                                   a->head_keys_len[h], p);
            if (kl > 0)
                nidx = put_key_entries(a, nidx, a->topic_hash[t], mk, kl, p);
        }
    }
    return 0;
}

/* One message through rmq_put (see _kernel.h): its values in one-element arrays on this stack
 * for the call, the struct's own per-message fields given back before returning. */
int32_t rmq_put_one(rmq_put_args *a, int64_t now, int64_t start, const char *head,
                    int32_t head_len, int64_t tags_code, int32_t keys_at, int32_t keys_len,
                    const char *body, int64_t body_len, const char *uniq, int32_t uniq_len,
                    int32_t queue, int64_t qnext, int64_t born, int32_t flag,
                    const char *born_host, int32_t want_index, uint8_t *dst, int64_t room,
                    int64_t *out)
{
    /* lengths past these would overflow rmq_put's int32 property sums or int64 record sizes
     * before its own limits (maxMessageSize, 32,767 bytes of properties) refuse them */
    const int32_t most = (int32_t)1 << 29;
    if (queue < 0 || queue >= a->nslots || head_len < 0 || head_len > most || keys_at < 0 ||
        keys_len < 0 || keys_at > head_len - keys_len || body_len < 0 ||
        body_len > a->max_total || uniq_len < 0 || uniq_len > most || (head_len && !head) ||
        (body_len && !body) || (uniq_len && !uniq) || !out || room < 0 || (room && !dst) ||
        (dst && (start < 0 || a->file_size <= 0)))
        return 3;
    const rmq_put_args saved = *a;
    const int32_t zero = 0, end = head_len, ka = keys_at, kl = keys_len, fl = flag;
    const int64_t body_end = body_len, tc = tags_code, b = born;
    a->n = 1;
    a->ntopics = 1;
    a->together = 0;
    a->now = now;
    a->start = start;
    a->want_index = want_index;
    a->bodies = (const uint8_t *)body;
    a->body_at = NULL;
    a->body_end = &body_end;
    a->topic_of = &zero;
    a->topic_slot = &zero; /* its queue q is slot q */
    a->head_of = &zero;
    a->queue_of = &queue;
    a->born = &b;
    a->born_host = (const uint8_t *)born_host;
    a->flag = &fl;
    a->uniq = (const uint8_t *)uniq;
    a->uniq_len = uniq_len;
    a->heads = (const uint8_t *)head;
    a->head_end = &end;
    a->head_tags_code = &tc;
    a->head_keys_at = &ka;
    a->head_keys_len = &kl;
    a->keys_len = NULL; /* its KEYS are in its head */
    if (dst) { /* the record straight into the CommitLog's mapping: room bytes there, never
                * past the segment's end (a record that starts the next one needs more) */
        const int64_t left = a->file_size - start % a->file_size;
        a->out = dst;
        a->cap = room < left ? room : left;
    }
    const int64_t next_before = a->slot_next[queue];
    a->slot_next[queue] = qnext;
    const int32_t rc = rmq_put(a);
    if (rc != 0)
        a->slot_next[queue] = next_before;
    out[0] = rc == 0 ? a->pos[0] : 0;
    out[1] = rc == 0 ? a->size[0] : 0;
    out[2] = rc == 0 ? a->qoff[0] : 0;
    out[3] = a->end;
    out[4] = a->need;
    out[5] = a->nidx;
    out[6] = a->nchunks;
    /* the fields a batch sets for itself, pointing at this stack no more */
    a->n = saved.n;
    a->ntopics = saved.ntopics;
    a->together = saved.together;
    a->now = saved.now;
    a->start = saved.start;
    a->want_index = saved.want_index;
    a->bodies = saved.bodies;
    a->body_at = saved.body_at;
    a->body_end = saved.body_end;
    a->topic_of = saved.topic_of;
    a->topic_slot = saved.topic_slot;
    a->head_of = saved.head_of;
    a->queue_of = saved.queue_of;
    a->born = saved.born;
    a->born_host = saved.born_host;
    a->flag = saved.flag;
    a->uniq = saved.uniq;
    a->uniq_len = saved.uniq_len;
    a->heads = saved.heads;
    a->head_end = saved.head_end;
    a->head_tags_code = saved.head_tags_code;
    a->head_keys_at = saved.head_keys_at;
    a->head_keys_len = saved.head_keys_len;
    a->keys_len = saved.keys_len;
    a->out = saved.out;
    a->cap = saved.cap;
    return rc;
}

/* Note chunk c as needed when it is not allocated; 0, or -2 outside the table. */
static inline int index_need(rmq_index_map *m, int64_t c)
{
    if (c < 0 || c >= m->nchunks)
        return -2;
    if (!m->chunks[c]) {
        if (m->nneed < m->need_cap)
            m->need[m->nneed] = c;
        m->nneed++;
    }
    return 0;
}

/* IndexFile.putKey for a run of pre-hashed entries (engine/format/indexfile.py's
 * IndexFile.put_hashed, whose Python step is the reference), into the file's mapping. */
int64_t rmq_index_put_mapped(rmq_index_args *a, rmq_index_map *m)
{
    const int64_t n = a->n, cs = m->chunk_size, hs = m->header_size, ss = m->slot_size;
    m->nneed = 0;
    if (n <= 0 || a->count < 0 || a->nslots <= 0 || cs <= 0 || a->item_size <= 0)
        return n == 0 ? 0 : -2;
    /* indexCount and hashSlotCount are Java ints: a count they cannot hold is refused */
    if (n > INT32_MAX - (int64_t)a->count || a->slot_count < 0 ||
        n > INT32_MAX - (int64_t)a->slot_count)
        return -2;
    const int64_t items_at = m->items_base + (int64_t)a->count * a->item_size;
    const int64_t items_end = items_at + n * a->item_size;
    if (hs + ss * a->nslots > m->items_base || items_end > m->map_len || a->first < 0)
        return -2;
    /* every chunk a store touches: the header's, the items', each changed slot's */
    for (int64_t c = 0; c <= (hs - 1) / cs; c++)
        if (index_need(m, c))
            return -2;
    for (int64_t c = items_at / cs; c <= (items_end - 1) / cs; c++)
        if (index_need(m, c))
            return -2;
    for (int64_t i = 0; i < n; i++) {
        const uint32_t key_hash = (uint32_t)a->entries[3 * (a->first + i)];
        const int64_t slot = (int64_t)(key_hash % (uint64_t)a->nslots);
        if (index_need(m, (hs + ss * slot) / cs))
            return -2;
    }
    if (m->nneed)
        return -1;
    uint8_t *const map = m->map;
    int32_t c = a->count, slot_count = a->slot_count;
    int64_t begin_ts = a->begin_ts, begin_phy = a->begin_phy, phy = 0, ts = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t *e = a->entries + 3 * (a->first + i);
        const uint32_t key_hash = (uint32_t)e[0];
        phy = e[1];
        ts = e[2];
        uint8_t *slot = map + hs + ss * (int64_t)(key_hash % (uint64_t)a->nslots);
        int32_t prev = (int32_t)rd32(slot);
        if (prev <= a->invalid_index || prev > c) {
            prev = a->invalid_index;
            slot_count++;
        }
        int64_t diff = 0;
        if (begin_ts > 0) {
            const int64_t delta = ts - begin_ts;
            diff = delta >= 0 ? delta / 1000 : 0;
            if (diff > INT32_MAX)
                diff = INT32_MAX;
        }
        uint8_t *o = map + items_at + (int64_t)a->item_size * i;
        wr32(o + a->at_hash, key_hash);
        wr64(o + a->at_phy, (uint64_t)phy);
        wr32(o + a->at_diff, (uint32_t)diff);
        wr32(o + a->at_prev, (uint32_t)prev);
        if (c <= 1) {
            begin_phy = phy;
            begin_ts = ts;
        }
        /* another process reading the file (a follower) sees the item before the slot
         * naming it, and the slots before the header counting them, on any CPU */
        __atomic_thread_fence(__ATOMIC_RELEASE);
        wr32(slot, (uint32_t)c);
        c++;
    }
    a->count = c;
    a->slot_count = slot_count;
    a->begin_ts = begin_ts;
    a->begin_phy = begin_phy;
    a->end_ts = ts;
    a->end_phy = phy;
    __atomic_thread_fence(__ATOMIC_RELEASE);
    uint8_t *h = m->map;
    wr64(h + m->at_begin_ts, (uint64_t)a->begin_ts);
    wr64(h + m->at_end_ts, (uint64_t)a->end_ts);
    wr64(h + m->at_begin_phy, (uint64_t)a->begin_phy);
    wr64(h + m->at_end_phy, (uint64_t)a->end_phy);
    wr32(h + m->at_slot_count, (uint32_t)a->slot_count);
    wr32(h + m->at_count, (uint32_t)a->count);
    return n;
}

static inline int64_t floor_mod(int64_t v, int64_t n)
{
    int64_t r = v % n;
    return r < 0 ? r + n : r;
}

void rmq_index_check(rmq_index_check_args *a)
{
    const int64_t ns = a->nslots, count = a->count, is = a->item_size;
    int64_t *newest = a->newest;
    a->negative = a->bad_prev = a->cross_bucket = a->out_of_order = 0;
    a->slot = -1;
    a->slot_value = a->newest_value = a->used = a->last_phy = 0;
    if (ns <= 0)
        return;
    memset(newest, 0, (size_t)ns * sizeof(int64_t));
    int64_t last_phy = 0;
    for (int64_t j = 0; j + 1 < count; j++) {
        const uint8_t *it = a->items + is * j;
        const int64_t num = j + 1; /* the item's number */
        const int32_t h = (int32_t)rd32(it + a->at_hash);
        const int64_t phy = (int64_t)rd64(it + a->at_phy);
        const int32_t diff = (int32_t)rd32(it + a->at_diff);
        const int32_t prev = (int32_t)rd32(it + a->at_prev);
        if (h < 0 || diff < 0)
            a->negative = 1;
        const int64_t bucket = floor_mod(h, ns);
        if (prev < 0 || prev >= num) {
            a->bad_prev = 1;
        } else if (prev > 0) {
            const int32_t ph = (int32_t)rd32(a->items + is * (int64_t)(prev - 1) + a->at_hash);
            if (floor_mod(ph, ns) != bucket)
                a->cross_bucket = 1;
        }
        if (j > 0 && phy < last_phy)
            a->out_of_order = 1;
        last_phy = phy;
        newest[bucket] = num;
    }
    a->last_phy = last_phy;
    for (int64_t s = 0; s < ns; s++) {
        const int64_t v = (int32_t)rd32(a->slots + 4 * s);
        if (v != 0)
            a->used++;
        if (a->slot < 0 && v != newest[s]) {
            a->slot = s;
            a->slot_value = v;
            a->newest_value = newest[s];
        }
    }
}

/* ---- IndexFile entries of stored records (recovery's re-dispatch) -------------------------- */

static inline int64_t be_signed(const uint8_t *p, int width)
{
    return width == 1 ? (int64_t)(int8_t)p[0] : (int64_t)(int16_t)((p[0] << 8) | p[1]);
}

/* One record's entries at a->entries + 3 * *nout; 0: done, 1: out of room (nothing kept),
 * -1: the record cannot be read here. */
static int keys_of(rmq_keys_args *a, int64_t i, int64_t *nout)
{
    const int64_t at = a->pos[i];
    if (at < 0 || at > a->len - (a->at_body_len + 4))
        return -1;
    const uint8_t *r = a->buf + at;
    const int64_t total = (int32_t)rd32(r + a->at_total);
    const uint32_t magic = rd32(r + a->at_magic);
    const uint32_t flags = rd32(r + a->at_sysflag);
    if (total <= 0 || total > a->len - at || (magic != a->magic_v1 && magic != a->magic_v2))
        return -1;
    if ((flags & a->tx_mask) == a->tx_rollback)
        return 0; /* IndexService.buildIndex: a rolled-back record gets no entries */
    int64_t p = a->at_body_len + ((flags & a->born_v6) ? a->host_v6_extra : 0) +
                ((flags & a->store_v6) ? a->host_v6_extra : 0);
    if (p + 4 > total)
        return -1;
    const int64_t blen = (int32_t)rd32(r + p);
    const int tl_size = magic == a->magic_v2 ? 2 : 1;
    if (blen < 0 || blen > total)
        return -1;
    p += 4 + blen;
    if (p + tl_size > total)
        return -1;
    const int64_t tl = be_signed(r + p, tl_size);
    if (tl < 0)
        return -1;
    p += tl_size + tl;
    if (p + 2 > total)
        return -1;
    const int64_t pl = be_signed(r + p, 2);
    p += 2;
    if (pl < 0 || p + pl > total)
        return -1;
    const uint8_t *area = r + p;
    if (any_high(area, pl) && !utf8_ok(area, pl))
        return -1; /* decode_properties would replace bytes: the hashes would differ */
    int64_t uniq_at = -1, uniq_len = 0, keys_at = -1, keys_len = 0;
    for (int64_t q = 0; q < pl;) {
        int64_t nl, vl;
        const int64_t e = prop_pair(area, q, pl, a->pair_sep, a->name_sep, &nl, &vl);
        if (vl > 0) {
            if (nl == a->uniq_len && memcmp(area + q, a->uniq_name, (size_t)nl) == 0)
                uniq_at = q + nl + 1, uniq_len = vl;
            else if (nl == a->keys_len && memcmp(area + q, a->keys_name, (size_t)nl) == 0)
                keys_at = q + nl + 1, keys_len = vl;
        }
        q = e + 1;
    }
    int64_t k = *nout;
    const uint32_t prefix = a->prefix_hash[i];
    if (uniq_at >= 0) {
        if (k >= a->cap)
            return 1;
        int64_t *e = a->entries + 3 * k++;
        e[0] = index_hash(java_hash_utf8(prefix, area + uniq_at, uniq_len));
        e[1] = a->phys[i];
        e[2] = a->store_ts[i];
    }
    for (int64_t j = 0; keys_at >= 0 && j < keys_len;) {
        const uint8_t *v = area + keys_at;
        const uint8_t *hit = memchr(v + j, a->key_sep, (size_t)(keys_len - j));
        const int64_t j2 = hit ? hit - v : keys_len;
        if (j2 > j) {
            if (k >= a->cap)
                return 1;
            int64_t *e = a->entries + 3 * k++;
            e[0] = index_hash(java_hash_utf8(prefix, v + j, j2 - j));
            e[1] = a->phys[i];
            e[2] = a->store_ts[i];
        }
        j = j2 + 1;
    }
    *nout = k;
    return 0;
}

int64_t rmq_index_keys(rmq_keys_args *a)
{
    int64_t nout = a->nout;
    a->bad = -1;
    int64_t i = a->first < 0 ? 0 : a->first;
    for (; i < a->n; i++) {
        const int rc = keys_of(a, i, &nout);
        if (rc > 0)
            break;
        if (rc < 0) {
            a->bad = i;
            break;
        }
    }
    a->nout = nout;
    a->done = i;
    return i;
}
