/* SPDX-License-Identifier: MIT */
/*
 * The preload's own row check (preload/torch_layout.c) on a real libc10_cuda.so, dlopened with
 * no GPU: generate.py runs it for every release it derives.
 *
 *     loadcheck LIBC10_CUDA VERSION native|async
 *
 * native: the release's row must pass, initialized() called through its slot must say false
 * (nothing has initialized CUDA), and rows corrupted one field at a time must each be refused.
 * async (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync): the backend must be recognised.
 * Prints one line; exits 1 on any surprise.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "torch_layout.h"

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		printf("dlopen: %s\n", dlerror());
		return 1;
	}
	void **slot = dlsym(h, "_ZN3c104cuda20CUDACachingAllocator9allocatorE");
	void *allocator = slot ? __atomic_load_n(slot, __ATOMIC_ACQUIRE) : NULL;
	const struct vrt_torch_layout *row = vrt_torch_layout_find(argv[2]);
	if (!allocator || !row || strcmp(row->release, argv[2])) {
		printf("no allocator object, or no row for %s\n", argv[2]);
		return 1;
	}
	char why[256] = "";
	enum vrt_torch_backend b = vrt_torch_layout_check(row, argv[1], allocator, why, sizeof(why));
	if (!strcmp(argv[3], "async")) {
		printf("cudaMallocAsync backend: %s\n", b == VRT_TORCH_ASYNC ? "recognised" : why);
		return b != VRT_TORCH_ASYNC;
	}
	if (row->slot_attach_tracker < 0) {
		/* No tracker: refused for that, after every other slot was shown right. */
		bool ok = b == VRT_TORCH_REFUSED && strstr(why, "no allocator trace tracker");
		printf("native: refused as it must be (%s)\n", why);
		return !ok;
	}
	if (b != VRT_TORCH_NATIVE) {
		printf("native: the row was refused: %s\n", why);
		return 1;
	}
	void *const *vtable = *(void *const *const *)allocator;
	int initialized = ((bool (*)(void *))vtable[row->slot_initialized])(allocator);
	struct vrt_torch_layout bad[5];
	for (int i = 0; i < 5; i++)
		bad[i] = *row;
	bad[0].slot_initialized++;
	bad[1].slot_get_device_stats--;
	bad[2].slot_attach_tracker++;
	bad[3].vtable_slots++;
	bad[4].rtti_native = "N3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorX";
	int refused = 0;
	for (int i = 0; i < 5; i++)
		refused += vrt_torch_layout_check(&bad[i], argv[1], allocator, why, sizeof(why)) == VRT_TORCH_REFUSED;
	printf("native: row ok; initialized() = %d; %d of 5 corrupted rows refused\n", initialized, refused);
	return initialized != 0 || refused != 5;
}
