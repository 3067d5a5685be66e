"""Build the columnar decoder's compiled core, ``_kernel.c``, as the extension module
``engine.read._kernel_cffi`` (cffi, API out-of-line mode).

Who runs it:

- the build backend: ``setup.py`` names :data:`ffibuilder` in ``cffi_modules``, so ``pip
  install .``, ``pip wheel .`` and the editable ``pip install -e .`` (``make venv``) compile
  it; a wheel carries the binary and needs no compiler where it is installed;
- ``make kernel`` (``python -m rmqfs.engine.read._kernel_build``): rebuilds the in-tree module after
  ``_kernel.c`` or ``_kernel.h`` changed, with the venv's own setuptools (no ``pyproject.toml``
  involved); ``make sanitize`` builds it with ``CFLAGS``/``LDFLAGS`` for AddressSanitizer and
  UndefinedBehaviorSanitizer into a directory of its own (``--out``).

Why cffi in API mode (rather than ctypes, or a plain setuptools ``Extension`` with a
hand-written Python mirror): :data:`CDEF` below is compiled together with ``_kernel.h``, the
header ``_kernel.c`` implements, so the C compiler checks every field and signature the Python
side uses. A field, function or constant the cdef names that the header lacks, or a pointer of
another type, fails the build (``-Werror=incompatible-pointer-types``); an integer field of
another width or a missing field makes the load fail (cffi compares the offsets and sizes the
compiler computed with the cdef's), and :func:`engine.read.kernel.load` then falls back to the
per-record decoder with its warning. ``tests/engine/test_kernel_build.py`` changes one side
and sees the build or the load fail. The cdef is the header's declarations without comments
(pycparser reads no preprocessor): a change to one is a change to the other.

``rmq_source_digest()`` returns the SHA-256 (16 hex digits) of ``_kernel.c`` and
``_kernel.h`` as they were compiled: ``engine.read.kernel`` refuses an in-tree module built
from an older source (``make kernel`` rebuilds it).
"""

from __future__ import annotations

import hashlib
import os
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = "rmqfs.engine.read._kernel_cffi"
SOURCES = ("_kernel.c", "_kernel.h", "_putobj.c")

#: What Python uses of _kernel.h, declared once more for cffi (checked by the compiler).
CDEF = """
typedef struct {
    int32_t *offsets;
    uint8_t *data;
    int64_t cap;
    int64_t len;
} rmq_strings;

typedef struct {
    const uint8_t *buf;
    const int64_t *pos;
    const int64_t *size;
    const int64_t *phys;
    const int64_t *qoff;
    int64_t n;
    int32_t queue_id;
    int32_t topic_len;
    const uint8_t *topic;
    int32_t want;
    int32_t max_pairs;
    int32_t at_total, at_magic, at_crc, at_queue, at_phys, at_sysflag, at_born_host;
    int32_t at_store_host, at_body_len, fixed, tl_size, pl_size, at_qoff, pad0_;
    int64_t max_topic, max_props;
    uint32_t magic_v1, magic_v2, rare_flags, crc_mask;
    uint8_t pair_sep, name_sep, key_sep, pad_;
    const uint8_t *tag_name;
    const uint8_t *keys_name;
    int32_t tag_len, keys_len;
    int32_t nfix, pad2_;
    const int32_t *fix_at;
    const int32_t *fix_width;
    void *const *fix_dst;
    uint8_t *fast;
    rmq_strings body, topics, tags, key_items, prop_names, prop_values, born_host, store_host;
    uint8_t *tags_valid;
    int32_t *key_lists;
    int32_t *prop_maps;
    uint8_t *msg_id;
    int64_t rows;
    int64_t bad;
    int64_t bad_value;
    int32_t bad_code;
    int32_t pad3_;
} rmq_decode_args;

enum {
    RMQ_WANT_BODY, RMQ_WANT_TOPIC, RMQ_WANT_TAGS, RMQ_WANT_KEYS, RMQ_WANT_PROPS,
    RMQ_WANT_MSGID, RMQ_WANT_BORN_HOST, RMQ_WANT_STORE_HOST, RMQ_CHECK_CRC, ...
};
enum { RMQ_BAD_MAGIC, RMQ_BAD_TOTAL, RMQ_BAD_PHYS, RMQ_BAD_QUEUE, RMQ_BAD_CRC, RMQ_BAD_QOFF, ... };
enum { RMQ_WALK_END, RMQ_WALK_BLANK, RMQ_WALK_ZEROS, RMQ_WALK_TORN, RMQ_WALK_NOT_RECORD,
       RMQ_WALK_PAST_END, RMQ_WALK_FULL, RMQ_WALK_FILLER, RMQ_WALK_DAMAGED, RMQ_WALK_COMMITTED,
       ... };
enum { JL_INT, JL_STR, JL_STRLIST, JL_MAP, JL_BODY, ... };

void rmq_crc32(const uint8_t *buf, const int64_t *start, const int64_t *len, int64_t n,
               uint32_t *out);
int rmq_utf8_check(const uint8_t *buf, const int64_t *start, const int64_t *len, int64_t n,
                   int64_t *first_bad);
int32_t rmq_decode(rmq_decode_args *a);
int64_t rmq_walk(const uint8_t *buf, int64_t len, uint32_t magic_v1, uint32_t magic_v2,
                 uint32_t magic_blank, int64_t *starts, int64_t *sizes, int64_t cap,
                 int64_t *end, int32_t *kind);
int64_t rmq_walk_entries(const uint8_t *buf, int64_t len, int64_t base, int64_t committed,
                         const int32_t *layout, uint32_t magic_v1, uint32_t magic_v2,
                         int64_t *state, int64_t *starts, int64_t *sizes, int64_t *entries,
                         int64_t cap, int64_t *end, int32_t *kind);
int64_t rmq_json_lines(int64_t first, int64_t n, int32_t nf, const int32_t *kind,
                       const uint8_t *lit, const int32_t *lit_off, void *const *p0,
                       void *const *p1, void *const *p2, void *const *p3, void *const *p4,
                       int64_t *line_end, uint8_t *out, int64_t cap, int64_t *at);

typedef struct {
    int64_t n;
    const uint8_t *bodies;
    const uint8_t *const *body_at;
    const int64_t *body_end;
    const int32_t *topic_of;
    const int32_t *head_of;
    const int32_t *queue_of;
    const int64_t *born;
    const uint8_t *born_host;
    const int32_t *flag;
    const uint8_t *uniq;
    int32_t uniq_len, ntopics;
    const uint8_t *topic_field;
    const int32_t *topic_field_end;
    const uint32_t *topic_magic;
    const int64_t *topic_base;
    const uint32_t *topic_hash;
    const int32_t *topic_nwq;
    int64_t *topic_rr;
    const int32_t *topic_slot;
    const uint8_t *heads;
    const int32_t *head_end;
    const int64_t *head_tags_code;
    const int32_t *head_keys_at;
    const int32_t *head_keys_len;
    const uint8_t *uniq_name;
    int32_t uniq_name_len;
    uint8_t prop_end, key_sep, pad0_[2];
    uint8_t store_host[8], default_born[8];
    int64_t now, start, file_size, max_total;
    int64_t max_props;
    uint32_t magic_blank, crc_mask;
    int32_t at_total, at_magic, at_crc, at_queue, at_flag, at_qoff, at_phys, at_born;
    int32_t at_born_host, at_store_ts, at_store_host, at_body_len, fixed, want_index;
    int32_t nslots;
    int32_t together;
    int64_t *slot_next;
    uint8_t *out;
    int64_t cap;
    int64_t *pos;
    int32_t *size;
    int32_t *queue;
    int64_t *qoff;
    uint8_t *units;
    int64_t *slot_units;
    int64_t *unit_fill;
    int64_t *chunks;
    uint8_t *msg_id;
    uint8_t msg_id_prefix[16];
    int64_t nchunks;
    int64_t *idx;
    int64_t idx_cap, nidx;
    int64_t end;
    int64_t need;
    int64_t bad;
    int64_t bad_value;
    int32_t bad_code;
    int32_t pad2_;
    const uint8_t *keys;
    const int32_t *keys_len;
    const uint8_t *keys_name;
    int32_t keys_name_len;
    int32_t pad3_;
} rmq_put_args;
enum { RMQ_PUT_PROPS, RMQ_PUT_TOO_LARGE, RMQ_PUT_SEGMENT, RMQ_PUT_BATCH, ... };
int32_t rmq_put(rmq_put_args *a);
int32_t rmq_put_one(rmq_put_args *a, int64_t now, int64_t start, const char *head,
                    int32_t head_len, int64_t tags_code, int32_t keys_at, int32_t keys_len,
                    const char *body, int64_t body_len, const char *uniq, int32_t uniq_len,
                    int32_t queue, int64_t qnext, int64_t born, int32_t flag,
                    const char *born_host, int32_t want_index, uint8_t *dst, int64_t room,
                    int64_t *out);
typedef struct {
    int64_t nslots;
    const int64_t *entries;
    int64_t first, n;
    int32_t count;
    int32_t slot_count;
    int32_t invalid_index, item_size;
    int32_t at_hash, at_phy, at_diff, at_prev;
    int64_t begin_ts, begin_phy;
    int64_t end_ts, end_phy;
} rmq_index_args;
typedef struct {
    uint8_t *map;
    int64_t map_len;
    int64_t items_base;
    const uint8_t *chunks;
    int64_t nchunks, chunk_size;
    int32_t header_size, slot_size;
    int32_t at_begin_ts, at_end_ts, at_begin_phy, at_end_phy, at_slot_count, at_count;
    int64_t *need;
    int64_t need_cap, nneed;
} rmq_index_map;
int64_t rmq_index_put_mapped(rmq_index_args *a, rmq_index_map *m);
typedef struct {
    const uint8_t *slots;
    int64_t nslots;
    const uint8_t *items;
    int64_t count;
    int32_t item_size, at_hash, at_phy, at_diff, at_prev, pad_;
    int64_t *newest;
    int32_t negative, bad_prev, cross_bucket, out_of_order;
    int64_t slot, slot_value, newest_value, used, last_phy;
} rmq_index_check_args;
void rmq_index_check(rmq_index_check_args *a);
typedef struct {
    const uint8_t *buf;
    int64_t len;
    const int64_t *pos;
    const int64_t *phys;
    const int64_t *store_ts;
    const uint32_t *prefix_hash;
    int64_t n;
    int64_t first;
    int32_t at_total, at_magic, at_sysflag, at_body_len, host_v6_extra, pad0_;
    uint32_t magic_v1, magic_v2, born_v6, store_v6, tx_mask, tx_rollback;
    uint8_t pair_sep, name_sep, key_sep, pad1_;
    int32_t uniq_len, keys_len, pad2_;
    const uint8_t *uniq_name;
    const uint8_t *keys_name;
    int64_t *entries;
    int64_t cap;
    int64_t nout;
    int64_t done;
    int64_t bad;
} rmq_keys_args;
int64_t rmq_index_keys(rmq_keys_args *a);

const char *rmq_source_digest(void);
"""

CFLAGS = ["-O3", "-std=gnu99", "-Wall", "-Werror=incompatible-pointer-types"]


def source_digest(directory: str = HERE) -> str:
    """SHA-256 (16 hex digits) of ``_kernel.c`` and ``_kernel.h`` in ``directory``."""
    h = hashlib.sha256()
    for name in SOURCES:
        with open(os.path.join(directory, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def make_builder(cdef: str = CDEF, header: str = "_kernel.h", absolute: bool = False) -> FFI:
    """The cffi builder of the module (``cdef`` and ``header`` replaceable for the tests that
    show a drift failing). Source paths are relative to the working directory (setuptools
    wants them so: the project's root under setup.py), or ``absolute`` for ``compile()``,
    which compiles in a directory of its own."""
    ffi = FFI()
    ffi.cdef(cdef)
    rel = os.path.abspath if absolute else os.path.relpath
    srcs = [rel(os.path.join(HERE, n)) for n in SOURCES if n.endswith(".c")]
    ffi.set_source(
        MODULE,
        f'#include "{header}"\n'
        f'const char *rmq_source_digest(void) {{ return "{source_digest()}"; }}\n',
        sources=srcs,
        include_dirs=[HERE],
        libraries=["z"],
        extra_compile_args=CFLAGS,
        depends=[rel(os.path.join(HERE, n)) for n in SOURCES],
        # _putobj.c reads Message objects through CPython's full API (slot offsets), so the
        # module is built for this interpreter, not for the limited API (no abi3 tag)
        py_limited_api=False,
    )
    return ffi


ffibuilder = make_builder()


def build(out_dir: str, tmp_dir: str, builder: FFI | None = None) -> str:
    """Compile the module (``builder``: :func:`make_builder`'s) into ``out_dir``/``engine/read/``
    (generated C and objects in ``tmp_dir``); returns the path of the shared object.
    ``CFLAGS``/``LDFLAGS`` in the environment are added (the sanitizer build). Raises cffi's
    VerificationError with the compiler's message."""
    import shutil

    os.makedirs(tmp_dir, exist_ok=True)
    builder = builder or make_builder(absolute=True)
    built = builder.compile(tmpdir=tmp_dir, verbose=False)
    dest = os.path.join(out_dir, "engine", "read")
    os.makedirs(dest, exist_ok=True)
    built_name = os.path.basename(built)
    target = os.path.join(dest, built_name)
    part = target + ".part"
    shutil.copyfile(built, part)
    os.replace(part, target)  # a process loading it never sees half a file
    for name in os.listdir(dest):  # another build's (pip's abi3 name): not loaded instead
        if name.startswith("_kernel_cffi.") and name.endswith(".so") and name != built_name:
            os.unlink(os.path.join(dest, name))
    return target


def main(argv: list[str]) -> int:
    """``python -m rmqfs.engine.read._kernel_build [--if-stale | --out DIR]``: build the module
    beside this file (``--if-stale``: only when it is missing or was built from another
    source) or under ``DIR/engine/read``; prints its path."""
    root = os.path.dirname(os.path.dirname(HERE))
    out = root
    if argv == ["--if-stale"]:
        from rmqfs.engine.read import kernel

        try:
            print(kernel.compiled_module().__file__)
            return 0
        except ImportError:
            pass
    elif argv[:1] == ["--out"] and len(argv) == 2:
        out = os.path.abspath(argv[1])
    elif argv:
        print(
            "usage: python -m rmqfs.engine.read._kernel_build [--if-stale | --out DIR]",
            file=sys.stderr,
        )
        return 2
    print(build(out, os.path.join(out, "build", "kernel")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
