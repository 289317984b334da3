// Element types the device understands, independent of PyTorch's ScalarType (the torch glue
// maps between them), and the conversions kernels use, with PyTorch's rounding rules:
// float -> bfloat16/float16 round to nearest even, float -> int truncates, x -> bool is x != 0.
#pragma once

#include <cmath>
#include <cstdint>

#include "torch_ember/vec_math.h"  // bits_to_float, float_to_bits

namespace ember::kernels {

enum class DType : int8_t {
    kBool,
    kUInt8,
    kInt8,
    kInt16,
    kInt32,
    kInt64,
    kFloat16,
    kBFloat16,
    kFloat32,
    kFloat64,
    kComplex64,
    kComplex128,
    kFloat8E4M3FN,  // float8_e4m3fn: no infinities, one NaN pattern per sign, max 448
    kFloat8E5M2,    // float8_e5m2: IEEE-style, a float16 with 8 fewer mantissa bits
};

inline int element_size(DType t) {
    switch (t) {
        case DType::kBool: case DType::kUInt8: case DType::kInt8: return 1;
        case DType::kFloat8E4M3FN: case DType::kFloat8E5M2: return 1;
        case DType::kInt16: case DType::kFloat16: case DType::kBFloat16: return 2;
        case DType::kInt32: case DType::kFloat32: return 4;
        case DType::kInt64: case DType::kFloat64: case DType::kComplex64: return 8;
        case DType::kComplex128: return 16;
    }
    return 0;
}

inline bool is_complex(DType t) { return t == DType::kComplex64 || t == DType::kComplex128; }
// Float8 tensors are storage and conversion only: copies convert them, no kernel computes on them.
inline bool is_float8(DType t) { return t == DType::kFloat8E4M3FN || t == DType::kFloat8E5M2; }
const char* dtype_name(DType t);

// A bool as tensor memory holds it: one byte, true when it is not zero. A uint8 tensor viewed
// as bool may hold any byte, and PyTorch reads every non-zero byte as true; reading such a byte
// as a C++ bool would be undefined (and in practice keeps the raw value, so 2 + 1 == 3).
struct Bool {
    uint8_t bits;
    Bool() = default;
    constexpr Bool(bool b) : bits(b ? 1 : 0) {}
    constexpr operator bool() const { return bits != 0; }
};
static_assert(sizeof(Bool) == 1);

struct Half {
    uint16_t bits;
};
struct BFloat16 {
    uint16_t bits;
};

using vmath::bits_to_float;
using vmath::float_to_bits;

inline float to_float(BFloat16 v) { return bits_to_float(static_cast<uint32_t>(v.bits) << 16); }
inline BFloat16 to_bfloat16(float f) {
    uint32_t u = float_to_bits(f);
    if (std::isnan(f)) return BFloat16{0x7fc0};
    u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
    return BFloat16{static_cast<uint16_t>(u >> 16)};
}

float to_float(Half v);
Half to_half(float f);

struct Float8E4M3FN {
    uint8_t bits;
};
struct Float8E5M2 {
    uint8_t bits;
};

// Exact widening, and narrowing rounded to nearest even as PyTorch's CPU does: float8_e4m3fn
// saturates (448 and up, infinities too, give the largest value, NaN stays NaN); float8_e5m2
// rounds past its largest value to infinity.
float to_float(Float8E4M3FN v);
float to_float(Float8E5M2 v);
Float8E4M3FN to_float8_e4m3fn(float f);
Float8E5M2 to_float8_e5m2(float f);

}  // namespace ember::kernels
