/* SPDX-License-Identifier: MIT */
/*
 * The analyzer's live-set model, record by record: its storage (a dense array of packed items
 * and an index with backward-shift deletion, growth) against a plain reference, the view of an
 * item it hands out, and the counted delta of every effect, which the timeline and leaks add up.
 */
#include <string.h>

#include "model.h"
#include "vt.h"

static struct vrt_record alloc_at(uint64_t ts, uint64_t addr, uint64_t size)
{
	return (struct vrt_record){ .op = VRT_OP_ALLOC, .ts = ts, .addr = addr, .size = size,
				    .kind = VRT_KIND_DEVICE, .device = 0 };
}

static struct vrt_record free_at(uint64_t ts, uint64_t addr)
{
	return (struct vrt_record){ .op = VRT_OP_FREE, .ts = ts, .addr = addr, .device = -1 };
}

static int64_t live_device_bytes(const struct vrt_model *m) { return m->live[vrt_device_slot(0)][VRT_KIND_DEVICE]; }

/* An allocation at an address still live (its free was lost): the old one dies, and the effect's
 * delta is the change of the total, not the new size alone. */
static void test_replaced_allocation_delta_is_the_change_of_the_total(void)
{
	struct vrt_model m;
	VT_REQUIRE(vrt_model_init(&m) == 0);
	struct vrt_effect e;
	struct vrt_record r = alloc_at(10, 0x1000, 100);
	vrt_model_apply(&m, &r, &e);
	VT_EQ(e.delta, 100);
	r = alloc_at(20, 0x1000, 300);
	vrt_model_apply(&m, &r, &e);
	VT_EQ(e.kind, VRT_EFFECT_BORN);
	VT_EQ(e.delta, 200);
	VT_EQ(live_device_bytes(&m), 300);
	r = free_at(30, 0x1000);
	vrt_model_apply(&m, &r, &e);
	VT_EQ(e.delta, -300);
	VT_EQ(live_device_bytes(&m), 0);
	vrt_model_free(&m);
}

/*
 * Two threads, one address: thread 2 frees it (stamped before the real call) and thread 1's next
 * allocation gets it; the collector drained thread 1 first, so the free arrives after the newer
 * allocation. It names the earlier incarnation (its time is older) and must not kill the new one
 * (docs/DESIGN.md, "Order without a global counter"); a free not older than the item does.
 */
static void test_a_free_older_than_the_item_it_names_is_stale(void)
{
	struct vrt_model m;
	VT_REQUIRE(vrt_model_init(&m) == 0);
	struct vrt_effect e;
	struct vrt_record r = alloc_at(10, 0x1000, 100);
	vrt_model_apply(&m, &r, &e);
	r = alloc_at(30, 0x1000, 300); /* the first one's free (ts 20) comes late */
	vrt_model_apply(&m, &r, &e);
	r = free_at(20, 0x1000);
	vrt_model_apply(&m, &r, &e);
	VT_EQ(e.kind, VRT_EFFECT_NONE);
	VT_EQ(e.delta, 0);
	VT_EQ(live_device_bytes(&m), 300);
	VT_EQ(m.set.used, 1);
	r = free_at(30, 0x1000); /* same time stamp: the release of this one */
	vrt_model_apply(&m, &r, &e);
	VT_EQ(e.kind, VRT_EFFECT_DIED);
	VT_EQ(live_device_bytes(&m), 0);
	vrt_model_free(&m);
}

/* Deltas add up to the total after any sequence, replacements included. */
static void test_deltas_sum_to_the_live_total(void)
{
	enum { N = 50000, ADDRS = 3000 };
	struct vrt_model m;
	VT_REQUIRE(vrt_model_init(&m) == 0);
	static uint64_t size_at[ADDRS]; /* reference: live size per address slot, 0 = free */
	int64_t sum = 0, expected = 0;
	uint64_t x = 88172645463325252ull;
	for (uint64_t i = 1; i <= N; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		size_t k = x % ADDRS;
		uint64_t addr = 0x7f0000000000ull + (uint64_t)k * 0x200000ull; /* clustered, like a heap */
		bool alloc = (x >> 32) % 3 != 0;
		struct vrt_record r = alloc ? alloc_at(i, addr, 512 + (x >> 40) % 4096) : free_at(i, addr);
		struct vrt_effect e;
		vrt_model_apply(&m, &r, &e);
		sum += e.delta;
		if (alloc) {
			expected += (int64_t)r.size - (int64_t)size_at[k];
			size_at[k] = r.size;
		} else {
			expected -= (int64_t)size_at[k];
			size_at[k] = 0;
		}
	}
	VT_EQ(sum, expected);
	VT_EQ(live_device_bytes(&m), expected);
	size_t live = 0;
	for (size_t k = 0; k < ADDRS; k++)
		live += size_at[k] != 0;
	VT_EQ(m.set.used, live);
	vrt_model_free(&m);
}

static int64_t seen_bytes;
static size_t seen_items;

static void visit(void *ctx, const struct vrt_item *it)
{
	(void)ctx;
	seen_bytes += (int64_t)it->size;
	seen_items++;
}

/* Grow far past the first table, then free most of it in another order: every item is still
 * found (frees all hit), and a walk sees exactly the survivors. */
static void test_table_keeps_every_item_across_growth_and_deletion(void)
{
	enum { N = 200000 };
	struct vrt_model m;
	VT_REQUIRE(vrt_model_init(&m) == 0);
	for (uint64_t i = 0; i < N; i++) {
		struct vrt_record r = alloc_at(i + 1, 0x10000000ull + i * 4096, 4096);
		vrt_model_apply(&m, &r, NULL);
	}
	VT_EQ(m.set.used, (size_t)N);
	for (uint64_t j = 0; j < N; j++) {
		uint64_t i = (j * 7919) % N; /* a permutation: 7919 is prime and does not divide N */
		if (i % 10 == 0)
			continue;
		struct vrt_record r = free_at(N + j + 1, 0x10000000ull + i * 4096);
		vrt_model_apply(&m, &r, NULL);
	}
	VT_EQ(m.set.unknown_releases, 0u);
	VT_EQ(m.set.used, (size_t)N / 10);
	seen_bytes = 0, seen_items = 0;
	vrt_model_each(&m, visit, NULL);
	VT_EQ(seen_items, (size_t)N / 10);
	VT_EQ(seen_bytes, (int64_t)(N / 10) * 4096);
	VT_EQ(live_device_bytes(&m), (int64_t)(N / 10) * 4096);
	vrt_model_free(&m);
}

/* A damaged trace can carry any size: what would take the held total past VRT_HELD_MAX is left
 * out and counted, so that no sum of live sizes overflows (a fuzzer found 2 + INT64_MAX). */
static void test_sizes_no_machine_holds_are_left_out(void)
{
	struct vrt_model m;
	VT_REQUIRE(vrt_model_init(&m) == 0);
	struct vrt_effect e;
	struct vrt_record r = alloc_at(10, 0x1000, 2);
	vrt_model_apply(&m, &r, &e);
	r = alloc_at(20, 0x2000, (uint64_t)INT64_MAX);
	vrt_model_apply(&m, &r, &e);
	VT_EQ(e.delta, 0);
	r = alloc_at(30, 0x3000, UINT64_MAX);
	vrt_model_apply(&m, &r, &e);
	r = alloc_at(40, 0x4000, VRT_HELD_MAX - 2); /* exactly fills the limit */
	vrt_model_apply(&m, &r, &e);
	VT_EQ(e.delta, (int64_t)(VRT_HELD_MAX - 2));
	r = alloc_at(50, 0x5000, 1);
	vrt_model_apply(&m, &r, &e);
	VT_EQ(m.set.implausible, 3u);
	VT_EQ(live_device_bytes(&m), (int64_t)VRT_HELD_MAX);
	r = free_at(60, 0x4000);
	vrt_model_apply(&m, &r, &e);
	VT_EQ(live_device_bytes(&m), 2);
	VT_EQ(m.set.held, 2u);

	/* A tensor resized past the limit keeps its size. */
	r = (struct vrt_record){ .op = VRT_OP_BLOCK_ALLOC, .ts = 70, .addr = 0x9000, .size = 512, .device = 0 };
	vrt_model_apply(&m, &r, &e);
	r = (struct vrt_record){ .op = VRT_OP_BLOCK_SIZE, .ts = 80, .addr = 0x9000, .size = UINT64_MAX, .device = 0 };
	vrt_model_apply(&m, &r, &e);
	VT_EQ(m.set.implausible, 4u);
	VT_EQ(m.tensors[0], 512);
	r = (struct vrt_record){ .op = VRT_OP_BLOCK_SIZE, .ts = 90, .addr = 0x9000, .size = 256, .device = 0 };
	vrt_model_apply(&m, &r, &e);
	VT_EQ(e.delta, -256);
	VT_EQ(m.set.held, 258u);
	vrt_model_free(&m);
}

static struct vrt_item found;
static uint64_t found_addr;
static uint8_t found_space;

static void find_visit(void *ctx, const struct vrt_item *it)
{
	(void)ctx;
	if (it->addr == found_addr && it->space == found_space)
		found = *it;
}

static struct vrt_item item_at(const struct vrt_model *m, uint8_t space, uint64_t addr)
{
	found = (struct vrt_item){ 0 };
	found_addr = addr, found_space = space;
	vrt_model_each(m, find_visit, NULL);
	return found;
}

/* Items are stored packed (fields a space never uses share a word): what a walk shows is what
 * the records said, for every space, and stays so when other items move into freed places. */
static void test_an_item_shows_what_its_records_said(void)
{
	struct vrt_model m;
	VT_REQUIRE(vrt_model_init(&m) == 0);
	struct vrt_record rs[] = {
		{ .op = VRT_OP_ALLOC, .ts = 1, .api = VRT_API_CUDA_MALLOC_ASYNC, .device = 3, .kind = VRT_KIND_MANAGED,
		  .addr = 0xa000, .size = 4096, .aux = 4000, .stream = 0xfeedbeefcafeull, .stack = 7 },
		{ .op = VRT_OP_ALLOC, .ts = 2, .api = VRT_API_CUDA_HOST_ALLOC, .device = -1, .kind = VRT_KIND_HOST_PINNED,
		  .addr = 0xb000, .size = 8192, .stack = 8 },
		{ .op = VRT_OP_PHYS_CREATE, .ts = 3, .api = VRT_API_CU_MEM_CREATE, .device = 1, .kind = VRT_KIND_DEVICE,
		  .addr = 0x77, .size = 2 << 20, .stack = 9 },
		{ .op = VRT_OP_PHYS_CREATE, .ts = 4, .api = VRT_API_CU_MEM_RETAIN_HANDLE, .addr = 0x77 },
		{ .op = VRT_OP_MAP, .ts = 5, .api = VRT_API_CU_MEM_MAP, .device = -1, .addr = 0x7f0000000000ull,
		  .size = 1 << 20, .aux = 0x77, .aux2 = 1 << 20, .stack = 10 },
		{ .op = VRT_OP_BLOCK_ALLOC, .ts = 6, .api = VRT_API_TORCH_BLOCK, .device = 1, .addr = 0x7f0000000000ull,
		  .size = 512, .aux = 500, .stream = 5, .stack = 11 },
		{ .op = VRT_OP_PHASE_ENTER, .ts = 7, .id = 1 },
		{ .op = VRT_OP_SEED, .ts = 8, .api = VRT_API_CUDA_MALLOC, .device = 0, .addr = 0xc000, .size = 64, .stack = 12 },
		{ .op = VRT_OP_FREE, .ts = 9, .api = VRT_API_CUDA_FREE, .addr = 0xa000 }, /* the last item moves here */
	};
	for (size_t i = 0; i < sizeof(rs) / sizeof(rs[0]); i++)
		vrt_model_apply(&m, &rs[i], NULL);
	VT_EQ(m.set.used, 5u);
	VT_EQ(item_at(&m, VRT_SPACE_ADDR, 0xa000).space, 0);
	struct vrt_item it = item_at(&m, VRT_SPACE_ADDR, 0xb000);
	VT_EQ(it.device, -1);
	VT_EQ(it.kind, VRT_KIND_HOST_PINNED);
	VT_EQ(it.api, VRT_API_CUDA_HOST_ALLOC);
	VT_EQ(it.born_event, 2u); /* the count of events, its own included */
	VT_EQ(it.stack, 8u);
	it = item_at(&m, VRT_SPACE_HANDLE, 0x77);
	VT_EQ(it.refs, 2u);
	VT_EQ(it.maps, 1u);
	VT_EQ(it.size, 2u << 20);
	VT_EQ(it.device, 1);
	VT_EQ(it.stream, 0u);
	it = item_at(&m, VRT_SPACE_MAP, 0x7f0000000000ull);
	VT_EQ(it.aux, 0x77u);
	VT_EQ(it.aux2, 1u << 20);
	VT_EQ(it.device, 1); /* the handle's */
	VT_EQ(it.kind, VRT_KIND_DEVICE);
	it = item_at(&m, VRT_SPACE_BLOCK, 0x7f0000000000ull);
	VT_EQ(it.aux, 500u);
	VT_EQ(it.stream, 5u);
	VT_EQ(it.ts, 6u);
	VT_EQ(it.stack, 11u);
	it = item_at(&m, VRT_SPACE_ADDR, 0xc000);
	VT_EQ(it.seeded, 1);
	VT_EQ(it.op, VRT_OP_ALLOC);
	VT_EQ(it.born_phase, 1u);
	VT_EQ(it.born_event, 8u);
	vrt_model_free(&m);
}

/* A ring replayed from a checkpoint that lists a mapping before its handle, and a handle released
 * while still mapped (y = 0 references): the mapping joins the handle at the checkpoint's end, and
 * the unmap ends both (docs/trace-format.md, "Replay semantics": seeding). */
static void test_a_checkpoint_seeds_handles_and_their_mappings_in_any_order(void)
{
	struct vrt_model m;
	VT_REQUIRE(vrt_model_init(&m) == 0);
	const uint64_t va = 0x7f0000000000ull, mib2 = 2u << 20;
	struct vrt_record rs[] = {
		{ .op = VRT_OP_CP_BEGIN, .ts = 1, .id = VRT_CP_PERIODIC },
		{ .op = VRT_OP_CP_LIVE, .id2 = VRT_OP_MAP, .ts = 3, .device = 1, .kind = VRT_KIND_DEVICE, .addr = va,
		  .size = mib2, .aux = 0x77, .aux2 = 0 },
		{ .op = VRT_OP_CP_LIVE, .id2 = VRT_OP_PHYS_CREATE, .ts = 2, .device = 1, .kind = VRT_KIND_DEVICE,
		  .addr = 0x77, .size = mib2, .aux2 = 0 },
		{ .op = VRT_OP_CP_END, .id = 2 },
	};
	for (size_t i = 0; i < sizeof(rs) / sizeof(rs[0]); i++)
		vrt_model_apply(&m, &rs[i], NULL);
	struct vrt_item h = item_at(&m, VRT_SPACE_HANDLE, 0x77);
	VT_EQ(h.refs, 0u);
	VT_EQ(h.maps, 1u);
	VT_EQ(m.live[1][VRT_KIND_DEVICE], (int64_t)mib2);
	struct vrt_record unmap = { .op = VRT_OP_UNMAP, .ts = 5, .addr = va, .size = mib2 };
	struct vrt_effect e;
	vrt_model_apply(&m, &unmap, &e);
	VT_EQ(e.kind, VRT_EFFECT_DIED);
	VT_EQ(e.delta, -(int64_t)mib2); /* the handle went with its last mapping */
	VT_EQ(m.live[1][VRT_KIND_DEVICE], 0);
	VT_EQ(m.set.used, 0u);
	vrt_model_free(&m);
}

int main(void)
{
	VT_RUN(test_replaced_allocation_delta_is_the_change_of_the_total);
	VT_RUN(test_a_free_older_than_the_item_it_names_is_stale);
	VT_RUN(test_deltas_sum_to_the_live_total);
	VT_RUN(test_table_keeps_every_item_across_growth_and_deletion);
	VT_RUN(test_sizes_no_machine_holds_are_left_out);
	VT_RUN(test_an_item_shows_what_its_records_said);
	VT_RUN(test_a_checkpoint_seeds_handles_and_their_mappings_in_any_order);
	return vt_summary();
}
