/* SPDX-License-Identifier: MIT */
/*
 * peakmem - runs a command (stdout to /dev/null unless -k) and prints, on stderr, one line:
 *   wall_s=… user_s=… sys_s=… maxrss_kb=… anon_peak_kb=… file_peak_kb=… rc=…
 *
 * maxrss_kb is the kernel's high-water mark (getrusage of the child, as /usr/bin/time -v
 * reports it): anonymous memory plus the file pages the child had mapped (the analyzer reads
 * traces with pread, so only its own binary and libraries'); anon_peak_kb (RssAnon, sampled
 * from /proc/PID/status every 2 ms) is the memory it allocated itself: the live model, the
 * tables, the decompression buffer. file_peak_kb is the sampled peak of RssFile. The child is
 * forked from this small process: a child of a large one would carry that one's pages in its
 * maxrss (the kernel keeps the high-water mark across exec).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long status_kb(pid_t pid, const char *key)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *p = strstr(buf, key);
	return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

int main(int argc, char **argv)
{
	int keep = argc > 1 && !strcmp(argv[1], "-k");
	char **cmd = argv + 1 + keep;
	if (!cmd[0]) {
		fprintf(stderr, "usage: peakmem [-k] COMMAND [ARGS...]\n");
		return 2;
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid_t pid = fork();
	if (pid == 0) {
		if (!keep) {
			int null = open("/dev/null", O_WRONLY);
			dup2(null, 1);
		}
		execvp(cmd[0], cmd);
		perror(cmd[0]);
		_exit(127);
	}
	long anon = 0, file = 0;
	int status;
	struct rusage ru;
	for (;;) {
		pid_t r = wait4(pid, &status, WNOHANG, &ru);
		if (r == pid)
			break;
		long a = status_kb(pid, "RssAnon:"), f = status_kb(pid, "RssFile:");
		anon = a > anon ? a : anon;
		file = f > file ? f : file;
		struct timespec nap = { 0, 2000000 };
		nanosleep(&nap, NULL);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	fprintf(stderr, "wall_s=%.3f user_s=%.3f sys_s=%.3f maxrss_kb=%ld anon_peak_kb=%ld file_peak_kb=%ld rc=%d\n",
		(double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
		ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6, ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6,
		ru.ru_maxrss, anon, file, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
