/* SPDX-License-Identifier: MIT */
/*
 * Runs fuzz inputs without libFuzzer: every file named, and every file in every directory
 * named, goes through the target's LLVMFuzzerTestOneInput once. Built with the normal compiler
 * as the 'fuzz-replay' tests, so the seed and known-bad corpora run on every build (and under
 * the sanitizers in a sanitizer build). A crash or sanitizer report fails the test.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	size_t cap = 1 << 16, len = 0;
	uint8_t *buf = malloc(cap);
	size_t n;
	while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
		len += n;
		if (len == cap) {
			uint8_t *nb = realloc(buf, cap *= 2);
			if (!nb) {
				free(buf);
				buf = NULL;
			}
			buf = nb;
		}
	}
	fclose(f);
	if (!buf)
		return -1;
	/* An exact-size copy, so that an overread shows under ASan. */
	uint8_t *exact = malloc(len ? len : 1);
	if (!exact) {
		free(buf);
		return -1;
	}
	memcpy(exact, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
	int files = 0, errors = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st)) {
			perror(argv[i]);
			errors++;
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			errors += run_file(argv[i]) != 0;
			files++;
			continue;
		}
		DIR *d = opendir(argv[i]);
		if (!d) {
			perror(argv[i]);
			errors++;
			continue;
		}
		char **names = NULL;
		size_t n = 0, cap = 0;
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			if (n == cap) {
				cap = cap ? cap * 2 : 64;
				names = realloc(names, cap * sizeof(*names));
			}
			size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
			names[n] = malloc(len);
			snprintf(names[n++], len, "%s/%s", argv[i], e->d_name);
		}
		closedir(d);
		qsort(names, n, sizeof(*names), cmp);
		for (size_t k = 0; k < n; k++) {
			struct stat fs;
			if (!stat(names[k], &fs) && S_ISREG(fs.st_mode)) {
				errors += run_file(names[k]) != 0;
				files++;
			}
			free(names[k]);
		}
		free(names);
	}
	printf("%s: %d inputs ran\n%d passed, %d failed\n", argv[0], files, files - errors, errors);
	return errors || !files ? 1 : 0;
}
