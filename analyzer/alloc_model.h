/* SPDX-License-Identifier: MIT */
/*
 * A model of PyTorch's CUDA caching allocator: one device's DeviceCachingAllocator
 * (c10/cuda/CUDACachingAllocator.cpp) and the settings of PYTORCH_ALLOC_CONF /
 * PYTORCH_CUDA_ALLOC_CONF (c10/core/AllocatorConfig.cpp, c10/cuda/CUDAAllocatorConfig.cpp), as
 * PyTorch 2.11 has them. It is our own code written from those rules, nothing copied:
 *
 *  - sizes round to 512 bytes, or to a power-of-two division (roundup_power2_divisions);
 *  - requests up to 1 MiB use the small pool and 2 MiB segments; larger ones the large pool,
 *    with 20 MiB segments below 10 MiB and segments of the request rounded to 2 MiB above;
 *  - free blocks are kept per pool, ordered by (stream, size, address): best fit is the first
 *    block of the same stream at least as large; a block is split when the remainder is at
 *    least 512 bytes (small pool, expandable segments) or over 1 MiB (large pool);
 *  - max_split_size_mb: blocks that large are never split and only serve requests at least
 *    max_split_size, at most max_non_split_rounding_mb (20 MiB) smaller than the block;
 *  - when no block fits: garbage collection (garbage_collection_threshold, with a per-process
 *    limit only), a new segment, then freeing oversize cached blocks and retrying, then freeing
 *    every unsplit cached block (what empty_cache() does) and retrying, then out of memory;
 *  - a per-process limit (set_per_process_memory_fraction, per_process_memory_fraction) refuses
 *    a new segment that would take the reserved total past it, without asking the device;
 *  - expandable_segments:True: one growing segment per stream and pool, mapped in 2 MiB (small)
 *    or 20 MiB (large) pages at the lowest address that fits, unmapped page by page.
 *
 * Not modelled: CUDA graph pools and MemPools, record_stream (frees are taken as completed when
 * requested), IPC, the cudaMallocAsync backend.
 */
#ifndef VRAMTRACE_ALLOC_MODEL_H
#define VRAMTRACE_ALLOC_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The PyTorch release whose allocator this models. */
#define VRT_AM_TORCH_RELEASE "2.11"
#define VRT_AM_MODEL_NAME "PyTorch 2.11 CUDA caching allocator"

#define VRT_AM_MIN_BLOCK 512ull
#define VRT_AM_SMALL_SIZE (1ull << 20)
#define VRT_AM_SMALL_BUFFER (2ull << 20)
#define VRT_AM_MIN_LARGE_ALLOC (10ull << 20)
#define VRT_AM_ROUND_LARGE (2ull << 20)
#define VRT_AM_LARGE_BUFFER (20ull << 20)
#define VRT_AM_DIVISION_INTERVALS 16

struct vrt_am_config {
	uint64_t max_split_size;          /* UINT64_MAX: every block may be split */
	uint64_t max_non_split_rounding;  /* how much larger an oversize block may be than its request */
	uint64_t large_segment_size;      /* segments of 1-10 MiB requests, pages of large expandable segments */
	double gc_threshold;              /* garbage_collection_threshold; 0: off */
	double fraction;                  /* per_process_memory_fraction; 1: no limit */
	uint32_t divisions[VRT_AM_DIVISION_INTERVALS]; /* roundup_power2_divisions per power of two from 1 MiB */
	bool expandable;
	bool async_backend;               /* backend:cudaMallocAsync (not modelled) */
};

/* The defaults: what an empty PYTORCH_ALLOC_CONF gives. */
void vrt_am_config_default(struct vrt_am_config *c);
/* Parses a PYTORCH_ALLOC_CONF string over c, as PyTorch does (unknown keys and bad values are
 * errors there too). 0, or -1 with the reason in err. */
int vrt_am_config_parse(struct vrt_am_config *c, const char *conf, char *err, size_t err_len);
/* The setting in PYTORCH_ALLOC_CONF syntax, the keys that differ from the defaults only ("" for
 * the defaults). */
void vrt_am_config_format(const struct vrt_am_config *c, char *buf, size_t len);

uint64_t vrt_am_round_size(const struct vrt_am_config *c, uint64_t size);
uint64_t vrt_am_allocation_size(const struct vrt_am_config *c, uint64_t size);

/* Device-memory operations the allocator makes. */
enum vrt_am_op {
	VRT_AM_SEG_ALLOC = 1, /* cudaMalloc of a segment */
	VRT_AM_SEG_FREE,      /* cudaFree of a segment */
	VRT_AM_VA_RESERVE,    /* cuMemAddressReserve of an expandable segment */
	VRT_AM_VA_FREE,       /* cuMemAddressFree */
	VRT_AM_MAP,           /* cuMemCreate + cuMemMap of consecutive pages */
	VRT_AM_UNMAP,         /* cuMemUnmap + cuMemRelease of consecutive pages */
};

/*
 * What the model asks of the device and tells about it. acquire: before a cudaMalloc
 * (SEG_ALLOC), the pages of a MAP (*addr holds their address) or a VA_RESERVE; false when the
 * device is out of memory. For SEG_ALLOC and VA_RESERVE it may set *addr (left 0, the model
 * picks an address). event: after every operation that happened. Either may be NULL.
 */
struct vrt_am_env {
	bool (*acquire)(void *ctx, enum vrt_am_op op, uint64_t size, uint64_t *addr);
	void (*event)(void *ctx, enum vrt_am_op op, uint64_t addr, uint64_t size);
	void *ctx;
};

struct vrt_am_block;
struct vrt_am_tree {
	uint32_t root;
};

struct vrt_am_pool {
	struct vrt_am_tree blocks;   /* free mapped blocks by (stream, size, address) */
	struct vrt_am_tree unmapped; /* unmapped ranges of expandable segments by (stream, address) */
	int64_t get_free_blocks_calls;
	bool small;
};

struct vrt_am_segment; /* an expandable segment */

struct vrt_am_stats {
	uint64_t reserved, allocated, peak_reserved, peak_allocated;
	uint64_t segments_allocated, segments_freed, bytes_mapped, bytes_unmapped;
	uint64_t requests, ooms, retries, empty_caches, gc_releases;
};

struct vrt_am {
	struct vrt_am_config cfg;
	struct vrt_am_env env;
	uint64_t limit;          /* bytes the allocator may reserve (a per-process limit); 0: none */
	uint64_t device_total;   /* sizes an expandable segment's address space (1 1/8 of it) */
	struct vrt_am_pool small, large;
	struct vrt_am_block *b;  /* blocks by index; 0 is never used */
	uint32_t n_blocks, cap_blocks, free_blocks;
	struct vrt_am_segment *es;
	uint32_t n_es, cap_es;
	uint64_t next_addr;      /* addresses the model picks itself */
	uint32_t seed;
	struct vrt_am_stats stats;
	int error;               /* VRT_E_NOMEM once an allocation of the model's own failed */
};

int vrt_am_init(struct vrt_am *a, const struct vrt_am_config *cfg, const struct vrt_am_env *env);
void vrt_am_free_all(struct vrt_am *a);

/*
 * A tensor request of size bytes on stream: the block's handle (> 0), or 0 when PyTorch would
 * raise out of memory. The handle stays valid until vrt_am_release.
 */
uint32_t vrt_am_malloc(struct vrt_am *a, uint64_t size, uint64_t stream);
/* The tensor's block goes back to the cache. */
void vrt_am_release(struct vrt_am *a, uint32_t block);
/* torch.cuda.empty_cache(): every unsplit cached segment (and unused expandable page) back. */
void vrt_am_empty_cache(struct vrt_am *a);

/* Whether a request could be served now without freeing cached memory first: a cached block
 * fits, or a new segment fits the limit (the device is not asked). No state changes. */
bool vrt_am_fits_without_release(const struct vrt_am *a, uint64_t size, uint64_t stream);

uint64_t vrt_am_block_addr(const struct vrt_am *a, uint32_t block);
uint64_t vrt_am_block_size(const struct vrt_am *a, uint32_t block);
/* The largest free range the allocator holds (a free block, or the free mapped pages before an
 * expandable segment's end), and the cached bytes an empty_cache() would return now. */
uint64_t vrt_am_largest_free(const struct vrt_am *a);
uint64_t vrt_am_releasable(const struct vrt_am *a);

#endif /* VRAMTRACE_ALLOC_MODEL_H */
