/* SPDX-License-Identifier: MIT */
/*
 * What PyTorch 2.11's libc10_cuda.so looks like to preload/torch_layout.c and preload/torch.c,
 * for the two stand-ins that play it (tests/unit/fake_c10_cuda.c, tests/programs/
 * fake_c10_tracker.c): the mangled names, and NativeCachingAllocator's vtable with the 2.11
 * row's slots (initialized 6, getDeviceStats 9, attachAllocatorTraceTracker 44) holding each
 * stand-in's three methods; every other slot holds other_method, which aborts.
 */
#ifndef FAKE_C10_2_11_H
#define FAKE_C10_2_11_H

#include <stdbool.h>
#include <stdlib.h>

#define NS "_ZN3c104cuda20CUDACachingAllocator"
#define NATIVE "N3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE"
#define SLOTS 50 /* the 2.11 row's vtable_slots */
#define EXPORT __attribute__((visibility("default")))

EXPORT bool initialized(void *self) __asm__(NS "6Native22NativeCachingAllocator11initializedEv");
EXPORT void get_device_stats(void *out, void *self, signed char device) __asm__(
	NS "6Native22NativeCachingAllocator14getDeviceStatsEa");
EXPORT void attach_tracker(void *self, void *fn) __asm__(
	NS "6Native22NativeCachingAllocator27attachAllocatorTraceTrackerESt8functionIFvRKNS_22CachingDeviceAllocator10TraceEntryEEE");

static void other_method(void) { abort(); }

struct type_info {
	const void *vtable;
	const char *name;
};
static const struct type_info native_ti = { NULL, NATIVE };

/* offset to top, type_info, then the slots from the address point */
#pragma GCC diagnostic ignored "-Woverride-init"
EXPORT const void *const native_vtable[SLOTS + 2] __asm__("_ZTV" NATIVE) = {
	[0] = NULL,
	[1] = &native_ti,
	[2 ... SLOTS + 1] = (const void *)other_method,
	[2 + 6] = (const void *)initialized,
	[2 + 9] = (const void *)get_device_stats,
	[2 + 44] = (const void *)attach_tracker,
};

struct object {
	const void *const *vptr;
};
static struct object native = { native_vtable + 2 };

#endif /* FAKE_C10_2_11_H */
