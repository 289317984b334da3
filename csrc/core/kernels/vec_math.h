// Elementwise math written without library calls, so loops that use it vectorize in the AVX2 and
// AVX-512 clones (a call to std::exp keeps a loop scalar). Float only; double keeps <cmath>.
//
// exp: Cephes' expf, 2^n * p(r) with |r| <= ln2/2, within 1.01 ulp of the exact value over the
// whole float range (measured on a sweep against double exp; PyTorch's vectorized exp promises
// 1 ulp). Clamping first keeps the integer conversion defined, NaN included; two power-of-two
// factors reach the subnormal results; -inf gives exactly 0 and +inf gives inf.
// tanh: Cephes' tanhf, an odd polynomial for |x| < 0.625 (no cancellation near 0), else
// 1 - 2 / (exp(2|x|) + 1) with the sign restored.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ember::kernels::vmath {

#if defined(__GNUC__)
#define EMBER_VMATH_INLINE __attribute__((always_inline)) inline
#else
#define EMBER_VMATH_INLINE inline
#endif

EMBER_VMATH_INLINE float pow2i(int32_t k) { return bits_to_float(static_cast<uint32_t>(k + 127) << 23); }

EMBER_VMATH_INLINE float exp(float x) {
    // Below -104.5 the result is +0. Those lanes (masked attention scores, x - max of a softmax
    // row) are computed at 0 and replaced: evaluating them would make subnormal intermediates,
    // which cost a microcode assist each on x86. NaN fails the comparison too; it is restored
    // at the end.
    float c = x > -104.5f ? x : 0.f;
    c = c < 89.f ? c : 89.f;
    const float fn = (c * 1.44269504088896341f + 12582912.f) - 12582912.f;  // round to integer
    const int32_t n = static_cast<int32_t>(fn);
    const float r = (c - fn * 0.693359375f) - fn * -2.12194440e-4f;  // ln2 split for exactness
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.f;
    const float y = p * pow2i(n >> 1) * pow2i(n - (n >> 1));
    return x != x ? x : (x > -104.5f ? y : 0.f);
}

EMBER_VMATH_INLINE float tanh(float x) {
    const float a = x < 0.f ? -x : x;
    const float z = x * x;
    float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                    1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    float large = 1.f - 2.f / (vmath::exp(a + a) + 1.f);
    large = x < 0.f ? -large : large;
    // small takes x's sign bit back: the polynomial term rounds -0 * z * p + -0 to +0, and
    // tanh(-0) is -0 as on the CPU.
    return a < 0.625f ? __builtin_copysignf(small, x) : (x != x ? x : large);
}

}  // namespace ember::kernels::vmath
