/* The put path's reader of Python objects: a batch of Message objects vouched for, and its
 * columns read, in one C pass (engine/service/putmessage.py, ``put_messages``); and the
 * single put's lane (``Lane``, at the end of this file), which puts one message's record in
 * one call.
 *
 * This file is compiled into the kernel's shared object (engine/read/_kernel_build.py names
 * it among the sources) and is a second extension module in it, ``_putobj``, with its own
 * ``PyInit__putobj`` (CPython's "multiple modules in one library": engine/read/kernel.py
 * loads it from the kernel's file under that name). Unlike _kernel.c, which cffi hands only
 * C buffers, it reads CPython objects, so it is built against the full (not the limited) API
 * of the interpreter it is compiled for.
 *
 * What it vouches for, and nothing more: a batch whose every item is exactly the configured
 * ``Message`` class (a dataclass with slots; a subclass may compute a field and is never
 * vouched for), with every field of the common case (RocketMQ's
 * ``DefaultMessageStore.putMessages`` of a producer's plain messages: a topic not reserved, a
 * bytes body, tags already checked or none, keys a ``str`` without a control character or a
 * lone surrogate, a queueId None or an int, a flag an int in a Java int's range, sysFlag 0,
 * every other field at its default). Anything else answers None, and the caller checks and
 * puts the batch field by field as before: this module decides no refusal, so it can only
 * make a put faster, never change what it does. tests/engine/test_putobj.py holds it against
 * the Python rules (engine/service/validation.py) on generated batches, under the sanitizer
 * build too.
 *
 * It trusts nothing it is handed: every argument's type is checked, every slot may be unset
 * (NULL), every int may be of any size. It reads exact str, bytes and int only, and looks
 * up exact str in sets that hold exact str only (validation.check_tags keeps no subclass),
 * which runs no Python code; still, everything it reads is held from the moment it is read,
 * and the batch is checked again after each lookup and each allocation (a garbage collection
 * may run finalizers), so that Python code run there could only make it answer None.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include "_kernel.h"

/* The fields, in the order of engine/service/putmessage.py's _PLAIN_FIELDS, then the others
 * (each of which must be its default, by identity). */
enum {
    F_TOPIC,
    F_BODY,
    F_TAGS,
    F_KEYS,
    F_QUEUE_ID,
    F_SHARDING_KEY,
    F_BORN_TIMESTAMP,
    F_BORN_HOST,
    F_FLAG,
    F_PROPERTIES,
    F_SYS_FLAG,
    N_PLAIN,
    MAX_FIELDS = 32
};

static PyTypeObject *message_type; /* strong reference; NULL until configure() */
static PyObject *field_name[MAX_FIELDS];  /* strong references */
static PyObject *field_descr[MAX_FIELDS]; /* the slots' member descriptors, strong references */
static Py_ssize_t field_offset[MAX_FIELDS];
static PyObject *field_default[MAX_FIELDS]; /* strong references, [N_PLAIN, n_fields) */
static int n_fields;

/* Whether the code point c is one check_keys refuses: a control character (C0, DEL, C1) or a
 * lone surrogate (validation._BAD_CHAR: [\x00-\x1f\x7f-\x9f\ud800-\udfff]). */
static inline int bad_char(Py_UCS4 c)
{
    return c < 0x20 || (c >= 0x7f && c <= 0x9f) || (c >= 0xd800 && c <= 0xdfff);
}

/* 1 when the exact str s has no bad character, 0 when it has one. */
static int clean_text(PyObject *s)
{
    Py_ssize_t len;
    int kind;
    const void *data;
    if (PyUnicode_READY(s) < 0) { /* (a legacy string of the old C API: made canonical) */
        PyErr_Clear();
        return 0;
    }
    len = PyUnicode_GET_LENGTH(s);
    kind = PyUnicode_KIND(s);
    data = PyUnicode_DATA(s);
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *p = data;
        for (Py_ssize_t i = 0; i < len; i++)
            if (p[i] < 0x20 || (p[i] >= 0x7f && p[i] <= 0x9f))
                return 0;
        return 1;
    }
    for (Py_ssize_t i = 0; i < len; i++)
        if (bad_char(PyUnicode_READ(kind, data, i)))
            return 0;
    return 1;
}

/* v's value when it is an exact int in [lo, hi), else *ok = 0. */
static long long int_in(PyObject *v, long long lo, long long hi, int *ok)
{
    int overflow = 0;
    long long x;
    if (!PyLong_CheckExact(v)) {
        *ok = 0;
        return 0;
    }
    x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        *ok = 0;
        return 0;
    }
    if (x < lo || x >= hi)
        *ok = 0;
    return x;
}

/* The KEYS values of a column (a tuple of n items) as putmessage._own_keys gives them:
 * (the UTF-8 values one after another, each one's length in bytes as int32 (-1 for None or
 * ""), the spaces among them); None when every item is None; False when it cannot (an item
 * neither None nor an exact str, one UTF-8 cannot encode: a lone surrogate, 2 GiB or more).
 * No rule is checked here (vouch checks the client's; the broker's own puts have none).
 * NULL with an exception only for a memory error. */
static PyObject *keys_utf8(PyObject *const *keys, Py_ssize_t n)
{
    Py_ssize_t total = 0, spaces = 0, none = 0;
    PyObject *blob, *lens, *out;
    char *b;
    int32_t *l;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = keys[i];
        Py_ssize_t size;
        const char *u;
        if (k == Py_None) {
            none++;
            continue;
        }
        if (!PyUnicode_CheckExact(k))
            Py_RETURN_FALSE;
        u = PyUnicode_AsUTF8AndSize(k, &size); /* cached in the str; ASCII: its own data */
        if (u == NULL) {
            if (PyErr_ExceptionMatches(PyExc_MemoryError))
                return NULL;
            PyErr_Clear();
            Py_RETURN_FALSE;
        }
        total += size;
        if (total >= ((Py_ssize_t)1 << 31))
            Py_RETURN_FALSE;
        for (Py_ssize_t j = 0; j < size; j++)
            spaces += u[j] == ' ';
    }
    if (none == n)
        Py_RETURN_NONE;
    blob = PyBytes_FromStringAndSize(NULL, total);
    lens = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(int32_t)));
    if (blob == NULL || lens == NULL) {
        Py_XDECREF(blob);
        Py_XDECREF(lens);
        return NULL;
    }
    b = PyBytes_AS_STRING(blob);
    l = (int32_t *)PyBytes_AS_STRING(lens);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = keys[i];
        Py_ssize_t size = 0;
        const char *u;
        if (k == Py_None || PyUnicode_GET_LENGTH(k) == 0) {
            l[i] = -1;
            continue;
        }
        u = PyUnicode_AsUTF8AndSize(k, &size); /* cached by the pass above */
        if (u == NULL || size > total - (b - PyBytes_AS_STRING(blob))) {
            Py_DECREF(blob);
            Py_DECREF(lens);
            if (u == NULL)
                return NULL;
            PyErr_SetString(PyExc_RuntimeError, "a key changed while it was read");
            return NULL;
        }
        memcpy(b, u, (size_t)size);
        b += size;
        l[i] = (int32_t)size;
    }
    out = Py_BuildValue("(NNn)", blob, lens, spaces);
    return out;
}

/* keys_utf8(keys): keys a tuple or a list. */
static PyObject *py_keys_utf8(PyObject *self, PyObject *keys)
{
    (void)self;
    if (PyTuple_CheckExact(keys))
        return keys_utf8(((PyTupleObject *)keys)->ob_item, PyTuple_GET_SIZE(keys));
    if (PyList_CheckExact(keys)) /* (nothing read runs Python code: the list keeps its items) */
        return keys_utf8(((PyListObject *)keys)->ob_item, PyList_GET_SIZE(keys));
    Py_RETURN_FALSE;
}

/* 1 when every field of the configured class is still the slot configure() found, read by
 * the generic attribute lookup (a class attribute set since, a property over a field, or a
 * __getattribute__, would be read through and not from the slot: then 0, and nothing is
 * vouched for). A dict lookup of an exact str in a type's dict runs no Python code. */
static int fields_unchanged(void)
{
    PyObject *dict = message_type->tp_dict;
    /* (a __getattribute__ set on the class reads every field through Python code) */
    if (dict == NULL || message_type->tp_getattro != PyObject_GenericGetAttr)
        return 0;
    for (int f = 0; f < n_fields; f++) {
        PyObject *d = PyDict_GetItemWithError(dict, field_name[f]);
        if (d != field_descr[f]) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* Whether a set lookup may have run Python code that changed the batch: the list no longer
 * holds n items, or m at i. (The sets the put path passes hold exact str only, whose
 * comparisons run no Python code; a set handed in with other objects could, and then
 * nothing read before the lookup is trusted.) */
static inline int batch_changed(PyObject *messages, Py_ssize_t n, Py_ssize_t i, PyObject *m)
{
    /* (no list: one message, held by the caller, vouched for by what was read of it) */
    return messages != NULL && (PyList_GET_SIZE(messages) != n || PyList_GET_ITEM(messages, i) != m);
}

/* 1 when the exact str key is in the set, 0 when not or on an error (cleared). */
static int in_set(PyObject *set, PyObject *key)
{
    int r = PySet_Contains(set, key);
    if (r < 0) {
        PyErr_Clear();
        return 0;
    }
    return r;
}

/* Message i of the list into the columns at row i (``cols``), or, without a list
 * (``messages`` NULL), the message ``one`` into a new tuple of its plain fields (``*row``);
 * 0: not vouched for. Every value read is held (a strong reference) from the moment it is
 * read, the message too, so that nothing a set lookup might run can free what is used after
 * it; ``last_*`` are held references to the last topic and tag vouched for (their lookups
 * are skipped for the same object). */
static int vouch_one(PyObject *messages, Py_ssize_t n, Py_ssize_t i, PyObject **cols,
                     PyObject *good_tags, PyObject *banned_topics, PyObject **last_topic,
                     PyObject **last_tags, PyObject *one, PyObject **row)
{
    PyObject *m, *v[MAX_FIELDS] = {NULL};
    int ok = 1, got = 0, f;
    if (messages != NULL && PyList_GET_SIZE(messages) != n)
        return 0;
    m = messages != NULL ? PyList_GET_ITEM(messages, i) : one;
    if (Py_TYPE(m) != message_type)
        return 0;
    Py_INCREF(m);
    for (f = 0; f < n_fields; f++) {
        v[f] = *(PyObject **)((char *)m + field_offset[f]);
        if (v[f] == NULL)
            goto done; /* a slot never set (deleted): the Python path says what is wrong */
        Py_INCREF(v[f]);
        got = f + 1;
    }
    for (f = N_PLAIN; f < n_fields; f++)
        if (v[f] != field_default[f])
            goto done;
    if (!PyUnicode_CheckExact(v[F_TOPIC]) || !PyBytes_CheckExact(v[F_BODY]))
        goto done;
    if (v[F_TOPIC] != *last_topic) {
        if (in_set(banned_topics, v[F_TOPIC]) || batch_changed(messages, n, i, m))
            goto done;
        Py_XSETREF(*last_topic, Py_NewRef(v[F_TOPIC]));
    }
    if (v[F_TAGS] != Py_None) {
        if (!PyUnicode_CheckExact(v[F_TAGS]) || PyUnicode_READY(v[F_TAGS]) < 0) {
            PyErr_Clear();
            goto done;
        }
        if (PyUnicode_GET_LENGTH(v[F_TAGS]) && v[F_TAGS] != *last_tags) {
            /* a tag not checked before: check_tags decides */
            if (!in_set(good_tags, v[F_TAGS]) || batch_changed(messages, n, i, m))
                goto done;
            Py_XSETREF(*last_tags, Py_NewRef(v[F_TAGS]));
        }
    }
    if (v[F_KEYS] != Py_None && (!PyUnicode_CheckExact(v[F_KEYS]) || !clean_text(v[F_KEYS])))
        goto done; /* a list of keys (the Python path joins it), a character to refuse */
    if (v[F_QUEUE_ID] != Py_None && !PyLong_CheckExact(v[F_QUEUE_ID]))
        goto done;
    if (v[F_SHARDING_KEY] != Py_None || v[F_BORN_TIMESTAMP] != Py_None ||
        v[F_BORN_HOST] != Py_None || v[F_PROPERTIES] != Py_None)
        goto done;
    int_in(v[F_FLAG], -((long long)1 << 31), (long long)1 << 31, &ok);
    int_in(v[F_SYS_FLAG], 0, 1, &ok);
    if (!ok)
        goto done;
    if (cols == NULL) {
        *row = PyTuple_New(N_PLAIN); /* (a collection it may run changes nothing held) */
        if (*row == NULL) {
            PyErr_Clear();
            goto done;
        }
    }
    for (f = 0; f < N_PLAIN; f++) { /* the columns (the row) take the references held */
        PyTuple_SET_ITEM(cols != NULL ? cols[f] : *row, cols != NULL ? i : f, v[f]);
        v[f] = NULL;
    }
    ok = 2;
done:
    for (f = 0; f < got; f++)
        Py_XDECREF(v[f]);
    Py_DECREF(m);
    return ok == 2;
}

/* vouch(messages, good_tags, banned_topics) -> [11 columns] | None */
static PyObject *py_vouch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *messages, *good_tags, *banned_topics, *cols[N_PLAIN] = {NULL};
    PyObject *last_topic = NULL, *last_tags = NULL, *out = NULL;
    Py_ssize_t n;
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "vouch(messages, good_tags, banned_topics)");
        return NULL;
    }
    messages = args[0];
    good_tags = args[1];
    banned_topics = args[2];
    if (message_type == NULL || !PyList_CheckExact(messages) || !PyAnySet_Check(good_tags) ||
        !PyAnySet_Check(banned_topics) || !fields_unchanged())
        Py_RETURN_NONE;
    n = PyList_GET_SIZE(messages);
    if (n == 0)
        Py_RETURN_NONE;
    for (int f = 0; f < N_PLAIN; f++) {
        cols[f] = PyTuple_New(n); /* (may collect garbage: a finalizer may change the list) */
        if (cols[f] == NULL)
            goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* (each checks that the list still holds n) */
        if (!vouch_one(messages, n, i, cols, good_tags, banned_topics, &last_topic,
                       &last_tags, NULL, NULL)) {
            out = Py_None;
            Py_INCREF(out);
            goto done;
        }
    }
    out = PyList_New(N_PLAIN);
    if (out == NULL)
        goto done;
    for (int f = 0; f < N_PLAIN; f++) {
        PyList_SET_ITEM(out, f, cols[f]);
        cols[f] = NULL;
    }
done:
    for (int f = 0; f < N_PLAIN; f++)
        Py_XDECREF(cols[f]); /* (a tuple partly filled: its NULL items are skipped) */
    Py_XDECREF(last_topic);
    Py_XDECREF(last_tags);
    return out;
}

/* vouch_row(message, good_tags, banned_topics) -> (the 11 plain fields) | None: vouch() of
 * one message, its fields as one tuple (a single put's, at the least cost). */
static PyObject *py_vouch_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *last_topic = NULL, *last_tags = NULL, *row = NULL;
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "vouch_row(message, good_tags, banned_topics)");
        return NULL;
    }
    if (message_type == NULL || !PyAnySet_Check(args[1]) || !PyAnySet_Check(args[2]) ||
        !fields_unchanged())
        Py_RETURN_NONE;
    if (!vouch_one(NULL, 1, 0, NULL, args[1], args[2], &last_topic, &last_tags, args[0],
                   &row))
        row = NULL;
    Py_XDECREF(last_topic);
    Py_XDECREF(last_tags);
    if (row == NULL)
        Py_RETURN_NONE;
    return row;
}

/* configure(message_type, names, defaults): the class whose exact instances are vouched for,
 * its field names in the order above (slots: member descriptors of type object), and the
 * defaults of the fields past the plain ones. */
static PyObject *py_configure(PyObject *self, PyObject *args)
{
    PyObject *type, *names, *defaults, *descr[MAX_FIELDS];
    Py_ssize_t nn, nd, offset[MAX_FIELDS];
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyType_Type, &type, &PyTuple_Type, &names,
                          &PyTuple_Type, &defaults))
        return NULL;
    nn = PyTuple_GET_SIZE(names);
    nd = PyTuple_GET_SIZE(defaults);
    if (nn > MAX_FIELDS || nn - nd != N_PLAIN) {
        PyErr_SetString(PyExc_ValueError, "configure: 11 plain fields, then the defaulted ones");
        return NULL;
    }
    for (Py_ssize_t f = 0; f < nn; f++) {
        PyObject *name = PyTuple_GET_ITEM(names, f);
        PyObject *d = PyUnicode_CheckExact(name) && ((PyTypeObject *)type)->tp_dict
                          ? PyDict_GetItemWithError(((PyTypeObject *)type)->tp_dict, name)
                          : NULL; /* (borrowed) */
        PyMemberDef *member;
        if (d == NULL && PyErr_Occurred())
            return NULL;
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            PyErr_Format(PyExc_TypeError, "configure: %R is not a slot of %R",
                         PyTuple_GET_ITEM(names, f), type);
            return NULL;
        }
        member = ((PyMemberDescrObject *)d)->d_member;
        if (member->type != T_OBJECT_EX || member->offset < (Py_ssize_t)sizeof(PyObject) ||
            member->offset + (Py_ssize_t)sizeof(PyObject *) >
                ((PyTypeObject *)type)->tp_basicsize) {
            PyErr_Format(PyExc_TypeError, "configure: %R is not an object slot",
                         PyTuple_GET_ITEM(names, f));
            return NULL;
        }
        offset[f] = member->offset;
        descr[f] = d;
    }
    /* Nothing changed before every name was found good (a refused call leaves the old
     * configuration whole), and the old references are let go only once the new ones are
     * all in place: letting one go may run Python code (a finalizer), which may call vouch. */
    PyObject *old[3 * MAX_FIELDS + 1];
    int nold = 0;
    for (int f = 0; f < MAX_FIELDS; f++) {
        old[nold++] = field_name[f];
        old[nold++] = field_descr[f];
        old[nold++] = field_default[f];
        field_name[f] = field_descr[f] = field_default[f] = NULL;
    }
    old[nold++] = (PyObject *)message_type;
    memcpy(field_offset, offset, (size_t)nn * sizeof(Py_ssize_t));
    for (Py_ssize_t f = 0; f < nn; f++) {
        field_name[f] = Py_NewRef(PyTuple_GET_ITEM(names, f));
        field_descr[f] = Py_NewRef(descr[f]);
        if (f >= N_PLAIN)
            field_default[f] = Py_NewRef(PyTuple_GET_ITEM(defaults, f - N_PLAIN));
    }
    message_type = (PyTypeObject *)Py_NewRef(type);
    n_fields = (int)nn;
    for (int k = 0; k < nold; k++)
        Py_XDECREF(old[k]);
    Py_RETURN_NONE;
}

/* ---- The single put's lane (engine/service/putmessage.py, ``_put_one``) -------------------
 *
 * One message put at the least per-call cost (RocketMQ's DefaultMessageStore.putMessage ->
 * CommitLog.asyncPutMessage -> DefaultAppendMessageCallback.doAppend): its property head
 * built (the TAGS item from the put path's cache, KEYS, SHARDING_KEY), its queue chosen
 * (putmessage.choose_queue's rule: the queueId given, the sharding key's hash, else the
 * topic's round robin), its queue offset read from the topicQueueTable,
 * its UNIQ_KEY taken from the generator's state (uniqkey.UniqKeyGenerator.lane_state), its
 * record encoded by rmq_put_one straight into the CommitLog's mapping (or the struct's out
 * buffer), and its PutResult built: one call instead of a dozen Python steps. The Python
 * caller keeps every decision this does not make: the store's state, the topic
 * (plain_topic), the window of the mapping (FileQueue.write_window), the dispatch and the
 * accounting after.
 *
 * A Lane belongs to one PutService (putmessage._PutCall makes it): the rmq_put_args struct,
 * whose memory its owner exports to the lane for the lane's life (a buffer of exactly that
 * size; its pointers are the kernel's own, set by _PutCall as for every rmq_put), the
 * PutService's own dicts (round robin, topicQueueTable, tags cache), which the lane reads
 * and, for the round robin, advances, as choose_queue would, and the UNIQ_KEY generator's
 * state array, whose counter it advances. Everything else it is handed per call is checked:
 * a row of the plain fields, exact types, ranges, the window inside its mapping. What it
 * cannot do it answers with a code and changes nothing (``put``'s comment), and the Python
 * path does that step and calls again, or hands the message to the general path. */

typedef struct {
    PyObject_HEAD
    rmq_put_args *a;         /* the struct's memory, exported by its owner for the lane's life */
    Py_buffer struct_view;   /* that export (its obj keeps the struct alive) */
    PyObject *owner;         /* what holds the arrays the struct points at (putmessage._PutCall) */
    PyObject *round_robin;   /* dict: topic -> next round-robin count */
    PyObject *queue_offsets; /* dict: (topic, queueId) -> next queue offset */
    PyObject *tags_cache;    /* dict: tags -> (TAGS item bytes, tagsCode) */
    PyObject *sharding_prefix; /* bytes: "SHARDING_KEY" + NAME_VALUE_SEPARATOR */
    PyTypeObject *result_type; /* PutResult: a tuple subclass of 8 fields, no more */
    PyObject *uniq_state; /* the UNIQ_KEY generator's array("q"): counter, month, next month */
    char uniq_prefix[64]; /* its ids' fixed head (ASCII hex) */
    Py_ssize_t uniq_prefix_len;
} Lane;

/* (a lane and its owner refer to each other: the collector sees both) */
static int lane_traverse(Lane *self, visitproc visit, void *arg)
{
    Py_VISIT(self->owner);
    Py_VISIT(self->round_robin);
    Py_VISIT(self->queue_offsets);
    Py_VISIT(self->tags_cache);
    Py_VISIT(self->uniq_state);
    return 0;
}

/* A cleared lane puts nothing (lane_put checks ``owner``). */
static int lane_clear(Lane *self)
{
    Py_CLEAR(self->owner);
    Py_CLEAR(self->round_robin);
    Py_CLEAR(self->queue_offsets);
    Py_CLEAR(self->tags_cache);
    Py_CLEAR(self->uniq_state);
    return 0;
}

static void lane_dealloc(Lane *self)
{
    PyObject_GC_UnTrack(self);
    lane_clear(self);
    if (self->struct_view.obj != NULL)
        PyBuffer_Release(&self->struct_view);
    Py_XDECREF(self->sharding_prefix);
    Py_XDECREF(self->result_type);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject LaneType;

/* new_lane(owner, struct, round_robin, queue_offsets, tags_cache, sharding_prefix,
 *          result_type, uniq_prefix, uniq_state) -> Lane (the type itself is not callable):
 * struct a writable buffer of exactly one rmq_put_args (cffi's ffi.buffer of the kernel's
 * struct; its pointers are the kernel's own, set by putmessage._PutCall, owner, which holds
 * the arrays they point at and which the lane holds), exported for the lane's life. */
static PyObject *py_new_lane(PyObject *module, PyObject *args)
{
    PyObject *owner, *sobj, *rr, *qo, *tc, *sp, *up, *us;
    PyTypeObject *rt;
    Lane *self;
    (void)module;
    if (!PyArg_ParseTuple(args, "OOO!O!O!O!O!O!O", &owner, &sobj, &PyDict_Type, &rr,
                          &PyDict_Type, &qo, &PyDict_Type, &tc, &PyBytes_Type, &sp,
                          &PyType_Type, &rt, &PyUnicode_Type, &up, &us))
        return NULL;
    Py_ssize_t up_len;
    const char *up_u = PyUnicode_AsUTF8AndSize(up, &up_len);
    if (up_u == NULL)
        return NULL;
    if (!PyUnicode_IS_ASCII(up) || up_len > 48) {
        PyErr_SetString(PyExc_ValueError, "Lane: the UNIQ_KEY prefix is ASCII, 48 at most");
        return NULL;
    }
    Py_buffer ub;
    if (PyObject_GetBuffer(us, &ub, PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
        return NULL;
    const int state_ok = ub.itemsize == 8 && ub.len >= 24 && ub.format != NULL &&
                         (strcmp(ub.format, "q") == 0 || strcmp(ub.format, "l") == 0);
    PyBuffer_Release(&ub);
    if (!state_ok) {
        PyErr_SetString(PyExc_TypeError, "Lane: the UNIQ_KEY state is 3 int64 at least");
        return NULL;
    }
    if (!PyType_IsSubtype(rt, &PyTuple_Type) || rt->tp_basicsize != PyTuple_Type.tp_basicsize ||
        rt->tp_itemsize != PyTuple_Type.tp_itemsize || rt->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "Lane: result_type must be a named tuple class");
        return NULL;
    }
    Py_buffer sv;
    if (PyObject_GetBuffer(sobj, &sv, PyBUF_WRITABLE) < 0)
        return NULL;
    if (sv.len != (Py_ssize_t)sizeof(rmq_put_args) ||
        (uintptr_t)sv.buf % _Alignof(rmq_put_args) != 0) {
        PyBuffer_Release(&sv);
        PyErr_SetString(PyExc_ValueError, "Lane: the struct is one aligned rmq_put_args");
        return NULL;
    }
    self = PyObject_GC_New(Lane, &LaneType);
    if (self == NULL) {
        PyBuffer_Release(&sv);
        return NULL;
    }
    memset((char *)self + sizeof(PyObject), 0, sizeof(Lane) - sizeof(PyObject));
    self->struct_view = sv;
    self->a = (rmq_put_args *)sv.buf;
    self->owner = Py_NewRef(owner);
    self->round_robin = Py_NewRef(rr);
    self->queue_offsets = Py_NewRef(qo);
    self->tags_cache = Py_NewRef(tc);
    self->sharding_prefix = Py_NewRef(sp);
    self->result_type = (PyTypeObject *)Py_NewRef(rt);
    self->uniq_state = Py_NewRef(us);
    memcpy(self->uniq_prefix, up_u, (size_t)up_len);
    self->uniq_prefix_len = up_len;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* An exact int as int64 in [lo, hi); 0 with *ok cleared otherwise (no exception left). */
static int64_t i64_in(PyObject *v, int64_t lo, int64_t hi, int *ok)
{
    return (int64_t)int_in(v, (long long)lo, (long long)hi, ok);
}

/* The UTF-8 of an exact str (NULL, no exception left, for one it cannot encode). */
static const char *utf8_of(PyObject *s, Py_ssize_t *len)
{
    const char *u = PyUnicode_AsUTF8AndSize(s, len);
    if (u == NULL)
        PyErr_Clear();
    return u;
}

/* A miss: (code, a, b), nothing changed. */
static PyObject *lane_code(int code, int64_t x, int64_t y)
{
    return Py_BuildValue("(iLL)", code, (long long)x, (long long)y);
}

enum {
    LANE_TAGS = -1,   /* the tags are not in the tags cache: put them there (b: none) */
    LANE_QUEUE = -2,  /* the queueId is not the topic's, or no write queue: choose_queue says */
    LANE_OFFSET = -3, /* (topic, a) is not in the topicQueueTable: put its next offset there */
    LANE_ROW = -4,    /* a row this does not put (a type, a range): the Python path's */
    LANE_MONTH = -5,  /* the id's time (a) is past the generator's month: roll it */
};

static const char HEX[] = "0123456789ABCDEF";

/* The index's waiting entries (indexservice.IndexService.lane_state): (buffer, few, cap, ms),
 * a bytearray of native int64 keyHash, phyOffset, storeTimestamp per entry, and the limits
 * put_hashed's few-entry branch keeps. NULL *buf for anything else (the entries go back to
 * the caller as a list). */
static void index_state(PyObject *state, PyObject **buf, int64_t *few, int64_t *cap,
                        int64_t *ms)
{
    int ok = 1;
    *buf = NULL;
    if (!PyTuple_CheckExact(state) || PyTuple_GET_SIZE(state) != 4 ||
        !PyByteArray_CheckExact(PyTuple_GET_ITEM(state, 0)))
        return;
    *few = i64_in(PyTuple_GET_ITEM(state, 1), 0, 1 << 20, &ok);
    *cap = i64_in(PyTuple_GET_ITEM(state, 2), 0, 1 << 24, &ok);
    *ms = i64_in(PyTuple_GET_ITEM(state, 3), 0, INT64_MAX, &ok);
    if (ok)
        *buf = PyTuple_GET_ITEM(state, 0);
}

/* Add the n entries (3 int64 each) at idx to the index's waiting ones, as
 * IndexService.put_hashed's few-entry branch adds them: only where n <= few, entries wait
 * already and the last one's phyOffset is below theirs (end_phy_offset's rule), and the
 * buffer can grow (not exported, memory). Returns -1 where they are not added (no exception
 * left), else whether they are due: cap entries gathered, or the newest's storeTimestamp ms
 * or more after the oldest's. */
static int index_append(PyObject *buf, int64_t few, int64_t cap, int64_t ms, const int64_t *idx,
                        int64_t n)
{
    const Py_ssize_t have = PyByteArray_GET_SIZE(buf);
    int64_t last_phy, oldest_ts;
    if (n <= 0 || n > few || have < 24 || have % 24 != 0)
        return -1;
    memcpy(&last_phy, PyByteArray_AS_STRING(buf) + have - 16, 8);
    memcpy(&oldest_ts, PyByteArray_AS_STRING(buf) + 16, 8);
    if (last_phy >= idx[1] || have > PY_SSIZE_T_MAX - 24 * n)
        return -1;
    if (PyByteArray_Resize(buf, have + (Py_ssize_t)(24 * n)) < 0) {
        PyErr_Clear(); /* (exported, or no memory: the caller's list takes them) */
        return -1;
    }
    memcpy(PyByteArray_AS_STRING(buf) + have, idx, (size_t)(24 * n));
    /* (the newest's store time is now, 0 or more, and ms too: the difference cannot overflow
     * as the one with the oldest's, which may be anything a damaged store held, could) */
    return have + 24 * n >= 24 * cap || oldest_ts <= idx[3 * n - 1] - ms;
}

/* The n = a->nidx entries a put computed as a list of 3n ints (NULL on a memory error). */
static PyObject *entries_list(const rmq_put_args *a)
{
    PyObject *list = PyList_New(3 * a->nidx);
    for (Py_ssize_t k = 0; list != NULL && k < 3 * a->nidx; k++) {
        PyObject *v = PyLong_FromLongLong(a->idx[k]);
        if (v == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, k, v);
    }
    return list;
}

/* put(row, born_host, info, now, start, window, index) -> result | code
 *
 * row: the plain fields (putmessage._message_row's first 9: topic str, body (a buffer), tags
 * None|str (none when empty), keys None|str|bytes (the KEYS value: a str's none when empty,
 * bytes its UTF-8 as it is, even empty), queueId None|int, sharding key None|str, born
 * timestamp None|int (epoch ms), born host (unused), flag int); born_host: None or its 8
 * bytes (IPv4, int32 port); info: the topic's PlainTopic, whose tables the struct points at
 * (writeQueueNums, queues, ...); now: store timestamp (epoch ms); start: the CommitLog offset
 * the record goes at; window: None or (mmap, position, room) from
 * FileQueue.write_window(start, ...), exported for the call only; index: None or False for
 * no index entries, True for them as a list, or the index's state (index_state) to add them
 * to where it can (index_append). Its UNIQ_KEY is the generator's next id (MessageClientIDSetter.createUniqID: the
 * prefix, the ms of its born timestamp (else now) since the month began, the counter), the
 * counter advanced once the record is written or refused.
 *
 * Returns (PutResult, (topic, queueId), tagsCode, end, in_place, need, nchunks, entries)
 * when the record is written (into the window: in_place True; else into the struct's out
 * buffer, ``need`` bytes in ``nchunks`` chunks, for the caller to append), entries the flat
 * [keyHash, phyOffset, storeTimestamp, ...] (None without index), or a bool where they were
 * added to the index's waiting ones (whether they are due: the caller writes them, and undoes
 * them with the put, IndexService.truncate, should anything fail after); or (code, a, b):
 * a LANE_* code (nothing changed), or rmq_put_one's 1 or 3 (refused; the round robin moved
 * as choose_queue moves it before a put, the UNIQ_KEY taken), or 2 (short of room in the
 * window or in the out buffer; a = bytes needed, b = index entries; nothing changed). A
 * memory error once the record is written raises MemoryError, the record zeroed where it was
 * written into the window (its queue and UNIQ_KEY taken, as a refused put's). */
static PyObject *lane_put(Lane *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *row, *born_host, *info, *window, *topic, *body, *tags, *keys, *qid_o;
    PyObject *sharding, *born_o, *flag_o, *key = NULL, *rr_old = NULL, *rr_new = NULL;
    PyObject *result = NULL, *entries = NULL, *ret = NULL, *msg_id = NULL, *hit = NULL;
    PyObject *uniq = NULL;
    Py_buffer bodyb = {0}, winb = {0}, stateb = {0};
    char small[512], *head = small;
    int ok = 1, in_place = 0;
    int64_t out[7] = {0}, room = 0;
    uint8_t *dst = NULL;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "put(row, born_host, info, now, start, window, index)");
        return NULL;
    }
    if (self->owner == NULL) { /* (cleared by the collector) */
        PyErr_SetString(PyExc_ValueError, "the lane was cleared");
        return NULL;
    }
    row = args[0];
    born_host = args[1];
    info = args[2];
    window = args[5];
    const int64_t now = i64_in(args[3], 0, INT64_MAX, &ok);
    const int64_t start = i64_in(args[4], 0, INT64_MAX, &ok);
    PyObject *pending = NULL;
    int64_t few = 0, cap = 0, ms = 0;
    index_state(args[6], &pending, &few, &cap, &ms);
    const int want_index = pending != NULL ? 1 : PyObject_IsTrue(args[6]);
    if (!ok || want_index < 0 || !PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) < 9 ||
        !PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) < 2 ||
        !(born_host == Py_None || (PyBytes_CheckExact(born_host) && PyBytes_GET_SIZE(born_host) == 8))) {
        PyErr_Clear();
        return lane_code(LANE_ROW, 0, 0);
    }
    topic = PyTuple_GET_ITEM(row, 0);
    body = PyTuple_GET_ITEM(row, 1);
    tags = PyTuple_GET_ITEM(row, 2);
    keys = PyTuple_GET_ITEM(row, 3);
    qid_o = PyTuple_GET_ITEM(row, 4);
    sharding = PyTuple_GET_ITEM(row, 5);
    born_o = PyTuple_GET_ITEM(row, 6);
    flag_o = PyTuple_GET_ITEM(row, 8);
    const int64_t nwq = i64_in(PyTuple_GET_ITEM(info, 0), INT32_MIN, INT32_MAX, &ok);
    const int64_t nq = i64_in(PyTuple_GET_ITEM(info, 1), 0, INT32_MAX, &ok);
    const int64_t flag = i64_in(flag_o, INT32_MIN, (int64_t)INT32_MAX + 1, &ok);
    const int64_t born = born_o == Py_None ? 0 : i64_in(born_o, INT64_MIN, INT64_MAX, &ok);
    if (!ok || !PyUnicode_CheckExact(topic) || (tags != Py_None && !PyUnicode_CheckExact(tags)) ||
        (keys != Py_None && !PyUnicode_CheckExact(keys) && !PyBytes_CheckExact(keys)) ||
        (sharding != Py_None && !PyUnicode_CheckExact(sharding)) ||
        (qid_o != Py_None && !PyLong_CheckExact(qid_o)) || nq != self->a->nslots)
        return lane_code(LANE_ROW, 0, 0);
    /* The property items before UNIQ_KEY: TAGS (cached), KEYS, SHARDING_KEY. */
    const char *tags_item = NULL, *keys_u = NULL, *shard_u = NULL;
    Py_ssize_t tags_len = 0, keys_len = 0, shard_len = 0;
    int64_t tc = 0;
    if (tags != Py_None && PyUnicode_GET_LENGTH(tags)) {
        hit = PyDict_GetItemWithError(self->tags_cache, tags); /* (exact str key) */
        if (hit == NULL) {
            PyErr_Clear();
            return lane_code(LANE_TAGS, 0, 0);
        }
        if (!PyTuple_CheckExact(hit) || PyTuple_GET_SIZE(hit) != 2 ||
            !PyBytes_CheckExact(PyTuple_GET_ITEM(hit, 0)))
            return lane_code(LANE_ROW, 0, 0);
        tc = i64_in(PyTuple_GET_ITEM(hit, 1), INT64_MIN, INT64_MAX, &ok);
        if (!ok)
            return lane_code(LANE_ROW, 0, 0);
        Py_INCREF(hit); /* (its bytes are read after allocations, which may run a finalizer) */
        tags_item = PyBytes_AS_STRING(PyTuple_GET_ITEM(hit, 0));
        tags_len = PyBytes_GET_SIZE(PyTuple_GET_ITEM(hit, 0));
    }
    /* (the strs and the tags item are held by row and the cache entry for the call: nothing
     * below runs Python code before they are read, but for the dict lookups of exact keys) */
    if (PyBytes_CheckExact(keys)) { /* a KEYS value as it is, even empty */
        keys_u = PyBytes_AS_STRING(keys);
        keys_len = PyBytes_GET_SIZE(keys);
    }
    if ((PyUnicode_CheckExact(keys) && PyUnicode_GET_LENGTH(keys) &&
         (keys_u = utf8_of(keys, &keys_len)) == NULL) ||
        (sharding != Py_None && (shard_u = utf8_of(sharding, &shard_len)) == NULL)) {
        ret = lane_code(LANE_ROW, 0, 0);
        goto done;
    }
    const Py_ssize_t kn = self->a->keys_name_len, sn = PyBytes_GET_SIZE(self->sharding_prefix);
    const Py_ssize_t head_len = tags_len + (keys_u ? kn + keys_len + 1 : 0) +
                                (shard_u ? sn + shard_len + 1 : 0);
    if (head_len > (1 << 29)) {
        ret = lane_code(LANE_ROW, 0, 0);
        goto done;
    }
    /* The queue (choose_queue's rule). */
    int64_t qid, rr = -1;
    if (qid_o != Py_None) {
        qid = i64_in(qid_o, 0, nq, &ok);
        if (!ok) {
            ret = lane_code(LANE_QUEUE, 0, 0);
            goto done;
        }
    } else if (nwq <= 0) {
        ret = lane_code(LANE_QUEUE, 0, 0);
        goto done;
    } else if (shard_u != NULL) {
        qid = (int64_t)((crc32(0L, (const Bytef *)shard_u, (uInt)shard_len) & 0x7FFFFFFFu) %
                        (uint64_t)nwq);
    } else {
        rr_old = PyDict_GetItemWithError(self->round_robin, topic);
        if (rr_old == NULL && PyErr_Occurred())
            goto done;
        rr = rr_old == NULL ? 0 : i64_in(rr_old, 0, INT64_MAX, &ok);
        if (!ok) {
            rr_old = NULL;
            ret = lane_code(LANE_ROW, 0, 0);
            goto done;
        }
        qid = rr % nwq;
        Py_XINCREF(rr_old);
    }
    key = Py_BuildValue("(OL)", topic, (long long)qid);
    if (key == NULL)
        goto fail;
    PyObject *nxt_o = PyDict_GetItemWithError(self->queue_offsets, key);
    if (nxt_o == NULL) {
        if (PyErr_Occurred())
            goto fail;
        ret = lane_code(LANE_OFFSET, qid, 0);
        goto done;
    }
    const int64_t nxt = i64_in(nxt_o, 0, INT64_MAX, &ok);
    if (!ok) {
        ret = lane_code(LANE_ROW, 0, 0);
        goto done;
    }
    if (head_len > (Py_ssize_t)sizeof(small) && (head = PyMem_Malloc((size_t)head_len)) == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_ssize_t at = 0, keys_at = 0;
    if (tags_len) {
        memcpy(head, tags_item, (size_t)tags_len);
        at = tags_len;
    }
    if (keys_u) {
        memcpy(head + at, self->a->keys_name, (size_t)kn);
        keys_at = at + kn;
        memcpy(head + keys_at, keys_u, (size_t)keys_len);
        at = keys_at + keys_len;
        head[at++] = (char)self->a->prop_end;
    }
    if (shard_u) {
        memcpy(head + at, PyBytes_AS_STRING(self->sharding_prefix), (size_t)sn);
        memcpy(head + at + sn, shard_u, (size_t)shard_len);
        at += sn + shard_len;
        head[at++] = (char)self->a->prop_end;
    }
    /* The UNIQ_KEY: the generator's next id (uniqkey.UniqKeyGenerator._take_plain). */
    if (PyObject_GetBuffer(self->uniq_state, &stateb, PyBUF_WRITABLE) < 0 || stateb.len < 24) {
        PyErr_Clear();
        ret = lane_code(LANE_ROW, 0, 0);
        goto done;
    }
    int64_t *state = (int64_t *)stateb.buf;
    const int64_t id_time = born ? born : now;
    if (state[0] == INT64_MAX) { /* (the counter's next step would overflow) */
        ret = lane_code(LANE_ROW, 0, 0);
        goto done;
    }
    if (id_time >= state[2]) {
        ret = lane_code(LANE_MONTH, id_time, 0);
        goto done;
    }
    const uint64_t since = (uint64_t)(id_time - state[1]) & 0x7FFFFFFFu;
    const uint64_t counter = (uint64_t)state[0] & 0xFFFFu;
    char uniq_u[64 + 12];
    const Py_ssize_t uniq_len = self->uniq_prefix_len + 12;
    memcpy(uniq_u, self->uniq_prefix, (size_t)self->uniq_prefix_len);
    for (int k = 0; k < 8; k++)
        uniq_u[self->uniq_prefix_len + k] = HEX[(since >> (28 - 4 * k)) & 15];
    for (int k = 0; k < 4; k++)
        uniq_u[self->uniq_prefix_len + 8 + k] = HEX[(counter >> (12 - 4 * k)) & 15];
    if (rr >= 0) { /* the round robin moves before the put, as choose_queue moves it */
        rr_new = PyLong_FromLongLong(rr + 1);
        if (rr_new == NULL || PyDict_SetItem(self->round_robin, topic, rr_new) < 0)
            goto fail;
    }
    if (PyObject_GetBuffer(body, &bodyb, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        ret = lane_code(LANE_ROW, 0, 0);
        goto restore;
    }
    if (window != Py_None) {
        int64_t wpos, wroom;
        if (!PyTuple_CheckExact(window) || PyTuple_GET_SIZE(window) != 3 ||
            PyObject_GetBuffer(PyTuple_GET_ITEM(window, 0), &winb, PyBUF_WRITABLE) < 0) {
            PyErr_Clear();
            ret = lane_code(LANE_ROW, 0, 0);
            goto restore;
        }
        wpos = i64_in(PyTuple_GET_ITEM(window, 1), 0, (int64_t)winb.len + 1, &ok);
        wroom = i64_in(PyTuple_GET_ITEM(window, 2), 0, INT64_MAX, &ok);
        if (!ok || wroom > (int64_t)winb.len - wpos) {
            ret = lane_code(LANE_ROW, 0, 0);
            goto restore;
        }
        dst = (uint8_t *)winb.buf + wpos;
        room = wroom;
    }
    const int32_t rc = rmq_put_one(
        self->a, now, start, head, (int32_t)head_len, tc, (int32_t)keys_at,
        (int32_t)(keys_u ? keys_len : 0), (const char *)bodyb.buf, (int64_t)bodyb.len, uniq_u,
        (int32_t)uniq_len, (int32_t)qid, nxt, born, (int32_t)flag,
        born_host == Py_None ? NULL : PyBytes_AS_STRING(born_host), want_index, dst, room, out);
    in_place = dst != NULL; /* (the window stays exported until the record is reported) */
    PyBuffer_Release(&bodyb);
    if (rc == 2) {
        ret = lane_code(2, out[4], out[5]);
        goto restore;
    }
    state[0]++; /* the id is taken, as the general path takes it, put or refused */
    if (rc != 0) {
        ret = lane_code(rc, 0, 0);
        goto done;
    }
    /* Written: from here the put has happened, and what follows only reports it. */
    uniq = PyUnicode_New(uniq_len, 127);
    msg_id = uniq ? PyUnicode_New(32, 127) : NULL;
    result = msg_id ? self->result_type->tp_alloc(self->result_type, 8) : NULL;
    if (result == NULL)
        goto fail_written;
    memcpy(PyUnicode_DATA(msg_id), self->a->msg_id, 32);
    memcpy(PyUnicode_DATA(uniq), uniq_u, (size_t)uniq_len);
    PyObject *vals[8] = {Py_NewRef(topic), PyLong_FromLongLong(qid), PyLong_FromLongLong(out[2]),
                         PyLong_FromLongLong(out[0]), PyLong_FromLongLong(out[1]),
                         PyLong_FromLongLong(now), msg_id, uniq};
    msg_id = uniq = NULL;
    for (int k = 0; k < 8; k++)
        PyTuple_SET_ITEM(result, k, vals[k]); /* (a NULL left by a failed int: checked below) */
    for (int k = 0; k < 8; k++)
        if (vals[k] == NULL)
            goto fail_written;
    /* The index entries: a list where none waits to take them (made before the answer, which
     * may still fail), else none. */
    if (want_index && pending == NULL && (entries = entries_list(self->a)) == NULL)
        goto fail_written;
    ret = Py_BuildValue("(NOLLOLLN)", result, key, (long long)tc, (long long)out[3],
                        in_place ? Py_True : Py_False, (long long)out[4], (long long)out[6],
                        entries ? entries : Py_NewRef(Py_None));
    result = entries = NULL;
    if (ret == NULL)
        goto fail_written;
    if (pending != NULL) {
        /* Added to the waiting ones only once nothing can fail any more (the answer is built,
         * its last item swapped without an allocation: nothing can run the collector, whose
         * finalizers could let the flush thread change the buffer, between the append and
         * the return), so a put that fails never leaves them there; where they are not
         * added, the list, whose allocation may fail as the answer's could. */
        const int due = index_append(pending, few, cap, ms, self->a->idx, self->a->nidx);
        PyObject *last = due >= 0 ? PyBool_FromLong(due) : entries_list(self->a);
        if (last == NULL) {
            Py_CLEAR(ret);
            goto fail_written;
        }
        PyObject *none = PyTuple_GET_ITEM(ret, 7);
        PyTuple_SET_ITEM(ret, 7, last);
        Py_DECREF(none);
    }
    goto done;
fail_written:
    /* A memory error after the record was written, before it could be reported: the put
     * fails (MemoryError; its queue and UNIQ_KEY taken, as a refused put's), and the record
     * must not outlive it. One in the mapping is zeroed (recovery reads a zero header as the
     * end of what was written, and the next put writes there); one in the out buffer was
     * never written to the file. */
    if (in_place && out[1] > 0 && out[1] <= room)
        memset(dst, 0, (size_t)out[1]);
    if (!PyErr_Occurred())
        PyErr_NoMemory();
    goto done;
restore:
    if (rr_new != NULL) { /* nothing was put: the round robin as it was (no allocation) */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb); /* (a memory error of the answer's tuple, kept) */
        if (rr_old != NULL)
            PyDict_SetItem(self->round_robin, topic, rr_old);
        else
            PyDict_DelItem(self->round_robin, topic);
        PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
    goto done;
fail:
    if (rr_new != NULL && !PyErr_Occurred())
        PyErr_NoMemory();
    if (rr_new != NULL) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (rr_old != NULL)
            PyDict_SetItem(self->round_robin, topic, rr_old);
        else
            PyDict_DelItem(self->round_robin, topic);
        PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
done:
    if (stateb.obj != NULL)
        PyBuffer_Release(&stateb);
    if (winb.obj != NULL)
        PyBuffer_Release(&winb);
    if (bodyb.obj != NULL)
        PyBuffer_Release(&bodyb);
    if (head != small)
        PyMem_Free(head);
    Py_XDECREF(msg_id);
    Py_XDECREF(uniq);
    Py_XDECREF(hit);
    Py_XDECREF(result);
    Py_XDECREF(entries);
    Py_XDECREF(key);
    Py_XDECREF(rr_old);
    Py_XDECREF(rr_new);
    return ret;
}

static PyMethodDef lane_methods[] = {
    {"put", (PyCFunction)(void (*)(void))lane_put, METH_FASTCALL,
     "put(row, born_host, info, now, start, window, index) -> result | code"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_putobj.Lane",
    .tp_basicsize = sizeof(Lane),
    .tp_dealloc = (destructor)lane_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .tp_doc = "The single put's lane (engine/read/_putobj.c), made by new_lane().",
    .tp_traverse = (traverseproc)lane_traverse,
    .tp_clear = (inquiry)lane_clear,
    .tp_methods = lane_methods,
};

static PyMethodDef methods[] = {
    {"configure", py_configure, METH_VARARGS,
     "configure(message_type, names, defaults): the Message class (slots) vouch() reads."},
    {"vouch", (PyCFunction)(void (*)(void))py_vouch, METH_FASTCALL,
     "vouch(messages, good_tags, banned_topics) -> [the 11 plain columns] | None"},
    {"vouch_row", (PyCFunction)(void (*)(void))py_vouch_row, METH_FASTCALL,
     "vouch_row(message, good_tags, banned_topics) -> (the 11 plain fields) | None"},
    {"new_lane", py_new_lane, METH_VARARGS,
     "new_lane(owner, struct, round_robin, queue_offsets, tags_cache, sharding_prefix, "
     "result_type, uniq_prefix, uniq_state) -> Lane"},
    {"keys_utf8", py_keys_utf8, METH_O,
     "keys_utf8(keys) -> (blob, int32 lengths, spaces) | None | False"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_putobj",
    "The put path's reader of Message objects (engine/read/_putobj.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__putobj(void)
{
    PyObject *m;
    if (PyType_Ready(&LaneType) < 0)
        return NULL;
    m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Lane", (PyObject *)&LaneType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
