#include "kernels/elementwise/special.h"

#include <algorithm>
#include <string>

#include "kernels/elementwise/block_io.h"
#include "kernels/special/special_math.h"

namespace ember::kernels {
namespace {

namespace sm = special_math;

double unary_value(SpecialOp op, double x, int64_t order) {
    switch (op) {
        case SpecialOp::kI0: return sm::i0(x);
        case SpecialOp::kI0e: return sm::i0e(x);
        case SpecialOp::kI1: return sm::i1(x);
        case SpecialOp::kI1e: return sm::i1e(x);
        case SpecialOp::kK0: return sm::k0(x);
        case SpecialOp::kK0e: return sm::k0e(x);
        case SpecialOp::kK1: return sm::k1(x);
        case SpecialOp::kK1e: return sm::k1e(x);
        case SpecialOp::kJ0: return sm::j0(x);
        case SpecialOp::kJ1: return sm::j1(x);
        case SpecialOp::kY0: return sm::y0(x);
        case SpecialOp::kY1: return sm::y1(x);
        case SpecialOp::kSphericalJ0: return sm::spherical_j0(x);
        case SpecialOp::kAiryAi: return sm::airy_ai(x);
        case SpecialOp::kErfcx: return sm::erfcx(x);
        case SpecialOp::kNdtri: return sm::ndtri(x);
        case SpecialOp::kPolygamma: return sm::polygamma(order, x);
        default: return 0;
    }
}

double binary_value(SpecialOp op, double a, double b) {
    switch (op) {
        case SpecialOp::kZeta: return sm::zeta(a, b);
        case SpecialOp::kIgamma: return sm::igamma(a, b);
        case SpecialOp::kIgammac: return sm::igammac(a, b);
        case SpecialOp::kChebyshevT: return sm::chebyshev_t(a, b);
        case SpecialOp::kChebyshevU: return sm::chebyshev_u(a, b);
        case SpecialOp::kChebyshevV: return sm::chebyshev_v(a, b);
        case SpecialOp::kChebyshevW: return sm::chebyshev_w(a, b);
        case SpecialOp::kShiftedChebyshevT: return sm::shifted_chebyshev_t(a, b);
        case SpecialOp::kShiftedChebyshevU: return sm::shifted_chebyshev_u(a, b);
        case SpecialOp::kShiftedChebyshevV: return sm::shifted_chebyshev_v(a, b);
        case SpecialOp::kShiftedChebyshevW: return sm::shifted_chebyshev_w(a, b);
        case SpecialOp::kHermiteH: return sm::hermite_h(a, b);
        case SpecialOp::kHermiteHe: return sm::hermite_he(a, b);
        case SpecialOp::kLaguerreL: return sm::laguerre_l(a, b);
        case SpecialOp::kLegendreP: return sm::legendre_p(a, b);
        case SpecialOp::kStandardGammaGrad: return sm::standard_gamma_grad(a, b);
        default: return 0;
    }
}

// A special function costs tens to hundreds of multiply-adds per element: the pool splits
// tensors this many times smaller than for a plain arithmetic op.
constexpr int64_t kWeight = 32;

}  // namespace

const char* op_name(SpecialOp op) {
    static const char* names[] = {
        "i0", "special_i0e", "special_i1", "special_i1e", "special_modified_bessel_k0",
        "special_scaled_modified_bessel_k0", "special_modified_bessel_k1", "special_scaled_modified_bessel_k1",
        "special_bessel_j0", "special_bessel_j1", "special_bessel_y0", "special_bessel_y1",
        "special_spherical_bessel_j0", "special_airy_ai", "special_erfcx", "special_ndtri", "polygamma",
        "special_zeta", "igamma", "igammac", "special_chebyshev_polynomial_t", "special_chebyshev_polynomial_u",
        "special_chebyshev_polynomial_v", "special_chebyshev_polynomial_w",
        "special_shifted_chebyshev_polynomial_t", "special_shifted_chebyshev_polynomial_u",
        "special_shifted_chebyshev_polynomial_v", "special_shifted_chebyshev_polynomial_w",
        "special_hermite_polynomial_h", "special_hermite_polynomial_he", "special_laguerre_polynomial_l",
        "special_legendre_polynomial_p", "_standard_gamma_grad"};
    return names[static_cast<int>(op)];
}

int special_arity(SpecialOp op) { return op < SpecialOp::kZeta ? 1 : 2; }

Status special(SpecialOp op, const ElementwiseLoop& loop, DType compute, int64_t order, runtime::ThreadPool* pool) {
    if (!detail::real_operands(loop)) return unimplemented(std::string(op_name(op)) + " with a complex operand");
    const int arity = special_arity(op);
    if (loop.nops != arity + 1) return invalid_argument(std::string(op_name(op)) + ": wrong number of operands");
    if (compute != DType::kFloat32 && compute != DType::kFloat64 && compute != DType::kBFloat16 &&
        compute != DType::kFloat16) {
        return invalid_argument(std::string(op_name(op)) + " needs a floating-point compute type");
    }
    detail::for_each_row(
        loop, pool,
        [&](char** p, const int64_t* s, int64_t n) {
            alignas(64) double a[detail::kBlock], b[detail::kBlock], out[detail::kBlock];
            for (int64_t j = 0; j < n; j += detail::kBlock) {
                const int64_t m = std::min(detail::kBlock, n - j);
                const double* pa = detail::input_block(a, p[1] + j * s[1], s[1], loop.dtype[1], m);
                double* po = detail::output_block(out, p[0] + j * s[0], s[0], loop.dtype[0]);
                if (arity == 1) {
                    for (int64_t i = 0; i < m; ++i) po[i] = unary_value(op, pa[i], order);
                } else {
                    const double* pb = detail::input_block(b, p[2] + j * s[2], s[2], loop.dtype[2], m);
                    for (int64_t i = 0; i < m; ++i) po[i] = binary_value(op, pa[i], pb[i]);
                }
                detail::flush_block(po, out, p[0] + j * s[0], s[0], loop.dtype[0], m);
            }
        },
        kWeight);
    return Status();
}

}  // namespace ember::kernels
