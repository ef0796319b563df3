/* SPDX-License-Identifier: MIT */
/*
 * alloc_model_speed - how fast the caching-allocator model (analyzer/alloc_model.c) replays a
 * trace's tensor requests and frees, without the reading: the trace's BLOCK_ALLOC/BLOCK_FREE
 * records are decoded into memory once, then replayed through the model --reps times.
 *
 *   alloc_model_speed TRACE [--reps N] [--alloc-conf STR]
 *
 * Prints: events=N seconds=S events_per_s=R peak_reserved=B (the best of the repetitions).
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc_model.h"
#include "model.h"
#include "trace_reader.h"

struct op {
	uint64_t addr, size, stream; /* size 0: a free */
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* recorded address -> model block, open addressing (what the replay keeps too) */
struct slot {
	uint64_t key;
	uint32_t block;
};

/* splitmix64's finalizer: every bit of the key reaches the low bits (addresses end in zeros). */
static uint64_t mix(uint64_t k)
{
	k = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9ull;
	k = (k ^ (k >> 27)) * 0x94d049bb133111ebull;
	return k ^ (k >> 31);
}

/* Backward-shift deletion, so that probe chains stay short. */
static void erase(struct slot *map, size_t cap, size_t hole)
{
	size_t mask = cap - 1;
	for (size_t j = (hole + 1) & mask; map[j].key; j = (j + 1) & mask) {
		size_t home = mix(map[j].key) & mask;
		bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
		if (!stays) {
			map[hole] = map[j];
			hole = j;
		}
	}
	map[hole].key = 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: alloc_model_speed TRACE [--reps N] [--alloc-conf STR]\n");
		return 2;
	}
	int reps = 5;
	const char *conf = NULL;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--reps"))
			reps = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--alloc-conf"))
			conf = argv[i + 1];
	}
	struct vrt_trace t;
	if (vrt_trace_open(&t, argv[1])) {
		fprintf(stderr, "alloc_model_speed: cannot open %s\n", argv[1]);
		return 1;
	}
	size_t n = 0, cap = 1 << 16, live = 0, max_live = 0;
	struct op *ops = malloc(cap * sizeof(*ops));
	struct vrt_replay rp;
	struct vrt_record r;
	vrt_replay_begin(&rp, &t);
	while (ops && vrt_replay_next(&rp, &r)) {
		if (r.op != VRT_OP_BLOCK_ALLOC && r.op != VRT_OP_BLOCK_FREE)
			continue;
		if (n == cap)
			ops = realloc(ops, (cap *= 2) * sizeof(*ops));
		if (ops)
			ops[n++] = (struct op){ r.addr, r.op == VRT_OP_BLOCK_ALLOC ? (r.aux ? r.aux : 1) : 0, r.stream };
		live = r.op == VRT_OP_BLOCK_ALLOC ? live + 1 : live ? live - 1 : 0;
		max_live = live > max_live ? live : max_live;
	}
	vrt_trace_close(&t);
	size_t map_cap = 1;
	while (map_cap < max_live * 4 + 64) /* sized by what is live, as the replay's map is */
		map_cap *= 2;
	struct slot *map = calloc(map_cap, sizeof(*map));
	if (!ops || !map)
		return 1;
	struct vrt_am_config c;
	char err[200];
	vrt_am_config_default(&c);
	if (conf && vrt_am_config_parse(&c, conf, err, sizeof(err))) {
		fprintf(stderr, "alloc_model_speed: %s\n", err);
		return 2;
	}
	double best = 1e30;
	uint64_t peak = 0;
	for (int rep = 0; rep < reps; rep++) {
		struct vrt_am a;
		vrt_am_init(&a, &c, NULL);
		memset(map, 0, map_cap * sizeof(*map));
		double t0 = now();
		for (size_t i = 0; i < n; i++) {
			size_t h = mix(ops[i].addr) & (map_cap - 1);
			while (map[h].key && map[h].key != ops[i].addr)
				h = (h + 1) & (map_cap - 1);
			if (ops[i].size) {
				map[h].key = ops[i].addr;
				map[h].block = vrt_am_malloc(&a, ops[i].size, ops[i].stream);
			} else if (map[h].key) {
				vrt_am_release(&a, map[h].block);
				erase(map, map_cap, h);
			}
		}
		double dt = now() - t0;
		best = dt < best ? dt : best;
		peak = a.stats.peak_reserved;
		vrt_am_free_all(&a);
	}
	printf("events=%zu seconds=%.4f events_per_s=%.0f peak_reserved=%llu\n", n, best, (double)n / best,
	       (unsigned long long)peak);
	free(ops);
	free(map);
	return 0;
}
