/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: every offline report over one trace, as a user would run them. The input is
 * a trace file (fuzz_reader's corpus), or anything else: a recipe for one (fuzz_chunks' corpus,
 * fuzz_recipe.h), which reaches deep into the records past the checksums. Each subcommand runs in this process with its
 * output sent to /dev/null, so that the sanitizers see the reports' own arithmetic, grouping and
 * printing (fuzz_reader stops at the model). `html` is left out: it runs `vramtrace` as child
 * processes for its leaks and OOM sections, and its own passes are timeline's and report's.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "fuzz_recipe.h"

/* The command table main.c defines; the reports only read it for help texts. */
const struct vrt_command vrt_commands[] = { { NULL, NULL, NULL, NULL } };

#define MAX_ARGS 8

static const char *const runs[][MAX_ARGS] = {
	{ "report", "-q", "@" },
	{ "report", "--json", "-q", "--frames", "3", "@" },
	{ "leaks", "-q", "@" },
	{ "leaks", "--json", "-q", "--layer", "cuda", "@" },
	{ "oom", "--json", "-q", "@" },
	{ "oom", "-q", "@" },
	{ "timeline", "-q", "--buckets", "7", "@" },
	{ "timeline", "--csv", "-q", "@" },
	{ "export", "--format", "memory-viz", "-o", "/dev/null", "@" },
	{ "export", "--format", "chrome", "-o", "/dev/null", "@" },
	{ "export", "--format", "folded-peak", "-o", "/dev/null", "@" },
	{ "diff", "-q", "@", "@" },
	{ "dump", "--stacks", "--tables", "@" },
	{ "info", "--json", "@" },
};

static int (*command(const char *name))(int, char **)
{
	static const struct {
		const char *name;
		int (*run)(int, char **);
	} table[] = {
		{ "report", vrt_cmd_report }, { "leaks", vrt_cmd_leaks }, { "oom", vrt_cmd_oom },
		{ "timeline", vrt_cmd_timeline }, { "export", vrt_cmd_export }, { "diff", vrt_cmd_diff },
		{ "dump", vrt_cmd_dump }, { "info", vrt_cmd_info },
	};
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (!strcmp(table[i].name, name))
			return table[i].run;
	return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool stdout_closed;
	if (!stdout_closed) {
		int null = open("/dev/null", O_WRONLY);
		if (null < 0 || dup2(null, STDOUT_FILENO) < 0)
			return 0;
		close(null);
		stdout_closed = true;
	}
	char path[64];
	bool is_file = size >= VRT_FILE_MAGIC_LEN && !memcmp(data, VRT_FILE_MAGIC, VRT_FILE_MAGIC_LEN);
	if (is_file ? vrt_fuzz_file(data, size, path, sizeof(path)) : vrt_fuzz_build_recipe(data, size, path, sizeof(path)))
		return 0;
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		char *argv[MAX_ARGS + 1] = { 0 };
		int argc = 0;
		for (; argc < MAX_ARGS && runs[i][argc]; argc++)
			argv[argc] = (char *)(strcmp(runs[i][argc], "@") ? runs[i][argc] : path);
		(void)command(argv[0])(argc, argv);
		fflush(stdout);
	}
	return 0;
}
