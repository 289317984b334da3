// Type dispatch for kernels: EMBER_DISPATCH_REAL(dtype, T, body) runs body with T bound to the
// C++ type of `dtype`. Internal to kernels/.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/dtype.h"

namespace ember::kernels::detail {

template <typename T>
inline double as_double(T v) {
    return static_cast<double>(v);
}
template <>
inline double as_double(Bool v) {
    return v.bits != 0 ? 1.0 : 0.0;
}
template <>
inline double as_double(Half v) {
    return to_float(v);
}
template <>
inline double as_double(BFloat16 v) {
    return to_float(v);
}

template <>
inline double as_double(Float8E4M3FN v) {
    return to_float(v);
}
template <>
inline double as_double(Float8E5M2 v) {
    return to_float(v);
}

template <typename T>
inline T from_double(double v) {
    return static_cast<T>(v);
}
template <>
inline Bool from_double(double v) {
    return Bool(v != 0);
}
template <>
inline Half from_double(double v) {
    return to_half(static_cast<float>(v));
}
template <>
inline BFloat16 from_double(double v) {
    return to_bfloat16(static_cast<float>(v));
}

template <>
inline Float8E4M3FN from_double(double v) {
    return to_float8_e4m3fn(static_cast<float>(v));
}
template <>
inline Float8E5M2 from_double(double v) {
    return to_float8_e5m2(static_cast<float>(v));
}

// PyTorch's conversion rules between real types.
template <typename D, typename S>
inline D convert(S s) {
    if constexpr (std::is_same_v<D, Bool>) {
        if constexpr (std::is_integral_v<S>) return Bool(s != 0);
        else return Bool(as_double(s) != 0);  // Bool -> Bool normalizes the byte too
    } else if constexpr (std::is_same_v<D, S>) {
        return s;
    } else if constexpr (std::is_same_v<S, Bool>) {
        if constexpr (std::is_arithmetic_v<D>) return static_cast<D>(s.bits != 0 ? 1 : 0);
        else return from_double<D>(s.bits != 0 ? 1.0 : 0.0);
    } else if constexpr (std::is_same_v<D, bool>) {
        if constexpr (std::is_integral_v<S>) return s != 0;
        else return as_double(s) != 0;
    } else if constexpr (std::is_integral_v<S> && std::is_integral_v<D>) {
        return static_cast<D>(s);
    } else {
        return from_double<D>(as_double(s));
    }
}

}  // namespace ember::kernels::detail

#define EMBER_TYPE_CASE(enum_value, type, ...) \
    case ::ember::kernels::DType::enum_value: { \
        using scalar_t = type;                  \
        __VA_ARGS__;                            \
        break;                                  \
    }

// Binds `scalar_t` to the element type; complex dtypes are not handled here.
#define EMBER_DISPATCH_REAL(dtype, ...)                                       \
    switch (dtype) {                                                          \
        EMBER_TYPE_CASE(kBool, ::ember::kernels::Bool, __VA_ARGS__)           \
        EMBER_TYPE_CASE(kUInt8, uint8_t, __VA_ARGS__)                         \
        EMBER_TYPE_CASE(kInt8, int8_t, __VA_ARGS__)                           \
        EMBER_TYPE_CASE(kInt16, int16_t, __VA_ARGS__)                         \
        EMBER_TYPE_CASE(kInt32, int32_t, __VA_ARGS__)                         \
        EMBER_TYPE_CASE(kInt64, int64_t, __VA_ARGS__)                         \
        EMBER_TYPE_CASE(kFloat16, ::ember::kernels::Half, __VA_ARGS__)        \
        EMBER_TYPE_CASE(kBFloat16, ::ember::kernels::BFloat16, __VA_ARGS__)   \
        EMBER_TYPE_CASE(kFloat32, float, __VA_ARGS__)                         \
        EMBER_TYPE_CASE(kFloat64, double, __VA_ARGS__)                        \
        default:                                                              \
            break;                                                            \
    }

// EMBER_DISPATCH_REAL plus the float8 types, for conversions only (copy): no kernel computes on
// float8, and leaving them out of EMBER_DISPATCH_REAL keeps every other kernel's instantiations.
#define EMBER_DISPATCH_REAL_AND_FLOAT8(dtype, ...)                                       \
    switch (dtype) {                                                                     \
        EMBER_TYPE_CASE(kFloat8E4M3FN, ::ember::kernels::Float8E4M3FN, __VA_ARGS__)      \
        EMBER_TYPE_CASE(kFloat8E5M2, ::ember::kernels::Float8E5M2, __VA_ARGS__)          \
        default:                                                                         \
            EMBER_DISPATCH_REAL(dtype, __VA_ARGS__)                                       \
    }
