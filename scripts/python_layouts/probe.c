/* SPDX-License-Identifier: MIT */
/*
 * The offsets preload/python.c and preload/pyreach.c read in one CPython, as that version's own
 * headers (internal ones included, Py_BUILD_CORE) say: compiled by generate.py against a
 * version's include/pythonX.Y, never by meson. Prints "key value" lines.
 */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#if PY_VERSION_HEX >= 0x030E0000
#include "internal/pycore_interpframe_structs.h"
#include "internal/pycore_stackref.h"
#elif PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#endif
#if PY_VERSION_HEX >= 0x030E0000
#include "internal/pycore_frame.h"
#endif

#define P(key, value) printf("%s %ld\n", key, (long)(value))

/* The bit a PyASCIIObject state field sets, found by setting it. */
#define STATE_BIT(field)                                                                                       \
	({                                                                                                     \
		PyASCIIObject o;                                                                               \
		unsigned int word;                                                                             \
		memset(&o, 0, sizeof(o));                                                                      \
		o.state.field = 1;                                                                             \
		memcpy(&word, (char *)&o + offsetof(PyASCIIObject, state), sizeof(word));                      \
		word;                                                                                          \
	})

int main(void)
{
	P("minor", PY_MINOR_VERSION);
#ifdef Py_GIL_DISABLED
	P("gil_disabled", 1);
#else
	P("gil_disabled", 0);
#endif
	/* pyreach.c */
	P("ob_type", offsetof(PyObject, ob_type));
	P("tp_basicsize", offsetof(PyTypeObject, tp_basicsize));
	P("tp_flags", offsetof(PyTypeObject, tp_flags));
	P("tp_traverse", offsetof(PyTypeObject, tp_traverse));
	P("tp_is_gc", offsetof(PyTypeObject, tp_is_gc));
	P("tpflags_have_gc", Py_TPFLAGS_HAVE_GC);
	/* strings */
	P("str_length", offsetof(PyASCIIObject, length));
	P("str_state", offsetof(PyASCIIObject, state));
	P("str_compact_bit", STATE_BIT(compact));
	P("str_ascii_bit", STATE_BIT(ascii));
	P("str_ascii_size", sizeof(PyASCIIObject));
	P("str_utf8", offsetof(PyCompactUnicodeObject, utf8));
	P("str_utf8_length", offsetof(PyCompactUnicodeObject, utf8_length));
	P("str_compact_size", sizeof(PyCompactUnicodeObject));
	P("str_kind_1byte", STATE_BIT(kind));
	/* code objects */
	P("co_filename", offsetof(PyCodeObject, co_filename));
	P("co_name", offsetof(PyCodeObject, co_name));
	P("co_firstlineno", offsetof(PyCodeObject, co_firstlineno));
#if PY_VERSION_HEX >= 0x030B0000
	P("co_qualname", offsetof(PyCodeObject, co_qualname));
	P("co_firsttraceable", offsetof(PyCodeObject, _co_firsttraceable));
	P("co_code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
#else
	P("co_qualname", -1);
	P("co_firsttraceable", -1);
	P("co_code_adaptive", -1);
#endif
	/* thread state and frames */
#if PY_VERSION_HEX < 0x030B0000
	P("ts_frame", offsetof(PyThreadState, frame));
	P("ts_cframe", -1);
	P("cframe_current", -1);
	P("f_back", offsetof(PyFrameObject, f_back));
	P("f_code", offsetof(PyFrameObject, f_code));
	P("f_lasti", offsetof(PyFrameObject, f_lasti));
	P("lasti_scale", PY_VERSION_HEX >= 0x030A0000 ? 2 : 1); /* 3.10 counts code units */
	P("frame_type_size", sizeof(PyFrameObject));
#else
#if PY_VERSION_HEX < 0x030D0000
	P("ts_frame", -1);
	P("ts_cframe", offsetof(PyThreadState, cframe));
	P("cframe_current", offsetof(_PyCFrame, current_frame));
#else
	P("ts_frame", offsetof(PyThreadState, current_frame));
	P("ts_cframe", -1);
	P("cframe_current", -1);
#endif
	P("f_back", -1);
	P("f_code", -1);
	P("f_lasti", -1);
	P("lasti_scale", 0);
#if PY_VERSION_HEX >= 0x030D0000
	P("if_code", offsetof(_PyInterpreterFrame, f_executable));
#else
	P("if_code", offsetof(_PyInterpreterFrame, f_code));
#endif
	P("if_previous", offsetof(_PyInterpreterFrame, previous));
#if PY_VERSION_HEX >= 0x030D0000
	P("if_instr", offsetof(_PyInterpreterFrame, instr_ptr));
	P("if_is_entry", -1);
#elif PY_VERSION_HEX >= 0x030C0000
	P("if_instr", offsetof(_PyInterpreterFrame, prev_instr));
	P("if_is_entry", -1);
#else
	P("if_instr", offsetof(_PyInterpreterFrame, prev_instr));
	P("if_is_entry", offsetof(_PyInterpreterFrame, is_entry));
#endif
	P("if_owner", offsetof(_PyInterpreterFrame, owner));
	P("owner_generator", FRAME_OWNED_BY_GENERATOR);
#if PY_VERSION_HEX >= 0x030E0000
	P("owner_cstack", FRAME_OWNED_BY_INTERPRETER);
	P("code_tag_bits", Py_TAG_BITS); /* f_executable is a _PyStackRef */
#elif PY_VERSION_HEX >= 0x030C0000
	P("owner_cstack", FRAME_OWNED_BY_CSTACK);
	P("code_tag_bits", 0);
#else
	P("owner_cstack", -1);
	P("code_tag_bits", 0);
#endif
	/* Objects/frameobject.c: PyFrame_Type's tp_basicsize */
	P("frame_type_size", offsetof(PyFrameObject, _f_frame_data) + offsetof(_PyInterpreterFrame, localsplus));
#endif
	return 0;
}
