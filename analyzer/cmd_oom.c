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
#include "model.h"
#include "report_common.h"
#include "sites.h"
#include "stacks.h"

#define MAX_CATEGORIES 16
#define MAX_OPEN_PHASES 16

struct oom_options {
	bool json, quiet;
	int top, index;
};

struct category {
	const char *name;
	const char *rule;
	int64_t bytes;
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
};

/* First pass: which OOM to explain, where it is, and the free/total the driver reported. */
static int find_oom(struct vrt_trace *t, int index, struct oom *out, int *count)
{
	struct vrt_replay rp;
	struct vrt_record r;
	uint64_t events = 0, last_torch = 0, last_cuda = 0;
	int n = 0;
	bool have_torch = false;
	vrt_replay_begin(&rp, t);
	while (vrt_replay_next(&rp, &r)) {
		if (r.op < VRT_OP_CP_BEGIN)
			events++;
		if (r.op != VRT_OP_OOM)
			continue;
		n++;
		bool torch = r.api == VRT_API_TORCH_OOM;
		if (!torch) {
			out->cuda_free = r.aux;
			out->cuda_total = r.aux2;
		}
		if (index && n == index) {
			out->rec = r;
			out->thread = rp.thread;
			out->event = events - 1;
		}
		if (torch) {
			have_torch = true;
			last_torch = events - 1;
			if (!index) {
				out->rec = r;
				out->thread = rp.thread;
				out->event = last_torch;
			}
		} else if (!have_torch || last_cuda < last_torch) {
			last_cuda = events - 1;
			if (!index && !have_torch) {
				out->rec = r;
				out->thread = rp.thread;
				out->event = last_cuda;
			}
		}
	}
	*count = n;
	if (rp.error)
		return rp.error;
	return n && (!index || index <= n) ? 0 : VRT_E_EMPTY;
}

/* Second pass: the model just before the OOM, and the phases open then. */
static int replay_to(struct vrt_trace *t, struct oom *o, struct vrt_model *m)
{
	struct vrt_replay rp;
	struct vrt_record r;
	uint64_t seen[64] = { 0 };
	uint32_t seen_names[64] = { 0 };
	int n_seen = 0;
	vrt_replay_begin(&rp, t);
	while (m->events < o->event && vrt_replay_next(&rp, &r)) {
		vrt_model_apply(m, &r, NULL);
		if (r.op == VRT_OP_MARK) {
			o->last_mark = (uint32_t)r.id;
			o->mark_s = vrt_ts_seconds(t, r.ts);
		}
		if (r.op == VRT_OP_PHASE_ENTER) {
			int i = 0;
			while (i < n_seen && seen_names[i] != r.id)
				i++;
			if (i == n_seen && n_seen < 64)
				seen_names[n_seen++] = (uint32_t)r.id;
			uint64_t invocation = i < 64 ? ++seen[i] : 0;
			if (o->n_phases < MAX_OPEN_PHASES)
				o->phases[o->n_phases++] = (struct open_phase){ (uint32_t)r.id, invocation };
		} else if (r.op == VRT_OP_PHASE_EXIT) {
			for (int i = o->n_phases - 1; i >= 0; i--)
				if (o->phases[i].name == r.id) {
					memmove(&o->phases[i], &o->phases[i + 1], (size_t)(o->n_phases - i - 1) * sizeof(o->phases[0]));
					o->n_phases--;
					break;
				}
		}
	}
	return rp.error;
}

static void categorize(const struct vrt_trace *t, const struct vrt_sites *s, struct category *cats, int *n)
{
	for (size_t i = 0; i < s->n; i++) {
		const char *rule;
		const char *name = vrt_site_category(t, &s->v[i], &rule);
		int k = 0;
		while (k < *n && strcmp(cats[k].name, name))
			k++;
		if (k == *n && *n < MAX_CATEGORIES)
			cats[(*n)++] = (struct category){ name, rule, 0 };
		if (k < *n)
			cats[k].bytes += s->v[i].bytes;
	}
	for (int i = 0; i < *n; i++) /* largest first */
		for (int j = i + 1; j < *n; j++)
			if (cats[j].bytes > cats[i].bytes) {
				struct category c = cats[i];
				cats[i] = cats[j];
				cats[j] = c;
			}
}

static const char *category_rule(const char *name)
{
	static const struct { const char *name, *rule; } rules[] = {
		{ "activations", "allocated inside a forward() or a module call" },
		{ "gradients", "allocated during backward, by autograd, or in a gradient buffer" },
		{ "optimizer_state", "allocated inside torch/optim, an optimizer or Adam" },
		{ "parameters", "allocated by reset_parameters, Module._apply or as a Parameter" },
		{ "workspace", "cuBLAS/cuDNN workspaces" },
		{ "nccl", "allocated by NCCL" },
		{ "allocator_cache", "reserved by PyTorch's caching allocator, no tensor in it" },
		{ "non_pytorch", "CUDA allocations outside PyTorch's allocator" },
		{ "unattributed", "allocated before tracing started" },
		{ "user_tensors", "allocated by Python code outside modules, autograd and optimizers (inputs, losses)" },
		{ "other", "no rule matched" },
	};
	for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
		if (!strcmp(rules[i].name, name))
			return rules[i].rule;
	return "";
}

struct explanation {
	int device;
	int64_t live, tensors, host_pinned;
	struct vrt_sites device_sites, host_sites;
	struct category cats[MAX_CATEGORIES], host_cats[MAX_CATEGORIES];
	int n_cats, n_host_cats;
};

static void explain(const struct vrt_trace *t, const struct vrt_model *m, int device, struct explanation *x)
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
	categorize(t, &x->device_sites, x->cats, &x->n_cats);
	categorize(t, &x->host_sites, x->host_cats, &x->n_host_cats);
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

static void print_text(const struct vrt_trace *t, const struct oom *o, const struct explanation *x,
		       const struct oom_options *opt, int count)
{
	const struct vrt_record *r = &o->rec;
	bool torch = r->api == VRT_API_TORCH_OOM;
	printf("vramtrace oom: %s (%d out-of-memory event%s; explaining %s)\n\n", t->path, count, count == 1 ? "" : "s",
	       opt->index ? "the one asked for" : torch ? "PyTorch's" : "the last");
	printf("failed request   %s on device %d by %s at %.3f s\n", vrt_bytes((int64_t)r->size), r->device,
	       vrt_api_name(r->api), vrt_ts_seconds(t, r->ts));
	if (o->cuda_total)
		printf("device memory    %s free of %s total (as the driver reported at the failure)\n",
		       vrt_bytes((int64_t)o->cuda_free), vrt_bytes((int64_t)o->cuda_total));
	else if (torch)
		printf("device memory    %s free (as PyTorch reported)\n", vrt_bytes((int64_t)r->aux));
	if (r->stack) {
		struct vrt_site req = { .stack = r->stack, .bytes = (int64_t)r->size, .count = 1 };
		printf("requested by\n");
		vrt_site_print(stdout, t, &req, 6);
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
	printf("\n\nby category (rule in brackets):\n");
	for (int i = 0; i < x->n_cats; i++)
		printf("  %-16s %10s  %4.1f%%   [%s]\n", x->cats[i].name, vrt_bytes(x->cats[i].bytes),
		       x->live ? 100.0 * (double)x->cats[i].bytes / (double)x->live : 0.0, category_rule(x->cats[i].name));
	if (x->host_pinned) {
		printf("\npinned host memory beside it: %s\n", vrt_bytes(x->host_pinned));
		for (int i = 0; i < x->n_host_cats; i++)
			printf("  %-16s %10s   [%s]\n", x->host_cats[i].name, vrt_bytes(x->host_cats[i].bytes),
			       category_rule(x->host_cats[i].name));
	}
	printf("\ntop sites on device %d at the failure:\n", x->device);
	for (size_t i = 0; i < x->device_sites.n && i < (size_t)opt->top; i++)
		vrt_site_print(stdout, t, &x->device_sites.v[i], 6);
	if (x->n_cats) {
		const struct category *c = &x->cats[0];
		printf("\nThe largest share is %s (%s, %.0f%%).", c->name, vrt_bytes(c->bytes),
		       x->live ? 100.0 * (double)c->bytes / (double)x->live : 0.0);
		if (x->host_pinned)
			printf(" %s sits in pinned host memory and does not count against the device.",
			       vrt_bytes(x->host_pinned));
		putchar('\n');
	}
}

static void json_categories(const struct category *c, int n)
{
	putchar('{');
	for (int i = 0; i < n; i++) {
		printf("%s", i ? ", " : "");
		json_string(stdout, c[i].name);
		printf(": %lld", (long long)c[i].bytes);
	}
	putchar('}');
}

static void print_json(const struct vrt_trace *t, const struct oom *o, const struct explanation *x,
		       const struct oom_options *opt)
{
	const struct vrt_record *r = &o->rec;
	printf("{\"file\": ");
	json_string(stdout, t->path);
	printf(", ");
	vrt_json_completeness(stdout, t, -1);
	printf(", \"oom\": {\"requested_bytes\": %llu, \"device\": %d, \"time_s\": %.6f, \"api\": ",
	       (unsigned long long)r->size, r->device, vrt_ts_seconds(t, r->ts));
	json_string(stdout, vrt_api_name(r->api));
	printf(", \"thread\": ");
	json_string(stdout, thread_name(t, o));
	printf(", \"free_bytes\": %llu, \"total_bytes\": %llu, \"live_bytes\": %lld, \"tensor_bytes\": %lld, "
	       "\"by_category\": ",
	       (unsigned long long)(o->cuda_total ? o->cuda_free : r->aux), (unsigned long long)o->cuda_total,
	       (long long)x->live, (long long)x->tensors);
	json_categories(x->cats, x->n_cats);
	printf(", \"category_rules\": {");
	for (int i = 0; i < x->n_cats; i++) {
		printf("%s", i ? ", " : "");
		json_string(stdout, x->cats[i].name);
		printf(": ");
		json_string(stdout, category_rule(x->cats[i].name));
	}
	printf("}, \"host_pinned_bytes\": %lld, \"host_by_category\": ", (long long)x->host_pinned);
	json_categories(x->host_cats, x->n_host_cats);
	printf(", \"phases\": [");
	for (int i = 0; i < o->n_phases; i++) {
		printf("%s{\"name\": ", i ? ", " : "");
		json_string(stdout, vrt_string(t, o->phases[i].name));
		printf(", \"invocation\": %llu}", (unsigned long long)o->phases[i].invocation);
	}
	printf("], \"top_sites\": [");
	for (size_t i = 0; i < x->device_sites.n && i < (size_t)opt->top; i++) {
		printf("%s", i ? ", " : "");
		const char *rule;
		vrt_site_json(stdout, t, &x->device_sites.v[i], true);
		printf(", \"category\": ");
		json_string(stdout, vrt_site_category(t, &x->device_sites.v[i], &rule));
		putchar('}');
	}
	printf("]}}\n");
}

/* In a run's directory, the process that ran out of memory. */
static bool has_oom(const char *path, void *ctx)
{
	struct vrt_trace t;
	struct oom o = { 0 };
	int count = 0;
	(void)ctx;
	if (vrt_trace_open(&t, path))
		return false;
	bool found = find_oom(&t, 0, &o, &count) == 0;
	vrt_trace_close(&t);
	return found;
}

int vrt_cmd_oom(int argc, char **argv)
{
	struct oom_options opt = { .top = 10 };
	const char *path = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (vrt_is_help(a))
			return vrt_print_help("oom");
		if (!strcmp(a, "--json"))
			opt.json = true;
		else if (!strcmp(a, "-q") || !strcmp(a, "--quiet"))
			opt.quiet = true;
		else if ((!strcmp(a, "--top") || !strcmp(a, "--index")) && i + 1 < argc) {
			long long v; /* --index counts from 1: the first OOM */
			int bad = vrt_int_option("oom", a, argv[++i], 1, 1000000000, &v);
			if (bad)
				return bad;
			if (!strcmp(a, "--top"))
				opt.top = (int)v;
			else
				opt.index = (int)v;
		}
		else if (a[0] == '-' || path)
			return vrt_usage("oom", "unexpected argument '%s'", a);
		else
			path = a;
	}
	if (!path)
		return vrt_usage("oom", "no trace file given");
	if (opt.top <= 0 || opt.index < 0)
		return vrt_usage("oom", "--top and --index take positive numbers");
	char file[4096];
	struct vrt_trace t;
	int rc = vrt_single_input("oom", path, has_oom, NULL, file, sizeof(file));
	if (rc || (rc = vrt_open_or_fail(&t, path = file)))
		return rc;
	vrt_warn_trace_state(&t, opt.quiet);
	struct oom o = { 0 };
	int count = 0;
	rc = find_oom(&t, opt.index, &o, &count);
	if (rc == VRT_E_EMPTY) {
		fprintf(stderr, "vramtrace: %s: no out-of-memory event in this trace%s\n", path,
			count ? " with that index" : "");
		vrt_trace_close(&t);
		return VRT_EXIT_FINDINGS;
	}
	struct vrt_model m;
	if (!rc && !(rc = vrt_model_init(&m))) {
		rc = replay_to(&t, &o, &m);
		vrt_warn_model(&t, &m, opt.quiet);
		if (!rc) {
			struct explanation x;
			explain(&t, &m, o.rec.device, &x);
			if (opt.json)
				print_json(&t, &o, &x, &opt);
			else
				print_text(&t, &o, &x, &opt, count);
			vrt_sites_free(&x.device_sites);
			vrt_sites_free(&x.host_sites);
		}
		vrt_model_free(&m);
	}
	vrt_trace_close(&t);
	return rc ? vrt_fail(rc, "%s", path) : 0;
}
