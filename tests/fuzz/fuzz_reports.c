/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: every offline report over one trace, as a user would run them. The input is
 * a trace file (fuzz_reader's corpus, the H200 traces), or anything else: a recipe for one
 * (fuzz_chunks' corpus, fuzz_recipe.h), which reaches deep into the records past the checksums.
 * Each subcommand runs in this process with its output sent to /dev/null (files, which are never
 * written through a device, to one in a directory of its own), so that the sanitizers see the reports' own arithmetic, grouping and
 * printing (fuzz_reader stops at the model). html computes its leaks and OOM sections in this
 * process too (reports.h); both commands also run here directly, with their own options.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "fuzz_recipe.h"
#include "fuzz_trace.h"

/* The command table main.c defines; the reports only read it for help texts. */
const struct vrt_command vrt_commands[] = { { NULL, NULL, NULL, NULL } };

#define MAX_ARGS 9 /* "@" stands for the trace, "#" for an output file (exports and html write it) */

static const char *const runs[][MAX_ARGS] = {
	{ "report", "-q", "@" },
	{ "report", "--json", "-q", "--frames", "3", "@" },
	{ "leaks", "-q", "@" },
	{ "leaks", "--json", "-q", "--layer", "cuda", "@" },
	{ "oom", "--json", "-q", "@" },
	{ "oom", "-q", "@" },
	{ "timeline", "-q", "--buckets", "7", "@" },
	{ "timeline", "--csv", "-q", "@" },
	{ "export", "--format", "memory-viz", "-o", "#", "@" },
	{ "export", "--format", "chrome", "-o", "#", "@" },
	{ "export", "--format", "folded-peak", "-o", "#", "@" },
	{ "diff", "-q", "@", "@" },
	{ "dump", "--stacks", "--tables", "@" },
	{ "info", "--json", "@" },
	{ "html", "-q", "--buckets", "16", "--sites", "3", "-o", "#", "@" },
	{ "whatif", "--json", "-q", "@" },
	{ "whatif", "-q", "--alloc-conf", "expandable_segments:True", "--allocator-limit", "64M", "@" },
	{ "diff", "--by", "category", "--json", "-q", "@", "@" },
	{ "report", "-q", "--width", "30", "@" },
	{ "leaks", "-q", "--width", "1", "@" },
	{ "oom", "-q", "--width", "40", "--frames", "20", "@" },
	{ "timeline", "--csv", "-q", "--until-mark", "vramtrace-truth", "@" },
};

static int (*command(const char *name))(int, char **)
{
	static const struct {
		const char *name;
		int (*run)(int, char **);
	} table[] = {
		{ "report", vrt_cmd_report }, { "leaks", vrt_cmd_leaks }, { "oom", vrt_cmd_oom },
		{ "timeline", vrt_cmd_timeline }, { "export", vrt_cmd_export }, { "diff", vrt_cmd_diff },
		{ "dump", vrt_cmd_dump }, { "info", vrt_cmd_info }, { "html", vrt_cmd_html },
		{ "whatif", vrt_cmd_whatif },
	};
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (!strcmp(table[i].name, name))
			return table[i].run;
	return NULL;
}

static char html_out[PATH_MAX];

static void remove_html_out(void)
{
	unlink(html_out);
	char *slash = strrchr(html_out, '/');
	if (slash) {
		*slash = 0;
		rmdir(html_out);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!html_out[0]) {
		int null = open("/dev/null", O_WRONLY);
		if (null < 0 || dup2(null, STDOUT_FILENO) < 0)
			return 0;
		close(null);
		const char *tmp = getenv("TMPDIR");
		char dir[PATH_MAX - 16];
		snprintf(dir, sizeof(dir), "%s/vrt-fuzz-html-XXXXXX", tmp && *tmp ? tmp : "/tmp");
		if (!mkdtemp(dir))
			return 0;
		snprintf(html_out, sizeof(html_out), "%s/r.html", dir);
		atexit(remove_html_out);
	}
	char path[64];
	bool is_file = size >= VRT_FILE_MAGIC_LEN && !memcmp(data, VRT_FILE_MAGIC, VRT_FILE_MAGIC_LEN);
	if (is_file ? vrt_fuzz_file(data, size, path, sizeof(path)) : vrt_fuzz_build_recipe(data, size, path, sizeof(path)))
		return 0;
	if (!vrt_fuzz_affordable(path))
		return 0;
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		char *argv[MAX_ARGS + 1] = { 0 };
		int argc = 0;
		for (; argc < MAX_ARGS && runs[i][argc]; argc++)
			argv[argc] = (char *)(!strcmp(runs[i][argc], "@")   ? path
					      : !strcmp(runs[i][argc], "#") ? html_out
									    : runs[i][argc]);
		vrt_settings = (struct vrt_cli_settings){ .width = -1 }; /* each run is a command of its own */
		(void)command(argv[0])(argc, argv);
		fflush(stdout);
	}
	return 0;
}
