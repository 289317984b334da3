#include "base/env.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace ember::env {
namespace {

int read_int(const char* name, int fallback, int min_value) {
    auto v = get(name);
    if (!v) return fallback;
    char* end = nullptr;
    long parsed = std::strtol(v->c_str(), &end, 10);
    if (end == v->c_str() || *end != '\0' || parsed < min_value) {
        // Said once per knob (values are cached): a typo must not pass for the default silently.
        std::fprintf(stderr, "ember: %s=%s is not an integer >= %d; using the default %d instead\n", name,
                     v->c_str(), min_value, fallback);
        return fallback;
    }
    return static_cast<int>(parsed);
}

uint64_t physical_ram() {
    long pages = sysconf(_SC_PHYS_PAGES);
    long page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return 8ull << 30;
    return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

std::atomic<int>& sync_flag() {
    static std::atomic<int> flag{read_int("EMBER_SYNC", 0, 0) != 0 ? 1 : 0};
    return flag;
}

}  // namespace

std::optional<std::string> get(const char* name) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
}

int device_count() {
    static const int n = read_int("EMBER_DEVICE_COUNT", 2, 1);
    return n;
}

int num_threads() {
    static const int n = [] {
        int hw = static_cast<int>(std::thread::hardware_concurrency());
        return read_int("EMBER_NUM_THREADS", hw > 0 ? hw : 1, 1);
    }();
    return n;
}

uint64_t device_memory_bytes() {
    static const uint64_t n = [] {
        if (auto v = get("EMBER_DEVICE_MEMORY")) {
            auto parsed = parse_bytes(*v);
            if (parsed.ok() && *parsed > 0) return *parsed;
            std::fprintf(stderr, "ember: EMBER_DEVICE_MEMORY=%s is not a positive size (such as 8GiB or 512MB); "
                         "each device gets half the machine's memory instead\n", v->c_str());
        }
        return physical_ram() / 2;
    }();
    return n;
}

bool sync_mode() { return sync_flag().load(std::memory_order_relaxed) != 0; }
void set_sync_mode(bool on) { sync_flag().store(on ? 1 : 0, std::memory_order_relaxed); }

StatusOr<uint64_t> parse_bytes(const std::string& text) {
    size_t i = 0;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t digits_begin = i;
    double number = 0;
    bool seen_digit = false;
    double frac_scale = 0;
    for (; i < text.size(); ++i) {
        char c = text[i];
        if (std::isdigit(static_cast<unsigned char>(c))) {
            seen_digit = true;
            if (frac_scale > 0) {
                number += (c - '0') * frac_scale;
                frac_scale /= 10;
            } else {
                number = number * 10 + (c - '0');
            }
        } else if (c == '.' && frac_scale == 0) {
            frac_scale = 0.1;
        } else {
            break;
        }
    }
    if (!seen_digit || i == digits_begin) {
        return invalid_argument("cannot parse byte size '" + text + "' (expected e.g. 8GiB)");
    }
    std::string unit;
    for (; i < text.size(); ++i) {
        if (!std::isspace(static_cast<unsigned char>(text[i])))
            unit += static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
    }
    double scale = 1;
    if (unit.empty() || unit == "B") scale = 1;
    else if (unit == "K" || unit == "KB" || unit == "KIB") scale = 1024.0;
    else if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1024.0 * 1024;
    else if (unit == "G" || unit == "GB" || unit == "GIB") scale = 1024.0 * 1024 * 1024;
    else if (unit == "T" || unit == "TB" || unit == "TIB") scale = 1024.0 * 1024 * 1024 * 1024;
    else return invalid_argument("unknown size unit '" + unit + "' in '" + text + "'");
    return static_cast<uint64_t>(number * scale);
}

}  // namespace ember::env
