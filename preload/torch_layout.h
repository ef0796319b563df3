/* SPDX-License-Identifier: MIT */
/*
 * What torch.c relies on in one PyTorch release's CUDA caching allocator, one row a release:
 * derived from the release's headers and checked against its libc10_cuda.so by
 * scripts/torch_layouts/generate.py, which writes torch_layout_table.h. Nothing here depends on
 * the rest of the preload, so tests/unit and the generator's load check link it alone.
 */
#ifndef VRT_TORCH_LAYOUT_H
#define VRT_TORCH_LAYOUT_H

#include <stddef.h>

/* Offsets in bytes; -1 where the release has no such thing. */
struct vrt_torch_layout {
	const char *release; /* "2.11.0" */
	const char *cuda;    /* the CUDA of the wheel it was derived from: "13.0" */
	/* vtable slots of CUDAAllocator's virtual methods (Itanium ABI: from the address point) */
	int slot_initialized, slot_get_device_stats, slot_attach_tracker;
	int vtable_slots;    /* NativeCachingAllocator's vtable, from the library's symbol table */
	/* DeviceStats, returned by value (sret): its size and aggregate counters */
	int stats_size, stats_alloc_count, stats_alloc_bytes, stats_freed_bytes;
	/* TraceEntry, the tracker's argument; entry_device_size is 1 (DeviceIndex) or 0 (none) */
	int entry_action, entry_device, entry_device_size, entry_addr, entry_stream, entry_size;
	int action_alloc, action_free_requested, action_oom;
	/* typeid names of the two backends, and the native one's overrides as the library names them */
	const char *rtti_native, *rtti_async;
	const char *fn_initialized, *fn_get_device_stats, *fn_attach_tracker;
};

size_t vrt_torch_layout_count(void);
const struct vrt_torch_layout *vrt_torch_layout_row(size_t i);

/* The row for torch/version.py's __version__ ("2.11.0+cu130", "2.12.0a0+git1234"): that release's,
 * else the newest of its minor series (patch releases keep the allocator's layout); NULL when the
 * minor series is not in the table. */
const struct vrt_torch_layout *vrt_torch_layout_find(const char *version);

enum vrt_torch_backend {
	VRT_TORCH_REFUSED = -1,
	VRT_TORCH_NATIVE = 0, /* NativeCachingAllocator: the tracker can be attached */
	VRT_TORCH_ASYNC = 1,  /* cudaMallocAsync backend: no tracker, its tensors are driver calls */
};

/*
 * Checks a row against the live allocator object of the libc10_cuda.so loaded from lib_path
 * before anything is called through it: the object and its vtable lie in that library, its RTTI
 * names a backend of the row, and (native backend) every slot the row names is inside the vtable
 * and holds the method the row names, by the library's own symbol table (.symtab; a stripped
 * library is checked on the rest). Reads, never calls. On refusal, why says what differs.
 */
enum vrt_torch_backend vrt_torch_layout_check(const struct vrt_torch_layout *row, const char *lib_path,
					      const void *allocator, char *why, size_t why_len);

/* The same against any row table: for tests. */
const struct vrt_torch_layout *vrt_torch_layout_find_in(const struct vrt_torch_layout *rows, size_t n,
							const char *version);

#endif
