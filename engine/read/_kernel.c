/*
 * rmqfs: the compiled core of the columnar decoder (engine/read/columnar.py).
 *
 * Loops that Arrow and numpy cannot express without a Python object or a temporary array per
 * record: gathering the big-endian fields of many records, copying their variable-length
 * parts into one Arrow values buffer, the body CRC-32 of each record, and splitting each
 * properties area into name/value pairs (MessageDecoder.string2messageProperties). Every
 * function works on positions the caller has already checked against the mapping's length;
 * none allocates, none keeps a pointer after it returns, none calls back into Python (ctypes
 * releases the GIL around each call). The record layout itself is not here: the caller passes
 * field offsets and widths from engine/format/message.py's field table.
 *
 * Built by engine/read/kernel.py (`make` runs it; a missing library is built on first use).
 * Bump RMQ_KERNEL_ABI when a signature changes.
 */
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define RMQ_KERNEL_ABI 1

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

int rmq_abi(void) { return RMQ_KERNEL_ABI; }

/*
 * Big-endian fields of n records into native-endian columns.
 * Field f of record i is the width[f] bytes at buf[pos[i] + src_off[f]]; width is 1, 2, 4 or
 * 8, and dst[f] an array of n elements of that width (the caller reads them as signed or
 * unsigned). Records outer, fields inner: each record's header is loaded once.
 */
void rmq_gather_fields(const uint8_t *buf, const int64_t *pos, int64_t n, int32_t nf,
                       const int32_t *src_off, const int32_t *width, void *const *dst)
{
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *rec = buf + pos[i];
        if (i + PREFETCH_AHEAD < n) { /* records are scattered: ask for the next ones early */
            __builtin_prefetch(buf + pos[i + PREFETCH_AHEAD]);
            __builtin_prefetch(buf + pos[i + PREFETCH_AHEAD] + 64);
        }
        for (int32_t f = 0; f < nf; f++) {
            const uint8_t *p = rec + src_off[f];
            switch (width[f]) {
            case 1:
                ((uint8_t *)dst[f])[i] = *p;
                break;
            case 2: {
                uint16_t v;
                memcpy(&v, p, 2);
                ((uint16_t *)dst[f])[i] = BE16(v);
                break;
            }
            case 4: {
                uint32_t v;
                memcpy(&v, p, 4);
                ((uint32_t *)dst[f])[i] = BE32(v);
                break;
            }
            default: {
                uint64_t v;
                memcpy(&v, p, 8);
                ((uint64_t *)dst[f])[i] = BE64(v);
                break;
            }
            }
        }
    }
}

/* The unsigned big-endian integer of width bytes (1 to 8) at p. */
static inline uint64_t load_be(const uint8_t *p, int32_t width)
{
    uint64_t v = 0;
    for (int32_t k = 0; k < width; k++)
        v = (v << 8) | p[k];
    return v;
}

/*
 * The variable part of V1 records (engine/format/message.py): after the fixed fields
 * (fixed bytes) the body (blen[i] bytes), the topic's length (tl_size bytes) and the topic,
 * the properties' length (pl_size bytes) and the properties, which end at end[i] exactly.
 * For each record with ok[i] set: tstart/tlen and pstart/plen, the positions and lengths of
 * its topic and properties in buf; ok[i] is cleared where the lengths do not add up, a length
 * is over its maximum, or (topic_len >= 0) the topic is not the topic_len bytes at topic.
 * Positions are checked against end[i], which the caller checked against the buffer.
 */
void rmq_v1_tail(const uint8_t *buf, const int64_t *pos, const int64_t *end, const int64_t *blen,
                 int64_t n, int32_t fixed, int32_t tl_size, int32_t pl_size, int64_t max_topic,
                 int64_t max_props, const uint8_t *topic, int32_t topic_len, int64_t *tstart,
                 int64_t *tlen, int64_t *pstart, int64_t *plen, uint8_t *ok)
{
    for (int64_t i = 0; i < n; i++) {
        if (i + PREFETCH_AHEAD < n && ok[i + PREFETCH_AHEAD] && blen[i + PREFETCH_AHEAD] >= 0 &&
            pos[i + PREFETCH_AHEAD] + fixed + blen[i + PREFETCH_AHEAD] < end[i + PREFETCH_AHEAD])
            __builtin_prefetch(buf + pos[i + PREFETCH_AHEAD] + fixed + blen[i + PREFETCH_AHEAD]);
        tstart[i] = tlen[i] = pstart[i] = plen[i] = 0;
        if (!ok[i])
            continue;
        int64_t t = pos[i] + fixed + blen[i];
        if (blen[i] < 0 || t + tl_size + pl_size > end[i]) {
            ok[i] = 0;
            continue;
        }
        int64_t tl = (int64_t)load_be(buf + t, tl_size);
        int64_t p = t + tl_size + tl;
        if (tl > max_topic || p + pl_size > end[i]) {
            ok[i] = 0;
            continue;
        }
        int64_t pl = (int64_t)load_be(buf + p, pl_size);
        if (pl > max_props || p + pl_size + pl != end[i]) {
            ok[i] = 0;
            continue;
        }
        if (topic_len >= 0 && (tl != topic_len || memcmp(buf + t + tl_size, topic, (size_t)tl))) {
            ok[i] = 0;
            continue;
        }
        tstart[i] = t + tl_size;
        tlen[i] = tl;
        pstart[i] = p + pl_size;
        plen[i] = pl;
    }
}

/*
 * Concatenate buf[start[i] : start[i] + len[i]] into out, with Arrow int32 offsets
 * (offsets[0] = 0, offsets[i + 1] = end of piece i). The caller sized out to the sum of len
 * and checked that it fits an int32.
 */
void rmq_gather(const uint8_t *buf, const int64_t *start, const int64_t *len, int64_t n,
                int32_t *offsets, uint8_t *out)
{
    int64_t at = 0;
    offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i + PREFETCH_AHEAD < n)
            __builtin_prefetch(buf + start[i + PREFETCH_AHEAD]);
        if (len[i] > 0) {
            memcpy(out + at, buf + start[i], (size_t)len[i]);
            at += len[i];
        }
        offsets[i + 1] = (int32_t)at;
    }
}

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

/*
 * CRC-32/IEEE (zlib's crc32, what UtilAll.crc32 computes) of each piece
 * buf[start[i] : start[i] + len[i]]: by carry-less multiplication where the CPU has it (the
 * first multiple of 16 bytes of a piece of 64 bytes or more), zlib for the rest.
 */
void rmq_crc32(const uint8_t *buf, const int64_t *start, const int64_t *len, int64_t n,
               uint32_t *out)
{
#ifdef RMQ_CLMUL
    const int clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *p = buf + start[i];
        size_t l = (size_t)len[i];
        uLong crc = 0;
        if (i + PREFETCH_AHEAD < n)
            __builtin_prefetch(buf + start[i + PREFETCH_AHEAD]);
#ifdef RMQ_CLMUL
        if (clmul && l >= 64) {
            size_t chunk = l & ~(size_t)15;
            crc = crc32_clmul(p, chunk, 0);
            p += chunk;
            l -= chunk;
        }
#endif
        out[i] = (uint32_t)(l ? crc32_z(crc, p, (z_size_t)l) : crc);
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

/*
 * Split the properties area buf[start[i] : start[i] + len[i]] of each record into pairs, as
 * MessageDecoder.string2messageProperties does: pairs are separated by pair_sep (\x02), a pair
 * is kept when its first name_sep (\x01) lies strictly inside it (a name and a value of at
 * least one byte each), and a name seen again in the same record keeps its first position
 * and takes the later value (a HashMap's put, a Python dict's assignment).
 *
 * Out: the kept pairs' name and value positions in buf (kstart/klen, vstart/vlen, at most
 * cap of them: the caller passes cap = sum((len + 1) / 4), the most a record can hold),
 * map_offsets[i]..map_offsets[i + 1] the pairs of record i, tag_pair[i] / keys_pair[i] the
 * pair index of the name tag_name / keys_name in record i or -1.
 * slow[i] is set to 1 for a record this function does not decode: an area that is not
 * strict UTF-8 (the per-record decoder replaces bad bytes) or one with more than max_pairs
 * pairs (whose repeated-name check here is quadratic). Such a record gets no pairs.
 * Returns the number of pairs written, or -1 when cap was too small.
 */
int64_t rmq_split_properties(const uint8_t *buf, const int64_t *start, const int64_t *len,
                             int64_t n, uint8_t pair_sep, uint8_t name_sep, int32_t max_pairs,
                             const uint8_t *tag_name, int32_t tag_len, const uint8_t *keys_name,
                             int32_t keys_len, int64_t cap, int64_t *kstart, int64_t *klen,
                             int64_t *vstart, int64_t *vlen, int32_t *map_offsets,
                             int64_t *tag_pair, int64_t *keys_pair, uint8_t *slow)
{
    int64_t out = 0;
    map_offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *area = buf + start[i];
        const int64_t alen = len[i];
        const int64_t first = out;
        if (i + PREFETCH_AHEAD < n)
            __builtin_prefetch(buf + start[i + PREFETCH_AHEAD]);
        tag_pair[i] = -1;
        keys_pair[i] = -1;
        slow[i] = 0;
        uint8_t high = 0; /* OR of every byte: strict UTF-8 is checked only past ASCII */
        int64_t p = 0;
        while (p < alen) {
            int64_t e = p, s = -1;
            for (; e < alen; e++) { /* one pass: the pair's end and its first name_sep */
                uint8_t c = area[e];
                high |= c;
                if (c == pair_sep)
                    break;
                if (c == name_sep && s < 0)
                    s = e;
            }
            if (s >= 0) {
                int64_t nl = s - p, vl = e - s - 1;
                if (nl > 0 && vl > 0) {
                    int64_t j;
                    for (j = first; j < out; j++)
                        if (klen[j] == nl && memcmp(buf + kstart[j], area + p, (size_t)nl) == 0)
                            break;
                    if (j < out) { /* a repeated name: first position, last value */
                        vstart[j] = start[i] + s + 1;
                        vlen[j] = vl;
                    } else {
                        if (out >= cap)
                            return -1;
                        if (out - first >= max_pairs) {
                            slow[i] = 1;
                            break;
                        }
                        kstart[out] = start[i] + p;
                        klen[out] = nl;
                        vstart[out] = start[i] + s + 1;
                        vlen[out] = vl;
                        if (nl == tag_len && memcmp(area + p, tag_name, (size_t)nl) == 0)
                            tag_pair[i] = out;
                        else if (nl == keys_len && memcmp(area + p, keys_name, (size_t)nl) == 0)
                            keys_pair[i] = out;
                        out++;
                    }
                }
            }
            p = e + 1;
        }
        if ((high & 0x80) && !utf8_ok(area, alen))
            slow[i] = 1;
        if (slow[i]) {
            out = first;
            tag_pair[i] = -1;
            keys_pair[i] = -1;
        }
        map_offsets[i + 1] = (int32_t)out;
    }
    return out;
}

/*
 * Split each piece buf[start[i] : start[i] + len[i]] on sep, dropping empty parts (the KEYS
 * property: MessageConst.KEY_SEPARATOR). Out: the parts' positions (at most cap: the caller
 * passes sum((len + 1) / 2)) and list_offsets[i]..list_offsets[i + 1] the parts of piece i.
 * Returns the number of parts, or -1 when cap was too small.
 */
int64_t rmq_split_on(const uint8_t *buf, const int64_t *start, const int64_t *len, int64_t n,
                     uint8_t sep, int64_t cap, int64_t *pstart, int64_t *plen,
                     int32_t *list_offsets)
{
    int64_t out = 0;
    list_offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *s = buf + start[i];
        int64_t p = 0, l = len[i];
        while (p < l) {
            const uint8_t *hit = memchr(s + p, sep, (size_t)(l - p));
            int64_t e = hit ? (int64_t)(hit - s) : l;
            if (e > p) {
                if (out >= cap)
                    return -1;
                pstart[out] = start[i] + p;
                plen[out] = e - p;
                out++;
            }
            p = e + 1;
        }
        list_offsets[i + 1] = (int32_t)out;
    }
    return out;
}

/* ---- JSON lines (a messages.jsonl line: engine/read/jsonline.py's build_line) ------------- */

enum { JL_INT = 0, JL_STR = 1, JL_STRLIST = 2, JL_MAP = 3, JL_BODY = 4 };

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
