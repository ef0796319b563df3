/* SPDX-License-Identifier: MIT */
#include "attribution.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vramtrace/error.h"

static const char *basename_of(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

/* The library paths of the trace being read: "python.library_paths", U+001F between them. */
static char library_paths[8192];

void vrt_attribution_use(const struct vrt_trace *t)
{
	const char *v = vrt_info(t, "python.library_paths");
	snprintf(library_paths, sizeof(library_paths), "%s", v ? v : "");
}

/* The part of file below the library path it is in ("deepspeed/__init__.py"), or below any
 * site-packages or dist-packages directory (a trace without python.library_paths, a library
 * without a .dist-info), or NULL. */
static const char *below_library_path(const char *file)
{
	for (const char *p = library_paths; *p;) { /* U+001F between them, as the reader shows it */
		const char *end = strstr(p, "\\x1f");
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n && !strncmp(file, p, n) && file[n] == '/')
			return file + n + 1;
		if (!end)
			break;
		p = end + 4;
	}
	const char *pkg = strstr(file, "-packages/");
	return pkg ? pkg + 10 : NULL;
}

static bool under_library_path(const char *file) { return below_library_path(file) != NULL; }

bool vrt_frame_is_user_code(const struct vrt_frame *f)
{
	if (f->type != VRT_FT_PYTHON)
		return false;
	const char *p = f->file;
	if (under_library_path(p))
		return false;
	if (!strncmp(p, "<frozen", 7))
		return false;
	return !strstr(p, "/lib/python3") && !strstr(p, "/lib64/python3"); /* the standard library */
}

static struct vrt_frame none(void) { return (struct vrt_frame){ VRT_FT_LABEL, "[no stack]", "", 0, "", 0, 0 }; }

void vrt_attribute(const struct vrt_trace *t, uint32_t stack, int skip, struct vrt_attribution *a)
{
	static struct vrt_frame frames[VRT_MAX_FRAMES];
	int n = vrt_stack_frames(t, stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES);
	*a = (struct vrt_attribution){ .user = none(), .entry = none(), .inner = none() };
	int prev_python = -1; /* the Python frame just inside the one looked at */
	for (int i = 0; i < n; i++) {
		if (frames[i].type != VRT_FT_PYTHON)
			continue;
		if (!a->python) {
			a->python = true;
			a->inner = frames[i];
		}
		if (vrt_frame_is_user_code(&frames[i]) && skip-- <= 0) {
			a->user = frames[i];
			a->has_user = true;
			if (prev_python >= 0 && !vrt_frame_is_user_code(&frames[prev_python])) {
				a->entry = frames[prev_python];
				a->has_entry = true;
			}
			return;
		}
		prev_python = i;
	}
	if (a->python) {
		a->user = a->inner; /* library code only: its innermost frame */
		for (int i = 0; i < n && !a->backward; i++)
			a->backward = frames[i].type == VRT_FT_NATIVE && strstr(frames[i].function, "autograd::Engine");
		return;
	}
	int h = vrt_headline_index(frames, n);
	if (h >= 0)
		a->user = frames[h];
}

/* "deepspeed.initialize" for a function of a package's module, "Module.cuda" for a method. */
static void qualified(const struct vrt_frame *f, char *buf, size_t len)
{
	const char *pkg = below_library_path(f->file);
	if (strchr(f->function, '.') || !pkg) {
		snprintf(buf, len, "%s", f->function);
		return;
	}
	char mod[200];
	snprintf(mod, sizeof(mod), "%s", pkg);
	char *dot = strrchr(mod, '.');
	if (dot && !strcmp(dot, ".py"))
		*dot = 0;
	size_t m = strlen(mod);
	if (m > 9 && !strcmp(mod + m - 9, "/__init__"))
		mod[m - 9] = 0;
	for (char *c = mod; *c; c++)
		if (*c == '/')
			*c = '.';
	snprintf(buf, len, "%s.%s", mod, f->function);
}

void vrt_attribution_name(const struct vrt_attribution *a, char *buf, size_t len)
{
	if (!a->python) {
		const struct vrt_frame *f = &a->user;
		if (f->type == VRT_FT_NATIVE && strcmp(f->function, "??"))
			snprintf(buf, len, "%s (%s)", f->function, *f->module ? basename_of(f->module) : "?");
		else
			vrt_frame_format(f, buf, len);
		return;
	}
	if (!a->has_entry) {
		snprintf(buf, len, "%s%s", a->user.function, a->backward ? " during backward" : "");
		return;
	}
	char entry[256];
	qualified(&a->entry, entry, sizeof(entry));
	snprintf(buf, len, "%s -> %s", a->user.function, entry);
}

void vrt_attribution_key(const struct vrt_attribution *a, char *buf, size_t len)
{
	char name[512];
	vrt_attribution_name(a, name, sizeof(name));
	snprintf(buf, len, "%s\x1f%s", name, a->python ? a->user.file : "");
}

/* ---- shares -------------------------------------------------------------------------------- */

#define MAX_SITES 4096
#define MAX_SKIP 3

struct placed {
	uint32_t stack;
	int64_t bytes;
	int skip;
	struct vrt_attribution a;
};

/*
 * A user function is a helper, to be looked through, when every site in it allocates at one
 * line (a thin wrapper around the allocator) and it is called from two or more places.
 */
static bool is_helper(const struct vrt_trace *t, const struct placed *p, size_t n, size_t i)
{
	const struct vrt_frame *u = &p[i].a.user;
	if (!p[i].a.has_user || p[i].skip >= MAX_SKIP)
		return false;
	int line = u->line;
	bool have_first = false, two = false;
	uint64_t first = 0;
	for (size_t k = 0; k < n; k++) {
		const struct vrt_frame *v = &p[k].a.user;
		if (!p[k].a.has_user || strcmp(v->function, u->function) || strcmp(v->file, u->file))
			continue;
		if (v->line != line)
			return false;
		struct vrt_attribution c;
		vrt_attribute(t, p[k].stack, p[k].skip + 1, &c);
		if (!c.has_user)
			return false;
		/* file names are the trace's interned strings: one pointer per file */
		uint64_t here = (uint64_t)c.user.line << 48 ^ (uint64_t)(uintptr_t)c.user.file;
		if (!have_first) {
			first = here;
			have_first = true;
		} else if (here != first) {
			two = true;
		}
	}
	return two;
}

static int by_bytes(const void *x, const void *y)
{
	const struct vrt_share *a = x, *b = y;
	return a->bytes != b->bytes ? (a->bytes > b->bytes ? -1 : 1) : strcmp(a->name, b->name);
}

static struct vrt_share *share_of(struct vrt_shares *s, const struct vrt_attribution *a)
{
	char name[256];
	vrt_attribution_name(a, name, sizeof(name));
	const char *file = a->python ? basename_of(a->user.file) : "";
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->v[i].name, name) && !strcmp(s->v[i].file, file))
			return &s->v[i];
	struct vrt_share *sh = &s->v[s->n++];
	memset(sh, 0, sizeof(*sh));
	snprintf(sh->name, sizeof(sh->name), "%s", name);
	snprintf(sh->file, sizeof(sh->file), "%s", file);
	sh->first_line = sh->last_line = a->python ? a->user.line : 0;
	if (a->has_entry)
		snprintf(sh->in, sizeof(sh->in), "%s:%d", basename_of(a->inner.file), a->inner.line);
	return sh;
}

int vrt_shares_build(const struct vrt_trace *t, const uint32_t *stacks, const int64_t *bytes, size_t n,
		     struct vrt_shares *out)
{
	memset(out, 0, sizeof(*out));
	size_t m = n < MAX_SITES ? n : MAX_SITES;
	struct placed *p = calloc(m ? m : 1, sizeof(*p));
	out->v = calloc(m ? m : 1, sizeof(*out->v));
	if (!p || !out->v) {
		free(p);
		vrt_shares_free(out);
		return VRT_E_NOMEM;
	}
	for (size_t i = 0; i < n; i++)
		out->total += bytes[i];
	for (size_t i = 0; i < m; i++) {
		p[i] = (struct placed){ .stack = stacks[i], .bytes = bytes[i] };
		vrt_attribute(t, stacks[i], 0, &p[i].a);
	}
	for (int round = 0; round < MAX_SKIP; round++) {
		bool moved = false;
		bool *helper = calloc(m ? m : 1, sizeof(*helper));
		if (!helper)
			break;
		for (size_t i = 0; i < m; i++)
			helper[i] = is_helper(t, p, m, i);
		for (size_t i = 0; i < m; i++)
			if (helper[i]) {
				p[i].skip++;
				vrt_attribute(t, p[i].stack, p[i].skip, &p[i].a);
				moved = true;
			}
		free(helper);
		if (!moved)
			break;
	}
	for (size_t i = 0; i < m; i++) {
		struct vrt_share *sh = share_of(out, &p[i].a);
		sh->bytes += p[i].bytes;
		int line = p[i].a.python ? p[i].a.user.line : 0;
		sh->first_line = line < sh->first_line ? line : sh->first_line;
		sh->last_line = line > sh->last_line ? line : sh->last_line;
	}
	free(p);
	if (out->n)
		qsort(out->v, out->n, sizeof(*out->v), by_bytes);
	return 0;
}

void vrt_shares_free(struct vrt_shares *s)
{
	free(s->v);
	memset(s, 0, sizeof(*s));
}

void vrt_shares_format(const struct vrt_shares *s, int max, char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = 0;
	for (size_t i = 0; i < s->n && (int)i < max && used < len; i++) {
		const struct vrt_share *sh = &s->v[i];
		char where[640] = "";
		if (*sh->file && sh->first_line != sh->last_line)
			snprintf(where, sizeof(where), " (%s:%d-%d%s%s)", sh->file, sh->first_line, sh->last_line,
				 *sh->in ? ", in " : "", sh->in);
		else if (*sh->file)
			snprintf(where, sizeof(where), " (%s:%d%s%s)", sh->file, sh->first_line, *sh->in ? ", in " : "",
				 sh->in);
		int k = snprintf(buf + used, len - used, "%s%.0f%% from %s%s", i ? ", " : "",
				 s->total ? 100.0 * (double)sh->bytes / (double)s->total : 0.0, sh->name, where);
		if (k < 0)
			break;
		used += (size_t)k;
	}
	if (used >= len && len > 4)
		memcpy(buf + len - 4, "...", 4);
}
