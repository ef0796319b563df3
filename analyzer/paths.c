/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "paths.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vramtrace/error.h"

static int exe_dir(char *dir, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return VRT_E_NOENT;
	exe[n] = 0;
	char *slash = strrchr(exe, '/');
	if (!slash)
		return VRT_E_NOENT;
	*slash = 0;
	snprintf(dir, len, "%s", exe);
	return 0;
}

/* The first of the candidates (relative to the executable's directory) that exists. */
static int first_existing(const char *const *candidates, char *out, size_t len)
{
	char dir[PATH_MAX], path[PATH_MAX + 64];
	if (exe_dir(dir, sizeof(dir)))
		return VRT_E_NOENT;
	for (const char *const *c = candidates; *c; c++) {
		snprintf(path, sizeof(path), "%s/%s", dir, *c);
		char *real = realpath(path, NULL);
		if (real && access(real, R_OK) == 0) {
			snprintf(out, len, "%s", real);
			free(real);
			return 0;
		}
		free(real);
	}
	return VRT_E_NOENT;
}

int vrt_find_preload(char *out, size_t len)
{
	const char *env = getenv("VRAMTRACE_PRELOAD");
	if (env && *env) {
		snprintf(out, len, "%s", env);
		return access(out, R_OK) ? VRT_E_NOENT : 0;
	}
	static const char *const candidates[] = {
		"libvramtrace.so",                      /* wheel: both in vramtrace/_bin */
		"../preload/libvramtrace.so",           /* build tree */
		"../lib/libvramtrace.so",               /* prefix install */
		"../lib64/libvramtrace.so",
		"../lib/x86_64-linux-gnu/libvramtrace.so",
		NULL,
	};
	return first_existing(candidates, out, len);
}

int vrt_find_python_dirs(char *bootstrap, size_t blen, char *package, size_t plen)
{
	static const char *const candidates[] = {
		"../_bootstrap",                        /* wheel: vramtrace/_bin -> vramtrace/_bootstrap */
		"../../python/vramtrace/_bootstrap",    /* build tree (build/analyzer) */
		"../share/vramtrace/python/vramtrace/_bootstrap",
		NULL,
	};
	int rc = first_existing(candidates, bootstrap, blen);
	if (rc)
		return rc;
	/* The package directory holds vramtrace/, two levels above _bootstrap. */
	snprintf(package, plen, "%s", bootstrap);
	for (int up = 0; up < 2; up++) {
		char *slash = strrchr(package, '/');
		if (!slash)
			return VRT_E_NOENT;
		*slash = 0;
	}
	return 0;
}

int vrt_prepend_env(const char *name, const char *value, char sep)
{
	const char *old = getenv(name);
	char *joined = NULL;
	if (!old || !*old || asprintf(&joined, "%s%c%s", value, sep, old) < 0)
		return setenv(name, value, 1);
	int rc = setenv(name, joined, 1);
	free(joined);
	return rc;
}
