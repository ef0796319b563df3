/* SPDX-License-Identifier: MIT */
/*
 * Writes the fuzz seed corpora and the known-bad corpus:
 *
 *   make_corpus DIR     (DIR is tests/fuzz in the source tree)
 *
 *   DIR/corpus/reader/  small valid traces (real writer, plus a hand-laid wrapped ring)
 *   DIR/corpus/chunks/  recipes for fuzz_chunks
 *   DIR/corpus/ctl/     control messages
 *   DIR/bad/            known-bad traces, and DIR/bad/EXPECTED: for each, the exit status and
 *                       the message `vramtrace report` must give, and the memory and time it may
 *                       take (tests/fuzz/check_bad.py); among them hostile ones: ids that jump,
 *                       zstd bombs (millions of live items from kilobytes), a sparse ring whose
 *                       header claims 16 GiB or 1 TiB, an 8 MiB function name, terminal escapes
 *
 * Output is deterministic for a given zstd version. File names avoid ".vrt" (git-ignored).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "tracegen.h"
#include "vramtrace/control.h"
#include "vramtrace/error.h"
#include "vramtrace/record.h"

static char root[4096];
static FILE *expected;
static char events_text[32];

struct bytes {
	uint8_t *p;
	size_t len;
};

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void mkdirs(const char *sub)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", root, sub);
	if (mkdir(path, 0755) && errno != EEXIST)
		die(path);
}

static void save(const char *sub, const char *name, const void *p, size_t len)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s/%s", root, sub, name);
	FILE *f = fopen(path, "wb");
	if (!f || (len && fwrite(p, 1, len, f) != len) || fclose(f))
		die(path);
}

static struct bytes load(const char *path)
{
	struct bytes b = { 0 };
	FILE *f = fopen(path, "rb");
	if (!f)
		die(path);
	fseek(f, 0, SEEK_END);
	b.len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	b.p = malloc(b.len + 1);
	if (!b.p || fread(b.p, 1, b.len, f) != b.len)
		die(path);
	fclose(f);
	return b;
}

static struct bytes dup_bytes(struct bytes b, size_t len)
{
	struct bytes c = { malloc(len + 1), len };
	if (!c.p)
		die("malloc");
	memcpy(c.p, b.p, len < b.len ? len : b.len);
	if (len > b.len)
		memset(c.p + b.len, 0, len - b.len);
	return c;
}

/* A known-bad file and what `vramtrace report` must say: exit status, a piece of stderr, how
 * many events it must replay (from the generator's own account of what each chunk holds; -1: a
 * file it refuses, or one whose count is not the point), and limits beyond check_bad.py's
 * defaults ("args=--max-memory,64M rss=300 secs=20 size=N"; size extends the file, sparse,
 * before it is read). status "xfail: why" marks a case where the analyzer is known to be wrong
 * (the test reports it, and fails once it starts passing, so the mark gets removed). */
static void bad_with(const char *name, struct bytes b, int exit_code, const char *message, long long events,
		     const char *status, const char *limits)
{
	save("bad", name, b.p, b.len);
	fprintf(expected, "%s\t%d\t%s\t%s\t%s%s%s\n", name, exit_code, message,
		events < 0 ? "" : (snprintf(events_text, sizeof(events_text), "%lld", events), events_text),
		status ? status : "ok", limits ? "\t" : "", limits ? limits : "");
}

static void bad(const char *name, struct bytes b, int exit_code, const char *message, long long events,
		const char *status)
{
	bad_with(name, b, exit_code, message, events, status, NULL);
}

/* Events in the expected chunks before chunk i (all of them for i = n). */
static long long events_before(const struct vt_gen *g, size_t i)
{
	const struct vt_chunk *exp[64];
	size_t n = vt_gen_expected_chunks(g, exp, 64);
	long long sum = 0;
	for (size_t k = 0; k < i && k < n; k++)
		sum += exp[k]->type == VRT_CHUNK_EVENTS ? (long long)exp[k]->n_events : 0;
	return sum;
}

static void fix_header_crc(struct bytes b)
{
	struct vrt_file_header h;
	memcpy(&h, b.p, sizeof(h));
	h.header_crc = vrt_crc32c(0, &h, offsetof(struct vrt_file_header, header_crc));
	memcpy(b.p + offsetof(struct vrt_file_header, header_crc), &h.header_crc, 4);
}

static void fix_chunk_header_crc(struct bytes b, size_t off)
{
	struct vrt_chunk_header ch;
	memcpy(&ch, b.p + off, sizeof(ch));
	ch.header_crc = vrt_crc32c(0, &ch, offsetof(struct vrt_chunk_header, header_crc));
	memcpy(b.p + off, &ch, sizeof(ch));
}

/* Appends a chunk (zstd unless codec says otherwise) at the next 8-aligned offset. */
static struct bytes append_chunk(struct bytes b, uint8_t type, uint8_t codec, uint64_t seq, const uint8_t *raw,
				 size_t raw_len)
{
	size_t bound = ZSTD_compressBound(raw_len);
	uint8_t *z = malloc(bound + 1);
	size_t stored = raw_len;
	if (codec == VRT_CODEC_ZSTD) {
		ZSTD_CCtx *cc = ZSTD_createCCtx();
		ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
		stored = ZSTD_compress2(cc, z, bound, raw, raw_len);
		ZSTD_freeCCtx(cc);
		if (ZSTD_isError(stored))
			die("zstd");
	} else {
		memcpy(z, raw, raw_len);
	}
	size_t off = (b.len + 7) & ~(size_t)7;
	struct bytes c = dup_bytes(b, off + sizeof(struct vrt_chunk_header) + stored);
	struct vrt_chunk_header ch = { VRT_CHUNK_MAGIC, type, codec, 0, (uint32_t)stored, (uint32_t)raw_len, seq,
				       vrt_crc32c(0, z, stored), 0 };
	ch.header_crc = vrt_crc32c(0, &ch, offsetof(struct vrt_chunk_header, header_crc));
	memcpy(c.p + off, &ch, sizeof(ch));
	memcpy(c.p + off + sizeof(ch), z, stored);
	free(z);
	free(b.p);
	return c;
}

static size_t encode(uint8_t *out, const struct vrt_record *r, size_t n)
{
	struct vrt_delta d = { 0, 0 };
	uint8_t *p = out;
	for (size_t i = 0; i < n; i++)
		p = vrt_record_encode(p, &r[i], &d);
	return (size_t)(p - out);
}

/* ---- valid traces ------------------------------------------------------------------------- */

static char tmpdir[4096];

static void tmp_path(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", tmpdir, name);
	unlink(buf);
}

/* Random events through the real writer, keep-all. */
static struct bytes small_keep_all(struct vt_gen *g, const char *name, int rounds, size_t events)
{
	char path[4200];
	tmp_path(path, sizeof(path), name);
	if (vt_gen_open(g, path, 0, 17))
		die("vt_gen_open");
	for (int i = 0; i < rounds; i++) {
		vt_gen_events(g, events);
		if (i == 1)
			vt_gen_checkpoint(g, VRT_CP_SNAPSHOT);
	}
	vt_gen_checkpoint(g, VRT_CP_EXIT);
	vt_gen_close(g);
	if (g->error)
		die("tracegen");
	vt_set_hostname(path, "corpus");
	return load(path);
}

/* One record of every event opcode, in an order the model takes as real. */
static size_t every_op_events;

static struct bytes every_op(void)
{
	char path[4200];
	tmp_path(path, sizeof(path), "every-op");
	struct vt_gen g;
	if (vt_gen_open(&g, path, 0, 5))
		die("vt_gen_open");
	uint32_t st = vt_gen_random_stack(&g), label = vt_gen_string(&g, "phase"), lbl = vt_gen_node(&g, 0, VRT_FRAME_LABEL,
														  vt_gen_string(&g, "[before]"));
	uint64_t h = 0x1234, va = 0x7f0000000000ull;
	struct vrt_record rs[] = {
		{ .op = VRT_OP_MODE, .ts = 1, .id = VRT_MODE_FULL, .id2 = VRT_CAUSE_START },
		{ .op = VRT_OP_CONTEXT, .ts = 2, .device = 0, .id = 1 },
		{ .op = VRT_OP_SEED, .ts = 3, .api = VRT_API_CUDA_MALLOC, .kind = VRT_KIND_DEVICE, .addr = 0x5000, .size = 4096,
		  .stack = lbl },
		{ .op = VRT_OP_ALLOC, .ts = 4, .api = VRT_API_CUDA_MALLOC, .kind = VRT_KIND_DEVICE, .addr = 0x10000, .size = 1 << 20,
		  .stack = st },
		{ .op = VRT_OP_ALLOC, .ts = 5, .api = VRT_API_CUDA_HOST_ALLOC, .device = -1, .kind = VRT_KIND_HOST_PINNED,
		  .addr = 0x20000, .size = 8192, .stack = st },
		{ .op = VRT_OP_FAILED, .ts = 6, .api = VRT_API_CUDA_MALLOC, .size = 1ull << 40, .result = 2, .stack = st },
		{ .op = VRT_OP_OOM, .ts = 6, .api = VRT_API_CUDA_MALLOC, .size = 1ull << 40, .aux = 1 << 30, .aux2 = 1ull << 34,
		  .result = 2, .stack = st },
		{ .op = VRT_OP_PHYS_CREATE, .ts = 7, .api = VRT_API_CU_MEM_CREATE, .kind = VRT_KIND_DEVICE, .addr = h,
		  .size = 2 << 20, .stack = st },
		{ .op = VRT_OP_PHYS_CREATE, .ts = 7, .api = VRT_API_CU_MEM_RETAIN_HANDLE, .addr = h },
		{ .op = VRT_OP_VA_RESERVE, .ts = 8, .api = VRT_API_CU_MEM_ADDRESS_RESERVE, .device = -1, .addr = va,
		  .size = 4 << 20, .aux = 0 },
		{ .op = VRT_OP_MAP, .ts = 9, .api = VRT_API_CU_MEM_MAP, .device = -1, .addr = va, .size = 2 << 20, .aux = h },
		{ .op = VRT_OP_PHASE_ENTER, .ts = 10, .id = label, .stack = st },
		{ .op = VRT_OP_BLOCK_ALLOC, .ts = 11, .api = VRT_API_TORCH_BLOCK, .addr = va, .size = 512, .aux = 500,
		  .stack = st },
		{ .op = VRT_OP_BLOCK_SIZE, .ts = 12, .api = VRT_API_TORCH_BLOCK, .addr = va, .size = 1024 },
		{ .op = VRT_OP_MARK, .ts = 13, .id = label },
		{ .op = VRT_OP_BLOCK_FREE, .ts = 14, .api = VRT_API_TORCH_BLOCK, .addr = va, .size = 1024, .stack2 = st },
		{ .op = VRT_OP_PHASE_EXIT, .ts = 15, .id = label },
		{ .op = VRT_OP_IMPORT, .ts = 16, .api = VRT_API_CUDA_IPC_OPEN, .device = 0, .addr = 0x900000, .size = 65536 },
		{ .op = VRT_OP_IMPORT_CLOSE, .ts = 17, .api = VRT_API_CUDA_IPC_CLOSE, .addr = 0x900000 },
		{ .op = VRT_OP_UNMAP, .ts = 18, .api = VRT_API_CU_MEM_UNMAP, .addr = va, .size = 2 << 20 },
		{ .op = VRT_OP_PHYS_RELEASE, .ts = 19, .api = VRT_API_CU_MEM_RELEASE, .addr = h },
		{ .op = VRT_OP_PHYS_RELEASE, .ts = 19, .api = VRT_API_CU_MEM_RELEASE, .addr = h },
		{ .op = VRT_OP_VA_FREE, .ts = 20, .api = VRT_API_CU_MEM_ADDRESS_FREE, .addr = va },
		{ .op = VRT_OP_LOST, .ts = 21, .id = 3 },
		{ .op = VRT_OP_FREE, .ts = 22, .api = VRT_API_CUDA_FREE, .addr = 0x10000, .size = 1 << 20, .stack2 = st },
		{ .op = VRT_OP_CONTEXT, .ts = 23, .device = 0, .id = 0 },
	};
	for (size_t i = 0; i < sizeof(rs) / sizeof(rs[0]); i++)
		vt_gen_event(&g, 1 + (uint32_t)(i % 2), &rs[i]);
	every_op_events = g.n_ev;
	vt_gen_flush(&g);
	vt_gen_checkpoint(&g, VRT_CP_EXIT);
	vt_gen_close(&g);
	vt_set_hostname(path, "corpus");
	vt_gen_free(&g);
	return load(path);
}

/*
 * A 4 KiB ring laid out by hand as the writer would after one wrap: seq 7 (checkpoint) at 0
 * over what was seq 1, the remains of seq 2, seq 3 (checkpoint) and 4 (events), a padding chunk
 * (seq 6), stale bytes; the consolidated tables (seq 5) in the log. The writer refuses rings
 * under 1 MiB, which would make a large seed.
 */
static struct bytes small_ring(void)
{
	const uint64_t ring = 4096;
	struct bytes b = { calloc(1, VRT_FILE_HEADER_SIZE + ring), VRT_FILE_HEADER_SIZE };
	struct vrt_file_header h = { 0 };
	memcpy(h.magic, VRT_FILE_MAGIC, VRT_FILE_MAGIC_LEN);
	h.version_major = VRT_FORMAT_MAJOR;
	h.version_minor = VRT_FORMAT_MINOR;
	h.header_size = VRT_FILE_HEADER_SIZE;
	h.flags = VRT_FILE_RING;
	h.ts_unit_ns = 1000;
	h.ring_offset = VRT_FILE_HEADER_SIZE;
	h.ring_size = ring;
	h.log_offset = VRT_FILE_HEADER_SIZE + ring;
	h.pid = 4242;
	h.rank = h.local_rank = h.world_size = -1;
	snprintf(h.hostname, sizeof(h.hostname), "corpus");
	h.header_crc = vrt_crc32c(0, &h, offsetof(struct vrt_file_header, header_crc));
	memcpy(b.p, &h, sizeof(h));

	uint8_t raw[4096];
	struct vrt_record tables[] = {
		{ .op = VRT_OP_STRING, .id = 1, .bytes = (const uint8_t *)"train", .bytes_len = 5 },
		{ .op = VRT_OP_STRING, .id = 2, .bytes = (const uint8_t *)"fn", .bytes_len = 2 },
		{ .op = VRT_OP_STACK, .id = 1, .id2 = 0, .aux2 = VRT_FRAME_NATIVE, .aux = 0x401000 },
		{ .op = VRT_OP_STACK, .id = 2, .id2 = 1, .aux2 = VRT_FRAME_NATIVE, .aux = 0x402000 },
		{ .op = VRT_OP_SYMBOL, .addr = 0x401000, .id = 0, .id2 = 2, .aux = 4 },
		{ .op = VRT_OP_THREAD_INFO, .id = 1, .aux = 77, .id2 = 1 },
	};
	struct vrt_record cp[] = {
		{ .op = VRT_OP_CP_BEGIN, .ts = 100, .id = VRT_CP_PERIODIC, .aux = 2 },
		{ .op = VRT_OP_CP_LIVE, .id2 = VRT_OP_ALLOC, .ts = 50, .api = VRT_API_CUDA_MALLOC, .addr = 0x10000, .size = 4096,
		  .stack = 2 },
		{ .op = VRT_OP_CP_PHASE, .id = 1, .aux = 3, .aux2 = 1 },
		{ .op = VRT_OP_CP_END, .id = 1 },
	};
	struct vrt_record ev[] = {
		{ .op = VRT_OP_THREAD, .id = 1 },
		{ .op = VRT_OP_ALLOC, .ts = 110, .api = VRT_API_CUDA_MALLOC, .addr = 0x20000, .size = 8192, .stack = 2 },
		{ .op = VRT_OP_FREE, .ts = 120, .api = VRT_API_CUDA_FREE, .addr = 0x10000, .size = 4096, .stack2 = 2 },
		{ .op = VRT_OP_PHASE_ENTER, .ts = 121, .id = 1 },
	};
	/* Ring chunks, placed by building each one as a one-chunk "file" and copying it in. */
	struct {
		uint64_t offset, seq;
		uint8_t type;
		struct vrt_record *r;
		size_t n;
	} place[] = {
		{ 0, 2, VRT_CHUNK_EVENTS, ev, 4 },        /* mostly overwritten below */
		{ 1024, 3, VRT_CHUNK_CHECKPOINT, cp, 4 },
		{ 1536, 4, VRT_CHUNK_EVENTS, ev, 4 },
		{ 0, 7, VRT_CHUNK_CHECKPOINT, cp, 4 },
	};
	for (size_t i = 0; i < sizeof(place) / sizeof(place[0]); i++) {
		struct bytes one = { malloc(1), 0 };
		size_t n = encode(raw, place[i].r, place[i].n);
		one = append_chunk(one, place[i].type, VRT_CODEC_ZSTD, place[i].seq, raw, n);
		memcpy(b.p + VRT_FILE_HEADER_SIZE + place[i].offset, one.p, one.len);
		free(one.p);
	}
	struct vrt_chunk_header pad = { VRT_CHUNK_MAGIC, VRT_CHUNK_PADDING, VRT_CODEC_NONE, 0, 0, 0, 6, vrt_crc32c(0, "", 0), 0 };
	pad.header_crc = vrt_crc32c(0, &pad, offsetof(struct vrt_chunk_header, header_crc));
	memcpy(b.p + VRT_FILE_HEADER_SIZE + 3072, &pad, sizeof(pad));
	memset(b.p + VRT_FILE_HEADER_SIZE + 3072 + sizeof(pad), 0xa5, 256); /* stale bytes past the padding */
	b.len = VRT_FILE_HEADER_SIZE + ring;
	size_t n = encode(raw, tables, sizeof(tables) / sizeof(tables[0]));
	b = append_chunk(b, VRT_CHUNK_TABLES, VRT_CODEC_ZSTD, 5, raw, n);
	return b;
}

/* ---- fuzz_chunks recipes ------------------------------------------------------------------ */

static size_t recipe_chunk(uint8_t *out, uint8_t type, uint8_t flags, int16_t dseq, uint16_t slot,
			   const struct vrt_record *r, size_t n)
{
	uint8_t raw[2048];
	uint16_t len = (uint16_t)encode(raw, r, n);
	out[0] = type;
	out[1] = flags;
	memcpy(out + 2, &dseq, 2);
	memcpy(out + 4, &slot, 2);
	memcpy(out + 6, &len, 2);
	memcpy(out + 8, raw, len);
	return 8 + (size_t)len;
}

static void chunk_recipes(void)
{
	struct vrt_record tables[] = {
		{ .op = VRT_OP_STRING, .id = 1, .bytes = (const uint8_t *)"x", .bytes_len = 1 },
		{ .op = VRT_OP_STACK, .id = 1, .id2 = 0, .aux2 = VRT_FRAME_PYTHON, .aux = 0 },
		{ .op = VRT_OP_STACK, .id = 2, .id2 = 1, .aux2 = VRT_FRAME_EVAL, .aux = 0 },
		{ .op = VRT_OP_PYCODE, .id = 0, .id2 = 1, .aux = 1, .aux2 = 1 },
		{ .op = VRT_OP_PYFRAME, .id = 0, .id2 = 0, .aux = 2, .aux2 = 3 },
	};
	struct vrt_record cp[] = {
		{ .op = VRT_OP_CP_BEGIN, .ts = 5, .id = VRT_CP_ATTACH },
		{ .op = VRT_OP_CP_LIVE, .id2 = VRT_OP_PHYS_CREATE, .ts = 1, .addr = 9, .size = 4096, .aux2 = 2, .stack = 2 },
		{ .op = VRT_OP_CP_LIVE, .id2 = VRT_OP_MAP, .ts = 2, .addr = 0x1000, .size = 4096, .aux = 9 },
		{ .op = VRT_OP_CP_END, .id = 2 },
	};
	struct vrt_record ev[] = {
		{ .op = VRT_OP_ALLOC, .ts = 10, .addr = 0x8000, .size = 64, .stack = 2 },
		{ .op = VRT_OP_UNMAP, .ts = 11, .addr = 0x1000, .size = 4096 },
		{ .op = VRT_OP_PHYS_RELEASE, .ts = 12, .addr = 9 },
		{ .op = VRT_OP_FREE, .ts = 13, .addr = 0x8000 },
	};
	uint8_t r[8192];
	size_t n = 0;
	r[n++] = 0; /* keep-all */
	n += recipe_chunk(r + n, VRT_CHUNK_TABLES, 0, 1, 0, tables, 5);
	n += recipe_chunk(r + n, VRT_CHUNK_CHECKPOINT, 0, 1, 0, cp, 4);
	n += recipe_chunk(r + n, VRT_CHUNK_EVENTS, 0, 1, 0, ev, 4);
	save("corpus/chunks", "keep-all", r, n);

	n = 0;
	r[n++] = 1 | (3 << 1); /* ring of 4 KiB */
	n += recipe_chunk(r + n, VRT_CHUNK_TABLES, 0, 5, 0, tables, 5);          /* the log: consolidated */
	n += recipe_chunk(r + n, VRT_CHUNK_CHECKPOINT, 4, -2, 64, cp, 4);        /* ring offset 512 */
	n += recipe_chunk(r + n, VRT_CHUNK_EVENTS, 4, 1, 128, ev, 4);            /* ring offset 1024 */
	n += recipe_chunk(r + n, VRT_CHUNK_PADDING, 4 | 1, 1, 300, NULL, 0);     /* padding at 2400 */
	n += recipe_chunk(r + n, VRT_CHUNK_EVENTS, 4, 2, 0, ev, 4);              /* the newest, at 0 */
	n += recipe_chunk(r + n, VRT_CHUNK_EVENTS, 4 | 8, 1, 20, ev, 4);         /* bad payload crc */
	save("corpus/chunks", "ring-wrapped", r, n);

	n = 0;
	r[n++] = 0;
	n += recipe_chunk(r + n, VRT_CHUNK_TABLES, 1, 1, 0, tables, 5); /* codec NONE */
	n += recipe_chunk(r + n, VRT_CHUNK_EVENTS, 3, 1, 0, ev, 4);     /* raw_size off by one */
	n += recipe_chunk(r + n, VRT_CHUNK_EVENTS, 0, 0, 0, ev, 4);     /* duplicate seq */
	n += recipe_chunk(r + n, VRT_CHUNK_EVENTS, 2, 1, 0, ev, 4);     /* not a zstd frame */
	save("corpus/chunks", "odd-codecs", r, n);
}

static void ctl_seeds(void)
{
	uint8_t buf[sizeof(struct vrt_ctl_header) + VRT_CTL_MAX_PAYLOAD];
	static const struct {
		const char *name;
		uint16_t type;
		int32_t status;
		const char *payload;
	} m[] = {
		{ "status", VRT_CTL_STATUS, 0, NULL },   { "start", VRT_CTL_START, 0, NULL },
		{ "arm", VRT_CTL_ARM, 0, NULL },         { "mark", VRT_CTL_MARK, 0, "epoch 3" },
		{ "snapshot", VRT_CTL_SNAPSHOT, 0, "/tmp/snap.vrt" }, { "stop", VRT_CTL_STOP, 0, NULL },
		{ "reply", VRT_CTL_REPLY, VRT_E_UNSUPPORTED, "tracing is armed" },
	};
	for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
		long n = vrt_ctl_format(buf, m[i].type, m[i].status, m[i].payload);
		save("corpus/ctl", m[i].name, buf, (size_t)n);
	}
}

/* ---- known-bad traces --------------------------------------------------------------------- */

static const char *MSG_MAGIC = "not a vramtrace trace (bad magic)";
static const char *MSG_TRUNC = "trace is truncated";
static const char *MSG_VERSION = "unsupported trace format version";
static const char *MSG_CORRUPT = "trace is corrupt";
static const char *MSG_RECORD = "malformed record";
static const char *MSG_RANGE = "reference to an undefined id";
static const char *MSG_PARTIAL = "the file ends in a partial chunk";
static const char *MSG_DAMAGED = "damaged chunks were skipped";
static const char *MSG_CUT = "the trace was cut short";

static void header_cases(struct bytes base, long long total)
{
	struct bytes b;
	bad("empty", (struct bytes){ base.p, 0 }, 3, "is empty: its process was killed", -1, NULL);
	bad("magic-only", (struct bytes){ base.p, 8 }, 3, MSG_TRUNC, -1, NULL);
	bad("cut-in-header-100", (struct bytes){ base.p, 100 }, 3, MSG_TRUNC, -1, NULL);
	bad("cut-in-header-4095", (struct bytes){ base.p, 4095 }, 3, MSG_TRUNC, -1, NULL);
	bad("not-a-trace", (struct bytes){ (uint8_t *)"hello, world\n", 13 }, 3, MSG_MAGIC, -1, NULL);

	b = dup_bytes(base, base.len);
	b.p[0] = 'X';
	bad("wrong-magic", b, 3, MSG_MAGIC, -1, NULL);
	free(b.p);

	static const uint16_t versions[] = { 0, 2, 0xffff };
	for (size_t i = 0; i < 3; i++) {
		char name[64];
		b = dup_bytes(base, base.len);
		memcpy(b.p + offsetof(struct vrt_file_header, version_major), &versions[i], 2);
		fix_header_crc(b);
		snprintf(name, sizeof(name), "wrong-version-%u", versions[i]);
		bad(name, b, 3, MSG_VERSION, -1, NULL);
		free(b.p);
	}
	b = dup_bytes(base, base.len); /* a newer minor version is fine */
	uint16_t minor = 7;
	memcpy(b.p + offsetof(struct vrt_file_header, version_minor), &minor, 2);
	fix_header_crc(b);
	bad("newer-minor-version", b, 0, "", total, NULL);
	free(b.p);

	b = dup_bytes(base, base.len);
	b.p[offsetof(struct vrt_file_header, pid)] ^= 1;
	bad("header-crc", b, 3, MSG_CORRUPT, -1, NULL);
	free(b.p);

	struct {
		const char *name;
		size_t off;
		uint64_t value;
		size_t size;
		const char *status;
	} fields[] = {
		{ "header-size-8192", offsetof(struct vrt_file_header, header_size), 8192, 4, NULL },
		{ "ts-unit-zero", offsetof(struct vrt_file_header, ts_unit_ns), 0, 4, NULL },
		{ "log-offset-wrong", offsetof(struct vrt_file_header, log_offset), 8192, 8, NULL },
	};
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		b = dup_bytes(base, base.len);
		memcpy(b.p + fields[i].off, &fields[i].value, fields[i].size);
		fix_header_crc(b);
		bad(fields[i].name, b, 3, MSG_CORRUPT, -1, fields[i].status);
		free(b.p);
	}
	/* Keep-all with a stray ring_offset: readers ignore ring_offset when ring_size is 0. */
	b = dup_bytes(base, base.len);
	uint64_t stray = VRT_FILE_HEADER_SIZE;
	memcpy(b.p + offsetof(struct vrt_file_header, ring_offset), &stray, 8);
	fix_header_crc(b);
	bad("ring-offset-without-size", b, 0, "", total, NULL);
	free(b.p);
	/* ring_size + ring_offset wraps around 2^64 to log_offset: must be refused too. */
	b = dup_bytes(base, base.len);
	uint64_t ring_size = 0 - (uint64_t)VRT_FILE_HEADER_SIZE, ring_off = VRT_FILE_HEADER_SIZE, log_off = 0;
	memcpy(b.p + offsetof(struct vrt_file_header, ring_offset), &ring_off, 8);
	memcpy(b.p + offsetof(struct vrt_file_header, ring_size), &ring_size, 8);
	memcpy(b.p + offsetof(struct vrt_file_header, log_offset), &log_off, 8);
	fix_header_crc(b);
	bad("ring-size-overflow", b, 3, MSG_CORRUPT, -1, NULL);
	free(b.p);
	/* A damaged state block is only a warning. */
	b = dup_bytes(base, base.len);
	b.p[VRT_STATE_OFFSET + 8] ^= 0x10;
	bad("state-block-crc", b, 0, "the state block is damaged", total, NULL);
	free(b.p);
}

static void chunk_cases(struct bytes base, const struct vt_gen *g)
{
	const struct vt_chunk *exp[64];
	size_t n = vt_gen_expected_chunks(g, exp, 64);
	char name[64];
	struct bytes b;
	for (size_t i = 0; i < n; i++) {
		struct vrt_chunk_header ch;
		memcpy(&ch, base.p + exp[i]->offset, sizeof(ch));
		size_t end = exp[i]->offset + sizeof(ch) + ch.stored_size;
		/* At a chunk boundary every chunk left is whole; the state block says more were written. */
		snprintf(name, sizeof(name), "cut-at-chunk-%zu", i);
		bad(name, (struct bytes){ base.p, exp[i]->offset }, 0, MSG_CUT, events_before(g, i), NULL);
		snprintf(name, sizeof(name), "cut-in-chunk-%zu-header", i);
		bad(name, (struct bytes){ base.p, exp[i]->offset + 20 }, 0, MSG_PARTIAL, events_before(g, i), NULL);
		snprintf(name, sizeof(name), "cut-in-chunk-%zu-payload", i);
		bad(name, (struct bytes){ base.p, end - 1 }, 0, MSG_PARTIAL, events_before(g, i), NULL);
	}
	/* A chunk header bit flip ends the keep-all log there, like a cut. */
	b = dup_bytes(base, base.len);
	b.p[exp[1]->offset + 9] ^= 4;
	bad("chunk-header-bitflip", b, 0, MSG_PARTIAL, events_before(g, 1), NULL);
	free(b.p);
	/* Payload bit flips: that chunk is skipped, with a warning. */
	for (size_t i = 0; i < n; i++) {
		if (exp[i]->type == VRT_CHUNK_TABLES && i != 0)
			continue;
		b = dup_bytes(base, base.len);
		b.p[exp[i]->offset + sizeof(struct vrt_chunk_header) + 3] ^= 0x40;
		snprintf(name, sizeof(name), "payload-bitflip-%s-%zu",
			 exp[i]->type == VRT_CHUNK_TABLES ? "tables" : exp[i]->type == VRT_CHUNK_EVENTS ? "events" : "checkpoint", i);
		/* skipped with a warning (a TABLES chunk's ids then read as empty): every other event is read */
		bad(name, b, 0, MSG_DAMAGED, events_before(g, n) - (events_before(g, i + 1) - events_before(g, i)), NULL);
		free(b.p);
	}
	/* Sizes out of range in a header with a correct crc. */
	struct {
		const char *name;
		size_t field;
		uint32_t value;
		int exit_code;
		const char *message, *status;
	} sizes[] = {
		{ "stored-size-huge", offsetof(struct vrt_chunk_header, stored_size), 0xfffffff0u, 0, MSG_PARTIAL, NULL },
		{ "raw-size-over-limit", offsetof(struct vrt_chunk_header, raw_size), VRT_CHUNK_MAX_RAW + 1, 0, MSG_PARTIAL, NULL },
		{ "raw-size-wrong", offsetof(struct vrt_chunk_header, raw_size), 0, 0, MSG_DAMAGED, NULL },
		{ "chunk-type-invalid", offsetof(struct vrt_chunk_header, type), 9, 0, MSG_PARTIAL, NULL },
		{ "codec-unknown", offsetof(struct vrt_chunk_header, codec), 5, 0, MSG_DAMAGED, NULL },
	};
	size_t target = 2; /* an EVENTS chunk */
	while (target < n && exp[target]->type != VRT_CHUNK_EVENTS)
		target++;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]) && target < n; i++) {
		b = dup_bytes(base, base.len);
		size_t off = exp[target]->offset + sizes[i].field;
		if (sizes[i].field == offsetof(struct vrt_chunk_header, type) ||
		    sizes[i].field == offsetof(struct vrt_chunk_header, codec))
			b.p[off] = (uint8_t)sizes[i].value;
		else if (sizes[i].value == 0) { /* raw size off by one */
			uint32_t raw;
			memcpy(&raw, b.p + off, 4);
			raw += 1;
			memcpy(b.p + off, &raw, 4);
		} else
			memcpy(b.p + off, &sizes[i].value, 4);
		fix_chunk_header_crc(b, exp[target]->offset);
		/* a partial chunk ends the log there; a damaged one is skipped */
		long long events = sizes[i].message == MSG_PARTIAL ? events_before(g, target)
				   : events_before(g, n) - (events_before(g, target + 1) - events_before(g, target));
		bad(sizes[i].name, b, sizes[i].exit_code, sizes[i].message, events, sizes[i].status);
		free(b.p);
	}
}

/* The reader's second thread decodes a chunk's first records (VRT_AHEAD_RECORDS, 65536,
 * format/trace_reader.h), the replay the rest: a bad record past them is the replay's own to find. */
#define AHEAD_RECORDS 65536u

static void past_the_read_ahead(struct bytes base, uint64_t seq)
{
	size_t n = AHEAD_RECORDS + 20;
	struct vrt_record *rs = calloc(n, sizeof(*rs));
	uint8_t *raw = malloc(n * VRT_RECORD_MAX_FIXED);
	if (!rs || !raw)
		die("out of memory");
	for (size_t i = 0; i < n; i++)
		rs[i] = (struct vrt_record){ .op = VRT_OP_ALLOC, .ts = 1 + i, .addr = 0x100000 + i * 0x1000, .size = 64 };
	rs[AHEAD_RECORDS + 10].stack = 999999;
	size_t len = encode(raw, rs, n);
	struct bytes b = append_chunk(dup_bytes(base, base.len), VRT_CHUNK_EVENTS, VRT_CODEC_ZSTD, seq, raw, len);
	bad("stack-id-out-of-range-past-the-read-ahead", b, 3, MSG_RANGE, -1, NULL);
	free(b.p);
	free(raw);
	free(rs);
}

static void record_cases(struct bytes base, const struct vt_gen *g)
{
	uint64_t seq = g->chunks[g->n_chunks - 1].seq + 1;
	uint8_t raw[512];
	struct bytes b;
	size_t n;
#define APPEND(type, ...)                                                                           \
	do {                                                                                        \
		struct vrt_record rs_[] = { __VA_ARGS__ };                                          \
		n = encode(raw, rs_, sizeof(rs_) / sizeof(rs_[0]));                                 \
		b = append_chunk(dup_bytes(base, base.len), type, VRT_CODEC_ZSTD, seq, raw, n);    \
	} while (0)

	APPEND(VRT_CHUNK_EVENTS, { .op = VRT_OP_ALLOC, .ts = 1, .addr = 0x1000, .size = 64, .stack = 999999 });
	bad("stack-id-out-of-range", b, 3, MSG_RANGE, -1, NULL);
	free(b.p);
	APPEND(VRT_CHUNK_EVENTS, { .op = VRT_OP_FREE, .ts = 1, .addr = 0x1000, .stack2 = 0xffffffffu });
	bad("alloc-stack-id-out-of-range", b, 3, MSG_RANGE, -1, NULL);
	free(b.p);
	/* The same amid a chunk: records with a hundred bytes after them take the replay's
	 * straight-line decoder, which checks their stacks itself. */
#define ALLOCS_AFTER                                                                                 \
	{ .op = VRT_OP_ALLOC, .ts = 2, .addr = 0x2000, .size = 64 }, { .op = VRT_OP_ALLOC, .ts = 3, .addr = 0x3000, .size = 64 }, \
	{ .op = VRT_OP_ALLOC, .ts = 4, .addr = 0x4000, .size = 64 }, { .op = VRT_OP_ALLOC, .ts = 5, .addr = 0x5000, .size = 64 }, \
	{ .op = VRT_OP_ALLOC, .ts = 6, .addr = 0x6000, .size = 64 }, { .op = VRT_OP_ALLOC, .ts = 7, .addr = 0x7000, .size = 64 }, \
	{ .op = VRT_OP_ALLOC, .ts = 8, .addr = 0x8000, .size = 64 }, { .op = VRT_OP_ALLOC, .ts = 9, .addr = 0x9000, .size = 64 }, \
	{ .op = VRT_OP_ALLOC, .ts = 10, .addr = 0xa000, .size = 64 }, { .op = VRT_OP_ALLOC, .ts = 11, .addr = 0xb000, .size = 64 }
	APPEND(VRT_CHUNK_EVENTS, { .op = VRT_OP_ALLOC, .ts = 1, .addr = 0x1000, .size = 64, .stack = 999999 }, ALLOCS_AFTER);
	bad("stack-id-out-of-range-amid-a-chunk", b, 3, MSG_RANGE, -1, NULL);
	free(b.p);
	APPEND(VRT_CHUNK_EVENTS, { .op = VRT_OP_ALLOC, .ts = 1, .addr = 0x1000, .size = 64 },
	       { .op = VRT_OP_FREE, .ts = 1, .addr = 0x1000, .stack2 = 0xffffffu }, ALLOCS_AFTER);
	bad("alloc-stack-id-out-of-range-amid-a-chunk", b, 3, MSG_RANGE, -1, NULL);
	free(b.p);
#undef ALLOCS_AFTER
	past_the_read_ahead(base, seq);
	APPEND(VRT_CHUNK_TABLES, { .op = VRT_OP_STACK, .id = 5000, .id2 = 6000, .aux2 = VRT_FRAME_NATIVE, .aux = 1 });
	bad("stack-parent-after-child", b, 3, MSG_RANGE, -1, NULL);
	free(b.p);
	APPEND(VRT_CHUNK_TABLES, { .op = VRT_OP_STACK, .id = 0, .id2 = 0, .aux2 = VRT_FRAME_NATIVE, .aux = 1 });
	bad("stack-node-zero", b, 3, MSG_RANGE, -1, NULL);
	free(b.p);
	APPEND(VRT_CHUNK_TABLES, { .op = VRT_OP_STACK, .id = 5000, .id2 = 1, .aux2 = 9, .aux = 1 });
	bad("stack-frame-kind-invalid", b, 3, MSG_RANGE, -1, NULL);
	free(b.p);
	APPEND(VRT_CHUNK_TABLES, { .op = VRT_OP_STRING, .id = 1ull << 28, .bytes = (const uint8_t *)"x", .bytes_len = 1 });
	bad("string-id-huge", b, 3, MSG_RANGE, -1, NULL);
	free(b.p);
	APPEND(VRT_CHUNK_EVENTS, { .op = VRT_OP_STRING, .id = 1, .bytes = (const uint8_t *)"x", .bytes_len = 1 });
	bad("definition-in-events-chunk", b, 3, MSG_RECORD, -1, NULL);
	free(b.p);
	APPEND(VRT_CHUNK_CHECKPOINT, { .op = VRT_OP_ALLOC, .ts = 1, .addr = 0x1000, .size = 64 });
	bad("event-in-checkpoint-chunk", b, 3, MSG_RECORD, -1, NULL);
	free(b.p);
	APPEND(VRT_CHUNK_TABLES, { .op = VRT_OP_ALLOC, .ts = 1, .addr = 0x1000, .size = 64 });
	bad("event-in-tables-chunk", b, 3, MSG_RECORD, -1, NULL);
	free(b.p);
	APPEND(VRT_CHUNK_EVENTS, { .op = VRT_OP_ALLOC, .ts = 1, .addr = 0x1000, .kind = 9 });
	bad("kind-out-of-range", b, 3, MSG_RECORD, -1, NULL);
	free(b.p);
	APPEND(VRT_CHUNK_EVENTS, { .op = VRT_OP_ALLOC, .ts = 1, .addr = 0x1000, .api = 200 });
	bad("api-out-of-range", b, 3, MSG_RECORD, -1, NULL);
	free(b.p);
	/* Read, with a warning: sizes that together pass what any machine holds (found by fuzz_chunks
	 * as a signed overflow in the model's totals). */
	APPEND(VRT_CHUNK_EVENTS, { .op = VRT_OP_ALLOC, .ts = 1, .addr = 0x1000, .size = 2, .kind = VRT_KIND_DEVICE },
	       { .op = VRT_OP_ALLOC, .ts = 2, .addr = 0x2000, .size = (uint64_t)INT64_MAX, .kind = VRT_KIND_DEVICE });
	bad("sizes-beyond-any-machine", b, 0, "1 allocations were left out", events_before(g, SIZE_MAX) + 2, NULL);
	free(b.p);

	/* Raw bytes: an unknown opcode, a record cut short, an over-long varint, a huge B length. */
	static const struct {
		const char *name;
		uint8_t type;
		uint8_t bytes[16];
		size_t len;
	} raws[] = {
		{ "unknown-opcode", VRT_CHUNK_EVENTS, { 0x1f, 0, 0 }, 3 },
		{ "opcode-zero", VRT_CHUNK_EVENTS, { 0 }, 1 },
		{ "record-cut-short", VRT_CHUNK_EVENTS, { VRT_OP_ALLOC, 2, 0, 0 }, 4 },
		{ "varint-too-long", VRT_CHUNK_EVENTS, { VRT_OP_MARK, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0 }, 12 },
		{ "bytes-length-huge", VRT_CHUNK_TABLES, { VRT_OP_STRING, 1, 0xff, 0xff, 0xff, 0xff, 0x0f, 'a' }, 8 },
		{ "device-out-of-range", VRT_CHUNK_EVENTS, { VRT_OP_CONTEXT, 0, 0x80, 0x80, 0x80, 0x80, 0x10, 0 }, 8 },
	};
	for (size_t i = 0; i < sizeof(raws) / sizeof(raws[0]); i++) {
		b = append_chunk(dup_bytes(base, base.len), raws[i].type, VRT_CODEC_ZSTD, seq, raws[i].bytes, raws[i].len);
		bad(raws[i].name, b, 3, MSG_RECORD, -1, NULL);
		free(b.p);
	}
#undef APPEND
}

/* ---- hostile traces: memory and time -------------------------------------------------------- */

/* A trace from nothing: the file header of a keep-all trace (ring_size 0) or a ring of ring_size
 * bytes that has not wrapped, pid 4242, host "corpus". */
static struct bytes new_trace(uint64_t ring_size)
{
	struct bytes b = { calloc(1, VRT_FILE_HEADER_SIZE), VRT_FILE_HEADER_SIZE };
	struct vrt_file_header h = { 0 };
	memcpy(h.magic, VRT_FILE_MAGIC, VRT_FILE_MAGIC_LEN);
	h.version_major = VRT_FORMAT_MAJOR;
	h.version_minor = VRT_FORMAT_MINOR;
	h.header_size = VRT_FILE_HEADER_SIZE;
	h.flags = ring_size ? VRT_FILE_RING : 0;
	h.ts_unit_ns = 1000;
	h.ring_offset = ring_size ? VRT_FILE_HEADER_SIZE : 0;
	h.ring_size = ring_size;
	h.log_offset = VRT_FILE_HEADER_SIZE + ring_size;
	h.pid = 4242;
	h.rank = h.local_rank = h.world_size = -1;
	snprintf(h.hostname, sizeof(h.hostname), "corpus");
	h.header_crc = vrt_crc32c(0, &h, offsetof(struct vrt_file_header, header_crc));
	memcpy(b.p, &h, sizeof(h));
	return b;
}

/* The state block of a trace that ended normally with everything in the file. */
static void close_trace(struct bytes b, uint64_t last_seq, uint64_t events)
{
	struct vrt_file_state st = { .generation = 1, .log_end = (b.len + 7) & ~(size_t)7, .last_chunk_seq = last_seq,
				     .events_written = events, .end_reason = VRT_END_EXIT };
	st.crc = vrt_crc32c(0, &st, offsetof(struct vrt_file_state, crc));
	memcpy(b.p + VRT_STATE_OFFSET, &st, sizeof(st));
}

/* n records made by fill(i) into one chunk payload of at most VRT_CHUNK_MAX_RAW bytes. */
static size_t encode_n(uint8_t *raw, size_t n, void (*fill)(struct vrt_record *r, size_t i), size_t first)
{
	struct vrt_delta d = { 0, 0 };
	uint8_t *p = raw;
	for (size_t i = 0; i < n; i++) {
		struct vrt_record r = { 0 };
		fill(&r, first + i);
		p = vrt_record_encode(p, &r, &d);
		if ((size_t)(p - raw) > VRT_CHUNK_MAX_RAW - VRT_RECORD_MAX_FIXED)
			die("encode_n: more than a chunk holds");
	}
	return (size_t)(p - raw);
}

static void fill_alloc(struct vrt_record *r, size_t i)
{
	*r = (struct vrt_record){ .op = VRT_OP_ALLOC, .ts = i + 1, .api = VRT_API_CUDA_MALLOC,
				  .addr = 0x100000000000ull + (uint64_t)i * 4096, .size = 4096 };
}

static void fill_cp_live(struct vrt_record *r, size_t i)
{
	*r = (struct vrt_record){ .op = VRT_OP_CP_LIVE, .id2 = VRT_OP_ALLOC, .ts = 1, .api = VRT_API_CUDA_MALLOC,
				  .addr = 0x100000000000ull + (uint64_t)i * 4096, .size = 4096 };
}

/* Records of 12-14 bytes that differ only in a constant step: kilobytes of zstd per 56 MiB. */
#define BOMB_RECORDS_PER_CHUNK 4000000u

/* ALLOC chunks holding n live allocations (the finding: 23 KB, 16.8 M allocations, 8 GB). */
static struct bytes alloc_bomb(size_t n)
{
	uint8_t *raw = malloc(VRT_CHUNK_MAX_RAW);
	struct bytes b = new_trace(0);
	uint64_t seq = 0;
	for (size_t done = 0; done < n;) {
		size_t k = n - done < BOMB_RECORDS_PER_CHUNK ? n - done : BOMB_RECORDS_PER_CHUNK;
		b = append_chunk(b, VRT_CHUNK_EVENTS, VRT_CODEC_ZSTD, ++seq, raw, encode_n(raw, k, fill_alloc, done));
		done += k;
	}
	close_trace(b, seq, n);
	free(raw);
	return b;
}

/* A trace whose history is lost (its first chunk is number 5) and whose oldest whole checkpoint
 * seeds n items, in parts: replay starts there, so the checkpoint is the live set. */
static struct bytes checkpoint_bomb(size_t n)
{
	uint8_t *raw = malloc(VRT_CHUNK_MAX_RAW + 64);
	struct bytes b = new_trace(0);
	uint64_t seq = 4;
	for (size_t done = 0; done < n;) {
		size_t k = n - done < BOMB_RECORDS_PER_CHUNK ? n - done : BOMB_RECORDS_PER_CHUNK, len = 0;
		struct vrt_delta d = { 0, 0 };
		if (!done) {
			struct vrt_record begin = { .op = VRT_OP_CP_BEGIN, .ts = 1, .id = VRT_CP_PERIODIC, .aux = 1 };
			len = (size_t)(vrt_record_encode(raw, &begin, &d) - raw);
		}
		len += encode_n(raw + len, k, fill_cp_live, done);
		done += k;
		if (done == n) {
			struct vrt_record end = { .op = VRT_OP_CP_END, .id = n };
			len = (size_t)(vrt_record_encode(raw + len, &end, &d) - raw);
		}
		b = append_chunk(b, VRT_CHUNK_CHECKPOINT, VRT_CODEC_ZSTD, ++seq, raw, len);
	}
	close_trace(b, seq, 1);
	free(raw);
	return b;
}

/* 64 STRING records (or another table's), each id 2^20 past the last: the old reader grew its
 * tables densely to the highest id (5,604 bytes made `info` take 1.58 GB). */
static struct bytes id_jump(uint8_t op)
{
	uint8_t raw[8192];
	size_t len = 0;
	struct vrt_delta d = { 0, 0 };
	for (uint64_t k = 1; k <= 64; k++) {
		struct vrt_record r = { .op = op, .id = k << 20, .bytes = (const uint8_t *)"x", .bytes_len = 1 };
		if (op == VRT_OP_STACK)
			r = (struct vrt_record){ .op = op, .id = k << 20, .id2 = (k - 1) << 20, .aux2 = VRT_FRAME_NATIVE, .aux = k };
		len = (size_t)(vrt_record_encode(raw + len, &r, &d) - raw);
	}
	struct bytes b = append_chunk(new_trace(0), VRT_CHUNK_TABLES, VRT_CODEC_ZSTD, 1, raw, len);
	close_trace(b, 1, 0);
	return b;
}

/* Tables and one allocation at a site whose function is named name (len bytes), in a keep-all
 * trace, or in the first lap of a ring of ring_size bytes. */
static struct bytes named_site(const uint8_t *name, size_t len, uint64_t ring_size)
{
	uint8_t *raw = malloc(len + 4096);
	struct vrt_delta d = { 0, 0 };
	struct vrt_record tables[] = {
		{ .op = VRT_OP_STRING, .id = 1, .bytes = name, .bytes_len = len },
		{ .op = VRT_OP_STRING, .id = 2, .bytes = (const uint8_t *)"/lib/\x1b[31mlibx.so", .bytes_len = 17 },
		{ .op = VRT_OP_MODULE, .id = 1, .id2 = 2, .addr = 0x400000, .size = 0x100000 },
		{ .op = VRT_OP_SYMBOL, .addr = 0x401000, .id = 1, .id2 = 1, .aux = 16 },
		{ .op = VRT_OP_STACK, .id = 1, .id2 = 0, .aux2 = VRT_FRAME_NATIVE, .aux = 0x401000 },
	};
	size_t n = 0;
	uint8_t *p = raw;
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
		p = vrt_record_encode(p, &tables[i], &d);
	n = (size_t)(p - raw);
	struct bytes b = append_chunk(new_trace(ring_size), VRT_CHUNK_TABLES, VRT_CODEC_ZSTD, 1, raw, n);
	struct vrt_record ev[] = {
		{ .op = VRT_OP_ALLOC, .ts = 10, .api = VRT_API_CUDA_MALLOC, .addr = 0x10000, .size = 1 << 20, .stack = 1 },
	};
	n = encode(raw, ev, 1);
	b = append_chunk(b, VRT_CHUNK_EVENTS, VRT_CODEC_ZSTD, 2, raw, n);
	close_trace(b, 2, 1);
	free(raw);
	return b;
}

/* 48 steps, each making and freeing a temporary and keeping one allocation from grow_site; every
 * 8th step loses 3 events. With phases each step is a call of "step". For `leaks`: a lost free
 * looks like growth, and the report says where events were lost. */
static struct bytes lossy_trace(bool phases)
{
	uint8_t raw[65536];
	struct vrt_record tables[] = {
		{ .op = VRT_OP_STRING, .id = 1, .bytes = (const uint8_t *)"grow_site", .bytes_len = 9 },
		{ .op = VRT_OP_STRING, .id = 2, .bytes = (const uint8_t *)"temp_site", .bytes_len = 9 },
		{ .op = VRT_OP_STRING, .id = 3, .bytes = (const uint8_t *)"step", .bytes_len = 4 },
		{ .op = VRT_OP_SYMBOL, .addr = 0x401000, .id = 0, .id2 = 1, .aux = 8 },
		{ .op = VRT_OP_SYMBOL, .addr = 0x402000, .id = 0, .id2 = 2, .aux = 8 },
		{ .op = VRT_OP_STACK, .id = 1, .id2 = 0, .aux2 = VRT_FRAME_NATIVE, .aux = 0x401000 },
		{ .op = VRT_OP_STACK, .id = 2, .id2 = 0, .aux2 = VRT_FRAME_NATIVE, .aux = 0x402000 },
	};
	struct bytes b = append_chunk(new_trace(0), VRT_CHUNK_TABLES, VRT_CODEC_ZSTD, 1, raw,
				      encode(raw, tables, sizeof(tables) / sizeof(tables[0])));
	struct vrt_record ev[48 * 6];
	size_t n = 0;
	uint64_t ts = 0;
	for (uint64_t step = 0; step < 48; step++) {
		if (phases)
			ev[n++] = (struct vrt_record){ .op = VRT_OP_PHASE_ENTER, .ts = ++ts, .id = 3 };
		ev[n++] = (struct vrt_record){ .op = VRT_OP_ALLOC, .ts = ++ts, .api = VRT_API_CUDA_MALLOC, .addr = 0x100000,
					       .size = 64 << 20, .stack = 2 };
		ev[n++] = (struct vrt_record){ .op = VRT_OP_FREE, .ts = ++ts, .api = VRT_API_CUDA_FREE, .addr = 0x100000,
					       .size = 64 << 20, .stack2 = 2 };
		ev[n++] = (struct vrt_record){ .op = VRT_OP_ALLOC, .ts = ++ts, .api = VRT_API_CUDA_MALLOC,
					       .addr = 0x10000000 + step * 0x100000, .size = 1 << 20, .stack = 1 };
		if (step % 8 == 3)
			ev[n++] = (struct vrt_record){ .op = VRT_OP_LOST, .ts = ++ts, .id = 3 };
		if (phases)
			ev[n++] = (struct vrt_record){ .op = VRT_OP_PHASE_EXIT, .ts = ++ts, .id = 3 };
	}
	b = append_chunk(b, VRT_CHUNK_EVENTS, VRT_CODEC_ZSTD, 2, raw, encode(raw, ev, n));
	close_trace(b, 2, n);
	return b;
}

static void hostile_cases(void)
{
	static const char *const MSG_BUDGET = "the analysis needs more memory than --max-memory 256.0 MiB allows";
	static const struct {
		const char *name;
		uint8_t op;
	} jumps[] = { { "id-jump-strings", VRT_OP_STRING }, { "id-jump-stacks", VRT_OP_STACK },
		      { "id-jump-pyframes", VRT_OP_PYFRAME }, { "id-jump-threads", VRT_OP_THREAD_INFO } };
	for (size_t i = 0; i < sizeof(jumps) / sizeof(jumps[0]); i++) {
		struct bytes b = id_jump(jumps[i].op);
		bad_with(jumps[i].name, b, 3, MSG_RANGE, -1, NULL, "rss=64 secs=10");
		free(b.p);
	}
	/* 16.8 M allocations: stopped by the budget, long before the OOM killer. */
	struct bytes b = alloc_bomb(16800000);
	bad_with("zstd-bomb-16m-allocs", b, 6, MSG_BUDGET, -1, NULL, "args=--max-memory,256M rss=400 secs=30");
	free(b.p);
	/* 1 M allocations read whole: at most 128 bytes each (model.h), the decompression buffer, the rest. */
	b = alloc_bomb(1000000);
	bad_with("zstd-bomb-1m-allocs", b, 0, "", -1, NULL, "rss=250 secs=20");
	free(b.p);
	b = checkpoint_bomb(12000000);
	bad_with("checkpoint-bomb-12m-items", b, 6, MSG_BUDGET, -1, NULL, "args=--max-memory,256M rss=400 secs=30");
	free(b.p);
	/* A ring whose header claims 16 GiB (or 1 TiB) and holds a few KB: check_bad.py extends the
	 * file, sparse, to what the header claims (37 s for 16 GiB with the old 8-byte scan). */
	static const struct {
		const char *name, *limits;
		uint64_t ring;
	} sparse[] = { { "sparse-ring-16g", "rss=64 secs=10 size=17179873280", 16ull << 30 },
		       { "sparse-ring-1t", "rss=64 secs=10 size=1099511631872", 1ull << 40 } };
	for (size_t i = 0; i < sizeof(sparse) / sizeof(sparse[0]); i++) {
		b = named_site((const uint8_t *)"sparse_ring_site", 16, sparse[i].ring);
		bad_with(sparse[i].name, b, 0, "", -1, NULL, sparse[i].limits);
		free(b.p);
	}
	/* One function name of 8 MiB: shown cut, not carried whole into every output. */
	size_t big = 8u << 20;
	uint8_t *name = malloc(big);
	for (size_t i = 0; i < big; i++)
		name[i] = (uint8_t)('a' + i % 26);
	b = named_site(name, big, 0);
	bad_with("name-8mib", b, 0, "", -1, NULL, "rss=128 secs=10 stdout_max=20000");
	free(b.p);
	free(name);
	/* Terminal escapes in a function name and a module path: shown escaped. */
	static const char escapes[] = "evil\x1b]0;PWNED\x07\x1b[2J\x9b" "31m\xe2\x80\xae" "fn";
	b = named_site((const uint8_t *)escapes, sizeof(escapes) - 1, 0);
	bad_with("control-chars-in-names", b, 0, "", -1, NULL, "clean=1");
	free(b.p);
	/* Events lost while recording: leaks says so beside what they can fake (test_hostile_input.py). */
	b = lossy_trace(false);
	bad("lossy-growth", b, 0, "", -1, NULL);
	free(b.p);
	b = lossy_trace(true);
	bad("lossy-phases", b, 0, "", -1, NULL);
	free(b.p);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: make_corpus DIR (tests/fuzz)\n");
		return 2;
	}
	snprintf(root, sizeof(root), "%s", argv[1]);
	const char *t = getenv("TMPDIR");
	snprintf(tmpdir, sizeof(tmpdir), "%s/vrt-corpus-XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(tmpdir))
		die("mkdtemp");
	if (mkdir(root, 0755) && errno != EEXIST)
		die(root);
	mkdirs("corpus");
	mkdirs("corpus/reader");
	mkdirs("corpus/chunks");
	mkdirs("corpus/ctl");
	mkdirs("bad");

	struct vt_gen g;
	struct bytes base = small_keep_all(&g, "base", 4, 12);
	save("corpus/reader", "keep-all.trace", base.p, base.len);
	struct bytes ops = every_op();
	save("corpus/reader", "every-op.trace", ops.p, ops.len);
	struct bytes ring = small_ring();
	save("corpus/reader", "ring-wrapped.trace", ring.p, ring.len);
	chunk_recipes();
	ctl_seeds();

	char path[4200];
	snprintf(path, sizeof(path), "%s/bad/EXPECTED", root);
	expected = fopen(path, "w");
	if (!expected)
		die(path);
	fprintf(expected, "# name\texit status of `vramtrace report`\ta piece of its stderr\tevents it replays (empty: "
			  "refused)\tok | xfail: known analyzer bug\n");
	header_cases(base, events_before(&g, SIZE_MAX));
	chunk_cases(base, &g);
	record_cases(base, &g);
	hostile_cases();
	/* The valid seeds must read fine (a check on the generator itself). */
	bad("valid-every-op", ops, 0, "", (long long)every_op_events, NULL);
	/* replayed from the oldest whole checkpoint (seq 3): the 3 events of seq 4, nothing of seq 2 */
	bad("valid-ring-wrapped", ring, 0, "the ring overwrote the oldest history", 3, NULL);
	if (fclose(expected))
		die(path);
	vt_gen_free(&g);
	free(base.p);
	free(ops.p);
	free(ring.p);
	snprintf(path, sizeof(path), "rm -rf '%s'", tmpdir);
	if (system(path))
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return 0;
}
