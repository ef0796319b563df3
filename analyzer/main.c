/* SPDX-License-Identifier: MIT */
/* vramtrace: the launcher and offline analyzer. Subcommands live one per file (cmd_*.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "charset.h"
#include "cli.h"
#include "commands.h"
#include "vramtrace/format.h"
#include "vramtrace/options.h"

#ifndef VRAMTRACE_VERSION
#define VRAMTRACE_VERSION "0"
#endif

static int cmd_version(int argc, char **argv)
{
	if (argc > 1 && vrt_is_help(argv[1]))
		return vrt_print_help("version");
	printf("vramtrace %s (trace format %d.%d)\n", VRAMTRACE_VERSION, VRT_FORMAT_MAJOR, VRT_FORMAT_MINOR);
	return 0;
}

static void overview(FILE *out)
{
	fprintf(out, "usage: vramtrace <command> [options] ...\n\n"
		     "Finds out where GPU memory goes in an unmodified CUDA program.\n\ncommands:\n");
	for (const struct vrt_command *c = vrt_commands; c->name; c++)
		fprintf(out, "  %-10s %s\n", c->name, c->summary);
	fprintf(out, "\n'vramtrace <command> --help' shows a command's options and examples.\n");
}

static void print_env(void)
{
	printf("environment variables read by libvramtrace.so (`vramtrace run` sets them from its options):\n\n");
#define VRT_OPT_PRINT(id, name, type, def, min, max, help) printf("  %-24s default %-6s %s\n", name, *def ? def : "-", help);
	VRT_OPTIONS(VRT_OPT_PRINT)
#undef VRT_OPT_PRINT
}

static int cmd_help(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "env")) {
		print_env();
		return 0;
	}
	if (argc > 1 && vrt_is_help(argv[1]))
		return vrt_print_help("help");
	if (argc > 1 && vrt_print_help(argv[1]) == 0)
		return 0;
	if (argc > 1) {
		fprintf(stderr, "vramtrace help: no command or topic named '%s' (the topics: the commands below, and env)\n\n",
			vrt_escape(argv[1]));
		overview(stderr);
		return VRT_EXIT_USAGE;
	}
	overview(stdout);
	return 0;
}

const struct vrt_command vrt_commands[] = {
	{ "run", vrt_cmd_run, "run a command with tracing on", VRT_HELP_RUN },
	{ "report", vrt_cmd_report, "peaks, what is live at the end, and the top sites", VRT_HELP_REPORT },
	{ "leaks", vrt_cmd_leaks, "what survives each call of a phase, and what keeps growing", VRT_HELP_LEAKS },
	{ "oom", vrt_cmd_oom, "explain an out-of-memory failure", VRT_HELP_OOM },
	{ "timeline", vrt_cmd_timeline, "live memory over time, in the terminal or as CSV", VRT_HELP_TIMELINE },
	{ "html", vrt_cmd_html, "one self-contained HTML report", VRT_HELP_HTML },
	{ "export", vrt_cmd_export, "PyTorch memory_viz, Chrome/Perfetto or folded-stack files", VRT_HELP_EXPORT },
	{ "diff", vrt_cmd_diff, "compare two traces, or two times of one, by site", VRT_HELP_DIFF },
	{ "whatif", vrt_cmd_whatif, "replay the tensor requests under another allocator setting or limit",
	  VRT_HELP_WHATIF },
	{ "dump", vrt_cmd_dump, "print every record", VRT_HELP_DUMP },
	{ "info", vrt_cmd_info, "what a trace holds and how its process ended", VRT_HELP_INFO },
	{ "recover", vrt_cmd_recover, "append a killed process's unwritten events to its trace", VRT_HELP_RECOVER },
	{ "attach", vrt_cmd_attach, "start tracing a running process", VRT_HELP_ATTACH },
	{ "mark", vrt_cmd_mark, "put a labelled mark into a running process's trace", VRT_HELP_MARK },
	{ "snapshot", vrt_cmd_snapshot, "write a running process's live set and history now", VRT_HELP_SNAPSHOT },
	{ "watch", vrt_cmd_watch, "the sites that grow in a running process, every few seconds", VRT_HELP_WATCH },
	{ "version", cmd_version, "print the version and trace format",
	  "usage: vramtrace version   (or vramtrace --version)\n\nPrints the version and the trace format "
	  "version it reads and writes.\n\nexamples:\n  vramtrace version\n  vramtrace --version\n" },
	{ "help", cmd_help, "help on a command, or on the environment variables",
	  "usage: vramtrace help [COMMAND | env]\n\nexamples:\n  vramtrace help leaks\n  vramtrace help env\n" },
	{ NULL, NULL, NULL, NULL },
};

/* Commands that read traces: they take --max-memory, whatever else they take. */
static bool reads_traces(const char *name)
{
	static const char *const readers[] = { "report", "leaks", "oom", "timeline", "html", "export",
					       "diff", "dump", "info", NULL };
	for (const char *const *r = readers; *r; r++)
		if (!strcmp(*r, name))
			return true;
	return false;
}

/* Commands whose standard output may be a file format of its own ("-o -"): charset.h's guard
 * stays off it. */
static bool writes_formats(const char *name) { return !strcmp(name, "export") || !strcmp(name, "html"); }

/*
 * Takes --max-memory SIZE (or --max-memory=SIZE) out of a trace-reading command's arguments and
 * sets the budget: that value, or the default. A --json output is held back until the command
 * ends, so that one stopped by the budget writes nothing rather than half a document.
 */
static int take_budget(const char *name, int *argc, char **argv)
{
	uint64_t bytes = vrt_budget_default();
	bool json = false;
	int w = 1;
	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i], *value = NULL;
		if (!strcmp(a, "--max-memory") && i + 1 < *argc) /* "--max-memory=SIZE" is split by main */
			value = argv[++i];
		else if (!strcmp(a, "--max-memory"))
			return vrt_usage(name, "--max-memory takes a size such as 512M or 8G");
		if (value) {
			if (vrt_parse_size(value, &bytes) || bytes < (1u << 20))
				return vrt_usage(name, "--max-memory takes a size of at least 1M, such as 512M or 8G (not '%s')",
						 value);
			continue;
		}
		json |= !strcmp(a, "--json");
		argv[w++] = argv[i];
	}
	argv[w] = NULL;
	*argc = w;
	vrt_budget_set(bytes);
	if (json)
		setvbuf(stdout, NULL, _IOFBF, 16u << 20);
	return 0;
}

/*
 * "--name=value" means "--name value" in every command: the long options are split here, once,
 * before a command parses them. Only options: not past "--", nor (for run) past the
 * first argument that is not an option, which begins the traced command.
 */
#define MAX_SPLIT_ARGS 4096

/* argv's strings are the process's own: "--name=value" is cut in place at the '=' into out[],
 * which the caller holds (no allocation: nothing to free, nothing for a leak checker). */
static int split_equals(int argc, char **argv, char **out)
{
	bool stop_at_positional = !strcmp(argv[1], "run");
	int n = 0, i = 0;
	for (; i < argc; i++) {
		char *a = argv[i], *eq = strchr(a, '=');
		if (i >= 2 && (!strcmp(a, "--") || (stop_at_positional && a[0] != '-')))
			break;
		if (i >= 2 && a[0] == '-' && a[1] == '-' && eq && eq > a + 2) {
			*eq = 0;
			out[n++] = a;
			out[n++] = eq + 1;
		} else {
			out[n++] = a;
		}
	}
	for (; i < argc; i++)
		out[n++] = argv[i];
	out[n] = NULL;
	return n;
}

static int main_dispatch(int argc, char **argv);

/* A command that succeeded fails if what it printed did not all reach standard output (a full
 * disk, a closed pipe): ferror keeps a write's failure that a later, empty fflush would not see. */
static int stdout_written(int rc)
{
	if ((fflush(stdout) || ferror(stdout)) && !rc)
		return vrt_fail(VRT_E_IO, "cannot write to standard output");
	return rc;
}

int main(int argc, char **argv)
{
	vrt_charset_init();
	if (argc < 2) {
		overview(stderr);
		return VRT_EXIT_USAGE;
	}
	if (argc > MAX_SPLIT_ARGS) /* "--name=value" is read as one argument then (no command takes so many) */
		return main_dispatch(argc, argv);
	char *split[2 * MAX_SPLIT_ARGS + 1];
	argc = split_equals(argc, argv, split);
	return main_dispatch(argc, split);
}

static int main_dispatch(int argc, char **argv)
{
	const char *name = argv[1];
	vrt_progress_from_env();
	if (!strcmp(name, "--version") || !strcmp(name, "-V"))
		return cmd_version(0, NULL);
	if (vrt_is_help(name))
		return cmd_help(argc - 1, argv + 1);
	for (const struct vrt_command *c = vrt_commands; c->name; c++) {
		if (strcmp(c->name, name))
			continue;
		int n = argc - 1, rc;
		if ((rc = vrt_charset_guard_streams(!writes_formats(name))))
			return vrt_fail(rc, "cannot set up standard output");
		if (reads_traces(name) && (rc = take_budget(name, &n, argv + 1)))
			return rc;
		return stdout_written(c->run(n, argv + 1));
	}
	fprintf(stderr, "vramtrace: unknown command '%s'\n\n", name);
	overview(stderr);
	return VRT_EXIT_USAGE;
}
