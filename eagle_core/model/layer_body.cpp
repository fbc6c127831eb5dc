// A Llama decoder layer's body between its linear products, as ATen calls from C++: the same operations, in the
// same order, with the same arguments as the Python reference (layer_body.py's PythonBody, itself transformers'
// LlamaDecoderLayer operation for operation, and attention.py's tree_attention_forward / small_query_attention,
// transformers' sdpa_attention_forward for a one-token step). Each call below is the ATen operator the Python line
// beside it dispatches to, so every result is computed by the same kernel on the same inputs: the same bits, and
// row independence exactly where the Python body has it. What goes away is the interpreter between the ~60
// operations of a layer (argument parsing, Python objects, module lookups): one call per segment instead.
//
// Built by layer_body.py with torch.utils.cpp_extension (cached beside the GGUF block kernel).
#include <torch/extension.h>

// The GGUF block kernel's source, compiled into this module too (its products called from q4_layer below without
// the interpreter between them); its own module (gguf_blocks.py) is built from the same file.
#define EAGLE_GGUF_BLOCKS_INCLUDED
#include "gguf_blocks.cpp"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace {

// LlamaRMSNorm.forward:
//   h = x.to(float32); variance = h.pow(2).mean(-1, keepdim=True); h = h * rsqrt(variance + eps)
//   return weight * h.to(dtype)
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  auto h = x.to(at::kFloat);
  const int64_t last[1] = {-1};
  auto variance = h.pow(2).mean(at::IntArrayRef(last, 1), /*keepdim=*/true);
#ifdef EAGLE_LENS_BROKEN_NORM   // the tests' broken build: equal in exact arithmetic, not in bits
  h = h / at::sqrt(variance + eps);
#else
  h = h * at::rsqrt(variance + eps);
#endif
  return weight * h.to(x.scalar_type());
}

// Whether the fused loops below may stand in for the eager operations: float32 and contiguous, the weight [H].
bool fusable(const at::Tensor& x, const at::Tensor& weight) {
  return x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && x.is_contiguous() &&
         weight.is_contiguous() && x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1) &&
         x.device().is_cpu() && weight.device().is_cpu();
}

// rms_norm's last three operations on s and its variance, in one pass: for each row, t = variance + eps (float32,
// as the add's scalar is taken), r = 1 / sqrt(t) (rsqrt's kernel: a correctly rounded division of a correctly
// rounded root, vectorized or not), then weight * (s * r), each product rounded: the eager operations' roundings.
at::Tensor norm_tail(const at::Tensor& s, const at::Tensor& variance, const at::Tensor& weight, double eps) {
  auto out = at::empty_like(s);
  const int64_t H = s.size(-1), rows = s.numel() / std::max<int64_t>(H, 1);
  const float* sp = s.data_ptr<float>();
  const float* vp = variance.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float e = static_cast<float>(eps);
  for (int64_t r = 0; r < rows; ++r) {
    const float t = vp[r] + e;
    const float inv = 1.0f / std::sqrt(t);
    const float* x = sp + r * H;
    float* o = op + r * H;
    for (int64_t j = 0; j < H; ++j) {
      const float hx = x[j] * inv;
      o[j] = wp[j] * hx;
    }
  }
  return out;
}

// h = h + y; (h, norm(h)). Fused where it may (fusable): s = h + y and s * s (pow(2)'s kernel for an exponent of 2)
// in one pass, the mean over the last dimension by ATen's own reduction (the order of its sum is its own), then
// norm_tail: the same roundings as the eager operations, one pass each instead of seven operations.
std::vector<at::Tensor> residual_norm(const at::Tensor& h, const at::Tensor& y, const at::Tensor& weight,
                                      double eps) {
#ifndef EAGLE_LENS_BROKEN_NORM
  if (fusable(h, weight) && y.scalar_type() == at::kFloat && y.is_contiguous() && y.sizes() == h.sizes()) {
    auto s = at::empty_like(h), sq = at::empty_like(h);
    const float* hp = h.data_ptr<float>();
    const float* yp = y.data_ptr<float>();
    float* spp = s.data_ptr<float>();
    float* qp = sq.data_ptr<float>();
    for (int64_t i = 0, N = h.numel(); i < N; ++i) {
      const float v = hp[i] + yp[i];
      spp[i] = v;
      qp[i] = v * v;
    }
    const int64_t last[1] = {-1};
    auto variance = sq.mean(at::IntArrayRef(last, 1), /*keepdim=*/true);
    return {s, norm_tail(s, variance, weight, eps)};
  }
#endif
  auto s = h + y;
  return {s, rms_norm(s, weight, eps)};
}

// act_fn(gate) * up with act_fn = SiLU (nn.functional.silu); the product written into silu's fresh output (the
// same kernel, the same values, one allocation fewer)
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
  auto a = at::silu(gate);
  if (a.sizes() == up.sizes() && a.scalar_type() == up.scalar_type()) return a.mul_(up);
  return a * up;
}

// torch.cat((-x[..., half:], x[..., :half]), dim=-1)
at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
}

// (x * cos) + (rotate_half(x) * sin) for x [B, H, n, d] (any strides, unit stride in d) and cos, sin [B or 1, 1, n,
// d], all float32: one pass over the elements instead of seven operations. Each output is the same three roundings
// as the eager operations' (x*c rounded, (-x')*s rounded, their sum rounded; negation is exact; built with
// -ffp-contract=off, so no fused multiply-add), so the same bits. The result is laid out [B, n, H, d] (a view
// [B, H, n, d]); its readers (the cache's copy, attention's reshape) read values, not the layout. Other dtypes (a
// bf16 model rounds each operation to bf16) take the eager operations.
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const bool fused = x.scalar_type() == at::kFloat && cos.scalar_type() == at::kFloat &&
                     sin.scalar_type() == at::kFloat && x.dim() == 4 && cos.dim() == 4 && sin.dim() == 4 &&
                     x.stride(3) == 1 && cos.stride(3) == 1 && sin.stride(3) == 1 && x.size(3) % 2 == 0 &&
                     cos.size(1) == 1 && sin.size(1) == 1 && cos.size(2) == x.size(2) && sin.size(2) == x.size(2) &&
                     cos.size(3) == x.size(3) && sin.size(3) == x.size(3) &&
                     (cos.size(0) == 1 || cos.size(0) == x.size(0)) && (sin.size(0) == 1 || sin.size(0) == x.size(0));
  if (!fused) return (x * cos) + (rotate_half(x) * sin);
  const int64_t B = x.size(0), H = x.size(1), n = x.size(2), d = x.size(3), half = d / 2;
  auto out = at::empty({B, n, H, d}, x.options()).transpose(1, 2);
  const float* xp = x.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t cb = cos.size(0) == 1 ? 0 : cos.stride(0), sb = sin.size(0) == 1 ? 0 : sin.stride(0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < n; ++t) {
      const float* c = cp + b * cb + t * cos.stride(2);
      const float* s = sp + b * sb + t * sin.stride(2);
      for (int64_t h = 0; h < H; ++h) {
        const float* xr = xp + b * x.stride(0) + h * x.stride(1) + t * x.stride(2);
        float* o = op + b * out.stride(0) + h * out.stride(1) + t * out.stride(2);
        for (int64_t j = 0; j < half; ++j) {
          const float a = xr[j] * c[j];
          const float r = (-xr[j + half]) * s[j];
          o[j] = a + r;
        }
        for (int64_t j = half; j < d; ++j) {
          const float a = xr[j] * c[j];
          const float r = xr[j - half] * s[j];
          o[j] = a + r;
        }
      }
    }
  }
  return out;
}

// attention.small_query_attention (scale given)
at::Tensor small_query(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                       const at::Tensor* mask, double scale) {
  const int64_t B = query.size(0), H = query.size(1), n = query.size(2), d = query.size(3);
  const int64_t G = key.size(1), r = H / G;
  auto scores = at::matmul(query.reshape({B, G, r * n, d}), key.transpose(-1, -2)).mul_(scale);
  if (mask != nullptr) {
    scores = scores.view({B, G, r, n, -1}).add_(mask->unsqueeze(2)).view({B, G, r * n, -1});
  }
  auto probs = at::softmax(scores, -1, c10::promoteTypes(scores.scalar_type(), at::kFloat)).to(value.scalar_type());
  return at::matmul(probs, value).view({B, H, n, d});
}

// The float64 cases (F64, F64_MASK below): small_query's arithmetic in our own loops, reading the engine's float64
// cache where it lies, instead of ~6 ATen operations and two one-row float64 GEMMs per part and layer. For each
// query row: s_l = (q . k_l) * scale (+ mask_l), exact float64 products of float32 values summed in a fixed order
// (dot_f64); p_l = exp(s_l - max) / sum (ATen's exp over the part's rows in one call; the sum in key order); o = the
// sum over keys of p_l v_l in key order (weighted_sum_f64); o rounded to float32 once. The reference (small_query:
// matmul, softmax, matmul in float64) sums in its BLAS's order, so the two differ by ~1e-16 relative before the
// float32 rounding, which hides it but once in ~1e9 values (attention.py's docstring: the same reason a tree
// node's sum over scattered ancestors equals a one-token step's over a contiguous prefix). A masked key (an
// additive -inf or float32's lowest) gives p_l = 0 exactly and is skipped, as adding it changes nothing, so a tree
// node's row is computed as the step over just its ancestors is (tests/test_layer_body.py pins both). Built with
// -DEAGLE_LENS_ATEN_F64, the ATen operations run instead (for comparing the two).
// q . k over d values: float64 products of float32 values (exact), summed as four vectors of four lanes (vector c
// takes the values 16i + 4c .. 16i + 4c + 3), then the vectors ((v0 + v1) + (v2 + v3)) and the lanes ((l0 + l1) +
// (l2 + l3)), then a tail of d % 4 values in order. The AVX2 code and the portable code make the same operations
// in the same order (a fused multiply-add of an exact product rounds as the product's add), so the same bits.
inline double dot_f64(const double* q, const double* k, int64_t d) {
  const int64_t d16 = d - d % 16, d4 = d - d % 4;
#if defined(__AVX2__) && defined(__FMA__)
  __m256d v0 = _mm256_setzero_pd(), v1 = _mm256_setzero_pd(), v2 = _mm256_setzero_pd(), v3 = _mm256_setzero_pd();
  int64_t j = 0;
  for (; j < d16; j += 16) {
    v0 = _mm256_fmadd_pd(_mm256_loadu_pd(q + j), _mm256_loadu_pd(k + j), v0);
    v1 = _mm256_fmadd_pd(_mm256_loadu_pd(q + j + 4), _mm256_loadu_pd(k + j + 4), v1);
    v2 = _mm256_fmadd_pd(_mm256_loadu_pd(q + j + 8), _mm256_loadu_pd(k + j + 8), v2);
    v3 = _mm256_fmadd_pd(_mm256_loadu_pd(q + j + 12), _mm256_loadu_pd(k + j + 12), v3);
  }
  if (j < d4) { v0 = _mm256_fmadd_pd(_mm256_loadu_pd(q + j), _mm256_loadu_pd(k + j), v0); j += 4; }
  if (j < d4) { v1 = _mm256_fmadd_pd(_mm256_loadu_pd(q + j), _mm256_loadu_pd(k + j), v1); j += 4; }
  if (j < d4) { v2 = _mm256_fmadd_pd(_mm256_loadu_pd(q + j), _mm256_loadu_pd(k + j), v2); j += 4; }
  const __m256d s = _mm256_add_pd(_mm256_add_pd(v0, v1), _mm256_add_pd(v2, v3));
  alignas(32) double l[4];
  _mm256_store_pd(l, s);
#else
  double v[4][4] = {};
  for (int64_t j = 0; j < d4; j += 4) {
    const int64_t c = (j / 4) % 4;
    for (int i = 0; i < 4; ++i) v[c][i] += q[j + i] * k[j + i];
  }
  double l[4];
  for (int i = 0; i < 4; ++i) l[i] = (v[0][i] + v[1][i]) + (v[2][i] + v[3][i]);
#endif
  double out = (l[0] + l[1]) + (l[2] + l[3]);
  for (int64_t j = d4; j < d; ++j) out += q[j] * k[j];
  return out;
}

// o[j] = sum over keys l of p[l] * v[l][j], in key order, each product rounded, then added (no fused multiply-add:
// p * v is not exact). Eight accumulators of four lanes held in registers over all keys, 32 values at a time.
inline void weighted_sum_f64(const double* p, const double* v, int64_t L, int64_t vstride, int64_t d, double* o) {
  int64_t j0 = 0;
#if defined(__AVX2__)
  for (; j0 + 32 <= d; j0 += 32) {
    __m256d a[8];
    for (int c = 0; c < 8; ++c) a[c] = _mm256_setzero_pd();
    for (int64_t l = 0; l < L; ++l) {
      if (p[l] == 0.0) continue;   // adds exactly nothing (a masked key, or one far below the maximum)
      const __m256d pl = _mm256_set1_pd(p[l]);
      const double* vr = v + l * vstride + j0;
      for (int c = 0; c < 8; ++c) a[c] = _mm256_add_pd(a[c], _mm256_mul_pd(pl, _mm256_loadu_pd(vr + 4 * c)));
    }
    for (int c = 0; c < 8; ++c) _mm256_storeu_pd(o + j0 + 4 * c, a[c]);
  }
#endif
  for (int64_t j = j0; j < d; ++j) o[j] = 0.0;
  if (j0 < d) {
    for (int64_t l = 0; l < L; ++l) {
      if (p[l] == 0.0) continue;
      const double* vr = v + l * vstride;
      for (int64_t j = j0; j < d; ++j) o[j] += p[l] * vr[j];
    }
  }
}

void f64_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor* mask,
                   double scale, at::Tensor& out) {
  // q [B, H, n, d] float32 (any strides, unit in d); keys, values [B, G, L, d] float64 (unit stride in d);
  // mask broadcastable to [B, 1, n, L] (float32 or float64); out [B, n, H, d] float32, contiguous
  const int64_t B = q.size(0), H = q.size(1), n = q.size(2), d = q.size(3);
  const int64_t G = keys.size(1), L = keys.size(2), r = H / G, tasks = B * H * n;
  const float* qp = q.data_ptr<float>();
  const double* kp = keys.data_ptr<double>();
  const double* vp = values.data_ptr<double>();
  float* op = out.data_ptr<float>();
  at::Tensor m64;
  const double* mp = nullptr;
  int64_t mb = 0, mt = 0, ml = 0;
  if (mask != nullptr) {
    TORCH_CHECK(mask->dim() == 4 && mask->size(1) == 1, "layer_body.f64_attention: a mask [B, 1, n, L]");
    m64 = mask->to(at::kDouble);
    mp = m64.data_ptr<double>();
    mb = m64.size(0) == 1 ? 0 : m64.stride(0);
    mt = m64.size(2) == 1 ? 0 : m64.stride(2);
    ml = m64.stride(3);
  }
  const int64_t qs0 = q.stride(0), qs1 = q.stride(1), qs2 = q.stride(2);
  const int64_t ks0 = keys.stride(0), ks1 = keys.stride(1), ks2 = keys.stride(2);
  const int64_t vs0 = values.stride(0), vs1 = values.stride(1), vs2 = values.stride(2);
  // scores [tasks, L]; a task is one (batch, head, row), computed by one thread in one order, whatever the split
  auto scores = at::empty({tasks, L}, keys.options());
  double* sp = scores.data_ptr<double>();
  // threads only where a chunk holds ~256K multiply-adds: below that waking the second thread costs more than it saves
  const int64_t grain = std::max<int64_t>(1, 262144 / std::max<int64_t>(1, L * d));
  at::parallel_for(0, tasks, grain, [&](int64_t lo, int64_t hi) {
    std::vector<double> qd(d);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (H * n), h = (task / n) % H, t = task % n, g = h / r;
      const float* qr = qp + b * qs0 + h * qs1 + t * qs2;
      for (int64_t j = 0; j < d; ++j) qd[j] = static_cast<double>(qr[j]);
      const double* kb = kp + b * ks0 + g * ks1;
      const double* mrow = mp == nullptr ? nullptr : mp + b * mb + t * mt;
      double* srow = sp + task * L;
      double best = -std::numeric_limits<double>::infinity();
      for (int64_t l = 0; l < L; ++l) {
        double v = dot_f64(qd.data(), kb + l * ks2, d) * scale;
        if (mrow != nullptr) v = v + mrow[l * ml];
        srow[l] = v;
        best = std::max(best, v);
      }
      for (int64_t l = 0; l < L; ++l) srow[l] = srow[l] - best;
    }
  });
  scores.exp_();   // ATen's vectorized exp, elementwise: one call for every row of the part
  at::parallel_for(0, tasks, grain, [&](int64_t lo, int64_t hi) {
    std::vector<double> o(d);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (H * n), h = (task / n) % H, t = task % n, g = h / r;
      double* srow = sp + task * L;
      double total = 0;
      for (int64_t l = 0; l < L; ++l) total += srow[l];
      for (int64_t l = 0; l < L; ++l) srow[l] = srow[l] / total;
      weighted_sum_f64(srow, vp + b * vs0 + g * vs1, L, vs2, d, o.data());
      float* orow = op + ((b * n + t) * H + h) * d;
      for (int64_t j = 0; j < d; ++j) orow[j] = static_cast<float>(o[j]);
    }
  });
}

// The attention cases (layer_body.py picks one per part, or the Python body where none applies):
enum Case : int64_t {
  F64 = 0,        // tree_attention_forward, float64 cache, one token, no mask
  F64_MASK = 1,   // tree_attention_forward, float64 cache, a float mask, at most MAX_QUERIES tokens
  SMALL = 2,      // tree_attention_forward, cache in the queries' dtype, a float mask, 2..MAX_QUERIES tokens
  SDPA = 3,       // sdpa_attention_forward (directly or through tree_attention_forward): one token, no mask
};

// PythonBody.attend for parts whose caches are engine.PreallocatedLayer's: q, k, v products [B, n, *] -> the
// attention output [B, n, heads * head_dim]. Per part j (rows bounds[2j]..bounds[2j+1]): its new keys and values
// written into its buffers at starts[j] (PreallocatedLayer.update), its queries over the buffers' first
// starts[j] + rows entries. Returns [output, keys_0, values_0, keys_1, ...]: the caches' new views.
std::vector<at::Tensor> attend(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                               const at::Tensor& cos, const at::Tensor& sin, int64_t head_dim,
                               const std::vector<int64_t>& bounds, const std::vector<at::Tensor>& kbufs,
                               const std::vector<at::Tensor>& vbufs, const std::vector<int64_t>& starts,
                               const std::vector<at::Tensor>& masks, const std::vector<int64_t>& cases,
                               double scaling, bool gqa) {
  const size_t parts = starts.size();
  TORCH_CHECK(bounds.size() == 2 * parts && kbufs.size() == parts && vbufs.size() == parts &&
                  masks.size() == parts && cases.size() == parts,
              "layer_body.attend: one bound pair, buffer pair, start, mask and case per part");
  const int64_t B = q_in.size(0), n = q_in.size(1);
  auto q = q_in.view({B, n, -1, head_dim}).transpose(1, 2);
  auto k = k_in.view({B, n, -1, head_dim}).transpose(1, 2);
  auto v = v_in.view({B, n, -1, head_dim}).transpose(1, 2);
  q = rope(q, cos, sin);
  k = rope(k, cos, sin);
  std::vector<at::Tensor> outs, result(1);
  outs.reserve(parts);
  result.reserve(1 + 2 * parts);
  for (size_t j = 0; j < parts; ++j) {
    const int64_t a = bounds[2 * j], b = bounds[2 * j + 1], m = b - a;
    at::Tensor qp = q, kp = k, vp = v;
    if (parts > 1) {
      qp = q.slice(2, a, b);
      kp = k.slice(2, a, b);
      vp = v.slice(2, a, b);
    }
    const int64_t start = starts[j], end = start + m;   // PreallocatedLayer.update
    kbufs[j].slice(2, start, end).copy_(kp);
    vbufs[j].slice(2, start, end).copy_(vp);
    auto keys = kbufs[j].slice(2, 0, end), values = vbufs[j].slice(2, 0, end);
    result.push_back(keys);
    result.push_back(values);
    at::Tensor o;
    switch (cases[j]) {
      case F64:
      case F64_MASK: {   // tree_attention_forward's float64 branch
        at::Tensor mask;
        if (cases[j] == F64_MASK) mask = masks[j].slice(3, 0, keys.size(2));
#ifdef EAGLE_LENS_ATEN_F64   // the reference's operations (tests: the loop against them)
        if (mask.defined()) mask = mask.to(at::kDouble);
        o = small_query(qp.to(at::kDouble), keys, values, cases[j] == F64_MASK ? &mask : nullptr, scaling);
        o = o.to(qp.scalar_type()).transpose(1, 2).contiguous();
#else
        if (qp.scalar_type() == at::kFloat && keys.stride(3) == 1 && values.stride(3) == 1) {
          o = at::empty({qp.size(0), m, qp.size(1), qp.size(3)}, qp.options());
          f64_attention(qp, keys, values, cases[j] == F64_MASK ? &mask : nullptr, scaling, o);
        } else {
          if (mask.defined()) mask = mask.to(at::kDouble);
          o = small_query(qp.to(at::kDouble), keys, values, cases[j] == F64_MASK ? &mask : nullptr, scaling);
          o = o.to(qp.scalar_type()).transpose(1, 2).contiguous();
        }
#endif
        break;
      }
      case SMALL: {      // tree_attention_forward's small-query branch
        auto mask = masks[j].slice(3, 0, keys.size(2));
        o = small_query(qp, keys, values, &mask, scaling).transpose(1, 2).contiguous();
        break;
      }
      case SDPA: {       // sdpa_attention_forward, one query, no mask (is_causal False)
        o = at::scaled_dot_product_attention(qp, keys, values, std::nullopt, 0.0, false, scaling, gqa);
        o = o.reshape({o.size(0), -1, m, values.size(-1)}).transpose(1, 2).contiguous();
        break;
      }
      default:
        TORCH_CHECK(false, "layer_body.attend: unknown case ", cases[j]);
    }
    outs.push_back(o.reshape({B, m, -1}));
  }
  result[0] = parts == 1 ? outs[0].contiguous() : at::cat(outs, 1).contiguous();
  return result;
}

// [x @ W.T for each layer of a group that reads one input] (q/k/v; gate/up): one block_linear call over the group's
// stacked panels split at `splits` (gguf_blocks.stacked_linear), or one call per layer (packs.size() ==
// splits.size()): what PlannedLinear / shared_input_linears compute for them, the same calls.
std::vector<at::Tensor> block_group(const at::Tensor& x, const std::vector<at::Tensor>& packs, int64_t kind,
                                    const std::vector<int64_t>& splits) {
  const int64_t K = x.size(-1);
  if (packs.size() == 1 && splits.size() > 1) {
    int64_t total = 0;
    for (auto n : splits) total += n;
    return block_linear(x, packs[0], kind, total, K, c10::nullopt).split_with_sizes(splits, -1);
  }
  std::vector<at::Tensor> out;
  for (size_t j = 0; j < packs.size(); ++j) out.push_back(block_linear(x, packs[j], kind, splits[j], K, c10::nullopt));
  return out;
}

// One decoder layer whose every product runs the GGUF block kernel (the q4 plan's passes of up to MAX_VERIFY_ROWS
// rows), as packed_forward's loop runs it with the C++ body, call for call:
//   q, k, v = products(x); out = attend(q, k, v); h, x = residual_norm(h, o_proj(out), post-attention norm)
//   g, u = products(x); h, x = residual_norm(h, down(swiglu(g, u)), the next layer's input norm or the final norm)
// The same functions on the same inputs in the same order: the same bits, one call from Python instead of ~10.
// Returns [h, x, keys_0, values_0, ...] (attend's caches' new views).
std::vector<at::Tensor> q4_layer(const at::Tensor& h_in, const at::Tensor& x_in,
                                 const std::vector<at::Tensor>& qkv_packs, int64_t qkv_kind,
                                 const std::vector<int64_t>& qkv_splits, const at::Tensor& o_pack, int64_t o_kind,
                                 int64_t o_out, const std::vector<at::Tensor>& gu_packs, int64_t gu_kind,
                                 const std::vector<int64_t>& gu_splits, const at::Tensor& d_pack, int64_t d_kind,
                                 int64_t d_out, const at::Tensor& post_w, double post_eps, const at::Tensor& next_w,
                                 double next_eps, const at::Tensor& cos, const at::Tensor& sin, int64_t head_dim,
                                 const std::vector<int64_t>& bounds, const std::vector<at::Tensor>& kbufs,
                                 const std::vector<at::Tensor>& vbufs, const std::vector<int64_t>& starts,
                                 const std::vector<at::Tensor>& masks, const std::vector<int64_t>& cases,
                                 double scaling, bool gqa) {
  auto qkv = block_group(x_in, qkv_packs, qkv_kind, qkv_splits);
  TORCH_CHECK(qkv.size() == 3, "layer_body.q4_layer: q, k and v");
  auto got = attend(qkv[0], qkv[1], qkv[2], cos, sin, head_dim, bounds, kbufs, vbufs, starts, masks, cases, scaling,
                    gqa);
  auto o = block_linear(got[0], o_pack, o_kind, o_out, got[0].size(-1), c10::nullopt);
  auto hx = residual_norm(h_in, o, post_w, post_eps);
  auto gu = block_group(hx[1], gu_packs, gu_kind, gu_splits);
  TORCH_CHECK(gu.size() == 2, "layer_body.q4_layer: gate and up");
  auto a = swiglu(gu[0], gu[1]);
  auto d = block_linear(a, d_pack, d_kind, d_out, a.size(-1), c10::nullopt);
  auto out = residual_norm(hx[0], d, next_w, next_eps);
  std::vector<at::Tensor> result{out[0], out[1]};
  for (size_t j = 1; j < got.size(); ++j) result.push_back(got[j]);
  return result;
}

// Every decoder layer of a pass as ONE call, for a model whose every layer q4_layer takes with its q/k/v and
// gate/up products stacked (gguf_blocks.stacked): q4_layer for layer 0, 1, ... in order, each on the previous one's
// (h, x), the same calls with the same arguments as the Python loop makes one layer at a time, so the same bits.
// Per layer l: weights[6l..6l+5] = q/k/v pack, o pack, gate/up pack, down pack, post-attention norm weight, the next
// norm's weight (the next layer's input norm, or the final norm); shapes[11l..11l+10] = q/k/v kind, q, k, v outputs,
// o kind, o outputs, gate/up kind, gate, up outputs, down kind, down outputs; eps[2l], eps[2l+1] the two norms';
// kbufs, vbufs, starts: [l * parts + j] for part j. bounds, masks, cases: every layer's (one per part).
// Returns [h, x]; layer l's cache views are its buffers' first starts[l * parts + j] + rows entries (the caller's).
std::vector<at::Tensor> q4_layers(const at::Tensor& h_in, const at::Tensor& x_in, const std::vector<at::Tensor>& weights,
                                  const std::vector<int64_t>& shapes, const std::vector<double>& eps,
                                  const at::Tensor& cos, const at::Tensor& sin, int64_t head_dim,
                                  const std::vector<int64_t>& bounds, const std::vector<at::Tensor>& kbufs,
                                  const std::vector<at::Tensor>& vbufs, const std::vector<int64_t>& starts,
                                  const std::vector<at::Tensor>& masks, const std::vector<int64_t>& cases,
                                  double scaling, bool gqa) {
  const size_t layers = eps.size() / 2, parts = masks.size();
  TORCH_CHECK(weights.size() == 6 * layers && shapes.size() == 11 * layers && kbufs.size() == layers * parts &&
                  vbufs.size() == layers * parts && starts.size() == layers * parts,
              "layer_body.q4_layers: six weights, eleven shapes, two eps per layer; a buffer pair and start per "
              "layer and part");
  at::Tensor h = h_in, x = x_in;
  for (size_t l = 0; l < layers; ++l) {
    const int64_t* sh = shapes.data() + 11 * l;
    const at::Tensor* w = weights.data() + 6 * l;
    const auto from = static_cast<std::ptrdiff_t>(l * parts), to = static_cast<std::ptrdiff_t>((l + 1) * parts);
    std::vector<at::Tensor> kb(kbufs.begin() + from, kbufs.begin() + to), vb(vbufs.begin() + from, vbufs.begin() + to);
    std::vector<int64_t> st(starts.begin() + from, starts.begin() + to);
    auto got = q4_layer(h, x, {w[0]}, sh[0], {sh[1], sh[2], sh[3]}, w[1], sh[4], sh[5], {w[2]}, sh[6], {sh[7], sh[8]},
                        w[3], sh[9], sh[10], w[4], eps[2 * l], w[5], eps[2 * l + 1], cos, sin, head_dim, bounds, kb, vb,
                        st, masks, cases, scaling, gqa);
    h = got[0];
    x = got[1];
  }
  return {h, x};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using release = pybind11::call_guard<pybind11::gil_scoped_release>;
  m.def("rms_norm", &rms_norm, "LlamaRMSNorm.forward", release());
  m.def("residual_norm", &residual_norm, "(h + y, rms_norm(h + y))", release());
  m.def("swiglu", &swiglu, "silu(gate) * up", release());
  m.def("attend", &attend, "rotary, cache append and attention per part", release());
  m.def("q4_layer", &q4_layer, "one decoder layer on the GGUF block kernel, as the C++ body's segments", release());
  m.def("q4_layers", &q4_layers, "every decoder layer of a pass, q4_layer after q4_layer", release());
}
