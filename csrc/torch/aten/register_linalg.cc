// Cholesky and LU factorizations and their solves on core's LAPACK driver
// (kernels/linalg/lapack.h): queued on the current stream like any kernel (the host goes on),
// batches split over the device's pool. Results have the CPU's layouts (batches of column-major
// matrices, which backward formulas rely on), shapes and dtypes, and info tensors the callers
// check as on the CPU (torch.linalg.cholesky reads it; cholesky_ex leaves it to the user).
//
// Only well-formed float32/float64 calls take this path. Complex inputs, out= forms and any call
// the CPU would refuse go to the library route (register_library.cc: the CPU's own kernel on
// device memory), so the CPU's support and error messages hold exactly.
#include <ATen/ExpandUtils.h>
#include <ATen/native/LinearAlgebraUtils.h>
#include <torch/library.h>

#include "kernels/linalg/lapack.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

template <class Op, class... Args>
decltype(auto) library(Args&&... args) {
    return at::native::call_fallback_fn<&ember_library_call, Op>::call(std::forward<Args>(args)...);
}

bool lapack_dtype(const at::Tensor& t) { return t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble; }

bool square_matrices(const at::Tensor& t) { return t.dim() >= 2 && t.size(-1) == t.size(-2); }

// A new batch of column-major matrices holding `src` broadcast to `sizes`.
at::Tensor column_major_copy(const at::Tensor& src, c10::IntArrayRef sizes) {
    at::Tensor out = at::empty_strided(sizes, at::native::batched_matrix_contiguous_strides(sizes, true), src.options());
    if (out.numel() > 0) out.copy_(src.expand(sizes));
    return out;
}

// `src` itself when it is already a batch of column-major matrices (inputs kernels only read),
// else such a copy.
at::Tensor column_major(const at::Tensor& src) {
    if (src.strides() == c10::IntArrayRef(at::native::batched_matrix_contiguous_strides(src.sizes(), true))) return src;
    return column_major_copy(src, src.sizes());
}

// `t`, a batch of column-major matrices with contiguous batch dims, as (batch, rows, cols).
kernels::TensorView matrices(const at::Tensor& t, bool writable) {
    const int64_t rows = t.size(-2), cols = t.size(-1);
    const int64_t batch = c10::multiply_integers(t.sizes().slice(0, t.dim() - 2));
    at::Tensor v = t.as_strided({batch, rows, cols}, {rows * cols, 1, std::max<int64_t>(rows, 1)});
    return writable ? view_of(v) : view_in(v);
}

// A contiguous int32 tensor as (batch,) (per_matrix: info) or (batch, entries) (pivots).
kernels::TensorView int_rows(const at::Tensor& t, bool per_matrix) {
    TORCH_INTERNAL_ASSERT(t.is_contiguous());
    return view_of(per_matrix ? t.view({-1}) : t.view({-1, t.size(-1)}));
}

std::tuple<at::Tensor, at::Tensor> cholesky_ex(const at::Tensor& self, bool upper, bool check_errors) {
    if (!lapack_dtype(self) || !square_matrices(self)) {
        return library<ATEN_OP(linalg_cholesky_ex)>(self, upper, check_errors);
    }
    at::Tensor factor = column_major_copy(self, self.sizes());
    at::Tensor info = at::empty(self.sizes().slice(0, self.dim() - 2), self.options().dtype(at::kInt));
    if (info.numel() > 0) {
        kernels::TensorView a = matrices(factor, true), status = int_rows(info, true);
        queue(self, "linalg_cholesky_ex", [a, status, upper](runtime::ThreadPool* pool) {
            return kernels::cholesky(a, status, upper, pool);
        });
    }
    if (check_errors) at::_linalg_check_errors(info, "linalg.cholesky_ex", self.dim() == 2);
    return {factor, info};
}

// cholesky_solve's kernel: `self` (the right-hand sides) and `A` (the factors) arrive with their
// batch dims already broadcast to one another.
at::Tensor cholesky_solve_helper_fn(const at::Tensor& self, const at::Tensor& A, bool upper) {
    if (!lapack_dtype(self) || self.scalar_type() != A.scalar_type() || !square_matrices(A) || self.dim() != A.dim() ||
        self.size(-2) != A.size(-1) || self.sizes().slice(0, self.dim() - 2) != A.sizes().slice(0, A.dim() - 2)) {
        return library<ATEN_OP(_cholesky_solve_helper)>(self, A, upper);
    }
    at::Tensor x = column_major_copy(self, self.sizes());
    if (x.numel() > 0) {
        at::Tensor factor = column_major(A);
        kernels::TensorView b = matrices(x, true), f = matrices(factor, false);
        // `factor` may be freed when this returns: its memory is not reused before the kernel runs
        // (allocation is stream-ordered).
        queue(self, "cholesky_solve", [b, f, upper](runtime::ThreadPool* pool) {
            return kernels::cholesky_solve(b, f, upper, pool);
        });
    }
    return x;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lu_factor_ex(const at::Tensor& A, bool pivot, bool check_errors) {
    if (!lapack_dtype(A) || A.dim() < 2 || !pivot) {  // the CPU refuses LU without pivoting
        return library<ATEN_OP(linalg_lu_factor_ex)>(A, pivot, check_errors);
    }
    const auto batch = A.sizes().slice(0, A.dim() - 2);
    at::Tensor lu = column_major_copy(A, A.sizes());
    std::vector<int64_t> pivot_sizes(batch.begin(), batch.end());
    pivot_sizes.push_back(std::min(A.size(-2), A.size(-1)));
    at::Tensor pivots = at::empty(pivot_sizes, A.options().dtype(at::kInt));
    at::Tensor info = at::empty(batch, A.options().dtype(at::kInt));
    if (info.numel() > 0 && A.numel() == 0) {
        info.zero_();  // empty matrices factor trivially (and have no pivots to view per matrix)
    } else if (info.numel() > 0) {
        kernels::TensorView a = matrices(lu, true), p = int_rows(pivots, false), status = int_rows(info, true);
        queue(A, "linalg_lu_factor_ex", [a, p, status](runtime::ThreadPool* pool) {
            return kernels::lu_factor(a, p, status, pool);
        });
    }
    if (check_errors) at::_linalg_check_errors(info, "torch.linalg.lu_factor_ex", A.dim() == 2);
    return {lu, pivots, info};
}

at::Tensor lu_solve(const at::Tensor& LU, const at::Tensor& pivots, const at::Tensor& B, bool left, bool adjoint) {
    const bool native = lapack_dtype(LU) && LU.scalar_type() == B.scalar_type() && square_matrices(LU) && B.dim() >= 2 &&
                        pivots.scalar_type() == at::kInt && pivots.dim() == LU.dim() - 1 &&
                        pivots.size(-1) == LU.size(-1) &&
                        pivots.sizes().slice(0, pivots.dim() - 1) == LU.sizes().slice(0, LU.dim() - 2) &&
                        (left ? B.size(-2) : B.size(-1)) == LU.size(-1);
    if (!native) return library<ATEN_OP(linalg_lu_solve)>(LU, pivots, B, left, adjoint);
    // X A = B is A^T X^T = B^T: a left solve with the transposed system, then transposed back
    // (which gives the CPU's row-major result for right solves).
    if (!left) return lu_solve(LU, pivots, B.mT(), true, !adjoint).mT();
    const int64_t n = LU.size(-1);
    auto batch = at::infer_size(LU.sizes().slice(0, LU.dim() - 2), B.sizes().slice(0, B.dim() - 2));
    std::vector<int64_t> x_sizes(batch.begin(), batch.end());
    x_sizes.push_back(n);
    x_sizes.push_back(B.size(-1));
    at::Tensor x = column_major_copy(B, x_sizes);
    if (x.numel() == 0) return x;
    // Factors shared by the whole batch stay one matrix; others are broadcast to it.
    const bool shared = c10::multiply_integers(LU.sizes().slice(0, LU.dim() - 2)) == 1;
    std::vector<int64_t> lu_sizes = shared ? std::vector<int64_t>{1, n, n} : x_sizes;
    if (!shared) lu_sizes[lu_sizes.size() - 1] = n;
    at::Tensor lu = shared ? LU.reshape({1, n, n}) : LU;
    at::Tensor factors = lu.sizes() == c10::IntArrayRef(lu_sizes) ? column_major(lu) : column_major_copy(lu, lu_sizes);
    std::vector<int64_t> p_sizes(lu_sizes.begin(), lu_sizes.end() - 1);
    at::Tensor piv = (shared ? pivots.reshape({1, n}) : pivots).expand(p_sizes).contiguous();
    kernels::TensorView b = matrices(x, true), f = matrices(factors, false), p = int_rows(piv, false);
    queue(B, "linalg_lu_solve", [b, f, p, adjoint](runtime::ThreadPool* pool) {
        return kernels::lu_solve(b, f, p, adjoint, pool);
    });
    return x;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("linalg_cholesky_ex", cholesky_ex);
    m.impl("_cholesky_solve_helper", cholesky_solve_helper_fn);
    m.impl("linalg_lu_factor_ex", lu_factor_ex);
    m.impl("linalg_lu_solve", lu_solve);
}

}  // namespace ember::torch_glue
