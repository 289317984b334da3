// Random number kernels on a counter-based generator (Philox-4x32-10, as CUDA's): element i of a
// call draws from counter (offset / 4 + i / 4) under key `seed`, lane i % 4. The numbers depend
// only on (seed, offset) and the element index — not on threads or timing — so a seed reproduces
// them exactly, and the caller advances the generator's offset by the count it reserved.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

struct PhiloxState {
    uint64_t seed = 0;
    uint64_t offset = 0;  // in 32-bit draws; a multiple of 4
};

// Draws a call consumes for `numel` elements of dtype `t`: one uniform per element (two draws for
// a double's 53 random bits). Box-Muller normals use two uniforms per double element; in float
// and narrower, both outputs of each pair are used (16 draws per block of 16 elements).
uint64_t uniform_draws(int64_t numel, DType t = DType::kFloat32);
uint64_t normal_draws(int64_t numel, DType t = DType::kFloat32);

// dst = uniform in [low, high) (floating dtypes), with the dtype's significand bits of randomness
// (24, 53 for double). The bounds are first rounded to the dtype, as the CPU does, and every value is
// below `high` in the dtype too (each is rounded toward `low`).
Status uniform(const TensorView& dst, double low, double high, PhiloxState rng, runtime::ThreadPool* pool);
// dst = normal(mean, std) (floating dtypes; double from 53-bit uniforms and double math, the
// others computed in float as the CPU does).
Status normal(const TensorView& dst, double mean, double std, PhiloxState rng, runtime::ThreadPool* pool);
// dst = 1 with probability p, else 0 (any real dtype).
Status bernoulli(const TensorView& dst, double p, PhiloxState rng, runtime::ThreadPool* pool);

// dst = from + r with r uniform in [0, range) (any real dtype; the caller keeps from + range - 1
// representable in it). Integers are exact: r is a 32-bit draw mod range, or a 64-bit one when
// the range needs it, as PyTorch's CPU generator does (the modulo bias is below 2^-32).
uint64_t integer_draws(int64_t numel, uint64_t range);
Status random_integers(const TensorView& dst, int64_t from, uint64_t range, PhiloxState rng,
                       runtime::ThreadPool* pool);

// dst = a Gamma(alpha, 1) sample per element (float32 or float64; alpha of any real dtype, same
// sizes, any strides), by Marsaglia and Tsang's rejection method, with alpha < 1 boosted to
// alpha + 1 and scaled by U^(1/alpha). Each element draws from its own block of gamma_draws()/numel
// numbers; the rare element that needs more continues under another key, so the count per call
// stays fixed. As on the CPU, a result is at least the dtype's smallest normal number (0 and NaN
// samples included): alpha = 0 gives that, and alpha = inf gives inf.
uint64_t gamma_draws(int64_t numel);
Status standard_gamma(const TensorView& dst, const TensorView& alpha, PhiloxState rng, runtime::ThreadPool* pool);

// dst = a Poisson(rate) sample per element (float32 or float64, rate of the same dtype and
// sizes, any strides), by PyTorch's CPU algorithms: a product of uniforms below rate 10,
// Hormann's transformed rejection (PTRS) from 10 on. Draws as standard_gamma (gamma_draws()).
// A negative or NaN rate is an error; an infinite rate gives inf.
Status poisson(const TensorView& dst, const TensorView& rate, PhiloxState rng, runtime::ThreadPool* pool);

// dst (1-d int64 of length n) = a uniformly random permutation of 0..n-1 by Fisher-Yates on the
// generator's draws (uniform_draws(n) of them); serial, as the shuffle is.
Status randperm(const TensorView& dst, PhiloxState rng);

// The raw generator, exposed for tests: four 32-bit outputs for (counter, key).
void philox4x32(uint64_t counter, uint64_t key, uint32_t out[4]);

}  // namespace ember::kernels
