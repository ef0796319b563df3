/* SPDX-License-Identifier: MIT */
/*
 * Per-thread single-producer/single-consumer byte rings.
 *
 * Producer (the owning thread): writes a record at head, then publishes it with a release store
 * of head. Consumer (the collector): reads up to head with acquire, then releases the space with
 * a store of tail. A record never straddles the end of the ring: a record with op 0 pads to it.
 *
 * Registry: a singly linked list. Threads push new buffers at the head with CAS; only the
 * collector unlinks (dead threads' buffers, after draining), and it never unlinks the head node,
 * so pushes and unlinks never touch the same pointer.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "vramtrace/rings.h"

static _Atomic(struct vrt_tbuf *) registry;
static _Atomic uint32_t next_thread_index = 1;
static pthread_key_t exit_key;

/*
 * A full ring (issue 22, item 5): the thread yields a few times (a burst the collector is
 * already draining), then sleeps in growing steps, waking the collector each time, until there
 * is room: a drain frees the ring up to its head, so a collector that runs makes room within
 * one round. One that frees none for VRAMTRACE_FULL_WAIT_MS (stopped for a fork, blocked on a
 * lock this thread holds: a hook inside a constructor that holds the loader's lock) ends the
 * wait; the event is counted lost, and so is every later one that finds the ring full, without
 * waiting, until the collector has drained some of it (a stuck collector must not slow every
 * call).
 * Never waits: without a collector thread (none yet in a forked child, finished, a crash
 * flush under way), with VRAMTRACE_FULL_WAIT_MS=0, in a side buffer or a hook nested in a
 * signal handler (a handler must not block: it drops and counts). The thread holds no lock of
 * vramtrace's while it waits (the stack capture's fork section is left before reserving).
 */
#define FULL_YIELDS 64
#define FULL_PAUSE_MIN_NS 20000
#define FULL_PAUSE_MAX_NS 1000000

static void thread_exit(void *p)
{
	struct vrt_tbuf *b = p;
	b->lost += atomic_exchange_explicit(&vrt_tls.missed, 0, memory_order_relaxed); /* reported by the collector */
	for (struct vrt_tbuf *s = atomic_load(&b->side); s; s = atomic_load(&s->side))
		atomic_store_explicit(&s->dead, 1, memory_order_release);
	atomic_store_explicit(&b->dead, 1, memory_order_release);
	vrt_tls.buf = NULL;
}

void vrt_tbuf_init(void) { pthread_key_create(&exit_key, thread_exit); }

struct vrt_tbuf *vrt_tbuf_list(void) { return atomic_load_explicit(&registry, memory_order_acquire); }

_Atomic uint64_t vrt_tbuf_unbuffered;
_Atomic uint64_t vrt_tbuf_smallest;

/* mmap and CAS only: a signal handler's hook may create one (a side buffer, or its thread's
 * first). Smaller than VRAMTRACE_THREAD_BUFFER when that much cannot be mapped (an address
 * space limit): the collector says so once. */
/*
 * The rings sidecar (include/vramtrace/rings.h): a buffer of the configured size takes a free
 * slot and maps it MAP_SHARED, so what its thread published survives a SIGKILL in the page
 * cache. Syscalls and atomics only, like tbuf_map. A slot is free again once its thread is dead
 * and every byte it published is durable (vrt_tbuf_reclaim_dead). No slot (all taken, or no
 * sidecar: armed mode, a sidecar that could not be made): anonymous memory, as before.
 */
_Static_assert(offsetof(struct vrt_tbuf, head) == VRT_RINGS_OFF_HEAD, "rings.h: head");
_Static_assert(offsetof(struct vrt_tbuf, tail) == VRT_RINGS_OFF_TAIL, "rings.h: tail");
_Static_assert(offsetof(struct vrt_tbuf, pending_tail) == VRT_RINGS_OFF_PENDING_TAIL, "rings.h: pending_tail");
_Static_assert(offsetof(struct vrt_tbuf, pending_seq) == VRT_RINGS_OFF_PENDING_SEQ, "rings.h: pending_seq");
_Static_assert(offsetof(struct vrt_tbuf, capacity) == VRT_RINGS_OFF_CAPACITY, "rings.h: capacity");
_Static_assert(offsetof(struct vrt_tbuf, index) == VRT_RINGS_OFF_INDEX, "rings.h: index");
_Static_assert(offsetof(struct vrt_tbuf, tid) == VRT_RINGS_OFF_TID, "rings.h: tid");

_Static_assert(sizeof(struct vrt_raw) == sizeof(struct vrt_rings_raw) &&
		       offsetof(struct vrt_raw, stack_id) == offsetof(struct vrt_rings_raw, stack_id) &&
		       offsetof(struct vrt_raw, ts_ns) == offsetof(struct vrt_rings_raw, ts_ns) &&
		       offsetof(struct vrt_raw, stack_hash) == offsetof(struct vrt_rings_raw, stack_hash) &&
		       VRT_RAW_HAS_FRAMES == VRT_RINGS_RAW_FRAMES && VRT_PY_EVAL_BOUNDARY == VRT_RINGS_PY_EVAL_BOUNDARY,
	       "rings.h: raw record layout");

static _Atomic(struct vrt_rings_header *) rings;
static int rings_fd = -1;

size_t vrt_tbuf_slot_header(void) { return (sizeof(struct vrt_tbuf) + 4095) & ~(size_t)4095; }

void vrt_tbuf_use_rings(int fd, struct vrt_rings_header *hdr)
{
	rings_fd = fd;
	atomic_store_explicit(&rings, hdr, memory_order_release);
}

/* Buffers already in slots keep their mapping (the file is gone, not the memory). */
void vrt_tbuf_drop_rings(void) { atomic_store_explicit(&rings, NULL, memory_order_release); }

static int slot_take(struct vrt_rings_header *h)
{
	_Atomic uint32_t *next = (_Atomic uint32_t *)&h->next_slot;
	uint32_t fresh = atomic_fetch_add(next, 1);
	if (fresh < h->n_slots) {
		atomic_store((_Atomic uint8_t *)&h->in_use[fresh], 1);
		return (int)fresh;
	}
	atomic_fetch_sub(next, 1);
	for (uint32_t i = 0; i < h->n_slots; i++) {
		uint8_t zero = 0;
		if (atomic_compare_exchange_strong((_Atomic uint8_t *)&h->in_use[i], &zero, 1))
			return (int)i;
	}
	return -1;
}

static struct vrt_tbuf *slot_map(void)
{
	struct vrt_rings_header *h = atomic_load_explicit(&rings, memory_order_acquire);
	if (!h || h->capacity != vrt_cfg.thread_buffer)
		return NULL;
	int slot = slot_take(h);
	if (slot < 0)
		return NULL;
	size_t hdr = vrt_tbuf_slot_header();
	off_t at = (off_t)(VRT_RINGS_HEADER_SIZE + (uint64_t)slot * h->slot_size);
	/* The slot's blocks are allocated before it is used: a page of a sparse file that the disk
	 * has no room for would raise SIGBUS in this thread at its first write. */
	void *mem = fallocate(rings_fd, 0, at, (off_t)h->slot_size)
			    ? MAP_FAILED
			    : mmap(NULL, hdr + h->capacity, PROT_READ | PROT_WRITE, MAP_SHARED, rings_fd, at);
	if (mem == MAP_FAILED) {
		atomic_store((_Atomic uint8_t *)&h->in_use[slot], 0);
		return NULL;
	}
	struct vrt_tbuf *b = mem;
	memset(b, 0, sizeof(*b)); /* a slot used before: its old thread's bytes were all durable */
	b->data = (uint8_t *)mem + hdr;
	b->capacity = h->capacity;
	b->slot = slot;
	return b;
}

static void slot_release(int slot)
{
	struct vrt_rings_header *h = atomic_load_explicit(&rings, memory_order_acquire);
	if (h && slot >= 0 && (uint32_t)slot < h->n_slots)
		atomic_store((_Atomic uint8_t *)&h->in_use[slot], 0);
}

static size_t tbuf_mapped_bytes(const struct vrt_tbuf *b)
{
	return (b->slot >= 0 ? vrt_tbuf_slot_header() : sizeof(struct vrt_tbuf)) + b->capacity;
}

static struct vrt_tbuf *tbuf_map(void)
{
	struct vrt_tbuf *shared = slot_map();
	if (shared)
		return shared;
	for (size_t cap = vrt_cfg.thread_buffer; cap >= 65536; cap >>= 1) {
		void *mem = mmap(NULL, sizeof(struct vrt_tbuf) + cap, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (mem == MAP_FAILED)
			continue;
		struct vrt_tbuf *b = mem;
		b->data = (uint8_t *)mem + sizeof(struct vrt_tbuf);
		b->capacity = cap;
		b->slot = -1;
		uint64_t small = atomic_load(&vrt_tbuf_smallest);
		while (cap < vrt_cfg.thread_buffer && (!small || cap < small) &&
		       !atomic_compare_exchange_weak(&vrt_tbuf_smallest, &small, cap))
			;
		return b;
	}
	return NULL;
}

static void tbuf_register(struct vrt_tbuf *b)
{
	/* seq_cst: a fork prepare that misses this buffer in the list is ordered before the
	 * owner's first fork section, which then sees vrt_forking (internal.h). */
	struct vrt_tbuf *head = atomic_load(&registry);
	do
		b->next = head;
	while (!atomic_compare_exchange_weak(&registry, &head, b));
}

static struct vrt_tbuf *tbuf_create(void)
{
	struct vrt_tbuf *b = tbuf_map();
	if (!b)
		return NULL;
	b->tid = (pid_t)syscall(SYS_gettid);
	b->index = atomic_fetch_add(&next_thread_index, 1);
	tbuf_register(b);
	return b;
}

struct vrt_tbuf *vrt_tbuf_add_side(struct vrt_tbuf *after)
{
	struct vrt_tbuf *s = tbuf_map();
	if (!s)
		return NULL;
	s->tid = after->tid;
	s->index = after->index;
	s->side_buffer = true;
	tbuf_register(s);
	struct vrt_tbuf *none = NULL;
	if (atomic_compare_exchange_strong(&after->side, &none, s))
		return s;
	/* A handler interrupting us installed one first: ours goes back, unused, to the collector. */
	atomic_store_explicit(&s->dead, 1, memory_order_release);
	return none;
}

struct vrt_tbuf *vrt_tbuf_self(void)
{
	struct vrt_tbuf *b = vrt_tls.buf;
	if (VRT_LIKELY(b))
		return b;
	/* A forked child's first event starts its collector (a thread's first event comes here),
	 * and the process's first event has the trace file made before it is written anywhere. */
	vrt_collector_start_pending();
	vrt_collector_want_file();
	if (vrt_tls.no_buffer || !(b = tbuf_create())) {
		vrt_tls.no_buffer = true; /* not a failing mmap per event */
		atomic_fetch_add_explicit(&vrt_tbuf_unbuffered, 1, memory_order_relaxed);
		return NULL;
	}
	vrt_tls.buf = b;
	pthread_setspecific(exit_key, b);
	return b;
}

static struct vrt_raw *try_reserve(struct vrt_tbuf *b, size_t len)
{
	uint64_t head = atomic_load_explicit(&b->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&b->tail, memory_order_acquire);
	uint64_t pos = head & (b->capacity - 1);
	uint64_t to_end = b->capacity - pos;
	uint64_t need = len <= to_end ? len : to_end + len;
	if (b->capacity - (head - tail) < need)
		return NULL;
	if (len > to_end) {
		struct vrt_raw *pad = (struct vrt_raw *)(b->data + pos);
		pad->op = 0;
		pad->len = 0; /* op 0: skip to the ring end */
		atomic_store_explicit(&b->head, head + to_end, memory_order_release);
		pos = 0;
	}
	return (struct vrt_raw *)(b->data + pos);
}

/* Waits for room (see FULL_YIELDS); NULL when it may not wait or no room came in time. A drain
 * frees a ring up to its head, so the collector's progress is room: the wait is bounded in total. */
static struct vrt_raw *wait_for_room(struct vrt_tbuf *b, size_t len)
{
	uint64_t limit = (uint64_t)vrt_cfg.full_wait_ms * 1000000u;
	if (!limit || b->side_buffer || vrt_tls.nested)
		return NULL;
	uint64_t tail = atomic_load_explicit(&b->tail, memory_order_acquire);
	if (b->gave_up && tail == b->gave_up_tail)
		return NULL; /* still stuck since the last wait ran out */
	b->gave_up = false;
	uint64_t start = vrt_now_ns(), pause = FULL_PAUSE_MIN_NS;
	while (vrt_collector_alive() && vrt_now_ns() - start < limit) {
		vrt_collector_wake();
		struct timespec ts = { 0, (long)pause };
		nanosleep(&ts, NULL);
		struct vrt_raw *r = try_reserve(b, len);
		if (r)
			return r;
		pause = pause * 2 < FULL_PAUSE_MAX_NS ? pause * 2 : FULL_PAUSE_MAX_NS;
	}
	b->gave_up = true;
	b->gave_up_tail = atomic_load_explicit(&b->tail, memory_order_acquire);
	return NULL;
}

struct vrt_raw *vrt_tbuf_reserve_slow(struct vrt_tbuf *b, size_t len)
{
	if (len > b->capacity / 4)
		return NULL;
	struct vrt_raw *r = try_reserve(b, len);
	if (VRT_LIKELY(r))
		return r;
	for (int i = 0; i < FULL_YIELDS; i++) {
		vrt_collector_wake();
		sched_yield();
		if ((r = try_reserve(b, len)))
			return r;
	}
	if ((r = wait_for_room(b, len)))
		return r;
	b->lost++;
	return NULL;
}

void vrt_tbuf_reclaim_dead(void)
{
	struct vrt_tbuf *prev = atomic_load_explicit(&registry, memory_order_acquire);
	if (!prev)
		return;
	for (struct vrt_tbuf *b = prev->next; b; b = prev->next) {
		/* dead first: its acquire makes the owner's last head final. Read after head, a
		 * thread could publish and exit in between and its events be unmapped unread. */
		bool dead = atomic_load_explicit(&b->dead, memory_order_acquire);
		/* Not while it holds losses still to report: a thread that died after this drain's
		 * report_unflushed_losses looked at it would take its count along (6 events gone in
		 * 1 of 50 stress runs). Its lost is final once dead is seen (released after it). */
		if (dead && !b->lost && atomic_load(&b->head) == atomic_load(&b->tail)) {
			prev->next = b->next;
			int slot = b->slot;
			size_t bytes = tbuf_mapped_bytes(b);
			vrt_stack_memos_release(b);
			munmap(b, bytes);
			slot_release(slot); /* after: its next owner must not find it still mapped here */
			continue;
		}
		prev = b;
	}
}

/* Collector only: everything a drain took is in the file (see struct vrt_tbuf, tail). */
void vrt_tbuf_mark_pending(uint64_t seq)
{
	for (struct vrt_tbuf *b = vrt_tbuf_list(); b; b = b->next) {
		b->pending_tail = b->read_pos;
		atomic_signal_fence(memory_order_seq_cst); /* in the page cache before the chunk is */
		b->pending_seq = seq;
	}
	atomic_thread_fence(memory_order_release);
}

void vrt_tbuf_commit_pending(void)
{
	for (struct vrt_tbuf *b = vrt_tbuf_list(); b; b = b->next)
		if (b->pending_seq)
			atomic_store_explicit(&b->tail, b->pending_tail, memory_order_release);
}

void vrt_tbuf_commit_all(void)
{
	for (struct vrt_tbuf *b = vrt_tbuf_list(); b; b = b->next) {
		b->pending_tail = b->read_pos;
		atomic_store_explicit(&b->tail, b->read_pos, memory_order_release);
	}
}

/* Only while the collector is parked (see atfork_prepare): nothing is unlinked under us. */
bool vrt_tbuf_wait_sections(uint64_t deadline_ns)
{
	bool all = true;
	for (struct vrt_tbuf *b = atomic_load(&registry); b; b = b->next)
		if (b != vrt_tls.buf) /* our own: fork() from a signal handler inside a section */
			all &= vrt_fork_wait_clear(&b->in_section, deadline_ns);
	return all;
}

void vrt_tbuf_after_fork_child(void)
{
	vrt_tls.no_buffer = false;
	atomic_store(&vrt_tbuf_unbuffered, 0);
	/* The parent's buffers belong to threads that do not exist here; leak them (those in the
	 * parent's sidecar stay mapped, never written here). The child's trace gets its own. */
	atomic_store(&registry, NULL);
	atomic_store(&rings, NULL);
	rings_fd = -1;
	atomic_store(&next_thread_index, 1);
}
