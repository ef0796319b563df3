/* SPDX-License-Identifier: MIT */
/*
 * vramtrace whatif: the recorded tensor requests replayed through a model of PyTorch's caching
 * allocator (alloc_replay.h) under another setting, limit or device: the peaks it would reach,
 * how much of the reserved memory would sit unused at the peak, and the first request that
 * would fail. Under the recorded setting it says whether the model did what the allocator did.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc_replay.h"
#include "cli.h"
#include "json.h"
#include "sites.h"
#include "vramtrace/options.h"

struct whatif_options {
	struct vrt_alloc_replay_options replay;
	const char *path;
	bool json, quiet;
};

static const char *conf_text(const char *conf) { return *conf ? conf : "the defaults"; }

static void print_release(const struct vrt_alloc_replay *r, FILE *out)
{
	fprintf(out, "model      %s", VRT_AM_MODEL_NAME);
	if (r->trace_torch && *r->trace_torch)
		fprintf(out, "; the trace was recorded with PyTorch %s", r->trace_torch);
	else
		fprintf(out, "; the trace does not name its PyTorch (tensor events come from %s only)", VRT_AM_TORCH_RELEASE);
	fputc('\n', out);
}

/* The device the answer is about: the one that failed, else the one with the largest peak. */
static const struct vrt_replay_device *main_device(const struct vrt_alloc_replay *r)
{
	const struct vrt_replay_device *best = NULL;
	for (int k = 0; k < r->n_dev; k++) {
		const struct vrt_replay_device *d = &r->dev[k];
		if (!d->stats.requests)
			continue;
		if (r->failed && d->device == r->fail.device)
			return d;
		if (!best || d->peak_reserved > best->peak_reserved)
			best = d;
	}
	return best;
}

static void print_device(const struct vrt_trace *t, const struct vrt_alloc_replay *r, const struct vrt_replay_device *d)
{
	if (r->stopped)
		printf("\ndevice %d             predicted     recorded (up to %.3f s, where the replay stopped)\n", d->device,
		       vrt_ts_seconds(t, r->stop_ts));
	else
		printf("\ndevice %d             predicted     recorded\n", d->device);
	printf("  peak reserved    %12s %12s\n", vrt_bytes((int64_t)d->peak_reserved), vrt_bytes((int64_t)d->recorded_peak_reserved));
	printf("  peak allocated   %12s %12s\n", vrt_bytes((int64_t)d->peak_allocated), vrt_bytes((int64_t)d->recorded_peak_allocated));
	printf("  at the peak      %s reserved but not allocated; the largest free block %s\n",
	       vrt_bytes((int64_t)d->unused_at_peak), vrt_bytes((int64_t)d->largest_free_at_peak));
	const struct vrt_am_stats *s = &d->stats;
	printf("  the allocator    %llu requests; %llu cudaMalloc, %llu cudaFree", (unsigned long long)s->requests,
	       (unsigned long long)s->segments_allocated, (unsigned long long)s->segments_freed);
	if (s->bytes_mapped)
		printf("; %s mapped, %s unmapped", vrt_bytes((int64_t)s->bytes_mapped), vrt_bytes((int64_t)s->bytes_unmapped));
	if (s->retries)
		printf("; freed its cache and retried %llu time%s", (unsigned long long)s->retries, s->retries == 1 ? "" : "s");
	if (s->gc_releases)
		printf("; %llu blocks garbage-collected", (unsigned long long)s->gc_releases);
	putchar('\n');
}

static void print_failure(const struct vrt_trace *t, const struct vrt_alloc_replay *r)
{
	const struct vrt_replay_failure *f = &r->fail;
	printf("\nresult     fails at %.3f s%s: a request of %s (%s rounded) on device %d; the allocator had reserved %s, "
	       "%s of it allocated; ",
	       vrt_ts_seconds(t, f->ts), f->in_trace ? ", where the trace failed too" : "", vrt_bytes((int64_t)f->request), vrt_bytes((int64_t)f->rounded), f->device,
	       vrt_bytes((int64_t)f->reserved), vrt_bytes((int64_t)f->allocated));
	if (f->by_limit)
		printf("the new segment would pass the %s limit\n", vrt_bytes((int64_t)f->limit));
	else
		printf("the device has no room for a new segment\n");
	if (f->stack) {
		struct vrt_site site = { .stack = f->stack, .bytes = (int64_t)f->request, .count = 1 };
		printf("requested by\n");
		vrt_site_print(stdout, t, &site, 8);
	}
}

static void print_check(const struct vrt_alloc_replay *r)
{
	const struct vrt_replay_check *c = &r->check;
	printf("\ncheck      under the recorded setting the model ");
	if (!c->mismatched_requests)
		printf("did what the allocator did: %llu segment operations at the same requests",
		       (unsigned long long)c->recorded_ops);
	else
		printf("differs from the recording at %llu of %llu requests (first at %.3f s: %s)",
		       (unsigned long long)c->mismatched_requests, (unsigned long long)c->requests, c->first_mismatch_s,
		       c->first_mismatch);
	printf("; %llu of %llu blocks at the recorded address\n", (unsigned long long)c->blocks_at_recorded_address,
	       (unsigned long long)c->blocks);
}

static void print_text(const struct vrt_trace *t, const struct vrt_alloc_replay *r)
{
	printf("vramtrace whatif: %s\n\n", vrt_escape(t->path));
	print_release(r, stdout);
	printf("setting    %s", conf_text(r->conf));
	printf(r->as_recorded ? " (as recorded)\n" : " (recorded: %s)\n", conf_text(r->recorded_conf));
	if (r->limit)
		printf("limit      the allocator may reserve %s (%s)\n", vrt_bytes((int64_t)r->limit), r->limit_source);
	else
		printf("limit      none (%s)\n", r->limit_source);
	if (r->as_recorded)
		printf("device     as recorded: a cudaMalloc fails where it failed\n");
	else if (r->capacity)
		printf("device     %s (%s); memory outside the allocator as recorded\n", vrt_bytes((int64_t)r->capacity),
		       r->capacity_source);
	else
		printf("device     unlimited: its size is %s; --device-memory gives one\n", r->capacity_source);
	for (int k = 0; k < r->n_dev; k++)
		if (r->dev[k].stats.requests)
			print_device(t, r, &r->dev[k]);
	if (r->failed)
		print_failure(t, r);
	else if (r->avoided_oom)
		printf("\nresult     the request that failed at %.3f s fits, and every one before it; what the run asked "
		       "after it is not in the trace, so the replay stops there (whether the rest of that step fits too, "
		       "vramtrace oom estimates)\n",
		       vrt_ts_seconds(t, r->avoided_oom_ts));
	else
		printf("\nresult     fits: no request fails\n");
	if (r->as_recorded)
		print_check(r);
	if (r->approximate)
		printf("\nnote       the trace does not hold the allocator's history from its start (attached, or a "
		       "wrapped ring): blocks live before it were placed as fresh requests\n");
}

static void json_u64_or_null(const char *key, uint64_t v, bool present)
{
	printf(", \"%s\": ", key);
	if (present)
		printf("%llu", (unsigned long long)v);
	else
		printf("null");
}

static void json_device(const struct vrt_replay_device *d)
{
	const struct vrt_am_stats *s = &d->stats;
	printf("{\"device\": %d, \"peak_reserved\": %llu, \"peak_allocated\": %llu, \"recorded_peak_reserved\": %llu, "
	       "\"recorded_peak_allocated\": %llu, \"fragmentation_at_peak\": {\"reserved_unallocated\": %llu, "
	       "\"largest_free_block\": %llu}, \"requests\": %llu, \"cuda_malloc\": %llu, \"cuda_free\": %llu, "
	       "\"bytes_mapped\": %llu, \"bytes_unmapped\": %llu, \"retries\": %llu, \"gc_releases\": %llu}",
	       d->device, (unsigned long long)d->peak_reserved, (unsigned long long)d->peak_allocated,
	       (unsigned long long)d->recorded_peak_reserved, (unsigned long long)d->recorded_peak_allocated,
	       (unsigned long long)d->unused_at_peak, (unsigned long long)d->largest_free_at_peak,
	       (unsigned long long)s->requests, (unsigned long long)s->segments_allocated,
	       (unsigned long long)s->segments_freed, (unsigned long long)s->bytes_mapped,
	       (unsigned long long)s->bytes_unmapped, (unsigned long long)s->retries, (unsigned long long)s->gc_releases);
}

static void json_failure(const struct vrt_trace *t, const struct vrt_alloc_replay *r)
{
	const struct vrt_replay_failure *f = &r->fail;
	printf("{\"time\": %.6f, \"request\": %llu, \"rounded\": %llu, \"device\": %d, \"reserved\": %llu, "
	       "\"allocated\": %llu",
	       vrt_ts_seconds(t, f->ts), (unsigned long long)f->request, (unsigned long long)f->rounded, f->device,
	       (unsigned long long)f->reserved, (unsigned long long)f->allocated);
	json_u64_or_null("limit", f->limit, f->limit != 0);
	printf(", \"cause\": \"%s\", \"in_trace\": %s, \"stack\": ", f->by_limit ? "limit" : "device",
	       f->in_trace ? "true" : "false");
	struct vrt_site site = { .stack = f->stack, .bytes = (int64_t)f->request, .count = 1 };
	vrt_site_json(stdout, t, &site, false);
	putchar('}');
}

static void print_json(const struct vrt_trace *t, const struct vrt_alloc_replay *r)
{
	const struct vrt_replay_device *d = main_device(r);
	printf("{\"file\": ");
	json_string(stdout, t->path);
	printf(", \"model\": \"PyTorch %s\", \"trace_torch\": ", VRT_AM_TORCH_RELEASE);
	if (r->trace_torch && *r->trace_torch)
		json_string(stdout, r->trace_torch);
	else
		printf("null");
	printf(", \"alloc_conf\": ");
	json_string(stdout, r->conf);
	printf(", \"recorded_alloc_conf\": ");
	json_string(stdout, r->recorded_conf);
	printf(", \"as_recorded\": %s", r->as_recorded ? "true" : "false");
	json_u64_or_null("allocator_limit", r->limit, r->limit != 0);
	printf(", \"limit_source\": ");
	json_string(stdout, r->limit_source);
	json_u64_or_null("device_memory", r->capacity, r->capacity != 0 && !r->as_recorded);
	printf(", \"peak_reserved\": %llu, \"peak_allocated\": %llu, \"recorded_peak_reserved\": %llu, "
	       "\"recorded_peak_allocated\": %llu, \"fragmentation_at_peak\": {\"reserved_unallocated\": %llu, "
	       "\"largest_free_block\": %llu}",
	       (unsigned long long)(d ? d->peak_reserved : 0), (unsigned long long)(d ? d->peak_allocated : 0),
	       (unsigned long long)(d ? d->recorded_peak_reserved : 0),
	       (unsigned long long)(d ? d->recorded_peak_allocated : 0), (unsigned long long)(d ? d->unused_at_peak : 0),
	       (unsigned long long)(d ? d->largest_free_at_peak : 0));
	printf(", \"fails_at\": ");
	if (r->failed)
		json_failure(t, r);
	else
		printf("null");
	printf(", \"recorded_oom_avoided\": ");
	if (r->avoided_oom)
		printf("{\"time\": %.6f}", vrt_ts_seconds(t, r->avoided_oom_ts));
	else
		printf("null");
	printf(", \"requests\": %llu, \"frees\": %llu, \"unknown_frees\": %llu, \"empty_cache_calls\": %llu, "
	       "\"approximate\": %s, \"devices\": [",
	       (unsigned long long)r->requests, (unsigned long long)r->frees, (unsigned long long)r->unknown_frees,
	       (unsigned long long)r->empty_caches, r->approximate ? "true" : "false");
	for (int k = 0, first = 1; k < r->n_dev; k++)
		if (r->dev[k].stats.requests) {
			printf("%s", first ? "" : ", ");
			json_device(&r->dev[k]);
			first = 0;
		}
	printf("], \"check\": ");
	if (r->as_recorded) {
		const struct vrt_replay_check *c = &r->check;
		printf("{\"requests\": %llu, \"recorded_segment_ops\": %llu, \"model_segment_ops\": %llu, "
		       "\"mismatched_requests\": %llu, \"blocks\": %llu, \"blocks_at_recorded_address\": %llu, "
		       "\"first_mismatch\": ",
		       (unsigned long long)c->requests, (unsigned long long)c->recorded_ops, (unsigned long long)c->model_ops,
		       (unsigned long long)c->mismatched_requests, (unsigned long long)c->blocks,
		       (unsigned long long)c->blocks_at_recorded_address);
		if (c->first_mismatch_s >= 0) {
			printf("{\"time\": %.6f, \"what\": ", c->first_mismatch_s);
			json_string(stdout, c->first_mismatch);
			putchar('}');
		} else {
			printf("null");
		}
		putchar('}');
	} else {
		printf("null");
	}
	printf("}\n");
}

/* A byte count, or a decimal with a binary suffix as PyTorch's messages print sizes ("4.9G",
 * "4.90 GiB" without the blank): vrt_parse_size, then fractions. */
static bool parse_size(const char *s, uint64_t *out)
{
	if (!vrt_parse_size(s, out))
		return true;
	char *end;
	double v = strtod(s, &end);
	if (end == s || v < 0 || *s < '0' || *s > '9')
		return false;
	double unit = 1;
	switch (*end) {
	case 'k': case 'K': unit = 1024.0; end++; break;
	case 'm': case 'M': unit = 1048576.0; end++; break;
	case 'g': case 'G': unit = 1073741824.0; end++; break;
	case 't': case 'T': unit = 1099511627776.0; end++; break;
	}
	if (unit > 1 && (*end == 'i' || *end == 'I'))
		end++;
	if (*end == 'b' || *end == 'B')
		end++;
	if (*end || v * unit >= 18446744073709551615.0)
		return false;
	*out = (uint64_t)(v * unit);
	return true;
}

static int parse_size_arg(const char *opt, const char *v, uint64_t *out)
{
	if (!parse_size(v, out) || !*out)
		return vrt_usage("whatif", "%s takes a size in bytes (e.g. 4.9G, 5261334937), not '%s'", opt, v);
	return 0;
}

int vrt_cmd_whatif(int argc, char **argv)
{
	struct whatif_options opt = { 0 };
	const char *limit = NULL, *device = NULL;
	const struct vrt_arg opts[] = {
		VRT_OPT_JSON(&opt.json), VRT_OPT_QUIET(&opt.quiet), VRT_OPT_UNTIL_MARK, VRT_OPT_WIDTH,
		{ "--alloc-conf", NULL, VRT_ARG_TEXT, &opt.replay.alloc_conf },
		{ "--allocator-limit", NULL, VRT_ARG_TEXT, &limit },
		{ "--device-memory", NULL, VRT_ARG_TEXT, &device },
		VRT_OPT_END,
	};
	int n, rc = vrt_args_parse("whatif", argc, argv, opts, &opt.path, 1, &n);
	if (rc)
		return rc < 0 ? 0 : rc;
	if ((limit && (rc = parse_size_arg("--allocator-limit", limit, &opt.replay.allocator_limit))) ||
	    (device && (rc = parse_size_arg("--device-memory", device, &opt.replay.device_memory))))
		return rc;
	if (!opt.path)
		return vrt_usage("whatif", "no trace file given");
	/* A run's directory reads as the other one-trace commands read it: its one trace, or a list. */
	char file[4096];
	struct vrt_trace t;
	rc = vrt_single_input("whatif", opt.path, NULL, NULL, file, sizeof(file));
	if (rc || (rc = vrt_open_or_fail(&t, opt.path = file)))
		return rc;
	vrt_warn_trace_state(&t, opt.quiet);
	struct vrt_alloc_replay *r = calloc(1, sizeof(*r));
	char err[256] = "";
	rc = r ? vrt_alloc_replay_run(&t, &opt.replay, r, err, sizeof(err)) : VRT_E_NOMEM;
	if (rc == VRT_E_ARG) {
		free(r);
		vrt_trace_close(&t);
		return vrt_usage("whatif", "--alloc-conf: %s", err);
	}
	if (rc == VRT_E_UNSUPPORTED || rc == VRT_E_EMPTY) {
		fprintf(stderr, "vramtrace: %s: %s\n", vrt_escape(opt.path),
			rc == VRT_E_EMPTY ? "no PyTorch tensor events to replay (the trace was recorded with --no-torch, "
					    "before tensor tracking, or without PyTorch's caching allocator)"
					  : err);
		free(r);
		vrt_trace_close(&t);
		return VRT_EXIT_BAD_TRACE;
	}
	if (!rc) {
		if (r->other_release && !opt.quiet)
			fprintf(stderr, "vramtrace: warning: %s was recorded with PyTorch %s; the model follows %s's allocator\n",
				opt.path, r->trace_torch, VRT_AM_TORCH_RELEASE);
		if (opt.json)
			print_json(&t, r);
		else
			print_text(&t, r);
	}
	free(r);
	vrt_trace_close(&t);
	return rc ? vrt_fail(rc, "%s", opt.path) : 0;
}
