/* The put path's reader of Python objects: a batch of Message objects vouched for, and its
 * columns read, in one C pass (engine/service/putmessage.py, ``put_messages``).
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

static PyMethodDef methods[] = {
    {"configure", py_configure, METH_VARARGS,
     "configure(message_type, names, defaults): the Message class (slots) vouch() reads."},
    {"vouch", (PyCFunction)(void (*)(void))py_vouch, METH_FASTCALL,
     "vouch(messages, good_tags, banned_topics) -> [the 11 plain columns] | None"},
    {"vouch_row", (PyCFunction)(void (*)(void))py_vouch_row, METH_FASTCALL,
     "vouch_row(message, good_tags, banned_topics) -> (the 11 plain fields) | None"},
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
    return PyModule_Create(&module_def);
}
