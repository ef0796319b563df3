/* SPDX-License-Identifier: MIT */
/* The analyzer's memory budget (--max-memory): budget.c counts every heap allocation. */
#ifndef VRAMTRACE_BUDGET_H
#define VRAMTRACE_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

/* The least default budget: below it the machine is too full to analyze anything anyway. */
#define VRT_BUDGET_FLOOR (256ull << 20)

/* Heap bytes the process may hold; an allocation past it ends the command (VRT_EXIT_LIMIT). */
void vrt_budget_set(uint64_t bytes);
uint64_t vrt_budget_get(void);
/* Half the machine's memory, or three quarters of what is available to it (the cgroup's room
 * included), whichever is less; at least VRT_BUDGET_FLOOR. */
uint64_t vrt_budget_default(void);

#endif /* VRAMTRACE_BUDGET_H */
