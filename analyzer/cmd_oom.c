/* SPDX-License-Identifier: MIT */
/*
 * vramtrace oom: explains an out-of-memory failure from the live set at that instant.
 *
 * PyTorch's allocator retries a failed cudaMalloc after emptying its cache, so a CUDA-level
 * failure is not always the one that killed the job. The OOM explained is PyTorch's own (when
 * the trace has it), else the last failed device allocation; --index picks another.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "categories.h"
#include "model.h"
#include "owners.h"
#include "pass.h"
#include "reports.h"
#include "remedies.h"
#include "report_common.h"
#include "sites.h"
#include "stacks.h"

#define MAX_OPEN_PHASES 16

struct oom_options {
	bool json, quiet;
	int top, index, frames;
};

struct open_phase {
	uint32_t name;
	uint64_t invocation;
};

struct oom {
	struct vrt_record rec;  /* the OOM record explained */
	uint32_t thread;        /* the thread index it was recorded on */
	uint64_t event;         /* its position: events applied before it */
	uint64_t cuda_free, cuda_total;
	struct open_phase phases[MAX_OPEN_PHASES];
	int n_phases;
	uint32_t last_mark;
	double mark_s;
	struct vrt_record limits; /* PyTorch's OOM_LIMITS for it (op 0: none) */
	struct vrt_owners owners; /* its retention walk, when one ran at the failure */
	bool walked;
	bool after_done;          /* what came after it is all read (the next failure, or its walk) */
	/* the replay up to it: phase names entered so far and their calls */
	uint64_t seen[64];
	uint32_t seen_names[64];
	int n_seen;
};

/*
 * What the program said right after the failure: PyTorch's limits (OOM_LIMITS) and the walk
 * its out-of-memory observer ran (python/vramtrace/_retention.py), which came before the error
 * was raised, while the failing step's tensors were all alive. Stops at the next failure.
 * Gathered in the pass that finds the OOM: `events` counts the record r.
 */
static void note_after(struct oom *o, const struct vrt_record *r, uint64_t events)
{
	if (o->after_done || events <= o->event + 1)
		return;
	if (r->op == VRT_OP_OOM && r->api == o->rec.api) {
		o->after_done = true;
		return;
	}
	if (r->op == VRT_OP_OOM_LIMITS && !o->limits.op && r->device == o->rec.device)
		o->limits = *r;
	if (vrt_owners_apply(&o->owners, r) && o->owners.last.reason == VRT_WALK_OOM) {
		o->walked = true;
		o->after_done = true;
	}
}

/* A later failure became the one to explain: what came after the earlier one does not count. */
static void choose(struct oom *o, const struct vrt_record *r, uint32_t thread, uint64_t event)
{
	o->rec = *r;
	o->thread = thread;
	o->event = event;
	o->limits = (struct vrt_record){ 0 };
	o->walked = o->after_done = false;
	vrt_owners_free(&o->owners);
}

/* Which OOM to explain, where it is, the free/total the driver reported, and what the program
 * said after it: fed every record of one pass (oom's first, or html's). */
struct vrt_oom_search {
	int index;              /* the one asked for (1: the first), 0: the default */
	int n;                  /* out-of-memory events so far */
	bool have_torch, chosen;
	bool explained;         /* vrt_oom_step wrote it */
	uint64_t last_torch, last_cuda;
	struct oom o;
};

struct vrt_oom_search *vrt_oom_search_new(int index)
{
	struct vrt_oom_search *s = calloc(1, sizeof(*s));
	if (s)
		s->index = index;
	return s;
}

void vrt_oom_search_free(struct vrt_oom_search *s)
{
	if (s)
		vrt_owners_free(&s->o.owners);
	free(s);
}

void vrt_oom_search_record(struct vrt_oom_search *s, const struct vrt_record *r, uint32_t thread, uint64_t events)
{
	struct oom *out = &s->o;
	if (s->chosen)
		note_after(out, r, events);
	if (r->op != VRT_OP_OOM)
		return;
	s->n++;
	bool torch = r->api == VRT_API_TORCH_OOM;
	if (!torch) {
		out->cuda_free = r->aux;
		out->cuda_total = r->aux2;
	}
	if (s->index && s->n == s->index) {
		choose(out, r, thread, events - 1);
		s->chosen = true;
	}
	if (torch) {
		s->have_torch = true;
		s->last_torch = events - 1;
		if (!s->index) {
			choose(out, r, thread, s->last_torch);
			s->chosen = true;
		}
	} else if (!s->have_torch || s->last_cuda < s->last_torch) {
		s->last_cuda = events - 1;
		if (!s->index && !s->have_torch) {
			choose(out, r, thread, s->last_cuda);
			s->chosen = true;
		}
	}
}

static bool search_found(const struct vrt_oom_search *s)
{
	return s->n && (!s->index || s->index <= s->n);
}

/* The pass that finds the OOM, when no other pass fed the search. */
static int find_oom(struct vrt_trace *t, struct vrt_oom_search *s)
{
	struct vrt_pass p;
	struct vrt_record r;
	vrt_pass_open(&p, t, &(struct vrt_pass_options){ .quiet = true });
	while (vrt_pass_next(&p, &r, NULL))
		vrt_oom_search_record(s, &r, p.rp.thread, p.events);
	int error = vrt_pass_finish(&p);
	if (error)
		return error;
	return search_found(s) ? 0 : VRT_E_EMPTY;
}

/* The phases open at the failure and the last mark before it, one record at a time. */
static void follow(const struct vrt_trace *t, struct oom *o, const struct vrt_record *r)
{
	if (r->op == VRT_OP_MARK) {
		o->last_mark = (uint32_t)r->id;
		o->mark_s = vrt_ts_seconds(t, r->ts);
	}
	if (r->op == VRT_OP_PHASE_ENTER) {
		int i = 0;
		while (i < o->n_seen && o->seen_names[i] != r->id)
			i++;
		if (i == o->n_seen && o->n_seen < 64)
			o->seen_names[o->n_seen++] = (uint32_t)r->id;
		uint64_t invocation = i < 64 ? ++o->seen[i] : 0;
		if (o->n_phases < MAX_OPEN_PHASES)
			o->phases[o->n_phases++] = (struct open_phase){ (uint32_t)r->id, invocation };
	} else if (r->op == VRT_OP_PHASE_EXIT) {
		for (int i = o->n_phases - 1; i >= 0; i--)
			if (o->phases[i].name == r->id) {
				memmove(&o->phases[i], &o->phases[i + 1], (size_t)(o->n_phases - i - 1) * sizeof(o->phases[0]));
				o->n_phases--;
				break;
			}
	}
}

/* Second pass: the model just before the OOM, and the phases open then. */
static int replay_to(struct vrt_trace *t, struct oom *o, struct vrt_model *m, bool quiet)
{
	struct vrt_pass p;
	struct vrt_record r;
	vrt_pass_open(&p, t, &(struct vrt_pass_options){ .label = "oom", .quiet = quiet, .model = m });
	while (m->set.events < o->event && vrt_pass_next(&p, &r, NULL))
		follow(t, o, &r);
	return vrt_pass_finish(&p);
}

struct explanation {
	int device;
	int64_t live, tensors, host_pinned;
	struct vrt_sites device_sites, host_sites;
	struct vrt_category cats[VRT_MAX_CATEGORIES], host_cats[VRT_MAX_CATEGORIES];
	int n_cats, n_host_cats;
	struct vrt_roots roots; /* with a walk at the failure: what holds the device's memory */
};

static void explain(const struct vrt_trace *t, const struct vrt_model *m, const struct oom *o, int device,
		    struct explanation *x)
{
	int slot = vrt_device_slot(device);
	memset(x, 0, sizeof(*x));
	x->device = device;
	x->live = m->live[slot][VRT_KIND_DEVICE] + m->live[slot][VRT_KIND_MANAGED];
	x->tensors = m->tensors[slot];
	x->host_pinned = m->live[VRT_HOST_SLOT][VRT_KIND_HOST_PINNED];
	vrt_sites_init(&x->device_sites);
	vrt_sites_init(&x->host_sites);
	vrt_report_group_live(t, m, &x->device_sites, slot, m->any_blocks ? -1 : VRT_KIND_DEVICE);
	vrt_report_group_live(t, m, &x->host_sites, VRT_HOST_SLOT, VRT_KIND_HOST_PINNED);
	const struct vrt_walk *walk = o->walked ? &o->owners.last : NULL;
	vrt_categorize(t, m, walk, slot, m->any_blocks, false, x->cats, &x->n_cats, &x->roots);
	vrt_categorize(t, m, walk, VRT_HOST_SLOT, false, true, x->host_cats, &x->n_host_cats, NULL);
	vrt_roots_sort(&x->roots);
}

static void print_phases(const struct vrt_trace *t, const struct oom *o, FILE *out)
{
	if (!o->n_phases) {
		fputs("outside any phase", out);
		return;
	}
	for (int i = 0; i < o->n_phases; i++)
		fprintf(out, "%s%s (call %llu)", i ? " > " : "", vrt_string(t, o->phases[i].name),
			(unsigned long long)o->phases[i].invocation);
}

/* The name the failing thread had ("pt_autograd_0": the failure came from backward), or "". */
static const char *thread_name(const struct vrt_trace *t, const struct oom *o)
{
	const struct vrt_tables *tb = &t->tables;
	if (o->thread >= tb->n_threads || !tb->threads[o->thread].tid)
		return "";
	return vrt_string(t, tb->threads[o->thread].name);
}

/* "[identity: ...]", "[rule: ...]", or both with their bytes. */
static void print_decided(const struct vrt_category *c)
{
	int64_t rule = c->bytes - c->identity;
	if (!rule)
		printf("[identity: %s]\n", vrt_category_identity(c->name));
	else if (!c->identity)
		printf("[rule: %s]\n", vrt_category_rule(c->name));
	else
		printf("[identity %s: %s; rule %s: %s]\n", vrt_bytes(c->identity), vrt_category_identity(c->name),
		       vrt_bytes(rule), vrt_category_rule(c->name));
}

/* Which limit the request ran into: PyTorch's per-process cap, or the device itself (and who
 * else holds it). live: what this process held on the device at the failure. */
static void print_limit(const struct oom *o, int64_t live)
{
	const struct vrt_record *l = &o->limits;
	if (!l->op)
		return;
	if (l->result) {
		printf("limit hit        the per-process cap: PyTorch may reserve %s (set_per_process_memory_fraction); "
		       "it had reserved %s when it failed (having given back what it could of its cache), %s of it in "
		       "tensors, and needed %s more\n", vrt_bytes((int64_t)l->aux),
		       vrt_bytes((int64_t)l->id), vrt_bytes((int64_t)l->id2), vrt_bytes((int64_t)l->size));
		return;
	}
	int64_t total = (int64_t)l->aux, used = total - (int64_t)l->aux2, others = used - live;
	printf("limit hit        the device: %s free of %s", vrt_bytes((int64_t)l->aux2), vrt_bytes(total));
	if (others > (int64_t)1 << 30)
		printf("; this process held %s, so about %s is another process's (or CUDA's own)", vrt_bytes(live),
		       vrt_bytes(others));
	putchar('\n');
}

/* The remedies at the failing request (remedies.c): it needs the request, the limits and
 * what was live by category. */
static void remedies_for(struct vrt_trace *t, const struct oom *o, const struct explanation *x, struct vrt_remedies *rm)
{
	const struct vrt_record *r = &o->rec;
	struct vrt_remedy_input in = { .event = o->event, .device = r->device, .requested = r->size,
				       .device_free = o->cuda_total ? o->cuda_free : r->aux, .limits = &o->limits,
				       .cats = x->cats, .n_cats = x->n_cats, .walked = o->walked };
	if (o->n_phases) {
		in.phase = o->phases[o->n_phases - 1].name;
		in.phase_call = o->phases[o->n_phases - 1].invocation;
	}
	vrt_remedies_compute(t, &in, rm);
}

/* "The largest share is activations (5.13 GiB, 84%). 1.27 GiB sits in pinned host memory ...":
 * the text's conclusion, and the JSON's. False when nothing was live by category. */
static bool conclusion(const struct explanation *x, char *buf, size_t len)
{
	if (!x->n_cats)
		return false;
	const struct vrt_category *c = &x->cats[0];
	int n = snprintf(buf, len, "The largest share is %s (%s, %.0f%%).", c->name, vrt_bytes(c->bytes),
			 x->live ? 100.0 * (double)c->bytes / (double)x->live : 0.0);
	if (x->host_pinned && n > 0 && (size_t)n < len)
		snprintf(buf + n, len - (size_t)n, " %s sits in pinned host memory and does not count against the device.",
			 vrt_bytes(x->host_pinned));
	return true;
}

/* The replay's limit was inferred (the trace records none): the recorded peak, a lower bound. */
static bool inferred_limit(const struct vrt_remedies *rm)
{
	return rm->limit_source && !strncmp(rm->limit_source, "inferred", 8);
}

static void print_text(const struct vrt_trace *t, const struct oom *o, const struct explanation *x,
		       const struct oom_options *opt, int count, const struct vrt_remedies *rm)
{
	const struct vrt_record *r = &o->rec;
	bool torch = r->api == VRT_API_TORCH_OOM;
	printf("vramtrace oom: %s (%d out-of-memory event%s; explaining %s)\n\n", vrt_escape(t->path), count, count == 1 ? "" : "s",
	       opt->index ? "the one asked for" : torch ? "PyTorch's" : "the last");
	printf("failed request   %s on device %d by %s at %.3f s\n", vrt_bytes((int64_t)r->size), r->device,
	       vrt_api_name(r->api), vrt_ts_seconds(t, r->ts));
	if (o->cuda_total)
		printf("device memory    %s free of %s total (as the driver reported at the failure)\n",
		       vrt_bytes((int64_t)o->cuda_free), vrt_bytes((int64_t)o->cuda_total));
	else if (torch)
		printf("device memory    %s free (as PyTorch reported)\n", vrt_bytes((int64_t)r->aux));
	print_limit(o, x->live);
	if (!o->limits.op && rm && rm->by_limit && rm->limit && inferred_limit(rm))
		/* Not recorded: all the trace shows is that the cap allowed the recorded peak and refused
		 * this request on top of what was reserved - a range, never one figure. */
		printf("limit hit        a per-process cap of at least %s (the most PyTorch had reserved) and under %s "
		       "(the %s it had reserved, and this request); inferred: the device did not refuse, and the trace did "
		       "not record the cap\n", vrt_bytes((int64_t)rm->limit),
		       vrt_bytes((int64_t)(rm->reserved_at_failure + r->size)), vrt_bytes((int64_t)rm->reserved_at_failure));
	else if (!o->limits.op && rm && rm->by_limit && rm->limit)
		printf("limit hit        a per-process cap: PyTorch may reserve %s (%s); it had reserved %s and the device "
		       "was not full\n", vrt_bytes((int64_t)rm->limit), rm->limit_source, vrt_bytes((int64_t)rm->reserved_at_failure));
	if (r->stack) {
		struct vrt_site req = { .stack = r->stack, .bytes = (int64_t)r->size, .count = 1 };
		printf("requested by\n");
		vrt_site_print(stdout, t, &req, opt->frames);
	}
	printf("where            ");
	print_phases(t, o, stdout);
	if (o->last_mark)
		printf("; last mark \"%s\" at %.3f s", vrt_string(t, o->last_mark), o->mark_s);
	if (*thread_name(t, o))
		printf("; on thread \"%s\"", thread_name(t, o));
	printf("\n\nlive on device %d: %s in CUDA allocations", x->device, vrt_bytes(x->live));
	if (x->tensors)
		printf(", %s of it in tensors", vrt_bytes(x->tensors));
	printf("\n\nby category (what decided it in brackets%s):\n",
	       o->walked ? "" : "; no retention walk at the failure, so by the allocating stacks' rules");
	for (int i = 0; i < x->n_cats; i++) {
		printf("  %-16s %10s  %4.1f%%   ", x->cats[i].name, vrt_bytes(x->cats[i].bytes),
		       x->live ? 100.0 * (double)x->cats[i].bytes / (double)x->live : 0.0);
		print_decided(&x->cats[i]);
	}
	if (x->host_pinned) {
		printf("\npinned host memory beside it: %s\n", vrt_bytes(x->host_pinned));
		for (int i = 0; i < x->n_host_cats; i++) {
			printf("  %-16s %10s          ", x->host_cats[i].name, vrt_bytes(x->host_cats[i].bytes));
			print_decided(&x->host_cats[i]);
		}
	}
	if (o->walked) {
		printf("\n");
		vrt_roots_print(stdout, &x->roots,
				"kept alive by (what the retention walk at the failure found holding the device's memory):\n");
	}
	printf("\ntop sites on device %d at the failure:\n", x->device);
	for (size_t i = 0; i < x->device_sites.n && i < (size_t)opt->top; i++)
		vrt_site_print(stdout, t, &x->device_sites.v[i], opt->frames);
	char line[400];
	if (conclusion(x, line, sizeof(line)))
		printf("\n%s\n", line);
	vrt_remedies_print(rm, stdout);
}

static void json_categories(FILE *out, const struct vrt_category *c, int n)
{
	fputc('{', out);
	for (int i = 0; i < n; i++) {
		fprintf(out, "%s", i ? ", " : "");
		json_string(out, c[i].name);
		fprintf(out, ": %lld", (long long)c[i].bytes);
	}
	fputc('}', out);
}

/* [{"name", "bytes", "identity_bytes", "rule_bytes", "decided_by", "rule"}]: decided_by is what
 * decided most of its bytes. */
static void json_decided(FILE *out, const struct vrt_category *c, int n)
{
	fputc('[', out);
	for (int i = 0; i < n; i++) {
		int64_t rule = c[i].bytes - c[i].identity;
		fprintf(out, "%s{\"name\": ", i ? ", " : "");
		json_string(out, c[i].name);
		fprintf(out, ", \"bytes\": %lld, \"identity_bytes\": %lld, \"rule_bytes\": %lld, \"decided_by\": \"%s\", \"rule\": ",
		       (long long)c[i].bytes, (long long)c[i].identity, (long long)rule,
		       c[i].identity >= rule ? "identity" : "rule");
		json_string(out, c[i].identity >= rule ? vrt_category_identity(c[i].name) : vrt_category_rule(c[i].name));
		fputc('}', out);
	}
	fputc(']', out);
}

static void json_limit(FILE *out, const struct oom *o)
{
	const struct vrt_record *l = &o->limits;
	fprintf(out, ", \"limit\": ");
	if (!l->op) {
		fprintf(out, "null, \"retention_walk\": %s", o->walked ? "true" : "false");
		return;
	}
	fprintf(out, "{\"kind\": \"%s\", \"allowed_bytes\": %llu, \"device_free_bytes\": %llu, \"reserved_bytes\": %llu, "
	       "\"allocated_bytes\": %llu, \"requested_bytes\": %llu}, \"retention_walk\": %s",
	       l->result ? "per_process_cap" : "device", (unsigned long long)l->aux, (unsigned long long)l->aux2,
	       (unsigned long long)l->id, (unsigned long long)l->id2, (unsigned long long)l->size,
	       o->walked ? "true" : "false");
}

static void print_json(FILE *out, const struct vrt_trace *t, const struct oom *o, const struct explanation *x,
		       const struct oom_options *opt, const struct vrt_remedies *rm)
{
	const struct vrt_record *r = &o->rec;
	fprintf(out, "{\"file\": ");
	json_string(out, t->path);
	fprintf(out, ", ");
	vrt_json_completeness(out, t, -1);
	fprintf(out, ", \"oom\": {\"requested_bytes\": %llu, \"device\": %d, \"time_s\": %.6f, \"api\": ",
	       (unsigned long long)r->size, r->device, vrt_ts_seconds(t, r->ts));
	json_string(out, vrt_api_name(r->api));
	fprintf(out, ", \"thread\": ");
	json_string(out, thread_name(t, o));
	fprintf(out, ", \"free_bytes\": %llu, \"total_bytes\": %llu, \"live_bytes\": %lld, \"tensor_bytes\": %lld, "
	       "\"by_category\": ",
	       (unsigned long long)(o->cuda_total ? o->cuda_free : r->aux), (unsigned long long)o->cuda_total,
	       (long long)x->live, (long long)x->tensors);
	json_categories(out, x->cats, x->n_cats);
	fprintf(out, ", \"category_rules\": {");
	for (int i = 0; i < x->n_cats; i++) {
		fprintf(out, "%s", i ? ", " : "");
		json_string(out, x->cats[i].name);
		fprintf(out, ": ");
		json_string(out, vrt_category_rule(x->cats[i].name));
	}
	fprintf(out, "}, \"categories\": ");
	json_decided(out, x->cats, x->n_cats);
	fprintf(out, ", \"host_pinned_bytes\": %lld, \"host_by_category\": ", (long long)x->host_pinned);
	json_categories(out, x->host_cats, x->n_host_cats);
	fprintf(out, ", \"host_categories\": ");
	json_decided(out, x->host_cats, x->n_host_cats);
	json_limit(out, o);
	if (o->walked)
		vrt_roots_json(out, &x->roots);
	fprintf(out, ", \"phases\": [");
	for (int i = 0; i < o->n_phases; i++) {
		fprintf(out, "%s{\"name\": ", i ? ", " : "");
		json_string(out, vrt_string(t, o->phases[i].name));
		fprintf(out, ", \"invocation\": %llu}", (unsigned long long)o->phases[i].invocation);
	}
	fprintf(out, "], \"top_sites\": [");
	for (size_t i = 0; i < x->device_sites.n && i < (size_t)opt->top; i++) {
		fprintf(out, "%s", i ? ", " : "");
		const char *rule;
		vrt_site_json(out, t, &x->device_sites.v[i], true);
		fprintf(out, ", \"category\": ");
		json_string(out, vrt_site_category(t, &x->device_sites.v[i], &rule));
		fputc('}', out);
	}
	fputc(']', out);
	fprintf(out, ", \"request\": ");
	if (r->stack) {
		struct vrt_site req = { .stack = r->stack, .bytes = (int64_t)r->size, .count = 1 };
		vrt_site_json(out, t, &req, false);
	} else {
		fputs("null", out);
	}
	char line[400];
	fprintf(out, ", \"conclusion\": ");
	if (conclusion(x, line, sizeof(line)))
		json_string(out, line);
	else
		fputs("null", out);
	vrt_remedies_json(rm, out);
	fprintf(out, "}}");
}

/* Explains the OOM s found with the model m just before it, on out (JSON or text). */
static void explain_at(struct vrt_trace *t, const struct oom_options *opt, FILE *out, struct vrt_oom_search *s,
		       const struct vrt_model *m)
{
	struct oom *o = &s->o;
	struct explanation x;
	struct vrt_remedies rm;
	explain(t, m, o, o->rec.device, &x);
	remedies_for(t, o, &x, &rm);
	if (opt->json) {
		print_json(out, t, o, &x, opt, &rm);
	} else { /* read as lines: stacks that print alike are one; JSON keeps each stack */
		(void)vrt_sites_fold_printed(t, &x.device_sites); /* short of memory: listed by stack */
		(void)vrt_sites_fold_printed(t, &x.host_sites);
		print_text(t, o, &x, opt, s->n, &rm);
	}
	vrt_sites_free(&x.device_sites);
	vrt_sites_free(&x.host_sites);
}

/* Explains the OOM a fed search found, on out (JSON or text). Returns 0 or a vrt_error. */
static int explain_found(struct vrt_trace *t, const struct oom_options *opt, FILE *out, struct vrt_oom_search *s)
{
	struct vrt_model m;
	int rc = vrt_model_init(&m);
	if (rc)
		return rc;
	rc = replay_to(t, &s->o, &m, opt->quiet);
	if (!rc)
		explain_at(t, opt, out, s, &m);
	vrt_model_free(&m);
	return rc;
}

/*
 * Finds the out-of-memory event opt asks for and explains it on out (JSON or text). *found:
 * whether that event exists (*count: how many there are). Returns 0 or a vrt_error; prints no
 * message.
 */
static int explain_oom(struct vrt_trace *t, const struct oom_options *opt, FILE *out, bool *found, int *count)
{
	*found = true;
	*count = 0;
	struct vrt_oom_search *s = vrt_oom_search_new(opt->index);
	if (!s)
		return VRT_E_NOMEM;
	int rc = find_oom(t, s);
	*found = rc != VRT_E_EMPTY;
	*count = s->n;
	if (!rc)
		rc = explain_found(t, opt, out, s);
	vrt_oom_search_free(s);
	return rc;
}

static const struct oom_options composed = { .top = 10, .frames = 6, .json = true, .quiet = true };

int vrt_oom_json(struct vrt_trace *t, struct vrt_oom_search *s, FILE *out, bool *found)
{
	*found = search_found(s);
	return *found ? explain_found(t, &composed, out, s) : 0;
}

bool vrt_oom_search_found(const struct vrt_oom_search *s)
{
	return search_found(s);
}

bool vrt_oom_step(struct vrt_oom_search *s, struct vrt_trace *t, const struct vrt_model *m, const struct vrt_record *r,
		  FILE *out)
{
	if (!search_found(s) || s->explained)
		return false;
	if (r)
		follow(t, &s->o, r);
	if (m->set.events < s->o.event)
		return true;
	explain_at(t, &composed, out, s, m);
	s->explained = true;
	return false;
}

bool vrt_oom_explained(const struct vrt_oom_search *s)
{
	return s->explained;
}

/* In a run's directory, the process that ran out of memory. */
static bool has_oom(const char *path, void *ctx)
{
	struct vrt_trace t;
	(void)ctx;
	if (vrt_trace_open(&t, path))
		return false;
	/* an OOM after the --until-mark is not one this command explains, nor a trace without it */
	t.end_mark = vrt_settings.until_mark;
	struct vrt_oom_search *s = vrt_oom_search_new(0);
	bool found = s && (!t.end_mark || vrt_trace_string_id(&t, t.end_mark)) && find_oom(&t, s) == 0;
	vrt_oom_search_free(s);
	vrt_trace_close(&t);
	return found;
}

int vrt_cmd_oom(int argc, char **argv)
{
	struct oom_options opt = { .top = 10, .frames = 6 };
	const char *path = NULL;
	const struct vrt_arg opts[] = {
		VRT_OPT_JSON(&opt.json), VRT_OPT_QUIET(&opt.quiet), VRT_OPT_TOP(&opt.top), VRT_OPT_FRAMES(&opt.frames),
		VRT_OPT_UNTIL_MARK, VRT_OPT_WIDTH,
		{ "--index", NULL, VRT_ARG_INT, &opt.index, 1, 1000000000 }, /* from 1: the first OOM */
		VRT_OPT_END,
	};
	int n, rc = vrt_args_parse("oom", argc, argv, opts, &path, 1, &n);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (!path)
		return vrt_usage("oom", "no trace file given");
	char file[4096];
	struct vrt_trace t;
	rc = vrt_single_input("oom", path, has_oom, NULL, file, sizeof(file));
	if (rc || (rc = vrt_open_or_fail(&t, path = file)))
		return rc;
	vrt_warn_trace_state(&t, opt.quiet);
	int count = 0;
	bool found;
	rc = explain_oom(&t, &opt, stdout, &found, &count);
	if (!found) {
		char before[320] = "";
		if (vrt_settings.until_mark)
			snprintf(before, sizeof(before), " before the mark \"%s\"", vrt_escape(vrt_settings.until_mark));
		fprintf(stderr, "vramtrace: %s: no out-of-memory event in this trace%s%s\n", vrt_escape(path),
			count ? " with that index" : "", before);
		vrt_trace_close(&t);
		return VRT_EXIT_FINDINGS;
	}
	if (!rc && opt.json)
		putchar('\n');
	vrt_trace_close(&t);
	return rc ? vrt_fail(rc, "%s", path) : 0;
}
