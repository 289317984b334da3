#include "kernels/copy.h"

#include <cstring>
#include <string>

#include "kernels/dispatch.h"
#include "kernels/strided_loop.h"

namespace ember::kernels {

bool copy_supports(DType dst, DType src) {
    if (is_complex(dst) || is_complex(src)) return dst == src;
    return true;
}

namespace {

template <typename D, typename S>
void convert_row(char* d, char* s, int64_t n, int64_t ds, int64_t ss) {
    for (int64_t i = 0; i < n; ++i) {
        *reinterpret_cast<D*>(d + i * ds) = detail::convert<D>(*reinterpret_cast<const S*>(s + i * ss));
    }
}

void byte_row(char* d, char* s, int64_t n, int64_t ds, int64_t ss, int64_t esize) {
    if (ds == esize && ss == esize) {
        std::memcpy(d, s, static_cast<size_t>(n * esize));
        return;
    }
    switch (esize) {
        case 1: for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss]; break;
        case 2: for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * ds, s + i * ss, 2); break;
        case 4: for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * ds, s + i * ss, 4); break;
        case 8: for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * ds, s + i * ss, 8); break;
        default:
            for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * ds, s + i * ss, esize);
    }
}

}  // namespace

Status copy(const TensorView& dst, const TensorView& src, runtime::ThreadPool* pool) {
    if (dst.ndim != src.ndim) return invalid_argument("copy: rank mismatch");
    for (int i = 0; i < dst.ndim; ++i) {
        if (dst.sizes[i] != src.sizes[i]) return invalid_argument("copy: shape mismatch");
    }
    if (!copy_supports(dst.dtype, src.dtype)) {
        return unimplemented(std::string("copy from ") + dtype_name(src.dtype) + " to " +
                             dtype_name(dst.dtype));
    }
    if (dst.numel() == 0) return Status();
    const TensorView* ops[2] = {&dst, &src};
    detail::Loop loop = detail::make_loop(ops, 2);
    char* d = static_cast<char*>(dst.data);
    char* s = static_cast<char*>(src.data);
    if (dst.dtype == src.dtype) {
        int64_t esize = element_size(dst.dtype);
        detail::for_each_row(loop, d, s, pool, [esize](char* a, char* b, int64_t n, int64_t as, int64_t bs) {
            byte_row(a, b, n, as, bs, esize);
        });
        return Status();
    }
    EMBER_DISPATCH_REAL_AND_FLOAT8(dst.dtype, using D = scalar_t; EMBER_DISPATCH_REAL_AND_FLOAT8(src.dtype, {
        detail::for_each_row(loop, d, s, pool, [](char* a, char* b, int64_t n, int64_t as, int64_t bs) {
            convert_row<D, scalar_t>(a, b, n, as, bs);
        });
    }));
    return Status();
}

}  // namespace ember::kernels
