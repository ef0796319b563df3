/* SPDX-License-Identifier: MIT */
/*
 * A stand-in for PyTorch 2.11's libc10_cuda.so, as far as preload/torch_layout.c looks at it:
 * the exported allocator object, NativeCachingAllocator's vtable (a symbol of its real size,
 * with its type_info before the address point) holding functions under the real mangled names
 * in the slots of the 2.11 row, and a cudaMallocAsync backend object. Every other slot holds a
 * function that aborts, so a wrong slot that got called would show. Used by test_torch_layout.c.
 */
#include <stdbool.h>
#include <stdlib.h>

#define NS "_ZN3c104cuda20CUDACachingAllocator"
#define NATIVE "N3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE"
#define ASYNC "N3c104cuda20CUDACachingAllocator15CudaMallocAsync24CudaMallocAsyncAllocatorE"
#define SLOTS 50 /* the 2.11 row's vtable_slots */

__attribute__((visibility("default"))) bool initialized(void *self) __asm__(NS "6Native22NativeCachingAllocator11initializedEv");
__attribute__((visibility("default"))) void get_device_stats(void *out, void *self, signed char device) __asm__(
	NS "6Native22NativeCachingAllocator14getDeviceStatsEa");
__attribute__((visibility("default"))) void attach_tracker(void *self, void *fn) __asm__(
	NS "6Native22NativeCachingAllocator27attachAllocatorTraceTrackerESt8functionIFvRKNS_22CachingDeviceAllocator10TraceEntryEEE");

bool initialized(void *self) { return self != NULL && false; }
void get_device_stats(void *out, void *self, signed char device) { (void)out, (void)self, (void)device; abort(); }
void attach_tracker(void *self, void *fn) { (void)self, (void)fn; abort(); }
static void other_method(void) { abort(); }

struct type_info {
	const void *vtable;
	const char *name;
};
static const struct type_info native_ti = { NULL, NATIVE };
static const struct type_info async_ti = { NULL, ASYNC };

/* offset to top, type_info, then the slots from the address point (2.11: 6, 9 and 44) */
#pragma GCC diagnostic ignored "-Woverride-init"
const void *const native_vtable[SLOTS + 2] __asm__("_ZTV" NATIVE) = {
	[0] = NULL,
	[1] = &native_ti,
	[2 ... SLOTS + 1] = (const void *)other_method,
	[2 + 6] = (const void *)initialized,
	[2 + 9] = (const void *)get_device_stats,
	[2 + 44] = (const void *)attach_tracker,
};
static const void *const async_vtable[SLOTS + 2] = { NULL, &async_ti, (const void *)other_method };

struct object {
	const void *const *vptr;
};
static struct object native = { native_vtable + 2 };
static struct object async_backend = { async_vtable + 2 };
static struct object on_heap_like = { NULL };

__attribute__((visibility("default"))) void *allocator __asm__(NS "9allocatorE") = &native;

/* The test's levers: which object the exported pointer names. */
__attribute__((visibility("default"))) void fake_c10_use_async(void) { allocator = &async_backend; }
__attribute__((visibility("default"))) void fake_c10_use_native(void) { allocator = &native; }
__attribute__((visibility("default"))) void *fake_c10_foreign_object(const void *const *vtable)
{
	on_heap_like.vptr = vtable;
	return &on_heap_like;
}
