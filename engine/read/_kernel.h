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
    RMQ_WALK_FULL = 6,       /* cap records found: call again from *end */
    RMQ_WALK_FILLER = 7,     /* a DLedger filler (rmq_walk_entries) */
    RMQ_WALK_DAMAGED = 8,    /* an entry DLedgerMmapFileStore.recover refuses, or its record */
    RMQ_WALK_COMMITTED = 9   /* an entry past committedIndex (rmq_walk_entries) */
};

/* Walk CommitLog records in buf[0..len) from 0 by TOTALSIZE, as
 * engine.format.commitlog.walk_segment: record i starts at starts[i] and is sizes[i] bytes
 * (at most cap of them); returns their count, *end = where the walk stopped, *kind = why. */
int64_t rmq_walk(const uint8_t *buf, int64_t len, uint32_t magic_v1, uint32_t magic_v2,
                 uint32_t magic_blank, int64_t *starts, int64_t *sizes, int64_t cap,
                 int64_t *end, int32_t *kind);

/* Walk a DLedger CommitLog's entries in buf[0..len) from 0 (base: the CommitLog offset of
 * buf[0]), as engine.format.commitlog.entry_step and record_step under CommitLog.scan_raw do
 * (DLedgerCommitLog.checkMessageAndReturnSize, DLedgerMmapFileStore.recover): each entry's
 * header checked as engine.format.dledger.entry_problem checks it (magic, pos, size = bodyLen +
 * header, index = the last + 1, term never lower), its record a V1/V2 record of exactly bodyLen
 * bytes. Record i starts at starts[i] (the entry + header) and is sizes[i] bytes (at most cap),
 * its entry's index and term are entries[2i], entries[2i + 1];
 * state[0], state[1]: the last entry's index and term (in/out, -1 -1 before the first); layout:
 * the header's size, the positions of its size, index, term, pos and bodyLen fields, the entry
 * and the filler magic (engine/format/dledger.py's ENTRY_HEADER). An entry past committed ends
 * the walk (RMQ_WALK_COMMITTED). Returns the count, *end = where the walk stopped (an entry's
 * start), *kind = why (RMQ_WALK_*: END, FILLER, ZEROS, TORN, PAST_END, DAMAGED, COMMITTED or
 * FULL). */
int64_t rmq_walk_entries(const uint8_t *buf, int64_t len, int64_t base, int64_t committed,
                         const int32_t *layout, uint32_t magic_v1, uint32_t magic_v2,
                         int64_t *state, int64_t *starts, int64_t *sizes, int64_t *entries,
                         int64_t cap, int64_t *end, int32_t *kind);

enum { JL_INT = 0, JL_STR = 1, JL_STRLIST = 2, JL_MAP = 3, JL_BODY = 4 };

/* JSON lines of rows [first, n) (see _kernel.c); returns the first row not written. */
int64_t rmq_json_lines(int64_t first, int64_t n, int32_t nf, const int32_t *kind,
                       const uint8_t *lit, const int32_t *lit_off, void *const *p0,
                       void *const *p1, void *const *p2, void *const *p3, void *const *p4,
                       int64_t *line_end, uint8_t *out, int64_t cap, int64_t *at);

/* rmq_put: a batch of plain records (engine/service/putmessage.py's put_plain) encoded as
 * engine/format/message.py lays them out (CommitLog.DefaultAppendMessageCallback.doAppend and
 * MessageExtEncoder): V1 or V2 magic per topic, IPv4 hosts, sysFlag 0, properties = the
 * message's head (TAGS, KEYS, SHARDING_KEY items) then UNIQ_KEY; body CRC-32 & crc_mask. Record
 * i goes at the CommitLog offset pos[i]; a record that does not fit before the end of its
 * segment (with 8 bytes to spare) is preceded by the END_OF_FILE blank and starts the next.
 * With together (a MessageBatch, CommitLog.DefaultAppendMessageCallback.doAppend(MessageExtBatch))
 * the n records go whole into one segment: the blank comes before the first when they do not
 * all fit in the rest of it, and a batch larger than a segment is refused (RMQ_PUT_BATCH).
 * The layout's field offsets come from engine/format/message.py's FIXED_V4_FIELDS. */
typedef struct {
    int64_t n;
    const uint8_t *bodies;    /* the bodies one after another (when body_at is NULL) */
    const uint8_t *const *body_at; /* n: where each body is, NULL: in bodies */
    const int64_t *body_end;  /* n: body i ends at body_end[i], starts at body_end[i - 1] (0) */
    const int32_t *topic_of;  /* n: the message's topic (index into the topic arrays) */
    const int32_t *head_of;   /* n: its property items before UNIQ_KEY (index into heads) */
    const int32_t *queue_of;  /* n: its queueId, -1: round robin over the topic's queues */
    const int64_t *born;      /* n: bornTimestamp, 0 (or NULL for all): now */
    const uint8_t *born_host; /* 8 bytes a message (IPv4, int32 port), NULL: default_born */
    const int32_t *flag;      /* n: flag, NULL: 0 */
    const uint8_t *uniq;      /* n * uniq_len: the UNIQ_KEY values (ASCII) */
    int32_t uniq_len, ntopics;
    /* per topic */
    const uint8_t *topic_field;     /* TOPIC fields (length + name) one after another */
    const int32_t *topic_field_end; /* where each ends */
    const uint32_t *topic_magic;    /* MAGICCODE of its records (V1/V2) */
    const int64_t *topic_base;      /* calMsgLength with empty body and properties */
    const uint32_t *topic_hash;     /* Java hashCode of "topic#" */
    const int32_t *topic_nwq;       /* writeQueueNums */
    int64_t *topic_rr;              /* in/out: the next round-robin count */
    const int32_t *topic_slot;      /* queue q of topic t is slot topic_slot[t] + q */
    /* per head */
    const uint8_t *heads;
    const int32_t *head_end;
    const int64_t *head_tags_code; /* ConsumeQueue tagsCode */
    const int32_t *head_keys_at;   /* the KEYS value within the head */
    const int32_t *head_keys_len;  /* its length, 0: none */
    const uint8_t *uniq_name;      /* "UNIQ_KEY" + NAME_VALUE_SEPARATOR */
    int32_t uniq_name_len;
    uint8_t prop_end, key_sep, pad0_[2];
    /* the store */
    uint8_t store_host[8], default_born[8];
    int64_t now, start, file_size, max_total;
    int64_t max_props;
    uint32_t magic_blank, crc_mask;
    int32_t at_total, at_magic, at_crc, at_queue, at_flag, at_qoff, at_phys, at_born;
    int32_t at_born_host, at_store_ts, at_store_host, at_body_len, fixed, want_index;
    int32_t nslots;
    int32_t together; /* a MessageBatch: the n records kept whole in one segment */
    int64_t *slot_next; /* in/out: nslots, the next queue offset of each queue */
    /* out */
    uint8_t *out; /* the bytes to write, chunk by chunk */
    int64_t cap;
    int64_t *pos;        /* n: CommitLog offset of each record */
    int32_t *size;       /* n: its TOTALSIZE */
    int32_t *queue;      /* n: its queueId */
    int64_t *qoff;       /* n: its queue offset */
    uint8_t *units;      /* n * 20: ConsumeQueue units, slot by slot */
    int64_t *slot_units; /* nslots + 1: the units of slot s are units[slot_units[s]..[s + 1]) */
    int64_t *unit_fill;  /* nslots: scratch */
    int64_t *chunks;     /* 3 * (n + 1): CommitLog offset, out start, out end of each chunk */
    uint8_t *msg_id;     /* 33 * n: the offset msgId of each (msg_id_prefix + 16 hex digits), "\n" */
    uint8_t msg_id_prefix[16]; /* the store host's hex (MessageDecoder.createMessageId) */
    int64_t nchunks;
    int64_t *idx; /* 3 * idx_cap: IndexFile keyHash, phyOffset, storeTimestamp */
    int64_t idx_cap, nidx;
    int64_t end;  /* the CommitLog's end after the batch */
    int64_t need; /* bytes of out the batch takes */
    int64_t bad;  /* the first message refused (nothing is written then), -1 */
    int64_t bad_value;
    int32_t bad_code; /* RMQ_PUT_* */
    int32_t pad2_;
    /* each message's own KEYS (a batch whose messages have keys of their own: no head per
     * message): message i's KEYS item (keys_name, its value, prop_end) follows its head's
     * items, its value the next keys_len[i] bytes of keys; keys_len NULL: KEYS are in the
     * heads only */
    const uint8_t *keys;     /* the values one after another (UTF-8) */
    const int32_t *keys_len; /* n: the length of message i's value, -1: no KEYS item */
    const uint8_t *keys_name; /* "KEYS" + NAME_VALUE_SEPARATOR */
    int32_t keys_name_len;
    int32_t pad3_;
} rmq_put_args;

enum { RMQ_PUT_PROPS = 1, RMQ_PUT_TOO_LARGE = 2, RMQ_PUT_SEGMENT = 3, RMQ_PUT_BATCH = 4 };

/* 0: done; 1: message a->bad refused (a->bad_code), nothing changed; 2: out or idx too small
 * (a->need, a->nidx say how much), nothing changed; 3: a keys_len below -1 (message a->bad),
 * nothing changed. */
int32_t rmq_put(rmq_put_args *a);

/* rmq_put_one: rmq_put of one message, its values passed as arguments rather than through
 * one-element arrays, so that a single put costs one call instead of a dozen stores into the
 * struct (engine/service/putmessage.py's _put_one; DefaultMessageStore.putMessage). a holds
 * the tables of the message's topic (topic 0, a->nslots its queues, queue q in slot q) and
 * the store's values; its per-message fields (and topic_slot) are set here for the call and
 * given back their values before it returns. head[0..head_len): the property items before
 * UNIQ_KEY, the KEYS value at keys_at (keys_len bytes, 0: none); tags_code: its ConsumeQueue
 * tagsCode; queue: its queueId, whose next queue offset is qnext; born 0: now; born_host: 8
 * bytes, NULL: a->default_born. dst: where the record goes instead of a->out (the CommitLog
 * segment's mapping at start, room bytes there, of which it uses none past the segment's end:
 * it returns 2 and writes nothing when the record needs more, as one that starts the next
 * segment does); NULL: a->out, and room must be 0.
 * out[7]: the record's CommitLog offset, TOTALSIZE and queue
 * offset (0 unless it returns 0), the CommitLog's end after it, the bytes of a->out and the
 * index entries it takes (what rmq_put asks for when it returns 2), the chunks (2 when it
 * starts the next segment); out[3..6] mean nothing when it returns 1 or 3. Returns rmq_put's
 * codes, and 3 (nothing changed, out untouched) for a queue that is not one of a->nslots, a
 * length below 0 or above 2^29 (body_len: above a->max_total), KEYS outside the head, a NULL
 * buffer of a non-zero length (dst of room bytes included), a room below 0, a dst with a start
 * below 0 or a->file_size not above 0, or a NULL out. */
int32_t rmq_put_one(rmq_put_args *a, int64_t now, int64_t start, const char *head,
                    int32_t head_len, int64_t tags_code, int32_t keys_at, int32_t keys_len,
                    const char *body, int64_t body_len, const char *uniq, int32_t uniq_len,
                    int32_t queue, int64_t qnext, int64_t born, int32_t flag,
                    const char *born_host, int32_t want_index, uint8_t *dst, int64_t room,
                    int64_t *out);

/* The IndexFile items of n pre-hashed entries (entries[3 * (first + i)..]: keyHash (abs'ed,
 * IndexFile.indexKeyHashMethod), phyOffset, storeTimestamp), with the rules of
 * IndexFile.putKey: the slot's chain head (invalid when <= invalid_index or above count),
 * timeDiff in seconds from begin_ts, the first items setting begin_ts/begin_phy. The caller
 * has checked that n items fit (count + n <= indexNum). The item layout comes from
 * engine/format/indexfile.py's ITEM. */
typedef struct {
    int64_t nslots;
    const int64_t *entries;
    int64_t first, n;
    int32_t count;      /* in/out: indexCount */
    int32_t slot_count; /* in/out: hashSlotCount */
    int32_t invalid_index, item_size;
    int32_t at_hash, at_phy, at_diff, at_prev;
    int64_t begin_ts, begin_phy; /* in/out */
    int64_t end_ts, end_phy;     /* out: the last entry's */
} rmq_index_args;

/* rmq_index_put_mapped: the items of rmq_index_args into the IndexFile's own writable mapping
 * (IndexFile.putKey writes through its MappedByteBuffer), each chain head read from the slot
 * table in the mapping (big-endian, as stored): item by item, the item at items_base +
 * count * item_size, then its slot; the header fields (positions from
 * engine/format/indexfile.py's HEADER) last, so that a process killed between two stores
 * leaves slots naming written items only and a header counting only items its slots may
 * reach (a slot above the header's count reads as empty). A store into a hole
 * of the file would be a SIGBUS on a full disk: every chunk_size chunk under a write must be
 * allocated (chunks[c] != 0) first. */
typedef struct {
    uint8_t *map;           /* the file's mapping */
    int64_t map_len;        /* its length (bytes) */
    int64_t items_base;     /* where item 0 starts (after the header and the slot table) */
    const uint8_t *chunks;  /* nchunks: 1 where the file's blocks are allocated */
    int64_t nchunks, chunk_size;
    int32_t header_size, slot_size;
    int32_t at_begin_ts, at_end_ts, at_begin_phy, at_end_phy, at_slot_count, at_count;
    int64_t *need;          /* out: chunks to allocate first (up to need_cap of them) */
    int64_t need_cap, nneed;
} rmq_index_map;

/* n: written. -1: m->nneed chunks (m->need) must be allocated first; -2: a write would fall
 * outside the mapping or the chunk table. Nothing is written or changed when it returns < 0. */
int64_t rmq_index_put_mapped(rmq_index_args *a, rmq_index_map *m);

/* rmq_index_check: engine/format/indexfile.py's structure_findings in one pass over an
 * IndexFile's slots and items as stored (big-endian): which of its checks fail, and the first
 * slot that does not hold the newest item of its bucket (bucket = keyHash floor-mod nslots). */
typedef struct {
    const uint8_t *slots;  /* nslots big-endian int32 */
    int64_t nslots;
    const uint8_t *items;  /* items 1 .. count - 1, item_size bytes each */
    int64_t count;
    int32_t item_size, at_hash, at_phy, at_diff, at_prev, pad_;
    int64_t *newest;       /* scratch: nslots */
    /* out */
    int32_t negative, bad_prev, cross_bucket, out_of_order;
    int64_t slot, slot_value, newest_value, used, last_phy;
} rmq_index_check_args;

void rmq_index_check(rmq_index_check_args *a);

/* rmq_index_keys: the IndexFile entries that re-dispatching n stored records adds
 * (CommitLogDispatcherBuildIndex, IndexService.buildIndex; engine/service/indexservice.py's
 * IndexService.dispatch is the reference): for each record that is not a ROLLBACK,
 * "topic#UNIQ_KEY" when it has that property, then "topic#key" for each non-empty part of KEYS
 * split on key_sep, each as (IndexFile.indexKeyHashMethod of the Java hashCode, phyOffset,
 * storeTimestamp). The properties are read as MessageDecoder.string2messageProperties (and
 * engine/format/message.py's decode_properties) reads them: pairs split on pair_sep, a pair
 * kept when its first name_sep lies strictly inside it, the last value of a name kept. The
 * records come from a walk that checked them; still, every length is checked against the
 * record's TOTALSIZE and buf. A record the call cannot read as the reference would (properties
 * not strict UTF-8, a length outside the record) stops it: bad is set, and the caller decodes
 * that record and calls again from the next. */
typedef struct {
    const uint8_t *buf;
    int64_t len;                 /* bytes of buf */
    const int64_t *pos;          /* n: where each record starts in buf */
    const int64_t *phys;         /* n: its CommitLog offset */
    const int64_t *store_ts;     /* n: its STORETIMESTAMP (epoch ms) */
    const uint32_t *prefix_hash; /* n: the Java hashCode of "topic#" of its topic */
    int64_t n;
    int64_t first;               /* the record to start from */
    /* engine/format/message.py's layout of a record with IPv4 hosts */
    int32_t at_total, at_magic, at_sysflag, at_body_len, host_v6_extra, pad0_;
    uint32_t magic_v1, magic_v2, born_v6, store_v6, tx_mask, tx_rollback;
    uint8_t pair_sep, name_sep, key_sep, pad1_;
    int32_t uniq_len, keys_len, pad2_;
    const uint8_t *uniq_name; /* "UNIQ_KEY" */
    const uint8_t *keys_name; /* "KEYS" */
    /* out */
    int64_t *entries; /* 3 * cap: keyHash, phyOffset, storeTimestamp */
    int64_t cap;
    int64_t nout; /* entries written */
    int64_t done; /* the first record not done: n, or where room ran out, or bad */
    int64_t bad;  /* -1, or the record the call cannot read */
} rmq_keys_args;

/* Returns a->done. */
int64_t rmq_index_keys(rmq_keys_args *a);

#endif
