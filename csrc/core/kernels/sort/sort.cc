#include "kernels/sort/sort.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/dispatch.h"

namespace ember::kernels {
namespace {

// Each element becomes an unsigned key whose integer order is PyTorch's order for the type, so
// the sorts compare plain integers: no NaN branches, and 32-bit keys pack with their index into
// one uint64 whose order is (key, index) — stability for free.
uint32_t float_key(float f) {
    if (std::isnan(f)) return 0xffffffffu;  // above +inf's key
    if (f == 0) f = 0;                      // -0.0 equals 0.0
    uint32_t u = float_to_bits(f);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

uint64_t double_key(double d) {
    if (std::isnan(d)) return ~uint64_t{0};
    if (d == 0) d = 0;
    uint64_t u;
    std::memcpy(&u, &d, 8);
    return (u >> 63) ? ~u : u | (uint64_t{1} << 63);
}

uint32_t order_key(uint8_t v) { return v; }
uint32_t order_key(int8_t v) { return static_cast<uint32_t>(static_cast<int32_t>(v)) ^ 0x80000000u; }
uint32_t order_key(int16_t v) { return static_cast<uint32_t>(static_cast<int32_t>(v)) ^ 0x80000000u; }
uint32_t order_key(int32_t v) { return static_cast<uint32_t>(v) ^ 0x80000000u; }
uint64_t order_key(int64_t v) { return static_cast<uint64_t>(v) ^ (uint64_t{1} << 63); }
uint32_t order_key(float v) { return float_key(v); }
uint32_t order_key(Half v) { return float_key(to_float(v)); }
uint32_t order_key(BFloat16 v) { return float_key(to_float(v)); }
uint64_t order_key(double v) { return double_key(v); }

// A key with its index when the pair does not fit one uint64 (64-bit keys, or slices longer than
// 2^32). Ordered by key, then index.
struct Wide {
    uint64_t key;
    int64_t index;
    bool operator<(const Wide& o) const { return key != o.key ? key < o.key : index < o.index; }
};

template <typename Entry>
Entry make_entry(uint64_t key, int64_t i) {
    if constexpr (std::is_same_v<Entry, Wide>) return Wide{key, i};
    else return (key << 32) | static_cast<uint64_t>(i);
}
int64_t entry_index(uint64_t e) { return static_cast<int64_t>(e & 0xffffffffu); }
int64_t entry_index(const Wide& e) { return e.index; }

char* at3(const TensorView& v, int64_t a, int64_t b, int64_t c) {
    return static_cast<char*>(v.data) +
           (a * v.strides[0] + b * v.strides[1] + c * v.strides[2]) * element_size(v.dtype);
}

// For each slice [o, :, k] of in: keys (flipped, so that ascending integer order is descending
// value order, when `reverse`), order the entries with `arrange`, and write the first `count`.
template <typename T, typename Entry, typename Arrange>
void run_slices(const TensorView& values, const TensorView& indices, const TensorView& in,
                bool reverse, int64_t count, Arrange arrange, runtime::ThreadPool* pool) {
    using Key = decltype(order_key(T{}));
    constexpr uint64_t kFlip = std::is_same_v<Key, uint32_t> ? 0xffffffffu : ~uint64_t{0};
    const uint64_t flip = reverse ? kFlip : 0;
    const int64_t outer = in.sizes[0], n = in.sizes[1], inner = in.sizes[2];
    auto body = [&](int64_t b, int64_t e) {
        std::vector<T> raw(n);  // the slice as read, so values may alias in
        std::vector<Entry> entries(n);
        for (int64_t t = b; t < e; ++t) {
            const int64_t o = t / inner, k = t % inner;
            const T* src = reinterpret_cast<const T*>(at3(in, o, 0, k));
            for (int64_t i = 0; i < n; ++i) {
                raw[i] = src[i * in.strides[1]];
                entries[i] = make_entry<Entry>(static_cast<uint64_t>(order_key(raw[i])) ^ flip, i);
            }
            arrange(entries);
            T* vout = reinterpret_cast<T*>(at3(values, o, 0, k));
            int64_t* iout = reinterpret_cast<int64_t*>(at3(indices, o, 0, k));
            for (int64_t r = 0; r < count; ++r) {
                const int64_t i = entry_index(entries[r]);
                vout[r * values.strides[1]] = raw[i];
                iout[r * indices.strides[1]] = i;
            }
        }
    };
    // A slice costs about n log n comparisons: count a few "simple elements" per element.
    const int64_t grain = std::max<int64_t>(1, runtime::kParallelGrain / (16 * std::max<int64_t>(1, n)));
    if (pool) pool->parallel_for(outer * inner, grain, body);
    else body(0, outer * inner);
}

template <typename T, typename Arrange>
void run_typed(const TensorView& values, const TensorView& indices, const TensorView& in, bool reverse,
               int64_t count, Arrange arrange, runtime::ThreadPool* pool) {
    // bool is handled as its byte (same order), which keeps std::vector<bool> out of the buffers.
    using S = std::conditional_t<std::is_same_v<T, Bool>, uint8_t, T>;
    if constexpr (std::is_same_v<decltype(order_key(S{})), uint32_t>) {
        if (in.sizes[1] <= int64_t{0xffffffff}) {
            run_slices<S, uint64_t>(values, indices, in, reverse, count, arrange, pool);
            return;
        }
    }
    run_slices<S, Wide>(values, indices, in, reverse, count, arrange, pool);
}

Status check_views(const char* op, const TensorView& values, const TensorView& indices,
                   const TensorView& in, int64_t out_n) {
    const std::string name(op);
    if (values.ndim != 3 || indices.ndim != 3 || in.ndim != 3) {
        return invalid_argument(name + ": values, indices and input must be viewed as 3-d");
    }
    if (is_complex(in.dtype)) return unimplemented(name + ": complex input");
    if (values.dtype != in.dtype) return invalid_argument(name + ": values and input dtypes differ");
    if (indices.dtype != DType::kInt64) return invalid_argument(name + ": indices must be int64");
    const int64_t want[3] = {in.sizes[0], out_n, in.sizes[2]};
    for (int d = 0; d < 3; ++d) {
        if (values.sizes[d] != want[d] || indices.sizes[d] != want[d]) {
            return invalid_argument(name + ": output shape does not match the input");
        }
    }
    return Status();
}

}  // namespace

Status sort(const TensorView& values_out, const TensorView& indices_out, const TensorView& in,
            bool descending, bool stable, runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check_views("sort", values_out, indices_out, in, in.sizes[1]));
    if (in.numel() == 0) return Status();
    const int64_t n = in.sizes[1];
    auto arrange = [](auto& entries) { std::sort(entries.begin(), entries.end()); };
    EMBER_DISPATCH_REAL(in.dtype, run_typed<scalar_t>(values_out, indices_out, in, descending, n, arrange, pool));
    return Status();
}

Status topk(const TensorView& values_out, const TensorView& indices_out, const TensorView& in,
            int64_t k, bool largest, bool sorted, runtime::ThreadPool* pool) {
    if (in.ndim != 3) return invalid_argument("topk: input must be viewed as 3-d");
    if (k < 0 || k > in.sizes[1]) return invalid_argument("selected index k out of range");
    EMBER_RETURN_IF_ERROR(check_views("topk", values_out, indices_out, in, k));
    if (values_out.numel() == 0) return Status();
    // Selection is linear; only the k winners are then ordered.
    auto arrange = [k, sorted](auto& entries) {
        auto mid = entries.begin() + k;
        if (mid != entries.end()) std::nth_element(entries.begin(), mid, entries.end());
        if (sorted) std::sort(entries.begin(), mid);
    };
    EMBER_DISPATCH_REAL(in.dtype, run_typed<scalar_t>(values_out, indices_out, in, largest, k, arrange, pool));
    return Status();
}

}  // namespace ember::kernels
