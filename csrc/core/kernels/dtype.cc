#include "kernels/dtype.h"

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

}  // namespace ember::kernels
