/* SPDX-License-Identifier: MIT */
/*
 * The caching allocator's rules (alloc_model.h), one function per function of PyTorch's
 * DeviceCachingAllocator where the two correspond, so that a rule can be checked against its
 * source. Blocks live in one array and name each other by index; free blocks sit in treaps
 * (priority: a hash of the index) ordered exactly as PyTorch's std::set comparators order them,
 * so lower_bound, the first block and the neighbours of a block are the ones PyTorch sees.
 * A block's key never changes while it is in a tree: every caller takes it out first.
 */
#include "alloc_model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vramtrace/error.h"

/* One cache line, the key and the links a tree walk reads first. */
struct vrt_am_block {
	uint64_t size, addr, stream;
	uint32_t left, right;   /* treap links */
	uint32_t prev, next;    /* neighbours in its segment */
	uint64_t requested;
	int64_t gc_base;        /* the pool's get_free_block calls when it was cached */
	uint32_t es;            /* expandable segment + 1; 0: a cudaMalloc'd segment */
	uint8_t small, allocated, mapped, tree;
} __attribute__((aligned(64)));
_Static_assert(sizeof(struct vrt_am_block) == 64, "a block is one cache line");

enum { TREE_NONE, TREE_BLOCKS, TREE_UNMAPPED };

struct vrt_am_segment {
	uint64_t ptr, page, pages, stream;
	uint8_t *mapped; /* per page */
	bool small, live;
};

#define B(i) (a->b[i])
/* A device's memory when the trace does not say: sizes an expandable segment's address space. */
#define DEFAULT_DEVICE_TOTAL (144ull << 30)
#define MODEL_ADDR_BASE (1ull << 44)

/* ---- settings ------------------------------------------------------------------------------ */

void vrt_am_config_default(struct vrt_am_config *c)
{
	memset(c, 0, sizeof(*c));
	c->max_split_size = UINT64_MAX;
	c->max_non_split_rounding = VRT_AM_LARGE_BUFFER;
	c->large_segment_size = VRT_AM_LARGE_BUFFER;
	c->fraction = 1.0;
}

static bool is_pow2(uint64_t v) { return v && !(v & (v - 1)); }
static unsigned log2_floor(uint64_t v) { return 63u - (unsigned)__builtin_clzll(v); }

struct tokens {
	char tok[64][64];
	int n;
};

/* Keys, values and the four separators as tokens; blanks dropped (ConfigTokenizer). */
static int tokenize(const char *s, struct tokens *t)
{
	t->n = 0;
	size_t len = 0;
	for (;; s++) {
		bool sep = *s == ',' || *s == ':' || *s == '[' || *s == ']';
		if (!*s || sep) {
			if (len) {
				if (t->n == 64)
					return -1;
				t->tok[t->n++][len] = 0;
				len = 0;
			}
			if (!*s)
				return 0;
			if (t->n == 64)
				return -1;
			t->tok[t->n][0] = *s;
			t->tok[t->n++][1] = 0;
		} else if (*s != ' ' && *s != '\t' && *s != '\n') {
			if (len == 63)
				return -1;
			t->tok[t->n][len++] = *s;
		}
	}
}

static bool parse_u64(const char *s, uint64_t *v)
{
	char *end;
	if (*s < '0' || *s > '9')
		return false;
	*v = strtoull(s, &end, 10);
	return !*end;
}

static bool parse_double(const char *s, double *v)
{
	char *end;
	*v = strtod(s, &end);
	return end != s && !*end;
}

#define FAIL(...)                                       \
	do {                                            \
		snprintf(err, err_len, __VA_ARGS__);    \
		return -1;                              \
	} while (0)

/* roundup_power2_divisions: one number for every interval, or [MB:divisions,...,>:divisions]. */
static int parse_divisions(struct vrt_am_config *c, const struct tokens *t, int *i, char *err, size_t err_len)
{
	uint64_t v;
	if (strcmp(t->tok[*i], "[")) {
		if (!parse_u64(t->tok[*i], &v) || !is_pow2(v))
			FAIL("roundup_power2_divisions: the divisions must be a power of 2");
		for (int k = 0; k < VRT_AM_DIVISION_INTERVALS; k++)
			c->divisions[k] = (uint32_t)v;
		return 0;
	}
	bool first = true;
	unsigned last = 0;
	while (++*i < t->n && strcmp(t->tok[*i], "]")) {
		const char *key = t->tok[*i];
		if (*i + 2 >= t->n || strcmp(t->tok[*i + 1], ":") || !parse_u64(t->tok[*i + 2], &v))
			FAIL("roundup_power2_divisions: expected [MB:divisions,...]");
		*i += 2;
		if (v && !is_pow2(v))
			FAIL("roundup_power2_divisions: the divisions must be a power of 2 or 0");
		if (!strcmp(key, ">")) {
			for (unsigned k = last + 1; k < VRT_AM_DIVISION_INTERVALS; k++)
				c->divisions[k] = (uint32_t)v;
		} else {
			uint64_t mb;
			if (!parse_u64(key, &mb) || !is_pow2(mb))
				FAIL("roundup_power2_divisions: the intervals must be powers of 2 (MB)");
			unsigned index = log2_floor(mb);
			if (index > VRT_AM_DIVISION_INTERVALS - 1)
				index = VRT_AM_DIVISION_INTERVALS - 1;
			if (first) {
				for (unsigned k = 0; k < index; k++)
					c->divisions[k] = (uint32_t)v;
				first = false;
			}
			c->divisions[index] = (uint32_t)v;
			last = index;
		}
		if (*i + 1 < t->n && strcmp(t->tok[*i + 1], "]")) {
			if (strcmp(t->tok[*i + 1], ","))
				FAIL("roundup_power2_divisions: expected ','");
			++*i;
		}
	}
	if (*i >= t->n)
		FAIL("roundup_power2_divisions: no closing ']'");
	return 0;
}

static int parse_bool(const char *key, const char *v, bool *out, char *err, size_t err_len)
{
	if (strcmp(v, "True") && strcmp(v, "False"))
		FAIL("%s: expected True or False, not '%s'", key, v);
	*out = !strcmp(v, "True");
	return 0;
}

/* Keys PyTorch accepts that change nothing the model follows (pinned memory, locking, graphs). */
static bool ignored_key(const char *key)
{
	static const char *const keys[] = { "release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
					    "pinned_num_register_threads", "pinned_reserve_segment_size_mb",
					    "pinned_use_background_threads", "graph_capture_record_stream_reuse",
					    "pinned_free_catch_all", "throw_on_cudamalloc_oom", NULL };
	for (int k = 0; keys[k]; k++)
		if (!strcmp(keys[k], key))
			return true;
	return false;
}

int vrt_am_config_parse(struct vrt_am_config *c, const char *conf, char *err, size_t err_len)
{
	struct tokens t;
	/* Every parse starts these three over (AcceleratorAllocatorConfig::parseArgs). */
	c->max_split_size = UINT64_MAX;
	memset(c->divisions, 0, sizeof(c->divisions));
	c->gc_threshold = 0;
	if (!conf)
		return 0;
	if (tokenize(conf, &t))
		FAIL("the setting is too long");
	for (int i = 0; i < t.n; i++) {
		const char *key = t.tok[i];
		if (i + 2 >= t.n || strcmp(t.tok[i + 1], ":"))
			FAIL("expected KEY:VALUE at '%s'", key);
		i += 2;
		const char *v = t.tok[i];
		uint64_t n;
		double d;
		bool b;
		if (!strcmp(key, "max_split_size_mb") || !strcmp(key, "max_non_split_rounding_mb")) {
			if (!parse_u64(v, &n))
				FAIL("%s: expected a number of MiB, not '%s'", key, v);
			if (n < VRT_AM_LARGE_BUFFER >> 20)
				FAIL("%s: must be >= %llu", key, VRT_AM_LARGE_BUFFER >> 20);
			if (n > UINT64_MAX >> 20)
				n = UINT64_MAX >> 20;
			if (!strcmp(key, "max_split_size_mb"))
				c->max_split_size = n << 20;
			else
				c->max_non_split_rounding = n << 20;
		} else if (!strcmp(key, "large_segment_size_mb")) {
			if (!parse_u64(v, &n) || !n || n > (1u << 20))
				FAIL("%s: expected a number of MiB, not '%s'", key, v);
			c->large_segment_size = n << 20;
		} else if (!strcmp(key, "garbage_collection_threshold")) {
			if (!parse_double(v, &d) || !(d > 0 && d < 1.0))
				FAIL("garbage_collection_threshold: set it in (0.0, 1.0), not '%s'", v);
			c->gc_threshold = d;
		} else if (!strcmp(key, "per_process_memory_fraction")) {
			if (!parse_double(v, &d) || !(d >= 0 && d <= 1.0))
				FAIL("per_process_memory_fraction: set it in [0.0, 1.0], not '%s'", v);
			c->fraction = d;
		} else if (!strcmp(key, "roundup_power2_divisions")) {
			if (parse_divisions(c, &t, &i, err, err_len))
				return -1;
		} else if (!strcmp(key, "expandable_segments")) {
			if (parse_bool(key, v, &c->expandable, err, err_len))
				return -1;
		} else if (!strcmp(key, "backend")) {
			if (strcmp(v, "native") && strcmp(v, "cudaMallocAsync"))
				FAIL("backend: native or cudaMallocAsync, not '%s'", v);
			c->async_backend = !strcmp(v, "cudaMallocAsync");
		} else if (ignored_key(key)) {
			if (!strcmp(v, "[")) /* a list value: skip to its end */
				while (i < t.n && strcmp(t.tok[i], "]"))
					i++;
			else if (!strcmp(key, "release_lock_on_cudamalloc") && parse_bool(key, v, &b, err, err_len))
				return -1;
		} else {
			FAIL("unrecognized key '%s' in the allocator setting", key);
		}
		if (i + 1 < t.n) {
			if (strcmp(t.tok[i + 1], ","))
				FAIL("expected ',' after '%s'", v);
			i++;
		}
	}
	return 0;
}

struct appender {
	char *buf;
	size_t len, n;
};

static void append(struct appender *ap, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void append(struct appender *ap, const char *fmt, ...)
{
	if (ap->n >= ap->len)
		return;
	va_list args;
	va_start(args, fmt);
	int m = vsnprintf(ap->buf + ap->n, ap->len - ap->n, fmt, args);
	va_end(args);
	ap->n = m < 0 ? ap->len : ap->n + (size_t)m;
}

void vrt_am_config_format(const struct vrt_am_config *c, char *buf, size_t len)
{
	struct vrt_am_config d;
	vrt_am_config_default(&d);
	struct appender ap = { buf, len, 0 };
	if (len)
		buf[0] = 0;
	const char *sep = "";
	if (c->async_backend)
		append(&ap, "%sbackend:cudaMallocAsync", sep), sep = ",";
	if (c->expandable)
		append(&ap, "%sexpandable_segments:True", sep), sep = ",";
	if (c->max_split_size != d.max_split_size)
		append(&ap, "%smax_split_size_mb:%llu", sep, (unsigned long long)(c->max_split_size >> 20)), sep = ",";
	if (c->max_non_split_rounding != d.max_non_split_rounding)
		append(&ap, "%smax_non_split_rounding_mb:%llu", sep, (unsigned long long)(c->max_non_split_rounding >> 20)),
			sep = ",";
	if (c->large_segment_size != d.large_segment_size)
		append(&ap, "%slarge_segment_size_mb:%llu", sep, (unsigned long long)(c->large_segment_size >> 20)), sep = ",";
	if (c->gc_threshold > 0)
		append(&ap, "%sgarbage_collection_threshold:%g", sep, c->gc_threshold), sep = ",";
	if (c->fraction < 1.0)
		append(&ap, "%sper_process_memory_fraction:%g", sep, c->fraction), sep = ",";
	if (memcmp(c->divisions, d.divisions, sizeof(d.divisions))) {
		append(&ap, "%sroundup_power2_divisions:[", sep);
		for (int k = 0; k < VRT_AM_DIVISION_INTERVALS; k++)
			append(&ap, "%s%llu:%u", k ? "," : "", 1ull << k, c->divisions[k]);
		append(&ap, "]");
	}
	if (ap.n >= len && len)
		buf[len - 1] = 0;
}

/* ---- sizes --------------------------------------------------------------------------------- */

static uint32_t divisions_for(const struct vrt_am_config *c, uint64_t size)
{
	unsigned log = log2_floor(size), start = 20; /* the intervals start at 1 MiB */
	unsigned index = log > start ? log - start : 0;
	return c->divisions[index < VRT_AM_DIVISION_INTERVALS ? index : VRT_AM_DIVISION_INTERVALS - 1];
}

/* Up to the next of `divisions` equal steps between two powers of two. */
static uint64_t next_division(uint64_t size, uint32_t divisions)
{
	if (is_pow2(size))
		return size;
	uint64_t floor = 1ull << log2_floor(size), step = floor >> log2_floor(divisions);
	if (!step)
		return floor << 1;
	uint64_t down = size & ~(step - 1);
	return down == size ? size : down + step;
}

uint64_t vrt_am_round_size(const struct vrt_am_config *c, uint64_t size)
{
	if (size < VRT_AM_MIN_BLOCK)
		return VRT_AM_MIN_BLOCK;
	uint32_t divisions = divisions_for(c, size);
	if (divisions > 1 && size > VRT_AM_MIN_BLOCK * divisions)
		return next_division(size, divisions);
	return (size + VRT_AM_MIN_BLOCK - 1) / VRT_AM_MIN_BLOCK * VRT_AM_MIN_BLOCK;
}

uint64_t vrt_am_allocation_size(const struct vrt_am_config *c, uint64_t size)
{
	if (size <= VRT_AM_SMALL_SIZE)
		return VRT_AM_SMALL_BUFFER;
	if (size < VRT_AM_MIN_LARGE_ALLOC)
		return c->large_segment_size;
	return (size + VRT_AM_ROUND_LARGE - 1) / VRT_AM_ROUND_LARGE * VRT_AM_ROUND_LARGE;
}

/* ---- blocks and trees ---------------------------------------------------------------------- */

static inline uint32_t prio(uint32_t i)
{
	uint32_t x = i * 0x9e3779b1u;
	x ^= x >> 15;
	x *= 0x85ebca6bu;
	return x ^ (x >> 13);
}

/* Whether block x orders before the key (stream, size, addr) in its tree's order. */
static inline bool before(const struct vrt_am_block *x, int tree, uint64_t stream, uint64_t size, uint64_t addr)
{
	if (x->stream != stream)
		return x->stream < stream;
	if (tree == TREE_BLOCKS && x->size != size)
		return x->size < size;
	return x->addr < addr;
}

/* Iterative treap insertion: down to where n's priority belongs, then the subtree there split
 * around n's key into n's two children. */
static void insert_at(struct vrt_am *a, int tree, uint32_t *root, uint32_t n)
{
	const uint64_t stream = B(n).stream, size = B(n).size, addr = B(n).addr;
	const uint32_t p = prio(n);
	uint32_t *link = root;
	while (*link && prio(*link) > p)
		link = before(&B(*link), tree, stream, size, addr) ? &B(*link).right : &B(*link).left;
	uint32_t t = *link, *l = &B(n).left, *r = &B(n).right;
	while (t) {
		if (before(&B(t), tree, stream, size, addr)) {
			*l = t;
			l = &B(t).right;
			t = *l;
		} else {
			*r = t;
			r = &B(t).left;
			t = *r;
		}
	}
	*l = *r = 0;
	*link = n;
}

/* Iterative erase: n's children merged in its place. */
static void erase_at(struct vrt_am *a, int tree, uint32_t *root, uint32_t n)
{
	const uint64_t stream = B(n).stream, size = B(n).size, addr = B(n).addr;
	uint32_t *link = root;
	while (*link && *link != n)
		link = before(&B(*link), tree, stream, size, addr) ? &B(*link).right : &B(*link).left;
	if (!*link)
		return;
	uint32_t l = B(n).left, r = B(n).right;
	while (l && r) {
		if (prio(l) > prio(r)) {
			*link = l;
			link = &B(l).right;
			l = *link;
		} else {
			*link = r;
			link = &B(r).left;
			r = *link;
		}
	}
	*link = l ? l : r;
}

static struct vrt_am_pool *pool_of(struct vrt_am *a, uint32_t n) { return B(n).small ? &a->small : &a->large; }

static struct vrt_am_tree *tree_of(struct vrt_am_pool *p, int tree) { return tree == TREE_BLOCKS ? &p->blocks : &p->unmapped; }

static void tree_insert(struct vrt_am *a, int tree, uint32_t n)
{
	struct vrt_am_pool *p = pool_of(a, n);
	B(n).left = B(n).right = 0;
	B(n).tree = (uint8_t)tree;
	if (tree == TREE_BLOCKS)
		B(n).gc_base = p->get_free_blocks_calls; /* insert_into_blocks */
	insert_at(a, tree, &tree_of(p, tree)->root, n);
}

static void tree_erase(struct vrt_am *a, uint32_t n)
{
	if (B(n).tree == TREE_NONE)
		return;
	erase_at(a, B(n).tree, &tree_of(pool_of(a, n), B(n).tree)->root, n);
	B(n).tree = TREE_NONE;
}

/* The first node not before the key (std::set::lower_bound), 0 for the end. */
static uint32_t lower_bound(const struct vrt_am *a, const struct vrt_am_tree *t, int tree, uint64_t stream,
			    uint64_t size, uint64_t addr)
{
	uint32_t best = 0;
	for (uint32_t x = t->root; x;) {
		if (before(&B(x), tree, stream, size, addr)) {
			x = B(x).right;
		} else {
			best = x;
			x = B(x).left;
		}
	}
	return best;
}

/* The next node after n in its tree, 0 at the end. */
static uint32_t successor(const struct vrt_am *a, uint32_t n)
{
	const struct vrt_am_pool *p = B(n).small ? &a->small : &a->large;
	int tree = B(n).tree;
	uint32_t best = 0;
	for (uint32_t x = (tree == TREE_BLOCKS ? p->blocks : p->unmapped).root; x;) {
		if (x != n && !before(&B(x), tree, B(n).stream, B(n).size, B(n).addr)) {
			best = x;
			x = B(x).left;
		} else {
			x = B(x).right;
		}
	}
	return best;
}

static uint32_t predecessor(const struct vrt_am *a, uint32_t n)
{
	const struct vrt_am_pool *p = B(n).small ? &a->small : &a->large;
	int tree = B(n).tree;
	uint32_t best = 0;
	for (uint32_t x = (tree == TREE_BLOCKS ? p->blocks : p->unmapped).root; x;) {
		if (before(&B(x), tree, B(n).stream, B(n).size, B(n).addr)) {
			best = x;
			x = B(x).right;
		} else {
			x = B(x).left;
		}
	}
	return best;
}

static uint32_t first_of(const struct vrt_am *a, const struct vrt_am_tree *t)
{
	uint32_t x = t->root;
	while (x && B(x).left)
		x = B(x).left;
	return x;
}

static uint32_t last_of(const struct vrt_am *a, const struct vrt_am_tree *t)
{
	uint32_t x = t->root;
	while (x && B(x).right)
		x = B(x).right;
	return x;
}

struct order {
	uint32_t *v, n, cap;
	bool failed;
};

static void collect(const struct vrt_am *a, uint32_t x, struct order *o)
{
	for (; x; x = B(x).right) {
		collect(a, B(x).left, o);
		if (o->n == o->cap) {
			uint32_t cap = o->cap ? o->cap * 2 : 64, *grown = realloc(o->v, cap * sizeof(*grown));
			if (!grown) {
				o->failed = true;
				return;
			}
			o->v = grown;
			o->cap = cap;
		}
		o->v[o->n++] = x;
	}
}

/* The nodes of t in order, into a malloc'd array (the caller frees it). */
static uint32_t *in_order(struct vrt_am *a, const struct vrt_am_tree *t, uint32_t *n)
{
	struct order o = { 0 };
	collect(a, t->root, &o);
	if (o.failed)
		a->error = VRT_E_NOMEM;
	*n = o.n;
	return o.v;
}

static uint32_t new_block(struct vrt_am *a, uint64_t addr, uint64_t size, uint64_t stream, bool small, bool mapped,
			  uint32_t es)
{
	uint32_t i = a->free_blocks;
	if (i) {
		a->free_blocks = B(i).next;
	} else {
		if (a->n_blocks + 1 >= a->cap_blocks) {
			uint32_t cap = a->cap_blocks ? a->cap_blocks * 2 : 1024;
			struct vrt_am_block *grown = aligned_alloc(64, (size_t)cap * sizeof(*grown));
			if (!grown) {
				a->error = VRT_E_NOMEM;
				return 0;
			}
			if (a->b)
				memcpy(grown, a->b, (size_t)a->cap_blocks * sizeof(*grown));
			free(a->b);
			a->b = grown;
			a->cap_blocks = cap;
		}
		i = ++a->n_blocks;
	}
	B(i) = (struct vrt_am_block){ .addr = addr, .size = size, .stream = stream, .es = es, .small = small,
				      .mapped = mapped };
	return i;
}

static void delete_block(struct vrt_am *a, uint32_t i)
{
	B(i).tree = TREE_NONE;
	B(i).size = 0;
	B(i).next = a->free_blocks;
	a->free_blocks = i;
}

static bool is_split(const struct vrt_am *a, uint32_t i) { return B(i).prev || B(i).next; }

static void splice(struct vrt_am *a, uint32_t n, uint32_t prev, uint32_t next)
{
	if (prev)
		B(prev).next = n;
	B(n).prev = prev;
	if (next)
		B(next).prev = n;
	B(n).next = next;
}

/* ---- accounting ---------------------------------------------------------------------------- */

static bool acquire(struct vrt_am *a, enum vrt_am_op op, uint64_t size, uint64_t *addr)
{
	return !a->env.acquire || a->env.acquire(a->env.ctx, op, size, addr);
}

static void event(struct vrt_am *a, enum vrt_am_op op, uint64_t addr, uint64_t size)
{
	if (a->env.event)
		a->env.event(a->env.ctx, op, addr, size);
}

static uint64_t pick_addr(struct vrt_am *a, uint64_t size)
{
	uint64_t addr = a->next_addr;
	a->next_addr += (size + VRT_AM_SMALL_BUFFER - 1) / VRT_AM_SMALL_BUFFER * VRT_AM_SMALL_BUFFER;
	return addr;
}

static void reserve_more(struct vrt_am *a, uint64_t bytes)
{
	a->stats.reserved += bytes;
	if (a->stats.reserved > a->stats.peak_reserved)
		a->stats.peak_reserved = a->stats.reserved;
}

/* ---- the allocator ------------------------------------------------------------------------- */

struct params {
	uint64_t size, alloc_size, stream;
	struct vrt_am_pool *pool;
	uint32_t block;
};

/* A block's size for best fit in an expandable segment: with the unmapped range after it. */
static uint64_t expandable_size(const struct vrt_am *a, uint32_t i)
{
	uint32_t n = B(i).next;
	return B(i).size + (n && !B(n).mapped ? B(n).size : 0);
}

/* The block get_free_block would take (0: none), without taking it. */
static uint32_t find_free_block(const struct vrt_am *a, const struct params *p)
{
	uint32_t it = lower_bound(a, &p->pool->blocks, TREE_BLOCKS, p->stream, p->size, 0);
	if (!it || B(it).stream != p->stream)
		return 0;
	if (B(it).es) {
		if (a->cfg.expandable) {
			uint32_t next = successor(a, it);
			while (B(it).es && next && B(next).stream == p->stream &&
			       expandable_size(a, next) < expandable_size(a, it)) {
				it = next;
				next = successor(a, next);
			}
		} else {
			/* expandable segments turned off since: only ordinary blocks */
			do
				it = successor(a, it);
			while (it && B(it).es && B(it).stream == p->stream);
			if (!it || B(it).stream != p->stream)
				return 0;
		}
	}
	uint64_t max_split = a->cfg.max_split_size;
	if (p->size < max_split && B(it).size >= max_split)
		return 0; /* no oversize block for an ordinary request */
	if (p->size >= max_split && B(it).size - p->size >= a->cfg.max_non_split_rounding)
		return 0; /* an oversize block only within the rounding limit */
	return it;
}

static bool gc_active(const struct vrt_am *a) { return a->limit && a->cfg.gc_threshold > 0.0; }

static bool get_free_block(struct vrt_am *a, struct params *p)
{
	if (gc_active(a))
		p->pool->get_free_blocks_calls++; /* block ages count only with garbage collection on */
	uint32_t it = find_free_block(a, p);
	if (!it)
		return false;
	tree_erase(a, it);
	p->block = it;
	return true;
}

static bool should_split(const struct vrt_am *a, uint32_t block, uint64_t size)
{
	uint64_t remaining = B(block).size - size;
	if (B(block).small || a->cfg.expandable)
		return remaining >= VRT_AM_MIN_BLOCK;
	return size < a->cfg.max_split_size && remaining > VRT_AM_SMALL_SIZE;
}

static void release_block(struct vrt_am *a, uint32_t block)
{
	event(a, VRT_AM_SEG_FREE, B(block).addr, B(block).size);
	a->stats.reserved -= B(block).size;
	a->stats.segments_freed++;
	tree_erase(a, block);
	delete_block(a, block);
}

static uint64_t gc_count(const struct vrt_am *a, uint32_t block)
{
	const struct vrt_am_pool *p = B(block).small ? &a->small : &a->large;
	return (uint64_t)(int)(p->get_free_blocks_calls - B(block).gc_base);
}

/* Frees unsplit cached large blocks older than the average, until the reserved total is under
 * the threshold share of the limit (or nothing is old enough). */
static void garbage_collect(struct vrt_am *a)
{
	uint64_t threshold = (uint64_t)(a->cfg.gc_threshold * (double)a->limit);
	if (a->stats.reserved <= threshold)
		return;
	uint64_t target = a->stats.reserved - threshold, reclaimed = 0, total_age = 0;
	int freeable = 0;
	uint32_t n, *order = in_order(a, &a->large.blocks, &n);
	for (uint32_t k = 0; k < n; k++)
		if (!is_split(a, order[k])) {
			total_age += gc_count(a, order[k]);
			freeable++;
		}
	free(order);
	bool freed = true;
	while (freeable && reclaimed < target && freed) {
		double age_threshold = (double)total_age / freeable;
		freed = false;
		order = in_order(a, &a->large.blocks, &n);
		for (uint32_t k = 0; k < n; k++) {
			uint32_t b = order[k];
			if (is_split(a, b) || B(b).es || (double)gc_count(a, b) < age_threshold)
				continue;
			freed = true;
			reclaimed += B(b).size;
			total_age -= gc_count(a, b);
			freeable--;
			a->stats.gc_releases++;
			release_block(a, b);
		}
		free(order);
	}
}

static uint32_t try_merge(struct vrt_am *a, uint32_t dst, uint32_t src)
{
	if (!src || B(src).allocated || B(src).mapped != B(dst).mapped)
		return 0;
	if (B(dst).prev == src) {
		B(dst).addr = B(src).addr;
		B(dst).prev = B(src).prev;
		if (B(dst).prev)
			B(B(dst).prev).next = dst;
	} else {
		B(dst).next = B(src).next;
		if (B(dst).next)
			B(B(dst).next).prev = dst;
	}
	B(dst).size += B(src).size;
	tree_erase(a, src);
	delete_block(a, src);
	return 1;
}

static struct vrt_am_segment *segment_of(struct vrt_am *a, uint32_t block) { return &a->es[B(block).es - 1]; }

static void mark_pages(struct vrt_am_segment *es, uint64_t begin, uint64_t end, uint8_t v)
{
	memset(es->mapped + begin, v, end - begin);
}

/* Maps the pages under the first size bytes of an unmapped block; merges it with its free
 * mapped neighbours and caches it. */
static bool map_block(struct vrt_am *a, uint32_t to_map, uint64_t size)
{
	struct vrt_am_segment *es = segment_of(a, to_map);
	uint64_t off = B(to_map).addr - es->ptr, begin = off / es->page, end = (off + size + es->page - 1) / es->page;
	if (begin == end)
		return false;
	uint64_t addr = es->ptr + begin * es->page, bytes = (end - begin) * es->page;
	if (!acquire(a, VRT_AM_MAP, bytes, &addr))
		return false; /* cuMemCreate out of memory: the pages made so far are released */
	mark_pages(es, begin, end, 1);
	event(a, VRT_AM_MAP, es->ptr + begin * es->page, bytes);
	a->stats.bytes_mapped += bytes;
	tree_erase(a, to_map);
	B(to_map).mapped = 1;
	if (bytes < B(to_map).size) {
		uint32_t rest = new_block(a, B(to_map).addr + bytes, B(to_map).size - bytes, B(to_map).stream,
					  B(to_map).small, false, B(to_map).es);
		if (!rest)
			return false;
		splice(a, rest, to_map, B(to_map).next);
		tree_insert(a, TREE_UNMAPPED, rest);
		B(to_map).size = bytes;
	}
	try_merge(a, to_map, B(to_map).prev);
	try_merge(a, to_map, B(to_map).next);
	tree_insert(a, TREE_BLOCKS, to_map);
	reserve_more(a, bytes);
	return true;
}

static bool allocatable(const struct vrt_am *a, uint32_t i) { return i && !B(i).allocated; }

static bool has_room(const struct vrt_am *a, uint32_t b, uint64_t size)
{
	uint64_t bytes = 0;
	for (; bytes < size && allocatable(a, b); b = B(b).next)
		bytes += B(b).size;
	return bytes >= size;
}

static uint32_t new_segment(struct vrt_am *a, uint64_t stream, bool small)
{
	if (a->n_es == a->cap_es) {
		uint32_t cap = a->cap_es ? a->cap_es * 2 : 8;
		struct vrt_am_segment *grown = realloc(a->es, cap * sizeof(*grown));
		if (!grown) {
			a->error = VRT_E_NOMEM;
			return 0;
		}
		a->es = grown;
		a->cap_es = cap;
	}
	uint64_t page = small ? VRT_AM_SMALL_BUFFER : a->cfg.large_segment_size;
	uint64_t total = a->device_total ? a->device_total : DEFAULT_DEVICE_TOTAL;
	uint64_t pages = (total + total / 8 + page - 1) / page, addr = 0;
	uint8_t *mapped = calloc(pages, 1);
	if (!mapped) {
		a->error = VRT_E_NOMEM;
		return 0;
	}
	acquire(a, VRT_AM_VA_RESERVE, pages * page, &addr);
	if (!addr)
		addr = pick_addr(a, pages * page);
	event(a, VRT_AM_VA_RESERVE, addr, pages * page);
	a->es[a->n_es] = (struct vrt_am_segment){ addr, page, pages, stream, mapped, small, true };
	uint32_t es = ++a->n_es;
	uint32_t c = new_block(a, addr, pages * page, stream, small, false, es);
	if (c)
		tree_insert(a, TREE_UNMAPPED, c);
	return c;
}

/* The lowest address where free and unmapped ranges together hold size bytes; a new
 * expandable segment when no segment of this stream and pool has room. */
static uint32_t find_expandable_block(struct vrt_am *a, struct params *p)
{
	const struct vrt_am_tree *t = &p->pool->unmapped;
	for (uint32_t c = lower_bound(a, t, TREE_UNMAPPED, p->stream, 0, 0); c && B(c).stream == p->stream;
	     c = successor(a, c)) {
		uint32_t candidate = allocatable(a, B(c).prev) ? B(c).prev : c;
		if (has_room(a, candidate, p->size))
			return candidate;
	}
	return new_segment(a, p->stream, p->pool->small);
}

static uint32_t try_allocate_expandable_block(struct vrt_am *a, struct params *p)
{
	uint32_t c = find_expandable_block(a, p);
	if (!c || (!B(c).mapped && !map_block(a, c, B(c).size < p->size ? B(c).size : p->size)))
		return 0;
	while (B(c).size < p->size) {
		uint64_t remaining = p->size - B(c).size;
		uint32_t next = B(c).next;
		if (!map_block(a, next, remaining < B(next).size ? remaining : B(next).size))
			return 0;
		c = next; /* map_block merged c into it */
	}
	tree_erase(a, c);
	return c;
}

static bool alloc_block(struct vrt_am *a, struct params *p)
{
	if (a->limit && a->stats.reserved + p->alloc_size > a->limit)
		return false; /* over the per-process limit: the device is not asked */
	if (a->cfg.expandable) {
		p->block = try_allocate_expandable_block(a, p);
		return p->block != 0;
	}
	uint64_t addr = 0;
	if (!acquire(a, VRT_AM_SEG_ALLOC, p->alloc_size, &addr))
		return false;
	if (!addr)
		addr = pick_addr(a, p->alloc_size);
	uint32_t b = new_block(a, addr, p->alloc_size, p->stream, p->pool->small, true, 0);
	if (!b)
		return false;
	reserve_more(a, p->alloc_size);
	a->stats.segments_allocated++;
	event(a, VRT_AM_SEG_ALLOC, addr, p->alloc_size);
	p->block = b;
	return true;
}

/* Frees one cached oversize block large enough for the request, else oversize blocks from the
 * largest down until enough is freed. Only with max_split_size_mb set. */
static bool release_available_cached_blocks(struct vrt_am *a, const struct params *p)
{
	uint64_t max_split = a->cfg.max_split_size;
	if (max_split == UINT64_MAX)
		return false;
	struct vrt_am_tree *t = &p->pool->blocks;
	uint64_t key = p->size < max_split ? max_split : p->size;
	uint32_t it = lower_bound(a, t, TREE_BLOCKS, p->stream, key, 0);
	if (it && B(it).stream == p->stream && !B(it).es) {
		release_block(a, it);
		return true;
	}
	if (it == first_of(a, t))
		return false;
	uint64_t released = 0;
	it = it ? predecessor(a, it) : last_of(a, t);
	while (released < key && B(it).size >= max_split && B(it).stream == p->stream) {
		uint32_t cur = it;
		bool is_first = cur == first_of(a, t);
		if (!is_first)
			it = predecessor(a, cur);
		if (!B(cur).es) {
			released += B(cur).size;
			release_block(a, cur);
		}
		if (is_first)
			break;
	}
	return released >= key;
}

/* Unmaps the whole pages inside a free block of an expandable segment. */
static void unmap_block(struct vrt_am *a, uint32_t block)
{
	struct vrt_am_segment *es = segment_of(a, block);
	uint64_t off = B(block).addr - es->ptr;
	uint64_t begin = (off + es->page - 1) / es->page, end = (off + B(block).size) / es->page;
	if (begin >= end)
		return;
	tree_erase(a, block);
	uint64_t addr = es->ptr + begin * es->page, bytes = (end - begin) * es->page;
	mark_pages(es, begin, end, 0);
	event(a, VRT_AM_UNMAP, addr, bytes);
	a->stats.bytes_unmapped += bytes;
	uint64_t before = addr - B(block).addr, after = B(block).size - before - bytes;
	if (before) {
		uint32_t f = new_block(a, B(block).addr, before, B(block).stream, B(block).small, true, B(block).es);
		if (f) {
			splice(a, f, B(block).prev, block);
			tree_insert(a, TREE_BLOCKS, f);
		}
	}
	if (after) {
		uint32_t f = new_block(a, addr + bytes, after, B(block).stream, B(block).small, true, B(block).es);
		if (f) {
			splice(a, f, block, B(block).next);
			tree_insert(a, TREE_BLOCKS, f);
		}
	}
	B(block).addr = addr;
	B(block).size = bytes;
	B(block).mapped = 0;
	try_merge(a, block, B(block).prev);
	try_merge(a, block, B(block).next);
	tree_insert(a, TREE_UNMAPPED, block);
	a->stats.reserved -= bytes;
}

static void release_expandable_segment(struct vrt_am *a, uint32_t block)
{
	struct vrt_am_segment *es = segment_of(a, block);
	if (B(block).mapped || B(block).addr != es->ptr || B(block).size != es->pages * es->page)
		return;
	event(a, VRT_AM_VA_FREE, es->ptr, es->pages * es->page);
	free(es->mapped);
	es->mapped = NULL;
	es->live = false;
	tree_erase(a, block);
	delete_block(a, block);
}

/* Frees every unsplit cached block of a pool; unmaps the free pages of expandable segments. */
static void release_blocks(struct vrt_am *a, struct vrt_am_pool *pool)
{
	uint32_t n, *order = in_order(a, &pool->blocks, &n), n_unmap = 0;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t b = order[k];
		if (B(b).es)
			order[n_unmap++] = b; /* unmapping changes the pool: after the walk */
		else if (!is_split(a, b))
			release_block(a, b);
	}
	for (uint32_t k = 0; k < n_unmap; k++) {
		uint32_t b = order[k];
		unmap_block(a, b);
		if (!is_split(a, b))
			release_expandable_segment(a, b);
	}
	free(order);
}

static bool release_cached_blocks(struct vrt_am *a)
{
	release_blocks(a, &a->large);
	release_blocks(a, &a->small);
	return true;
}

static uint32_t alloc_found_block(struct vrt_am *a, struct params *p, uint64_t orig, bool split_remainder)
{
	uint32_t block = p->block;
	if (split_remainder) {
		uint32_t rest = block;
		block = new_block(a, B(rest).addr, p->size, p->stream, B(rest).small, true, B(rest).es);
		if (!block)
			return 0;
		B(block).prev = B(rest).prev;
		if (B(block).prev)
			B(B(block).prev).next = block;
		B(block).next = rest;
		B(rest).prev = block;
		B(rest).addr += p->size;
		B(rest).size -= p->size;
		tree_insert(a, TREE_BLOCKS, rest);
	}
	B(block).allocated = 1;
	B(block).requested = orig;
	a->stats.allocated += B(block).size;
	if (a->stats.allocated > a->stats.peak_allocated)
		a->stats.peak_allocated = a->stats.allocated;
	return block;
}

static void make_params(const struct vrt_am *a, uint64_t orig, uint64_t stream, struct params *p)
{
	p->size = vrt_am_round_size(&a->cfg, orig);
	p->pool = (struct vrt_am_pool *)(p->size <= VRT_AM_SMALL_SIZE ? &a->small : &a->large);
	p->alloc_size = vrt_am_allocation_size(&a->cfg, p->size);
	p->stream = stream;
	p->block = 0;
}

uint32_t vrt_am_malloc(struct vrt_am *a, uint64_t orig, uint64_t stream)
{
	struct params p;
	make_params(a, orig, stream, &p);
	a->stats.requests++;
	bool found = get_free_block(a, &p);
	if (!found) {
		if (gc_active(a))
			garbage_collect(a);
		found = alloc_block(a, &p) ||
			(release_available_cached_blocks(a, &p) && alloc_block(a, &p));
		if (!found) {
			a->stats.retries++;
			found = release_cached_blocks(a) && alloc_block(a, &p);
		}
	}
	if (!found || a->error) {
		a->stats.ooms++;
		return 0;
	}
	return alloc_found_block(a, &p, orig, should_split(a, p.block, p.size));
}

void vrt_am_release(struct vrt_am *a, uint32_t block)
{
	if (!block || block > a->n_blocks || !B(block).allocated)
		return;
	B(block).allocated = 0;
	a->stats.allocated -= B(block).size;
	uint32_t prev = B(block).prev, next = B(block).next;
	try_merge(a, block, prev);
	try_merge(a, block, next);
	tree_insert(a, TREE_BLOCKS, block);
}

void vrt_am_empty_cache(struct vrt_am *a)
{
	a->stats.empty_caches++;
	release_cached_blocks(a);
}

bool vrt_am_fits_without_release(const struct vrt_am *a, uint64_t size, uint64_t stream)
{
	struct params p;
	make_params(a, size, stream, &p);
	if (find_free_block(a, &p))
		return true;
	if (gc_active(a) && a->stats.reserved > (uint64_t)(a->cfg.gc_threshold * (double)a->limit))
		return false; /* garbage collection would free cached blocks */
	return !a->limit || a->stats.reserved + p.alloc_size <= a->limit;
}

uint64_t vrt_am_block_addr(const struct vrt_am *a, uint32_t block) { return block ? B(block).addr : 0; }
uint64_t vrt_am_block_size(const struct vrt_am *a, uint32_t block) { return block ? B(block).size : 0; }

static uint64_t largest_in(const struct vrt_am *a, uint32_t x)
{
	uint64_t best = 0;
	for (; x; x = B(x).right) {
		uint64_t left = largest_in(a, B(x).left);
		best = left > best ? left : best;
		best = B(x).size > best ? B(x).size : best;
	}
	return best;
}

uint64_t vrt_am_largest_free(const struct vrt_am *a)
{
	uint64_t s = largest_in(a, a->small.blocks.root), l = largest_in(a, a->large.blocks.root);
	return s > l ? s : l;
}

/* What release_blocks would return of the free blocks under x. */
static uint64_t releasable_in(const struct vrt_am *a, uint32_t x)
{
	uint64_t bytes = 0;
	for (; x; x = B(x).right) {
		bytes += releasable_in(a, B(x).left);
		if (B(x).es) {
			const struct vrt_am_segment *es = &a->es[B(x).es - 1];
			uint64_t off = B(x).addr - es->ptr;
			uint64_t begin = (off + es->page - 1) / es->page, end = (off + B(x).size) / es->page;
			bytes += begin < end ? (end - begin) * es->page : 0;
		} else if (!B(x).prev && !B(x).next) {
			bytes += B(x).size;
		}
	}
	return bytes;
}

uint64_t vrt_am_releasable(const struct vrt_am *a)
{
	return releasable_in(a, a->small.blocks.root) + releasable_in(a, a->large.blocks.root);
}

int vrt_am_init(struct vrt_am *a, const struct vrt_am_config *cfg, const struct vrt_am_env *env)
{
	memset(a, 0, sizeof(*a));
	a->cfg = *cfg;
	if (env)
		a->env = *env;
	a->small.small = true;
	a->next_addr = MODEL_ADDR_BASE;
	return 0;
}

void vrt_am_free_all(struct vrt_am *a)
{
	for (uint32_t k = 0; k < a->n_es; k++)
		free(a->es[k].mapped);
	free(a->es);
	free(a->b);
	memset(a, 0, sizeof(*a));
}
