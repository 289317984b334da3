// EMBER_SIMD_CLONES: compile a function for AVX-512, AVX2 and baseline x86-64 and pick the best
// the CPU supports when the program loads (GCC function multiversioning through an ifunc).
// Compute loops over contiguous buffers carry it, so the compiler's vectorizer does the rest.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define EMBER_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define EMBER_SIMD_CLONES
#endif
