/*
 * fuzz_ops.h — the entry points of the operation fuzzer (fuzz_ops.c), shared by libFuzzer's
 * driver and by replay_main.c, which runs the committed corpus and every past crash through the
 * same function in plain builds (ctest: test_fuzz_regressions).
 */
#ifndef VPMM_FUZZ_OPS_H
#define VPMM_FUZZ_OPS_H

#include <stddef.h>
#include <stdint.h>

/* Once per process, before the first input (libFuzzer calls it; so does replay_main). */
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Runs one input: a fresh pool, the decoded operations with every check, full cleanup. Returns 0;
 * a finding aborts the process with a message on stderr. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Operations executed so far in this process (printed at exit as "fuzz_ops: N operations"). */
uint64_t vpmm_fuzz_operations(void);

#endif /* VPMM_FUZZ_OPS_H */
