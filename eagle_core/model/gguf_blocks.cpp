// Linear products on a GGUF's own quantized blocks (Q4_1 and Q8_0), in fp32, with the weights llama.cpp's
// reference dequantization gives (gguf.quants.dequantize) bit for bit. Built at load by gguf_blocks.py.
//
// A weight matrix is kept as the file stores it: N rows (output features), each row K/32 blocks of 32 weights
//   Q4_1 (20 bytes): fp16 d, fp16 m, 16 bytes of nibbles (low nibbles weights 0..15, high nibbles 16..31);
//                    w = d * q + m
//   Q8_0 (34 bytes): fp16 d, 32 int8 q;  w = d * q
// d * q is exact in fp32 (an 11-bit significand times a 4- or 8-bit integer), so fma(d, q, m) rounds d*q + m once,
// as the reference's (d * q) + m does: the weights computed here equal the reference's exactly.
//
// (The loops over a tile's rows are unrolled: GCC otherwise keeps the accumulators on the stack.)
//
// Row independence: every output y[r, n] is computed by the same sequence of operations whatever other rows share
// the call (rows are tiled, but a row's accumulators and their order do not depend on the tile) and whatever the
// thread count (threads split the output features, never the sum). So a tree pass and one-token steps give every
// row the same bits (the kernel plan probes it anyway).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cstring>
#include <vector>
#include <cmath>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace {

constexpr int QK = 32;
constexpr int Q4_1_BYTES = 20;
constexpr int Q8_0_BYTES = 34;
constexpr int TILE = 4;   // rows sharing one dequantized block

inline float fp16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return static_cast<float>(c10::Half(h, c10::Half::from_bits()));
#endif
}

// The 32 weights of one block, exactly as the reference dequantization gives them.
inline void dequant_block(int type, const uint8_t* b, float* w) {
  const float d = fp16_at(b);
  if (type == 0) {   // Q4_1
    const float m = fp16_at(b + 2);
    const uint8_t* qs = b + 4;
    for (int j = 0; j < 16; ++j) {
      w[j] = std::fma(d, static_cast<float>(qs[j] & 0x0F), m);
      w[j + 16] = std::fma(d, static_cast<float>(qs[j] >> 4), m);
    }
  } else {           // Q8_0
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
    for (int j = 0; j < 32; ++j) w[j] = d * static_cast<float>(qs[j]);
  }
}

#if defined(__AVX512F__)
// One block of weights as two 16-lane vectors (weights 0..15, 16..31).
inline void block_vectors(int type, const uint8_t* b, __m512& w0, __m512& w1) {
  const __m512 d = _mm512_set1_ps(fp16_at(b));
  if (type == 0) {
    const __m512 m = _mm512_set1_ps(fp16_at(b + 2));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
    const __m128i lo = _mm_and_si128(q, _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0F));
    w0 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), m);
    w1 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), m);
  } else {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18));
    w0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)));
    w1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)));
  }
}

// y[r, n] for rows r0..r0+R-1 of x and one weight row (nb blocks), dequantizing in registers (one-row calls).
template <int R>
inline void dot_rows(int type, const uint8_t* row, int64_t nb, int64_t bytes, const float* x, int64_t K,
                     float* y, int64_t N) {
  __m512 a0[R], a1[R];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
  for (int64_t j = 0; j < nb; ++j) {
    __m512 w0, w1;
    block_vectors(type, row + j * bytes, w0, w1);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float* xr = x + r * K + j * QK;
      a0[r] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xr), a0[r]);
      a1[r] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xr + 16), a1[r]);
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) y[r * N] = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r]));
}

// The same sums for R rows and NT weight rows already dequantized (w: NT rows of K floats, the values
// block_vectors gives): each x load serves NT weight rows, each weight load R rows. Per output the operations
// are dot_rows' exactly (a0 over lanes 0..15 of every block, a1 over 16..31, then a0 + a1 summed), so a row's
// bits do not depend on which path or tile computed it.
template <int R, int NT>
inline void dot_tile(const float* w, int64_t nb, const float* x, int64_t K, float* y, int64_t N) {
  __m512 a0[R][NT], a1[R][NT];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) a0[r][t] = a1[r][t] = _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < nb; ++j) {
    __m512 w0[NT], w1[NT];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      w0[t] = _mm512_loadu_ps(w + t * K + j * QK);
      w1[t] = _mm512_loadu_ps(w + t * K + j * QK + 16);
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 x0 = _mm512_loadu_ps(x + r * K + j * QK), x1 = _mm512_loadu_ps(x + r * K + j * QK + 16);
      #pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        a0[r][t] = _mm512_fmadd_ps(w0[t], x0, a0[r][t]);
        a1[r][t] = _mm512_fmadd_ps(w1[t], x1, a1[r][t]);
      }
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) y[r * N + t] = _mm512_reduce_add_ps(_mm512_add_ps(a0[r][t], a1[r][t]));
  }
}

template <int NT>
inline void dot_all_rows(const float* w, int64_t nb, const float* x, int64_t M, int64_t K, float* y, int64_t N) {
  int64_t r = 0;
  for (; r + TILE <= M; r += TILE) dot_tile<TILE, NT>(w, nb, x + r * K, K, y + r * N, N);
  switch (M - r) {
    case 3: dot_tile<3, NT>(w, nb, x + r * K, K, y + r * N, N); break;
    case 2: dot_tile<2, NT>(w, nb, x + r * K, K, y + r * N, N); break;
    case 1: dot_tile<1, NT>(w, nb, x + r * K, K, y + r * N, N); break;
    default: break;
  }
}
#define HAVE_DOT_TILE 1
#else
// Without AVX-512: the same per-row sum (32 lanes, one per position in the block), in scalar code.
template <int R>
inline void dot_rows(int type, const uint8_t* row, int64_t nb, int64_t bytes, const float* x, int64_t K,
                     float* y, int64_t N) {
  float acc[R][QK] = {};
  float w[QK];
  for (int64_t j = 0; j < nb; ++j) {
    dequant_block(type, row + j * bytes, w);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float* xr = x + r * K + j * QK;
      for (int i = 0; i < QK; ++i) acc[r][i] = std::fma(w[i], xr[i], acc[r][i]);
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float s = 0.f;
    for (int i = 0; i < QK; ++i) s += acc[r][i];
    y[r * N] = s;
  }
}
#endif

int64_t block_bytes(int64_t type) {
  TORCH_CHECK(type == 0 || type == 1, "gguf_blocks: type 0 (Q4_1) or 1 (Q8_0), got ", type);
  return type == 0 ? Q4_1_BYTES : Q8_0_BYTES;
}

}  // namespace

// y = x @ W.T (+ bias) for x [M, K] fp32 and W the blocks [N, K/32 * bytes] uint8.
torch::Tensor block_linear(torch::Tensor x, torch::Tensor blocks, int64_t type, int64_t K,
                           c10::optional<torch::Tensor> bias) {
  const int64_t bytes = block_bytes(type);
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "gguf_blocks: x must be float32");
  TORCH_CHECK(K % QK == 0 && x.size(-1) == K, "gguf_blocks: x has ", x.size(-1), " features, the layer ", K);
  TORCH_CHECK(blocks.scalar_type() == torch::kUInt8 && blocks.is_contiguous() && blocks.dim() == 2 &&
              blocks.size(1) == K / QK * bytes, "gguf_blocks: blocks must be contiguous uint8 [N, K/32*bytes]");
  auto shape = x.sizes().vec();
  auto x2 = x.reshape({-1, K}).contiguous();
  const int64_t M = x2.size(0), N = blocks.size(0), nb = K / QK;
  shape.back() = N;
  auto y = torch::empty({M, N}, x.options());
  const float* xp = x2.data_ptr<float>();
  const uint8_t* wp = blocks.data_ptr<uint8_t>();
  float* yp = y.data_ptr<float>();
#if defined(HAVE_DOT_TILE)
  if (M > 1) {   // several rows: dequantize two weight rows at a time once, then every row tile reads them
    const int64_t pairs = (N + 1) / 2;
    at::parallel_for(0, pairs, 8, [&](int64_t p0, int64_t p1) {
      std::vector<float> w(2 * K);
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t n = 2 * p, nt = std::min<int64_t>(2, N - n);
        for (int64_t t = 0; t < nt; ++t)
          for (int64_t j = 0; j < nb; ++j) {
            __m512 w0, w1;
            block_vectors(type, wp + ((n + t) * nb + j) * bytes, w0, w1);
            _mm512_storeu_ps(w.data() + t * K + j * QK, w0);
            _mm512_storeu_ps(w.data() + t * K + j * QK + 16, w1);
          }
        if (nt == 2) dot_all_rows<2>(w.data(), nb, xp, M, K, yp + n, N);
        else dot_all_rows<1>(w.data(), nb, xp, M, K, yp + n, N);
      }
    });
  } else
#endif
  at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const uint8_t* row = wp + n * nb * bytes;
      int64_t r = 0;
      for (; r + TILE <= M; r += TILE) dot_rows<TILE>(type, row, nb, bytes, xp + r * K, K, yp + r * N + n, N);
      switch (M - r) {
        case 3: dot_rows<3>(type, row, nb, bytes, xp + r * K, K, yp + r * N + n, N); break;
        case 2: dot_rows<2>(type, row, nb, bytes, xp + r * K, K, yp + r * N + n, N); break;
        case 1: dot_rows<1>(type, row, nb, bytes, xp + r * K, K, yp + r * N + n, N); break;
        default: break;
      }
    }
  });
  if (bias.has_value() && bias->defined()) y.add_(*bias);
  return y.view(shape);
}

// The weights the kernel computes with, [N, K] fp32 (for checks: they must equal the reference dequantization).
torch::Tensor block_weights(torch::Tensor blocks, int64_t type, int64_t K) {
  const int64_t bytes = block_bytes(type);
  TORCH_CHECK(blocks.scalar_type() == torch::kUInt8 && blocks.is_contiguous() && blocks.dim() == 2 &&
              blocks.size(1) == K / QK * bytes, "gguf_blocks: blocks must be contiguous uint8 [N, K/32*bytes]");
  const int64_t N = blocks.size(0), nb = K / QK;
  auto w = torch::empty({N, K}, torch::kFloat32);
  const uint8_t* bp = blocks.data_ptr<uint8_t>();
  float* out = w.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < nb; ++j) {
#if defined(__AVX512F__)
      __m512 w0, w1;   // the matmul's own path
      block_vectors(type, bp + (n * nb + j) * bytes, w0, w1);
      _mm512_storeu_ps(out + n * K + j * QK, w0);
      _mm512_storeu_ps(out + n * K + j * QK + 16, w1);
#else
      dequant_block(type, bp + (n * nb + j) * bytes, out + n * K + j * QK);
#endif
    }
  return w;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("block_linear", &block_linear, "x @ W.T on GGUF blocks (Q4_1: type 0, Q8_0: type 1)");
  m.def("block_weights", &block_weights, "the weights of GGUF blocks, as block_linear computes with them");
}
