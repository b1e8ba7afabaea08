// Fused CPU kernels of VRGD (bench/optim/vrgd.py), loaded by bench/optim/fused.py.
//
// The statistics are one flat fp32 buffer [s1 | s2]: s1 = sum_d g_d and s2 = sum_d g_d^2 over the k
// observed groups, each parameter's segment in its own memory order (vrgd.py's views). Parameters and
// momentum buffers are dense fp32 tensors with equal strides, so element i of a segment is element i
// of their memory.
//
// vrgd_lars_step does the whole VRGD-LARS step in three passes per tensor, one tensor after another,
// so passes B and C mostly read what pass A left in the cache:
//   A: mean = s1 / k, r = mean^2 / (k * (max(var, 0) + eps)) (the eager code's r / k), sums of r,
//      mean^2, s2 and w^2
//   B: ||g_vr||^2 with g_vr = clip(r / mean(r), gamma, 1) * mean (skipped for trust_grad "mean")
//   C: the LARS update on g_vr (trust ratio from A and B), s1 = mean (p.grad after the step), and the
//      counts of live coordinates clipped at gamma and of dead ones (r == 0: zero gradient in every group).
// vrgd_factors does passes A and C's GSNR part alone for the other variants (their base update stays eager).
// Loops are written for the vectoriser: `omp simd` reductions, no branches (-fno-trapping-math lets
// the compiler turn the comparisons into selects), and an AVX2 clone picked at load time.

// The narrowest headers that do (torch/extension.h, the whole C++ frontend, doubled the build: 53 s against 25 s
// on an idle 2-core machine): ATen's tensor, the one op used, and pybind11 with torch's tensor casters.
#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/utils/pybind.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace {

constexpr int64_t kGrain = 1 << 14;  // elements per parallel chunk (64 KiB of each stream)
#if defined(__x86_64__)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

struct Gsnr {
  float inv_k, k, k_eps;
};

// r / k for one coordinate; `mean` receives s1 / k.
inline float ratio(const Gsnr& q, float s1, float s2, float& mean) {
  mean = s1 * q.inv_k;
  const float k_var = std::max(s2 - q.k * mean * mean, 0.0f);  // rounding can make it slightly negative
  return mean * mean / (k_var + q.k_eps);
}

// Sums over one chunk: r / k, mean^2, s2 and (kWeights) w^2.
template <bool kWeights>
inline void layer_sums(const float* __restrict s1, const float* __restrict s2, const float* __restrict w,
                       int64_t begin, int64_t end, Gsnr q, double* out) {
  float r_sum = 0, mean_sq = 0, s2_sum = 0, w_sq = 0;
#pragma omp simd reduction(+ : r_sum, mean_sq, s2_sum, w_sq)
  for (int64_t i = begin; i < end; ++i) {
    float mean;
    r_sum += ratio(q, s1[i], s2[i], mean);
    mean_sq += mean * mean;
    s2_sum += s2[i];
    if constexpr (kWeights) w_sq += w[i] * w[i];
  }
  out[0] = r_sum, out[1] = mean_sq, out[2] = s2_sum, out[3] = w_sq;
}

// clip(r / mean(r), gamma, 1) for one coordinate (scale = 1 / mean(r / k)); `mean` receives s1 / k, `clipped`
// counts the live coordinates below gamma and `dead` those with r == 0 before normalising (vrgd.py's
// gsnr_dead_frac: a zero gradient in every group).
inline float factor(const Gsnr& q, float s1, float s2, float scale, float gamma, float& mean, float& clipped,
                    float& dead) {
  const float r_k = ratio(q, s1, s2, mean), r = r_k * scale;
  clipped += r < gamma && r_k > 0 ? 1.0f : 0.0f;
  dead += r_k == 0 ? 1.0f : 0.0f;
  return std::min(std::max(r, gamma), 1.0f);
}

VECTOR_CLONES void pass_a(const float* __restrict s1, const float* __restrict s2, const float* __restrict w,
                          int64_t begin, int64_t end, Gsnr q, double* out) {
  layer_sums<true>(s1, s2, w, begin, end, q, out);
}

VECTOR_CLONES void pass_a_sums(const float* __restrict s1, const float* __restrict s2, int64_t begin, int64_t end,
                               Gsnr q, double* out) {
  layer_sums<false>(s1, s2, nullptr, begin, end, q, out);
}

// 1 / mean(r / k) of a tensor, 0 where r == 0 everywhere (mean == 0: factors gamma * 0). Capped at the largest
// float: an inf would make 0 * inf = NaN where the mean gradient is 0.
inline float inverse_mean(double r_sum, int64_t numel) {
  const double r_mean = r_sum / numel;
  return r_mean > 0 ? std::min(1.0 / r_mean, double(std::numeric_limits<float>::max())) : 0.0;
}

VECTOR_CLONES void pass_b(const float* __restrict s1, const float* __restrict s2, int64_t begin, int64_t end,
                          Gsnr q, float scale, float gamma, double* out) {
  float vr_sq = 0;
#pragma omp simd reduction(+ : vr_sq)
  for (int64_t i = begin; i < end; ++i) {
    float mean;
    const float g = std::min(std::max(ratio(q, s1[i], s2[i], mean) * scale, gamma), 1.0f) * mean;
    vr_sq += g * g;
  }
  out[0] = vr_sq;
}

VECTOR_CLONES void pass_c(float* __restrict s1, const float* __restrict s2, float* __restrict w, float* __restrict v,
                          int64_t begin, int64_t end, Gsnr q, float scale, float gamma, float step, float wd,
                          float momentum, double* out) {
  float clipped = 0, dead = 0;
#pragma omp simd reduction(+ : clipped, dead)
  for (int64_t i = begin; i < end; ++i) {
    float mean;
    const float g = factor(q, s1[i], s2[i], scale, gamma, mean, clipped, dead) * mean;
    const float update = momentum * v[i] + step * (g + wd * w[i]);  // v = m v + lr trust (g + wd w)
    v[i] = update;
    w[i] -= update;
    s1[i] = mean;
  }
  out[0] = clipped, out[1] = dead;
}

// The factors of one chunk into s2 (times the mean: kTimesMean), the mean into s1; the clipped and dead counts
// into out.
template <bool kTimesMean>
inline void factors(float* __restrict s1, float* __restrict s2, int64_t begin, int64_t end, Gsnr q, float scale,
                    float gamma, double* out) {
  float clipped = 0, dead = 0;
#pragma omp simd reduction(+ : clipped, dead)
  for (int64_t i = begin; i < end; ++i) {
    float mean;
    const float f = factor(q, s1[i], s2[i], scale, gamma, mean, clipped, dead);
    s1[i] = mean;
    s2[i] = kTimesMean ? f * mean : f;
  }
  out[0] = clipped, out[1] = dead;
}

// A run-time flag inside the loop kept gcc from vectorising it (5x slower): one loop per case.
VECTOR_CLONES void pass_factors(float* __restrict s1, float* __restrict s2, int64_t begin, int64_t end, Gsnr q,
                                float scale, float gamma, bool times_mean, double* out) {
  if (times_mean) factors<true>(s1, s2, begin, end, q, scale, gamma, out);
  else factors<false>(s1, s2, begin, end, q, scale, gamma, out);
}

VECTOR_CLONES void accumulate(float* __restrict s1, float* __restrict s2, const float* __restrict g,
                              int64_t begin, int64_t end, bool first) {
  if (first) {  // the step's first group: no need to zero the buffer beforehand
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) s1[i] = g[i], s2[i] = g[i] * g[i];
  } else {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) s1[i] += g[i], s2[i] += g[i] * g[i];
  }
}

// Runs fn(begin, end, partial) over [0, numel) in chunks of kGrain, in parallel, and returns the sum of
// each of the `width` partial sums over the chunks (in chunk order: independent of the thread count).
template <typename Fn>
std::vector<double> chunked(int64_t numel, int width, const Fn& fn) {
  const int64_t chunks = (numel + kGrain - 1) / kGrain;
  std::vector<double> partial(chunks * width, 0.0), total(width, 0.0);
  at::parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) fn(c * kGrain, std::min(numel, (c + 1) * kGrain), &partial[c * width]);
  });
  for (int64_t c = 0; c < chunks; ++c)
    for (int j = 0; j < width; ++j) total[j] += partial[c * width + j];
  return total;
}

void check_fp32_cpu(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_non_overlapping_and_dense(),
              what, " must be dense fp32 CPU tensors");
}

}  // namespace

// Adds one group's gradients to the statistics (first: overwrites them). offsets[t]: grads[t]'s segment.
void observe(at::Tensor stats, const std::vector<at::Tensor>& grads, at::Tensor offsets, bool first) {
  check_fp32_cpu(stats, "the statistics");
  const int64_t n = (stats.numel() - 2) / 2;
  TORCH_CHECK(offsets.dtype() == at::kLong && offsets.is_contiguous() &&
              offsets.numel() == int64_t(grads.size()), "one int64 offset per gradient");
  std::vector<const float*> data;
  std::vector<int64_t> tensor, start;  // chunks over all tensors: one parallel region per call
  for (size_t t = 0; t < grads.size(); ++t) {
    check_fp32_cpu(grads[t], "gradients");
    const int64_t o = offsets.data_ptr<int64_t>()[t];
    TORCH_CHECK(o >= 0 && o + grads[t].numel() <= n, "a gradient's segment lies outside the statistics");
    data.push_back(grads[t].data_ptr<float>());
    for (int64_t b = 0; b < grads[t].numel(); b += kGrain) tensor.push_back(t), start.push_back(b);
  }
  float* s1 = stats.data_ptr<float>();
  const int64_t* offset = offsets.data_ptr<int64_t>();
  at::parallel_for(0, tensor.size(), 1, [&](int64_t first_chunk, int64_t last_chunk) {
    for (int64_t c = first_chunk; c < last_chunk; ++c) {
      const int64_t t = tensor[c], o = offset[t];
      accumulate(s1 + o, s1 + n + o, data[t], start[c], std::min(grads[t].numel(), start[c] + kGrain), first);
    }
  });
}

// The VRGD-LARS step over all parameters (in the statistics' order). hyper[t] = (lr, weight_decay, eta,
// eps, adapt, clip, momentum) of tensor t's param group. Returns per tensor (sum of r / k, ||mean||^2, sum of s2,
// live coordinates clipped, ||w||^2, ||g_vr||^2 or ||mean||^2, trust ratio, dead coordinates), float64.
at::Tensor vrgd_lars_step(at::Tensor stats, const std::vector<at::Tensor>& params,
                          const std::vector<at::Tensor>& bufs, at::Tensor hyper, double k, double eps,
                          double gamma, bool trust_vr) {
  check_fp32_cpu(stats, "the statistics");
  const int64_t count = params.size();
  TORCH_CHECK(int64_t(bufs.size()) == count && hyper.dim() == 2 && hyper.size(0) == count && hyper.size(1) == 7,
              "one momentum buffer and one row of 7 settings per parameter");
  int64_t total = 0;
  for (const auto& p : params) total += p.numel();
  TORCH_CHECK(2 * total + 2 == stats.numel(), "the statistics must hold 2 floats per parameter element, plus 2");
  auto result = at::zeros({count, 8}, at::kDouble);
  double* out = result.data_ptr<double>();
  const auto h = hyper.contiguous().to(at::kDouble);
  const double* hp = h.data_ptr<double>();
  const Gsnr q{float(1.0 / k), float(k), float(k * eps)};
  const int64_t n = (stats.numel() - 2) / 2;
  float* s1 = stats.data_ptr<float>();
  float* s2 = s1 + n;
  for (int64_t t = 0, offset = 0; t < count; offset += params[t].numel(), ++t) {
    check_fp32_cpu(params[t], "parameters");
    check_fp32_cpu(bufs[t], "momentum buffers");
    TORCH_CHECK(bufs[t].sizes() == params[t].sizes() && bufs[t].strides() == params[t].strides(),
                "momentum buffers must have their parameter's shape and strides");
    float* w = params[t].data_ptr<float>();
    float* v = bufs[t].data_ptr<float>();
    float *a = s1 + offset, *b = s2 + offset;
    const int64_t numel = params[t].numel();
    const auto sums = chunked(numel, 4, [&](int64_t i, int64_t j, double* o) { pass_a(a, b, w, i, j, q, o); });
    const float scale = inverse_mean(sums[0], numel);
    const double vr_sq = trust_vr ? chunked(numel, 1, [&](int64_t i, int64_t j, double* o) {
      pass_b(a, b, i, j, q, scale, gamma, o);
    })[0] : sums[1];
    const double* x = hp + 7 * t;  // this tensor's (lr, weight_decay, eta, eps, adapt, clip, momentum)
    const double lr = x[0], wd = x[1];
    double trust = 1.0;
    if (x[4] != 0) {  // LARS (lars.py): eta ||w|| / (||g|| + wd ||w|| + eps), 1 where a norm is 0; LARC clips
      const double w_norm = std::sqrt(sums[3]), g_norm = std::sqrt(vr_sq);
      if (w_norm > 0 && g_norm > 0) trust = x[2] * w_norm / (g_norm + wd * w_norm + x[3]);
      if (x[5] != 0) trust = std::min(trust / lr, 1.0);
    }
    const auto counts = chunked(numel, 2, [&](int64_t i, int64_t j, double* o) {
      pass_c(a, b, w, v, i, j, q, scale, gamma, lr * trust, wd, x[6], o);
    });
    double* row = out + 8 * t;
    row[0] = sums[0], row[1] = sums[1], row[2] = sums[2], row[3] = counts[0], row[4] = sums[3], row[5] = vr_sq;
    row[6] = trust, row[7] = counts[1];
  }
  return result;
}

// The GSNR factors alone, for VRGD over any base update (vrgd.py applies it): per tensor, pass A's sums, then
// s1 = mean and s2 = clip(r / mean(r), gamma, 1), times the mean when `times_mean` (g_vr). Returns per tensor
// (sum of r / k, ||mean||^2, sum of s2, live coordinates clipped, dead coordinates), float64.
at::Tensor vrgd_factors(at::Tensor stats, at::Tensor numels, double k, double eps, double gamma,
                        bool times_mean) {
  check_fp32_cpu(stats, "the statistics");
  TORCH_CHECK(numels.dtype() == at::kLong && numels.is_contiguous(), "numels must be int64");
  const int64_t count = numels.numel(), n = (stats.numel() - 2) / 2;
  const int64_t* sizes = numels.data_ptr<int64_t>();
  TORCH_CHECK(std::accumulate(sizes, sizes + count, int64_t(0)) == n, "the sizes must add up to the statistics");
  auto result = at::zeros({count, 5}, at::kDouble);
  double* out = result.data_ptr<double>();
  const Gsnr q{float(1.0 / k), float(k), float(k * eps)};
  float* s1 = stats.data_ptr<float>();
  for (int64_t t = 0, offset = 0; t < count; offset += sizes[t], ++t) {
    float *a = s1 + offset, *b = s1 + n + offset;
    const auto sums = chunked(sizes[t], 4, [&](int64_t i, int64_t j, double* o) { pass_a_sums(a, b, i, j, q, o); });
    const float scale = inverse_mean(sums[0], sizes[t]);
    const auto counts = chunked(sizes[t], 2, [&](int64_t i, int64_t j, double* o) {
      pass_factors(a, b, i, j, q, scale, gamma, times_mean, o);
    });
    double* row = out + 5 * t;
    row[0] = sums[0], row[1] = sums[1], row[2] = sums[2], row[3] = counts[0], row[4] = counts[1];
  }
  return result;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("vrgd_factors", &vrgd_factors, "the GSNR factors of every parameter (see vrgd_cpu.cpp)");
  m.def("observe", &observe, "VRGD observe(): add one group's gradients and their squares to the statistics");
  m.def("vrgd_lars_step", &vrgd_lars_step, "the fused VRGD-LARS step (see vrgd_cpu.cpp)");
}
