// Linear products on a GGUF's own quantized blocks (Q4_1 and Q8_0), in fp32, with the weights llama.cpp's
// reference dequantization gives (gguf.quants.dequantize) bit for bit. Built at load by gguf_blocks.py.
//
// The file stores a weight matrix as N rows (output features), each K/32 blocks of 32 weights:
//   Q4_1 (20 bytes): fp16 d, fp16 m, 16 bytes of nibbles (low nibbles weights 0..15, high nibbles 16..31);
//                    w = d * q + m
//   Q8_0 (34 bytes): fp16 d, 32 int8 q;  w = d * q
// gguf_blocks.pack() regroups the same bytes into panels of 16 output rows (zero rows pad N to a multiple of 64),
// so that one input column's 16 weights are one vector load apart (a GEMM's layout: outputs across the lanes):
//   Q4_1 panel block (320 bytes): fp16 d[16], fp16 m[16], then 16 column pairs of 16 bytes: byte t of pair c holds
//                                 row t's q at column 2c (low nibble) and at column 2c + 1 (high nibble)
//   Q8_0 panel block (544 bytes): fp16 d[16], then 32 columns of 16 int8: byte t of column k is row t's q
// d * q is exact in fp32 (an 11-bit significand times a 4- or 8-bit integer), so fma(d, q, m) rounds d*q + m once,
// as the reference's (d * q) + m does: the weights computed here equal the reference's exactly.
//
// The sum: y[r, n] = fma(w[n, K-1], x[r, K-1], ... fma(w[n, 1], x[r, 1], fma(w[n, 0], x[r, 0], 0))), one fp32
// accumulator per output, the columns in order. Every path below (registers for a few rows, a dequantized buffer
// for many, the scalar code without AVX-512) performs exactly that sequence, so each output has the same bits
// whatever other rows share the call, and whatever the thread count (threads split groups of 64 outputs, never a
// sum): row-independent by construction (the kernel plan probes it anyway). Each input value is broadcast across
// 16 outputs, so no horizontal sum is needed, and a weight vector serves every row of a tile.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cstring>
#include <cmath>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

constexpr int QK = 32;          // weights per block
constexpr int PANEL = 16;       // output rows per panel
constexpr int GROUP = 4;        // panels per group: 64 outputs, one unit of work per thread
constexpr int Q4_1_BYTES = 20, Q8_0_BYTES = 34;
constexpr int DIRECT_ROWS = 16; // up to this many rows: dequantize in registers; more: into a buffer first
constexpr int TILE = 6;         // rows per tile on the buffered path (6 x 4 accumulators + 4 weights in 32 zmm)
constexpr int CHUNK = 2;        // blocks per buffered chunk: 64 columns x 64 outputs x 4 bytes = 16 KB (L1)

int64_t panel_bytes(int64_t type) {
  TORCH_CHECK(type == 0 || type == 1, "gguf_blocks: type 0 (Q4_1) or 1 (Q8_0), got ", type);
  return type == 0 ? 16 * Q4_1_BYTES : 16 * Q8_0_BYTES;
}

[[maybe_unused]] float fp16_value(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return static_cast<float>(c10::Half(h, c10::Half::from_bits()));
}

// Row t's weight at column k of one panel block (the scalar reference of the vector code below).
[[maybe_unused]] inline float panel_weight(int type, const uint8_t* pb, int t, int k) {
  const float d = fp16_value(pb + 2 * t);
  if (type == 0) {
    const uint8_t b = pb[64 + 16 * (k / 2) + t];
    return std::fma(d, static_cast<float>(k % 2 ? b >> 4 : b & 0x0F), fp16_value(pb + 32 + 2 * t));
  }
  return d * static_cast<float>(reinterpret_cast<const int8_t*>(pb + 32)[16 * k + t]);
}

// Which of a panel's 16 lanes are real outputs (the last group's panels may hang over N).
inline uint16_t lane_mask(int64_t n0, int64_t N) {
  const int64_t rem = N - n0;
  return rem >= PANEL ? 0xFFFF : rem <= 0 ? 0 : static_cast<uint16_t>((1u << rem) - 1);
}

#if defined(__AVX512F__)
inline __m512 fp16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// The 16 rows' weights at columns 2c and 2c + 1 of one panel block (d, m: the rows' scales and minimums).
template <int TYPE>
inline void column_pair(const uint8_t* pb, int c, __m512 d, __m512 m, __m512& w0, __m512& w1) {
  if (TYPE == 0) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + 64 + 16 * c));
    const __m128i lo = _mm_and_si128(q, _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0F));
    w0 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), m);
    w1 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), m);
  } else {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + 32 + 32 * c));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + 48 + 32 * c));
    w0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)));
    w1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)));
  }
}

// A few rows (R <= 8) against P panels of one group (from panel p0): each column pair is dequantized in
// registers and used by every row at once (R x P accumulators: P = 4 up to 4 rows, 2 for 5-8).
// g: the group's first panel block; pbytes: one panel block's bytes.
template <int TYPE, int R, int P>
void panels_direct(const uint8_t* g, int p0, int64_t nb, int64_t pbytes, const float* x, int64_t K, float* y,
                   int64_t N, int64_t n0) {
  __m512 acc[R][P];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 4
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t j = 0; j < nb; ++j) {
    const uint8_t* pb[P];
    __m512 d[P], m[P];
    #pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      pb[p] = g + ((p0 + p) * nb + j) * pbytes;
      d[p] = fp16x16(pb[p]);
      m[p] = TYPE == 0 ? fp16x16(pb[p] + 32) : _mm512_setzero_ps();
    }
    for (int c = 0; c < QK / 2; ++c) {
      #pragma GCC unroll 4
      for (int p = 0; p < P; ++p) {   // the panels' sums are independent chains: interleaved
        __m512 w0, w1;
        column_pair<TYPE>(pb[p], c, d[p], m[p], w0, w1);
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const float* xr = x + r * K + j * QK + 2 * c;
          acc[r][p] = _mm512_fmadd_ps(w0, _mm512_set1_ps(xr[0]), acc[r][p]);
          acc[r][p] = _mm512_fmadd_ps(w1, _mm512_set1_ps(xr[1]), acc[r][p]);
        }
      }
    }
  }
  #pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
    const int64_t n = n0 + (p0 + p) * PANEL;
    const __mmask16 mask = lane_mask(n, N);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y + r * N + n, mask, acc[r][p]);
  }
}

// R rows (1..8) against a whole group on the register path.
template <int TYPE, int R>
void group_direct(const uint8_t* g, int64_t nb, int64_t pbytes, const float* x, int64_t K, float* y, int64_t N,
                  int64_t n0) {
  if constexpr (R <= 4) {
    panels_direct<TYPE, R, GROUP>(g, 0, nb, pbytes, x, K, y, N, n0);
  } else {
    panels_direct<TYPE, R, 2>(g, 0, nb, pbytes, x, K, y, N, n0);
    panels_direct<TYPE, R, 2>(g, 2, nb, pbytes, x, K, y, N, n0);
  }
}

// R rows of a buffered chunk: w holds the group's weights for `cols` columns, [cols][GROUP][16]. The running sums
// live in y between chunks (stored and reloaded as fp32: the same values the registers held).
template <int R>
void tile_buffered(const float* w, int64_t cols, bool first, const float* x, int64_t K, float* y, int64_t N,
                   int64_t n0) {
  __m512 acc[R][GROUP];
  __mmask16 mask[GROUP];
  #pragma GCC unroll 4
  for (int p = 0; p < GROUP; ++p) mask[p] = lane_mask(n0 + p * PANEL, N);
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 4
    for (int p = 0; p < GROUP; ++p)
      acc[r][p] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask[p], y + r * N + n0 + p * PANEL);
  for (int64_t k = 0; k < cols; ++k) {
    __m512 wk[GROUP];
    #pragma GCC unroll 4
    for (int p = 0; p < GROUP; ++p) wk[p] = _mm512_loadu_ps(w + (k * GROUP + p) * PANEL);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xb = _mm512_set1_ps(x[r * K + k]);
      #pragma GCC unroll 4
      for (int p = 0; p < GROUP; ++p) acc[r][p] = _mm512_fmadd_ps(wk[p], xb, acc[r][p]);
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 4
    for (int p = 0; p < GROUP; ++p) _mm512_mask_storeu_ps(y + r * N + n0 + p * PANEL, mask[p], acc[r][p]);
}

// Many rows against one group: a chunk of columns is dequantized once into an L1 buffer, then every row tile
// reads it.
template <int TYPE>
void group_buffered( const uint8_t* g, int64_t nb, int64_t pbytes, const float* x, int64_t M, int64_t K,
                    float* y, int64_t N, int64_t n0) {
  alignas(64) float w[CHUNK * QK * GROUP * PANEL];
  for (int64_t j0 = 0; j0 < nb; j0 += CHUNK) {
    const int64_t blocks = std::min<int64_t>(CHUNK, nb - j0), cols = blocks * QK;
    for (int64_t jb = 0; jb < blocks; ++jb)
      for (int p = 0; p < GROUP; ++p) {
        const uint8_t* pb = g + (p * nb + j0 + jb) * pbytes;
        const __m512 d = fp16x16(pb), m = TYPE == 0 ? fp16x16(pb + 32) : _mm512_setzero_ps();
        for (int c = 0; c < QK / 2; ++c) {
          __m512 w0, w1;
          column_pair<TYPE>(pb, c, d, m, w0, w1);
          const int64_t k = jb * QK + 2 * c;
          _mm512_store_ps(w + (k * GROUP + p) * PANEL, w0);
          _mm512_store_ps(w + ((k + 1) * GROUP + p) * PANEL, w1);
        }
      }
    const float* xc = x + j0 * QK;
    const bool first = j0 == 0;
    int64_t r = 0;
    for (; r + TILE <= M; r += TILE) tile_buffered<TILE>(w, cols, first, xc + r * K, K, y + r * N, N, n0);
    switch (M - r) {
      case 5: tile_buffered<5>(w, cols, first, xc + r * K, K, y + r * N, N, n0); break;
      case 4: tile_buffered<4>(w, cols, first, xc + r * K, K, y + r * N, N, n0); break;
      case 3: tile_buffered<3>(w, cols, first, xc + r * K, K, y + r * N, N, n0); break;
      case 2: tile_buffered<2>(w, cols, first, xc + r * K, K, y + r * N, N, n0); break;
      case 1: tile_buffered<1>(w, cols, first, xc + r * K, K, y + r * N, N, n0); break;
      default: break;
    }
  }
}

template <int TYPE>
void rows_direct(const uint8_t* g, int64_t nb, int64_t pbytes, const float* x, int64_t R, int64_t K, float* y,
                 int64_t N, int64_t n0) {
  switch (R) {
    case 1: group_direct<TYPE, 1>(g, nb, pbytes, x, K, y, N, n0); break;
    case 2: group_direct<TYPE, 2>(g, nb, pbytes, x, K, y, N, n0); break;
    case 3: group_direct<TYPE, 3>(g, nb, pbytes, x, K, y, N, n0); break;
    case 4: group_direct<TYPE, 4>(g, nb, pbytes, x, K, y, N, n0); break;
    case 5: group_direct<TYPE, 5>(g, nb, pbytes, x, K, y, N, n0); break;
    case 6: group_direct<TYPE, 6>(g, nb, pbytes, x, K, y, N, n0); break;
    case 7: group_direct<TYPE, 7>(g, nb, pbytes, x, K, y, N, n0); break;
    case 8: group_direct<TYPE, 8>(g, nb, pbytes, x, K, y, N, n0); break;
    default: TORCH_CHECK(false, "gguf_blocks: a register tile has 1 to 8 rows");
  }
}

// Up to DIRECT_ROWS rows: tiles of 8 on the register path (re-dequantizing per tile costs less than a buffer's
// stores and loads at these sizes); more: the buffered path.
template <int TYPE>
void group_typed(const uint8_t* g, int64_t nb, int64_t pbytes, const float* x, int64_t M, int64_t K, float* y,
                 int64_t N, int64_t n0) {
  if (M > DIRECT_ROWS) {
    group_buffered<TYPE>(g, nb, pbytes, x, M, K, y, N, n0);
    return;
  }
  for (int64_t r = 0; r < M; r += 8)
    rows_direct<TYPE>(g, nb, pbytes, x + r * K, std::min<int64_t>(8, M - r), K, y + r * N, N, n0);
}

void group_product(int type, const uint8_t* g, int64_t nb, int64_t pbytes, const float* x, int64_t M, int64_t K,
                   float* y, int64_t N, int64_t n0) {
  if (type == 0) group_typed<0>(g, nb, pbytes, x, M, K, y, N, n0);
  else group_typed<1>(g, nb, pbytes, x, M, K, y, N, n0);
}
#else
// Without AVX-512: the same sums in scalar code (the same fma per column, in column order).
void group_product(int type, const uint8_t* g, int64_t nb, int64_t pbytes, const float* x, int64_t M, int64_t K,
                   float* y, int64_t N, int64_t n0) {
  for (int p = 0; p < GROUP; ++p)
    for (int t = 0; t < PANEL; ++t) {
      const int64_t n = n0 + p * PANEL + t;
      if (n >= N) return;
      for (int64_t r = 0; r < M; ++r) {
        float acc = 0.f;
        for (int64_t j = 0; j < nb; ++j) {
          const uint8_t* pb = g + (p * nb + j) * pbytes;
          for (int k = 0; k < QK; ++k) acc = std::fma(panel_weight(type, pb, t, k), x[r * K + j * QK + k], acc);
        }
        y[r * N + n] = acc;
      }
    }
}
#endif

void check_packed(const torch::Tensor& packed, int64_t type, int64_t N, int64_t K) {
  const int64_t pbytes = panel_bytes(type);
  TORCH_CHECK(K % QK == 0, "gguf_blocks: in_features must be a multiple of 32, got ", K);
  const int64_t groups = (N + GROUP * PANEL - 1) / (GROUP * PANEL);
  TORCH_CHECK(packed.scalar_type() == torch::kUInt8 && packed.is_contiguous() && packed.dim() == 3 &&
              packed.size(0) == groups * GROUP && packed.size(1) == K / QK && packed.size(2) == pbytes,
              "gguf_blocks: packed must be contiguous uint8 [", groups * GROUP, ", ", K / QK, ", ", pbytes, "]");
}

}  // namespace

// y = x @ W.T (+ bias) for x [..., K] fp32 and W the packed panels (gguf_blocks.pack) of an [N, K] weight.
torch::Tensor block_linear(torch::Tensor x, torch::Tensor packed, int64_t type, int64_t N, int64_t K,
                           c10::optional<torch::Tensor> bias) {
  check_packed(packed, type, N, K);
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "gguf_blocks: x must be float32");
  TORCH_CHECK(x.size(-1) == K, "gguf_blocks: x has ", x.size(-1), " features, the layer ", K);
  auto shape = x.sizes().vec();
  auto x2 = x.reshape({-1, K}).contiguous();
  const int64_t M = x2.size(0), nb = K / QK, pbytes = panel_bytes(type);
  shape.back() = N;
  auto y = torch::empty({M, N}, x.options());
  const float* xp = x2.data_ptr<float>();
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  float* yp = y.data_ptr<float>();
  if (M > 0)
    at::parallel_for(0, packed.size(0) / GROUP, 1, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g)
        group_product(type, wp + g * GROUP * nb * pbytes, nb, pbytes, xp, M, K, yp, N, g * GROUP * PANEL);
    });
  if (bias.has_value() && bias->defined()) y.add_(*bias);
  return y.view(shape);
}

// The weights the kernel computes with, [N, K] fp32 (for checks: they must equal the reference dequantization).
torch::Tensor block_weights(torch::Tensor packed, int64_t type, int64_t N, int64_t K) {
  check_packed(packed, type, N, K);
  const int64_t nb = K / QK, pbytes = panel_bytes(type);
  auto w = torch::empty({N, K}, torch::kFloat32);
  const uint8_t* bp = packed.data_ptr<uint8_t>();
  float* out = w.data_ptr<float>();
  for (int64_t p = 0; p * PANEL < N; ++p)
    for (int64_t j = 0; j < nb; ++j) {
      const uint8_t* pb = bp + (p * nb + j) * pbytes;
      const int rows = static_cast<int>(std::min<int64_t>(PANEL, N - p * PANEL));
#if defined(__AVX512F__)
      const __m512 d = fp16x16(pb), m = type == 0 ? fp16x16(pb + 32) : _mm512_setzero_ps();
      for (int c = 0; c < QK / 2; ++c) {   // the matmul's own dequantization
        alignas(64) float col[2][PANEL];
        __m512 w0, w1;
        if (type == 0) column_pair<0>(pb, c, d, m, w0, w1);
        else column_pair<1>(pb, c, d, m, w0, w1);
        _mm512_store_ps(col[0], w0);
        _mm512_store_ps(col[1], w1);
        for (int t = 0; t < rows; ++t)
          for (int h = 0; h < 2; ++h) out[(p * PANEL + t) * K + j * QK + 2 * c + h] = col[h][t];
      }
#else
      for (int t = 0; t < rows; ++t)
        for (int k = 0; k < QK; ++k) out[(p * PANEL + t) * K + j * QK + k] = panel_weight(type, pb, t, k);
#endif
    }
  return w;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("block_linear", &block_linear, "x @ W.T on packed GGUF blocks (Q4_1: type 0, Q8_0: type 1)");
  m.def("block_weights", &block_weights, "the weights of packed GGUF blocks, as block_linear computes with them");
}
