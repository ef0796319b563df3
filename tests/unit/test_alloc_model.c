/* SPDX-License-Identifier: MIT */
/*
 * The caching-allocator model (analyzer/alloc_model.c) on hand-built request sequences. Every
 * expected figure is worked out from PyTorch 2.11's rules (CUDACachingAllocator.cpp), written
 * next to the check, not read back from the model.
 */
#include <string.h>

#include "alloc_model.h"
#include "vt.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

/* Records what the model did; hands out the addresses it is given, refuses what it is told to. */
struct env {
	struct {
		enum vrt_am_op op;
		uint64_t addr, size;
	} ev[64];
	int n;
	uint64_t next_addr;     /* next cudaMalloc address (0: the model picks) */
	uint64_t addr_step;     /* added after each cudaMalloc; may be negative (wraps) */
	uint64_t refuse_above;  /* a cudaMalloc or mapping larger than this fails (0: never) */
	uint64_t device_room;   /* bytes the device has left for the allocator (0: unlimited) */
	uint64_t used;
};

static bool env_acquire(void *ctx, enum vrt_am_op op, uint64_t size, uint64_t *addr)
{
	struct env *e = ctx;
	if (op == VRT_AM_VA_RESERVE)
		return true;
	if ((e->refuse_above && size > e->refuse_above) || (e->device_room && e->used + size > e->device_room))
		return false;
	if (op == VRT_AM_SEG_ALLOC && e->next_addr) {
		*addr = e->next_addr;
		e->next_addr += e->addr_step;
	}
	return true;
}

static void env_event(void *ctx, enum vrt_am_op op, uint64_t addr, uint64_t size)
{
	struct env *e = ctx;
	if (op == VRT_AM_SEG_ALLOC || op == VRT_AM_MAP)
		e->used += size;
	if (op == VRT_AM_SEG_FREE || op == VRT_AM_UNMAP)
		e->used -= size;
	if (e->n < 64)
		e->ev[e->n++] = (__typeof__(e->ev[0])){ op, addr, size };
}

static void start(struct vrt_am *a, struct env *e, const char *conf)
{
	struct vrt_am_config c;
	char err[200];
	vrt_am_config_default(&c);
	VT_CHECK(vrt_am_config_parse(&c, conf, err, sizeof(err)) == 0);
	struct vrt_am_env env = { env_acquire, env_event, e };
	vrt_am_init(a, &c, &env);
}

#define EV(e, i, o, s)                      \
	do {                                \
		VT_CHECK((e).n > (i));      \
		VT_EQ((e).ev[i].op, (o));   \
		VT_EQ((e).ev[i].size, (s)); \
	} while (0)

/* kMinBlockSize 512: below it 512, else up to a multiple of 512. */
static void test_round_size_to_512(void)
{
	struct vrt_am_config c;
	vrt_am_config_default(&c);
	VT_EQ(vrt_am_round_size(&c, 1), 512);
	VT_EQ(vrt_am_round_size(&c, 512), 512);
	VT_EQ(vrt_am_round_size(&c, 513), 1024);
	VT_EQ(vrt_am_round_size(&c, 262147), 262656); /* 513 * 512, as tensor-default.vrt recorded */
}

/*
 * roundup_power2_divisions: between two powers of two, `divisions` equal steps, for sizes over
 * 512 * divisions. The list form takes MB boundaries: the first value also covers the intervals
 * below it, '>' the ones after the last.
 */
static void test_round_size_power2_divisions(void)
{
	struct vrt_am_config c;
	char err[200];
	vrt_am_config_default(&c);
	VT_REQUIRE(vrt_am_config_parse(&c, "roundup_power2_divisions:2", err, sizeof(err)) == 0);
	VT_EQ(vrt_am_round_size(&c, 1000), 1024);  /* 1000 <= 512 * 2: plain rounding */
	VT_EQ(vrt_am_round_size(&c, 5000), 6144);  /* 4096 + one step of 2048 */
	VT_EQ(vrt_am_round_size(&c, 4096), 4096);  /* a power of two stays */
	VT_EQ(vrt_am_round_size(&c, 6144), 6144);  /* on a step stays */
	vrt_am_config_default(&c);
	VT_REQUIRE(vrt_am_config_parse(&c, "roundup_power2_divisions:4", err, sizeof(err)) == 0);
	VT_EQ(vrt_am_round_size(&c, 1200000), 1310720); /* 1 MiB + one step of 256 KiB */
	vrt_am_config_default(&c);
	VT_REQUIRE(vrt_am_config_parse(&c, "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", err, sizeof(err)) == 0);
	VT_EQ(vrt_am_round_size(&c, 300 * MiB), 300 * MiB); /* [256 MiB, 512 MiB): 1 division: plain */
	VT_EQ(vrt_am_round_size(&c, 600 * MiB), 768 * MiB); /* [512 MiB, 1 GiB): 2: steps of 256 MiB */
	VT_EQ(vrt_am_round_size(&c, 1100 * MiB), 1280 * MiB); /* [1 GiB, 2 GiB): 4: steps of 256 MiB */
	VT_EQ(vrt_am_round_size(&c, 2560 * MiB + 1), 2816 * MiB); /* >: 8: steps of 256 MiB */
	VT_EQ(vrt_am_round_size(&c, 5 * MiB + 1), 5 * MiB + 512); /* below 256 MiB: the first value, 1 */
}

/* Segments: <= 1 MiB in 2 MiB, < 10 MiB in 20 MiB, larger rounded up to 2 MiB. */
static void test_allocation_sizes(void)
{
	struct vrt_am_config c;
	vrt_am_config_default(&c);
	VT_EQ(vrt_am_allocation_size(&c, 1 * MiB), 2 * MiB);
	VT_EQ(vrt_am_allocation_size(&c, 1 * MiB + 512), 20 * MiB);
	VT_EQ(vrt_am_allocation_size(&c, 10 * MiB - 512), 20 * MiB);
	VT_EQ(vrt_am_allocation_size(&c, 10 * MiB), 10 * MiB);
	VT_EQ(vrt_am_allocation_size(&c, 10 * MiB + 512), 12 * MiB);
}

/*
 * The small pool as tensor-default.vrt recorded it on the H200: a 4-byte tensor gets 512 bytes
 * at the start of a 2 MiB segment; freed, the segment is one free block again; a 512 KiB
 * request splits it at its start, and after its free a 262147-byte one (262656) does too; the
 * next step's 512 KiB request lands after it, at +262656, and so on.
 */
static void test_small_pool_packs_a_segment(void)
{
	struct vrt_am a;
	struct env e = { .next_addr = 0x7f59a7e00000ull };
	start(&a, &e, NULL);
	uint32_t t = vrt_am_malloc(&a, 4, 0);
	VT_EQ(vrt_am_block_addr(&a, t), 0x7f59a7e00000ull);
	VT_EQ(vrt_am_block_size(&a, t), 512);
	EV(e, 0, VRT_AM_SEG_ALLOC, 2 * MiB);
	vrt_am_release(&a, t);
	for (int step = 0; step < 4; step++) {
		uint32_t tmp = vrt_am_malloc(&a, 524288, 0);
		VT_EQ(vrt_am_block_addr(&a, tmp), 0x7f59a7e00000ull + (uint64_t)step * 262656);
		vrt_am_release(&a, tmp);
		uint32_t kept = vrt_am_malloc(&a, 262147, 0);
		VT_EQ(vrt_am_block_addr(&a, kept), 0x7f59a7e00000ull + (uint64_t)step * 262656);
	}
	VT_EQ(e.n, 1); /* one segment served all of it */
	VT_EQ(a.stats.peak_reserved, 2 * MiB);
	VT_EQ(a.stats.allocated, 4 * 262656);
	VT_EQ(a.stats.peak_allocated, 3 * 262656 + 524288);
	vrt_am_free_all(&a);
}

/*
 * The large pool: a 3 MiB request takes a 20 MiB segment and splits it (17 MiB left, over
 * 1 MiB); a second 3 MiB one follows it. 15 MiB does not fit the 14 MiB left: a 16 MiB segment
 * (15 MiB up to 2 MiB), not split (1 MiB left is not over 1 MiB), so the block counts 16 MiB.
 */
static void test_large_pool_split_rules(void)
{
	struct vrt_am a;
	struct env e = { .next_addr = 0x100000000ull, .addr_step = 0x10000000ull };
	start(&a, &e, NULL);
	uint32_t x = vrt_am_malloc(&a, 3 * MiB, 0), y = vrt_am_malloc(&a, 3 * MiB, 0);
	VT_EQ(vrt_am_block_addr(&a, x), 0x100000000ull);
	VT_EQ(vrt_am_block_addr(&a, y), 0x100000000ull + 3 * MiB);
	uint32_t z = vrt_am_malloc(&a, 15 * MiB, 0);
	VT_EQ(vrt_am_block_addr(&a, z), 0x110000000ull);
	VT_EQ(vrt_am_block_size(&a, z), 16 * MiB);
	VT_EQ(a.stats.reserved, 36 * MiB);
	VT_EQ(a.stats.allocated, 22 * MiB);
	/* 19.5 MiB in a fresh 20 MiB segment: 0.5 MiB left, not over 1 MiB: not split */
	uint32_t w = vrt_am_malloc(&a, 19 * MiB + 512 * KiB, 0);
	VT_EQ(vrt_am_block_size(&a, w), 20 * MiB);
	EV(e, 0, VRT_AM_SEG_ALLOC, 20 * MiB);
	EV(e, 1, VRT_AM_SEG_ALLOC, 16 * MiB);
	EV(e, 2, VRT_AM_SEG_ALLOC, 20 * MiB);
	vrt_am_free_all(&a);
}

/* Best fit: the smallest free block that fits; between equal sizes the lowest address. Freed
 * neighbours merge back into one block. */
static void test_best_fit_and_merging(void)
{
	struct vrt_am a;
	/* segments handed out from high to low addresses, as cudaMalloc often does */
	struct env e = { .next_addr = 0x900000000ull, .addr_step = (uint64_t)-0x100000000ll };
	start(&a, &e, NULL);
	uint32_t s1 = vrt_am_malloc(&a, 12 * MiB, 0); /* 12 MiB segment at 0x9.. */
	uint32_t s2 = vrt_am_malloc(&a, 12 * MiB, 0); /* 12 MiB segment at 0x8.. */
	uint32_t s3 = vrt_am_malloc(&a, 40 * MiB, 0); /* 40 MiB segment at 0x7.. */
	vrt_am_release(&a, s1);
	vrt_am_release(&a, s2);
	vrt_am_release(&a, s3);
	/* 11 MiB: both 12 MiB blocks fit and are smaller than 40 MiB; the lower address wins */
	uint32_t r = vrt_am_malloc(&a, 11 * MiB, 0);
	VT_EQ(vrt_am_block_addr(&a, r), 0x800000000ull);
	VT_EQ(vrt_am_block_size(&a, r), 12 * MiB); /* 1 MiB left is not over 1 MiB */
	/* three 13 MiB requests split the 40 MiB segment (12 MiB blocks are too small); the middle
	 * and then the first freed merge into one 26 MiB block, which a 26 MiB request takes */
	uint32_t p = vrt_am_malloc(&a, 13 * MiB, 0), q = vrt_am_malloc(&a, 13 * MiB, 0), o = vrt_am_malloc(&a, 13 * MiB, 0);
	VT_EQ(vrt_am_block_addr(&a, p), 0x700000000ull);
	VT_EQ(vrt_am_block_addr(&a, o), 0x700000000ull + 26 * MiB);
	VT_EQ(vrt_am_block_size(&a, o), 14 * MiB); /* the last 14 MiB: 1 MiB left, not split */
	vrt_am_release(&a, q);
	vrt_am_release(&a, p);
	uint32_t big = vrt_am_malloc(&a, 26 * MiB, 0);
	VT_EQ(vrt_am_block_addr(&a, big), 0x700000000ull);
	VT_EQ(e.n, 3);
	vrt_am_free_all(&a);
}

/*
 * A per-process limit of 60 MiB: 30 + 20 MiB reserved, the 30 MiB freed to the cache; 32 MiB
 * fits no cached block and 50 + 32 > 60, so the device is not asked; without max_split_size
 * there is no oversize block to free, so every unsplit cached block goes (the 30 MiB) and the
 * retry reserves 20 + 32 = 52. Under a 50 MiB limit the retry fails too: out of memory, with
 * the cache already emptied.
 */
static void test_limit_frees_the_cache_and_retries(void)
{
	struct vrt_am a;
	struct env e = { 0 };
	start(&a, &e, NULL);
	a.limit = 60 * MiB;
	uint32_t x = vrt_am_malloc(&a, 30 * MiB, 0);
	VT_CHECK(vrt_am_malloc(&a, 20 * MiB, 0) != 0);
	vrt_am_release(&a, x);
	VT_CHECK(!vrt_am_fits_without_release(&a, 32 * MiB, 0));
	VT_CHECK(vrt_am_fits_without_release(&a, 30 * MiB, 0)); /* the cached block */
	VT_CHECK(vrt_am_malloc(&a, 32 * MiB, 0) != 0);
	VT_EQ(e.n, 4);
	EV(e, 2, VRT_AM_SEG_FREE, 30 * MiB);
	EV(e, 3, VRT_AM_SEG_ALLOC, 32 * MiB);
	VT_EQ(a.stats.reserved, 52 * MiB);
	VT_EQ(a.stats.peak_reserved, 52 * MiB);
	vrt_am_free_all(&a);

	start(&a, &e, NULL);
	e.n = 0;
	a.limit = 50 * MiB;
	x = vrt_am_malloc(&a, 30 * MiB, 0);
	VT_CHECK(vrt_am_malloc(&a, 20 * MiB, 0) != 0);
	vrt_am_release(&a, x);
	VT_EQ(vrt_am_malloc(&a, 32 * MiB, 0), 0);
	VT_EQ(a.stats.ooms, 1);
	VT_EQ(a.stats.reserved, 20 * MiB);
	vrt_am_free_all(&a);
}

/* A cudaMalloc the device refuses: the cache is freed and the request tried once more. */
static void test_device_refusal_retries_after_freeing_the_cache(void)
{
	struct vrt_am a;
	struct env e = { .device_room = 64 * MiB };
	start(&a, &e, NULL);
	uint32_t x = vrt_am_malloc(&a, 40 * MiB, 0);
	vrt_am_release(&a, x);
	uint32_t y = vrt_am_malloc(&a, 42 * MiB, 0); /* 40 cached + 42 > 64: refused, then freed */
	VT_CHECK(y != 0);
	EV(e, 1, VRT_AM_SEG_FREE, 40 * MiB);
	EV(e, 2, VRT_AM_SEG_ALLOC, 42 * MiB);
	VT_EQ(a.stats.retries, 1);
	vrt_am_free_all(&a);
}

/*
 * max_split_size_mb:128: a 200 MiB block is never split; a 100 MiB request does not take it (a
 * new segment); 190 MiB does (200 < 190 + 20); 150 MiB does not (200 >= 150 + 20). Under a
 * limit, an oversize request frees just the cached oversize block that is large enough, not
 * the whole cache.
 */
static void test_max_split_size(void)
{
	struct vrt_am a;
	struct env e = { 0 };
	start(&a, &e, "max_split_size_mb:128");
	uint32_t big = vrt_am_malloc(&a, 200 * MiB, 0);
	vrt_am_release(&a, big);
	uint32_t mid = vrt_am_malloc(&a, 100 * MiB, 0);
	VT_EQ(a.stats.reserved, 300 * MiB);
	uint32_t again = vrt_am_malloc(&a, 190 * MiB, 0);
	VT_EQ(vrt_am_block_size(&a, again), 200 * MiB);
	VT_EQ(a.stats.reserved, 300 * MiB);
	vrt_am_release(&a, again);
	uint32_t other = vrt_am_malloc(&a, 150 * MiB, 0);
	VT_EQ(vrt_am_block_size(&a, other), 150 * MiB);
	VT_EQ(a.stats.reserved, 450 * MiB);
	vrt_am_release(&a, other);
	vrt_am_release(&a, mid);
	vrt_am_free_all(&a);

	/* cached: 200 MiB and 150 MiB (oversize), 20 MiB in use; limit 400 MiB; 130 MiB request:
	 * neither cached block may serve it (200 >= 150, 150 >= 150), 370 + 130 > 400, and the
	 * first oversize block of at least 130 MiB (150 MiB) is freed: 220 + 130 = 350 fits */
	start(&a, &e, "max_split_size_mb:128");
	e.n = 0;
	a.limit = 400 * MiB;
	uint32_t b1 = vrt_am_malloc(&a, 200 * MiB, 0), b2 = vrt_am_malloc(&a, 150 * MiB, 0);
	VT_CHECK(vrt_am_malloc(&a, 20 * MiB, 0) != 0);
	vrt_am_release(&a, b1);
	vrt_am_release(&a, b2);
	VT_CHECK(vrt_am_malloc(&a, 130 * MiB, 0) != 0);
	EV(e, 3, VRT_AM_SEG_FREE, 150 * MiB);
	EV(e, 4, VRT_AM_SEG_ALLOC, 130 * MiB);
	VT_EQ(e.n, 5);
	VT_EQ(a.stats.reserved, 350 * MiB);
	vrt_am_free_all(&a);
}

/*
 * garbage_collection_threshold:0.5 with a 100 MiB limit: 30 + 30 MiB cached after their frees
 * (both aged 1: one get_free_block call on the large pool since); 40 MiB fits no block, the
 * reserved 60 MiB is over 50 MiB, so every unsplit block at least the average age (1) goes
 * before the new segment, although 60 + 40 would have fitted the limit.
 */
static void test_garbage_collection(void)
{
	struct vrt_am a;
	struct env e = { 0 };
	start(&a, &e, "garbage_collection_threshold:0.5");
	a.limit = 100 * MiB;
	uint32_t x = vrt_am_malloc(&a, 30 * MiB, 0), y = vrt_am_malloc(&a, 30 * MiB, 0);
	vrt_am_release(&a, x);
	vrt_am_release(&a, y);
	VT_CHECK(!vrt_am_fits_without_release(&a, 40 * MiB, 0));
	VT_CHECK(vrt_am_malloc(&a, 40 * MiB, 0) != 0);
	EV(e, 2, VRT_AM_SEG_FREE, 30 * MiB);
	EV(e, 3, VRT_AM_SEG_FREE, 30 * MiB);
	EV(e, 4, VRT_AM_SEG_ALLOC, 40 * MiB);
	VT_EQ(a.stats.gc_releases, 2);
	vrt_am_free_all(&a);

	/* without a limit there is no garbage collection: the blocks stay cached */
	start(&a, &e, "garbage_collection_threshold:0.5");
	e.n = 0;
	x = vrt_am_malloc(&a, 30 * MiB, 0);
	y = vrt_am_malloc(&a, 30 * MiB, 0);
	vrt_am_release(&a, x);
	vrt_am_release(&a, y);
	VT_CHECK(vrt_am_malloc(&a, 40 * MiB, 0) != 0);
	VT_EQ(e.n, 3);
	VT_EQ(a.stats.reserved, 100 * MiB);
	vrt_am_free_all(&a);
}

/*
 * expandable_segments:True: 3 MiB maps one 20 MiB page of a new segment; 30 MiB then fits the
 * 17 MiB free at its end plus 13 MiB of the next page (one more page mapped): 40 MiB reserved
 * where separate segments take 20 + 30. Freed and emptied, the pages are unmapped and the
 * address range given back.
 */
static void test_expandable_segments_grow(void)
{
	struct vrt_am a;
	struct env e = { 0 };
	start(&a, &e, "expandable_segments:True");
	a.device_total = 80ull << 30;
	uint32_t x = vrt_am_malloc(&a, 3 * MiB, 0);
	EV(e, 0, VRT_AM_VA_RESERVE, 90ull << 30); /* 1 1/8 of the device, in 20 MiB pages */
	EV(e, 1, VRT_AM_MAP, 20 * MiB);
	uint64_t base = e.ev[0].addr;
	VT_EQ(vrt_am_block_addr(&a, x), base);
	uint32_t y = vrt_am_malloc(&a, 30 * MiB, 0);
	EV(e, 2, VRT_AM_MAP, 20 * MiB);
	VT_EQ(e.ev[2].addr, base + 20 * MiB);
	VT_EQ(vrt_am_block_addr(&a, y), base + 3 * MiB);
	VT_EQ(a.stats.reserved, 40 * MiB);
	vrt_am_release(&a, x);
	vrt_am_release(&a, y);
	VT_EQ(vrt_am_releasable(&a), 40 * MiB);
	vrt_am_empty_cache(&a);
	EV(e, 3, VRT_AM_UNMAP, 40 * MiB);
	EV(e, 4, VRT_AM_VA_FREE, 90ull << 30);
	VT_EQ(a.stats.reserved, 0);
	vrt_am_free_all(&a);
}

/*
 * Best fit in an expandable segment counts a block's size with the unmapped range after it, so
 * a larger block inside the segment (8 MiB, between blocks in use) is taken before the free
 * tail (5 MiB, before the unmapped rest) that a plain best fit would pick.
 */
static void test_expandable_best_fit_prefers_inner_blocks(void)
{
	struct vrt_am a;
	struct env e = { 0 };
	start(&a, &e, "expandable_segments:True");
	uint32_t x = vrt_am_malloc(&a, 8 * MiB, 0);
	VT_CHECK(vrt_am_malloc(&a, 2 * MiB, 0) != 0);
	VT_CHECK(vrt_am_malloc(&a, 5 * MiB, 0) != 0);
	uint64_t base = vrt_am_block_addr(&a, x);
	vrt_am_release(&a, x); /* free: [0, 8 MiB) and the tail [15, 20 MiB) */
	uint32_t r = vrt_am_malloc(&a, 4 * MiB, 0);
	VT_EQ(vrt_am_block_addr(&a, r), base);
	VT_EQ(a.stats.reserved, 20 * MiB);
	vrt_am_free_all(&a);
}

/* Blocks of a stream are for that stream only: the same request on another stream takes a new
 * segment while a fitting block sits cached for the first. */
static void test_per_stream_pools(void)
{
	struct vrt_am a;
	struct env e = { 0 };
	start(&a, &e, NULL);
	uint32_t x = vrt_am_malloc(&a, 30 * MiB, 7);
	vrt_am_release(&a, x);
	VT_CHECK(vrt_am_malloc(&a, 30 * MiB, 9) != 0);
	VT_EQ(a.stats.reserved, 60 * MiB);
	VT_CHECK(vrt_am_malloc(&a, 30 * MiB, 7) != 0);
	VT_EQ(a.stats.reserved, 60 * MiB);
	vrt_am_free_all(&a);
}

/* empty_cache() frees unsplit cached segments only: one with a tensor in it stays. */
static void test_empty_cache_keeps_split_segments(void)
{
	struct vrt_am a;
	struct env e = { 0 };
	start(&a, &e, NULL);
	uint32_t x = vrt_am_malloc(&a, 30 * MiB, 0), y = vrt_am_malloc(&a, 3 * MiB, 0);
	VT_CHECK(vrt_am_malloc(&a, 3 * MiB, 0) != 0); /* shares y's 20 MiB segment */
	vrt_am_release(&a, x);
	vrt_am_release(&a, y);
	VT_EQ(vrt_am_releasable(&a), 30 * MiB);
	VT_EQ(vrt_am_largest_free(&a), 30 * MiB);
	vrt_am_empty_cache(&a);
	VT_EQ(a.stats.reserved, 20 * MiB);
	VT_EQ(vrt_am_largest_free(&a), 14 * MiB);
	vrt_am_free_all(&a);
}

/* The setting is read as PyTorch reads it, errors included. */
static void test_config_parse(void)
{
	struct vrt_am_config c;
	char err[200], text[200];
	vrt_am_config_default(&c);
	VT_EQ(vrt_am_config_parse(&c, "expandable_segments:True, max_split_size_mb:128", err, sizeof(err)), 0);
	VT_CHECK(c.expandable);
	VT_EQ(c.max_split_size, 128 * MiB);
	vrt_am_config_format(&c, text, sizeof(text));
	VT_CHECK(!strcmp(text, "expandable_segments:True,max_split_size_mb:128"));
	VT_EQ(vrt_am_config_parse(&c, "", err, sizeof(err)), 0);
	VT_EQ(c.max_split_size, UINT64_MAX); /* reset by every parse */
	VT_EQ(vrt_am_config_parse(&c, "max_split_size_mb:19", err, sizeof(err)), -1);
	VT_EQ(vrt_am_config_parse(&c, "garbage_collection_threshold:1.0", err, sizeof(err)), -1);
	VT_EQ(vrt_am_config_parse(&c, "expandable_segments:true", err, sizeof(err)), -1);
	VT_EQ(vrt_am_config_parse(&c, "max_spilt_size_mb:128", err, sizeof(err)), -1);
	VT_CHECK(strstr(err, "max_spilt_size_mb") != NULL);
	VT_EQ(vrt_am_config_parse(&c, "roundup_power2_divisions:3", err, sizeof(err)), -1);
	VT_EQ(vrt_am_config_parse(&c, "backend:native,release_lock_on_cudamalloc:True", err, sizeof(err)), 0);
}

int main(void)
{
	VT_RUN(test_round_size_to_512);
	VT_RUN(test_round_size_power2_divisions);
	VT_RUN(test_allocation_sizes);
	VT_RUN(test_small_pool_packs_a_segment);
	VT_RUN(test_large_pool_split_rules);
	VT_RUN(test_best_fit_and_merging);
	VT_RUN(test_limit_frees_the_cache_and_retries);
	VT_RUN(test_device_refusal_retries_after_freeing_the_cache);
	VT_RUN(test_max_split_size);
	VT_RUN(test_garbage_collection);
	VT_RUN(test_expandable_segments_grow);
	VT_RUN(test_expandable_best_fit_prefers_inner_blocks);
	VT_RUN(test_per_stream_pools);
	VT_RUN(test_empty_cache_keeps_split_segments);
	VT_RUN(test_config_parse);
	return vt_summary();
}
