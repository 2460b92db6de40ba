/* Roofline for benchmarks/bench_batched.py: the same Taylor arithmetic as taylax, hand-fused.
 *
 * One function per elementwise chain. For each point t it writes the derivatives
 * d^k/ds^k f(t + s) at s = 0, k = 0..K, to out[i * (K + 1) + k], using closed forms
 * along the line where they exist (sin, cos, powers of the seed) and the standard
 * O(K^2) recurrences otherwise (products, exp, division, square root): what a careful
 * person would write by hand. Points are processed in blocks of B so that every inner
 * loop runs across B independent points (SIMD), and blocks are spread over all cores
 * with OpenMP. Built with -O3 -march=native -fno-math-errno (vectorized libm).
 */
#include <math.h>

#define KMAX 64
#define B 8

typedef double series[KMAX + 1][B];

static void store(series y, double *out, long first, long count, int K) {
  double f = 1.0;
  for (int k = 0; k <= K; ++k) {
    if (k > 0) f *= k;
    for (long b = 0; b < count; ++b) out[(first + b) * (K + 1) + k] = y[k][b] * f;
  }
}

static void load(const double *t, long first, long count, double t0[B]) {
  for (long b = 0; b < B; ++b) t0[b] = t[first + (b < count ? b : 0)];
}

static void cauchy(series a, series b, series c, int K) {
  for (int k = 0; k <= K; ++k) {
#pragma omp simd
    for (int p = 0; p < B; ++p) c[k][p] = 0.0;
    for (int i = 0; i <= k; ++i)
#pragma omp simd
      for (int p = 0; p < B; ++p) c[k][p] += a[i][p] * b[k - i][p];
  }
}

/* sin(w t0 + w s) (cosine = 0) or cos(...) (cosine = 1): w^k cycle / k!. */
static void trig_line(const double t0[B], double w, int cosine, series y, int K) {
  double s[B], c[B];
#pragma omp simd
  for (int p = 0; p < B; ++p) {
    s[p] = sin(w * t0[p]);
    c[p] = cos(w * t0[p]);
  }
  double scale = 1.0;
  for (int k = 0; k <= K; ++k) {
    if (k > 0) scale *= w / k;
    int phase = (k + cosine) % 4;
    const double *v = (phase % 2 == 0) ? s : c;
    double sign = phase < 2 ? scale : -scale;
#pragma omp simd
    for (int p = 0; p < B; ++p) y[k][p] = sign * v[p];
  }
}

/* exp(u) for a series u of degree deg_u: k e_k = sum_{j=1..k} j u_j e_{k-j}. */
static void exp_series(series u, series e, int K, int deg_u) {
#pragma omp simd
  for (int p = 0; p < B; ++p) e[0][p] = exp(u[0][p]);
  for (int k = 1; k <= K; ++k) {
    int top = k < deg_u ? k : deg_u;
    double acc[B] = {0};
    for (int j = 1; j <= top; ++j)
#pragma omp simd
      for (int p = 0; p < B; ++p) acc[p] += j * u[j][p] * e[k - j][p];
#pragma omp simd
    for (int p = 0; p < B; ++p) e[k][p] = acc[p] / k;
  }
}

/* a / b for a series b of degree deg_b. */
static void divide(series a, series b, series q, int K, int deg_b) {
  for (int k = 0; k <= K; ++k) {
    int top = k < deg_b ? k : deg_b;
    double acc[B];
#pragma omp simd
    for (int p = 0; p < B; ++p) acc[p] = a[k][p];
    for (int j = 1; j <= top; ++j)
#pragma omp simd
      for (int p = 0; p < B; ++p) acc[p] -= b[j][p] * q[k - j][p];
#pragma omp simd
    for (int p = 0; p < B; ++p) q[k][p] = acc[p] / b[0][p];
  }
}

/* sqrt(u): r_k = (u_k - sum_{j=1..k-1} r_j r_{k-j}) / (2 r_0). */
static void sqrt_series(series u, series r, int K) {
#pragma omp simd
  for (int p = 0; p < B; ++p) r[0][p] = sqrt(u[0][p]);
  for (int k = 1; k <= K; ++k) {
    double acc[B];
#pragma omp simd
    for (int p = 0; p < B; ++p) acc[p] = u[k][p];
    for (int j = 1; j < k; ++j)
#pragma omp simd
      for (int p = 0; p < B; ++p) acc[p] -= r[j][p] * r[k - j][p];
#pragma omp simd
    for (int p = 0; p < B; ++p) r[k][p] = acc[p] / (2.0 * r[0][p]);
  }
}

static void zero(series y, int from, int K) {
  for (int k = from; k <= K; ++k)
#pragma omp simd
    for (int p = 0; p < B; ++p) y[k][p] = 0.0;
}

/* 0.3 sin(t) t^10 */
void seed_function(const double *t, double *out, long n, int K) {
#pragma omp parallel for schedule(static)
  for (long first = 0; first < n; first += B) {
    long count = n - first < B ? n - first : B;
    series s, pw, y;
    double t0[B], tp[11][B];
    load(t, first, count, t0);
    trig_line(t0, 1.0, 0, s, K);
    /* (t0 + s)^10 = sum_k binom(10, k) t0^(10-k) s^k, powers by products */
#pragma omp simd
    for (int p = 0; p < B; ++p) tp[0][p] = 1.0;
    for (int j = 1; j <= 10; ++j)
#pragma omp simd
      for (int p = 0; p < B; ++p) tp[j][p] = tp[j - 1][p] * t0[p];
    double binom = 1.0;
    for (int k = 0; k <= K; ++k) {
#pragma omp simd
      for (int p = 0; p < B; ++p) pw[k][p] = k <= 10 ? 0.3 * binom * tp[10 - k][p] : 0.0;
      binom = binom * (10 - k) / (k + 1);
    }
    cauchy(s, pw, y, K);
    store(y, out, first, count, K);
  }
}

/* exp(-t^2/2) cos(3t) / (1 + t^2) */
void damped_wave(const double *t, double *out, long n, int K) {
#pragma omp parallel for schedule(static)
  for (long first = 0; first < n; first += B) {
    long count = n - first < B ? n - first : B;
    series u, e, c, ec, b, q;
    double t0[B];
    load(t, first, count, t0);
    zero(u, 3, K);
    zero(b, 3, K);
#pragma omp simd
    for (int p = 0; p < B; ++p) {
      u[0][p] = -0.5 * t0[p] * t0[p];
      u[1][p] = -t0[p];
      u[2][p] = -0.5;
      b[0][p] = 1.0 + t0[p] * t0[p];
      b[1][p] = 2.0 * t0[p];
      b[2][p] = 1.0;
    }
    exp_series(u, e, K, 2);
    trig_line(t0, 3.0, 1, c, K);
    cauchy(e, c, ec, K);
    divide(ec, b, q, K, 2);
    store(q, out, first, count, K);
  }
}

/* sqrt(1 + t^2) exp(sin(t)) */
void growth(const double *t, double *out, long n, int K) {
#pragma omp parallel for schedule(static)
  for (long first = 0; first < n; first += B) {
    long count = n - first < B ? n - first : B;
    series u, r, s, e, y;
    double t0[B];
    load(t, first, count, t0);
    zero(u, 3, K);
#pragma omp simd
    for (int p = 0; p < B; ++p) {
      u[0][p] = 1.0 + t0[p] * t0[p];
      u[1][p] = 2.0 * t0[p];
      u[2][p] = 1.0;
    }
    sqrt_series(u, r, K);
    trig_line(t0, 1.0, 0, s, K);
    exp_series(s, e, K, K);
    cauchy(r, e, y, K);
    store(y, out, first, count, K);
  }
}
