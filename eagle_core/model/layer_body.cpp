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

#include <algorithm>
#include <cmath>
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
        if (cases[j] == F64_MASK) mask = masks[j].slice(3, 0, keys.size(2)).to(at::kDouble);
        o = small_query(qp.to(at::kDouble), keys, values, cases[j] == F64_MASK ? &mask : nullptr, scaling);
        o = o.to(qp.scalar_type()).transpose(1, 2).contiguous();
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

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using release = pybind11::call_guard<pybind11::gil_scoped_release>;
  m.def("rms_norm", &rms_norm, "LlamaRMSNorm.forward", release());
  m.def("residual_norm", &residual_norm, "(h + y, rms_norm(h + y))", release());
  m.def("swiglu", &swiglu, "silu(gate) * up", release());
  m.def("attend", &attend, "rotary, cache append and attention per part", release());
}
