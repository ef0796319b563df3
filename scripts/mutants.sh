#!/usr/bin/env bash
# Mutation testing: breaks, one at a time, the behaviours users rely on - each mutant is one
# small edit of one file - and checks that the tests meant to guard each behaviour fail. A
# mutant the tests survive is a hole in the suite.
#
#   scripts/mutants.sh [NAME...]     (default: every mutant below)
#   scripts/mutants.sh --list
#
# The tree as it is now (tracked and untracked files, not the ignored ones) is copied to a
# scratch directory and built there once; the tests of every mutant first run there unmutated
# (they must pass), then each mutant is applied (its text must occur exactly once in its file),
# built (it must build) and its tests run (-x: the first failure kills it). The source tree and
# ./build are never touched. Prints a table (mutant, file, tests run, killed or SURVIVED) and
# exits non-zero if any mutant survives, does not apply or does not build. About 10 minutes on
# two cores; scripts/test.sh runs it (stage "mutants").
#
# Environment: MUTANTS_DIR (scratch directory, default a new one under $TMPDIR, removed at the
# end), MUTANTS_JOBS (ninja jobs, default 2), MUTANTS_KEEP=1 (keep the scratch directory).
#
# A mutant is `m NAME FILE FROM TO TESTS...`: FROM and TO are exact text (\n and \t stand for a
# newline and a tab), TESTS are pytest node ids under tests/e2e/ or meson:TEST for a meson test
# (e.g. meson:damage). Pick tests that run in seconds: every mutant's tests run twice.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

names=() files=() froms=() tos=() tests=()
m() {
  names+=("$1") files+=("$2") froms+=("$3") tos+=("$4")
  shift 4
  tests+=("$*")
}

e2e=tests/e2e

# ---- the CUDA runtime (preload/hooks_runtime.c) ----------------------------------------------
m rt-malloc-size preload/hooks_runtime.c \
  'alloc_done(VRT_API_CUDA_MALLOC, r, VRT_KIND_DEVICE, vrt_current_device_runtime(), r ? NULL : *p, size, 0, 0);' \
  'alloc_done(VRT_API_CUDA_MALLOC, r, VRT_KIND_DEVICE, vrt_current_device_runtime(), r ? NULL : *p, size / 2, 0, 0);' \
  test_runtime.py::test_exact_totals_per_device_and_kind
m rt-free-unrecorded preload/hooks_runtime.c \
  'vrt_record_release(VRT_OP_FREE, api, ts, (uint64_t)(uintptr_t)p, 0, (uint64_t)(uintptr_t)s);' \
  '(void)ts;' \
  test_runtime.py::test_exact_totals_per_device_and_kind
m rt-pitch-width preload/hooks_runtime.c \
  'uint64_t size = r ? (uint64_t)width * height : (uint64_t)*pitch * height;' \
  'uint64_t size = (uint64_t)width * height;' \
  test_runtime.py::test_live_site_bytes_and_count
m rt-managed-kind preload/hooks_runtime.c \
  'alloc_done(VRT_API_CUDA_MALLOC_MANAGED, r, VRT_KIND_MANAGED,' \
  'alloc_done(VRT_API_CUDA_MALLOC_MANAGED, r, VRT_KIND_DEVICE,' \
  test_runtime.py::test_exact_totals_per_device_and_kind
# (a runtime call that passes through is still seen by the driver hook it makes: the free is
# recorded, under the driver's name - what the program called is lost)
m rt-free-async-passthrough preload/hooks_runtime.c \
  'hook_cudaFreeAsync(void *real, void *p, cudaStream_t s)\n{\n\treturn release(VRT_API_CUDA_FREE_ASYNC, real, p, s, true);' \
  'hook_cudaFreeAsync(void *real, void *p, cudaStream_t s)\n{\n\treturn ((cudaError_t (*)(void *, cudaStream_t))real)(p, s);' \
  test_runtime.py::test_exact_totals_per_device_and_kind test_runtime.py::test_frees_carry_the_size_of_what_they_freed
m rt-pool-alloc-unrecorded preload/hooks_runtime.c \
  'hook_cudaMallocFromPoolAsync(void *real, void **p, size_t n, cudaMemPool_t pool, cudaStream_t s)\n{\n\treturn alloc_async(' \
  'hook_cudaMallocFromPoolAsync(void *real, void **p, size_t n, cudaMemPool_t pool, cudaStream_t s)\n{\n\treturn ((cudaError_t (*)(void **, size_t, cudaMemPool_t, cudaStream_t))real)(p, n, pool, s);\n\treturn alloc_async(' \
  test_runtime.py::test_exact_totals_per_device_and_kind test_runtime.py::test_each_api_is_recorded_under_its_own_name
m rt-host-register-size preload/hooks_runtime.c \
  'alloc_done(VRT_API_CUDA_HOST_REGISTER, r, VRT_KIND_HOST_PINNED, -1, p, size, flags, 0);' \
  'alloc_done(VRT_API_CUDA_HOST_REGISTER, r, VRT_KIND_HOST_PINNED, -1, p, 0, flags, 0);' \
  test_runtime.py::test_exact_totals_per_device_and_kind

m rt-device-reset-unrecorded preload/hooks_runtime.c \
  '\t\tstruct vrt_event ev = { .op = VRT_OP_CONTEXT, .api = VRT_API_CU_PRIMARY_CTX_RESET, .device = (int16_t)dev };\n\t\tvrt_emit(&ev, false);' \
  '\t\t(void)dev;' \
  test_runtime.py::test_device_reset_takes_the_device_memory_with_it

# ---- the driver, its stream-ordered and pinned calls (preload/hooks_driver.c) ----------------
m drv-alloc-size preload/hooks_driver.c \
  'alloc_done(VRT_API_CU_MEM_ALLOC, r, VRT_KIND_DEVICE, vrt_current_device_driver(), r ? 0 : *dptr, size, 0, 0);' \
  'alloc_done(VRT_API_CU_MEM_ALLOC, r, VRT_KIND_DEVICE, vrt_current_device_driver(), r ? 0 : *dptr, size + 4096, 0, 0);' \
  test_driver.py::test_driver_exact_totals
m drv-free-unrecorded preload/hooks_driver.c \
  'vrt_record_release(VRT_OP_FREE, api, ts, p, 0, (uint64_t)(uintptr_t)s);' \
  '(void)ts;' \
  test_driver.py::test_driver_exact_totals
m drv-free-async-passthrough preload/hooks_driver.c \
  '\treturn free_common(VRT_API_CU_MEM_FREE_ASYNC, real, NULL, p, s);' \
  '\treturn ((CUresult (*)(CUdeviceptr, CUstream))real)(p, s);' \
  test_driver.py::test_driver_exact_totals test_driver.py::test_legacy_stream_async_free_frees_what_it_names
m drv-host-free-unrecorded preload/hooks_driver.c \
  'vrt_record_release(VRT_OP_FREE, api, ts, (uint64_t)(uintptr_t)p, 0, 0);' \
  '(void)ts;' \
  test_driver.py::test_driver_exact_totals
m drv-managed-kind preload/hooks_driver.c \
  'alloc_done(VRT_API_CU_MEM_ALLOC_MANAGED, r, VRT_KIND_MANAGED,' \
  'alloc_done(VRT_API_CU_MEM_ALLOC_MANAGED, r, VRT_KIND_DEVICE,' \
  test_driver.py::test_driver_exact_totals

m drv-pitch-width preload/hooks_driver.c \
  'uint64_t size = r ? (uint64_t)width * height : (uint64_t)*pitch * height;' \
  'uint64_t size = (uint64_t)width * height;' \
  test_driver.py::test_rest_exact_totals_a_context_reset_takes_the_device_memory_with_it
m drv-pool-alloc-passthrough preload/hooks_driver.c \
  '\treturn alloc_async(VRT_API_CU_MEM_ALLOC_FROM_POOL_ASYNC, real, d, n, pool, s);' \
  '\treturn ((CUresult (*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))real)(d, n, pool, s);' \
  test_driver.py::test_rest_exact_totals_a_context_reset_takes_the_device_memory_with_it
m context-reset-ignored format/live.c \
  '\t\tif (r->id == 0)\n\t\t\tcontext_reset(s, r->device);' \
  '\t\tif (0)\n\t\t\tcontext_reset(s, r->device);' \
  test_driver.py::test_rest_exact_totals_a_context_reset_takes_the_device_memory_with_it

# a runtime dlclose'd releases its primary context: the last release takes the memory with it
m primary-release-unrecorded preload/hooks_driver.c \
  '\tif (r == CUDA_SUCCESS)\n\t\trecord_if_destroyed(dev);' \
  '\t(void)r;' \
  test_coexistence.py::test_the_last_release_of_a_primary_context_takes_its_memory
# a runtime unloaded destroys its context through no path a lookup sees: dlclose asks the state
m dlclose-unwatched preload/hooks_dl.c \
  '\tif (rc == 0 && watched)\n\t\trecord_destroyed(&before);' \
  '\t(void)watched;' \
  test_coexistence.py::test_a_runtime_unloaded_takes_its_context_and_memory_with_it
m primary-release-counts-every-release preload/hooks_driver.c \
  'get_state(dev, &flags, &active) != CUDA_SUCCESS || active)' \
  'get_state(dev, &flags, &active) != CUDA_SUCCESS)' \
  test_coexistence.py::test_a_primary_context_still_referenced_keeps_its_memory

m dlclose-asks-an-unloaded-driver preload/hooks_dl.c \
  'bool watched = driver_still_loaded() && read_states(&before);' \
  'bool watched = read_states(&before);' \
  test_coexistence.py::test_dlclose_after_the_driver_was_unloaded_leaves_it_alone

# ---- virtual memory management: the preload's hooks and the live-set rules (format/live.c) ------
m vmm-release-unrecorded preload/hooks_driver.c \
  'vrt_record_release(VRT_OP_PHYS_RELEASE, VRT_API_CU_MEM_RELEASE, ts, h, 0, 0);' \
  '(void)ts;' \
  test_driver.py::test_driver_exact_totals
m vmm-retain-unrecorded preload/hooks_driver.c \
  'if (r == CUDA_SUCCESS) /* one more reference to an existing handle: size 0, see the spec */' \
  'if (0)' \
  test_driver.py::test_vmm_records_in_order
m vmm-unmap-one-mapping format/live.c \
  'uint64_t handle = l->aux, size = l->size, end_addr = r->addr + (r->size ? r->size : size);' \
  'uint64_t handle = l->aux, size = l->size, end_addr = r->addr + size;' \
  test_driver.py::test_driver_exact_totals
m vmm-handle-dies-at-release format/live.c \
  '\tif (refs || maps)\n\t\treturn false;' \
  '\tif (refs)\n\t\treturn false;' \
  test_driver.py::test_driver_exact_totals
m vmm-map-not-counted format/live.c \
  'handle_set(h, handle_refs(h), handle_maps(h) + 1);' \
  '(void)0;' \
  test_driver.py::test_driver_exact_totals test_driver.py::test_entry_point_vmm_exact_totals

# ---- frees in the live-set rules (format/live.c) --------------------------------------------
m analyzer-ignores-cuMemFreeAsync format/live.c \
  '\t\t    struct vrt_item *item)\n{\n\tuint8_t space = vrt_space_of(r->op);' \
  '\t\t    struct vrt_item *item)\n{\n\tif (r->api == VRT_API_CU_MEM_FREE_ASYNC)\n\t\treturn;\n\tuint8_t space = vrt_space_of(r->op);' \
  test_driver.py::test_driver_exact_totals
m analyzer-stale-free-applies format/live.c \
  '\tif (l->ts > r->ts) { /* stale: names an earlier incarnation */' \
  '\tif (0) { /* stale: names an earlier incarnation */' \
  meson:model

# ---- the tensor layer (PyTorch blocks, format/live.c, analyzer/model.c; checked against TRUTH.json)
m tensor-resize-ignored format/live.c \
  '\tif (!l || r->size == l->size)\n\t\treturn;\n\tif (r->size > l->size' \
  '\tif (1)\n\t\treturn;\n\tif (r->size > l->size' \
  test_h200_traces.py::test_tensor_layer_equals_memory_allocated_at_every_phase_boundary \
  test_h200_traces.py::test_leaks_growth_per_call_equals_pytorch_and_names_every_leaking_line
m tensor-free-not-counted analyzer/model.c \
  '\t\tm->tensors[d] += delta;' \
  '\t\tm->tensors[d] += delta > 0 ? delta : 0;' \
  test_h200_traces.py::test_tensor_layer_equals_memory_allocated_at_every_phase_boundary

# ---- stacks: native capture, Python frames ----------------------------------------------------
m stack-drops-innermost preload/stacks.c \
  'int kept = n - skip < depth ? n - skip : depth;' \
  'int kept = n - ++skip < depth ? n - skip : depth;' \
  test_runtime.py::test_live_site_bytes_and_count
m stack-depth-one-short preload/stacks.c \
  'int kept = n - skip < depth ? n - skip : depth;' \
  'int kept = n - skip < depth - 1 ? n - skip : depth - 1;' \
  test_runtime.py::test_run_depth_keeps_exactly_that_many_native_frames
m python-drops-innermost preload/python.c \
  '\tint out = 0;\n\tfor (int i = 0; i < n; i++) {' \
  '\tint out = 0;\n\tfor (int i = 1; i < n; i++) {' \
  test_python.py::test_weights_site_has_file_function_and_line_of_each_python_frame
m python-memo-ignores-instruction preload/python.c \
  'if (m->code != code || m->where != RD(uintptr_t, f, o_instr))' \
  'if (m->code != code)' \
  test_python.py::test_lines_of_one_frame_and_recursion_depths_are_separate_stacks
m python-deaths-not-counted preload/python.c \
  '\tatomic_fetch_add_explicit(&code_deaths, 1, memory_order_relaxed);\n' \
  '' \
  test_python.py::test_a_code_object_born_where_a_dead_one_was_is_named_anew
m python-deaths-not-in-hash preload/python.c \
  'if (w.n && deaths)' \
  'if (0)' \
  test_python.py::test_a_code_object_born_where_a_dead_one_was_is_named_anew
m python-frame-cache-kept-across-deaths preload/python.c \
  'if (frame_cache && frame_cache_deaths != deaths) {' \
  'if (0) {' \
  test_python.py::test_a_code_object_born_where_a_dead_one_was_is_named_anew
m python-code-index-unchecked-after-deaths preload/python.c \
  'if (guards_checked[known] == deaths)' \
  'if (1)' \
  test_python.py::test_a_code_object_reborn_with_the_same_file_name_and_line_is_named_by_its_qualified_name
m python-text-check-ignores-qualname preload/python.c \
  ' && text_equals(qualname_of(code), codes[known].qualname)) {' \
  ') {' \
  test_python.py::test_a_code_object_reborn_with_the_same_file_name_and_line_is_named_by_its_qualified_name
m stack-native-hash-kept-for-another-stack preload/stacks.c \
  '\tif (how == WALK_FAST_SAME && b->native_hash)' \
  '\tif (b->native_hash)' \
  test_unwind.py::test_the_fast_walk_records_what_libunwind_records
m unwind-memo-ignores-ip preload/unwind.c \
  'return o->sp_lo == (uint32_t)at->sp && o->ip == at->ip &&' \
  'return o->sp_lo == (uint32_t)at->sp &&' \
  meson:unwind
m unwind-rbp-not-restored preload/unwind.c \
  '\tif (o->flags & SHAPE_RBP_SAVED)\n\t\tat->rbp = *(const uintptr_t *)(cfa' \
  '\tif (0)\n\t\tat->rbp = *(const uintptr_t *)(cfa' \
  meson:unwind
m unwind-rbp-slot-unscaled preload/unwind.c \
  'at->rbp = *(const uintptr_t *)(cfa + (uintptr_t)((intptr_t)o->rbp_slot * 8));' \
  'at->rbp = *(const uintptr_t *)(cfa + (uintptr_t)((intptr_t)o->rbp_slot));' \
  meson:unwind
m unwind-return-address-slot preload/unwind.c \
  'at->ip = *(const uintptr_t *)(cfa - 8);' \
  'at->ip = *(const uintptr_t *)(cfa - 16);' \
  meson:unwind
m unwind-memo-cfa-not-kept preload/unwind.c \
  '\t\t\tf.cfa_off = o->cfa_off;' \
  '\t\t\tf.cfa_off = 8;' \
  meson:unwind
m unwind-moved-ignores-rbp preload/unwind.c \
  'if (o->ip != at->ip || ((o->flags & SHAPE_CFA_RBP) && o->rbp_off != at->rbp - at->sp))' \
  'if (o->ip != at->ip)' \
  meson:unwind
m unwind-memo-ignores-sp preload/unwind.c \
  'return o->sp_lo == (uint32_t)at->sp && o->ip == at->ip &&' \
  'return o->ip == at->ip &&' \
  meson:unwind
m unwind-memo-ignores-rbp preload/unwind.c \
  '(!(o->flags & SHAPE_CFA_RBP) || at->sp + o->rbp_off == at->rbp);' \
  '1;' \
  meson:unwind
m unwind-moved-never preload/unwind.c \
  '\t\t\tn = follow_moved(last, n_last, &at, top, next, out, &ended);' \
  '\t\t\tn = 0;' \
  meson:unwind
m watch-unseen-is-driver-growth analyzer/cmd_watch.c \
  'int64_t unseen = driver_growth - (now->cuda_total - first->cuda_total);' \
  'int64_t unseen = driver_growth;' \
  test_attach.py::test_watch_sees_nothing_unseen_where_the_trace_saw_it_all
m driver-memory-any-process analyzer/driver_memory.c \
  '			if (d->list[k].pid != (unsigned int)pid)\n				continue;' \
  '' \
  test_attach.py::test_watch_shows_what_the_driver_counts_and_the_trace_did_not_see
m driver-memory-list-not-grown analyzer/driver_memory.c \
  'if (rc != NVML_INSUFFICIENT_SIZE || *n > MAX_PROCESSES)' \
  'if (1)' \
  test_attach.py::test_watch_shows_what_the_driver_counts_and_the_trace_did_not_see
m watch-unseen-always-said analyzer/cmd_watch.c \
  'if (last && unseen >= UNSEEN_WORTH_SAYING)' \
  'if (last)' \
  test_attach.py::test_watch_text_says_what_grew_unseen_and_without_a_driver_figure_says_so
m python-frame-cache-ignores-offset preload/python.c \
  '0x9e3779b97f4a7c15ull ^ (uint64_t)(uint32_t)lasti;\n\t\te = &frame_cache[(h ^ (h >> 31)) & (FRAME_CACHE_SLOTS - 1)];\n\t\tif (e->code == code && e->lasti == lasti)' \
  '0x9e3779b97f4a7c15ull;\n\t\te = &frame_cache[(h ^ (h >> 31)) & (FRAME_CACHE_SLOTS - 1)];\n\t\tif (e->code == code)' \
  test_python.py::test_lines_of_one_frame_and_recursion_depths_are_separate_stacks
m stack-hash-forgets-earlier-frames preload/stack_hash.h \
  'native[i + 1] ^ h);' \
  'native[i + 1]);' \
  meson:stack_hash
m stack-hash-drops-odd-native-tail preload/stack_hash.h \
  'h = vrt_hash_mum(native[i] ^ VRT_HASH_K1, VRT_HASH_K2 ^ h);' \
  '(void)0;' \
  meson:stack_hash
m stack-hash-python-forgets-earlier-frames preload/stack_hash.h \
  'key ^ s->h);' \
  'key);' \
  meson:stack_hash

# ---- phases ----------------------------------------------------------------------------------
m phase-exit-unrecorded preload/api.c \
  'label(VRT_OP_PHASE_EXIT, name);' \
  '(void)name;' \
  test_phases.py::test_phase_entries_and_exits_are_recorded_in_order test_phases.py::test_leaks_follows_every_invocation_of_the_named_phase
m leaks-nested-phase-is-an-invocation analyzer/cmd_leaks.c \
  'if (kind == 1 && lk->depth++ == 0) {' \
  'if (kind == 1 && lk->depth++ >= 0) {' \
  test_phases.py::test_leaks_follows_every_invocation_of_the_named_phase
m leaks-phase-exit-ignored analyzer/cmd_leaks.c \
  '} else if (kind == -1 && lk->depth > 0 && --lk->depth == 0) {' \
  '} else if (0) {' \
  test_phases.py::test_leaks_follows_every_invocation_of_the_named_phase

m nvtx-pop-unrecorded preload/nvtx.c \
  '\tif (name && (guard = vrt_enter())) {\n\t\tvrt_emit_label(VRT_OP_PHASE_EXIT, name);\n\t\tvrt_leave(guard);\n\t}\n\tfree(name);\n\treturn d;' \
  '\t(void)vrt_enter;\n\tfree(name);\n\treturn d;' \
  test_phases.py::test_every_kind_of_nvtx_range_and_mark_becomes_a_phase_or_mark
# (ux defect 44: NCCL closes ncclCommInitRankConfig with the payload extension's pop)
m nvtx-payload-pop-ignored preload/nvtx.c \
  '(void)n; return pop(); }' \
  '(void)n; return 0; }' \
  test_phases.py::test_every_kind_of_nvtx_range_and_mark_becomes_a_phase_or_mark
m nvtx-payload-push-unpaired preload/nvtx.c \
  '(void)n; return push_nameless(); }' \
  '(void)n; return (void)push_nameless, 0; }' \
  test_phases.py::test_every_kind_of_nvtx_range_and_mark_becomes_a_phase_or_mark

# ---- loss accounting, ring, checkpoints, flushing ---------------------------------------------
m lost-not-counted preload/tbuf.c \
  '\tb->lost++;' \
  '\t(void)b;' \
  test_stress.py::test_64_threads_tiny_buffers_count_every_lost_event test_static_and_threads.py::test_threads_lossy_buffers_account_for_every_event
m full-buffer-drops-instead-of-waiting preload/tbuf.c \
  '\tif ((r = wait_for_room(b, len)))\n\t\treturn r;\n\tb->lost++;' \
  '\tb->lost++;' \
  test_stress.py::test_threads_wait_out_a_stalled_disk_and_lose_nothing test_stress.py::test_64_threads_x_20000_ops_three_apis_lose_nothing_by_default
m full-wait-every-event preload/tbuf.c \
  '\tif (b->gave_up && tail == b->gave_up_tail)\n\t\treturn NULL;' \
  '\tif (0)\n\t\treturn NULL;' \
  test_stress.py::test_a_stopped_collector_costs_one_bounded_wait_then_every_drop_is_counted
m full-wait-unbounded preload/tbuf.c \
  'while (vrt_collector_alive() && vrt_now_ns() - start < limit) {' \
  'while (vrt_collector_alive()) {' \
  test_stress.py::test_a_stopped_collector_costs_one_bounded_wait_then_every_drop_is_counted
m checkpoint-drops-items preload/trace_output.c \
  '\t\tvrt_live_at(&c->live, i, &l);\n\t\tuint32_t stack = l.stack;' \
  '\t\tvrt_live_at(&c->live, i, &l);\n\t\tif (i % 97 == 0)\n\t\t\tcontinue;\n\t\tuint32_t stack = l.stack;' \
  test_flight_recorder.py::test_ring_wrapped_twice_keeps_exact_survivors_and_stacks
m ring-replays-from-the-start format/trace_reader.c \
  '\tif (!t->history_lost)\n\t\treturn 0;' \
  '\treturn 0;' \
  test_flight_recorder.py::test_ring_wrapped_twice_keeps_exact_survivors_and_stacks \
  test_flight_recorder.py::test_a_wrapped_ring_without_a_whole_checkpoint_says_there_is_nothing_to_replay
m ring-checkpoint-not-seeded format/live.c \
  '\t\treturn !events || r->id == VRT_CP_ATTACH;' \
  '\t\treturn r->id == VRT_CP_ATTACH;' \
  test_flight_recorder.py::test_ring_wrapped_twice_keeps_exact_survivors_and_stacks
# every drain writes what it took (the durable tail, issue 22 item 6): the wait between drains is
# the flush interval
m flush-4x preload/collector.c \
  'wait_for_work(c, vrt_cfg.flush_ms);' \
  'wait_for_work(c, vrt_cfg.flush_ms * 4);' \
  test_flight_recorder.py::test_the_file_never_lags_the_program_by_more_than_the_flush_interval

# ---- the collector's per-event path (include/vramtrace/record.h's straight-line encoder, a thread's name)
m thread-name-never-read-again preload/collector.h \
  'if (VRT_UNLIKELY(!named || ts_ns - b->name_checked_ns >= VRT_THREAD_NAME_RECHECK_NS))' \
  'if (VRT_UNLIKELY(!named))' \
  "test_static_and_threads.py::test_a_thread_is_named_again_2_s_after_its_name_was_read[3-renamed]"
m thread-name-read-at-every-event preload/collector.h \
  'if (VRT_UNLIKELY(!named || ts_ns - b->name_checked_ns >= VRT_THREAD_NAME_RECHECK_NS))' \
  'if (1)' \
  "test_static_and_threads.py::test_a_thread_is_named_again_2_s_after_its_name_was_read[0-thread_rename]"
m encode-hot-free-stack2-as-stack include/vramtrace/record.h \
  '\t\treturn vrt_put_uvarint(p, r->stack2);\n\tcase VRT_OP_BLOCK_ALLOC:' \
  '\t\treturn vrt_put_uvarint(p, r->stack);\n\tcase VRT_OP_BLOCK_ALLOC:' \
  meson:encode_hot
m encode-hot-block-alloc-without-aux include/vramtrace/record.h \
  '/* t p d a s x q S */\n\t\tp = vrt_record_encode_hot_head(p, r, d);\n\t\tp = vrt_record_encode_hot_place(p, r, d);\n\t\tp = vrt_put_uvarint(p, r->aux);' \
  '/* t p d a s x q S */\n\t\tp = vrt_record_encode_hot_head(p, r, d);\n\t\tp = vrt_record_encode_hot_place(p, r, d);' \
  meson:encode_hot
m encode-hot-addr-delta-kept include/vramtrace/record.h \
  '\td->addr = r->addr;\n\treturn vrt_put_uvarint(p, r->size);' \
  '\treturn vrt_put_uvarint(p, r->size);' \
  meson:encode_hot

# ---- report options that select or count --------------------------------------------------------
m report-frames-one-short analyzer/sites.c \
  'i >= 0 && i < n && shown < max_frames; i++) {' \
  'i >= 0 && i < n && shown < max_frames - 1; i++) {' \
  test_runtime.py::test_report_frames_shows_exactly_n_frames_of_each_site
m report-top-one-short analyzer/cmd_report.c \
  'for (size_t i = 0; i < r->live_at_end.n && i < (size_t)o->top; i++)' \
  'for (size_t i = 0; i + 1 < r->live_at_end.n && i < (size_t)o->top; i++)' \
  test_runtime.py::test_report_top_lists_exactly_n_sites
# ---- the collector's phases (preload/collector.c) ------------------------------------------------
m collector-phase-index-one-behind preload/collector.c \
  '\tc->phase_index[name_id] = (uint32_t)++c->n_phases;' \
  '\tc->phase_index[name_id] = (uint32_t)c->n_phases++;' \
  test_phases.py::test_phases_named_differently_at_every_call_are_each_counted
# (a forked child's collector starts its drain arrays over: since F36 each array's size is set
# with its mapping, so a child forked halfway through a growth inherits a consistent pair and the
# test cannot tell a child that keeps them; no mutant here: docs/RELIABILITY.md F34)
# ---- the reader's tables (format/trace_reader.c) ------------------------------------------------
m reader-ids-ahead-of-the-consolidated-tables-refused format/trace_reader.c \
  'VRT_ID_SLACK + (t->tables_damaged_raw + cap->unread_raw) / 3;' \
  'VRT_ID_SLACK + t->tables_damaged_raw / 3;' \
  test_flight_recorder.py::test_a_ring_whose_first_lap_defined_more_strings_than_the_id_slack_reads
# ---- leaks: a workspace that grows because each call makes a stream (analyzer/cmd_leaks.c) -----
m leaks-streams-never-said analyzer/cmd_leaks.c \
  '\t\tif (!strcmp(category, "workspace") && s->streams) {' \
  '\t\tif (!strcmp(category, "workspace") && s->streams && 0) {' \
  'test_retention_shapes.py::test_a_workspace_that_grows_because_each_call_makes_a_stream_says_so[]' \
  test_retention_shapes.py::test_on_pytorch_a_stream_made_each_call_is_said_of_its_cublas_workspace
m leaks-streams-a-group-on-two-is-on-its-last analyzer/cmd_leaks.c \
  '\tg->stream = !g->count || g->stream == it->stream ? it->stream : 0;' \
  '\tg->stream = it->stream;' \
  'test_retention_shapes.py::test_a_workspace_that_grows_because_each_call_makes_a_stream_says_so[--also-shared]'
m leaks-streams-not-one-a-call analyzer/cmd_leaks.c \
  'own && streams >= 2 && streams == (uint64_t)s->v[site].value2 ? streams : 0;' \
  'streams >= 2 ? streams : 0;' \
  'test_retention_shapes.py::test_a_workspace_that_grows_because_each_call_makes_a_stream_says_so[--two-streams]'
# ---- leaks' scans: the last call's births, deaths as they happen (analyzer/cmd_leaks.c) ---------
m leaks-endings-besides-its-own-unseen analyzer/cmd_leaks.c \
  '\tlk->scan_all_next |= e->others_ended != 0;' \
  '\t(void)0;' \
  'test_phases.py::test_a_survivor_outlives_the_calls_until_it_ends_however_it_ends[off]'
m leaks-deaths-uncounted analyzer/cmd_leaks.c \
  'if (g && g->live && !--g->live)' \
  'if (0)' \
  'test_phases.py::test_a_survivor_outlives_the_calls_until_it_ends_however_it_ends[off]'
m leaks-births-unnoted analyzer/cmd_leaks.c \
  '\t\trc = note_birth(lk, m, &e->item);' \
  '\t\trc = 0;' \
  test_phases.py::test_leaks_follows_every_invocation_of_the_named_phase
m leaks-births-past-the-bound-forgotten analyzer/cmd_leaks.c \
  '\t\tlk->scan_all_next = true;\n\t\treturn 0;' \
  '\t\treturn 0;' \
  'test_phases.py::test_a_survivor_outlives_the_calls_until_it_ends_however_it_ends[off]'
m leaks-full-scan-forgets-open-groups analyzer/cmd_leaks.c \
  '\t\tif (g->live)\n\t\t\tlk->open[kept++] = lk->open[i];' \
  '\t\tif (0)\n\t\t\tlk->open[kept++] = lk->open[i];' \
  'test_phases.py::test_a_survivor_outlives_the_calls_until_it_ends_however_it_ends[on]'
m leaks-survey-sees-no-tensors analyzer/cmd_leaks.c \
  '\tb->any_blocks = m->any_blocks;' \
  '\tb->any_blocks = false;' \
  test_h200_traces.py::test_without_phase_the_phase_whose_calls_bracket_the_growth_is_picked
m leaks-stops-at-100000-calls analyzer/cmd_leaks.c \
  '#define MAX_INVOCATIONS (1u << 24)' \
  '#define MAX_INVOCATIONS 100000u' \
  test_phases.py::test_leaks_follows_a_phase_called_more_than_100000_times
m leaks-lists-every-call analyzer/cmd_leaks.c \
  'if (i == CALLS_SHOWN_EACH_END && lk->n_inv > 2 * CALLS_SHOWN_EACH_END) {' \
  'if (0) {' \
  test_phases.py::test_leaks_follows_a_phase_called_more_than_100000_times
m leaks-full-scan-gone-one-late analyzer/cmd_leaks.c \
  '\t\t\tg->gone_scan = lk->scan - 1;' \
  '\t\t\tg->gone_scan = lk->scan;' \
  'test_phases.py::test_a_survivor_outlives_the_calls_until_it_ends_however_it_ends[off]'
m leaks-picks-a-phase-that-does-not-grow analyzer/cmd_leaks.c \
  '(growth > 0) != (best_growth > 0) ? best_growth > 0' \
  '(growth > 0) != (best_growth > 0) ? best_growth <= 0' \
  test_phases.py::test_leaks_without_a_phase_picks_the_one_whose_calls_grow
m oom-rest-from-the-first-call-is-a-verdict analyzer/remedies.c \
  'out->call_from_first = c->n == 1;' \
  'out->call_from_first = false;' \
  test_whatif.py::test_oom_does_not_rule_out_a_remedy_its_real_rerun_fitted
m report-sites-kinds-not-kept analyzer/report_common.c \
  '\t\tif (g->kind < 0)\n\t\t\tsite->kinds' \
  '\t\tif (0)\n\t\t\tsite->kinds' \
  test_h200_traces.py::test_report_marks_pinned_host_memory_in_the_list_of_device_memory
# ---- the sites at each peak, followed in one pass (analyzer/peak_sites.c) --------------------------
m peak-sites-never-taken analyzer/peak_sites.c \
  '\t\tif (peak == l->peak)\n\t\t\tcontinue;' \
  '\t\tif (1)\n\t\t\tcontinue;' \
  'test_peak_sites.py::test_each_peak_lists_what_was_live_just_after_the_record_that_set_it[rt_api.vrt]'
m peak-sites-changed-once-for-good analyzer/peak_sites.c \
  '\t\t\tp->changed &= (uint8_t)~CHANGED_FOR_KIND;' \
  '\t\t\t(void)0;' \
  test_flight_recorder.py::test_a_peak_inside_the_checkpoint_the_ring_starts_from_has_its_sites
m peak-sites-tensor-view-of-tensors-only analyzer/peak_sites.c \
  '(!(p->changed & CHANGED_FOR_TENSORS) && !mark_changed(' \
  '(block && !(p->changed & CHANGED_FOR_TENSORS) && !mark_changed(' \
  test_h200_traces.py::test_the_tensor_peak_list_says_it_holds_more_than_tensors
m peak-sites-earlier-peaks-listed analyzer/peak_sites.c \
  'if (p->slot != slot || !items || (!tensors' \
  'if (p->slot != slot || (!tensors' \
  'test_peak_sites.py::test_each_tensor_peak_lists_the_tensors_live_just_after_the_record_that_set_it[whatif-default.vrt]'
m peak-sites-tensor-raise-untold analyzer/model.c \
  '\t\t\tm->tensor_peak_event[d] = m->set.events;\n\t\t\tm->peak_raises++;' \
  '\t\t\tm->tensor_peak_event[d] = m->set.events;' \
  'test_peak_sites.py::test_each_tensor_peak_lists_the_tensors_live_just_after_the_record_that_set_it[whatif-default.vrt]'
m peak-sites-checkpoint-peaks-untold analyzer/model.c \
  'if (m->observer && m->peak_raises != raises)' \
  'if (m->observer && m->peak_raises != raises && !cp)' \
  test_flight_recorder.py::test_a_peak_inside_the_checkpoint_the_ring_starts_from_has_its_sites
m report-site-kind-not-printed analyzer/sites.c \
  'if (s->kinds && !(s->kinds & (1u << VRT_KIND_DEVICE)))' \
  'if (0)' \
  test_h200_traces.py::test_report_marks_pinned_host_memory_in_the_list_of_device_memory
m frame-fit-name-cut-in-the-middle analyzer/stacks.c \
  '\tcut_name(name, room, fitted, sizeof(fitted));' \
  '\tcut_middle(name, room, fitted, sizeof(fitted));' \
  test_cli_options.py::test_a_narrow_terminal_keeps_the_method_and_the_line
m frame-fit-place-cut-in-the-middle analyzer/stacks.c \
  '\t\tcut_keeping_end(rest, columns - name_room, place, sizeof(place));' \
  '\t\tcut_middle(rest, columns - name_room, place, sizeof(place));' \
  test_cli_options.py::test_a_narrow_terminal_keeps_the_method_and_the_line
m armed-exit-said-by-every-image preload/collector.c \
  'if (!c->live.events || c->end_reason == VRT_END_EXEC)' \
  'if (0)' \
  test_run_cli.py::test_an_armed_job_behind_shells_says_so_once_with_its_own_pid
m armed-exit-said-at-exec preload/collector.c \
  'if (!c->live.events || c->end_reason == VRT_END_EXEC)' \
  'if (!c->live.events)' \
  test_run_cli.py::test_an_armed_job_behind_shells_says_so_once_with_its_own_pid
m whatif-failed-replay-not-surveyed analyzer/alloc_replay.c \
  'if (!rcode && r->failed)\n\t\te->restart = true;' \
  'if (0)\n\t\te->restart = true;' \
  test_whatif.py::test_a_replay_that_fails_early_still_knows_the_traces_limit_and_device
m time-after-the-end-charted-silently analyzer/cmd_timeline.c \
  'if (end && o.from > end && !o.quiet)' \
  'if (0)' \
  test_cli_errors.py::test_a_chart_that_starts_after_the_traces_end_says_so
m time-after-the-end-not-clamped analyzer/report_common.c \
  'if (!end || *seconds <= end)' \
  'if (!end || *seconds <= end || 1)' \
  test_cli_errors.py::test_diff_at_a_time_after_the_traces_end_says_it_takes_the_end
m leaks-unreturned-call-per-call analyzer/cmd_leaks.c \
  'bool unfinished = lk->n_inv == 1 && !lk->inv[0].returned;' \
  'bool unfinished = false;' \
  test_h200_retention.py::test_a_call_the_trace_ends_in_is_not_a_per_call_figure
m leaks-end-closes-as-a-return analyzer/cmd_leaks.c \
  'close_invocation(lk, m, now, lk->by_mark);' \
  'close_invocation(lk, m, now, true);' \
  test_h200_retention.py::test_a_call_the_trace_ends_in_is_not_a_per_call_figure
m run-output-relative-to-the-job analyzer/cmd_run.c \
  '\tif (given && *given == '"'"'/'"'"')' \
  '\tif (given)' \
  test_run_cli.py::test_a_job_that_changes_directory_writes_where_run_was_started
m run-childrens-traces-unnamed analyzer/cmd_run.c \
  'else if (o->output || !print_childrens_traces(o))' \
  'else' \
  test_run_cli.py::test_a_job_that_changes_directory_writes_where_run_was_started
m site-unnamed-frames-merged analyzer/sites.c \
  '(a->type != VRT_FT_NATIVE || a->address == b->address)' \
  'true' \
  test_sigkill.py::test_frames_without_symbols_are_not_taken_for_recursion
m messages-not-escaped analyzer/cli.c \
  'if (escape && *p != ' \
  'if (0 && *p != ' \
  test_hostile_input.py::test_an_error_that_names_a_file_with_terminal_escapes_shows_them_escaped
m header-path-not-escaped analyzer/cmd_report.c \
  'vrt_escape(t->path), who, cmd ?' \
  't->path, who, cmd ?' \
  "test_hostile_input.py::test_a_trace_file_name_with_terminal_escapes_is_shown_escaped"
m info-open-trace-ran-zero-seconds analyzer/cmd_info.c \
  'if (s->end_ts) /* 0: never closed' \
  'if (1) /* 0: never closed' \
  test_sigkill.py::test_recover_by_hand
m run-depth-left-to-the-preload analyzer/cmd_run.c \
  'if (o->depth && (rc = vrt_int_option(' \
  'if (0 && (rc = vrt_int_option(' \
  "test_run_cli.py::test_a_bad_run_option_stops_before_the_job"
m mark-after-stop-says-attach preload/control.c \
  'if (atomic_load(&vrt_mode) != VRT_MODE_FULL && trace_closed(c)) {' \
  'if (0) {' \
  test_attach.py::test_inject_refuses_a_second_trace_after_stop
m run-siblings-unnamed analyzer/cmd_run.c \
  '\tif (siblings)\n\t\tprint_siblings(path);' \
  '\t(void)siblings;' \
  test_run_cli.py::test_the_summary_names_what_a_forking_job_wrote_and_only_that
m run-empty-directory-announced analyzer/cmd_run.c \
  'else if (is_dir && new_traces(o->output, "vramtrace.", NULL, NULL, NULL, 0)) {' \
  'else if (is_dir) {' \
  test_run_cli.py::test_the_summary_names_what_a_forking_job_wrote_and_only_that
m cut-ring-undefined-id-unexplained analyzer/pass.c \
  'if (p->rp.error && error == VRT_E_RANGE && p->t->cut_short) {' \
  'if (0) {' \
  test_flight_recorder.py::test_a_wrapped_ring_cut_in_half_says_what_is_missing
m oom-largest-size-line-through-all analyzer/remedies.c \
  'if (failing > hi && a + b * (double)failing < (double)need && need > peak_at_hi) {' \
  'if (0) {' \
  test_h200_traces.py::test_the_largest_batch_oom_names_is_below_the_one_that_failed
m leaks-headline-shares-every-call analyzer/cmd_leaks.c \
  'blamed_since(lk, lk->n_inv >= 2 ? 2 : 1,' \
  'blamed_since(lk, 1,' \
  "test_h200_retention.py::test_the_headline_splits_what_the_later_calls_left"
m leaks-headline-shares-unsorted analyzer/cmd_leaks.c \
  '\tfree(order);\n\tcount_streams(lk, from, s);\n\tvrt_sites_sort(s);' \
  '\tfree(order);\n\tcount_streams(lk, from, s);' \
  "test_h200_retention.py::test_the_headline_splits_what_the_later_calls_left"
m leaks-phase-name-ignored analyzer/cmd_leaks.c \
  'const char *named = o->phase ? phase_named(o->phase, &lk->by_mark) : NULL;' \
  'const char *named = NULL;' \
  test_phases.py::test_leaks_of_a_phase_that_frees_what_it_allocates_finds_no_growth
m report-until-mark-ignored analyzer/cli.c \
  't->end_mark = vrt_settings.until_mark;' \
  't->end_mark = NULL;' \
  test_phases.py::test_report_until_mark_is_the_state_at_the_mark \
  test_cli_options.py::test_whatif_until_mark_replays_the_requests_before_the_mark
m diff-second-at-ignored analyzer/cmd_diff.c \
  'b.at = b.path == a.path ? at[1] : n_at ? at[1] : -1;' \
  'b.at = b.path == a.path ? -1 : n_at ? at[1] : -1;' \
  test_phases.py::test_diff_at_two_times_of_one_trace test_timeline_and_diff.py::test_diff_at_two_times_of_one_trace
m diff-at-past-the-time analyzer/pass.c \
  'vrt_ts_seconds(p->t, r->ts) > p->o.until_s)' \
  'vrt_ts_seconds(p->t, r->ts) > p->o.until_s + 0.015)' \
  test_phases.py::test_diff_at_two_times_of_one_trace

# ---- the OOM report: the request and the categories -------------------------------------------
m oom-request-size analyzer/cmd_oom.c \
  '(unsigned long long)r->size, r->device, vrt_ts_seconds(t, r->ts));' \
  '(unsigned long long)r->aux, r->device, vrt_ts_seconds(t, r->ts));' \
  test_h200_traces.py::test_oom_matches_pytorchs_own_message
m oom-category-rule-order analyzer/sites.c \
  '\t{ "gradients", "backward", "allocated during backward" },' \
  '\t{ "activations", "backward", "allocated during backward" },' \
  test_h200_traces.py::test_oom_matches_pytorchs_own_message
m oom-free-bytes preload/event.c \
  '\tdevice_memory_info(&oom.aux, &oom.aux2);' \
  '\tdevice_memory_info(&oom.aux2, &oom.aux);' \
  test_oom_and_exit.py::test_oom_record_says_how_much_was_free

# ---- whatif: the allocator model replayed (analyzer/alloc_replay.c, alloc_model.c) -----------
# the small pool's 2 MiB pages need the device's total to within a page: the large pool's bound
# alone sizes its reservation 4 pages too large on the H200
m whatif-total-from-first-reserve analyzer/alloc_replay.c \
  '(!e->device_total || bound < e->device_total)' \
  '(!e->device_total)' \
  "test_whatif.py::test_recorded_setting_reproduces_the_segment_history[whatif-expandable]"

# a remedy that makes room for the failing request only: the real re-runs failed a few requests later
m remedy-fits-the-request-only analyzer/remedies.c \
  'if (m->fits != VRT_FIT_YES || m->frees_bytes >= out->shortfall + out->call_rest)' \
  'if (m->fits != VRT_FIT_YES || m->frees_bytes >= out->shortfall)' \
  test_whatif.py::test_every_remedy_is_what_its_real_rerun_did
m remedy-call-unscaled analyzer/remedies.c \
  'out->call_scale = (double)(now - f->entry) / (double)(at_k - l->entry);' \
  'out->call_scale = 1.0;' \
  test_whatif.py::test_oom_remedies_for_zero2_with_offload_optimizer

m remedy-size-no-margin analyzer/remedies.c \
  '#define SIZE_MARGIN 0.02' \
  '#define SIZE_MARGIN 0.0' \
  test_whatif.py::test_every_remedy_is_what_its_real_rerun_did
m remedy-size-by-phase-calls analyzer/remedies.c \
  'double x = (double)c->mark_size[i], y = (double)c->mark_peak[i];' \
  'double x = (double)c->mark_size[i], y = (double)c->peak[i < c->n ? i : 0];' \
  test_whatif.py::test_every_remedy_is_what_its_real_rerun_did

# ---- why memory survives (retention walks, categories by identity, the user's code) ---------
# (a small slice kept of a big tensor: the chain says it keeps the whole storage)
m retain-view-unsaid python/vramtrace/_owners.py \
  'owner_note=view_note(*self._own_bytes(obj)))' \
  'owner_note="")' \
  test_retention_shapes.py::test_a_small_slice_kept_of_a_big_tensor_says_it_keeps_the_whole_storage
m retain-view-said-of-a-whole-tensor python/vramtrace/_chains.py \
  '    if own < 0 or whole <= 0 or own * 2 > whole:' \
  '    if own < 0 or whole <= 0 or own > whole:' \
  test_retention_shapes.py::test_a_small_slice_kept_of_a_big_tensor_says_it_keeps_the_whole_storage
m retain-bytes-one-decimal-too-few python/vramtrace/_chains.py \
  '(2 if v < 10 else 1 if v < 100 else 0, v,' \
  '(1 if v < 10 else 1 if v < 100 else 0, v,' \
  'test_retention_shapes.py::test_the_walks_print_bytes_as_the_reports_do'
m retain-closure-variable-unnamed python/vramtrace/_chains.py \
  'return "closure variable %s" % grand.__code__.co_freevars[parent.index(child)]' \
  'return "closure variable"' \
  test_retention.py::test_a_hook_closure_is_named_through_the_function_and_its_variable
m retain-class-namespace-unnamed python/vramtrace/_chains.py \
  '    if _is(grand, type):\n        return _class_namespace(grand, parent)\n' \
  '' \
  test_retention_shapes.py::test_each_way_of_keeping_is_named_as_its_user_would_write_it
m retain-generator-local-unnamed python/vramtrace/_chains.py \
  '        return name if name is not None else ""' \
  '        return ""' \
  test_retention_shapes.py::test_each_way_of_keeping_is_named_as_its_user_would_write_it
m retain-traceback-frame-unnamed python/vramtrace/_chains.py \
  'return ", in %s:" % _where(child)' \
  'return " -> "' \
  test_retention_shapes.py::test_each_way_of_keeping_is_named_as_its_user_would_write_it
m retain-thread-local-by-weakref python/vramtrace/_chains.py \
  '    if great is not None and _is_named(great, "_thread", "_local") and _is(grand, dict):\n        return True\n' \
  '' \
  test_retention_shapes.py::test_each_way_of_keeping_is_named_as_its_user_would_write_it
m retain-bounded-lru-key-lost python/vramtrace/_chains.py \
  'return "cache" if _is(child, dict) else "cache" + _lru_key(parent, child)' \
  'return "cache" if _is(child, dict) else "cache"' \
  test_retention_shapes.py::test_each_way_of_keeping_is_named_as_its_user_would_write_it
m retain-c-members-unnamed python/vramtrace/_chains.py \
  'if _is(d, types.MemberDescriptorType):' \
  'if False:' \
  test_retention_shapes.py::test_each_way_of_keeping_is_named_as_its_user_would_write_it
m retain-named-tuple-by-index python/vramtrace/_chains.py \
  '            return "." + fields[i]\n' \
  '            return "[%d]" % i\n' \
  test_retention_shapes.py::test_each_way_of_keeping_is_named_as_its_user_would_write_it
m retain-exception-attribute-by-its-own-property python/vramtrace/_chains.py \
  'if BaseException.__dict__[attr].__get__(parent, BaseException) is child:' \
  'if object.__getattribute__(parent, attr) is child:' \
  test_retention_shapes.py::test_each_way_of_keeping_is_named_as_its_user_would_write_it
m retain-frames-before-modules python/vramtrace/_owners.py \
  '        out += frames\n' \
  '        out = frames + out\n' \
  'test_retention_shapes.py::test_the_chains_on_each_version[3.10]'
m retain-walk-keeps-its-own-frame python/vramtrace/_owners.py \
  '        current = f = None\n    return out\n' \
  '        pass\n    return out\n' \
  test_retention_elsewhere.py::test_the_walks_keep_nothing_the_program_let_go
m retain-phase-hook-raises-at-teardown python/vramtrace/_phases.py \
  '    except Exception:  # never into the program; at teardown this module'"'"'s globals are None\n        pass\n' \
  '    except ZeroDivisionError:\n        pass\n' \
  'test_retention_elsewhere.py::test_the_phase_hook_never_raises_into_the_program[this]'
m retain-monitoring-hook-raises python/vramtrace/_phases.py \
  '            _enter(label)\n        except Exception:  # never into the program\n            pass\n' \
  '            _enter(label)\n        except ZeroDivisionError:\n            pass\n' \
  'test_retention_elsewhere.py::test_the_phase_hook_never_raises_into_the_program[3.12]'
m retain-walk-keeps-copied-locals python/vramtrace/_owners.py \
  '                f.f_locals.clear()\n' \
  '                pass\n' \
  test_retention_elsewhere.py::test_the_walks_keep_nothing_the_program_let_go
m retain-walk-forgets-the-event-frames-locals python/vramtrace/_owners.py \
  '        elif stack and sys.version_info < (3, 12):\n' \
  '        elif False:\n' \
  test_retention_elsewhere.py::test_the_walks_keep_nothing_the_program_let_go
m retain-asyncio-fields-unnamed python/vramtrace/_chains.py \
  '    if type(parent).__module__ == "_asyncio":' \
  '    if False:' \
  'test_retention_elsewhere.py::test_each_holder_is_named[task]'
m retain-signal-handlers-not-roots python/vramtrace/_owners.py \
  '        out += _signal_handlers()\n' \
  '' \
  'test_retention_elsewhere.py::test_each_holder_is_named[signal]'
m retain-handled-exception-not-a-root python/vramtrace/_owners.py \
  '        out += _exceptions_being_handled()\n' \
  '' \
  'test_retention_elsewhere.py::test_a_retry_inside_the_except_block_names_the_exception_that_keeps_the_failed_attempt[bare]'
m retain-handled-exception-where-unsaid python/vramtrace/_owners.py \
  '                text += " in " + _where(tb.tb_frame)\n' \
  '                pass\n' \
  'test_retention_elsewhere.py::test_a_retry_inside_the_except_block_names_the_exception_that_keeps_the_failed_attempt[named]'
m oom-holders-unsaid analyzer/categories.c \
  '\t\tif (c->roots)\n\t\t\tvrt_roots_add(c->roots, c->t, c->walk, it);\n' \
  '' \
  test_h200_retention.py::test_oom_says_what_holds_the_device_memory_at_the_failure
m holders-not-asked-about-unsaid analyzer/owners.c \
  '\t\t[VRT_HELD_OFF] = "not asked about (born before the walk' \
  '\t\t[VRT_HELD_TIMED_OUT] = "not asked about (born before the walk' \
  test_h200_retention.py::test_report_says_what_holds_the_memory_live_at_the_end
m report-holders-at-end-unsaid analyzer/cmd_report.c \
  'r->cats, r->n_cats, r->roots);' \
  'r->cats, r->n_cats, NULL);' \
  test_h200_retention.py::test_report_says_what_holds_the_memory_live_at_the_end
m report-categories-of-one-slot analyzer/categories.c \
  'categorize_item(&by_slot[vrt_device_slot(it->device)], it);' \
  'categorize_item(&by_slot[0], it);' \
  test_runtime.py::test_report_says_by_what_it_is_what_is_live_at_the_end_on_every_device_and_the_host
# ---- memory made for a CUDA graph (preload/hooks_runtime.c, analyzer/model.c, cmd_leaks.c) ----
m capture-begin-unrecorded preload/hooks_runtime.c \
  '\tif (r == cudaSuccess)\n\t\tvrt_record_capture(VRT_OP_CAPTURE_BEGIN' \
  '\tif (0)\n\t\tvrt_record_capture(VRT_OP_CAPTURE_BEGIN' \
  test_retention_shapes.py::test_memory_made_for_a_cuda_graph_captured_each_call_says_so
m capture-begin-unrecorded-by-the-driver preload/hooks_driver.c \
  '\tif (r == CUDA_SUCCESS)\n\t\tvrt_record_capture(VRT_OP_CAPTURE_BEGIN, api,' \
  '\tif (0)\n\t\tvrt_record_capture(VRT_OP_CAPTURE_BEGIN, api,' \
  test_driver.py::test_stream_capture_through_the_exported_names_and_cuGetProcAddress
m capture-other-threads-counted analyzer/model.c \
  'if (m->captures[i].thread == m->thread &&' \
  'if (' \
  test_retention_shapes.py::test_memory_made_for_a_cuda_graph_captured_each_call_says_so
m capture-never-ends analyzer/model.c \
  '\t\telse if (r->op == VRT_OP_CAPTURE_END && i < m->n_captures)' \
  '\t\telse if (0)' \
  test_retention_shapes.py::test_memory_made_for_a_cuda_graph_captured_each_call_says_so
m capture-thread-unknown-to-the-model analyzer/pass.c \
  '\t\tp->o.model->thread = p->rp.thread;\n' \
  '' \
  test_retention_shapes.py::test_memory_made_for_a_cuda_graph_captured_each_call_says_so
m capture-flag-not-kept format/live.c \
  '\tit->captured = (l->flags & FLAG_CAPTURED) != 0;' \
  '\tit->captured = 0;' \
  test_retention_shapes.py::test_memory_made_for_a_cuda_graph_captured_each_call_says_so
m capture-unsaid analyzer/cmd_leaks.c \
  'if (2 * s->captured >= s->bytes && s->captured)' \
  'if (0)' \
  test_retention_shapes.py::test_memory_made_for_a_cuda_graph_captured_each_call_says_so
m retain-realtime-signal-handler-lost python/vramtrace/_owners.py \
  '                    name = "signal %d" % sig\n' \
  '                    raise\n' \
  'test_retention_elsewhere.py::test_each_holder_is_named[rtsignal]'
m retain-context-variable-unnamed python/vramtrace/_chains.py \
  '                return ": variable %s" % refs[i + side].name' \
  '                return ""' \
  'test_retention_elsewhere.py::test_each_holder_is_named[context]'
m retain-native-holder-run-together python/vramtrace/_owners.py \
  'root_step=head == "held by native code")' \
  'root_step=False)' \
  'test_retention_elsewhere.py::test_each_holder_is_named[atexit]'
m retain-cycle-gc-off-unsaid python/vramtrace/_owners.py \
  'if self.gc_off:' \
  'if False:' \
  'test_retention_elsewhere.py::test_each_holder_is_named[cycle]'
m retain-weak-key-by-its-type python/vramtrace/_chains.py \
  '    if _is(o, weakref.ref):  #' \
  '    if False:  #' \
  'test_retention_elsewhere.py::test_each_holder_is_named[weakkey]'
m retain-genexpr-iterable-by-its-hidden-name python/vramtrace/_chains.py \
  'return "its iterable" if name == ".0" else "local " + name' \
  'return "local " + name' \
  'test_retention_elsewhere.py::test_each_holder_is_named[genexpr]'
m retain-dict-key-said-with-its-type python/vramtrace/_chains.py \
  'return " key"  # as a set' \
  'return " key of %s" % type_name(parent)  # as a set' \
  'test_retention_elsewhere.py::test_each_holder_is_named[dictkey]'
m retain-unnamed-hop-printed-blank python/vramtrace/_chains.py \
  'return "%s (%s%s)" % (text, type_name(obj), note) if text else "(%s%s)" % (type_name(obj), note)' \
  'return "%s (%s%s)" % (text, type_name(obj), note)' \
  'test_retention_elsewhere.py::test_each_holder_is_named[iterator]'
m retain-cycle-at-attribute-dict python/vramtrace/_owners.py \
  '            path.insert(0, owner)\n' \
  '            pass\n' \
  'test_retention_elsewhere.py::test_each_version[3.10]'
m retain-replaced-profile-unsaid python/vramtrace/_phases.py \
  '        if sys.getprofile() is not _profile:' \
  '        if False:' \
  test_retention_elsewhere.py::test_a_profiler_that_replaces_the_phase_hook_is_said
m leaks-kept-until-next-call-called-growth analyzer/cmd_leaks.c \
  'return grows_every_call(s, calls) && s->first < s->last && s->outlived == 0;' \
  'return false;' \
  'test_retention_elsewhere.py::test_kept_until_the_next_call_is_told_from_growth[slot]'
m leaks-outlived-not-kept analyzer/cmd_leaks.c \
  '\t\tif (g->invocation < lk->n_inv && later > site->outlived)' \
  '\t\tif (0)' \
  'test_retention_elsewhere.py::test_kept_until_the_next_call_is_told_from_growth[cycle]'
m leaks-stacks-that-print-alike-apart analyzer/cmd_leaks.c \
  'return lk->keys ? vrt_site_keys_stack(lk->keys, stack) : stack;' \
  'return stack;' \
  test_retention_shapes.py::test_one_line_reached_through_two_native_paths_is_one_site
m leaks-sites-merged-across-what-they-are analyzer/sites.c \
  '*hash = (h ^ (remembered_rule(t, stack) + 1)) * 0x100000001b3ull;' \
  '*hash = h;' \
  test_retention_shapes.py::test_stacks_that_print_alike_but_are_different_things_are_two_sites
m report-lines-listed-by-stack analyzer/cmd_report.c \
  '\t\t\tfold_printed(r);\n' \
  '' \
  test_retention_shapes.py::test_report_lists_a_line_reached_two_ways_once_and_its_json_each_stack
m oom-lines-listed-by-stack analyzer/cmd_oom.c \
  '\t\t(void)vrt_sites_fold_printed(t, &x.device_sites); /* short of memory: listed by stack */\n' \
  '' \
  test_retention_shapes.py::test_oom_lists_a_line_reached_two_ways_once
m html-lines-listed-by-stack analyzer/cmd_html.c \
  'return h->keys ? vrt_site_keys_stack(h->keys, stack) : stack;' \
  'return stack;' \
  test_retention_shapes.py::test_html_lists_a_line_reached_two_ways_as_one_site
m leaks-growth-listed-by-stack analyzer/cmd_leaks.c \
  '\tvrt_sites_fold_printed(lk->t, &growing); /* the cadence' \
  '\t(void)vrt_sites_fold_printed; /* the cadence' \
  test_retention_shapes.py::test_without_phases_a_line_reached_two_ways_is_listed_once
m leaks-merged-site-counts-a-call-twice analyzer/cmd_leaks.c \
  'if (site->last != g->invocation || site->first == UINT64_MAX)' \
  'if (1)' \
  test_retention_shapes.py::test_one_line_reached_through_two_native_paths_is_one_site
m leaks-growing-workspace-not-blamed analyzer/cmd_leaks.c \
  '\tif (keeps_growing)\n\t\treturn -1;\n' \
  '' \
  test_retention_shapes.py::test_a_workspace_set_up_once_is_labelled_and_one_that_grows_is_blamed \
  test_retention_shapes.py::test_a_new_nccl_communicator_each_call_is_blamed_not_labelled_set_up_once
m retain-cycle-called-found analyzer/owners.c \
  '\treturn VRT_HELD_UNREACHABLE;\n}' \
  '\treturn VRT_HELD_FOUND;\n}' \
  test_retention.py::test_a_cycle_no_root_reaches_is_unreachable_and_says_so
m retain-skipped-walk-hides-an-earlier-answer analyzer/owners.c \
  'for (size_t k = 0; k <= o->n_earlier; k++) { /* latest first */' \
  'for (size_t k = 0; k < 1; k++) { /* latest first */' \
  test_retention.py::test_a_later_walk_explains_what_a_skipped_walk_did_not
m retain-cut-walk-is-final analyzer/cmd_leaks.c \
  'if (status == VRT_HELD_TIMED_OUT && !g->held_scan) {' \
  'if (0) {' \
  test_retention.py::test_a_later_walk_explains_what_a_skipped_walk_did_not
m retain-skipped-walk-unrecorded python/vramtrace/_retention.py \
  '        _skipped(PHASE, bound)\n' \
  '' \
  test_retention.py::test_walks_the_budget_skips_say_timed_out_and_say_so_once
m category-identity-ignored analyzer/categories.c \
  'if (category > 0 && 2 * bytes >= (int64_t)it->size) {' \
  'if (0) {' \
  test_h200_retention.py::test_oom_under_offload_is_activations_with_the_cap_named
m oom-cap-not-named analyzer/cmd_oom.c \
  'l->result ? "per_process_cap" : "device"' \
  '"device"' \
  test_h200_retention.py::test_oom_under_offload_is_activations_with_the_cap_named
m user-code-includes-site-packages analyzer/attribution.c \
  'const char *pkg = strstr(file, "-packages/");' \
  'const char *pkg = NULL;' \
  test_retention.py::test_a_library_in_a_site_packages_directory_is_not_the_users_code
m kept-alive-roots-unfolded analyzer/owners.c \
  "out[o++] = '*';" \
  "out[o++] = chain[i + 1];" \
  test_retention.py::test_kept_alive_by_folds_a_roots_numbered_entries_into_one \
  test_h200_retention.py::test_deepspeed_what_keeps_it_alive_is_one_root_the_models_forward_hooks
m kept-alive-counts-timed-out-twice analyzer/cmd_leaks.c \
  '\t\tvrt_held_add(&g->cut, w, it);\n' \
  '\t\tvrt_held_add(&g->cut, w, it);\n\t\tvrt_roots_add(&lk->roots, lk->t, w, it);\n' \
  test_retention.py::test_a_later_walk_explains_what_a_skipped_walk_did_not
m html-kept-alive-hidden analyzer/report.html.in \
  "var krows = kept.slice(0, 10)" \
  "var krows = kept.slice(0, 0)" \
  test_html.py::test_demo_renders
m html-flame-search-case-sensitive analyzer/report.html.in \
  "var q = state.search.toLowerCase(), matched = 0" \
  "var q = state.search, matched = 0" \
  test_html.py::test_flame_graph_search_and_time_range_from_the_address
m html-flame-search-counts-nested-twice analyzer/report.html.in \
  "if (n.match && !inside) matched += n.value;" \
  "if (n.match) matched += n.value;" \
  test_html.py::test_flame_graph_search_and_time_range_from_the_address
m html-flame-range-one-bucket analyzer/report.html.in \
  "for (var i = lo; i < hi; i++) m = Math.max(m, col[i]);" \
  "m = col[lo];" \
  test_html.py::test_flame_graph_search_and_time_range_from_the_address
m html-reserved-is-the-tensors analyzer/report.html.in \
  "return r.kind === 'device' && r.device === s.device;" \
  "return r.kind === 'tensors' && r.device === s.device;" \
  test_html.py::test_reserved_memory_is_drawn_over_the_tensors
# (html groups leaks' per-call rows by site before it keeps the largest 50; the page shows them)
m html-survivors-per-call analyzer/report.html.in \
  "calls: v.calls || 1," \
  "calls: 1," \
  test_html.py::test_survivors_are_grouped_by_site_as_leaks_prints_them
m html-survivors-cut-before-grouping analyzer/cmd_html.c \
  'bool survivors = key_len == 11 && !strncmp(key, "\"survivors\"", 11);' \
  'bool survivors = false;' \
  test_html_allocator.py::test_survivors_of_more_calls_than_the_page_keeps_are_whole_sites
m html-survivors-grouped-per-call analyzer/cmd_html.c \
  'if (groups[j].stack == x.stack && same_text(' \
  'if (groups[j].stack == x.stack && groups[j].first == phase && same_text(' \
  test_html_allocator.py::test_survivors_of_more_calls_than_the_page_keeps_are_whole_sites
m html-survivors-by-stack-not-site analyzer/cmd_html.c \
  '\tif (keys && x.stack >= 0 && x.stack <= UINT32_MAX)' \
  '\tif (0)' \
  test_retention_shapes.py::test_html_lists_a_line_reached_two_ways_as_one_site
m html-survivors-calls-counted-per-row analyzer/cmd_html.c \
  '\t\tif (!i || by_slot_and_call(&seen[i - 1], &seen[i]))' \
  '\t\tif (1)' \
  test_retention_shapes.py::test_html_lists_a_line_reached_two_ways_as_one_site
m html-labels-whole-signatures analyzer/report.html.in \
  "function withoutArgs(name) {\n  var n" \
  "function withoutArgs(name) {\n  return name;\n  var n" \
  "test_html.py::test_legend_labels_are_distinct_without_internal_ids[oom]"
m html-labels-no-own-frame analyzer/report.html.in \
  "if (!others[mine[p]]) own = D.frames[mine[p]];" \
  "if (0) own = D.frames[mine[p]];" \
  "test_html.py::test_legend_labels_are_distinct_without_internal_ids[oom]"
m html-nvtx-lane-per-name analyzer/report.html.in \
  "  return m ? m[1] : name;" \
  "  return name;" \
  test_html.py::test_nvtx_ranges_of_one_family_share_a_lane
m html-flame-label-loses-line analyzer/report.html.in \
  "  if (line) {\n    var short = n.name" \
  "  if (0) {\n    var short = n.name" \
  test_html.py::test_a_cut_flame_label_keeps_its_line_number
m html-mark-labels-overlap analyzer/report.html.in \
  "if (+x + 6 >= labelEnd && +x + 6 + tw <= M.l + pw) {" \
  "if (+x + 6 + tw <= M.l + pw) {" \
  test_html.py::test_marks_are_labelled_where_they_fit
m html-held-by-hidden analyzer/report.html.in \
  "v.held_by[0].join(' \\u2192 ')" \
  "''" \
  test_html.py::test_demo_renders
# ---- html's allocator views (analyzer/fragmentation.c, tensor_bands.c) -----------------------
m frag-longest-misses-right analyzer/fragmentation.c \
  'if (n->right && s->v[n->right].longest > best)' \
  'if (0)' \
  meson:ranges
m frag-freed-block-not-joined analyzer/fragmentation.c \
  'if (after && s->v[after].start == end && s->v[after].tag == tag) {' \
  'if (0) {' \
  "test_html_allocator.py::test_figures_at_the_oom_equal_the_cli_and_an_independent_replay[oom]"
m frag-touching-segments-one analyzer/fragmentation.c \
  'uint64_t tag = it->space == VRT_SPACE_MAP ? MAPPED_TAG : it->addr;' \
  'uint64_t tag = MAPPED_TAG;' \
  test_html_allocator.py::test_tensors_in_no_recorded_segment_are_said_and_adjacent_segments_stay_apart
m frag-outside-ignored analyzer/fragmentation.c \
  '\telse\n\t\td->now.outside += (int64_t)size;' \
  '\telse\n\t\t(void)size;' \
  test_html_allocator.py::test_an_attach_says_what_it_cannot_know
m frag-reserved-without-handles analyzer/fragmentation.c \
  'return it->space != VRT_SPACE_BLOCK && vrt_item_counted(it) && it->kind == VRT_KIND_DEVICE &&' \
  'return it->space == VRT_SPACE_ADDR && it->kind == VRT_KIND_DEVICE &&' \
  "test_html_allocator.py::test_figures_at_the_oom_equal_the_cli_and_an_independent_replay[remedies-expandable]"
m frag-bucket-not-its-highest analyzer/fragmentation.c \
  'if (d->now.allocated > d->b[b].allocated)' \
  'if (d->now.allocated < d->b[b].allocated)' \
  "test_html_allocator.py::test_each_bucket_is_the_moment_the_tensors_were_highest[oom]"
m frag-checkpoint-not-rebuilt analyzer/fragmentation.c \
  '\t\tf->dirty = true;\n\t\treturn;' \
  '\t\treturn;' \
  "test_html_allocator.py::test_the_end_equals_report[attach-ds]"
m bands-death-ignored analyzer/tensor_bands.c \
  '\t\t\tif (i >= 0)\n\t\t\t\tdied(b, i, now);' \
  '\t\t\t(void)i;' \
  "test_html_allocator.py::test_largest_tensors_are_bands_with_their_stack_on_hover[oom]"
m bands-latest-among-equals analyzer/tensor_bands.c \
  'x->born_event > y->born_event;' \
  'x->born_event < y->born_event;' \
  "test_html_allocator.py::test_largest_tensors_are_bands_with_their_stack_on_hover[oom]"
m html-band-stack-outermost analyzer/report.html.in \
  "var frames = site.frames.slice().reverse(), py" \
  "var frames = site.frames.slice(0, 1), py" \
  "test_html_allocator.py::test_largest_tensors_are_bands_with_their_stack_on_hover[oom]"
m html-band-site-not-picked analyzer/report.html.in \
  "'class': 'band' + (bandState.site === b[4] ? ' hl' : '')" \
  "'class': 'band'" \
  "test_html_allocator.py::test_largest_tensors_are_bands_with_their_stack_on_hover[oom]"
m html-fragmentation-verdict-inverted analyzer/report.html.in \
  "var fits = at.largest_free_bytes >= O.requested_bytes, text;" \
  "var fits = at.largest_free_bytes < O.requested_bytes, text;" \
  "test_html_allocator.py::test_figures_at_the_oom_equal_the_cli_and_an_independent_replay[oom]"
m ctypes-pointer-owns-nothing python/vramtrace/_owners.py \
  'k = Walk._ctypes_buffer' \
  'k = _IGNORED' \
  test_retention.py::test_the_demo_names_the_registry_that_keeps_its_raw_pointers

m leaks-baseline-reads-teardown analyzer/cmd_leaks.c \
  'if (r->op == VRT_OP_EXITING && !s->torn_down) {' \
  'if (0) {' \
  test_leaks_without_phases.py::test_growth_is_measured_before_teardown_and_named_by_the_users_lines
m collector-leftovers-unreported preload/collector.c \
  '\treport_leftovers(c);\n' \
  '' \
  test_stress.py::test_events_the_last_drain_cannot_take_are_counted_lost
# ---- the live-set rules (format/live.c, which the preload and the analyzer both apply) against
# the spec's third replay (tests/e2e/replay.py; issue 15's round trip), and the preload's use of them
m live-unmap-keeps-handle format/live.c \
  '\tif (map && maps)\n\t\tmaps--;' \
  '' \
  test_live_set_agreement.py::test_the_exit_checkpoint_restates_the_replay_of_every_event test_live_set_agreement.py::test_real_traces_exit_checkpoints_restate_the_replay
m live-unmap-one-mapping-only format/live.c \
  '\twhile (addr < end_addr) {' \
  '\twhile (addr < end_addr && 0) {' \
  test_live_set_agreement.py::test_the_exit_checkpoint_restates_the_replay_of_every_event test_live_set_agreement.py::test_real_traces_exit_checkpoints_restate_the_replay
m live-context-reset-ignored preload/collector.c \
  '\tcase VRT_OP_BLOCK_SIZE: case VRT_OP_CONTEXT: /* a CONTEXT from the hooks is a reset (i = 0) */' \
  '\tcase VRT_OP_BLOCK_SIZE:' \
  test_live_set_agreement.py::test_the_exit_checkpoint_restates_the_replay_of_every_event
m live-retain-not-counted format/live.c \
  'handle_set(h, handle_refs(h) + 1, handle_maps(h));' \
  '(void)0;' \
  test_live_set_agreement.py::test_the_exit_checkpoint_restates_the_replay_of_every_event
m live-seeded-mappings-unlinked format/live.c \
  '\t\tif (s->seeding)\n\t\t\tlink_seeded(s);' \
  '' \
  meson:model
m live-restated-unreferenced-handle-gets-a-reference format/live.c \
  'handle_set(l, restated ? (uint32_t)r->aux2 : 1, 0);' \
  'handle_set(l, restated && r->aux2 ? (uint32_t)r->aux2 : 1, 0);' \
  meson:model
m live-checkpoint-misses-an-item preload/trace_output.c \
  '\t\tvrt_live_at(&c->live, i, &l);\n\t\tuint32_t stack = l.stack;' \
  '\t\tvrt_live_at(&c->live, i, &l);\n\t\tif (i % 997 == 5)\n\t\t\tcontinue;\n\t\tuint32_t stack = l.stack;' \
  test_live_set_agreement.py::test_ring_checkpoints_follow_from_each_other_and_from_the_start
m python-directory-list-not-unwrapped python/vramtrace/_reports.py \
  '    if isinstance(processes, list):  # a run' \
  '    if False and isinstance(processes, list):  # a run' \
  test_python_api.py::test_a_runs_directory_reads_as_its_one_trace_and_two_traces_are_a_usage_error
m html-pads-past-the-mark analyzer/cmd_html.c \
  'double end = vrt_settings.until_mark ? 0 : vrt_trace_end_s(h->t);' \
  'double end = vrt_trace_end_s(h->t);' \
  test_cli_options.py::test_html_until_mark_draws_no_time_past_the_mark
m leaks-baseline-step-miscounted analyzer/cmd_leaks.c \
  'if (it->stack != lw->top_stack || it->born_event <= lw->min_event[lw->first]' \
  'if (it->stack != lw->top_stack || it->born_event <= lw->min_event[lw->first] || (it->born_event & 1)' \
  test_leaks_without_phases.py::test_a_step_that_keeps_two_buffers_is_one_step \
  test_attach.py::test_leaks_of_an_attached_job_names_the_growing_site_and_its_rate
m leaks-baseline-steps-are-allocations analyzer/cmd_leaks.c \
  'double burst_gap = (t[n - 1] - t[0]) / (double)(n - 1) / 4;' \
  'double burst_gap = 0;' \
  test_leaks_without_phases.py::test_a_step_that_keeps_two_buffers_is_one_step
m leaks-baseline-steps-are-bursts analyzer/cmd_leaks.c \
  'c->steps = (n + per_step / 2) / per_step;' \
  'c->steps = bursts;' \
  test_leaks_without_phases.py::test_a_step_that_keeps_two_buffers_is_one_step
m leaks-baseline-steps-before-the-window analyzer/cmd_leaks.c \
  'if (it->stack != lw->top_stack || it->born_event <= lw->min_event[lw->first] || ' \
  'if (it->stack != lw->top_stack || ' \
  test_h200_retention.py test_leaks_without_phases.py::test_a_step_that_keeps_two_buffers_is_one_step

m report-before-attach-unexplained analyzer/cmd_report.c \
  '\texplain_before_attach(t, &r->live_at_end, o->top);\n' \
  '' \
  test_attach.py::test_inject_seed_covers_everything_from_before_exactly
m attach-teardown-unwatched preload/attach.c \
  '\tvrt_python_watch_teardown();\n' \
  '' \
  test_attach.py::test_an_attached_python_job_ends_where_its_teardown_began
m leaks-baseline-helper-named analyzer/cmd_leaks.c \
  'stacks[n++] = c->stacks.v[i].stack; /* bytes 0: evidence only */' \
  '(void)0;' \
  test_attach.py::test_an_attached_python_job_ends_where_its_teardown_began

m watch-leaves-snapshots analyzer/cmd_watch.c \
  '\trc = read_tick(path, k);\n\tunlink(path);\n' \
  '\trc = read_tick(path, k);\n' \
  test_attach.py::test_watch_names_the_growing_site_of_a_running_process
m watch-growth-against-nothing analyzer/cmd_watch.c \
  '\tif (!t)\n\t\treturn 0;' \
  '\tif (t)\n\t\treturn 0;' \
  test_attach.py::test_watch_names_the_growing_site_of_a_running_process

# ---- the preload's layers (preload/base.c) ----------------------------------------------------
m base-calls-up preload/base.c \
  '\t\t\tvrt_cfg.quiet = quiet;\n\t\t\treturn;' \
  '\t\t\tvrt_cfg.quiet = quiet;\n\t\t\tif (!why)\n\t\t\t\tvrt_tbuf_init();\n\t\t\treturn;' \
  test_preload_layers.py::test_the_leaves_call_nothing_of_ours_but_base

# ---- names the trace does not have (analyzer/report_common.c, cmd_leaks.c) ----------------------
m until-mark-typo-passes analyzer/report_common.c \
  'if (!label || vrt_trace_string_id(t, label))' \
  'if (1)' \
  "test_cli_errors.py::test_an_unknown_until_mark_is_an_error[report]"
m until-mark-typo-passes-in-oom analyzer/cli.c \
  'if (!rc && (rc = vrt_check_until_mark(t, path, vrt_settings.command, vrt_settings.until_mark))) {' \
  'if (!rc && (rc = vrt_check_until_mark(t, path, vrt_settings.command, NULL))) {' \
  "test_cli_options.py::test_every_trace_reader_takes_until_mark_and_an_unknown_one_is_an_error[oom]"
m until-mark-ends-elsewhere format/records.c \
  'if (r->op == VRT_OP_MARK && t->end_mark' \
  'if (r->op == VRT_OP_PHASE_ENTER && t->end_mark' \
  test_cli_options.py::test_timeline_until_mark_ends_the_chart_at_the_mark \
  test_cli_options.py::test_export_chrome_until_mark_has_no_event_past_the_mark
m args-double-dash-ignored analyzer/cli.c \
  '\t\t\toptions = false;\n\t\t\tif (prefix) {' \
  '\t\t\tif (prefix) {' \
  test_cli_options.py::test_a_double_dash_ends_the_options
m args-repeat-unbounded analyzer/cli.c \
  'if (*o->count >= o->max)' \
  'if (*o->count > o->max)' \
  test_cli_options.py::test_a_repeated_option_is_counted
m chrome-process-by-pid analyzer/chrome_trace.c \
  'if (cmd && *cmd) { /* the program by its name, not its path */' \
  'if (0) {' \
  test_export.py::test_chrome_names_the_process_by_its_command_line_and_rank
m chrome-frames-ignore-parent analyzer/chrome_trace.c \
  'uint64_t key = mix(vrt_hash_string(text) ^ mix(parent));' \
  'uint64_t key = mix(vrt_hash_string(text));' \
  test_export.py::test_chrome_allocations_carry_their_size_site_and_stack
m chrome-points-fixed analyzer/chrome_trace.c \
  'vrt_series_init(&s, o->points, 0, end)' \
  'vrt_series_init(&s, VRT_CHROME_POINTS, 0, end)' \
  test_export.py::test_chrome_resolution_and_allocation_count_are_options
m chrome-max-events-ignored analyzer/chrome_trace.c \
  'if (c->allocations++ >= (uint64_t)c->o->allocations)' \
  'if (c->allocations++ >= VRT_CHROME_ALLOCATIONS)' \
  test_export.py::test_chrome_resolution_and_allocation_count_are_options
m chrome-no-tensor-events analyzer/chrome_trace.c \
  'if (e.kind == VRT_EFFECT_BORN)' \
  'if (e.kind == VRT_EFFECT_BORN && e.item.space != VRT_SPACE_BLOCK)' \
  test_export.py::test_chrome_allocations_carry_their_size_site_and_stack
m width-option-ignored analyzer/cli.c \
  'if (vrt_settings.width >= 0)' \
  'if (0)' \
  test_cli_options.py::test_width_cuts_frame_lines_keeping_their_place
m width-not-the-terminals analyzer/cli.c \
  'if (!ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) && ws.ws_col > 0)\n\t\treturn ws.ws_col;' \
  'if (!ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) && ws.ws_col > 0)\n\t\treturn 80;' \
  test_cli_options.py::test_on_a_terminal_frame_lines_fit_its_width
m width-columns-ignored analyzer/cli.c \
  'return n > 0 && n < 100000 ? (int)n : 80;' \
  'return 80;' \
  test_cli_options.py::test_on_a_terminal_frame_lines_fit_its_width
m width-cuts-the-place analyzer/stacks.c \
  'int room = columns - columns_of(rest, strlen(rest));' \
  'int room = columns;' \
  "test_cli_options.py::test_width_cuts_frame_lines_keeping_their_place[report]"
m width-keeps-the-arguments analyzer/stacks.c \
  'if (!open || close - open < 2 || strstr(close, "::") || open == name)' \
  'if (1)' \
  test_cli_options.py::test_a_cut_signature_loses_its_arguments_first
m width-ignores-the-recursion-note analyzer/sites.c \
  'vrt_room(width, 25 + (int)strlen(repeat))' \
  'vrt_room(width, 25)' \
  test_cli_options.py::test_a_recursion_count_stays_inside_the_width
m run-reads-the-commands-options analyzer/cli.c \
  'if (prefix) {\n\t\t\t\t*n_positional = i;\n\t\t\t\treturn 0;' \
  'if (prefix && !options) {\n\t\t\t\t*n_positional = i;\n\t\t\t\treturn 0;' \
  test_cli_errors.py::test_every_long_option_takes_its_value_after_an_equals_sign
m oom-dir-ignores-the-mark analyzer/cmd_oom.c \
  'bool found = s && (!t.end_mark || vrt_trace_string_id(&t, t.end_mark)) && find_oom(&t, s) == 0;' \
  'bool found = s && find_oom(&t, s) == 0;' \
  test_cli_options.py::test_oom_of_a_directory_picks_the_trace_with_an_oom_before_the_mark
m timeline-width-ignored analyzer/cmd_timeline.c \
  'return !width ? 100 : width < 40 ? 40 : width;' \
  'return 100;' \
  test_cli_options.py::test_timeline_width_is_the_charts_width
m oom-frames-ignored analyzer/cmd_oom.c \
  'vrt_site_print(stdout, t, &x->device_sites.v[i], opt->frames);' \
  'vrt_site_print(stdout, t, &x->device_sites.v[i], 6);' \
  test_cli_options.py::test_shared_options_are_accepted_where_they_make_sense
m phase-typo-falls-back analyzer/cmd_leaks.c \
  '\tif (o->phase && !lk.name_id) {' \
  '\tif (0) {' \
  "test_cli_errors.py::test_an_unknown_phase_is_an_error[fail-on-growth]"

m export-wrote-line-on-stdout-mode analyzer/cmd_export.c \
  'if (!rc && !to_stdout && !o.quiet)' \
  'if (!rc && !o.quiet)' \
  "test_export.py::test_export_says_what_it_wrote_and_what_reads_it[folded-speedscope]"

m diff-at-times-unnamed analyzer/cmd_diff.c \
  'snprintf(when_b, sizeof(when_b), " (at %.3f s)", b.at);' \
  'snprintf(when_b, sizeof(when_b), " (at time)");' \
  test_timeline_and_diff.py::test_diff_at_two_times_names_the_times

m info-exit-status-is-the-code analyzer/cmd_info.c \
  'exited ? printf("%d", s->end_detail) : printf("null");' \
  'exited ? printf("%d", s->end_reason) : printf("null");' \
  test_cli_errors.py::test_info_says_what_the_text_says_in_its_json

m leaks-mark-worded-as-call analyzer/cmd_leaks.c \
  '\tif (lk->by_mark)\n\t\tsnprintf(name' \
  '\tif (0)\n\t\tsnprintf(name' \
  test_h200_traces.py::test_a_mark_phase_is_worded_as_intervals_and_persistent_memory_by_what_it_is
m leaks-persistent-fixed-text analyzer/cmd_leaks.c \
  '\t\t\tif (persistent_by[k])\n' \
  '\t\t\tif (1)\n' \
  test_h200_traces.py::test_a_mark_phase_is_worded_as_intervals_and_persistent_memory_by_what_it_is

m oom-inferred-cap-unnamed analyzer/cmd_oom.c \
  'if (!o->limits.op && rm && rm->by_limit && rm->limit && inferred_limit(rm))' \
  'if (0)' \
  test_h200_traces.py::test_oom_names_the_cap_even_when_the_trace_did_not_record_it
m headline-static-runtime-internals analyzer/stacks.c \
  '"libcudart_static_" /* a static runtime' \
  '"libcudart_static_NOT" /* a static runtime' \
  test_h200_traces.py::test_a_static_runtimes_internals_never_head_a_site
m export-chrome-silent analyzer/chrome_trace.c \
  '.label = "export", .quiet = c->o->quiet, .model = &m });' \
  '.label = "export", .quiet = true, .model = &m });' \
  test_export.py::test_export_shows_its_progress_on_a_terminal
m load-fixed-buckets python/vramtrace/__init__.py \
  'found_oom, timeline(path, buckets))' \
  'found_oom, timeline(path))' \
  test_python_api.py::test_load_takes_the_timelines_resolution
m phase-method-qualname-lost python/vramtrace/_phases.py \
  'return type.__dict__["__qualname__"].__get__(cls) + "." + code.co_name' \
  'return code.co_name' \
  test_python_api.py::test_a_methods_qualified_name_is_found_without_co_qualname

m option-equals-not-split analyzer/main.c \
  "if (i >= 2 && a[0] == '-' && a[1] == '-' && eq && eq > a + 2) {" \
  "if (0) {" \
  test_cli_errors.py::test_every_long_option_takes_its_value_after_an_equals_sign
m option-equals-splits-the-traced-command analyzer/main.c \
  "(stop_at_positional && a[0] != '-')" \
  "(0)" \
  test_cli_errors.py::test_every_long_option_takes_its_value_after_an_equals_sign
m leaks-frames-ignored analyzer/cmd_leaks.c \
  'vrt_site_print(stdout, t, s, lk->o->frames);' \
  'vrt_site_print(stdout, t, s, 8);' \
  test_cli_errors.py::test_leaks_frames_sets_the_frames_shown_per_site

m timeline-starts-at-zero analyzer/cmd_timeline.c \
  'int start = from_given ? 0 : first_busy_bucket(s, mk);' \
  'int start = 0;' \
  test_timeline_and_diff.py::test_the_terminal_timeline_starts_where_memory_does

m oom-json-no-request analyzer/cmd_oom.c \
  'vrt_site_json(out, t, &req, false);' \
  'fputs("null", out);' \
  "test_html.py::test_the_oom_section_names_the_limit_that_was_hit[retain-ds-oom-offload]"
m html-oom-no-host-categories analyzer/report.html.in \
  "  var hostCats = Object.keys(O.host_by_category || {});" \
  "  var hostCats = [];" \
  "test_html.py::test_the_oom_section_names_the_limit_that_was_hit[retain-ds-oom-offload]"

m armed-exit-silent preload/collector.c \
  'if (!c->writer && !c->output_failed && atomic_load(&vrt_mode) == VRT_MODE_ARMED)' \
  'if (0)' \
  test_run_cli.py::test_an_armed_job_nobody_attached_is_not_said_to_allocate_nothing

m report-tensor-peak-heading-says-tensors analyzer/cmd_report.c \
  'p->kind < 0 ? "; live then: tensors, allocator cache, other CUDA" : ""' \
  '""' \
  test_h200_traces.py::test_the_tensor_peak_list_says_it_holds_more_than_tensors
m report-peak-heading-identifiers analyzer/cmd_report.c \
  'snprintf(buf, len, "pinned host memory");' \
  'snprintf(buf, len, "host host_pinned");' \
  test_h200_traces.py::test_peak_headings_name_the_memory_in_words
m json-shape-follows-the-count analyzer/report_common.c \
  'return n_traces > 1 || n_args > 1 || (n_args == 1 && !stat(args[0], &st) && S_ISDIR(st.st_mode));' \
  'return n_traces > 1 || n_args > 1 || (0 && !stat(args[0], &st));' \
  test_cli_errors.py::test_json_of_a_directory_is_a_list_however_many_traces_it_holds
m whatif-refuses-run-directory analyzer/cmd_whatif.c \
  'if (rc || (rc = vrt_open_or_fail(&t, opt.path = file)))' \
  'if ((rc = 0) || (rc = vrt_open_or_fail(&t, opt.path)))' \
  test_cli_errors.py::test_every_trace_reading_command_takes_a_runs_directory
m run-mkdir-error-two-texts analyzer/cmd_run.c \
  'vrt_fail(0, "cannot create directory %s: %s; the command was not run", out, strerror(errno));' \
  'vrt_fail(VRT_E_IO, "cannot create directory %s: %s", out, strerror(errno));' \
  test_run_cli.py::test_an_output_directory_that_cannot_be_made_stops_before_the_job_in_one_line
m run-unwritable-directory-runs-the-job analyzer/cmd_run.c \
  'if (vrt_output_place_ok(out, true, why, sizeof(why)) && !takes_a_file(out)) {' \
  'if (vrt_output_place_ok(out, true, why, sizeof(why)) && !takes_a_file(out) && 0) {' \
  test_run_cli.py::test_an_output_directory_that_takes_no_file_stops_before_the_job_in_one_line
m html-palette-two-teals analyzer/report.html.in \
  "'#9c755f', '#b6992d', '#d37295'" \
  "'#9c755f', '#86bcb6', '#d37295'" \
  test_html.py::test_no_two_palette_colours_look_alike
m settings-said-by-every-process preload/config.c \
  'settings_said = getenv(SETTINGS_SAID) != NULL;' \
  'settings_said = false;' \
  test_stress.py::test_a_bad_setting_is_said_once_by_a_chain_of_processes
m leaks-never-entered-phase-passes analyzer/cmd_leaks.c \
  'if (!rc && !lk->by_mark && !lk->n_inv) {' \
  'if (0) {' \
  test_cli_errors.py::test_a_name_the_trace_has_that_never_became_a_phase_is_an_error
m folded-starts-at-start analyzer/cmd_export.c \
  'for (int k = outermost_python(frames, n); k >= 0; k--) {' \
  'for (int k = n - 1 + 0 * outermost_python(frames, n); k >= 0; k--) {' \
  test_export.py::test_folded_stacks_with_python_frames_begin_at_the_outermost_one
m oom-none-exit-code-undocumented analyzer/cmd_oom.c \
  'return VRT_EXIT_FINDINGS;' \
  'return VRT_EXIT_IO;' \
  test_cli_errors.py::test_exit_codes_mean_what_cli_md_says
m info-hides-pytorch analyzer/cmd_info.c \
  'if (torch && *torch)\n\t\tprintf("pytorch' \
  'if (0)\n\t\tprintf("pytorch' \
  test_cli_errors.py::test_info_shows_the_pytorch_release_the_trace_records
m oom-inferred-cap-one-figure analyzer/cmd_oom.c \
  'vrt_bytes((int64_t)(rm->reserved_at_failure + r->size))' \
  'vrt_bytes((int64_t)(rm->reserved_at_failure))' \
  test_h200_traces.py::test_oom_names_the_cap_even_when_the_trace_did_not_record_it

# ---- how a site prints (analyzer/sites.c) ------------------------------------------------------
m site-repeats-headline analyzer/sites.c \
  '\t\tif (is_headline && run == 1)\n\t\t\tcontinue;' \
  '\t\tif (0)\n\t\t\tcontinue;' \
  "test_h200_traces.py::test_a_site_never_repeats_its_headline_or_a_frame_in_a_row[report]"
m site-recursion-uncollapsed analyzer/sites.c \
  'for (int k = i + 1; k < n && same_frame(&frames[k], &frames[i]); k++)' \
  'for (int k = i + 1; k < 0 && same_frame(&frames[k], &frames[i]); k++)' \
  "test_h200_traces.py::test_a_site_never_repeats_its_headline_or_a_frame_in_a_row[leaks]"

# ---- what run says and refuses (analyzer/cmd_run.c) -------------------------------------------
m run-replaces-without-force analyzer/cmd_run.c \
  '\t\tif (!force)\n' \
  '\t\tif (0)\n' \
  test_run_cli.py::test_an_existing_trace_is_kept_unless_forced
m run-exec-failure-twice analyzer/cmd_run.c \
  'if (got == sizeof(exec_errno)) {' \
  'if (got == sizeof(exec_errno) && 0) {' \
  test_run_cli.py::test_a_command_that_cannot_start_gets_one_line
m run-next-step-unquoted analyzer/cmd_run.c \
  'if (*e && strspn(' \
  'if (1 || strspn(' \
  test_run_cli.py::test_a_written_trace_comes_with_its_size_and_a_next_step_that_runs
m run-kill-blames-command analyzer/cmd_run.c \
  '\telse if (WIFSIGNALED(status))\n' \
  '\telse if (0)\n' \
  test_sigkill.py::test_run_never_blames_the_command_for_a_kill
m run-kill-no-note analyzer/cmd_run.c \
  '*killed = true;' \
  '(void)killed;' \
  test_sigkill.py::test_a_killed_trace_is_named_with_a_note
m file-not-from-first-event preload/collector.c \
  'atomic_compare_exchange_strong(&file_state, &expected, 1);' \
  '(void)expected;' \
  test_sigkill.py::test_the_first_allocation_returns_once_the_file_exists_even_when_making_it_is_slow
m inject-no-sigsuspend analyzer/inject.c \
  '130 /* rt_sigsuspend */, ' \
  '' \
  test_attach.py::test_inject_borrows_a_thread_waiting_in_sigsuspend
m run-names-traces-by-the-second analyzer/cmd_run.c \
  'if (st->st_mtim.tv_nsec == 0)' \
  'if (1)' \
  test_run_cli.py::test_a_trace_from_before_the_run_is_not_named_as_the_jobs
m info-not-kept-while-armed preload/api.c \
  'if (info_text(key, value, text) && info_keep(text)) /* kept' \
  'if (recording() && info_text(key, value, text) && info_keep(text)) /* kept' \
  test_attach.py::test_an_attached_python_jobs_trace_has_the_facts_it_recorded_while_armed
m info-past-the-limit-dropped preload/api.c \
  'bool send = !kept || info_written;' \
  'bool send = kept && info_written;' \
  test_run_cli.py::test_facts_past_what_the_preload_keeps_still_reach_the_trace
m info-sent-before-the-file preload/api.c \
  'bool send = !kept || info_written;' \
  'bool send = true;' \
  test_run_cli.py::test_processes_that_make_no_cuda_allocation_write_no_trace
m info-kept-never-written preload/trace_output.c \
  '\tvrt_info_write_kept(&kept_writer, c);' \
  '\t(void)kept_writer;' \
  test_run_cli.py::test_a_forked_child_trace_has_the_facts_its_parent_recorded_before_the_fork
m exiting-makes-a-file preload/api.c \
  'if (atomic_load(&vrt_mode) == VRT_MODE_FULL && keep_exiting(stage))' \
  'if (0)' \
  test_run_cli.py::test_processes_that_make_no_cuda_allocation_write_no_trace
m exiting-kept-never-written preload/api.c \
  '\tif (exiting_kept_ns)\n\t\tw->exiting' \
  '\tif (0)\n\t\tw->exiting' \
  test_passes.py::test_a_phase_called_only_in_teardown_is_followed_as_its_own_replay_sees_it
m file-late-unsaid preload/collector.c \
  'if (!atomic_exchange(&file_late_said, true))' \
  'if (0)' \
  test_sigkill.py::test_a_trace_file_the_collector_could_not_make_in_time_is_said
m file-wait-one-second preload/collector.c \
  '#define FILE_WAIT_NS 5000000000ull' \
  '#define FILE_WAIT_NS 1000000000ull' \
  test_sigkill.py::test_a_trace_file_the_collector_could_not_make_in_time_is_said
m rings-tail-before-write preload/collector.c \
  'k->b->read_pos = k->pos; /* an EVENTS chunk written from here on holds it */' \
  'k->b->read_pos = k->pos; atomic_store(&k->b->tail, k->pos);' \
  test_sigkill.py::test_events_the_collector_was_writing_when_killed_are_recovered
# a drain takes a buffer's events in a run only until another buffer's next event is older
m drain-takes-at-most-512-buffers preload/collector.c \
  '\tsize_t want = usable ? usable * 2 : 512;' \
  '\tif (usable)\n\t\treturn false;\n\tsize_t want = 512;' \
  test_static_and_threads.py::test_threads_that_end_faster_than_the_collector_drains_lose_nothing
# (a drain whose growth of one array failed: both arrays' own sizes decide the next one's room)
m drain-room-ignores-the-heap preload/collector.c \
  '\tsize_t usable = cursors_cap < heap_cap ? cursors_cap : heap_cap;' \
  '\tsize_t usable = cursors_cap;' \
  'test_stress.py::test_a_drain_that_cannot_grow_its_arrays_leaves_the_events_for_the_next_one[heap]'
m leftovers-without-unreported-drops preload/collector.c \
  '\t\t\tleft += b->lost;\n\t\t\tb->lost = 0;' \
  '\t\t\t(void)0;' \
  test_stress.py::test_a_collector_that_never_drains_counts_every_event_lost_with_the_drops_its_threads_had_yet_to_report
m drain-heap-sifts-the-wrong-way preload/collector.c \
  '\t\tif (l < n && comes_first(heap[l], heap[m]))' \
  '\t\tif (l < n && comes_first(heap[m], heap[l]))' \
  test_static_and_threads.py::test_threads_events_are_written_oldest_first
m drain-run-ignores-other-buffers preload/collector.c \
  '\treturn second < best ? cursors[second].ts : cursors[second].ts + 1;' \
  '\treturn horizon + 1;' \
  test_static_and_threads.py::test_threads_events_are_written_oldest_first
m state-counts-a-chunk-after-it-is-written preload/trace_output.c \
  '\t\tvrt_tbuf_mark_pending(vrt_writer_next_seq(c->writer));\n\t\tvrt_writer_count_events(c->writer, c->events_written, c->events_lost);\n\t}' \
  '\t\tvrt_tbuf_mark_pending(vrt_writer_next_seq(c->writer));\n\t}\n\tif (0)\n\t\tvrt_writer_count_events(c->writer, c->events_written, c->events_lost);' \
  test_sigkill.py::test_every_state_block_counts_the_events_the_file_holds_then
m failed-chunk-counted-as-written preload/trace_output.c \
  '\t\tvrt_writer_count_events(c->writer, in_file, c->events_lost); /* the chunk is not in the file */' \
  '\t\t(void)in_file;' \
  'test_stress.py::test_trace_cut_short_by_a_write_error_says_so[0]'
m recover-forgets-chunks-after-the-state analyzer/cmd_recover.c \
  'rc = write_state(&p, out->events + uncounted,' \
  'rc = write_state(&p, out->events,' \
  test_sigkill.py::test_a_kill_between_an_events_chunk_and_its_state_block_counts_every_event
m rings-not-shared preload/tbuf.c \
  'PROT_READ | PROT_WRITE, MAP_SHARED, rings_fd, at)' \
  'PROT_READ | PROT_WRITE, MAP_PRIVATE, rings_fd, at)' \
  test_sigkill.py::test_every_allocation_that_returned_is_in_the_recovered_trace
m recover-skips-a-slot analyzer/cmd_recover.c \
  'for (uint32_t i = 0; i < taken; i++) {\n\t\tslots[i].ring = NULL;' \
  'for (uint32_t i = 1; i < taken; i++) {\n\t\tslots[i].ring = NULL;' \
  test_sigkill.py::test_every_allocation_that_returned_is_in_the_recovered_trace
m run-no-recovery analyzer/cmd_run.c \
  'if (lstat(rings, &st) || !S_ISREG(st.st_mode))\n\t\treturn false;' \
  'if (1)\n\t\treturn false;' \
  test_sigkill.py::test_events_the_collector_was_writing_when_killed_are_recovered
m recover-hint-missing analyzer/cli.c \
  '!lstat(rings, &st) && S_ISREG(st.st_mode) && t->hdr.pid > 0' \
  '0 && S_ISREG(st.st_mode) && t->hdr.pid > 0' \
  test_sigkill.py::test_recover_by_hand
m recover-merge-unsorted analyzer/cmd_recover.c \
  'qsort(refs, n, sizeof(*refs), by_time);' \
  '(void)by_time;' \
  test_sigkill.py::test_every_thread_buffer_is_recovered_in_time_order
m rings-left-at-exit preload/trace_output.c \
  's trace */\n\trings_remove();' \
  's trace */' \
  test_sigkill.py::test_a_normal_exit_leaves_no_sidecar
m rings-refusal-silent preload/trace_output.c \
  'return rings_refused("cannot create");' \
  'return;' \
  test_sigkill.py::test_a_sidecar_name_taken_by_a_link_is_never_followed
m run-workers-not-recovered analyzer/cmd_run.c \
  '\t\trecover_dir(o, dir, WIFSIGNALED(status) ? WTERMSIG(status) : 0, NULL);' \
  '\t\t(void)dir;' \
  test_sigkill.py::test_a_launchers_killed_workers_are_recovered_beside_its_trace
# ---- export (analyzer/cmd_export.c) -----------------------------------------------------------
m folded-no-roots analyzer/cmd_export.c \
  '\t\tfprintf(out, "%s;", root);\n' \
  '' \
  test_export.py::test_folded_roots_are_the_devices_and_host_memory_with_their_own_totals
m folded-one-slot analyzer/cmd_export.c \
  'for (int slot = 0; slot <= VRT_MAX_DEVICES; slot++)' \
  'for (int slot = 0; slot < 1; slot++)' \
  test_export.py::test_folded_roots_are_the_devices_and_host_memory_with_their_own_totals

m chrome-every-bucket analyzer/chrome_trace.c \
  'if (v == shown[i] && b != s->used - 1)' \
  'if (0)' \
  test_export.py::test_chrome_names_the_threads_and_draws_changes_only

m html-timeline-progress-silent analyzer/cmd_html.c \
  '.label = "html: timeline, leaks", .quiet = h->o->quiet' \
  '.label = "html: timeline, leaks", .quiet = true' \
  test_html.py::test_every_stage_shows_its_progress_on_a_terminal
m progress-no-time-left analyzer/cli.c \
  'if (elapsed >= 4 * progress_delay() && percent > 0 && percent < 100)' \
  'if (0)' \
  test_html.py::test_every_stage_shows_its_progress_on_a_terminal

m pyapi-progress-not-handed-down python/vramtrace/_reports.py \
  '    terminal = _terminal_copy()' \
  '    terminal = None' \
  test_python_api.py::test_load_shows_the_analyzers_progress_on_a_terminal

m leaks-site-total-only analyzer/cmd_leaks.c \
  '\t\tif (s->value2 > 1) /* the headline is per call: so is this */' \
  '\t\tif (0)' \
  test_h200_traces.py::test_each_survivor_says_what_one_call_left_as_the_headline_does

m frame-path-whole analyzer/stacks.c \
  'snprintf(buf, len, "%s (%s:%d)", f->function, vrt_display_path(f->file), f->line);' \
  'snprintf(buf, len, "%s (%s:%d)", f->function, f->file, f->line);' \
  test_h200_traces.py::test_library_frames_print_from_their_import_root_and_the_json_keeps_the_path

m seed-segment-not-the-allocators analyzer/sites.c \
  ' || mentions(f, "[PyTorch allocator segment")' \
  '' \
  test_attach.py::test_torch_seed_is_told_apart_in_the_categories
m seed-tensor-outside-pytorch analyzer/sites.c \
  '\t{ "unattributed", "[tensor allocated before attach", "a tensor PyTorch held when the attach began" },\n' \
  '' \
  test_attach.py::test_torch_seed_is_told_apart_in_the_categories

m html-survivor-call-is-total analyzer/report.html.in \
  "num(v.calls > 1 ? bytes(Math.floor(v.bytes / v.calls)) : '')," \
  "num(v.calls > 1 ? bytes(v.bytes) : '')," \
  test_html.py::test_survivors_are_grouped_by_site_as_leaks_prints_them

m html-native-tower-kept analyzer/report.html.in \
  "        frames = frames.slice(-NATIVE_TAIL);" \
  "        frames = frames.slice(0);" \
  test_html.py::test_python_frames_only_folds_stacks_without_a_python_frame

# ---- the pass iterator (analyzer/pass.c): seek, and how many passes a report takes ------------
m pass-uncounted analyzer/pass.c \
  '		passes++;' \
  '		;' \
  test_passes.py::test_each_report_reads_the_trace_a_bounded_number_of_times
m leaks-low-points-extra-pass analyzer/cmd_leaks.c \
  '\tlows_found(lw);\n\tif (vrt_model_init(&m)) {' \
  '\tlows_found(lw);\n\tvrt_pass_open(&p, lk->t, &(struct vrt_pass_options){ .quiet = true });\n\tvrt_pass_abandon(&p);\n\tif (vrt_model_init(&m)) {' \
  test_passes.py::test_each_report_reads_the_trace_a_bounded_number_of_times
# (leaks follows the phases in its survey's pass: the picked one's replay kept, each follower
# from the state before its phase, to the end, and only while it counts the layer the replay would)
m leaks-follower-not-adopted analyzer/cmd_leaks.c \
  '\tint rc = follow_adopt(f, lk) ? 0 : replay(lk);' \
  '\tint rc = f ? replay(lk) : replay(lk);' \
  test_passes.py::test_each_report_reads_the_trace_a_bounded_number_of_times
m leaks-follower-adopts-another-phase analyzer/cmd_leaks.c \
  'if (f->off[i] || f->lk[i].name_id != lk->name_id)' \
  'if (f->off[i])' \
  test_passes.py::test_the_phase_followed_in_the_survey_is_the_phases_own_replay
m leaks-follower-misses-the-end analyzer/cmd_leaks.c \
  '\t\t\treplay_end(&f->lk[i], m);' \
  '\t\t\t(void)m;' \
  test_passes.py::test_the_phase_followed_in_the_survey_is_the_phases_own_replay
m leaks-follower-starts-from-nothing analyzer/cmd_leaks.c \
  '\t*lk = f->before;' \
  '\t*lk = (struct leaks){ .t = f->before.t, .o = f->before.o };' \
  test_passes.py::test_a_phase_called_only_in_teardown_is_followed_as_its_own_replay_sees_it
m leaks-follower-keeps-a-wrong-layer analyzer/cmd_leaks.c \
  '(!f->layer && !lk->blocks && s->blocks.any_blocks)' \
  '(0 && s->blocks.any_blocks)' \
  test_passes.py::test_the_phase_followed_in_the_survey_is_the_phases_own_replay
m leaks-before-misses-the-walks analyzer/cmd_leaks.c \
  '\tif (vrt_owners_apply(&lk->owners, r))\n\t\tlk->walk_fresh = true;' \
  '\tif (lk->name_id && vrt_owners_apply(&lk->owners, r))\n\t\tlk->walk_fresh = true;' \
  test_passes.py::test_a_phase_first_entered_after_walks_of_another_is_followed_as_its_own_replay_sees_it
m leaks-before-misses-the-teardown analyzer/cmd_leaks.c \
  '\treplay_walks_and_end(&f->before, m, r);' \
  '\t(void)0;' \
  test_passes.py::test_a_phase_called_only_in_teardown_is_followed_as_its_own_replay_sees_it
# (a scan asks which call each live item was born in: before the first and in the last are
# answered without the search)
m leaks-born-before-the-first-call-counted-in-it analyzer/cmd_leaks.c \
  '\tif (!lk->n_inv || event < lk->inv[0].enter_event)\n\t\treturn 0;' \
  '\tif (!lk->n_inv)\n\t\treturn 0;\n\tif (event < lk->inv[0].enter_event)\n\t\treturn 1;' \
  test_h200_traces.py::test_fixed_engine_blames_nothing_and_labels_the_cublas_workspace
m leaks-born-in-an-earlier-call-counted-in-the-last analyzer/cmd_leaks.c \
  '\tif (event >= lk->inv[hi - 1].enter_event)\n\t\tlo = hi;' \
  '\tif (event >= lk->inv[0].enter_event)\n\t\tlo = hi;' \
  test_h200_traces.py::test_fixed_engine_blames_nothing_and_labels_the_cublas_workspace

# ---- the replay at speed (issue 17, item 4): batches of decoded records, a second thread for
# zstd, the live set's index (a batch that loses a record, a chunk decoded ahead that is not the
# one asked for, an error the batch forgets, a slot moved or rehashed to the wrong place)
m replay-batch-drops-a-record analyzer/model.h \
  '\treturn &rp->recs[rp->next++];' \
  '\trp->next += rp->next == 5 && rp->n > 6;\n\treturn &rp->recs[rp->next++];' \
  meson:roundtrip
m reader-ahead-decodes-the-next-chunk format/trace_reader.c \
  '\ta->ref = t->chunks[i];' \
  '\ta->ref = t->chunks[i + 1 < t->n_chunks ? i + 1 : i];' \
  meson:roundtrip
m replay-fallback-keeps-the-spent-batch analyzer/model.c \
  '\trp->next = rp->n = 0;' \
  '\t(void)0;' \
  test_reader_threads.py
m replay-batch-forgets-its-error analyzer/model.c \
  '\tbatch_stopped(rp, verdict);' \
  '\t(void)verdict;' \
  meson:bad-corpus
m replay-hot-stack2-unchecked format/records.c \
  'if (r->stack >= stacks_end || r->stack2 >= stacks_end) {' \
  'if (r->stack >= stacks_end) {' \
  meson:bad-corpus
m live-deletion-keeps-a-slot-that-moves format/live.c \
  'bool stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);' \
  'bool stays = hole <= i ? (home >= hole && home <= i) : (home > hole || home <= i);' \
  meson:model
m live-growth-rehashes-to-the-wrong-home format/live.c \
  'size_t i = s->index[k].hash & mask;' \
  'size_t i = s->index[k].hash & (mask >> 1);' \
  meson:model
# (the records the second thread decodes with the chunk: one lost, the error after them lost,
# decoded from the chunk taken before, or not decoded there at all)
m reader-ahead-records-drop-the-last analyzer/model.c \
  '\trp->n = rs->n;' \
  '\trp->n = rs->n - (rs->n > 6);' \
  meson:roundtrip
m reader-ahead-records-forget-their-error analyzer/model.c \
  '\tbatch_stopped(rp, rs->verdict);' \
  '\t(void)rs->verdict;' \
  meson:bad-corpus
m reader-ahead-records-of-the-old-chunk format/trace_reader.c \
  '\t\ta->buf = mine;\n\t\t*rc = a->rc;' \
  '\t\ta->buf = mine;\n\t\tstruct vrt_chunk_records keep = t->buf.records;\n\t\tt->buf.records = a->buf.records;\n\t\ta->buf.records = keep;\n\t\t*rc = a->rc;' \
  meson:roundtrip
m reader-ahead-records-never-decoded format/trace_reader.c \
  '\trs->valid = true;' \
  '\trs->valid = false;' \
  meson:roundtrip
m record-wide-varint-one-byte-short include/vramtrace/record.h \
  'return p + bits / 8;' \
  'return p + bits / 8 - (bits > 8);' \
  meson:decode_hot

m html-leaks-json-elsewhere analyzer/cmd_leaks.c \
  'f->lk.out = out;' \
  'f->lk.out = stdout;' \
  "test_html.py::test_the_leaks_section_is_what_leaks_says[attach-ds]"
m html-leaks-survey-unfed analyzer/cmd_html.c \
  'vrt_leaks_feed_record(h->leaks, &h->end, &r, &e);' \
  '(void)0;' \
  "test_html.py::test_the_leaks_section_is_what_leaks_says[leak-cycle]"
m html-leaks-low-points-cut analyzer/cmd_html.c \
  'while ((left || oom || (h->leaks && vrt_leaks_feed_wants(h->leaks, &m)))' \
  'while ((left || oom)' \
  "test_html.py::test_the_leaks_section_is_what_leaks_says[attach-ds]"
m html-leaks-replay-unfed analyzer/cmd_html.c \
  '\t\tif (h->leaks)\n\t\t\tvrt_leaks_feed_record(h->leaks, &m, &r, &e);\n\t\tnote_marker(h, &r);' \
  '\t\tnote_marker(h, &r);' \
  test_html.py::test_data_agrees_with_report_and_leaks
m leaks-steps-unseen analyzer/cmd_leaks.c \
  'if (w == lw->last)\n\t\t\tcadence_evidence(lk, lw, m);' \
  'if (0)\n\t\t\tcadence_evidence(lk, lw, m);' \
  test_leaks_without_phases.py::test_a_step_that_keeps_two_buffers_is_one_step
m html-leaks-section-dropped analyzer/cmd_html.c \
  'if (ok)\n\t\tfwrite(capped, 1, capped_len, out);' \
  'if (0)\n\t\tfwrite(capped, 1, capped_len, out);' \
  test_html.py::test_data_agrees_with_report_and_leaks
m html-oom-section-dropped analyzer/cmd_html.c \
  'if (!rc && found)\n\t\tfwrite(json, 1, len, out);' \
  'if (0)\n\t\tfwrite(json, 1, len, out);' \
  test_html.py::test_oom_section

m html-oom-search-unfed analyzer/cmd_html.c \
  'vrt_oom_search_record(h->oom, &r, p.rp.thread, p.events);' \
  '(void)r;' \
  test_html.py::test_oom_section

m html-peaks-stop-before-oom analyzer/cmd_html.c \
  'while ((left || oom || (h->leaks' \
  'while ((left || (h->leaks' \
  test_passes.py::test_each_report_reads_the_trace_a_bounded_number_of_times
# ---- the Python module as a library (python/vramtrace, dump --json, export parquet) ------------
m api-snapshot-waits-for-a-walk preload/api.c \
  'vrt_ctl_request((int)getpid(), VRT_CTL_PEEK, path, &reply, 30000);' \
  'vrt_ctl_request((int)getpid(), VRT_CTL_SNAPSHOT, path, &reply, 30000);' \
  test_python_api.py::test_snapshot_without_the_bootstrap_asks_the_blocked_thread_for_no_walk
m pytest-plugin-never-fails python/vramtrace/pytest_plugin.py \
  'grown > checker.limit_bytes' \
  'grown > checker.limit_bytes + (1 << 40)' \
  test_python_api.py::test_the_plugin_fails_the_tests_whose_gpu_memory_grows
m pyapi-growth-from-exit python/vramtrace/_reports.py \
  'return self.live_bytes_at_next_entry - self.live_bytes_at_entry' \
  'return self.live_bytes_at_exit - self.live_bytes_at_entry' \
  test_python_api.py::test_leaks_are_dataclasses_with_the_analyzers_integer_bytes
m pyapi-errors-by-exit python/vramtrace/_errors.py \
  '3: TraceDamaged,' \
  '3: AnalyzerFailed,' \
  test_python_api.py::test_errors_are_trace_errors_that_carry_the_analyzers_message
m dump-json-stack-twice analyzer/cmd_dump.c \
  'seen->bits[stack / 8] |= (uint8_t)(1u << (stack % 8));' \
  '(void)0;' \
  test_python_api.py::test_dump_json_has_every_event_with_its_stack_given_once
# Killed where pyarrow and duckdb import (scripts/test.sh installs them); elsewhere the tests skip.
m parquet-rank-lost python/vramtrace/_parquet.py \
  '            rank = rec["rank"]' \
  '            rank = -1' \
  test_parquet.py::test_growth_per_call_per_rank_equals_leaks_on_each_file
m parquet-site-by-innermost-frame python/vramtrace/_parquet.py \
  'headline_function=head.function if head else None' \
  'headline_function=s.frames[0].function if head else None' \
  test_parquet.py::test_the_rank_that_grows_most_and_its_top_site_equal_leaks
m parquet-events-dropped python/vramtrace/_parquet.py \
  '            tables["events"].add(**rec)' \
  '            pass' \
  test_parquet.py::test_every_table_is_there_with_a_row_per_rank
m export-parquet-not-dispatched analyzer/cmd_export.c \
  'if (!strcmp(o.format, "parquet"))' \
  'if (0)' \
  test_parquet.py::test_without_pyarrow_the_export_says_so_in_one_line

# ---- the tensor layer looks for PyTorch again at a later allocation (torch.c) -----------------
m torch-search-never-again preload/torch.c \
  '\t       now_ns >= atomic_load_explicit(&next_search_ns, memory_order_relaxed);' \
  '\t       false;' \
  test_torch_search.py::test_pytorch_brought_up_after_the_first_allocation_is_found
m torch-search-without-the-time preload/event.c \
  'vrt_torch_maybe_attach(ts ? ts : vrt_now_ns());' \
  'vrt_torch_maybe_attach(0);' \
  test_torch_search.py::test_pytorch_brought_up_after_the_first_allocation_is_found

# ---- the tensor layer's block sizes from the allocator's statistics (torch.c) ---------------
m torch-block-sizes-read-every-event preload/torch.c \
  'bool read = seen == PENDING || (seen == STALE && action == ALLOC);' \
  'bool read = true;' \
  test_torch_block_sizes.py::test_a_repeated_temporary_costs_one_statistics_read_a_pair
m torch-block-sizes-frees-read preload/torch.c \
  'bool read = seen == PENDING || (seen == STALE && action == ALLOC);' \
  'bool read = seen != FRESH || action != ALLOC;' \
  test_torch_block_sizes.py::test_the_statistics_are_read_once_per_allocation_at_most
m torch-block-sizes-alloc-after-alloc-unread preload/torch.c \
  'bool read = seen == PENDING || (seen == STALE && action == ALLOC);' \
  'bool read = (seen == PENDING && action != ALLOC) || (seen == STALE && action == ALLOC);' \
  test_torch_block_sizes.py::test_every_block_has_its_real_size_before_its_free
m torch-phase-leaves-the-block-unsettled preload/torch.c \
  '\t\tif (counters_of(d) != PENDING)\n\t\t\tcontinue;' \
  '\t\tif (counters_of(d) != PENDING || true)\n\t\t\tcontinue;' \
  test_torch_block_sizes.py::test_a_phase_boundary_settles_the_block_waiting_for_its_size
m torch-settle-reads-for-another-block preload/torch.c \
  'counters_of(d) == PENDING && d->pendings == pending && s.alloc_count > d->alloc_count' \
  'counters_of(d) == PENDING && s.alloc_count > d->alloc_count' \
  test_torch_block_sizes.py::test_every_block_has_its_real_size_before_its_free
m torch-one-state-for-every-device preload/torch.c \
  '\tstruct device_state *d = &devices[device];\n\tif (!(guard = vrt_enter())) {' \
  '\tstruct device_state *d = &devices[0];\n\tif (!(guard = vrt_enter())) {' \
  test_torch_block_sizes.py::test_each_device_sizes_its_own_blocks
m torch-carry-dropped-by-other-actions preload/torch.c \
  'if (action < 0 || device < 0 || device >= MAX_DEVICES)\n\t\treturn;\n\tstruct device_state *d = &devices[device];' \
  'if (device < 0 || device >= MAX_DEVICES)\n\t\treturn;\n\tstruct device_state *d = &devices[device];\n\tif (action < 0) {\n\t\tset_counters(d, STALE);\n\t\treturn;\n\t}' \
  test_torch_block_sizes.py::test_a_repeated_temporary_costs_one_statistics_read_a_pair

# ---- the documents say which test guards what (docs/RELIABILITY.md) ---------------------------
m reliability-names-a-missing-test docs/RELIABILITY.md \
  '`test_stress.py::test_exec_chain_runs_every_image_unharmed`' \
  '`test_stress.py::test_exec_chain_runs_every_image_unharmed_twice`' \
  test_docs.py::test_every_test_reliability_md_names_exists

# ---- what a command prints must reach standard output (main.c) --------------------------------
m stdout-write-errors-forgotten analyzer/main.c \
  'if ((fflush(stdout) || ferror(stdout)) && !rc)' \
  'if (fflush(stdout) && !rc)' \
  test_cli_errors.py::test_output_that_did_not_reach_standard_output_is_an_error
m stdout-never-checked analyzer/main.c \
  'return stdout_written(c->run(n, argv + 1));' \
  'return c->run(n, argv + 1);' \
  test_cli_errors.py::test_output_that_did_not_reach_standard_output_is_an_error

# ---- the locale's character set (analyzer/charset.c, json.h; docs/ux-audit.md #76) -------------
m charset-ellipsis-always-utf8 analyzer/charset.c \
  'const char *vrt_ellipsis(void) { return utf8 ? "\u2026" : "..."; }' \
  'const char *vrt_ellipsis(void) { return "\u2026"; }' \
  test_cli_options.py::test_the_c_locale_gets_ascii_text_with_the_same_cuts
m charset-ellipsis-width-one analyzer/charset.c \
  'int vrt_ellipsis_columns(void) { return utf8 ? 1 : 3; }' \
  'int vrt_ellipsis_columns(void) { return 1; }' \
  test_cli_options.py::test_the_c_locale_gets_ascii_text_with_the_same_cuts
m charset-streams-unguarded analyzer/charset.c \
  '\tstdout = out;\n\tstderr = err;\n' \
  '\t(void)out;\n\t(void)err;\n' \
  test_cli_options.py::test_the_c_locale_escapes_the_traces_own_text
m charset-locale-ignored analyzer/charset.c \
  '\t\tutf8 = !strcasecmp(codeset, "UTF-8") || !strcasecmp(codeset, "UTF8");' \
  '\t\tutf8 = true;' \
  test_cli_options.py::test_the_c_locale_draws_the_timeline_in_ascii
m charset-missing-locale-ascii analyzer/charset.c \
  '\tutf8 = vrt_locale_name_utf8();' \
  '\tutf8 = false;' \
  test_cli_options.py::test_a_locale_this_machine_lacks_is_read_by_its_name
m json-non-ascii-raw analyzer/json.h \
  '\t\t} else if (cp < 0x10000) {' \
  '\t\t} else if (cp < 0x10000 && 0) {' \
  test_cli_options.py::test_json_is_ascii_and_the_same_in_every_locale
m json-bad-byte-raw analyzer/json.h \
  '\t\t\tfprintf(out, "\\\\x%02x", *p);' \
  '\t\t\tfputc(*p, out);' \
  test_cli_options.py::test_json_of_a_path_that_is_not_utf8_stays_json

m charset-fit-measures-unshown analyzer/stacks.c \
  '\tvrt_charset_shown(formatted, buf, len);' \
  '\tsnprintf(buf, len, "%s", formatted);' \
  test_cli_options.py::test_the_c_locale_escapes_the_traces_own_text
m stacks-cut-splits-escapes analyzer/stacks.c \
  "\tif (s[i] == '\\\\' && i + 3 < n && s[i + 1] == 'x' && is_hex(s[i + 2]) && is_hex(s[i + 3]))" \
  '\tif (0)' \
  test_cli_options.py::test_the_c_locale_escapes_the_traces_own_text

m preload-log-raw preload/base.c \
  '\t\tsize_t keep = p[i] < 0x80 || vrt_cfg.terminal_utf8 ? shown_utf8(p + i, len - i) : 0;' \
  '\t\tsize_t keep = 1;' \
  test_stress.py::test_the_preloads_messages_show_what_others_chose_escaped
m preload-log-passes-controls preload/base.c \
  '\treturn len && !vrt_utf8_escaped(cp) ? len : 0;' \
  '\treturn len;' \
  test_stress.py::test_the_preloads_messages_show_what_others_chose_escaped
m preload-locale-always-utf8 preload/config.c \
  '\tcfg->terminal_utf8 = vrt_locale_name_utf8();' \
  '\tcfg->terminal_utf8 = true;' \
  test_stress.py::test_the_preloads_messages_show_what_others_chose_escaped

# ---- Python names beyond ASCII (preload/python.c) -------------------------------------------
m python-str-ascii-only preload/python.c \
  '\treturn arena_utf8((const char *)s + L->str_compact_size, kind, (size_t)n);' \
  '\treturn NULL;' \
  test_python.py::test_python_names_and_files_beyond_ascii_keep_their_text
m python-str-surrogate-as-fffd preload/python.c \
  '\tif (cp >= 0xdc80 && cp <= 0xdcff) {' \
  '\tif (0) {' \
  test_python.py::test_python_names_and_files_beyond_ascii_keep_their_text

# ---- an attached PyTorch job: its allocator's snapshot seeds what it held (torch_seed.c) ------
m torch-seed-not-requested preload/attach.c \
  '\tvrt_torch_seed_request(); /* before the teardown watch: pending calls run in order */\n' \
  '' \
  test_attach.py::test_torch_seed_takes_each_segment_out_of_the_unattributed_seed
m torch-seed-seed-not-shrunk preload/collector.c \
  '\t\tvrt_attach_seed_adjust(c, r->device, -(int64_t)r->size, r->ts);' \
  '\t\t(void)0;' \
  test_attach.py::test_torch_seed_takes_each_segment_out_of_the_unattributed_seed
m torch-seed-traced-seeded-again preload/collector.c \
  '\t    vrt_live_lookup(&c->live, space, r->addr, NULL))\n\t\treturn false;' \
  '\t    false)\n\t\treturn false;' \
  test_attach.py::test_torch_seed_never_counts_a_traced_segment_twice
m torch-seed-released-seeded preload/collector.c \
  'bool gone = released_since(space, r->addr, r->ts);' \
  'bool gone = false;' \
  test_attach.py::test_torch_seed_takes_each_segment_out_of_the_unattributed_seed
m torch-seed-no-regrow preload/collector.c \
  'vrt_attach_seed_adjust(c, replaced_seed.device, (int64_t)replaced_seed.size, r->ts);' \
  '(void)0;' \
  test_attach.py::test_torch_seed_gives_back_a_segment_its_traced_allocation_replaces
m torch-seed-kept-at-zero preload/attach.c \
  '	else if (!now && live)\n		end_seed(c, &seed, ts);' \
  '' \
  test_attach.py::test_torch_seed_ends_the_unattributed_seed_when_the_allocator_holds_everything
m torch-seed-unlabelled preload/collector.c \
  'r->stack = vrt_output_label_stack(c, label);' \
  'r->stack = 0;' \
  test_attach.py::test_torch_seed_makes_the_tensors_from_before_live_blocks
m torch-seed-pending-free-tensor preload/torch_seed.c \
  '!field_is(b, "state", "active_allocated")' \
  'field_is(b, "state", "inactive")' \
  test_attach.py::test_torch_seed_makes_the_tensors_from_before_live_blocks
m torch-seed-blocks-without-tracker preload/torch_seed.c \
  'vrt_torch_tracking() ? py.dict_get(d, "blocks") : NULL' \
  'py.dict_get(d, "blocks")' \
  test_attach.py::test_torch_seed_without_the_tensor_layer_seeds_segments_only
m torch-seed-blocks-not-live preload/collector.c \
  '\tapply_birth(c, r);\n\treturn true;\n}' \
  '\tif (r->op == VRT_OP_SEED)\n\t\tapply_birth(c, r);\n\treturn true;\n}' \
  test_attach.py::test_torch_seed_frees_after_the_attach_are_known_frees
m torch-seed-expandable-seeded preload/torch_seed.c \
  'if (!field_true(d, "is_expandable")) {' \
  'if (true) {' \
  test_attach.py::test_torch_seed_takes_each_segment_out_of_the_unattributed_seed
m torch-seed-error-left-set preload/torch_seed.c \
  '\tpy.err_clear(); /* a pending call that fails would raise in the program */\n' \
  '' \
  test_attach.py::test_torch_seed_survives_a_snapshot_that_raises
m torch-seed-block-outside-segment preload/torch_seed.c \
  'size > s->size - (addr - s->addr)) {' \
  'false) {' \
  test_attach.py::test_torch_seed_takes_only_what_is_well_formed
m torch-seed-site-unnamed preload/torch_seed.c \
  'publish(&ev, python_site(b, label, sizeof(label)) ? label : BLOCK_LABEL);' \
  'publish(&ev, BLOCK_LABEL);' \
  test_attach.py::test_torch_seed_makes_the_tensors_from_before_live_blocks
m torch-seed-site-native-frame preload/torch_seed.c \
  'if (!name_s || n_file < 3 || memcmp(file_s + n_file - 3, ".py", 3) ||' \
  'if (!name_s ||' \
  test_attach.py::test_torch_seed_makes_the_tensors_from_before_live_blocks
m torch-seed-uninitialized-asked preload/torch_seed.c \
  '\tif (initialized > 0)\n\t\treturn cuda;' \
  '\tif (initialized >= 0)\n\t\treturn cuda;' \
  "test_attach.py::test_torch_seed_without_an_initialized_torch_seeds_as_before[uninitialized]"

# ---- the driver ------------------------------------------------------------------------------

if [ "${1:-}" = --list ]; then
  for i in "${!names[@]}"; do printf '%-34s %-26s %s\n' "${names[$i]}" "${files[$i]}" "${tests[$i]}"; done
  exit 0
fi
want=("$@")
# (no `printf | grep -q` here: grep leaves at its first match, printf can die of SIGPIPE, and
# pipefail then says the name is not there)
declare -A wanted=() known=()
for w in "${want[@]}"; do wanted[$w]=1; done
for n in "${names[@]}"; do known[$n]=1; done
selected=()
for i in "${!names[@]}"; do
  if [ ${#want[@]} -eq 0 ] || [ -n "${wanted[${names[$i]}]:-}" ]; then selected+=("$i"); fi
done
for w in "${want[@]}"; do
  [ -n "${known[$w]:-}" ] || { echo "mutants: no mutant named $w (--list)" >&2; exit 2; }
done

pytest_python() {
  local py
  for py in python3 /usr/bin/python3; do
    command -v "$py" >/dev/null && "$py" -c 'import pytest' 2>/dev/null && { command -v "$py"; return 0; }
  done
  return 1
}
py=$(pytest_python) || { echo "mutants: no python3 with pytest" >&2; exit 2; }
cuda_include() {
  for d in "${CUDA_HOME:-}/include" "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x)")/../include" \
           /usr/local/cuda/include /usr/include; do
    if [ -f "$d/cuda.h" ] && [ -f "$d/cuda_runtime_api.h" ]; then (cd "$d" && pwd); return 0; fi
  done
  echo "mutants: the CUDA Toolkit headers were not found; set CUDA_HOME" >&2
  return 1
}

# Replaces FROM by TO in FILE; fails unless FROM occurs exactly once. Prints nothing.
apply() { # FILE FROM TO
  "$py" - "$@" <<'EOF'
import sys
path, old, new = sys.argv[1], *(a.replace("\\n", "\n").replace("\\t", "\t") for a in sys.argv[2:])
text = open(path).read()
n = text.count(old)
if n != 1:
    sys.exit(f"{n} occurrences (want exactly 1)")
open(path, "w").write(text.replace(old, new))
EOF
}

scratch=${MUTANTS_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/vrt-mutants.XXXXXX")}
cleanup() { [ "${MUTANTS_KEEP:-0}" = 1 ] || rm -rf "$scratch"; }
trap cleanup EXIT
# The build sits inside the copy, as build/ does here: a build tree finds the Python package at
# ../../python from its analyzer/ (analyzer/paths.c).
src=$scratch/src bld=$scratch/src/build
jobs=${MUTANTS_JOBS:-2}
mkdir -p "$src" "$scratch/orig"
tree_files() { # NUL-separated: what git tracks or would track; without git, all but the build trees
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
      [ -e "$f" ] && printf '%s\0' "$f"
    done
  else
    find . -mindepth 1 \( -path './build*' -o -path ./.git -o -name __pycache__ \) -prune -o \( -type f -print0 \)
  fi
}
tree_files | tar --null -T - -cf - | tar -xf - -C "$src" || { echo "mutants: copying the tree failed" >&2; exit 1; }

echo "mutants: checking that every mutant applies"
bad=0
for i in "${selected[@]}"; do
  cp "$src/${files[$i]}" "$scratch/probe"
  if ! why=$(apply "$scratch/probe" "${froms[$i]}" "${tos[$i]}" 2>&1); then
    echo "mutants: ${names[$i]} does not apply to ${files[$i]}: $why" >&2
    bad=1
  fi
done
[ $bad -eq 0 ] || exit 1

echo "mutants: building the unmutated tree in $bld"
log=$scratch/build.log
# analyzer_lto off: a mutant's relink takes a second instead of five (meson_options.txt).
(cd "$src" && meson setup "$bld" -Danalyzer_lto=false -Dtoolkit_include="$(cuda_include)" >"$log" 2>&1) &&
  ninja -C "$bld" -j "$jobs" >>"$log" 2>&1 || { cat "$log"; echo "mutants: the unmutated tree does not build" >&2; exit 1; }

# Runs a mutant's tests against the scratch build; 0 when they all pass.
run_tests() { # TESTS...
  local pytest_ids=() meson_ids=() t
  for t in "$@"; do
    case $t in
      meson:*) meson_ids+=("${t#meson:}") ;;
      *) pytest_ids+=("$e2e/$t") ;;
    esac
  done
  if [ ${#meson_ids[@]} -gt 0 ]; then
    timeout -k 10 600 meson test -C "$bld" --no-rebuild -q "${meson_ids[@]}" >/dev/null 2>&1 || return 1
  fi
  if [ ${#pytest_ids[@]} -gt 0 ]; then
    (cd "$src" && VRAMTRACE_BUILD="$bld" VRAMTRACE_SOURCE="$src" VRAMTRACE_STRESS=1 \
      timeout -k 10 600 "$py" -m pytest -x -q -p no:cacheprovider "${pytest_ids[@]}") >"$scratch/last.log" 2>&1 ||
      return 1
  fi
  return 0
}

echo "mutants: the tests of every mutant, unmutated (they must pass)"
union=$(for i in "${selected[@]}"; do printf '%s\n' ${tests[$i]}; done | sort -u)
# shellcheck disable=SC2086
if ! run_tests $union; then
  cat "$scratch/last.log"
  echo "mutants: the tests fail without any mutant: fix them first" >&2
  exit 1
fi

results=()
survived=0
start=$SECONDS
for i in "${selected[@]}"; do
  name=${names[$i]} file=${files[$i]}
  cp -p "$src/$file" "$scratch/orig/file"
  apply "$src/$file" "${froms[$i]}" "${tos[$i]}"
  t0=$SECONDS
  if ! ninja -C "$bld" -j "$jobs" >"$log" 2>&1; then
    result="DOES NOT BUILD"
    survived=$((survived + 1))
    tail -20 "$log"
  elif run_tests ${tests[$i]}; then  # word splitting on purpose: the ids have no spaces
    result=SURVIVED
    survived=$((survived + 1))
  else
    result=killed
  fi
  cp "$scratch/orig/file" "$src/$file"
  touch "$src/$file" # newer than the mutant's objects: the next build compiles it again
  results+=("$(printf '%-34s %-26s %-8s %s' "$name" "$file" "$result" "${tests[$i]}")")
  printf 'mutants: %-34s %-14s (%d s)\n' "$name" "$result" $((SECONDS - t0))
done

echo
printf '%-34s %-26s %-8s %s\n' mutant file result "tests run (tests/e2e/ unless meson:)"
printf '%s\n' "${results[@]}"
echo
# the last lines of a CI log are often all that is kept: the survivors' names go there
for r in "${results[@]}"; do
  case $r in *" SURVIVED "*|*" DOES NOT BUILD "*) echo "mutants: not killed: ${r%% *}" ;; esac
done
echo "mutants: ${#selected[@]} mutants, $(( ${#selected[@]} - survived )) killed, $survived not killed ($((SECONDS - start)) s)"
[ $survived -eq 0 ]
