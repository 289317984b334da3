// Library ops: dense linear algebra and FFTs run by the host's numerical libraries (LAPACK and
// the FFT library inside libtorch, MKL here) directly on device memory, as kernels::gemm runs
// MKL and oneDNN. The host executor's device memory is host memory, so the CPU kernel reads the
// inputs in place once the stream has caught up; its results land in device tensors with the
// strides the CPU chose (linalg results are column-major, which backward formulas rely on).
// Numerics, dtype rules and errors are therefore exactly the CPU's, raised at the call.
//
// A real chip registers its own solver and FFT kernels for these names instead. The call waits
// for the stream (these routines are rare and mostly small in training code; a factorization
// whose result decides control flow, such as linalg_cholesky's info check, syncs anyway).
#include <torch/library.h>

#include "../fallback.h"

namespace ember::torch_glue {
namespace {

torch::CppFunction library() { return torch::CppFunction::makeFromBoxedFunction<&ember_library_call>(); }

}  // namespace

// Every overload (functional and out=) that has a CPU kernel in libtorch's LAPACK or FFT code,
// except the functional Cholesky and LU factorizations and solves, which have native kernels
// (register_linalg.cc) that hand the calls they do not serve to this route.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    // FFT
    m.impl("_fft_r2c", library());
    m.impl("_fft_r2c.out", library());
    m.impl("_fft_c2c", library());
    m.impl("_fft_c2c.out", library());
    m.impl("_fft_c2r", library());
    m.impl("_fft_c2r.out", library());
    // Cholesky
    m.impl("linalg_cholesky_ex.L", library());
    m.impl("cholesky", library());
    m.impl("cholesky.out", library());
    m.impl("cholesky_inverse", library());
    m.impl("cholesky_inverse.out", library());
    // LU
    m.impl("linalg_lu_factor_ex.out", library());
    m.impl("linalg_lu_solve.out", library());
    m.impl("lu_unpack", library());
    m.impl("lu_unpack.out", library());
    m.impl("linalg_lu", library());
    m.impl("linalg_lu.out", library());
    m.impl("linalg_inv_ex", library());
    m.impl("linalg_inv_ex.inverse", library());
    m.impl("_linalg_solve_ex", library());
    m.impl("_linalg_solve_ex.result", library());
    m.impl("_linalg_det", library());
    m.impl("_linalg_det.result", library());
    m.impl("_linalg_slogdet", library());
    m.impl("_linalg_slogdet.sign", library());
    m.impl("linalg_ldl_factor_ex", library());
    m.impl("linalg_ldl_factor_ex.out", library());
    m.impl("linalg_ldl_solve", library());
    m.impl("linalg_ldl_solve.out", library());
    // QR, least squares, Householder
    m.impl("linalg_qr", library());
    m.impl("linalg_qr.out", library());
    m.impl("geqrf", library());
    m.impl("geqrf.a", library());
    m.impl("ormqr", library());
    m.impl("ormqr.out", library());
    m.impl("linalg_householder_product", library());
    m.impl("linalg_householder_product.out", library());
    m.impl("linalg_lstsq", library());
    m.impl("linalg_lstsq.out", library());
    m.impl("triangular_solve", library());
    m.impl("triangular_solve.X", library());
    // eigen and singular value decompositions
    m.impl("_linalg_eigh", library());
    m.impl("_linalg_eigh.eigenvalues", library());
    m.impl("linalg_eig", library());
    m.impl("linalg_eig.out", library());
    m.impl("_linalg_eigvals", library());
    m.impl("_linalg_svd", library());
    m.impl("_linalg_svd.U", library());
}

}  // namespace ember::torch_glue
