#pragma once
// IEEE 754 binary16 ("half", numpy float16) <-> binary32/64 conversion. HDF5 1.10 has no native
// half type, so the dump reader reads half datasets as raw 16-bit patterns and converts them here;
// the writer rounds floats to half here (round to nearest, ties to even, like numpy).
// Header-only and HDF5-free so that tests can check it directly.
#include <bit>
#include <cstdint>

namespace attnlens::float16 {

// Exact: every half value is representable in double.
inline double toDouble(std::uint16_t h) {
    const std::uint64_t sign = std::uint64_t(h & 0x8000u) << 48;
    const std::uint32_t exponent = (h >> 10) & 0x1fu;
    const std::uint64_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) {  // inf (mantissa 0) or NaN (payload kept in the top mantissa bits)
        return std::bit_cast<double>(sign | 0x7ff0000000000000ull | (mantissa << 42));
    }
    if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
        const double magnitude = double(mantissa) * 0x1p-24;
        return sign ? -magnitude : magnitude;
    }
    const std::uint64_t doubleExponent = exponent - 15 + 1023;
    return std::bit_cast<double>(sign | (doubleExponent << 52) | (mantissa << 42));
}

// Round to nearest, ties to even; overflow goes to +-inf, NaN stays NaN (quiet).
inline std::uint16_t fromFloat(float value) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
    const std::uint16_t sign = std::uint16_t((bits >> 16) & 0x8000u);
    const std::uint32_t magnitude = bits & 0x7fffffffu;

    if (magnitude >= 0x7f800000u) {  // inf or NaN
        if (magnitude == 0x7f800000u) return sign | 0x7c00u;
        return std::uint16_t(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
    }
    // 65520 = (65504 + 65536) / 2 ties to the even neighbour, which is 2^16: inf.
    if (magnitude >= 0x477ff000u) return sign | 0x7c00u;

    if (magnitude >= 0x38800000u) {  // normal half range, >= 2^-14
        const std::uint32_t exponent = (magnitude >> 23) - 127 + 15;
        const std::uint32_t mantissa = magnitude & 0x7fffffu;
        std::uint32_t half = (exponent << 10) | (mantissa >> 13);
        const std::uint32_t rest = mantissa & 0x1fffu;
        // A carry out of the mantissa correctly moves to the next exponent.
        if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
        return std::uint16_t(sign | half);
    }
    // 2^-25 is the midpoint between 0 and the smallest subnormal 2^-24: ties to even gives 0.
    if (magnitude <= 0x33000000u) return sign;

    // Subnormal half: value = m * 2^(e-23) with m the 24-bit significand; in units of 2^-24 that
    // is m >> (-e - 1), with e in [-25, -15].
    const int exponent = int(magnitude >> 23) - 127;
    const std::uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    const int shift = -exponent - 1;
    std::uint32_t half = significand >> shift;
    const std::uint32_t rest = significand & ((1u << shift) - 1u);
    const std::uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u))) ++half;
    return std::uint16_t(sign | half);
}

}  // namespace attnlens::float16
