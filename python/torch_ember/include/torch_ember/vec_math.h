// Elementwise math written without library calls, so loops that use it vectorize (a call to
// std::exp keeps a loop scalar). Float only; double keeps <cmath>. Header-only and free of any
// other include of Ember's: Ember's own kernels, translated Triton kernels and C++ extensions
// (#include <torch_ember/vec_math.h>) compute exp, tanh, erf, log and log1p with the same code.
//
// exp: Cephes' expf, 2^n * p(r) with |r| <= ln2/2, within 1.01 ulp of the exact value over the
// whole float range (measured on a sweep against double exp; PyTorch's vectorized exp promises
// 1 ulp). Clamping first keeps the integer conversion defined, NaN included; two power-of-two
// factors reach the subnormal results; -inf gives exactly 0 and +inf gives inf.
// tanh: Cephes' tanhf, an odd polynomial for |x| < 0.625 (no cancellation near 0), else
// 1 - 2 / (exp(2|x|) + 1) with the sign restored.
// log, log1p: see below.
// erf: x (1 + p(x^2)) for |x| < 1, else 1 - exp(-x^2) q(1/|x|), with p (degree 7) and q (degree
// 10) least-squares fits to erf(x)/x and erfc(x) exp(x^2) weighted by the error they cause;
// within 1.1 ulp of the exact value over every float (measured against double erf).
// Each has a double overload that is <cmath>'s, so kernels written once for float and double
// call vmath:: for both.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ember::vmath {

#if defined(__GNUC__)
#define EMBER_VMATH_INLINE __attribute__((always_inline)) inline
#else
#define EMBER_VMATH_INLINE inline
#endif

EMBER_VMATH_INLINE float bits_to_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

EMBER_VMATH_INLINE uint32_t float_to_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

EMBER_VMATH_INLINE float pow2i(int32_t k) { return bits_to_float(static_cast<uint32_t>(k + 127) << 23); }

// e^r * 2^n for |r| <= ln2/2: Cephes' polynomial for e^r, scaled by two power-of-two factors (one
// would overflow the exponent field for the subnormal results).
EMBER_VMATH_INLINE float exp_scaled(float r, int32_t n) {
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.f;
    return p * pow2i(n >> 1) * pow2i(n - (n >> 1));
}

EMBER_VMATH_INLINE float exp(float x) {
    // Below -104.5 the result is +0. Those lanes (masked attention scores, x - max of a softmax
    // row) are computed at 0 and replaced: evaluating them would make subnormal intermediates,
    // which cost a microcode assist each on x86. NaN fails the comparison too; it is restored
    // at the end.
    float c = x > -104.5f ? x : 0.f;
    c = c < 89.f ? c : 89.f;
    const float fn = (c * 1.44269504088896341f + 12582912.f) - 12582912.f;  // round to integer
    const float r = (c - fn * 0.693359375f) - fn * -2.12194440e-4f;  // ln2 split for exactness
    const float y = exp_scaled(r, static_cast<int32_t>(fn));
    return x != x ? x : (x > -104.5f ? y : 0.f);
}

// exp2: 2^n * 2^r with n = round(x) and r = x - n exact; 2^r = e^(r ln2) by exp's polynomial
// (|r ln2| <= ln2/2, the range it was fitted on).
EMBER_VMATH_INLINE float exp2(float x) {
    float c = x > -151.f ? x : 0.f;
    c = c < 128.f ? c : 128.f;
    const float fn = (c + 12582912.f) - 12582912.f;
    const float y = exp_scaled((c - fn) * 0.693147180559945309f, static_cast<int32_t>(fn));
    return x != x ? x : (x > -151.f ? y : 0.f);
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

EMBER_VMATH_INLINE float erf(float x) {
    const float a = x < 0.f ? -x : x;
    const float z = a * a;
    float p = -9.7700912075e-06f;  // erf(a) / a - 1 in z = a^2
    p = p * z + 1.1299808646e-04f;
    p = p * z - 8.4884223275e-04f;
    p = p * z + 5.2213059751e-03f;
    p = p * z - 2.6865518806e-02f;
    p = p * z + 1.1283783828e-01f;
    p = p * z - 3.7612638543e-01f;
    p = p * z + 1.2837916707e-01f;
    const float small = a * p + a;
    const float u = 1.f / (a < 1.f ? 1.f : a);
    float q = -1.1935739836e-02f;  // erfc(a) exp(a^2) in u = 1/a
    q = q * u + 8.9472206510e-02f;
    q = q * u - 2.9178843422e-01f;
    q = q * u + 5.2541430499e-01f;
    q = q * u - 5.1631597565e-01f;
    q = q * u + 1.3503115925e-01f;
    q = q * u + 3.2793199556e-01f;
    q = q * u - 4.2476017331e-01f;
    q = q * u + 3.4760296641e-02f;
    q = q * u + 5.5949888764e-01f;
    q = q * u + 2.7504854754e-04f;
    const float large = 1.f - vmath::exp(-z) * q;
    const float r = a < 1.f ? small : (a < 3.95f ? large : 1.f);
    return x != x ? x : __builtin_copysignf(r, x);
}

EMBER_VMATH_INLINE float log(float x) {
    // x = 2^e m with m in [sqrt(1/2), sqrt(2)) (subnormals scaled into the normal range first);
    // log(m) = f - (f^2/2 - s (f^2/2 + R(s^2))) with f = m - 1, exact, and s = f / (2 + f):
    // the atanh series, arranged so that its big terms cancel exactly (within 0.94 ulp).
    const bool tiny = x < 1.17549435e-38f;
    const uint32_t bits = float_to_bits(tiny ? x * 8388608.f : x);
    const int32_t e = static_cast<int32_t>((bits - 0x3f3504f3u) & 0xff800000u) >> 23;
    const float f = bits_to_float(bits - (static_cast<uint32_t>(e) << 23)) - 1.f;
    const float s = f / (2.f + f);
    const float z = s * s;
    float R = 2.f / 11.f;
    R = R * z + 2.f / 9.f;
    R = R * z + 2.f / 7.f;
    R = R * z + 2.f / 5.f;
    R = R * z + 2.f / 3.f;
    R = R * z;
    const float hfsq = 0.5f * f * f;
    const float logm = f - (hfsq - s * (hfsq + R));
    const float k = static_cast<float>(e) - (tiny ? 23.f : 0.f);
    float r = k * 0.693359375f + (logm + k * -2.12194440e-4f);
    r = x > 0.f ? r : (x == 0.f ? -__builtin_inff() : __builtin_nanf(""));
    r = x == __builtin_inff() ? x : r;
    return x != x ? x : r;
}

// log1p: log(1 + x) corrected for the rounding of 1 + x (within 1.5 ulp).
EMBER_VMATH_INLINE float log1p(float x) {
    const float u = 1.f + x;
    const float r = vmath::log(u) - ((u - 1.f) - x) / u;
    return u == 1.f ? x : (u == 0.f || u == __builtin_inff() ? vmath::log(u) : r);
}

inline double exp(double x) { return std::exp(x); }
inline double exp2(double x) { return std::exp2(x); }
inline double log(double x) { return std::log(x); }
inline double log1p(double x) { return std::log1p(x); }
inline double tanh(double x) { return std::tanh(x); }
inline double erf(double x) { return std::erf(x); }

}  // namespace ember::vmath
