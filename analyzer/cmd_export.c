/* SPDX-License-Identifier: MIT */
/*
 * vramtrace export: the trace in other tools' formats.
 *  - memory-viz: PyTorch's memory snapshot (pickle), opened by pytorch.org/memory_viz.
 *    Tensors are the blocks when the trace has PyTorch block events; otherwise every CUDA
 *    allocation stands for a block in a segment of its own.
 *  - chrome: Chrome/Perfetto trace JSON (chrome_trace.c).
 *  - folded / folded-peak: "outer;...;inner bytes" lines for flamegraph.pl and speedscope.
 *  - parquet: tables in a directory, for one trace or a directory of per-rank traces, written by
 *    the Python module (export_parquet below).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chrome_trace.h"
#include "cli.h"
#include "memory_viz.h"
#include "safe_output.h"
#include "model.h"
#include "peak_sites.h"
#include "paths.h"
#include "report_common.h"
#include "sites.h"
#include "stacks.h"

struct export_options {
	const char *format, *path, *output;
	bool quiet;
	int max_events; /* -1: the format's default */
	int points;
};

/* ---- folded ----------------------------------------------------------------------------- */

static void folded_frame(FILE *out, const struct vrt_frame *f)
{
	char buf[1024];
	vrt_frame_format(f, buf, sizeof(buf));
	for (char *p = buf; *p; p++)
		if (*p == ';' || *p == '\n')
			*p = ',';
	fputs(buf, out);
}

/* Where a folded stack begins: at its outermost Python frame when it has one (what is outside it
 * is the interpreter starting: _start, Py_RunMain, eval loops), so that one code path has one
 * root whether its stack was captured with native frames (a cudaMalloc) or Python ones only (a
 * tensor); else at its outermost frame (a thread's start). */
static int outermost_python(const struct vrt_frame *frames, int n)
{
	for (int k = n - 1; k >= 0; k--)
		if (frames[k].type == VRT_FT_PYTHON)
			return k;
	return n - 1;
}

/* Each line begins with its root (the device, or host memory), so a flame graph splits there
 * first and each tower's total is that memory's: stacks that allocate on several would merge. */
static void write_folded(FILE *out, const struct vrt_trace *t, const struct vrt_sites *s, const char *root)
{
	static struct vrt_frame frames[VRT_MAX_FRAMES];
	for (size_t i = 0; i < s->n; i++) {
		const struct vrt_site *site = &s->v[i];
		if (site->bytes <= 0)
			continue;
		fprintf(out, "%s;", root);
		if (site->label) {
			fprintf(out, "%s %lld\n", site->label, (long long)site->bytes);
			continue;
		}
		int n = vrt_stack_frames(t, site->stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES);
		if (!n)
			fputs("[no stack]", out);
		for (int k = outermost_python(frames, n); k >= 0; k--) {
			folded_frame(out, &frames[k]);
			if (k)
				fputc(';', out);
		}
		fprintf(out, " %lld\n", (long long)site->bytes);
	}
}

/* The main series' peak: tensors when present, else the busiest device's memory. */
struct main_peak {
	int slot;
	int64_t bytes;
	uint64_t ts;
};

static struct main_peak main_peak_of(const struct vrt_model *m)
{
	struct main_peak p = { .bytes = -1 };
	for (int d = 0; d <= VRT_MAX_DEVICES; d++) {
		int64_t v = m->any_blocks ? m->tensor_peak[d] : m->peak[d][VRT_KIND_DEVICE];
		if (v > p.bytes)
			p = (struct main_peak){ d, v, m->any_blocks ? m->tensor_peak_ts[d] : m->peak_ts[d][VRT_KIND_DEVICE] };
	}
	return p;
}

/* What was live on one device (or host) slot, grouped by stack, under its root. */
static void folded_slot(FILE *out, const struct vrt_trace *t, const struct vrt_model *m, int slot, int kind,
			const char *root)
{
	struct vrt_sites s;
	vrt_sites_init(&s);
	vrt_report_group_live(t, m, &s, slot, kind);
	write_folded(out, t, &s, root);
	vrt_sites_free(&s);
}

/*
 * folded: everything live at the end, under one root per device and one for host memory.
 * folded-peak: what was live on the busiest device at its peak (its tensors' peak when there
 * are tensors: then the root says so, since the allocator's cache and other CUDA memory live
 * then are in it too, and their total is more than the tensors' peak).
 */
static int export_folded(struct vrt_trace *t, FILE *out, bool at_peak, bool quiet)
{
	struct vrt_model m;
	struct vrt_peak_sites *at_peaks = at_peak ? vrt_peak_sites_new(t) : NULL;
	if ((at_peak && !at_peaks) || vrt_model_init(&m)) {
		vrt_peak_sites_free(at_peaks);
		return vrt_fail(VRT_E_NOMEM, "export");
	}
	if (at_peaks)
		vrt_peak_sites_follow(at_peaks, &m);
	int rc = vrt_report_replay(t, &m, quiet);
	if (!rc && at_peak) {
		struct main_peak peak = main_peak_of(&m);
		bool tensors = m.any_blocks;
		double when = vrt_ts_seconds(t, peak.ts);
		char root[160];
		if (tensors)
			snprintf(root, sizeof(root), "%s at its tensor peak (%s of tensors at %.3f s)",
				 vrt_device_name(peak.slot), vrt_bytes(peak.bytes), when);
		else
			snprintf(root, sizeof(root), "%s at its peak (%.3f s)", vrt_device_name(peak.slot), when);
		struct vrt_sites s;
		vrt_sites_init(&s);
		rc = vrt_peak_sites_take(at_peaks, peak.slot, tensors ? -1 : VRT_KIND_DEVICE, &s);
		if (rc)
			rc = vrt_fail(rc, "export");
		else
			write_folded(out, t, &s, root);
		vrt_sites_free(&s);
	} else if (!rc) {
		for (int slot = 0; slot <= VRT_MAX_DEVICES; slot++)
			folded_slot(out, t, &m, slot, m.any_blocks ? -1 : -2, vrt_device_name(slot));
	}
	vrt_model_free(&m);
	vrt_peak_sites_free(at_peaks);
	return rc;
}

/* parquet is python/vramtrace/_parquet.py (pyarrow does the writing), run with $VRAMTRACE_PYTHON or
 * python3; it reads the traces back through this binary, named to it in $VRAMTRACE_ANALYZER. */
static int export_parquet(const struct export_options *o)
{
	char bootstrap[4096], package[4096], self[4096];
	if (vrt_find_python_dirs(bootstrap, sizeof(bootstrap), package, sizeof(package)))
		return vrt_fail(VRT_E_NOENT, "export --format parquet: no vramtrace Python package beside this binary");
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0 || n >= (ssize_t)sizeof(self) - 1)
		return vrt_fail(VRT_E_IO, "export --format parquet: cannot find this executable");
	self[n] = 0;
	const char *python = getenv("VRAMTRACE_PYTHON");
	python = python && *python ? python : "python3";
	if (vrt_prepend_env("PYTHONPATH", package, ':') || setenv("VRAMTRACE_ANALYZER", self, 1))
		return vrt_fail(VRT_E_NOMEM, "out of memory");
	char *argv[] = { (char *)python, "-m", "vramtrace._parquet", "-o", (char *)o->output, (char *)o->path,
			 o->quiet ? "-q" : NULL, NULL };
	fflush(NULL);
	execvp(python, argv);
	return vrt_fail(VRT_E_NOENT, "export --format parquet: cannot run %s (set VRAMTRACE_PYTHON)", python);
}

/* As html does: the file, its size, and what reads it. */
static void print_written(const char *output, const char *format)
{
	static const struct { const char *format, *reader; } readers[] = {
		{ "memory-viz", "open it at https://pytorch.org/memory_viz" },
		{ "chrome", "open it in https://ui.perfetto.dev or chrome://tracing" },
		{ "folded", "flamegraph.pl or https://www.speedscope.app reads it" },
		{ "folded-peak", "flamegraph.pl or https://www.speedscope.app reads it" },
	};
	struct stat st;
	char size[32] = "?";
	if (!stat(output, &st))
		vrt_fmt_bytes(size, sizeof(size), (int64_t)st.st_size);
	const char *reader = "";
	for (size_t i = 0; i < sizeof(readers) / sizeof(readers[0]); i++)
		if (!strcmp(readers[i].format, format))
			reader = readers[i].reader;
	fprintf(stderr, "vramtrace: wrote %s (%s; %s)\n", vrt_escape(output), size, reader);
}

int vrt_cmd_export(int argc, char **argv)
{
	struct export_options o = { .max_events = -1, .points = VRT_CHROME_POINTS };
	const struct vrt_arg opts[] = {
		VRT_OPT_OUTPUT(&o.output), VRT_OPT_QUIET(&o.quiet), VRT_OPT_UNTIL_MARK,
		{ "--format", "-f", VRT_ARG_TEXT, &o.format },
		{ "--max-events", NULL, VRT_ARG_INT, &o.max_events, 1, INT32_MAX },
		{ "--points", NULL, VRT_ARG_INT, &o.points, 2, 10000000 },
		VRT_OPT_END,
	};
	int n, rc = vrt_args_parse("export", argc, argv, opts, &o.path, 1, &n);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (!o.path || !o.format || !o.output)
		return vrt_usage("export", "need --format, a trace and -o FILE");
	if (!strcmp(o.format, "parquet"))
		return export_parquet(&o);
	bool viz = !strcmp(o.format, "memory-viz"), chrome = !strcmp(o.format, "chrome");
	bool folded = !strcmp(o.format, "folded"), peak = !strcmp(o.format, "folded-peak");
	if (!viz && !chrome && !folded && !peak)
		return vrt_usage("export", "unknown format '%s' (memory-viz, chrome, folded, folded-peak, parquet)", o.format);
	char path[4096];
	struct vrt_trace t;
	rc = vrt_single_input("export", o.path, NULL, NULL, path, sizeof(path));
	if (rc || (rc = vrt_open_or_fail(&t, o.path = path)))
		return rc;
	vrt_warn_trace_state(&t, o.quiet);
	struct vrt_safe_output file = { .f = stdout };
	bool to_stdout = !strcmp(o.output, "-");
	if (!to_stdout && (rc = vrt_safe_output_open(&file, o.output, &t))) {
		vrt_trace_close(&t);
		return rc;
	}
	struct vrt_chrome_options co = { o.points, o.max_events < 0 ? VRT_CHROME_ALLOCATIONS : o.max_events, o.quiet };
	if (viz)
		rc = vrt_export_memory_viz(&t, file.f, o.max_events < 0 ? 2000000 : (uint64_t)o.max_events, o.quiet);
	else if (chrome)
		rc = vrt_export_chrome(&t, file.f, &co);
	else
		rc = export_folded(&t, file.f, peak, o.quiet);
	if (!to_stdout && rc)
		vrt_safe_output_abort(&file);
	else if (!to_stdout)
		rc = vrt_safe_output_commit(&file); /* standard output: main checks it */
	if (!rc && !to_stdout && !o.quiet)
		print_written(o.output, o.format);
	vrt_trace_close(&t);
	return rc;
}
