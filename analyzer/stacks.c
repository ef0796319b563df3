#define _GNU_SOURCE
/* SPDX-License-Identifier: MIT */
#include "stacks.h"

#include <stdlib.h>
#include <string.h>

#include "attribution.h"
#include "charset.h"
#include "json.h"

/* From libstdc++: the analyzer is C, but demangling is a solved problem. */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

struct demangled {
	const char *mangled;
	uint64_t serial; /* of the trace whose string table mangled points into */
	char *text;
};

static struct demangled *cache;
static size_t cache_cap, cache_used;

/* Keyed by pointer: names come from the trace's string table, which never moves while the trace
 * is open; and by trace, because a later trace's strings may reuse the addresses. Both are
 * hashed: the traces one process reads (a directory, the fuzz replays) reuse the same addresses,
 * and a slot from the pointer alone made their entries one long probe. */
static size_t demangle_slot(const char *name, uint64_t serial)
{
	uint64_t h = ((uint64_t)(uintptr_t)name ^ serial << 40 ^ serial) * 0x9e3779b97f4a7c15ull;
	return (size_t)(h >> 32) & (cache_cap - 1);
}

const char *vrt_demangle(const struct vrt_trace *t, const char *name)
{
	if (!name || name[0] != '_' || name[1] != 'Z')
		return name;
	if ((cache_used + 1) * 2 > cache_cap) {
		size_t old = cache_cap;
		struct demangled *prev = cache;
		cache_cap = old ? old * 2 : 1024;
		cache = calloc(cache_cap, sizeof(*cache));
		if (!cache) {
			cache = prev;
			cache_cap = old;
			return name;
		}
		for (size_t i = 0; i < old; i++) {
			if (!prev[i].mangled)
				continue;
			size_t j = demangle_slot(prev[i].mangled, prev[i].serial);
			while (cache[j].mangled)
				j = (j + 1) & (cache_cap - 1);
			cache[j] = prev[i];
		}
		free(prev);
	}
	size_t i = demangle_slot(name, t->serial);
	for (; cache[i].mangled; i = (i + 1) & (cache_cap - 1))
		if (cache[i].mangled == name && cache[i].serial == t->serial)
			return cache[i].text;
	int status = 0;
	char *text = __cxa_demangle(name, NULL, NULL, &status);
	cache[i] = (struct demangled){ name, t->serial, status == 0 && text ? text : (char *)name };
	cache_used++;
	return cache[i].text;
}

static const char *basename_of(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

static void native_frame(const struct vrt_trace *t, uint64_t addr, struct vrt_frame *f)
{
	const struct vrt_symbol_def *s = vrt_symbol(t, addr);
	const char *name = s && s->name ? vrt_string(t, s->name) : "";
	const char *module = "";
	if (s && s->module && s->module < t->tables.n_modules)
		module = vrt_string(t, t->tables.modules[s->module].path);
	*f = (struct vrt_frame){ VRT_FT_NATIVE, *name ? vrt_demangle(t, name) : "??", "", 0, module, addr,
				 s ? s->offset : 0 };
}

static void python_frame(const struct vrt_trace *t, uint64_t id, struct vrt_frame *f)
{
	const struct vrt_tables *tb = &t->tables;
	*f = (struct vrt_frame){ VRT_FT_PYTHON, "??", "", 0, "<python>", 0, 0 };
	if (id >= tb->n_pyframes)
		return;
	const struct vrt_pyframe_def *pf = &tb->pyframes[id];
	f->line = pf->line;
	if (pf->code < tb->n_pycodes) {
		f->function = vrt_string(t, tb->pycodes[pf->code].qualname);
		f->file = vrt_string(t, tb->pycodes[pf->code].filename);
	}
}

static bool is_eval_frame(const struct vrt_frame *f)
{
	return f->type == VRT_FT_NATIVE && strstr(f->function, "_PyEval_EvalFrameDefault") != NULL;
}

/* The raw lists, innermost first: native frames, and Python frames with group ends marked. */
struct raw_stack {
	struct vrt_frame native[VRT_MAX_FRAMES];
	int n_native;
	struct vrt_frame python[VRT_MAX_FRAMES];
	bool group_end[VRT_MAX_FRAMES]; /* python[i] is the last (outermost) of its eval group */
	int n_python, n_groups;
	struct vrt_frame label;
	bool has_label;
};

static void collect(const struct vrt_trace *t, uint32_t stack, struct raw_stack *rs)
{
	rs->n_native = rs->n_python = rs->n_groups = 0;
	rs->has_label = false;
	int guard = 0;
	for (uint32_t id = stack; id && id < t->tables.n_nodes && guard < 4 * VRT_MAX_FRAMES; guard++) {
		const struct vrt_stack_node *nd = &t->tables.nodes[id];
		switch (nd->kind) {
		case VRT_FRAME_NATIVE:
			if (rs->n_native < VRT_MAX_FRAMES)
				native_frame(t, nd->value, &rs->native[rs->n_native++]);
			break;
		case VRT_FRAME_PYTHON:
			if (rs->n_python < VRT_MAX_FRAMES) {
				rs->group_end[rs->n_python] = false;
				python_frame(t, nd->value, &rs->python[rs->n_python++]);
			}
			break;
		case VRT_FRAME_EVAL:
			/* Walking leaf to root, a boundary follows its group's outermost frame. */
			if (rs->n_python)
				rs->group_end[rs->n_python - 1] = true;
			rs->n_groups++;
			break;
		case VRT_FRAME_LABEL:
			rs->label = (struct vrt_frame){ VRT_FT_LABEL, vrt_string(t, nd->value), "", 0, "", 0, 0 };
			rs->has_label = true;
			break;
		}
		if (nd->parent >= id)
			break;
		id = nd->parent;
	}
}

static int put(struct vrt_frame *out, int n, int max, const struct vrt_frame *f)
{
	if (n < max)
		out[n] = *f;
	return n + 1;
}

/* Splices group k of Python frames in place of the k-th eval frame (both innermost first).
 * Groups may be empty (3.12+: an eval call that has returned to C before running any frame). */
static int splice(const struct raw_stack *rs, struct vrt_frame *out, int max)
{
	int n = 0, evals = 0;
	for (int i = 0; i < rs->n_native; i++)
		evals += is_eval_frame(&rs->native[i]);
	if (evals != rs->n_groups || !evals) {
		/* Cannot pair them: native frames up to the interpreter, then the Python stack. */
		int i = 0;
		for (; i < rs->n_native && !is_eval_frame(&rs->native[i]); i++)
			n = put(out, n, max, &rs->native[i]);
		for (int p = 0; p < rs->n_python; p++)
			n = put(out, n, max, &rs->python[p]);
		if (!rs->n_python)
			for (; i < rs->n_native; i++)
				n = put(out, n, max, &rs->native[i]);
		return n;
	}
	int p = 0, groups_left = rs->n_groups;
	for (int i = 0; i < rs->n_native; i++) {
		if (!is_eval_frame(&rs->native[i])) {
			n = put(out, n, max, &rs->native[i]);
			continue;
		}
		/* Emit this eval call's frames: up to and including the next group end. */
		while (p < rs->n_python) {
			n = put(out, n, max, &rs->python[p]);
			if (rs->group_end[p++])
				break;
		}
		groups_left--;
	}
	(void)groups_left;
	return n;
}

int vrt_stack_frames(const struct vrt_trace *t, uint32_t stack, enum vrt_stack_view view, struct vrt_frame *out,
		     int max)
{
	static struct raw_stack rs; /* large; the analyzer is single-threaded */
	collect(t, stack, &rs);
	int n = 0;
	if (rs.has_label)
		n = put(out, n, max, &rs.label);
	if (view == VRT_VIEW_NATIVE || (view == VRT_VIEW_PYTHON && !rs.n_python)) {
		for (int i = 0; i < rs.n_native; i++)
			n = put(out, n, max, &rs.native[i]);
	} else if (view == VRT_VIEW_PYTHON) {
		for (int i = 0; i < rs.n_python; i++)
			n = put(out, n, max, &rs.python[i]);
	} else {
		n += splice(&rs, out + (n < max ? n : max), max - (n < max ? n : max));
	}
	return n < max ? n : max;
}

/* Frames that only say "this is how memory is allocated", never the user's reason. */
static bool plumbing(const struct vrt_frame *f)
{
	static const char *const modules[] = { "libcuda.so", "libcudart", "libvramtrace", "libc10_cuda.so",
					       "libc.so", "libfakecuda", "libpthread" };
	static const char *const functions[] = { "cudaMalloc", "cuMem", "c10::cuda::", "at::native::empty",
						 "at::detail::empty", "c10::", "CUDACachingAllocator",
						 "libcudart_static_" /* a static runtime's stripped internals */ };
	const char *m = basename_of(f->module);
	for (size_t i = 0; i < sizeof(modules) / sizeof(modules[0]); i++)
		if (strstr(m, modules[i]))
			return true;
	for (size_t i = 0; i < sizeof(functions) / sizeof(functions[0]); i++)
		if (!strncmp(f->function, functions[i], strlen(functions[i])))
			return true;
	return false;
}

int vrt_headline_index(const struct vrt_frame *frames, int n)
{
	for (int i = 0; i < n; i++) /* the user's own code first (attribution.h) */
		if (vrt_frame_is_user_code(&frames[i]) || frames[i].type == VRT_FT_LABEL)
			return i;
	for (int i = 0; i < n; i++)
		if (frames[i].type == VRT_FT_PYTHON)
			return i;
	for (int i = 0; i < n; i++)
		if (!plumbing(&frames[i]) && strcmp(frames[i].function, "??"))
			return i;
	return n ? 0 : -1;
}

int vrt_stack_headline(const struct vrt_trace *t, uint32_t stack, struct vrt_frame *out)
{
	static struct vrt_frame frames[VRT_MAX_FRAMES];
	int n = vrt_stack_frames(t, stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES);
	int i = vrt_headline_index(frames, n);
	if (i < 0) {
		*out = (struct vrt_frame){ VRT_FT_LABEL, "[no stack]", "", 0, "", 0, 0 };
		return 0;
	}
	*out = frames[i];
	return 1;
}

bool vrt_frame_is_dispatch(const struct vrt_frame *f)
{
	static const char *const prefixes[] = { "c10::impl::", "at::_ops::", "c10::Dispatcher", "c10::KernelFunction",
						"at::TensorIteratorBase::", "at::TensorIterator::" };
	if (f->type != VRT_FT_NATIVE)
		return false;
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (!strncmp(f->function, prefixes[i], strlen(prefixes[i])))
			return true;
	return false;
}

/*
 * A library's file as its import path (".../site-packages/torch/nn/modules/module.py" ->
 * "torch/nn/modules/module.py", the standard library's ".../lib/python3.12/threading.py" ->
 * "threading.py"): text lines stay readable, and the JSON keeps the whole path. The user's own
 * files keep theirs: that is where they go to change something.
 */
const char *vrt_display_path(const char *file)
{
	static const char *const roots[] = { "/site-packages/", "/dist-packages/" };
	const char *shown = file;
	for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
		const char *at = strstr(file, roots[i]);
		if (at && at[strlen(roots[i])])
			shown = at + strlen(roots[i]);
	}
	if (shown != file)
		return shown;
	const char *lib = strstr(file, "/lib/python");
	if (lib && lib[11] >= '0' && lib[11] <= '9') {
		const char *rest = strchr(lib + 11, '/');
		if (rest && rest[1])
			return rest + 1;
	}
	return file;
}

void vrt_frame_format(const struct vrt_frame *f, char *buf, size_t len)
{
	switch (f->type) {
	case VRT_FT_PYTHON:
		snprintf(buf, len, "%s (%s:%d)", f->function, vrt_display_path(f->file), f->line);
		break;
	case VRT_FT_LABEL:
		snprintf(buf, len, "%s", f->function);
		break;
	case VRT_FT_NATIVE:
		if (strcmp(f->function, "??"))
			snprintf(buf, len, "%s+0x%llx (%s)", f->function, (unsigned long long)f->offset,
				 *f->module ? basename_of(f->module) : "?");
		else
			snprintf(buf, len, "0x%llx (%s)", (unsigned long long)f->address,
				 *f->module ? basename_of(f->module) : "?");
		break;
	}
}

/* ---- fitting a frame into a width ---------------------------------------------------------- */

static bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

/* The unit of text at s[i] that a cut keeps whole: an escape \xNN (a byte the reader or
 * charset.h shows so), four columns; else a UTF-8 character, one column. Its bytes. */
static size_t unit_bytes(const char *s, size_t n, size_t i)
{
	if (s[i] == '\\' && i + 3 < n && s[i + 1] == 'x' && is_hex(s[i + 2]) && is_hex(s[i + 3]))
		return 4;
	size_t k = 1;
	while (i + k < n && ((unsigned char)s[i + k] & 0xc0) == 0x80)
		k++;
	return k;
}

static int unit_columns(size_t bytes, const char *unit) { return unit[0] == '\\' && bytes == 4 ? 4 : 1; }

/* Columns of text: a UTF-8 character one, an escape four. */
static int columns_of(const char *s, size_t n)
{
	int c = 0;
	for (size_t i = 0; i < n; i += unit_bytes(s, n, i))
		c += unit_columns(unit_bytes(s, n, i), s + i);
	return c;
}

/* Bytes of s's first k columns (not splitting a character or an escape). */
static size_t head_bytes(const char *s, size_t n, int k)
{
	size_t i = 0;
	for (int c = 0; i < n;) {
		size_t b = unit_bytes(s, n, i);
		c += unit_columns(b, s + i);
		if (c > k)
			break;
		i += b;
	}
	return i;
}

/* Where s's last k columns begin (at a unit's start: at most k columns). */
static size_t tail_start(const char *s, size_t n, int k)
{
	int left = columns_of(s, n);
	size_t i = 0;
	while (i < n && left > k) {
		size_t b = unit_bytes(s, n, i);
		left -= unit_columns(b, s + i);
		i += b;
	}
	return i;
}

/* s's first head columns, the ellipsis (charset.h), then s from tail on. */
static void join_ends(const char *s, size_t n, int head, const char *tail, char *out, size_t len)
{
	snprintf(out, len, "%.*s%s%s", (int)head_bytes(s, n, head), s, vrt_ellipsis(), tail);
}

/* s in at most room columns into out: whole, or its head and tail around the ellipsis, the tail
 * the larger part (a name's last component says the most). */
static void cut_middle(const char *s, int room, char *out, size_t len)
{
	size_t n = strlen(s);
	if (columns_of(s, n) <= room) {
		snprintf(out, len, "%s", s);
		return;
	}
	int dots = vrt_ellipsis_columns();
	if (room <= dots) { /* no room for a character beside it: as much of the ellipsis as fits */
		if (room == dots)
			snprintf(out, len, "%s", vrt_ellipsis());
		else
			snprintf(out, len, "%.*s", room > 0 ? room : 0, "..."); /* ASCII's, shorter */
		return;
	}
	int head = (room - dots) / 3, tail = room - dots - head;
	join_ends(s, n, head, s + tail_start(s, n, tail), out, len);
}

/* " (/a/b/c.py:12)" in room columns: its opening, then its end ("…c.py:12)"). */
static void cut_keeping_end(const char *s, int room, char *out, size_t len)
{
	size_t n = strlen(s);
	if (columns_of(s, n) <= room) {
		snprintf(out, len, "%s", s);
		return;
	}
	size_t open = strcspn(s, "(");
	int dots = vrt_ellipsis_columns();
	int head = open < n && columns_of(s, open + 1) + dots + 1 <= room ? columns_of(s, open + 1) : 0;
	int tail = room - head - dots;
	if (tail < 1) {
		cut_middle(s, room, out, len);
		return;
	}
	join_ends(s, n, head, s + tail_start(s, n, tail), out, len);
}

/* A name in room columns: its last component ("setup_buckets", "create_out(…)") whole where it
 * fits beside an ellipsis, else its two ends. */
static void cut_name(const char *name, int room, char *out, size_t len)
{
	size_t n = strlen(name), last = 0;
	int depth = 0;
	for (size_t i = 0; i < n; i++) {
		depth += name[i] == '(' || name[i] == '<' ? 1 : name[i] == ')' || name[i] == '>' ? -1 : 0;
		if (!depth && (name[i] == '.' || (name[i] == ':' && name[i + 1] == ':')))
			last = i;
	}
	int tail = columns_of(name + last, n - last), dots = vrt_ellipsis_columns();
	if (!last || columns_of(name, n) <= room || tail + dots + 1 > room) {
		cut_middle(name, room, out, len);
		return;
	}
	join_ends(name, n, room - dots - tail, name + last, out, len);
}

/* A C++ signature's argument list (the group the last ')' closes, with nothing but qualifiers
 * after it) as "(" ellipsis ")": the part of a demangled name a reader needs least. */
static void drop_arguments(const char *name, char *out, size_t len)
{
	const char *close = strrchr(name, ')');
	const char *open = NULL;
	int depth = 0;
	for (const char *p = close; p; p = p > name ? p - 1 : NULL) {
		depth += *p == ')' ? 1 : *p == '(' ? -1 : 0;
		if (!depth) {
			open = p;
			break;
		}
	}
	if (!open || close - open < 2 || strstr(close, "::") || open == name)
		snprintf(out, len, "%s", name);
	else
		snprintf(out, len, "%.*s(%s%s", (int)(open - name), name, vrt_ellipsis(), close);
}

/* Widths are measured on the text as it will be shown (charset.h: outside UTF-8, a byte above
 * 0x7f takes four columns). */
void vrt_frame_fit(const struct vrt_frame *f, char *buf, size_t len, int columns)
{
	char formatted[1024], function[1024];
	vrt_frame_format(f, formatted, sizeof(formatted));
	vrt_charset_shown(formatted, buf, len);
	if (columns <= 0 || columns_of(buf, strlen(buf)) <= columns)
		return;
	/* the name, and what follows it: " (file:line)", "+0x.. (module)" */
	vrt_charset_shown(f->function, function, sizeof(function));
	size_t name_len = f->type == VRT_FT_LABEL || (f->type == VRT_FT_NATIVE && !strcmp(f->function, "??"))
				  ? 0 : strlen(function);
	const char *rest = buf + (name_len <= strlen(buf) ? name_len : 0);
	if (!name_len) { /* no name: the place's two ends (its file:line) stay */
		char whole[1024];
		snprintf(whole, sizeof(whole), "%s", buf);
		cut_middle(whole, columns, buf, len);
		return;
	}
	/* The place stays whole while the name keeps 12 columns; where it would not, the name keeps
	 * half the room (all it needs, if less) and the place what is left, its end (the file and
	 * line) kept: "…Optimizer.setup_buckets (…stage_1_and_2.py:3266)" */
	char name[1024], fitted[1024], place[1024];
	drop_arguments(function, name, sizeof(name));
	int room = columns - columns_of(rest, strlen(rest));
	if (room >= 12) {
		snprintf(place, sizeof(place), "%s", rest);
	} else {
		int name_columns = columns_of(name, strlen(name)), half = columns / 2 > 12 ? columns / 2 : 12;
		int name_room = name_columns < half ? name_columns : half;
		cut_keeping_end(rest, columns - name_room, place, sizeof(place));
		room = columns - columns_of(place, strlen(place));
	}
	cut_name(name, room, fitted, sizeof(fitted));
	snprintf(buf, len, "%s%s", fitted, place);
}

void vrt_frame_json(FILE *out, const struct vrt_frame *f)
{
	fputs("{\"function\": ", out);
	json_string(out, f->function);
	fputs(", \"file\": ", out);
	json_string(out, f->file);
	fprintf(out, ", \"line\": %d, \"module\": ", f->line);
	json_string(out, f->module);
	fprintf(out, ", \"kind\": \"%s\"",
		f->type == VRT_FT_PYTHON ? "python" : f->type == VRT_FT_LABEL ? "label" : "native");
	if (f->type == VRT_FT_NATIVE)
		fprintf(out, ", \"address\": \"0x%llx\"", (unsigned long long)f->address);
	fputc('}', out);
}

static unsigned char ascii_lower(unsigned char c) { return c >= 'A' && c <= 'Z' ? (unsigned char)(c | 0x20) : c; }

/* strcasestr for ASCII, whatever the locale: the needles are a few bytes and the frames' names
 * short, where glibc's two-way search spends most of its time preparing the needle. */
static bool contains_ignoring_case(const char *haystack, const char *needle)
{
	const unsigned char *h = (const unsigned char *)haystack, *n = (const unsigned char *)needle;
	if (!n[0])
		return true;
	for (; *h; h++) {
		if (ascii_lower(*h) != ascii_lower(n[0]))
			continue;
		size_t k = 1;
		while (n[k] && ascii_lower(h[k]) == ascii_lower(n[k]))
			k++;
		if (!n[k])
			return true;
	}
	return false;
}

bool vrt_frames_mention(const struct vrt_frame *frames, int n, const char *needle)
{
	for (int i = 0; i < n; i++)
		if (contains_ignoring_case(frames[i].function, needle) || contains_ignoring_case(frames[i].module, needle) ||
		    contains_ignoring_case(frames[i].file, needle))
			return true;
	return false;
}

/* Appends s, lowered, and the end mark to the text being built; false without memory. */
static bool text_append(char **text, size_t *len, size_t *cap, const char *s)
{
	size_t n = strlen(s);
	if (*len + n + 2 > *cap) {
		size_t want = (*len + n + 2) * 2;
		char *grown = realloc(*text, want);
		if (!grown)
			return false;
		*text = grown;
		*cap = want;
	}
	for (size_t i = 0; i < n; i++)
		(*text)[*len + i] = (char)ascii_lower((unsigned char)s[i]);
	*len += n;
	(*text)[(*len)++] = VRT_TEXT_END_MARK;
	(*text)[*len] = '\0';
	return true;
}

const char *vrt_frames_text(const struct vrt_frame *frames, int n)
{
	static char *text;
	static size_t cap;
	size_t len = 0;
	for (int i = 0; i < n; i++)
		if (!text_append(&text, &len, &cap, frames[i].function) || !text_append(&text, &len, &cap, frames[i].module) ||
		    !text_append(&text, &len, &cap, frames[i].file))
			return NULL;
	return len ? text : "";
}

bool vrt_text_mentions(const char *text, const char *needle)
{
	char lowered[256];
	size_t n = strlen(needle);
	if (!*text) /* no frames: nothing mentions anything, the empty needle included */
		return false;
	if (n >= sizeof(lowered))
		return contains_ignoring_case(text, needle);
	for (size_t i = 0; i <= n; i++)
		lowered[i] = (char)ascii_lower((unsigned char)needle[i]);
	return strstr(text, lowered) != NULL;
}

bool vrt_stack_mentions(const struct vrt_trace *t, uint32_t stack, const char *needle)
{
	static struct vrt_frame frames[VRT_MAX_FRAMES];
	int n = vrt_stack_frames(t, stack, VRT_VIEW_MERGED, frames, VRT_MAX_FRAMES);
	return vrt_frames_mention(frames, n, needle);
}

bool vrt_frames_have_python(const struct vrt_frame *frames, int n)
{
	for (int i = 0; i < n; i++)
		if (frames[i].type == VRT_FT_PYTHON)
			return true;
	return false;
}
