// EMBER_* environment knobs, read in one place so that each has one name, one parser and one
// documented default. Values are read once, on first use, and cached for the process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace ember::env {

// EMBER_DEVICE_COUNT: number of virtual devices (default 2).
int device_count();
// EMBER_NUM_THREADS: compute threads per device (default: all online cores).
int num_threads();
// EMBER_DEVICE_MEMORY: capacity of each device, e.g. "8GiB", "512MiB", "1000000"
// (default: half of physical RAM).
uint64_t device_memory_bytes();
// EMBER_SYNC=1: every enqueue runs synchronously on the calling thread (like CUDA_LAUNCH_BLOCKING).
bool sync_mode();
// Overrides sync_mode() at run time (tests and debugging tools).
void set_sync_mode(bool on);

// Parses a byte size with an optional K/M/G/T suffix (KiB/MiB/GiB/TiB and KB/MB/GB/TB accepted;
// all are binary). Exposed for tests.
StatusOr<uint64_t> parse_bytes(const std::string& text);

// Raw lookup for knobs owned by other layers (EMBER_FALLBACK lives in the torch glue).
std::optional<std::string> get(const char* name);

}  // namespace ember::env
