// Scalar special functions whose values and edge cases follow PyTorch's CPU
// kernels (torch 2.13, float64 path).  Pure functions: no global state,
// thread-safe, never throw.  Implementations live in special_math.cc.
#pragma once

#include <cstdint>

namespace ember::kernels::special_math {

// ---- modified Bessel functions -------------------------------------------
double i0(double x);    // I0(x), modified Bessel 1st kind, order 0 (torch.special.i0 / torch.i0)
double i0e(double x);   // exp(-|x|) * I0(x) (torch.special.i0e)
double i1(double x);    // I1(x), modified Bessel 1st kind, order 1 (torch.special.i1)
double i1e(double x);   // exp(-|x|) * I1(x) (torch.special.i1e)
double k0(double x);    // K0(x), modified Bessel 2nd kind, order 0 (torch.special.modified_bessel_k0)
double k0e(double x);   // exp(x) * K0(x) (torch.special.scaled_modified_bessel_k0)
double k1(double x);    // K1(x), modified Bessel 2nd kind, order 1 (torch.special.modified_bessel_k1)
double k1e(double x);   // exp(x) * K1(x) (torch.special.scaled_modified_bessel_k1)

// ---- Bessel functions ----------------------------------------------------
double j0(double x);    // J0(x), Bessel 1st kind, order 0 (torch.special.bessel_j0)
double j1(double x);    // J1(x), Bessel 1st kind, order 1 (torch.special.bessel_j1)
double y0(double x);    // Y0(x), Bessel 2nd kind, order 0 (torch.special.bessel_y0)
double y1(double x);    // Y1(x), Bessel 2nd kind, order 1 (torch.special.bessel_y1)
double spherical_j0(double x);  // sin(x)/x, spherical Bessel j0 (torch.special.spherical_bessel_j0)
double airy_ai(double x);       // Airy function Ai(x) (torch.special.airy_ai)

// ---- error function / normal distribution --------------------------------
double erfcx(double x);  // exp(x^2) * erfc(x), scaled complementary error function (torch.special.erfcx)
double ndtri(double p);  // inverse of the standard normal CDF (torch.special.ndtri)

// ---- zeta / gamma family -------------------------------------------------
double zeta(double x, double q);        // Hurwitz zeta sum_k (k+q)^-x (torch.special.zeta(x, q))
double polygamma(int64_t n, double x);  // n-th derivative of digamma, n >= 0 (torch.polygamma; n=0 digamma, n=1 trigamma)
double igamma(double a, double x);      // regularized lower incomplete gamma P(a, x) (torch.igamma / torch.special.gammainc)
double igammac(double a, double x);     // regularized upper incomplete gamma Q(a, x) (torch.igammac / torch.special.gammaincc)
double standard_gamma_grad(double a, double x);  // d x / d a for a Gamma(a, 1) sample x (torch._standard_gamma_grad)

// ---- orthogonal polynomials; n is a floating degree that PyTorch truncates
// to int64 (NaN / out of range / negative -> 0) ------------------------------
double chebyshev_t(double x, double n);          // T_n(x) (torch.special.chebyshev_polynomial_t)
double chebyshev_u(double x, double n);          // U_n(x) (torch.special.chebyshev_polynomial_u)
double chebyshev_v(double x, double n);          // V_n(x) (torch.special.chebyshev_polynomial_v)
double chebyshev_w(double x, double n);          // W_n(x) (torch.special.chebyshev_polynomial_w)
double shifted_chebyshev_t(double x, double n);  // T_n(2x-1) (torch.special.shifted_chebyshev_polynomial_t)
double shifted_chebyshev_u(double x, double n);  // U_n(2x-1) (torch.special.shifted_chebyshev_polynomial_u)
double shifted_chebyshev_v(double x, double n);  // V_n(2x-1) (torch.special.shifted_chebyshev_polynomial_v)
double shifted_chebyshev_w(double x, double n);  // W_n(2x-1) (torch.special.shifted_chebyshev_polynomial_w)
double hermite_h(double x, double n);            // physicists' Hermite H_n(x) (torch.special.hermite_polynomial_h)
double hermite_he(double x, double n);           // probabilists' Hermite He_n(x) (torch.special.hermite_polynomial_he)
double laguerre_l(double x, double n);           // Laguerre L_n(x) (torch.special.laguerre_polynomial_l)
double legendre_p(double x, double n);           // Legendre P_n(x) (torch.special.legendre_polynomial_p)

}  // namespace ember::kernels::special_math
