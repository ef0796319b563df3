/* SPDX-License-Identifier: MIT */
/*
 * A stand-in for PyTorch 2.11's libc10_cuda.so, as far as preload/torch_layout.c looks at it:
 * the exported allocator object, NativeCachingAllocator's vtable (a symbol of its real size,
 * with its type_info before the address point) holding functions under the real mangled names
 * in the slots of the 2.11 row, and a cudaMallocAsync backend object. Every other slot holds a
 * function that aborts, so a wrong slot that got called would show. Used by test_torch_layout.c.
 */
#include "../programs/fake_c10_2_11.h"

#define ASYNC "N3c104cuda20CUDACachingAllocator15CudaMallocAsync24CudaMallocAsyncAllocatorE"

bool initialized(void *self) { return self != NULL && false; }
void get_device_stats(void *out, void *self, signed char device) { (void)out, (void)self, (void)device; abort(); }
void attach_tracker(void *self, void *fn) { (void)self, (void)fn; abort(); }

static const struct type_info async_ti = { NULL, ASYNC };
static const void *const async_vtable[SLOTS + 2] = { NULL, &async_ti, (const void *)other_method };
static struct object async_backend = { async_vtable + 2 };
static struct object on_heap_like = { NULL };

EXPORT void *allocator __asm__(NS "9allocatorE") = &native;

/* The test's levers: which object the exported pointer names. */
EXPORT void fake_c10_use_async(void) { allocator = &async_backend; }
EXPORT void fake_c10_use_native(void) { allocator = &native; }
EXPORT void *fake_c10_foreign_object(const void *const *vtable)
{
	on_heap_like.vptr = vtable;
	return &on_heap_like;
}
