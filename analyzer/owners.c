/* SPDX-License-Identifier: MIT */
#include "owners.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "vramtrace/error.h"

void vrt_owners_init(struct vrt_owners *o) { memset(o, 0, sizeof(*o)); }

void vrt_owners_settle(struct vrt_owners *o)
{
	for (size_t i = 0; i < o->n_earlier; i++)
		free(o->earlier[i].v);
	o->n_earlier = 0;
}

void vrt_owners_free(struct vrt_owners *o)
{
	vrt_owners_settle(o);
	free(o->last.v);
	free(o->pending);
	memset(o, 0, sizeof(*o));
}

/* w's owners copied into an array of its own (none, and n 0, without the memory). */
static int copy_walk(struct vrt_walk *w)
{
	const struct vrt_owner *from = w->v;
	w->v = NULL;
	if (!w->n)
		return 0;
	if (!(w->v = malloc(w->n * sizeof(*w->v)))) {
		w->n = 0;
		return VRT_E_NOMEM;
	}
	memcpy(w->v, from, w->n * sizeof(*w->v));
	return 0;
}

int vrt_owners_copy(struct vrt_owners *dst, const struct vrt_owners *src)
{
	*dst = *src;
	dst->last.v = NULL;
	dst->n_earlier = 0;
	dst->pending = NULL;
	dst->n_pending = dst->cap_pending = 0;
	struct vrt_walk last = src->last;
	int rc = copy_walk(&last);
	dst->last = last;
	for (size_t i = 0; !rc && i < src->n_earlier; i++) {
		dst->earlier[i] = src->earlier[i];
		if (!(rc = copy_walk(&dst->earlier[i])))
			dst->n_earlier++;
	}
	struct vrt_walk pending = { .v = src->pending, .n = src->n_pending };
	if (!rc && !(rc = copy_walk(&pending))) {
		dst->pending = pending.v;
		dst->n_pending = dst->cap_pending = src->n_pending;
	}
	if (rc)
		vrt_owners_free(dst);
	return rc;
}

static int by_place(const void *a, const void *b)
{
	const struct vrt_owner *x = a, *y = b;
	if (x->device != y->device)
		return x->device < y->device ? -1 : 1;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* An OWNER record: one more owner of the walk under way. */
void vrt_owners_apply_owner(struct vrt_owners *o, const struct vrt_record *r)
{
	if (o->n_pending == o->cap_pending) {
		size_t cap = o->cap_pending ? o->cap_pending * 2 : 256;
		struct vrt_owner *v = realloc(o->pending, cap * sizeof(*v));
		if (!v)
			return; /* the walk then explains less; nothing else depends on it */
		o->pending = v;
		o->cap_pending = cap;
	}
	o->pending[o->n_pending++] = (struct vrt_owner){
		.addr = r->addr, .size = r->size, .device = (int16_t)r->device,
		.category = r->id2 <= VRT_OWNER_ACTIVATION ? (uint8_t)r->id2 : VRT_OWNER_OTHER,
		.status = r->aux == VRT_OWNER_UNREACHABLE ? VRT_OWNER_UNREACHABLE : VRT_OWNER_FOUND,
		.chain = r->id <= UINT32_MAX ? (uint32_t)r->id : 0 };
}

/* A WALK record: the pending owners become the latest walk; the buffers they held move with them. */
void vrt_owners_apply_walk(struct vrt_owners *o, const struct vrt_record *r)
{
	if (o->n_earlier == VRT_EARLIER_WALKS) {
		free(o->earlier[0].v);
		memmove(o->earlier, o->earlier + 1, (VRT_EARLIER_WALKS - 1) * sizeof(o->earlier[0]));
		o->n_earlier--;
	}
	if (o->last.ts)
		o->earlier[o->n_earlier++] = o->last;
	o->last = (struct vrt_walk){ .ts = r->ts, .born_after = r->aux, .reason = (uint32_t)r->id,
				     .status = (uint32_t)r->id2, .objects = r->size, .duration_us = r->aux2,
				     .v = o->pending, .n = o->n_pending };
	if (o->last.n)
		qsort(o->last.v, o->last.n, sizeof(*o->last.v), by_place);
	o->pending = NULL;
	o->n_pending = o->cap_pending = 0;
	o->walks++;
	o->timed_out += o->last.status != VRT_WALK_COMPLETE;
	o->walk_us += o->last.duration_us;
	o->walk_objects_max = o->last.objects > o->walk_objects_max ? o->last.objects : o->walk_objects_max;
}

static bool asked_about(const struct vrt_walk *w, const struct vrt_item *it)
{
	bool buffer = it->space == VRT_SPACE_ADDR || it->space == VRT_SPACE_BLOCK || it->space == VRT_SPACE_MAP;
	bool memory = it->kind == VRT_KIND_DEVICE || it->kind == VRT_KIND_HOST_PINNED || it->kind == VRT_KIND_MANAGED;
	return w->ts && buffer && memory && !it->seeded && it->ts >= w->born_after && it->ts <= w->ts;
}

enum vrt_held vrt_owners_of(const struct vrt_walk *w, const struct vrt_item *it, const struct vrt_owner **first,
			    size_t *n)
{
	*first = NULL;
	*n = 0;
	if (!asked_about(w, it))
		return VRT_HELD_OFF;
	struct vrt_owner key = { .addr = it->addr, .device = it->device };
	size_t lo = 0, hi = w->n;
	while (lo < hi) { /* the first owner at or after the item's start */
		size_t mid = lo + (hi - lo) / 2;
		if (by_place(&w->v[mid], &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	size_t end = lo;
	while (end < w->n && w->v[end].device == it->device && w->v[end].addr - it->addr < it->size)
		end++;
	if (end == lo)
		return w->status == VRT_WALK_COMPLETE ? VRT_HELD_NOT_PYTHON : VRT_HELD_TIMED_OUT;
	*first = &w->v[lo];
	*n = end - lo;
	for (size_t i = lo; i < end; i++)
		if (w->v[i].status == VRT_OWNER_FOUND)
			return VRT_HELD_FOUND;
	return VRT_HELD_UNREACHABLE;
}

enum vrt_held vrt_owners_explain(const struct vrt_owners *o, const struct vrt_item *it, const struct vrt_walk **walk)
{
	const struct vrt_owner *first;
	size_t n;
	*walk = NULL;
	for (size_t k = 0; k <= o->n_earlier; k++) { /* latest first */
		const struct vrt_walk *w = k ? &o->earlier[o->n_earlier - k] : &o->last;
		enum vrt_held h = vrt_owners_of(w, it, &first, &n);
		if (h == VRT_HELD_OFF)
			continue;
		if (h != VRT_HELD_TIMED_OUT) {
			*walk = w;
			return h;
		}
		if (!*walk)
			*walk = w;
	}
	return *walk ? VRT_HELD_TIMED_OUT : VRT_HELD_OFF;
}

const char *vrt_held_name(enum vrt_held h)
{
	static const char *const names[VRT_HELD_KINDS] = { "off", "found", "unreachable", "not_python", "timed_out" };
	return (unsigned)h < VRT_HELD_KINDS ? names[h] : "off";
}

const char *vrt_owner_category_name(unsigned category)
{
	static const char *const names[] = { NULL, "parameters", "gradients", "optimizer_state", "activations" };
	return category < sizeof(names) / sizeof(names[0]) ? names[category] : NULL;
}

/* ---- chains ------------------------------------------------------------------------------ */

/* The steps' separator, U+001F, as the reader keeps it: it writes every control character of a
 * trace's strings as \xNN (trace_reader.c), so that none reaches a terminal raw. */
#define CHAIN_SEP "\\x1f"
#define CHAIN_SEP_LEN 4

static void put_escaped(FILE *out, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c == 0x7f)
			fprintf(out, "\\x%02x", c);
		else
			fputc(c, out);
	}
}

void vrt_chain_print(FILE *out, const char *chain, const char *sep)
{
	const char *p = chain;
	for (const char *q; (q = strstr(p, CHAIN_SEP)); p = q + CHAIN_SEP_LEN) {
		put_escaped(out, p, (size_t)(q - p));
		fputs(sep, out);
	}
	put_escaped(out, p, strlen(p));
}

void vrt_chain_json(FILE *out, const char *chain)
{
	fputc('[', out);
	const char *p = chain;
	char step[512];
	for (bool first = true; *chain; first = false) {
		const char *q = strstr(p, CHAIN_SEP);
		size_t n = q ? (size_t)(q - p) : strlen(p);
		snprintf(step, sizeof(step), "%.*s", (int)(n < sizeof(step) - 1 ? n : sizeof(step) - 1), p);
		if (!first)
			fputs(", ", out);
		json_string(out, step);
		if (!q)
			break;
		p = q + CHAIN_SEP_LEN;
	}
	fputc(']', out);
}

/* ---- a group's holders --------------------------------------------------------------------- */

static void add_chain(struct vrt_held_by *h, uint32_t chain, int64_t bytes)
{
	int free_slot = -1;
	for (int i = 0; i < VRT_HELD_CHAINS; i++) {
		if (h->bytes[i] && h->chain[i] == chain) {
			h->bytes[i] += bytes;
			return;
		}
		if (!h->bytes[i] && free_slot < 0)
			free_slot = i;
	}
	if (free_slot >= 0) {
		h->chain[free_slot] = chain;
		h->bytes[free_slot] = bytes;
		return;
	}
	int smallest = 0; /* keep the largest few: a newcomer larger than the smallest takes its place */
	for (int i = 1; i < VRT_HELD_CHAINS; i++)
		if (h->bytes[i] < h->bytes[smallest])
			smallest = i;
	if (bytes > h->bytes[smallest]) {
		h->other_chains += h->bytes[smallest];
		h->chain[smallest] = chain;
		h->bytes[smallest] = bytes;
	} else {
		h->other_chains += bytes;
	}
}

void vrt_held_add(struct vrt_held_by *h, const struct vrt_walk *w, const struct vrt_item *it)
{
	const struct vrt_owner *first;
	size_t n;
	enum vrt_held status = vrt_owners_of(w, it, &first, &n);
	int64_t size = (int64_t)it->size;
	h->by_status[status] += size;
	if (!n)
		return;
	/* One owner: the item is its buffer. Several (storages a framework placed in one CUDA
	 * allocation): each holds its own bytes. */
	for (size_t i = 0; i < n; i++) {
		int64_t bytes = n == 1 ? size : (int64_t)first[i].size;
		if (first[i].chain)
			add_chain(h, first[i].chain, bytes);
		if (first[i].category)
			h->by_category[first[i].category] += bytes;
	}
}

void vrt_held_merge(struct vrt_held_by *into, const struct vrt_held_by *h)
{
	for (int i = 0; i < VRT_HELD_CHAINS; i++)
		if (h->bytes[i])
			add_chain(into, h->chain[i], h->bytes[i]);
	into->other_chains += h->other_chains;
	for (int i = 0; i < VRT_HELD_KINDS; i++)
		into->by_status[i] += h->by_status[i];
	for (int i = 0; i < 5; i++)
		into->by_category[i] += h->by_category[i];
}

enum vrt_held vrt_held_status(const struct vrt_held_by *h)
{
	if (h->by_status[VRT_HELD_FOUND])
		return VRT_HELD_FOUND;
	enum vrt_held best = VRT_HELD_OFF;
	for (int i = 1; i < VRT_HELD_KINDS; i++)
		if (h->by_status[i] > h->by_status[best])
			best = (enum vrt_held)i;
	return best;
}

int vrt_held_category(const struct vrt_held_by *h, int64_t *bytes)
{
	int best = -1;
	*bytes = 0;
	for (int i = 1; i < 5; i++)
		if (h->by_category[i] > *bytes) {
			best = i;
			*bytes = h->by_category[i];
		}
	return best;
}

/* ---- where the chains start ------------------------------------------------------------------ */

/* The chain's first step, "[digits]" folded to "[*]". */
static void root_of(const char *chain, char *out, size_t len)
{
	const char *end = strstr(chain, CHAIN_SEP);
	size_t n = end ? (size_t)(end - chain) : strlen(chain), o = 0;
	for (size_t i = 0; i < n && o + 4 < len; i++) {
		out[o++] = chain[i];
		if (chain[i] != '[' || i + 1 >= n || chain[i + 1] < '0' || chain[i + 1] > '9')
			continue;
		size_t j = i + 1;
		while (j < n && chain[j] >= '0' && chain[j] <= '9')
			j++;
		if (j < n && chain[j] == ']') {
			out[o++] = '*';
			i = j - 1;
		}
	}
	out[o] = 0;
}

static void add_root(struct vrt_roots *r, const char *text, int64_t bytes)
{
	for (size_t i = 0; i < r->n; i++)
		if (!strcmp(r->v[i].text, text)) {
			r->v[i].bytes += bytes;
			r->v[i].chains++;
			return;
		}
	if (r->n == VRT_ROOTS) {
		r->other += bytes;
		return;
	}
	struct vrt_root *root = &r->v[r->n++];
	snprintf(root->text, sizeof(root->text), "%s", text);
	root->bytes = bytes;
	root->chains = 1;
}

void vrt_roots_add(struct vrt_roots *r, const struct vrt_trace *t, const struct vrt_walk *w, const struct vrt_item *it)
{
	const struct vrt_owner *first;
	size_t n;
	enum vrt_held status = vrt_owners_of(w, it, &first, &n);
	int64_t size = (int64_t)it->size;
	char text[VRT_ROOT_TEXT];
	bool chained = false;
	for (size_t i = 0; i < n; i++) {
		const char *chain = first[i].chain ? vrt_string(t, first[i].chain) : NULL;
		if (!chain || !*chain)
			continue;
		int64_t bytes = n == 1 ? size : (int64_t)first[i].size;
		root_of(chain, text, sizeof(text));
		add_root(r, text, bytes);
		chained = true;
	}
	r->by_status[status] += size;
	if (!chained)
		r->unchained[status] += size;
}

static int by_root_bytes(const void *a, const void *b)
{
	const struct vrt_root *x = a, *y = b;
	return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : strcmp(x->text, y->text);
}

void vrt_roots_sort(struct vrt_roots *r)
{
	qsort(r->v, r->n, sizeof(r->v[0]), by_root_bytes);
}

void vrt_root_print(FILE *out, const struct vrt_root *root)
{
	put_escaped(out, root->text, strlen(root->text));
}

#define SHOWN_ROOTS 3

void vrt_roots_print(FILE *out, const struct vrt_roots *r, const char *heading)
{
	static const char *const unexplained[VRT_HELD_KINDS] = {
		[VRT_HELD_FOUND] = "a Python object (no chain recorded)",
		[VRT_HELD_UNREACHABLE] = "nothing a root reaches: a reference cycle, or native code",
		[VRT_HELD_NOT_PYTHON] = "no Python object (memory native code allocated and keeps)",
		[VRT_HELD_TIMED_OUT] = "not known (the walk ran out of time before it got there)",
		[VRT_HELD_OFF] = "not asked about (born before the walk's window, or no walk since its birth)",
	};
	int64_t total = 0;
	for (int k = 0; k < VRT_HELD_KINDS; k++)
		total += r->by_status[k];
	if (!total)
		return;
	fputs(heading, out);
	int64_t rest = r->other;
	for (size_t i = 0; i < r->n; i++) {
		if (i >= SHOWN_ROOTS) {
			rest += r->v[i].bytes;
			continue;
		}
		fprintf(out, "  %10s %3.0f%%  ", vrt_bytes(r->v[i].bytes), 100.0 * (double)r->v[i].bytes / (double)total);
		vrt_root_print(out, &r->v[i]);
		if (r->v[i].chains > 1)
			fprintf(out, "  (%llu objects)", (unsigned long long)r->v[i].chains);
		fputc('\n', out);
	}
	if (rest)
		fprintf(out, "  %10s %3.0f%%  other roots (%zu more)\n", vrt_bytes(rest), 100.0 * (double)rest / (double)total,
		       r->n > SHOWN_ROOTS ? r->n - SHOWN_ROOTS : 0);
	for (int k = 0; k < VRT_HELD_KINDS; k++)
		if (unexplained[k] && r->unchained[k])
			fprintf(out, "  %10s %3.0f%%  %s\n", vrt_bytes(r->unchained[k]), 100.0 * (double)r->unchained[k] / (double)total,
			       unexplained[k]);
}

void vrt_roots_json(FILE *out, const struct vrt_roots *r)
{
	fprintf(out, ", \"kept_alive_by\": [");
	for (size_t i = 0; i < r->n; i++) {
		fprintf(out, "%s{\"root\": ", i ? ", " : "");
		json_string(out, r->v[i].text);
		fprintf(out, ", \"bytes\": %lld, \"objects\": %llu}", (long long)r->v[i].bytes, (unsigned long long)r->v[i].chains);
	}
	fprintf(out, "], \"kept_alive_other_roots_bytes\": %lld, \"kept_alive_by_status\": {", (long long)r->other);
	for (int k = 0; k < VRT_HELD_KINDS; k++)
		fprintf(out, "%s\"%s\": %lld", k ? ", " : "", vrt_held_name((enum vrt_held)k), (long long)r->by_status[k]);
	fprintf(out, "}, \"kept_alive_without_chain\": {");
	for (int k = 0; k < VRT_HELD_KINDS; k++)
		fprintf(out, "%s\"%s\": %lld", k ? ", " : "", vrt_held_name((enum vrt_held)k), (long long)r->unchained[k]);
	fprintf(out, "}");
}
