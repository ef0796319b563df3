/* SPDX-License-Identifier: MIT */
/*
 * The collector's side of the trace file: naming and creating it on the first recorded event,
 * encoding events into the current chunk, describing new definitions (threads, symbols,
 * modules, Python code) before the events that use them, checkpoints, and the end.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "attach.h"
#include "collector.h"
#include "vramtrace/error.h"
#include "vramtrace/output_place.h"
#include "vramtrace/rings.h"

/* ---- naming ----------------------------------------------------------------------------- */

static int env_int(const char *name)
{
	const char *s = getenv(name);
	char *end;
	long v = s && *s ? strtol(s, &end, 10) : -1;
	return s && *s && !*end && v >= 0 && v < 1000000 ? (int)v : -1;
}

static bool is_directory_target(const char *out)
{
	struct stat st;
	size_t n = strlen(out);
	return (n && out[n - 1] == '/') || (stat(out, &st) == 0 && S_ISDIR(st.st_mode));
}

/*
 * A directory gets "vramtrace.<pid>[.rank<R>].vrt". A file name is taken exactly by the first
 * process that records anything; every other process writes "<name>.<pid>.vrt" beside it.
 */
static int output_path(char *path, size_t len, bool exact)
{
	const char *out = vrt_cfg.output[0] ? vrt_cfg.output : ".";
	int pid = (int)getpid(), rank = env_int("RANK");
	int n;
	if (!vrt_cfg.output[0] || is_directory_target(out)) {
		const char *sep = out[strlen(out) - 1] == '/' ? "" : "/";
		n = rank >= 0 ? snprintf(path, len, "%s%svramtrace.%d.rank%d.vrt", out, sep, pid, rank)
			      : snprintf(path, len, "%s%svramtrace.%d.vrt", out, sep, pid);
	} else if (exact) {
		n = snprintf(path, len, "%s", out);
	} else {
		size_t stem = strlen(out);
		if (stem > 4 && !strcmp(out + stem - 4, ".vrt"))
			stem -= 4;
		n = rank >= 0 ? snprintf(path, len, "%.*s.rank%d.%d.vrt", (int)stem, out, rank, pid)
			      : snprintf(path, len, "%.*s.%d.vrt", (int)stem, out, pid);
	}
	return n > 0 && (size_t)n < len ? 0 : VRT_E_ARG;
}

/* Why the place asked for was refused (output_place.h), and the last name a failed create tried:
 * for the one line that says why there is no trace. */
static char refused[1200];
static char tried[4096];

static int create_file(struct collector *c)
{
	char path[4096];
	bool directory = !vrt_cfg.output[0] || is_directory_target(vrt_cfg.output);
	int fd = VRT_E_IO;
	if (!vrt_output_place_ok(vrt_cfg.output[0] ? vrt_cfg.output : ".", directory, refused, sizeof(refused)))
		return VRT_E_PERM;
	refused[0] = 0;
	if (!directory && !output_path(path, sizeof(path), true)) {
		snprintf(tried, sizeof(tried), "%s", path);
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0)
			snprintf(c->path, sizeof(c->path), "%s", path);
	}
	if (fd < 0 && !output_path(path, sizeof(path), false)) {
		snprintf(tried, sizeof(tried), "%s", path);
		fd = vrt_trace_create(path, c->path, sizeof(c->path));
	}
	if (fd < 0)
		return fd;
	/* Keep clear of the low descriptors programs assume are theirs. */
	int high = fcntl(fd, F_DUPFD_CLOEXEC, 512);
	if (high >= 0) {
		close(fd);
		fd = high;
	}
	return fd;
}

/* ---- the rings sidecar (include/vramtrace/rings.h) ------------------------------------------ */

/*
 * TRACE.rings beside the trace, made right after it (so before the first event is written:
 * vrt_collector_want_file): VRAMTRACE_RINGS slots, sparse. Thread buffers made from now on take
 * a slot (tbuf.c). Anything in the way (a name taken, a full disk, a read-only directory): said
 * once, and buffers stay in private memory: the job and its trace go on as before.
 */
static char rings_path[4096 + 8];
static pid_t rings_owner; /* a forked child inherits the name, not the file */

static void rings_refused(const char *what)
{
	static bool said;
	if (!said && !vrt_cfg.quiet)
		vrt_log("thread buffers stay in private memory (a SIGKILL loses their last events): %s %s: %s", what,
			rings_path, strerror(errno));
	said = true;
	rings_path[0] = 0;
}

static void rings_create(struct collector *c)
{
	uint64_t slot_size = vrt_tbuf_slot_header() + vrt_cfg.thread_buffer;
	uint32_t n = (uint32_t)vrt_cfg.rings;
	struct rlimit fsize;
	/* Under a file size limit, an application thread allocating a slot's blocks past it would
	 * get SIGXFSZ (only the collector blocks signals): no sidecar then, silently. */
	if (vrt_cfg.rings <= 0 || (!getrlimit(RLIMIT_FSIZE, &fsize) && fsize.rlim_cur != RLIM_INFINITY) ||
	    snprintf(rings_path, sizeof(rings_path), "%s%s", c->path, VRT_RINGS_SUFFIX) >= (int)sizeof(rings_path)) {
		rings_path[0] = 0;
		return;
	}
	int fd = open(rings_path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return rings_refused("cannot create");
	int high = fcntl(fd, F_DUPFD_CLOEXEC, 512);
	if (high >= 0) {
		close(fd);
		fd = high;
	}
	struct vrt_rings_header *h = MAP_FAILED;
	/* Sparse: a slot's blocks are allocated when a thread takes it (tbuf.c, slot_map). */
	if (ftruncate(fd, (off_t)(VRT_RINGS_HEADER_SIZE + n * slot_size)) ||
	    (h = mmap(NULL, VRT_RINGS_HEADER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		int e = errno;
		unlink(rings_path);
		close(fd);
		errno = e;
		return rings_refused("cannot size");
	}
	h->version = VRT_RINGS_VERSION;
	h->raw_layout = VRT_RINGS_RAW_LAYOUT;
	h->n_slots = n;
	h->slot_header = (uint32_t)vrt_tbuf_slot_header();
	h->slot_size = slot_size;
	h->capacity = vrt_cfg.thread_buffer;
	h->pid = (int32_t)getpid();
	h->ts_unit_ns = (uint32_t)vrt_cfg.ts_unit_ns;
	h->start_monotonic_ns = c->t0_ns;
	memcpy(h->magic, VRT_RINGS_MAGIC, 8); /* last: a reader takes a header with it as complete */
	rings_owner = getpid();
	/* The fd stays open for the process's life: a thread mapping a slot may still hold it. */
	vrt_tbuf_use_rings(fd, h);
}

/* The trace is closed (or ended by an error): nothing there to recover. */
static void rings_remove(void)
{
	vrt_tbuf_drop_rings();
	if (rings_path[0] && rings_owner == getpid())
		unlink(rings_path);
	rings_path[0] = 0;
}

/* ---- tables ----------------------------------------------------------------------------- */

static void emit_table(struct collector *c, const struct vrt_record *r) { vrt_intern_emit(&c->intern, r); }

static uint32_t string_id(struct collector *c, const char *s) { return vrt_intern_string(&c->intern, s, strlen(s)); }

static void emit_info(struct collector *c, const char *key, const char *value)
{
	struct vrt_record r = { .op = VRT_OP_INFO, .id = string_id(c, key), .id2 = string_id(c, value) };
	emit_table(c, &r);
}

void vrt_output_info(struct collector *c, const char *key, const char *value) { emit_info(c, key, value); }

static void write_kept_fact(void *c, const char *key, const char *value) { emit_info(c, key, value); }

static void write_kept_exiting(void *ctx, uint64_t at_ns, int stage)
{
	struct collector *c = ctx;
	struct vrt_record r = { .op = VRT_OP_EXITING, .api = VRT_API_USER_API, .ts = vrt_ts_units(c, at_ns),
				.id = (uint64_t)stage };
	vrt_output_event(c, 0, &r);
}

static const struct vrt_kept_writer kept_writer = { write_kept_fact, write_kept_exiting };

static void emit_process_info(struct collector *c)
{
	char buf[4096];
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n > 0) {
		for (ssize_t i = 0; i < n - 1; i++)
			if (!buf[i])
				buf[i] = ' ';
		buf[n] = 0;
		emit_info(c, "cmdline", buf);
	}
	n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
	if (n > 0) {
		buf[n] = 0;
		emit_info(c, "exe", buf);
	}
	emit_info(c, "vramtrace", VRAMTRACE_VERSION);
	snprintf(buf, sizeof(buf), "%d", vrt_cfg.stack_depth);
	emit_info(c, "stack_depth", buf);
	emit_info(c, "mode", atomic_load(&vrt_mode) == VRT_MODE_FULL ? "full" : "armed");
	const char *vars[] = { "RANK", "LOCAL_RANK", "WORLD_SIZE", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
			       "PYTORCH_NO_CUDA_MEMORY_CACHING", "CUDA_VISIBLE_DEVICES", "NCCL_CUMEM_ENABLE" };
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);
		if (v) {
			snprintf(buf, sizeof(buf), "env.%s", vars[i]);
			emit_info(c, buf, v);
		}
	}
}

void vrt_output_name_thread(struct collector *c, struct vrt_tbuf *b, uint64_t ts_ns)
{
	if (b->index >= c->cap_threads) {
		size_t cap = c->cap_threads ? c->cap_threads : 64;
		while (cap <= b->index)
			cap *= 2;
		uint32_t *t = realloc(c->threads_described, cap * sizeof(*t));
		if (!t)
			return;
		memset(t + c->cap_threads, 0, (cap - c->cap_threads) * sizeof(*t));
		c->threads_described = t;
		c->cap_threads = cap;
	}
	b->name_checked_ns = ts_ns;
	char path[64], name[64] = "?";
	snprintf(path, sizeof(path), "/proc/self/task/%d/comm", (int)b->tid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, name, sizeof(name) - 1);
		close(fd);
		name[n > 0 ? n : 0] = 0;
		char *nl = strchr(name, '\n');
		if (nl)
			*nl = 0;
	}
	uint32_t name_id = string_id(c, name);
	if (c->threads_described[b->index] == name_id + 1)
		return; /* unchanged name (threads often rename themselves once after starting) */
	c->threads_described[b->index] = name_id + 1;
	struct vrt_record r = { .op = VRT_OP_THREAD_INFO, .id = b->index, .aux = (uint64_t)b->tid, .id2 = name_id };
	emit_table(c, &r);
}

static void emit_python_tables(struct collector *c)
{
	uint32_t codes = vrt_python_code_count();
	for (; c->py_codes_done < codes; c->py_codes_done++) {
		const struct vrt_pycode *pc = vrt_python_code(c->py_codes_done);
		struct vrt_record r = { .op = VRT_OP_PYCODE, .id = c->py_codes_done, .id2 = string_id(c, pc->filename),
					.aux = string_id(c, pc->qualname), .aux2 = pc->firstlineno };
		emit_table(c, &r);
	}
	uint32_t frames = vrt_python_frame_count();
	for (; c->py_frames_done < frames; c->py_frames_done++) {
		const struct vrt_pyframe *pf = vrt_python_frame(c->py_frames_done);
		struct vrt_record r = { .op = VRT_OP_PYFRAME, .id = c->py_frames_done, .id2 = pf->code,
					.aux = (uint64_t)(uint32_t)pf->lasti, .aux2 = (uint64_t)(uint32_t)pf->line };
		emit_table(c, &r);
	}
}

static void emit_symbols(struct collector *c)
{
	if (!c->n_to_symbolize)
		return;
	struct vrt_symbol *syms = calloc(c->n_to_symbolize, sizeof(*syms));
	if (!syms)
		return;
	for (size_t i = 0; i < c->n_to_symbolize; i++)
		vrt_symbolize(c->to_symbolize[i], &syms[i]);
	const struct vrt_module_info *mods[64];
	int n;
	while ((n = vrt_symbols_new_modules(mods, 64)) > 0) {
		for (int i = 0; i < n; i++) {
			struct vrt_record r = { .op = VRT_OP_MODULE, .id = mods[i]->id, .id2 = string_id(c, mods[i]->path),
						.addr = mods[i]->base, .size = mods[i]->span, .bytes = mods[i]->build_id,
						.bytes_len = mods[i]->build_id_len };
			emit_table(c, &r);
		}
	}
	for (size_t i = 0; i < c->n_to_symbolize; i++) {
		struct vrt_record r = { .op = VRT_OP_SYMBOL, .addr = c->to_symbolize[i], .id = syms[i].module_id,
					.id2 = syms[i].name ? string_id(c, syms[i].name) : 0, .aux = syms[i].offset };
		emit_table(c, &r);
	}
	free(syms);
	c->n_to_symbolize = 0;
}

/* The ring's first wrap needs every definition again, in one chunk. */
static long dump_tables(void *ctx, uint8_t **out)
{
	struct collector *c = ctx;
	*out = malloc(c->all_tables.len ? c->all_tables.len : 1);
	if (!*out)
		return VRT_E_NOMEM;
	memcpy(*out, c->all_tables.data, c->all_tables.len);
	return (long)c->all_tables.len;
}

/* ---- the file --------------------------------------------------------------------------- */

static uint64_t now_ts(const struct collector *c) { return vrt_ts_units(c, vrt_now_ns()); }

/*
 * The trace ends at the first error, and its state block says so (rewriting the header's page
 * works on a full disk and under a file size limit too). Events encoded but not written count
 * as lost. Then the preload disables itself: its one line (why) is printed even when quiet.
 */
static void end_output(struct collector *c, int detail, const char *why)
{
	if (c->output_failed)
		return;
	c->output_failed = true;
	if (c->writer) {
		uint64_t written = vrt_writer_events_written(c->writer);
		vrt_writer_count_events(c->writer, written, c->events_lost + (c->events_written - written));
		vrt_writer_set_end(c->writer, VRT_END_WRITE_FAILED, detail, now_ts(c));
		vrt_writer_close(c->writer);
		c->writer = NULL;
	}
	rings_remove();
	vrt_tbuf_commit_all(); /* nothing more is written: the threads' buffers must not fill up */
	atomic_store(&vrt_mode, VRT_MODE_OFF);
	vrt_disable(why);
}

static void output_error(struct collector *c, int err)
{
	int detail = err == VRT_E_IO || err == VRT_E_PERM ? errno : err;
	char why[1500];
	if (refused[0] && !c->path[0])
		snprintf(why, sizeof(why), "not writing a trace to %.200s: %s", vrt_cfg.output[0] ? vrt_cfg.output : ".",
			 refused);
	else
		snprintf(why, sizeof(why), "cannot write the trace %.900s: %s", c->path[0] ? c->path : tried,
			 detail > 0 ? strerror(detail) : vrt_strerror(detail));
	end_output(c, refused[0] && !c->path[0] ? VRT_E_PERM : detail, why);
}

/* A checkpoint that the ring cannot hold would leave a window with no complete one in it. */
static void ring_too_small(struct collector *c, uint64_t items, uint64_t ring_needed)
{
	char why[1024];
	unsigned long long mib = (ring_needed + (1u << 20) - 1) >> 20;
	snprintf(why, sizeof(why),
		 "the trace %.900s ends here: the live set (%llu allocations) needs --ring of at least %lluM", c->path,
		 (unsigned long long)items, mib);
	end_output(c, VRT_E_SIZE, why);
}

_Atomic bool vrt_output_opened;

int vrt_output_open(struct collector *c)
{
	if (c->writer)
		return 0;
	if (c->output_failed)
		return VRT_E_IO;
	int fd = create_file(c);
	if (fd < 0) {
		output_error(c, fd);
		return fd;
	}
	struct vrt_writer_options o = {
		.fd = fd, .ring_bytes = vrt_cfg.ring_bytes, .ts_unit_ns = (uint32_t)vrt_cfg.ts_unit_ns,
		.flags = (vrt_cfg.mode == VRT_MODE_ARMED ? VRT_FILE_ARMED : 0) |
			 (vrt_attach_injected() ? VRT_FILE_ATTACHED : 0),
		.pid = (int32_t)getpid(),
		.ppid = (int32_t)getppid(), .rank = env_int("RANK"), .local_rank = env_int("LOCAL_RANK"),
		.world_size = env_int("WORLD_SIZE"), .start_realtime_ns = c->t0_realtime_ns,
		.start_monotonic_ns = c->t0_ns, .dump_tables = dump_tables, .dump_ctx = c,
	};
	if (!c->intern.all && vrt_cfg.ring_bytes)
		c->intern.all = &c->all_tables;
	int rc = vrt_writer_open(&c->writer, &o);
	if (rc) {
		int e = errno;
		close(fd);
		errno = e;
		output_error(c, rc);
		return rc;
	}
	atomic_store_explicit(&vrt_output_opened, true, memory_order_release);
	if (!vrt_cfg.quiet)
		vrt_log("tracing to %s", c->path);
	emit_process_info(c);
	vrt_info_write_kept(&kept_writer, c);
	rings_create(c);
	if (rings_path[0]) {
		const char *base = strrchr(rings_path, '/');
		emit_info(c, "rings", base ? base + 1 : rings_path);
	}
	return 0;
}

static void put_chunk(struct collector *c, enum vrt_chunk_type type, struct vrt_buf *b)
{
	if (!b->len || !c->writer)
		return;
	/* Durability (struct vrt_tbuf, tail): what this chunk makes durable is noted in each buffer
	 * before it is written, and given back to the threads after. The state block the writer
	 * puts after the chunk counts the chunk's events (every event encoded so far): it is the
	 * last word on them once the tails move (a kill before it: recover counts the chunk). */
	uint64_t in_file = vrt_writer_events_written(c->writer);
	if (type == VRT_CHUNK_EVENTS) {
		vrt_tbuf_mark_pending(vrt_writer_next_seq(c->writer));
		vrt_writer_count_events(c->writer, c->events_written, c->events_lost);
	}
	int rc = vrt_writer_put(c->writer, type, b->data, b->len);
	b->len = 0;
	if (rc < 0) {
		vrt_writer_count_events(c->writer, in_file, c->events_lost); /* the chunk is not in the file */
		output_error(c, rc);
		return;
	}
	if (type == VRT_CHUNK_EVENTS)
		vrt_tbuf_commit_pending();
	if (rc == VRT_HINT_CHECKPOINT)
		vrt_output_checkpoint(c, VRT_CP_PERIODIC);
}

static void put_tables(struct collector *c)
{
	emit_symbols(c);
	emit_python_tables(c);
	put_chunk(c, VRT_CHUNK_TABLES, &c->pending_tables);
}

static void put_events(struct collector *c)
{
	c->chunk_thread = 0;
	c->delta = (struct vrt_delta){ 0, 0 };
	put_chunk(c, VRT_CHUNK_EVENTS, &c->events);
}

/* Everything processed so far is in the file after this (or nothing more will be): the threads'
 * buffers are free up to what was processed. */
void vrt_output_flush(struct collector *c)
{
	bool wrote = false;
	if (c->writer) {
		uint64_t seq = vrt_writer_next_seq(c->writer);
		put_tables(c);
		put_events(c);
		wrote = c->writer && vrt_writer_next_seq(c->writer) != seq;
	}
	/* The state block only when something changed: an idle process writes nothing. */
	if (c->writer && (wrote || vrt_writer_events_written(c->writer) != c->events_written)) {
		vrt_writer_count_events(c->writer, c->events_written, c->events_lost);
		vrt_writer_sync(c->writer);
	}
	vrt_tbuf_commit_all();
}

void vrt_output_events_full(struct collector *c)
{
	put_tables(c);
	put_events(c);
}

uint32_t vrt_output_label_stack(struct collector *c, const char *label)
{
	bool created;
	return vrt_intern_node(&c->intern, 0, VRT_FRAME_LABEL, string_id(c, label), &created);
}

/* ---- checkpoints ------------------------------------------------------------------------ */

/*
 * A checkpoint is encoded into one buffer, cut at record boundaries into parts that each make
 * one chunk (docs/trace-format.md, "Checkpoints"); every part starts a fresh delta state.
 */
struct cp_encoder {
	struct vrt_buf buf;
	struct vrt_delta delta;
	size_t part_start, part_max;
	size_t *ends;
	size_t n_ends, cap_ends;
	bool failed;
};

static void cp_cut(struct cp_encoder *e)
{
	if (e->n_ends == e->cap_ends) {
		size_t cap = e->cap_ends ? 2 * e->cap_ends : 16;
		size_t *n = realloc(e->ends, cap * sizeof(*n));
		if (!n) {
			e->failed = true;
			return;
		}
		e->ends = n;
		e->cap_ends = cap;
	}
	e->ends[e->n_ends++] = e->buf.len;
	e->part_start = e->buf.len;
	e->delta = (struct vrt_delta){ 0, 0 };
}

static void cp_encode(struct cp_encoder *e, const struct vrt_record *r)
{
	if (e->buf.len - e->part_start + VRT_RECORD_MAX_FIXED > e->part_max && e->buf.len > e->part_start)
		cp_cut(e);
	if (!e->failed && !vrt_buf_put_record(&e->buf, r, &e->delta))
		e->failed = true;
}

/* Encodes every live item; returns how many. */
static uint64_t cp_encode_live(struct collector *c, struct cp_encoder *e)
{
	uint32_t unknown = 0;
	uint64_t count = 0;
	for (size_t i = 0; i < c->live.used; i++) {
		struct vrt_item l;
		vrt_live_at(&c->live, i, &l);
		uint32_t stack = l.stack;
		if (!stack) {
			if (!unknown)
				unknown = vrt_output_label_stack(c, "[allocated before tracing started]");
			stack = unknown;
		}
		/* j: the op that made it, a seed as such; y: a handle's references, a mapping's offset */
		uint32_t made = l.seeded && l.op == VRT_OP_ALLOC ? VRT_OP_SEED : l.op;
		struct vrt_record r = { .op = VRT_OP_CP_LIVE, .id2 = made, .ts = l.ts, .api = l.api, .device = l.device,
					.kind = l.kind, .addr = l.addr, .size = l.size, .aux = l.aux,
					.aux2 = l.space == VRT_SPACE_HANDLE ? l.refs : l.aux2, .stream = l.stream,
					.stack = stack };
		cp_encode(e, &r);
		count++;
	}
	return count;
}

static void cp_encode_phases(struct collector *c, struct cp_encoder *e)
{
	for (size_t i = 0; i < c->n_phases; i++) {
		struct vrt_record r = { .op = VRT_OP_CP_PHASE, .id = c->phases[i].name_id, .aux = c->phases[i].entered,
					.aux2 = (uint64_t)(c->phases[i].depth > 0 ? c->phases[i].depth : 0) };
		cp_encode(e, &r);
	}
}

/* Writes the parts back to back; a live set too large for the ring ends the trace, cleanly. */
static void cp_put(struct collector *c, struct cp_encoder *e, uint64_t items)
{
	uint64_t ring_needed = 0;
	int rc = e->failed ? VRT_E_NOMEM
			   : vrt_writer_put_parts(c->writer, VRT_CHUNK_CHECKPOINT, e->buf.data, e->ends, e->n_ends,
						  &ring_needed);
	if (rc == VRT_E_SIZE && ring_needed)
		ring_too_small(c, items, ring_needed);
	else if (rc < 0)
		output_error(c, rc);
}

void vrt_output_checkpoint(struct collector *c, int reason)
{
	if (!c->writer)
		return;
	put_tables(c);
	put_events(c);
	if (!c->writer)
		return;
	/* Parts no larger than event chunks, so that the padding before a wrap stays as small. */
	size_t max_raw = vrt_writer_max_raw(c->writer);
	struct cp_encoder e = { .part_max = max_raw < VRT_EVENTS_CHUNK_BYTES ? max_raw : VRT_EVENTS_CHUNK_BYTES };
	struct vrt_record begin = { .op = VRT_OP_CP_BEGIN, .ts = now_ts(c), .id = (uint64_t)reason,
				    .aux = c->events_written, .aux2 = c->events_lost };
	cp_encode(&e, &begin);
	uint64_t count = cp_encode_live(c, &e);
	cp_encode_phases(c, &e);
	struct vrt_record end = { .op = VRT_OP_CP_END, .id = count };
	cp_encode(&e, &end);
	cp_cut(&e);
	put_tables(c); /* the label stack, if one was just made */
	if (c->writer)
		cp_put(c, &e, count);
	vrt_buf_free(&e.buf);
	free(e.ends);
}

void vrt_output_finish(struct collector *c, int reason, int detail)
{
	if (!c->writer)
		return;
	vrt_output_checkpoint(c, VRT_CP_EXIT);
	vrt_output_flush(c);
	if (!c->writer)
		return;
	vrt_writer_set_end(c->writer, (uint32_t)reason, detail, now_ts(c));
	vrt_writer_close(c->writer);
	c->writer = NULL;
	c->output_failed = true; /* nothing more goes to this process's trace */
	rings_remove();
}

/* ---- snapshot --------------------------------------------------------------------------- */

static int copy_file(int from, int to)
{
	off_t in = 0, out = 0;
	struct stat st;
	if (fstat(from, &st))
		return VRT_E_IO;
	while (in < st.st_size) {
		ssize_t n = copy_file_range(from, &in, to, &out, (size_t)(st.st_size - in), 0);
		if (n <= 0)
			return VRT_E_IO;
	}
	return 0;
}

int vrt_output_snapshot(struct collector *c, const char *path, char *reply, size_t reply_len)
{
	vrt_collector_drain(c);
	if (!c->writer && atomic_load(&vrt_mode) != VRT_MODE_FULL) {
		snprintf(reply, reply_len, "tracing is armed, not recording: run `vramtrace attach` first");
		return VRT_E_UNSUPPORTED;
	}
	if (vrt_output_ensure(c))
		return VRT_E_IO;
	vrt_output_checkpoint(c, VRT_CP_SNAPSHOT);
	vrt_output_flush(c);
	if (!c->writer)
		return VRT_E_IO;
	int to = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (to < 0) {
		snprintf(reply, reply_len, "cannot create %s: %s", path, strerror(errno));
		return VRT_E_IO;
	}
	int rc = copy_file(vrt_writer_fd(c->writer), to);
	close(to);
	snprintf(reply, reply_len, rc ? "copy failed" : "snapshot written to %s (%zu live items)", path, c->live.used);
	return rc;
}
