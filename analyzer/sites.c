/* SPDX-License-Identifier: MIT */
#include "sites.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "model.h"
#include "stacks.h"

void vrt_sites_init(struct vrt_sites *s) { memset(s, 0, sizeof(*s)); }

void vrt_sites_free(struct vrt_sites *s)
{
	free(s->v);
	free(s->index);
	memset(s, 0, sizeof(*s));
}

static size_t home(const struct vrt_sites *s, uint32_t stack)
{
	return (size_t)(stack * 0x9e3779b97f4a7c15ull >> 17) & (s->index_cap - 1);
}

static void reindex(struct vrt_sites *s)
{
	free(s->index);
	s->index_cap = 64;
	while (s->index_cap < s->n * 2 + 2)
		s->index_cap *= 2;
	s->index = calloc(s->index_cap, sizeof(*s->index));
	if (!s->index)
		return;
	for (size_t i = 0; i < s->n; i++) {
		if (s->v[i].label)
			continue;
		size_t j = home(s, s->v[i].stack);
		while (s->index[j])
			j = (j + 1) & (s->index_cap - 1);
		s->index[j] = (uint32_t)i + 1;
	}
}

struct vrt_site *vrt_sites_find(const struct vrt_sites *s, uint32_t stack)
{
	if (!s->index)
		return NULL;
	for (size_t j = home(s, stack); s->index[j]; j = (j + 1) & (s->index_cap - 1))
		if (!s->v[s->index[j] - 1].label && s->v[s->index[j] - 1].stack == stack)
			return &s->v[s->index[j] - 1];
	return NULL;
}

struct vrt_site *vrt_sites_get(struct vrt_sites *s, uint32_t stack, const char *label)
{
	if (label) {
		for (size_t i = 0; i < s->n; i++)
			if (s->v[i].label && !strcmp(s->v[i].label, label))
				return &s->v[i];
	} else {
		struct vrt_site *found = vrt_sites_find(s, stack);
		if (found)
			return found;
	}
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct vrt_site *v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return NULL;
		s->v = v;
		s->cap = cap;
	}
	struct vrt_site *site = &s->v[s->n++];
	*site = (struct vrt_site){ .stack = label ? 0 : stack, .label = label, .first = UINT64_MAX };
	if ((s->n + 1) * 2 > s->index_cap)
		reindex(s);
	else if (!label) {
		size_t j = home(s, stack);
		while (s->index[j])
			j = (j + 1) & (s->index_cap - 1);
		s->index[j] = (uint32_t)s->n;
	}
	return site;
}

static int by_bytes(const void *a, const void *b)
{
	const struct vrt_site *x = a, *y = b;
	if (x->bytes != y->bytes)
		return x->bytes > y->bytes ? -1 : 1;
	return x->stack < y->stack ? -1 : x->stack > y->stack;
}

void vrt_sites_sort(struct vrt_sites *s)
{
	if (s->n) /* qsort's array must not be NULL, even empty */
		qsort(s->v, s->n, sizeof(*s->v), by_bytes);
	reindex(s);
}

int64_t vrt_sites_total(const struct vrt_sites *s)
{
	int64_t total = 0;
	for (size_t i = 0; i < s->n; i++)
		total += s->v[i].bytes;
	return total;
}

/* ---- classification --------------------------------------------------------------------- */

/* A stack's frames, and their text (vrt_frames_text) when there was memory for it; both are
 * the one static copy, valid until the next see(). */
struct frames_seen {
	const struct vrt_frame *frames;
	int n;
	const char *text;
};

static struct frames_seen see(const struct vrt_trace *t, uint32_t stack)
{
	static struct vrt_frame frames[VRT_MAX_FRAMES];
	int n = vrt_stack_frames(t, stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES);
	return (struct frames_seen){ frames, n, vrt_frames_text(frames, n) };
}

/* The rules' needles are constants without VRT_TEXT_END_MARK: the text answers for them. */
static bool mentions(const struct frames_seen *f, const char *needle)
{
	return f->text ? vrt_text_mentions(f->text, needle) : vrt_frames_mention(f->frames, f->n, needle);
}

static bool frames_are_torch_segment(const struct frames_seen *f)
{
	return mentions(f, "libc10_cuda") || mentions(f, "CUDACachingAllocator") || mentions(f, "[PyTorch allocator segment");
}

static uint8_t *torch_memo; /* per stack: 0 unknown, 1 no, 2 yes */
static size_t torch_memo_cap;
static uint64_t torch_memo_serial; /* the trace whose stack ids it holds */

bool vrt_stack_is_torch_segment(const struct vrt_trace *t, uint32_t stack)
{
	if (torch_memo_serial != t->serial) {
		if (torch_memo)
			memset(torch_memo, 0, torch_memo_cap);
		torch_memo_serial = t->serial;
	}
	if (stack >= torch_memo_cap) {
		size_t cap = t->tables.n_nodes + 1;
		uint8_t *m = realloc(torch_memo, cap);
		if (!m)
			return vrt_stack_mentions(t, stack, "libc10_cuda");
		memset(m + torch_memo_cap, 0, cap - torch_memo_cap);
		torch_memo = m;
		torch_memo_cap = cap;
	}
	if (!torch_memo[stack]) {
		struct frames_seen seen = see(t, stack);
		torch_memo[stack] = frames_are_torch_segment(&seen) ? 2 : 1;
	}
	return torch_memo[stack] == 2;
}

struct rule {
	const char *category;
	const char *needle; /* in a frame's function, file or module */
	const char *text;
};

/* The fallback when no retention walk says what a tensor is (owners.h): first match wins, and
 * order matters. What autograd's engine allocates is a gradient whatever else the frames say; a
 * forward pass comes before a mere mention of "gradient" (transformers' decoder layers run
 * inside GradientCheckpointingLayer.__call__, and their activations are no gradients); a
 * gradient buffer an optimizer allocates is a gradient. Matching ignores case. */
static const struct rule rules[] = {
	{ "nccl", "libnccl", "a frame in libnccl" },
	{ "nccl", "nccl", "a frame mentions nccl" },
	{ "workspace", "Workspace", "a frame names a workspace (cuBLAS/cuDNN)" },
	{ "workspace", "cublas", "a frame in cuBLAS" },
	{ "workspace", "cudnn", "a frame in cuDNN" },
	{ "gradients", "AccumulateGrad", "allocated by autograd's AccumulateGrad" },
	{ "gradients", "autograd::Engine", "allocated by the autograd engine" },
	{ "gradients", "backward", "allocated during backward" },
	{ "activations", "forward", "allocated inside a forward()" },
	{ "activations", "_call_impl", "allocated inside a module call" },
	{ "gradients", "gradient", "a frame mentions gradient(s)" },
	{ "optimizer_state", "torch/optim/", "allocated inside torch/optim" },
	{ "optimizer_state", "optimizer", "a frame mentions optimizer" },
	{ "optimizer_state", "adam", "a frame mentions adam" },
	{ "optimizer_state", "exp_avg", "a frame mentions exp_avg" },
	{ "parameters", "reset_parameters", "allocated by reset_parameters" },
	{ "parameters", "torch/nn/modules/module.py\x01_apply", "moved by Module._apply (.to/.cuda)" },
	{ "parameters", "Parameter", "a frame mentions Parameter" },
	/* seeded at an attach from PyTorch's own snapshot (preload/torch_seed.c), no stack but its
	 * innermost frame when history was on (matched by the rules above first) */
	{ "unattributed", "[tensor allocated before attach", "a tensor PyTorch held when the attach began" },
	{ "unattributed", "[allocated before attach",
	  "device memory in use at the attach that PyTorch's allocator did not hold (the CUDA context, library "
	  "workspaces and handles such as cuBLAS's and NCCL's, cudaMalloc calls made before the attach): "
	  "no stack of it can be known" },
};

/* Whether the frames mention a rule's needle, or both of its halves. */
static bool matches(const struct frames_seen *f, const char *needle)
{
	const char *sep = strchr(needle, '\x01');
	if (!sep)
		return mentions(f, needle);
	char file[128];
	snprintf(file, sizeof(file), "%.*s", (int)(sep - needle), needle);
	return mentions(f, file) && mentions(f, sep + 1);
}

#define N_RULES (sizeof(rules) / sizeof(rules[0]))
enum { RULE_NON_PYTORCH = N_RULES, RULE_USER_TENSORS, RULE_NONE };

/* Which rule decides a stack's category: an index into rules[], or one of the three above. */
static unsigned stack_rule(const struct vrt_trace *t, uint32_t stack)
{
	struct frames_seen seen = see(t, stack);
	for (unsigned i = 0; i < N_RULES; i++)
		if (matches(&seen, rules[i].needle))
			return i;
	if (!frames_are_torch_segment(&seen))
		return RULE_NON_PYTORCH;
	return vrt_frames_have_python(seen.frames, seen.n) ? RULE_USER_TENSORS : RULE_NONE;
}

/*
 * stack_rule per (trace, stack), remembered: categorizing a live set asks once per item, and
 * the items of one site share a stack. Open addressing, at most half full; a stack whose entry
 * cannot be stored (no memory) is simply asked again.
 */
struct rule_memo {
	uint64_t serial;
	uint32_t stack;
	uint32_t rule_plus_one; /* 0: empty */
};
static struct rule_memo *memo;
static size_t memo_cap, memo_used;

static size_t memo_slot(uint64_t serial, uint32_t stack, size_t cap)
{
	uint64_t h = (serial * 0x9e3779b97f4a7c15u) ^ ((uint64_t)stack * 0xff51afd7ed558ccdu);
	return (size_t)(h >> 17) & (cap - 1);
}

static bool memo_grow(void)
{
	size_t cap = memo_cap ? memo_cap * 2 : 4096;
	struct rule_memo *next = calloc(cap, sizeof(*next));
	if (!next)
		return false;
	for (size_t i = 0; i < memo_cap; i++) {
		if (!memo[i].rule_plus_one)
			continue;
		size_t j = memo_slot(memo[i].serial, memo[i].stack, cap);
		while (next[j].rule_plus_one)
			j = (j + 1) & (cap - 1);
		next[j] = memo[i];
	}
	free(memo);
	memo = next;
	memo_cap = cap;
	return true;
}

static unsigned remembered_rule(const struct vrt_trace *t, uint32_t stack)
{
	if (memo_cap) {
		for (size_t i = memo_slot(t->serial, stack, memo_cap); memo[i].rule_plus_one; i = (i + 1) & (memo_cap - 1))
			if (memo[i].serial == t->serial && memo[i].stack == stack)
				return memo[i].rule_plus_one - 1;
	}
	unsigned rule = stack_rule(t, stack);
	if ((memo_used + 1) * 2 > memo_cap && !memo_grow())
		return rule;
	size_t i = memo_slot(t->serial, stack, memo_cap);
	while (memo[i].rule_plus_one)
		i = (i + 1) & (memo_cap - 1);
	memo[i] = (struct rule_memo){ t->serial, stack, rule + 1 };
	memo_used++;
	return rule;
}

const char *vrt_site_category(const struct vrt_trace *t, const struct vrt_site *s, const char **rule)
{
	if (s->label) {
		*rule = "a pseudo-site";
		if (strstr(s->label, "cache"))
			return "allocator_cache";
		if (strstr(s->label, "before"))
			return "unattributed";
		return "other";
	}
	unsigned r = remembered_rule(t, s->stack);
	if (r < N_RULES) {
		*rule = rules[r].text;
		return rules[r].category;
	}
	if (r == RULE_NON_PYTORCH) {
		*rule = "not allocated through PyTorch's allocator";
		return "non_pytorch";
	}
	if (r == RULE_USER_TENSORS) {
		*rule = "allocated by Python code outside modules, autograd and optimizers";
		return "user_tensors"; /* inputs, losses, what the step itself keeps */
	}
	*rule = "no rule matched";
	return "other";
}

/* ---- output ----------------------------------------------------------------------------- */

static bool same_text(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

/* A native frame is its return address: frames without a symbol have equal texts ("??"). */
static bool same_frame(const struct vrt_frame *a, const struct vrt_frame *b)
{
	return a->type == b->type && a->line == b->line && a->offset == b->offset && same_text(a->function, b->function) &&
	       same_text(a->file, b->file) && same_text(a->module, b->module) &&
	       (a->type != VRT_FT_NATIVE || a->address == b->address);
}

/* ---- stacks that print alike ------------------------------------------------------------ */

struct vrt_site_key {
	uint64_t hash;
	uint32_t stack_plus_one; /* 0: empty */
};

void vrt_site_keys_init(struct vrt_site_keys *k, const struct vrt_trace *t)
{
	memset(k, 0, sizeof(*k));
	k->t = t;
}

void vrt_site_keys_free(struct vrt_site_keys *k)
{
	free(k->site_of);
	free(k->table);
	memset(k, 0, sizeof(*k));
}

static uint64_t hash_text(uint64_t h, const char *s)
{
	for (; s && *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return (h ^ 0xff) * 0x100000001b3ull; /* ends the text: "ab"+"c" is not "a"+"bc" */
}

static uint64_t hash_frame(uint64_t h, const struct vrt_frame *f)
{
	h = hash_text(hash_text(hash_text(h, f->function), f->file), f->module);
	uint64_t nums[3] = { (uint64_t)f->type | (uint64_t)(uint32_t)f->line << 8, f->offset,
			     f->type == VRT_FT_NATIVE ? f->address : 0 };
	for (int i = 0; i < 3; i++)
		h = (h ^ nums[i]) * 0x100000001b3ull;
	return h;
}

/* The hash of what vrt_site_print shows of a stack and of what its rule says it is (stacks
 * that print alike may differ below the Python frames: a cuBLAS workspace and a matmul's output
 * made by one line), or false: it has no Python frames. */
static bool printed_hash(const struct vrt_trace *t, uint32_t stack, uint64_t *hash)
{
	static struct vrt_frame frames[VRT_MAX_FRAMES];
	int n = vrt_stack_frames(t, stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES);
	int head = vrt_headline_index(frames, n);
	uint64_t h = 0xcbf29ce484222325ull;
	bool python = false;
	for (int i = 0; i < n; i++)
		if (frames[i].type == VRT_FT_PYTHON) {
			h = hash_frame(h, &frames[i]);
			python = true;
		}
	if (!python || head < 0)
		return false;
	h = hash_frame(h, &frames[head]);
	*hash = (h ^ (remembered_rule(t, stack) + 1)) * 0x100000001b3ull;
	return true;
}

static bool site_keys_grow(struct vrt_site_keys *k)
{
	size_t cap = k->cap ? k->cap * 2 : 1024;
	struct vrt_site_key *next = calloc(cap, sizeof(*next));
	if (!next)
		return false;
	for (size_t i = 0; i < k->cap; i++) {
		if (!k->table[i].stack_plus_one)
			continue;
		size_t j = (size_t)(k->table[i].hash >> 20) & (cap - 1);
		while (next[j].stack_plus_one)
			j = (j + 1) & (cap - 1);
		next[j] = k->table[i];
	}
	free(k->table);
	k->table = next;
	k->cap = cap;
	return true;
}

/* The first stack asked about that prints as hash does: stack itself when it is the first. */
static uint32_t site_of_hash(struct vrt_site_keys *k, uint64_t hash, uint32_t stack)
{
	if ((k->used + 1) * 2 > k->cap && !site_keys_grow(k))
		return stack;
	size_t i = (size_t)(hash >> 20) & (k->cap - 1);
	for (; k->table[i].stack_plus_one; i = (i + 1) & (k->cap - 1))
		if (k->table[i].hash == hash)
			return k->table[i].stack_plus_one - 1;
	k->table[i] = (struct vrt_site_key){ hash, stack + 1 };
	k->used++;
	return stack;
}

uint32_t vrt_site_keys_stack(struct vrt_site_keys *k, uint32_t stack)
{
	if (!stack || stack >= k->t->tables.n_nodes)
		return stack; /* no stack, or an undefined one: nothing prints alike */
	if (stack >= k->n_site_of) {
		size_t n = stack + 1 > 2 * k->n_site_of ? (size_t)stack + 1 : 2 * k->n_site_of;
		uint32_t *next = realloc(k->site_of, n * sizeof(*next));
		if (!next)
			return stack;
		memset(next + k->n_site_of, 0, (n - k->n_site_of) * sizeof(*next));
		k->site_of = next;
		k->n_site_of = n;
	}
	if (!k->site_of[stack]) {
		uint64_t hash;
		uint32_t site = printed_hash(k->t, stack, &hash) ? site_of_hash(k, hash, stack) : stack;
		k->site_of[stack] = site + 1;
	}
	return k->site_of[stack] - 1;
}

void vrt_site_print(FILE *out, const struct vrt_trace *t, const struct vrt_site *s, int max_frames)
{
	char line[1024];
	struct vrt_frame head;
	if (s->label)
		head = (struct vrt_frame){ VRT_FT_LABEL, s->label, "", 0, "", 0, 0 };
	else
		vrt_stack_headline(t, s->stack, &head);
	/* frame lines fit the terminal (vrt_text_width): what comes before and after a frame is
	 * taken from its room */
	int width = vrt_text_width();
	/* memory that is not the device's, in a list that is mostly the device's, says so first */
	char kind[32] = "";
	if (s->kinds && !(s->kinds & (1u << VRT_KIND_DEVICE)))
		snprintf(kind, sizeof(kind), "[%s] ", vrt_kind_name((uint32_t)__builtin_ctz(s->kinds)));
	vrt_frame_fit(&head, line, sizeof(line), vrt_room(width, 22 + (int)strlen(kind)));
	fprintf(out, "  %10s %6llux  %s%s\n", vrt_bytes(s->bytes), (unsigned long long)s->count, kind, line);
	if (s->label || max_frames <= 0)
		return;
	static struct vrt_frame frames[VRT_MAX_FRAMES];
	int n = vrt_stack_frames(t, s->stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES);
	bool python = false;
	for (int i = 0; i < n && !python; i++)
		python = frames[i].type == VRT_FT_PYTHON;
	/* With Python frames, the Python stack tells the story; otherwise the native one does, from
	 * the headline down, past the allocator above it and the operator dispatch in between. */
	/* The headline is not printed again as the first frame, and a frame repeated in a row
	 * (recursion: Module._apply x5) is one line with its count. */
	bool skip_headline = !s->label;
	for (int i = python ? 0 : vrt_headline_index(frames, n), shown = 0; i >= 0 && i < n && shown < max_frames; i++) {
		if (python ? frames[i].type != VRT_FT_PYTHON : vrt_frame_is_dispatch(&frames[i]))
			continue;
		int run = 1;
		for (int k = i + 1; k < n && same_frame(&frames[k], &frames[i]); k++)
			run++;
		bool is_headline = skip_headline && same_frame(&frames[i], &head);
		skip_headline = false;
		if (is_headline && run == 1)
			continue;
		char repeat[40] = "";
		if (run - is_headline > 1)
			snprintf(repeat, sizeof(repeat), "  (x%d, recursion)", run - is_headline);
		vrt_frame_fit(&frames[i], line, sizeof(line), vrt_room(width, 25 + (int)strlen(repeat)));
		fprintf(out, "%24s %s%s\n", python ? "at" : "in", line, repeat);
		i += run - 1;
		shown++;
	}
}

void vrt_site_json(FILE *out, const struct vrt_trace *t, const struct vrt_site *s, bool open_end)
{
	fprintf(out, "{\"bytes\": %lld, \"count\": %llu", (long long)s->bytes, (unsigned long long)s->count);
	if (s->kinds) { /* in a list of every kind: which its memory is */
		fputs(", \"kinds\": [", out);
		for (uint32_t k = 0, n = 0; k < VRT_KIND_LAST; k++)
			if (s->kinds & (1u << k))
				fprintf(out, "%s\"%s\"", n++ ? ", " : "", vrt_kind_name(k));
		fputc(']', out);
	}
	/* The trace's stack id (dump's stack=, export parquet's stacks table): null for a label. */
	if (s->label)
		fputs(", \"stack\": null", out);
	else
		fprintf(out, ", \"stack\": %u", s->stack);
	if (s->label) {
		fputs(", \"label\": ", out);
		json_string(out, s->label);
	} else {
		/* The frame the text reports name the site by. */
		struct vrt_frame head;
		vrt_stack_headline(t, s->stack, &head);
		fputs(", \"headline\": ", out);
		vrt_frame_json(out, &head);
	}
	fputs(", \"frames\": [", out);
	if (s->label) {
		struct vrt_frame f = { VRT_FT_LABEL, s->label, "", 0, "", 0, 0 };
		vrt_frame_json(out, &f);
	} else {
		static struct vrt_frame frames[VRT_MAX_FRAMES];
		int n = vrt_stack_frames(t, s->stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES);
		for (int i = 0; i < n; i++) {
			if (i)
				fputs(", ", out);
			vrt_frame_json(out, &frames[i]);
		}
	}
	fputc(']', out);
	if (!open_end)
		fputc('}', out);
}

struct from_model {
	struct vrt_sites *s;
	bool (*keep)(const struct vrt_item *, void *);
	void *ctx;
};

static void add_item(void *p, const struct vrt_item *it)
{
	struct from_model *fm = p;
	if (!fm->keep(it, fm->ctx))
		return;
	struct vrt_site *site = vrt_sites_get(fm->s, it->stack, NULL);
	if (!site)
		return;
	site->bytes += (int64_t)it->size;
	site->count++;
}

void vrt_sites_from_model(struct vrt_sites *s, const struct vrt_model *m,
			  bool (*keep)(const struct vrt_item *it, void *ctx), void *ctx)
{
	struct from_model fm = { s, keep, ctx };
	vrt_model_each(m, add_item, &fm);
}

int vrt_sites_fold_printed(const struct vrt_trace *t, struct vrt_sites *s)
{
	struct vrt_site_keys keys;
	vrt_site_keys_init(&keys, t);
	struct vrt_sites folded;
	vrt_sites_init(&folded);
	bool ok = true;
	for (size_t i = 0; ok && i < s->n; i++) {
		const struct vrt_site *from = &s->v[i];
		struct vrt_site *to = from->label ? vrt_sites_get(&folded, 0, from->label)
						  : vrt_sites_get(&folded, vrt_site_keys_stack(&keys, from->stack), NULL);
		ok = to != NULL;
		if (ok) {
			to->bytes += from->bytes;
			to->count += from->count;
			to->value2 = from->value2 > to->value2 ? from->value2 : to->value2;
			to->first = from->first < to->first ? from->first : to->first;
			to->last = from->last > to->last ? from->last : to->last;
			to->outlived = from->outlived > to->outlived ? from->outlived : to->outlived;
			to->kinds |= from->kinds;
			to->captured += from->captured;
		}
	}
	vrt_site_keys_free(&keys);
	if (!ok) {
		vrt_sites_free(&folded);
		return VRT_E_NOMEM;
	}
	vrt_sites_sort(&folded);
	vrt_sites_free(s);
	*s = folded;
	return 0;
}
