/*
 * rmqfs: the interface of the columnar decoder's compiled core (_kernel.c).
 *
 * The one declaration of every type and function the Python side uses. _kernel.c includes it,
 * and so does the C code cffi generates from _kernel_build.py's cdef: the compiler checks each
 * field and signature of that cdef against the declarations here (a pointer field or argument
 * of another type is an error; an integer field of another width is an error when the module
 * is loaded: cffi compares the offsets and sizes the compiler computed), so the two cannot
 * drift apart unnoticed (tests/engine/test_kernel_build.py changes one side to show it).
 */
#ifndef RMQFS_KERNEL_H
#define RMQFS_KERNEL_H

#include <stdint.h>

/* An Arrow string/binary array being filled: offsets[0..rows], data[0..cap). */
typedef struct {
    int32_t *offsets;
    uint8_t *data;
    int64_t cap;
    int64_t len; /* bytes written (out) */
} rmq_strings;

/* What rmq_decode is given and what it fills (engine/read/kernel.py fills it by field name;
 * the cdef of _kernel_build.py declares it and the compiler checks it against this). Positions are checked by the caller: pos[i] + size[i] lies in buf and
 * size[i] is at least the smallest record. */
typedef struct {
    const uint8_t *buf;
    const int64_t *pos;  /* where record i starts in buf */
    const int64_t *size; /* its unit's size: TOTALSIZE must equal it */
    const int64_t *phys; /* its unit's CommitLog offset: PHYSICALOFFSET must equal it */
    const int64_t *qoff; /* its unit's queue offset: QUEUEOFFSET must equal it; NULL: not checked */
    int64_t n;
    int32_t queue_id;  /* QUEUEID every record must have; -1: not checked */
    int32_t topic_len; /* the topic every decoded record must have; -1: any (then read) */
    const uint8_t *topic;
    int32_t want;      /* RMQ_WANT_* */
    int32_t max_pairs; /* more properties than this: the record goes record by record */
    /* the V1/IPv4 layout (engine/format/message.py's FIXED_V4_FIELDS) */
    int32_t at_total, at_magic, at_crc, at_queue, at_phys, at_sysflag, at_born_host;
    int32_t at_store_host, at_body_len, fixed, tl_size, pl_size, at_qoff, pad0_;
    int64_t max_topic, max_props;
    uint32_t magic_v1, magic_v2, rare_flags, crc_mask;
    uint8_t pair_sep, name_sep, key_sep, pad_;
    const uint8_t *tag_name;
    const uint8_t *keys_name;
    int32_t tag_len, keys_len;
    /* numeric columns of the decoded records: field offset, width (4: int32, 8: int64) */
    int32_t nfix, pad2_;
    const int32_t *fix_at;
    const int32_t *fix_width;
    void *const *fix_dst;
    /* out: fast[i] = 1 for a record decoded here, 0 for one left to the per-record decoder;
     * the columns hold the decoded records only, in order */
    uint8_t *fast;
    rmq_strings body, topics, tags, key_items, prop_names, prop_values, born_host, store_host;
    uint8_t *tags_valid; /* validity bitmap of tags (bit k: record k has TAGS) */
    int32_t *key_lists;  /* rows + 1: keys of record k are key_items[key_lists[k]..] */
    int32_t *prop_maps;  /* rows + 1: pairs of record k */
    uint8_t *msg_id;     /* 32 hex digits per record */
    int64_t rows;        /* records decoded */
    int64_t bad;         /* index of the first damaged record, -1 */
    int64_t bad_value;   /* the value found there */
    int32_t bad_code;    /* RMQ_BAD_* */
    int32_t pad3_;
} rmq_decode_args;

enum {
    RMQ_WANT_BODY = 1,
    RMQ_WANT_TOPIC = 2, /* read (and UTF-8 check) each record's topic: topic_len < 0 */
    RMQ_WANT_TAGS = 4,
    RMQ_WANT_KEYS = 8,
    RMQ_WANT_PROPS = 16,
    RMQ_WANT_MSGID = 32,
    RMQ_WANT_BORN_HOST = 64,
    RMQ_WANT_STORE_HOST = 128,
    RMQ_CHECK_CRC = 256,
};
enum {
    RMQ_BAD_MAGIC = 1,
    RMQ_BAD_TOTAL = 2,
    RMQ_BAD_PHYS = 3,
    RMQ_BAD_QUEUE = 4,
    RMQ_BAD_CRC = 5,
    RMQ_BAD_QOFF = 6
};

/* The CRC-32 of each piece buf[start[i] : start[i] + len[i]]. */
void rmq_crc32(const uint8_t *buf, const int64_t *start, const int64_t *len, int64_t n,
               uint32_t *out);
/* 1 when every piece is strict UTF-8; else 0 and *first_bad = the first piece that is not. */
int rmq_utf8_check(const uint8_t *buf, const int64_t *start, const int64_t *len, int64_t n,
                   int64_t *first_bad);
/* Decode the common records among a->n records (see _kernel.c); 0, 1 (damage) or 2. */
int32_t rmq_decode(rmq_decode_args *a);

/* What ends rmq_walk (engine/format/commitlog.py's STEP_KINDS, and two of its own). */
enum {
    RMQ_WALK_END = 0,        /* the records end exactly at len */
    RMQ_WALK_BLANK = 1,      /* an END_OF_FILE record */
    RMQ_WALK_ZEROS = 2,      /* a zero header: the written data ends */
    RMQ_WALK_TORN = 3,       /* len ends inside a header */
    RMQ_WALK_NOT_RECORD = 4, /* another magic, or TOTALSIZE <= 0 */
    RMQ_WALK_PAST_END = 5,   /* a record that runs past len */
    RMQ_WALK_FULL = 6        /* cap records found: call again from *end */
};

/* Walk CommitLog records in buf[0..len) from 0 by TOTALSIZE, as
 * engine.format.commitlog.walk_segment: record i starts at starts[i] and is sizes[i] bytes
 * (at most cap of them); returns their count, *end = where the walk stopped, *kind = why. */
int64_t rmq_walk(const uint8_t *buf, int64_t len, uint32_t magic_v1, uint32_t magic_v2,
                 uint32_t magic_blank, int64_t *starts, int64_t *sizes, int64_t cap,
                 int64_t *end, int32_t *kind);

enum { JL_INT = 0, JL_STR = 1, JL_STRLIST = 2, JL_MAP = 3, JL_BODY = 4 };

/* JSON lines of rows [first, n) (see _kernel.c); returns the first row not written. */
int64_t rmq_json_lines(int64_t first, int64_t n, int32_t nf, const int32_t *kind,
                       const uint8_t *lit, const int32_t *lit_off, void *const *p0,
                       void *const *p1, void *const *p2, void *const *p3, void *const *p4,
                       int64_t *line_end, uint8_t *out, int64_t cap, int64_t *at);

#endif
