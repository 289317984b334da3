#include "kernels/random/random.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <utility>

#include "kernels/dispatch.h"
#include "kernels/elementwise/simd.h"
#include "torch_ember/vec_math.h"

namespace ember::kernels {

namespace {

// Philox4x32-10 on the `N` counters first .. first + N - 1 side by side: out[4k .. 4k+3] are
// counter first + k's four draws. With N = 4 the 32x32->64-bit products vectorize in the
// callers' SIMD clones.
template <int N>
EMBER_VMATH_INLINE void philox_lanes(uint64_t first, uint64_t key, uint32_t out[4 * N]) {
    uint32_t c0[N], c1[N], c2[N] = {}, c3[N] = {};
    for (int k = 0; k < N; ++k) {
        const uint64_t counter = first + k;
        c0[k] = static_cast<uint32_t>(counter);
        c1[k] = static_cast<uint32_t>(counter >> 32);
    }
    uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
    for (int round = 0; round < 10; ++round) {
        for (int k = 0; k < N; ++k) {
            const uint64_t p0 = uint64_t{0xD2511F53u} * c0[k], p1 = uint64_t{0xCD9E8D57u} * c2[k];
            const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[k] ^ k0, n1 = static_cast<uint32_t>(p1);
            const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[k] ^ k1, n3 = static_cast<uint32_t>(p0);
            c0[k] = n0, c1[k] = n1, c2[k] = n2, c3[k] = n3;
        }
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    for (int k = 0; k < N; ++k) out[4 * k] = c0[k], out[4 * k + 1] = c1[k], out[4 * k + 2] = c2[k], out[4 * k + 3] = c3[k];
}

// Floats and narrower fill normals, and float32 uniforms, a block of kBlock elements at a time:
// block b reads the call's draws kBlock*b .. kBlock*b + kBlock - 1.
constexpr int64_t kBlock = 16;

}  // namespace

void philox4x32(uint64_t counter, uint64_t key, uint32_t out[4]) { philox_lanes<1>(counter, key, out); }

uint64_t uniform_draws(int64_t numel, DType t) {
    const uint64_t n = static_cast<uint64_t>(numel) * (t == DType::kFloat64 ? 2 : 1);  // two draws per 53-bit unit
    return (n + 3) / 4 * 4;
}
uint64_t normal_draws(int64_t numel, DType t) {
    // double: two 53-bit units per element; narrower: kBlock draws per block of kBlock elements.
    return t == DType::kFloat64 ? uniform_draws(2 * numel, t)
                                : static_cast<uint64_t>((numel + kBlock - 1) / kBlock * kBlock);
}

namespace {

// The call's 32-bit draw number k, remembering the last Philox block: consecutive elements read
// consecutive draws, so a block of four is computed once instead of once per draw.
class Draws {
  public:
    explicit Draws(const PhiloxState& rng) : rng_(rng) {}
    uint32_t operator()(uint64_t k) {
        const uint64_t block = k / 4;
        if (block != block_) {
            philox4x32(rng_.offset / 4 + block, rng_.seed, out_);
            block_ = block;
        }
        return out_[k % 4];
    }

  private:
    const PhiloxState& rng_;
    uint64_t block_ = ~uint64_t{0};
    uint32_t out_[4] = {};
};

// Uniform in [0, 1): 24 random bits (float's significand, the resolution PyTorch uses for float
// and narrower types), or 53 for double from two draws (2j, 2j + 1) where the others draw j.
// uniform() rounds toward its lower bound, so no value reaches 1 in a narrower type either
// (rand() returning 1.0 would make bernoulli(1) return 0 and exponential_ return inf).
inline double unit(uint32_t x) { return static_cast<double>(x >> 8) * 0x1p-24; }
// Unit number `j` of a call filling dtype `t`.
inline double unit_of(Draws& draws, uint64_t j, DType t) {
    if (t != DType::kFloat64) return unit(draws(j));
    const uint64_t hi = draws(2 * j);
    const uint64_t bits = (hi << 32 | draws(2 * j + 1)) >> 11;
    return static_cast<double>(bits) * 0x1p-53;
}

// The next 16-bit float (sign and magnitude bits, as bfloat16 and float16 are) below `bits`.
inline uint16_t below16(uint16_t bits) {
    const bool negative = bits & 0x8000;
    if ((bits & 0x7fff) == 0) return 0x8001;  // below zero: the smallest negative subnormal
    return negative ? static_cast<uint16_t>(bits + 1) : static_cast<uint16_t>(bits - 1);
}

// `v` (finite) rounded to `t`: to nearest, or with `down` to the largest value of `t` at most v.
double round_in(DType t, double v, bool down) {
    if (t == DType::kFloat64) return v;
    float f = static_cast<float>(v);
    if (down && static_cast<double>(f) > v) f = std::nextafter(f, -std::numeric_limits<float>::infinity());
    if (t == DType::kBFloat16) {
        BFloat16 h = to_bfloat16(f);
        if (down && to_float(h) > f) h.bits = below16(h.bits);
        return to_float(h);
    }
    if (t == DType::kFloat16) {
        Half h = to_half(f);
        if (down && to_float(h) > f) h.bits = below16(h.bits);
        return to_float(h);
    }
    return f;
}

// The memory offset of row-major element `i`.
int64_t offset_of(const TensorView& t, int64_t i) {
    int64_t off = 0;
    for (int d = t.ndim - 1; d >= 0; --d) {
        off += (i % t.sizes[d]) * t.strides[d];
        i /= t.sizes[d];
    }
    return off;
}

// value_of(i, draws) returns a double or an int64; it is converted to the element type with
// PyTorch's rules.
template <typename F>
Status fill_with(const TensorView& dst, const PhiloxState& rng, runtime::ThreadPool* pool, F&& value_of) {
    if (is_complex(dst.dtype)) return unimplemented("random numbers for complex tensors");
    const int64_t n = dst.numel();
    const bool dense = dst.is_contiguous();
    // Element e of the tensor is its row-major position, whatever the strides.
    EMBER_DISPATCH_REAL(dst.dtype, {
        auto body = [&](int64_t b, int64_t e) {
            Draws draws(rng);
            auto* out = static_cast<scalar_t*>(dst.data);
            if (dense) {
                for (int64_t i = b; i < e; ++i) out[i] = detail::convert<scalar_t>(value_of(i, draws));
                return;
            }
            for (int64_t i = b; i < e; ++i) out[offset_of(dst, i)] = detail::convert<scalar_t>(value_of(i, draws));
        };
        if (pool) pool->parallel_for(n, runtime::kParallelGrain / 8, body);
        else body(0, n);
    });
    return Status();
}

// The kBlock draws of block b.
EMBER_VMATH_INLINE void philox_block(const PhiloxState& rng, uint64_t b, uint32_t bits[kBlock]) {
    philox_lanes<kBlock / 4>(rng.offset / 4 + static_cast<uint64_t>(kBlock / 4) * b, rng.seed, bits);
}

// sin and cos of 2*pi*u for u in [0, 1): the quadrant from u itself (exact), then Cephes' sinf
// and cosf polynomials on |a| <= pi/4. Written without library calls so the loop vectorizes.
EMBER_VMATH_INLINE void sincos_turns(float u, float& s, float& c) {
    const float q = __builtin_rintf(4.0f * u);
    const float a = (u - 0.25f * q) * 6.28318530717958647692f;  // u - q/4 is exact
    const float z = a * a;
    const float sa = ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) * z * a + a;
    const float ca = ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) * z * z -
                     0.5f * z + 1.0f;
    const int quadrant = static_cast<int>(q) & 3;
    s = quadrant == 0 ? sa : quadrant == 1 ? ca : quadrant == 2 ? -sa : -ca;
    c = quadrant == 0 ? ca : quadrant == 1 ? -sa : quadrant == 2 ? -ca : sa;
}

// Normal values for block b's elements in float: Box-Muller on the block's draws, both of its
// outputs used (element j and j+8 share units j and j+8), as PyTorch's CPU kernel pairs them. A
// value depends only on its element's position, so strides and threads do not change it.
EMBER_SIMD_CLONES void normal_block(const PhiloxState& rng, uint64_t b, float mean, float std, float out[kBlock]) {
    uint32_t bits[kBlock];
    philox_block(rng, b, bits);
    for (int j = 0; j < kBlock / 2; ++j) {
        const float u1 = 1.0f - static_cast<float>(bits[j] >> 8) * 0x1p-24f;  // (0, 1]: the log stays finite
        const float u2 = static_cast<float>(bits[j + kBlock / 2] >> 8) * 0x1p-24f;
        const float r = __builtin_sqrtf(-2.0f * vmath::log(u1));
        float sn, cs;
        sincos_turns(u2, sn, cs);
        out[j] = r * cs * std + mean;
        out[j + kBlock / 2] = r * sn * std + mean;
    }
}

// Uniform float values for block b's elements, the same as the generic path computes (in
// double, each rounded toward `lo`), but a block at a time.
EMBER_SIMD_CLONES void uniform_block_f32(const PhiloxState& rng, uint64_t b, double lo, double hi, float out[kBlock]) {
    uint32_t bits[kBlock];
    philox_block(rng, b, bits);
    for (int j = 0; j < kBlock; ++j) {
        const double v = lo + (hi - lo) * (static_cast<double>(bits[j] >> 8) * 0x1p-24);
        const float f = static_cast<float>(v);
        const uint32_t fb = vmath::float_to_bits(f);
        const uint32_t below = (fb & 0x7fffffffu) == 0 ? 0x80000001u : (fb & 0x80000000u) ? fb + 1 : fb - 1;
        const float down = static_cast<double>(f) > v ? vmath::bits_to_float(below) : f;
        out[j] = v < hi ? down : static_cast<float>(lo);
    }
}

// Fills `dst` a block at a time; block(b, values) gives the values of block b's elements.
template <typename T, typename Block>
void fill_blocks(const TensorView& dst, runtime::ThreadPool* pool, Block&& block) {
    const int64_t n = dst.numel(), blocks = (n + kBlock - 1) / kBlock;
    const bool dense = dst.is_contiguous();
    auto* out = static_cast<T*>(dst.data);
    auto body = [&](int64_t b0, int64_t b1) {
        float v[kBlock];
        for (int64_t b = b0; b < b1; ++b) {
            block(static_cast<uint64_t>(b), v);
            const int64_t first = b * kBlock, count = std::min(kBlock, n - first);
            for (int64_t j = 0; j < count; ++j) {
                const int64_t i = first + j;
                out[dense ? i : offset_of(dst, i)] = detail::convert<T>(v[j]);
            }
        }
    };
    if (pool) pool->parallel_for(blocks, runtime::kParallelGrain / 64, body);
    else body(0, blocks);
}

}  // namespace

Status uniform(const TensorView& dst, double low, double high, PhiloxState rng, runtime::ThreadPool* pool) {
    const DType t = dst.dtype;
    // The bounds as the dtype holds them (the CPU casts them first), and each value rounded
    // toward `low`: rounded to nearest, a value just below `high` would become `high` wherever
    // the dtype's spacing there is coarser than the draws' (bfloat16 above 2, float above 2^24).
    const double lo = round_in(t, low, false), hi = round_in(t, high, false);
    if (t == DType::kFloat32) {
        fill_blocks<float>(dst, pool, [&](uint64_t b, float* v) { uniform_block_f32(rng, b, lo, hi, v); });
        return Status();
    }
    return fill_with(dst, rng, pool, [&](int64_t i, Draws& draws) {
        const double v = lo + (hi - lo) * unit_of(draws, static_cast<uint64_t>(i), t);
        return v < hi ? round_in(t, v, true) : lo;
    });
}

Status normal(const TensorView& dst, double mean, double std, PhiloxState rng, runtime::ThreadPool* pool) {
    const DType t = dst.dtype;
    // float and narrower: in float, as the CPU computes them, about 10x faster than in double.
    const auto block = [&, m = static_cast<float>(mean), sd = static_cast<float>(std)](uint64_t b, float* v) {
        normal_block(rng, b, m, sd, v);
    };
    if (t == DType::kFloat32) return fill_blocks<float>(dst, pool, block), Status();
    if (t == DType::kBFloat16) return fill_blocks<BFloat16>(dst, pool, block), Status();
    if (t == DType::kFloat16) return fill_blocks<Half>(dst, pool, block), Status();
    return fill_with(dst, rng, pool, [&](int64_t i, Draws& draws) {
        // Box-Muller on units (2i, 2i+1), 53-bit for double; u1 in (0, 1] keeps the log finite.
        double u1 = 1.0 - unit_of(draws, 2 * static_cast<uint64_t>(i), t);
        double u2 = unit_of(draws, 2 * static_cast<uint64_t>(i) + 1, t);
        return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    });
}

Status bernoulli(const TensorView& dst, double p, PhiloxState rng, runtime::ThreadPool* pool) {
    return fill_with(dst, rng, pool,
                     [&](int64_t i, Draws& draws) { return unit(draws(static_cast<uint64_t>(i))) < p ? 1.0 : 0.0; });
}

uint64_t integer_draws(int64_t numel, uint64_t range) {
    return range > (uint64_t{1} << 32) ? uniform_draws(2 * numel) : uniform_draws(numel);
}

Status random_integers(const TensorView& dst, int64_t from, uint64_t range, PhiloxState rng,
                       runtime::ThreadPool* pool) {
    if (range == 0) return invalid_argument("random_: empty range");
    const bool wide = range > (uint64_t{1} << 32);
    return fill_with(dst, rng, pool, [&](int64_t i, Draws& draws) {
        const uint64_t k = static_cast<uint64_t>(i);
        uint64_t r = k;
        if (wide) {
            const uint64_t hi = draws(2 * k);
            r = hi << 32 | draws(2 * k + 1);
        } else {
            r = draws(k);
        }
        return static_cast<int64_t>(static_cast<uint64_t>(from) + r % range);
    });
}

namespace {

// Each gamma element owns kGammaBlocks consecutive Philox counters (4 draws each). A sample that
// needs more (about one element in 10^6 at alpha near 1) goes on with the same counters under a
// new key per round, so the draws a call reserves never depend on the values.
constexpr uint64_t kGammaBlocks = 8;

class ElementDraws {
  public:
    ElementDraws(const PhiloxState& rng, uint64_t element) : rng_(rng), first_(rng.offset / 4 + element * kGammaBlocks) {}
    // Uniform in (0, 1] with 53 random bits: the log and the power below stay finite.
    double unit() {
        const uint64_t hi = next() >> 5, lo = next() >> 6;  // 27 + 26 bits
        return (static_cast<double>(hi * 67108864 + lo) + 1.0) * 0x1p-53;
    }
    double normal() {  // Box-Muller
        const double r = std::sqrt(-2.0 * std::log(unit()));
        return r * std::cos(6.283185307179586 * unit());
    }

  private:
    uint32_t next() {
        if (lane_ == 4) {
            const uint64_t round = block_ / kGammaBlocks;
            philox4x32(first_ + block_ % kGammaBlocks, rng_.seed + round * 0x9E3779B97F4A7C15ull, buf_);
            ++block_;
            lane_ = 0;
        }
        return buf_[lane_++];
    }
    const PhiloxState& rng_;
    uint64_t first_, block_ = 0;
    uint32_t buf_[4] = {};
    int lane_ = 4;
};

double sample_gamma(double alpha, ElementDraws& draws) {
    if (alpha == 0) return 0;
    if (!(alpha > 0)) return std::numeric_limits<double>::quiet_NaN();  // negative or NaN
    if (std::isinf(alpha)) return alpha;
    double scale = 1;
    if (alpha < 1) {  // Gamma(a) = Gamma(a + 1) * U^(1/a)
        scale = std::pow(draws.unit(), 1.0 / alpha);
        alpha += 1;
    }
    const double d = alpha - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
        const double x = draws.normal();
        double v = 1.0 + c * x;
        if (v <= 0) continue;
        v = v * v * v;
        const double u = draws.unit(), x2 = x * x;
        if (u < 1.0 - 0.0331 * x2 * x2 || std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) return scale * d * v;
    }
}

template <typename T>
Status fill_gamma(const TensorView& dst, const TensorView& alpha, PhiloxState rng, runtime::ThreadPool* pool) {
    const int64_t n = dst.numel();
    EMBER_DISPATCH_REAL(alpha.dtype, {
        auto body = [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) {
                ElementDraws draws(rng, static_cast<uint64_t>(i));
                const double a = detail::as_double(static_cast<const scalar_t*>(alpha.data)[offset_of(alpha, i)]);
                const T sample = static_cast<T>(sample_gamma(a, draws));
                // The CPU's floor, which also turns a NaN sample into the smallest normal number.
                static_cast<T*>(dst.data)[offset_of(dst, i)] = std::max(std::numeric_limits<T>::min(), sample);
            }
        };
        if (pool) pool->parallel_for(n, runtime::kParallelGrain / 64, body);
        else body(0, n);
    });
    return Status();
}

double sample_poisson(double rate, ElementDraws& draws) {
    if (std::isinf(rate)) return rate;  // (the CPU's kernel converts it to the smallest int64)
    if (rate >= 10) {  // transformed rejection with squeeze (Hormann 1993)
        const double slam = std::sqrt(rate), loglam = std::log(rate);
        const double b = 0.931 + 2.53 * slam, a = -0.059 + 0.02483 * b;
        const double inv_alpha = 1.1239 + 1.1328 / (b - 3.4), vr = 0.9277 - 3.6224 / (b - 2);
        for (;;) {
            const double u = draws.unit() - 0.5, v = draws.unit();
            const double us = 0.5 - std::fabs(u);
            const double k = std::floor((2 * a / us + b) * u + rate + 0.43);
            if (us >= 0.07 && v <= vr) return k;
            if (k < 0 || (us < 0.013 && v > us)) continue;
            if (std::log(v) + std::log(inv_alpha) - std::log(a / (us * us) + b) <= -rate + k * loglam - std::lgamma(k + 1))
                return k;
        }
    }
    if (rate == 0) return 0;
    const double limit = std::exp(-rate);  // count uniforms until their product falls below e^-rate
    double product = 1, k = 0;
    for (;;) {
        product *= draws.unit();
        if (product <= limit) return k;
        k += 1;
    }
}

template <typename T>
Status fill_poisson(const TensorView& dst, const TensorView& rate, PhiloxState rng, runtime::ThreadPool* pool) {
    const int64_t n = dst.numel();
    std::atomic<bool> bad{false};
    auto body = [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            const double r = static_cast<double>(static_cast<const T*>(rate.data)[offset_of(rate, i)]);
            if (!(r >= 0)) {
                bad = true;
                continue;
            }
            ElementDraws draws(rng, static_cast<uint64_t>(i));
            static_cast<T*>(dst.data)[offset_of(dst, i)] = static_cast<T>(sample_poisson(r, draws));
        }
    };
    if (pool) pool->parallel_for(n, runtime::kParallelGrain / 64, body);
    else body(0, n);
    if (bad) return invalid_argument("poisson: invalid Poisson rate, expected rate to be non-negative");
    return Status();
}

}  // namespace

uint64_t gamma_draws(int64_t numel) { return static_cast<uint64_t>(numel) * kGammaBlocks * 4; }

Status standard_gamma(const TensorView& dst, const TensorView& alpha, PhiloxState rng, runtime::ThreadPool* pool) {
    if (dst.numel() != alpha.numel() || dst.ndim != alpha.ndim) return invalid_argument("standard_gamma: alpha and the output differ in shape");
    if (is_complex(alpha.dtype)) return unimplemented("standard_gamma of a complex alpha");
    if (dst.dtype == DType::kFloat32) return fill_gamma<float>(dst, alpha, rng, pool);
    if (dst.dtype == DType::kFloat64) return fill_gamma<double>(dst, alpha, rng, pool);
    return unimplemented("standard_gamma: float32 and float64 outputs only");
}

Status poisson(const TensorView& dst, const TensorView& rate, PhiloxState rng, runtime::ThreadPool* pool) {
    if (dst.numel() != rate.numel() || dst.ndim != rate.ndim || dst.dtype != rate.dtype)
        return invalid_argument("poisson: rate and the output differ in shape or dtype");
    if (dst.dtype == DType::kFloat32) return fill_poisson<float>(dst, rate, rng, pool);
    if (dst.dtype == DType::kFloat64) return fill_poisson<double>(dst, rate, rng, pool);
    return unimplemented("poisson: float32 and float64 only");
}

Status randperm(const TensorView& dst, PhiloxState rng) {
    if (dst.dtype != DType::kInt64 || dst.ndim != 1) return invalid_argument("randperm: expected a 1-d int64 output");
    const int64_t n = dst.sizes[0], s = dst.strides[0];
    auto* out = static_cast<int64_t*>(dst.data);
    for (int64_t i = 0; i < n; ++i) out[i * s] = i;
    Draws draws(rng);
    for (int64_t i = n - 1; i > 0; --i) {
        int64_t j = static_cast<int64_t>(draws(static_cast<uint64_t>(i)) % static_cast<uint64_t>(i + 1));
        std::swap(out[i * s], out[j * s]);
    }
    return Status();
}

}  // namespace ember::kernels
