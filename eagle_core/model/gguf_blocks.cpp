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
// for many; AVX-512, AVX2, or the scalar code) performs exactly that sequence, so each output has the same bits
// whatever other rows share the call, whatever the thread count (threads split groups of 64 outputs, never a
// sum) and whatever the CPU: row-independent by construction (the kernel plan probes it anyway). Each input value
// is broadcast across 16 outputs, so no horizontal sum is needed, and a weight vector serves every row of a tile.
//
// The paths (chosen at compile time; built with -march=native; vector_path() says which):
//   avx512  __AVX512F__: a panel's 16 lanes are one zmm
//   avx2    __AVX2__ + __FMA__ + __F16C__ (no AVX-512, e.g. AMD Zen 2/3): two ymm, lanes 0-7 and 8-15
//   scalar  otherwise: one weight at a time (panel_weight), the same fma per column
// The two vector paths share the tile templates, written on a few lane-wise functions (Lanes, madd, ...); only the
// register tile shapes differ (32 zmm against 16 ymm), and tile shapes change no bits, only speed.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cstring>
#include <cmath>
#if defined(__AVX512F__)
#define GGUF_VEC 512            // 16 lanes: one zmm
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define GGUF_VEC 256            // 16 lanes: two ymm
#endif
#if defined(GGUF_VEC)
#include <immintrin.h>
#endif

namespace {

constexpr int QK = 32;          // weights per block
constexpr int PANEL = 16;       // output rows per panel
constexpr int GROUP = 4;        // panels per group: 64 outputs, one unit of work per thread
constexpr int Q4_1_BYTES = 20, Q8_0_BYTES = 34;
constexpr int DIRECT_ROWS = 16; // up to this many rows: dequantize in registers; more: into a buffer first
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

#if defined(GGUF_VEC)
// A panel's 16 lanes (16 outputs) in registers: one zmm with AVX-512, two ymm (lanes 0-7, 8-15) with AVX2. Every
// operation on them is lane-wise and the same IEEE operation in either ISA (fma, mul, exact int -> float), so the
// two paths compute the same bits; the tile templates below are written once, on these few functions.
#if GGUF_VEC == 512
struct Lanes { __m512 v; };
using Bcast = __m512;            // one input value in every lane
using Mask = __mmask16;          // which lanes are real outputs

inline Lanes zero() { return {_mm512_setzero_ps()}; }
inline Bcast bcast(float x) { return _mm512_set1_ps(x); }
inline Lanes madd(Lanes w, Bcast x, Lanes acc) { return {_mm512_fmadd_ps(w.v, x, acc.v)}; }
inline Lanes fmadd(Lanes a, Lanes b, Lanes c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline Lanes mul(Lanes a, Lanes b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline Lanes fp16x16(const uint8_t* p) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
// Q4_1: 16 bytes of nibble pairs -> the low nibbles' and the high nibbles' 16 values (exact as floats)
inline void nibbles(const uint8_t* p, Lanes& lo, Lanes& hi) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), low = _mm_set1_epi8(0x0F);
  lo = {_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(q, low)))};
  hi = {_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), low)))};
}
// Q8_0: 16 int8 -> 16 floats (exact)
inline Lanes int8s(const uint8_t* p) {
  return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))))};
}
inline Lanes load(const float* p) { return {_mm512_load_ps(p)}; }                           // 64-byte aligned
inline void store(float* p, Lanes a) { _mm512_store_ps(p, a.v); }
inline Mask lanes(int64_t n0, int64_t N) { return lane_mask(n0, N); }
inline Lanes load_masked(const float* p, Mask k) { return {_mm512_maskz_loadu_ps(k, p)}; }
inline void store_masked(float* p, Mask k, Lanes a) { _mm512_mask_storeu_ps(p, k, a.v); }

// Register tiles (32 zmm): the register path R rows x 4 panels up to 4 rows, x 2 panels for 5-8; the buffered
// path 6 rows x 4 panels (24 accumulators + 4 weights).
constexpr int DIRECT_TILE = 8;
constexpr int direct_panels(int R) { return R <= 4 ? 4 : 2; }
constexpr int TILE = 6, TILE_PANELS = 4;
#else
struct Lanes { __m256 lo, hi; };
using Bcast = __m256;
struct Mask { int64_t real; };   // how many lanes are real outputs (16: all, the common case)

inline Lanes zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline Bcast bcast(float x) { return _mm256_set1_ps(x); }
inline Lanes madd(Lanes w, Bcast x, Lanes acc) {
  return {_mm256_fmadd_ps(w.lo, x, acc.lo), _mm256_fmadd_ps(w.hi, x, acc.hi)};
}
inline Lanes fmadd(Lanes a, Lanes b, Lanes c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
inline Lanes mul(Lanes a, Lanes b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline Lanes fp16x16(const uint8_t* p) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)))};
}
// widened from memory 8 bytes at a time (one instruction each), the nibbles split as 32-bit ints
inline __m256i u8x8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline void nibbles(const uint8_t* p, Lanes& lo, Lanes& hi) {
  const __m256i q0 = u8x8(p), q1 = u8x8(p + 8), low = _mm256_set1_epi32(0x0F);
  lo = {_mm256_cvtepi32_ps(_mm256_and_si256(q0, low)), _mm256_cvtepi32_ps(_mm256_and_si256(q1, low))};
  hi = {_mm256_cvtepi32_ps(_mm256_srli_epi32(q0, 4)), _mm256_cvtepi32_ps(_mm256_srli_epi32(q1, 4))};
}
inline __m256 i8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline Lanes int8s(const uint8_t* p) { return {i8x8(p), i8x8(p + 8)}; }
inline Lanes load(const float* p) { return {_mm256_load_ps(p), _mm256_load_ps(p + 8)}; }
inline void store(float* p, Lanes a) { _mm256_store_ps(p, a.lo); _mm256_store_ps(p + 8, a.hi); }
inline Mask lanes(int64_t n0, int64_t N) { return {std::clamp<int64_t>(N - n0, 0, PANEL)}; }
// vmaskmovps for a panel hanging over N only (it is slow on some CPUs); masked-off lanes are not touched
inline __m256i first_lanes(int64_t real) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(real)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline Lanes load_masked(const float* p, Mask k) {
  if (k.real == PANEL) return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
  return {_mm256_maskload_ps(p, first_lanes(k.real)), _mm256_maskload_ps(p + 8, first_lanes(k.real - 8))};
}
inline void store_masked(float* p, Mask k, Lanes a) {
  if (k.real == PANEL) {
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
  } else if (k.real > 0) {
    _mm256_maskstore_ps(p, first_lanes(k.real), a.lo);
    _mm256_maskstore_ps(p + 8, first_lanes(k.real - 8), a.hi);
  }
}

// Register tiles (16 ymm, 2 per panel): at most 12 accumulators, R rows x P panels (1 row x 4, 2-3 x 2, 4-6 x 1);
// the buffered path 6 rows x 1 panel (measured faster than 3 x 2 or 2 x 2 on a Zen 3).
constexpr int DIRECT_TILE = 6;
constexpr int direct_panels(int R) { return R <= 1 ? 4 : R <= 3 ? 2 : 1; }
constexpr int TILE = 6, TILE_PANELS = 1;
#endif

// The 16 rows' weights at columns 2c and 2c + 1 of one panel block (d, m: the rows' scales and minimums).
template <int TYPE>
inline void column_pair(const uint8_t* pb, int c, Lanes d, Lanes m, Lanes& w0, Lanes& w1) {
  if (TYPE == 0) {
    Lanes q0, q1;
    nibbles(pb + 64 + 16 * c, q0, q1);
    w0 = fmadd(d, q0, m);
    w1 = fmadd(d, q1, m);
  } else {
    w0 = mul(d, int8s(pb + 32 + 32 * c));
    w1 = mul(d, int8s(pb + 48 + 32 * c));
  }
}

// A few rows (R <= DIRECT_TILE) against P panels of one group (from panel p0): each column pair is dequantized in
// registers and used by every row at once (R x P accumulators). g: the group's first panel block; pbytes: one
// panel block's bytes.
template <int TYPE, int R, int P>
void panels_direct(const uint8_t* g, int p0, int64_t nb, int64_t pbytes, const float* x, int64_t K, float* y,
                   int64_t N, int64_t n0) {
  Lanes acc[R][P];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 4
    for (int p = 0; p < P; ++p) acc[r][p] = zero();
  for (int64_t j = 0; j < nb; ++j) {
    const uint8_t* pb[P];
    Lanes d[P], m[P];
    #pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      pb[p] = g + ((p0 + p) * nb + j) * pbytes;
      d[p] = fp16x16(pb[p]);
      m[p] = TYPE == 0 ? fp16x16(pb[p] + 32) : zero();
    }
    for (int c = 0; c < QK / 2; ++c) {
      #pragma GCC unroll 4
      for (int p = 0; p < P; ++p) {   // the panels' sums are independent chains: interleaved
        Lanes w0, w1;
        column_pair<TYPE>(pb[p], c, d[p], m[p], w0, w1);
        const float* xc = x + j * QK + 2 * c;
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r][p] = madd(w0, bcast(xc[r * K]), acc[r][p]);       // column 2c,
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r][p] = madd(w1, bcast(xc[r * K + 1]), acc[r][p]);   // then 2c + 1
      }
    }
  }
  #pragma GCC unroll 4
  for (int p = 0; p < P; ++p) {
    const int64_t n = n0 + (p0 + p) * PANEL;
    const Mask mask = lanes(n, N);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) store_masked(y + r * N + n, mask, acc[r][p]);
  }
}

// R rows against a whole group on the register path, P = direct_panels(R) panels at a time.
template <int TYPE, int R>
void group_direct(const uint8_t* g, int64_t nb, int64_t pbytes, const float* x, int64_t K, float* y, int64_t N,
                  int64_t n0) {
  constexpr int P = direct_panels(R);
  for (int p0 = 0; p0 < GROUP; p0 += P) panels_direct<TYPE, R, P>(g, p0, nb, pbytes, x, K, y, N, n0);
}

// `rows` (1..R) rows on the register path: a tile of exactly `rows` rows.
template <int TYPE, int R = DIRECT_TILE>
void rows_direct(const uint8_t* g, int64_t nb, int64_t pbytes, const float* x, int64_t rows, int64_t K, float* y,
                 int64_t N, int64_t n0) {
  if constexpr (R > 1)
    if (rows < R) return rows_direct<TYPE, R - 1>(g, nb, pbytes, x, rows, K, y, N, n0);
  group_direct<TYPE, R>(g, nb, pbytes, x, K, y, N, n0);
}

// R rows x P panels (from p0) of a buffered chunk: w holds the group's weights for `cols` columns,
// [cols][GROUP][16]. The running sums live in y between chunks (stored and reloaded as fp32: the same values the
// registers held).
template <int R, int P>
void tile_buffered(const float* w, int p0, int64_t cols, bool first, const float* x, int64_t K, float* y,
                   int64_t N, int64_t n0) {
  Lanes acc[R][P];
  Mask mask[P];
  #pragma GCC unroll 4
  for (int p = 0; p < P; ++p) mask[p] = lanes(n0 + (p0 + p) * PANEL, N);
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 4
    for (int p = 0; p < P; ++p)
      acc[r][p] = first ? zero() : load_masked(y + r * N + n0 + (p0 + p) * PANEL, mask[p]);
  for (int64_t k = 0; k < cols; ++k) {
    Lanes wk[P];
    #pragma GCC unroll 4
    for (int p = 0; p < P; ++p) wk[p] = load(w + (k * GROUP + p0 + p) * PANEL);
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const Bcast xb = bcast(x[r * K + k]);
      #pragma GCC unroll 4
      for (int p = 0; p < P; ++p) acc[r][p] = madd(wk[p], xb, acc[r][p]);
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 4
    for (int p = 0; p < P; ++p) store_masked(y + r * N + n0 + (p0 + p) * PANEL, mask[p], acc[r][p]);
}

// `rows` (1..R) rows of a buffered chunk, the whole group: a tile of exactly `rows` rows.
template <int R = TILE>
void rows_buffered(const float* w, int64_t rows, int64_t cols, bool first, const float* x, int64_t K, float* y,
                   int64_t N, int64_t n0) {
  if constexpr (R > 1)
    if (rows < R) return rows_buffered<R - 1>(w, rows, cols, first, x, K, y, N, n0);
  for (int p0 = 0; p0 < GROUP; p0 += TILE_PANELS) tile_buffered<R, TILE_PANELS>(w, p0, cols, first, x, K, y, N, n0);
}

// Many rows against one group: a chunk of columns is dequantized once into an L1 buffer, then every row tile
// reads it.
template <int TYPE>
void group_buffered(const uint8_t* g, int64_t nb, int64_t pbytes, const float* x, int64_t M, int64_t K,
                    float* y, int64_t N, int64_t n0) {
  alignas(64) float w[CHUNK * QK * GROUP * PANEL];
  for (int64_t j0 = 0; j0 < nb; j0 += CHUNK) {
    const int64_t blocks = std::min<int64_t>(CHUNK, nb - j0), cols = blocks * QK;
    for (int64_t jb = 0; jb < blocks; ++jb)
      for (int p = 0; p < GROUP; ++p) {
        const uint8_t* pb = g + (p * nb + j0 + jb) * pbytes;
        const Lanes d = fp16x16(pb), m = TYPE == 0 ? fp16x16(pb + 32) : zero();
        for (int c = 0; c < QK / 2; ++c) {
          Lanes w0, w1;
          column_pair<TYPE>(pb, c, d, m, w0, w1);
          const int64_t k = jb * QK + 2 * c;
          store(w + (k * GROUP + p) * PANEL, w0);
          store(w + ((k + 1) * GROUP + p) * PANEL, w1);
        }
      }
    const float* xc = x + j0 * QK;
    for (int64_t r = 0; r < M; r += TILE)
      rows_buffered(w, std::min<int64_t>(TILE, M - r), cols, j0 == 0, xc + r * K, K, y + r * N, N, n0);
  }
}

// Up to DIRECT_ROWS rows: tiles of DIRECT_TILE on the register path (re-dequantizing per tile costs less than a
// buffer's stores and loads at these sizes); more: the buffered path.
template <int TYPE>
void group_typed(const uint8_t* g, int64_t nb, int64_t pbytes, const float* x, int64_t M, int64_t K, float* y,
                 int64_t N, int64_t n0) {
  if (M > DIRECT_ROWS) {
    group_buffered<TYPE>(g, nb, pbytes, x, M, K, y, N, n0);
    return;
  }
  for (int64_t r = 0; r < M; r += DIRECT_TILE)
    rows_direct<TYPE>(g, nb, pbytes, x + r * K, std::min<int64_t>(DIRECT_TILE, M - r), K, y + r * N, N, n0);
}

void group_product(int type, const uint8_t* g, int64_t nb, int64_t pbytes, const float* x, int64_t M, int64_t K,
                   float* y, int64_t N, int64_t n0) {
  if (type == 0) group_typed<0>(g, nb, pbytes, x, M, K, y, N, n0);
  else group_typed<1>(g, nb, pbytes, x, M, K, y, N, n0);
}
#else
// Without a vector path: the same sums in scalar code (the same fma per column, in column order).
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
#if defined(GGUF_VEC)
      const Lanes d = fp16x16(pb), m = type == 0 ? fp16x16(pb + 32) : zero();
      for (int c = 0; c < QK / 2; ++c) {   // the matmul's own dequantization
        alignas(64) float col[2][PANEL];
        Lanes w0, w1;
        if (type == 0) column_pair<0>(pb, c, d, m, w0, w1);
        else column_pair<1>(pb, c, d, m, w0, w1);
        store(col[0], w0);
        store(col[1], w1);
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

// Which path this build runs: "avx512", "avx2" or "scalar" (all give the same bits).
std::string vector_path() {
#if defined(GGUF_VEC)
  return GGUF_VEC == 512 ? "avx512" : "avx2";
#else
  return "scalar";
#endif
}

#ifndef EAGLE_GGUF_BLOCKS_INCLUDED   // layer_body.cpp includes this file for its q4 layer: one module each
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("block_linear", &block_linear, "x @ W.T on packed GGUF blocks (Q4_1: type 0, Q8_0: type 1)");
  m.def("block_weights", &block_weights, "the weights of packed GGUF blocks, as block_linear computes with them");
  m.def("vector_path", &vector_path, "the build's path: avx512, avx2 or scalar");
}
#endif
