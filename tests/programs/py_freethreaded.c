/*
 * py_freethreaded.c - looks, to the preload, like a free-threaded CPython 3.13 (3.13t): it exports
 * the interpreter's symbols python.c resolves, its version string says "free-threading build",
 * and its type objects carry ob_type at 24 as that build's object header does. Then it allocates
 * from a named function. The preload must say once that Python stacks are off, record native
 * stacks, and never walk: the thread state it hands out would crash a walk.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "prog.h"

/* A free-threaded PyObject header: ob_tid, flags, mutex, gc bits, ob_ref_local, ob_ref_shared,
 * then ob_type at 24. */
struct ft_object {
	uintptr_t ob_tid;
	uint16_t flags;
	uint8_t mutex, gc_bits;
	uint32_t ref_local;
	intptr_t ref_shared;
	void *ob_type;
	intptr_t ob_size;
	const char *tp_name;
	intptr_t tp_basicsize;
	char rest[512];
};

SITE struct ft_object PyType_Type = { .ob_type = &PyType_Type, .tp_basicsize = 920 };
SITE struct ft_object PyCode_Type = { .ob_type = &PyType_Type, .tp_basicsize = 224 };
SITE struct ft_object PyFrame_Type = { .ob_type = &PyType_Type, .tp_basicsize = 136 };
static char bad_thread_state[8]; /* anything read through it would be garbage */

SITE int Py_IsInitialized(void) { return 1; }
SITE int Py_IsFinalizing(void) { return 0; }
SITE const char *Py_GetVersion(void) { return "3.13.0 experimental free-threading build (main, Oct  7 2024)"; }
SITE void *PyGILState_GetThisThreadState(void) { return bad_thread_state; }
SITE int PyCode_Addr2Line(void *code, int lasti) { return (int)(intptr_t)code + lasti; }

SITE void ft_alloc_site(void **p) { CHECK(cudaMalloc(p, 1 * MiB)); }

int main(void)
{
	void *a, *b;
	ft_alloc_site(&a);
	ft_alloc_site(&b);
	CHECK(cudaFree(b));
	return 0;
}
