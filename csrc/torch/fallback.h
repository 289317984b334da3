// The visible CPU fallback: an op without an Ember kernel runs on the CPU with its inputs
// copied to the host and its results copied back. Every such run is counted per op (calls,
// bytes each way, time); EMBER_FALLBACK=warn (default) warns once per op, =silent only counts,
// =error refuses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember::torch_glue {

enum class FallbackMode { kWarn, kSilent, kError };

struct FallbackRecord {
    std::string op;
    int64_t calls = 0;
    int64_t bytes_to_host = 0;
    int64_t bytes_to_device = 0;
    double seconds = 0;
};

FallbackMode fallback_mode();
void set_fallback_mode(FallbackMode mode);
std::vector<FallbackRecord> fallback_records();
void reset_fallback_records();

}  // namespace ember::torch_glue
