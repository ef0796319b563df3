/* SPDX-License-Identifier: MIT */
/* VRAMTRACE_* environment, parsed once by the constructor from the table in options.h. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "vramtrace/error.h"
#include "vramtrace/utf8.h"

struct option_def {
	const char *name;
	enum vrt_opt_type type;
	const char *def;
	long long min, max;
};

static const struct option_def option_defs[VRT_OPTION_COUNT] = {
#define VRT_OPT_DEF(id, name, type, def, min, max, help) [VRT_OPTION_##id] = { name, type, def, min, max },
	VRT_OPTIONS(VRT_OPT_DEF)
#undef VRT_OPT_DEF
};

static int parse_value(const struct option_def *d, const char *s, long long *out)
{
	char *end;
	uint64_t size;
	switch (d->type) {
	case VRT_OPT_SIZE:
		if (vrt_parse_size(s, &size) || size > (uint64_t)d->max)
			return VRT_E_ARG;
		if ((long long)size < d->min && size != 0)
			return VRT_E_ARG;
		*out = (long long)size;
		return 0;
	case VRT_OPT_INT:
		*out = strtoll(s, &end, 10);
		return (*s && !*end && *out >= d->min && *out <= d->max) ? 0 : VRT_E_ARG;
	case VRT_OPT_BOOL:
		if (!strcmp(s, "1") || !strcasecmp(s, "yes") || !strcasecmp(s, "on") || !strcasecmp(s, "true"))
			*out = 1;
		else if (!strcmp(s, "0") || !strcasecmp(s, "no") || !strcasecmp(s, "off") || !strcasecmp(s, "false"))
			*out = 0;
		else
			return VRT_E_ARG;
		return 0;
	case VRT_OPT_MODE:
		if (!strcasecmp(s, "full"))
			*out = VRT_MODE_FULL;
		else if (!strcasecmp(s, "armed"))
			*out = VRT_MODE_ARMED;
		else if (!strcasecmp(s, "off"))
			*out = VRT_MODE_OFF;
		else
			return VRT_E_ARG;
		return 0;
	case VRT_OPT_STRING:
		return 0;
	}
	return VRT_E_ARG;
}

/* Never truncated: a shortened path names another file, a shortened list other functions. */
static int copy_string(char *dst, size_t cap, const char *src)
{
	size_t n = strlen(src);
	if (n >= cap)
		return VRT_E_SIZE;
	memcpy(dst, src, n + 1);
	return 0;
}

static int store(struct vrt_config *cfg, int id, const char *s, long long v)
{
	switch (id) {
	case VRT_OPTION_OUTPUT: return copy_string(cfg->output, sizeof(cfg->output), s);
	case VRT_OPTION_PHASE: return copy_string(cfg->phase, sizeof(cfg->phase), s);
	case VRT_OPTION_MODE: cfg->mode = (int)v; break;
	case VRT_OPTION_RING: cfg->ring_bytes = (uint64_t)v; break;
	case VRT_OPTION_STACK_DEPTH: cfg->stack_depth = (int)v; break;
	case VRT_OPTION_PYTHON: cfg->python = v; break;
	case VRT_OPTION_PYTHON_DEPTH: cfg->python_depth = (int)v; break;
	case VRT_OPTION_FAST_UNWIND: cfg->fast_unwind = v; break;
	case VRT_OPTION_FREE_STACKS: cfg->free_stacks = v; break;
	case VRT_OPTION_FLUSH_MS: cfg->flush_ms = (int)v; break;
	case VRT_OPTION_TS_UNIT_NS: cfg->ts_unit_ns = (int)v; break;
	case VRT_OPTION_THREAD_BUFFER: cfg->thread_buffer = (uint64_t)v; break;
	case VRT_OPTION_RINGS: cfg->rings = (int)v; break;
	case VRT_OPTION_FULL_WAIT_MS: cfg->full_wait_ms = (int)v; break;
	case VRT_OPTION_NVTX: cfg->nvtx = v; break;
	case VRT_OPTION_TORCH: cfg->torch = v; break;
	case VRT_OPTION_CONTROL: cfg->control = v; break;
	case VRT_OPTION_FOLLOW_FORK: cfg->follow_fork = v; break;
	case VRT_OPTION_QUIET: cfg->quiet = v; break;
	}
	return 0;
}

/*
 * A bad setting is said once per job, not by each of its processes (a pyenv shim runs a dozen
 * programs before python, each with the preload): the first process that says one marks the
 * environment its children inherit (VRAMTRACE_SETTINGS_SAID, set by lifecycle.c's start), and a
 * process that inherits the mark keeps quiet about the settings. Other lines are not affected.
 */
#define SETTINGS_SAID "VRAMTRACE_SETTINGS_SAID"
static bool settings_said, settings_warned;
#define warn(...)                              \
	do {                                   \
		settings_warned = true;        \
		if (!settings_said)            \
			vrt_log(__VA_ARGS__);  \
	} while (0)

bool vrt_config_warned(void) { return settings_warned && !settings_said; }

static void load_from_env(struct vrt_config *cfg, int id)
{
	const struct option_def *d = &option_defs[id];
	const char *s = getenv(d->name);
	long long v = 0;
	if (!s)
		return;
	if (parse_value(d, s, &v)) {
		warn("%s=%s is not valid; using the default %s", d->name, s, d->def);
		return;
	}
	if (!store(cfg, id, s, v))
		return;
	if (id == VRT_OPTION_OUTPUT)
		cfg->output_unusable = true; /* said by the preload's one line (lifecycle.c) */
	else
		warn("%s is %zu bytes long, more than vramtrace takes; ignored", d->name, strlen(s));
}

void vrt_config_load(struct vrt_config *cfg)
{
	settings_said = getenv(SETTINGS_SAID) != NULL;
	settings_warned = false;
	memset(cfg, 0, sizeof(*cfg));
	cfg->terminal_utf8 = vrt_locale_name_utf8(); /* before the warnings below */
	for (int id = 0; id < VRT_OPTION_COUNT; id++) {
		const struct option_def *d = &option_defs[id];
		long long v = 0;
		parse_value(d, d->def, &v);
		store(cfg, id, d->def, v);
	}
	load_from_env(cfg, VRT_OPTION_QUIET); /* first: it silences the warnings about the others */
	for (int id = 0; id < VRT_OPTION_COUNT; id++)
		if (id != VRT_OPTION_QUIET)
			load_from_env(cfg, id);
	if (cfg->ring_bytes && cfg->ring_bytes < (4u << 20)) {
		warn("VRAMTRACE_RING below 4M; using 4M");
		cfg->ring_bytes = 4u << 20;
	}
	if (cfg->python_depth > 255) /* a raw event counts its Python frames in a uint8_t */
		cfg->python_depth = 255;
	uint64_t tb = 65536;
	while (tb < cfg->thread_buffer)
		tb <<= 1;
	cfg->thread_buffer = tb;
}
