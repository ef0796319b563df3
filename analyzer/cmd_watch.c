/* SPDX-License-Identifier: MIT */
/*
 * vramtrace watch PID: the sites that grow in a running process, every few seconds, without
 * stopping it. Each tick asks the process for a snapshot (its live set, with stacks, into a
 * private temporary directory: what `vramtrace snapshot` writes), groups what is live by site
 * and compares it with the first tick and the one before. Works on a traced or attached process
 * (an armed one keeps no stacks and refuses a snapshot until attached); the snapshot is deleted
 * once read.
 *
 * A site is keyed by where the user's code made it (attribution.h), not by stack id: ids are
 * per file, and every tick is a new file.
 *
 * Where the driver's NVML is there, each tick also reads what the driver counts for the process
 * (driver_memory.h) and sets its growth beside the traced CUDA allocations' growth: an attached
 * process's allocations through a function it looked up before the attach are not traced, and
 * this is where they show.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attribution.h"
#include "cli.h"
#include "commands.h"
#include "control_client.h"
#include "driver_memory.h"
#include "json.h"
#include "model.h"
#include "report_common.h"
#include "sites.h"
#include "vramtrace/control.h"
#include "vramtrace/error.h"

#define KEY_LEN 640

/* Driver growth beyond the traced CUDA allocations' growth that watch calls out: above what a
 * lazily loaded module or a library's workspace adds in one go. */
#define UNSEEN_WORTH_SAYING (64ll << 20)

struct watch_options {
	double interval;
	int top, count;
	bool json;
	int pid;
};

/* What was live at one tick, by site. */
struct tick {
	struct entry {
		char key[KEY_LEN];
		int64_t bytes;
	} *v;
	size_t n;
	int64_t total;
	bool tensors;
	double at;          /* seconds since the first tick */
	int64_t cuda_total; /* traced CUDA device allocations, whatever layer total counts */
	int driver_rc;      /* 0: driver_bytes holds the driver's figure (driver_memory.h) */
	uint64_t driver_bytes;
};

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig, stop = 1; }

static int by_key(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->key, ((const struct entry *)b)->key);
}

static int64_t bytes_of(const struct tick *t, const char *key)
{
	if (!t)
		return 0;
	struct entry probe, *e;
	snprintf(probe.key, sizeof(probe.key), "%s", key);
	e = bsearch(&probe, t->v, t->n, sizeof(*t->v), by_key);
	return e ? e->bytes : 0;
}

/* "main (grow.py:27)", "loop_site (prog)", "[PyTorch allocator cache: ...]". */
static void site_key(const struct vrt_trace *t, const struct vrt_site *s, char *key)
{
	if (s->label) {
		snprintf(key, KEY_LEN, "%s", s->label);
		return;
	}
	struct vrt_attribution a;
	char name[512];
	vrt_attribute(t, s->stack, 0, &a);
	vrt_attribution_name(&a, name, sizeof(name));
	if (a.python && a.user.file[0]) {
		const char *base = strrchr(a.user.file, '/');
		snprintf(key, KEY_LEN, "%s (%s:%d)", name, base ? base + 1 : a.user.file, a.user.line);
	} else {
		snprintf(key, KEY_LEN, "%s", name);
	}
}

/* The snapshot at path, read into tick: tensors where PyTorch's allocator is seen, else CUDA
 * allocations, as report groups them. Sites that share a key are added together. */
static int read_tick(const char *path, struct tick *k)
{
	struct vrt_trace t;
	int rc = vrt_trace_open(&t, path);
	if (rc)
		return vrt_fail(rc, "%s", path);
	vrt_attribution_use(&t);
	struct vrt_model m;
	if (vrt_model_init(&m)) {
		vrt_trace_close(&t);
		return vrt_fail(VRT_E_NOMEM, "watch");
	}
	if (!(rc = vrt_report_replay(&t, &m, true))) {
		for (int dev = 0; dev < VRT_MAX_DEVICES; dev++)
			k->cuda_total += m.live[dev][VRT_KIND_DEVICE] + m.live[dev][VRT_KIND_ARRAY];
		struct vrt_sites sites;
		vrt_sites_init(&sites);
		k->tensors = m.any_blocks;
		vrt_report_group_live(&t, &m, &sites, -2, k->tensors ? -1 : VRT_KIND_DEVICE);
		k->v = calloc(sites.n ? sites.n : 1, sizeof(*k->v));
		for (size_t i = 0; k->v && i < sites.n; i++) {
			site_key(&t, &sites.v[i], k->v[k->n].key);
			k->v[k->n++].bytes = sites.v[i].bytes;
			k->total += sites.v[i].bytes;
		}
		if (!k->v)
			rc = vrt_fail(VRT_E_NOMEM, "watch");
		vrt_sites_free(&sites);
		if (k->n)
			qsort(k->v, k->n, sizeof(*k->v), by_key);
		size_t w = 0; /* one entry per key */
		for (size_t i = 0; i < k->n; i++) {
			if (w && !strcmp(k->v[w - 1].key, k->v[i].key))
				k->v[w - 1].bytes += k->v[i].bytes;
			else
				k->v[w++] = k->v[i];
		}
		k->n = w;
	}
	vrt_model_free(&m);
	vrt_trace_close(&t);
	return rc;
}

struct growth {
	const struct entry *e;
	int64_t since_first, since_last;
};

static int by_growth(const void *a, const void *b)
{
	const struct growth *x = a, *y = b;
	return x->since_first < y->since_first ? 1 : x->since_first > y->since_first ? -1 : strcmp(x->e->key, y->e->key);
}

/* The driver's figure under the tick's line, and what of its growth the trace did not see. */
static void print_driver(const struct tick *now, const struct tick *first, const struct tick *last,
			 int64_t driver_growth, int64_t unseen)
{
	printf("          driver: %s in use by the process", vrt_bytes((int64_t)now->driver_bytes));
	if (last)
		printf(" (%s%s since the first look)", driver_growth >= 0 ? "+" : "-",
		       vrt_bytes(driver_growth >= 0 ? driver_growth : -driver_growth));
	putchar('\n');
	if (last && unseen >= UNSEEN_WORTH_SAYING)
		printf("          ! %s of that growth is not in the trace: allocations through a CUDA function the\n"
		       "            program looked up before the attach (see vramtrace attach --help), or the\n"
		       "            driver's own (modules loaded lazily, a new context)\n",
		       vrt_bytes(unseen));
}

static void print_tick(const struct watch_options *o, const struct tick *first, const struct tick *last,
		       const struct tick *now)
{
	struct growth *g = calloc(now->n ? now->n : 1, sizeof(*g));
	size_t n = 0;
	for (size_t i = 0; g && i < now->n; i++) {
		int64_t a = now->v[i].bytes - bytes_of(first, now->v[i].key);
		int64_t b = now->v[i].bytes - bytes_of(last, now->v[i].key);
		if (a > 0)
			g[n++] = (struct growth){ &now->v[i], a, b };
	}
	if (n)
		qsort(g, n, sizeof(*g), by_growth);
	double step = last ? now->at - last->at : 0;
	bool driver = !now->driver_rc && !first->driver_rc;
	int64_t driver_growth = driver ? (int64_t)(now->driver_bytes - first->driver_bytes) : 0;
	int64_t unseen = driver_growth - (now->cuda_total - first->cuda_total);
	if (o->json) {
		printf("{\"pid\": %d, \"t\": %.3f, \"layer\": \"%s\", \"live_bytes\": %lld, \"since_first_bytes\": %lld, "
		       "\"traced_cuda_bytes\": %lld, \"traced_cuda_since_first_bytes\": %lld, ",
		       o->pid, now->at, now->tensors ? "tensors" : "cuda", (long long)now->total,
		       (long long)(now->total - first->total), (long long)now->cuda_total,
		       (long long)(now->cuda_total - first->cuda_total));
		if (driver)
			printf("\"driver_bytes\": %llu, \"driver_since_first_bytes\": %lld, \"unseen_since_first_bytes\": %lld, ",
			       (unsigned long long)now->driver_bytes, (long long)driver_growth, (long long)unseen);
		else
			printf("\"driver_bytes\": null, \"driver_since_first_bytes\": null, \"unseen_since_first_bytes\": null, ");
		printf("\"growing\": [");
		for (size_t i = 0; i < n && (long long)i < o->top; i++) {
			printf("%s{\"site\": ", i ? ", " : "");
			json_string(stdout, g[i].e->key);
			printf(", \"bytes\": %lld, \"since_first_bytes\": %lld, \"since_last_bytes\": %lld, "
			       "\"bytes_per_second\": %.0f}", (long long)g[i].e->bytes, (long long)g[i].since_first,
			       (long long)g[i].since_last, step > 0 ? (double)g[i].since_last / step : 0.0);
		}
		printf("]}\n");
	} else {
		printf("%+7.1fs  live %s (%s)", now->at, vrt_bytes(now->total), now->tensors ? "tensors" : "CUDA");
		if (last)
			printf("  %s%s since the first look", now->total >= first->total ? "+" : "-",
			       vrt_bytes(now->total >= first->total ? now->total - first->total : first->total - now->total));
		putchar('\n');
		if (driver)
			print_driver(now, first, last, driver_growth, unseen);
		for (size_t i = 0; i < n && (long long)i < o->top; i++) {
			printf("          +%-10s %s", vrt_bytes(g[i].since_first), vrt_escape(g[i].e->key));
			if (step > 0)
				printf("  (%s%s/s now)", g[i].since_last >= 0 ? "+" : "-",
				       vrt_bytes((int64_t)((double)(g[i].since_last >= 0 ? g[i].since_last : -g[i].since_last) /
							  step)));
			putchar('\n');
		}
	}
	fflush(stdout);
	free(g);
}

static int parse(int argc, char **argv, struct watch_options *o)
{
	*o = (struct watch_options){ .interval = 5, .top = 5, .count = 0 };
	const char *pid = NULL;
	const struct vrt_arg opts[] = {
		VRT_OPT_JSON(&o->json),
		{ "--interval", NULL, VRT_ARG_SECONDS, &o->interval },
		{ "--top", NULL, VRT_ARG_INT, &o->top, 1, 1000 },
		{ "--count", NULL, VRT_ARG_INT, &o->count, 1, 1000000 },
		VRT_OPT_END,
	};
	int n, rc = vrt_args_parse("watch", argc, argv, opts, &pid, 1, &n);
	if (rc)
		return rc;
	if (o->interval < 0.05)
		return vrt_usage("watch", "--interval takes at least 0.05 seconds");
	if (!pid)
		return vrt_usage("watch", "expected a process id: vramtrace watch PID");
	return vrt_ctl_parse_pid("watch", pid, &o->pid);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One tick: a snapshot into dir, read, removed, and the driver's figure where it has one. 1
 * when the process has gone. */
static int take(const struct watch_options *o, struct vrt_driver_memory *driver, const char *dir, long long n,
		struct tick *k)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%lld.vrt", dir, n);
	int rc = vrt_ctl_client_request(o->pid, VRT_CTL_PEEK, path, 300000, VRT_NOT_TRACED, true);
	if (rc) {
		unlink(path);
		return kill(o->pid, 0) && errno == ESRCH ? 1 : rc;
	}
	rc = read_tick(path, k);
	unlink(path);
	k->driver_rc = driver ? vrt_driver_memory_of(driver, o->pid, &k->driver_bytes) : VRT_E_UNSUPPORTED;
	return rc;
}

int vrt_cmd_watch(int argc, char **argv)
{
	struct watch_options o;
	int rc = parse(argc, argv, &o);
	if (rc < 0) /* --help, printed */
		return 0;
	if (rc || (rc = vrt_ctl_check_process(&o.pid)))
		return rc;
	const char *tmp = getenv("TMPDIR");
	char dir[1024]; /* mkdtemp's 0700: the snapshots hold the process's stacks */
	if (snprintf(dir, sizeof(dir), "%s/vramtrace-watch-XXXXXX", tmp && tmp[0] == '/' ? tmp : "/tmp") >= (int)sizeof(dir))
		snprintf(dir, sizeof(dir), "/tmp/vramtrace-watch-XXXXXX");
	char *d = mkdtemp(dir);
	if (!d)
		return vrt_fail(VRT_E_IO, "cannot make a temporary directory for the snapshots: %s", strerror(errno));
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	struct vrt_driver_memory *driver = NULL;
	vrt_driver_memory_open(&driver); /* none: no driver figure, nothing else changes */
	struct tick first = { 0 }, last = { 0 }, now = { 0 };
	double start = now_s();
	for (long long n = 0; !stop && (!o.count || n < o.count); n++) {
		if (n) {
			struct timespec pause = { (time_t)o.interval, (long)((o.interval - (double)(time_t)o.interval) * 1e9) };
			while (!stop && nanosleep(&pause, &pause) && errno == EINTR)
				;
			if (stop)
				break;
		}
		memset(&now, 0, sizeof(now));
		if ((rc = take(&o, driver, d, n, &now))) {
			if (rc == 1) {
				if (!o.json)
					printf("process %d has exited\n", o.pid);
				rc = 0;
			}
			free(now.v);
			break;
		}
		now.at = now_s() - start;
		if (!n && !o.json) { /* once the process has answered: a refusal is the only line */
			printf("vramtrace watch: process %d every %.3g s (Ctrl-C stops; the process goes on)\n", o.pid,
			       o.interval);
			if (driver && now.driver_rc == VRT_E_NOENT)
				printf("(the driver lists no process %d: no driver figure beside the trace's; in a "
				       "container it may list the host's process ids)\n", o.pid);
		}
		print_tick(&o, n ? &first : &now, n > 1 ? &last : n ? &first : NULL, &now);
		if (!n) {
			first = now;
		} else {
			if (n > 1)
				free(last.v);
			last = now;
		}
	}
	if (last.v != first.v)
		free(last.v);
	free(first.v);
	vrt_driver_memory_close(driver);
	rmdir(d);
	return rc;
}
