#include "kernels/dtype.h"

#include <cmath>

namespace ember::kernels {

const char* dtype_name(DType t) {
    switch (t) {
        case DType::kBool: return "bool";
        case DType::kUInt8: return "uint8";
        case DType::kInt8: return "int8";
        case DType::kInt16: return "int16";
        case DType::kInt32: return "int32";
        case DType::kInt64: return "int64";
        case DType::kFloat16: return "float16";
        case DType::kBFloat16: return "bfloat16";
        case DType::kFloat32: return "float32";
        case DType::kFloat64: return "float64";
        case DType::kComplex64: return "complex64";
        case DType::kComplex128: return "complex128";
        case DType::kFloat8E4M3FN: return "float8_e4m3fn";
        case DType::kFloat8E5M2: return "float8_e5m2";
    }
    return "unknown";
}

float to_float(Half v) {
    uint32_t sign = static_cast<uint32_t>(v.bits & 0x8000) << 16;
    uint32_t exp = (v.bits >> 10) & 0x1f;
    uint32_t mant = v.bits & 0x3ff;
    if (exp == 0) {
        if (mant == 0) return bits_to_float(sign);
        // Subnormal half: value = mant * 2^-24.
        float f = std::ldexp(static_cast<float>(mant), -24);
        return sign ? -f : f;
    }
    if (exp == 31) return bits_to_float(sign | 0x7f800000 | (mant << 13));
    return bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
}

Half to_half(float f) {
    uint32_t u = float_to_bits(f);
    uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
    uint32_t abs = u & 0x7fffffff;
    if (abs >= 0x7f800000) {  // inf or nan
        return Half{static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0))};
    }
    if (abs >= 0x477ff000) return Half{static_cast<uint16_t>(sign | 0x7c00)};  // rounds to inf
    if (abs < 0x38800000) {
        // Result is subnormal (or zero): scale so the half's lsb is 2^-24, round to nearest even.
        float a = bits_to_float(abs);
        float scaled = a * 16777216.0f;  // 2^24, exact
        float r = std::nearbyint(scaled);
        return Half{static_cast<uint16_t>(sign | static_cast<uint16_t>(r))};
    }
    uint32_t mant_odd = (abs >> 13) & 1;
    abs += 0xfff + mant_odd;  // round to nearest even on bit 13
    uint32_t exp = (abs >> 23) - 112;
    uint32_t mant = (abs >> 13) & 0x3ff;
    return Half{static_cast<uint16_t>(sign | (exp << 10) | mant)};
}

namespace {

// Rounds |f| (bits `abs`, finite and below the format's overflow) to an 8-bit float with
// `mant_bits` mantissa bits, exponent bias `bias` and smallest normal exponent 1 - bias: below
// that the result is a multiple of the smallest subnormal, rounded to nearest even by scaling
// (exact) and nearbyint; above it the float's mantissa is rounded to nearest even on the bit
// that becomes the last one kept. Returns the magnitude bits; a rounding carry into the exponent
// is how the largest values reach the next binade (or the overflow pattern).
uint8_t narrow_magnitude(uint32_t abs, int mant_bits, int bias) {
    const int min_exp = 1 - bias;                                   // of the smallest normal
    const uint32_t min_normal = static_cast<uint32_t>(127 + min_exp) << 23;
    if (abs < min_normal) {
        const float scaled = std::ldexp(bits_to_float(abs), bias - 1 + mant_bits);  // units of the lsb
        return static_cast<uint8_t>(std::nearbyint(scaled));
    }
    const int drop = 23 - mant_bits;
    abs += ((1u << (drop - 1)) - 1) + ((abs >> drop) & 1);          // round to nearest even
    const uint32_t exp = (abs >> 23) - 127 + bias;
    const uint32_t mant = (abs >> drop) & ((1u << mant_bits) - 1);
    return static_cast<uint8_t>((exp << mant_bits) | mant);
}

}  // namespace

float to_float(Float8E4M3FN v) {
    const uint32_t sign = static_cast<uint32_t>(v.bits & 0x80) << 24;
    const uint32_t exp = (v.bits >> 3) & 0xf, mant = v.bits & 0x7;
    if (exp == 0xf && mant == 0x7) return bits_to_float(sign | 0x7ff00000);  // NaN, as the CPU spells it
    const float mag = exp == 0 ? std::ldexp(static_cast<float>(mant), -9)
                               : bits_to_float(((exp + 120) << 23) | (mant << 20));
    return sign ? -mag : mag;
}

float to_float(Float8E5M2 v) {
    const float f = to_float(Half{static_cast<uint16_t>(v.bits << 8)});
    return std::isnan(f) ? bits_to_float(float_to_bits(f) | 0x00400000) : f;  // quiet, as the CPU's
}

Float8E4M3FN to_float8_e4m3fn(float f) {
    const uint32_t u = float_to_bits(f);
    const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
    const uint32_t abs = u & 0x7fffffff;
    if (abs > 0x7f800000) return Float8E4M3FN{static_cast<uint8_t>(sign | 0x7f)};     // nan
    if (abs >= 0x43e00000) return Float8E4M3FN{static_cast<uint8_t>(sign | 0x7e)};    // >= 448, inf: saturates
    return Float8E4M3FN{static_cast<uint8_t>(sign | narrow_magnitude(abs, 3, 7))};
}

Float8E5M2 to_float8_e5m2(float f) {
    const uint32_t u = float_to_bits(f);
    const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
    const uint32_t abs = u & 0x7fffffff;
    if (abs > 0x7f800000) return Float8E5M2{static_cast<uint8_t>(sign | 0x7f)};       // nan
    if (abs >= 0x47800000) return Float8E5M2{static_cast<uint8_t>(sign | 0x7c)};      // >= 65536: inf
    return Float8E5M2{static_cast<uint8_t>(sign | narrow_magnitude(abs, 2, 15))};
}

}  // namespace ember::kernels
