/*
 * fuzz.h: what the fuzz targets share.
 *
 * Each fuzz/fuzz_<name>.c is a libFuzzer target (LLVMFuzzerTestOneInput). The
 * same files also compile into the CPU test binary, which replays every
 * committed corpus input through them (tests/test_parsers.c, with
 * FORGE_FUZZ_REPLAY defined and the entry points renamed): the seeds and every
 * crash a fuzzer ever found run under `make test` and `make asan` too.
 *
 * FUZZ_FAIL(target, fmt, ...) reports a broken invariant: under libFuzzer it
 * prints and aborts, so libFuzzer keeps the input; in the replay it records a
 * test failure naming the input and returns to the replay loop (longjmp).
 * Custom mutators and LLVMFuzzerInitialize are libFuzzer-only and sit inside
 * #ifndef FORGE_FUZZ_REPLAY.
 */
#ifndef FORGE_FUZZ_H
#define FORGE_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef FORGE_FUZZ_REPLAY
void forge_fuzz_fail(const char *target, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
#define FUZZ_FAIL(target, ...) forge_fuzz_fail(target, __VA_ARGS__)
#else
#define FUZZ_FAIL(target, ...)                 \
    do {                                       \
        fprintf(stderr, "%s: ", target);       \
        fprintf(stderr, __VA_ARGS__);          \
        fprintf(stderr, "\n");                 \
        abort();                               \
    } while (0)
/* libFuzzer's own mutator, for the custom mutators */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
#endif

#endif
