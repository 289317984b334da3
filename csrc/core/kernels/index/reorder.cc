#include "kernels/index/reorder.h"

#include <string>

#include "kernels/copy.h"

namespace ember::kernels {
namespace {

Status check_same(const char* op, const TensorView& out, const TensorView& in) {
    if (out.ndim != in.ndim || out.dtype != in.dtype) {
        return invalid_argument(std::string(op) + ": out and input need the same rank and dtype");
    }
    for (int d = 0; d < in.ndim; ++d) {
        if (out.sizes[d] != in.sizes[d]) return invalid_argument(std::string(op) + ": out and input shapes differ");
    }
    return Status();
}

// Elements [begin, begin + count) of v along dim.
TensorView narrow(const TensorView& v, int dim, int64_t begin, int64_t count) {
    TensorView r = v;
    r.data = static_cast<char*>(v.data) + begin * v.strides[dim] * element_size(v.dtype);
    r.sizes[dim] = count;
    return r;
}

}  // namespace

Status flip(const TensorView& out, const TensorView& in, uint64_t dims_mask, runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check_same("flip", out, in));
    if (in.ndim < 64 && (dims_mask >> in.ndim) != 0) return invalid_argument("flip: dim out of range");
    if (in.numel() == 0) return Status();
    // A reversed dim is the same memory walked from its last element with a negated stride.
    TensorView reversed = in;
    for (int d = 0; d < in.ndim; ++d) {
        if (!((dims_mask >> d) & 1)) continue;
        reversed.data = static_cast<char*>(reversed.data) + (in.sizes[d] - 1) * in.strides[d] * element_size(in.dtype);
        reversed.strides[d] = -in.strides[d];
    }
    return copy(out, reversed, pool);
}

Status roll(const TensorView& out, const TensorView& in, int dim, int64_t shift, runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check_same("roll", out, in));
    if (dim < 0 || dim >= in.ndim) return invalid_argument("roll: dim out of range");
    const int64_t n = in.sizes[dim];
    if (in.numel() == 0) return Status();
    const int64_t s = ((shift % n) + n) % n;
    // Two block copies: in[0, n - s) lands at out[s, n), in[n - s, n) at out[0, s).
    EMBER_RETURN_IF_ERROR(copy(narrow(out, dim, s, n - s), narrow(in, dim, 0, n - s), pool));
    return copy(narrow(out, dim, 0, s), narrow(in, dim, n - s, s), pool);
}

}  // namespace ember::kernels
