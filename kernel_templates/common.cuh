// dfgnn kernel templates, part 1: element types, lane fragments, group reductions, kernel params.
// NVRTC-clean: no host headers, no STL; compiled at run time with the problem's sizes baked in.
#pragma once

namespace dfgnn {

// 16-bit storage types; arithmetic is always float32 (PTX conversions keep us free of fp16 headers).
struct f16 { unsigned short bits; };
struct bf16 { unsigned short bits; };

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(f16 x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}
__device__ __forceinline__ float to_float(bf16 x) { return __uint_as_float(static_cast<unsigned>(x.bits) << 16); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ f16 from_float<f16>(float x) {
  f16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
  return h;
}
template <> __device__ __forceinline__ bf16 from_float<bf16>(float x) {
  bf16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
  return h;
}

constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
// exp(x) for x <= 0 (softmax after max subtraction); ex2.approx is exact enough for fp32 sums.
__device__ __forceinline__ float exp_fast(float x) { return exp2f(x * kLog2e); }
__device__ __forceinline__ float leaky(float z, float slope) { return z > 0.f ? z : z * slope; }
__device__ __forceinline__ float leaky_grad(float z, float slope) { return z > 0.f ? 1.f : slope; }

// Problem geometry and thread mapping, all compile-time. A "group" of GL = L * HG lanes (aligned
// inside a warp) owns HG consecutive heads of one node; each head is a segment of L lanes (1 to 32),
// so many heads of few channels fill a group as one wide head does, and the per-head reductions
// are segmented shuffles. Lane gl of a segment holds channels d = (c*L + gl)*V + v for chunk
// c < C and vector slot v < V, i.e. R = C*V floats in registers.
// E: the op has edge features (Params::edge), compiled in so ops without them pay nothing.
// P: the op has attention dropout, compiled in likewise: the mask code held registers even when a
// launch ran without it (GATv2's backward row pass: 101 registers against 80).
template <typename T_, int D_, int H_, int L_, int V_, bool E_, int HG_ = 1, bool P_ = false>
struct Geo {
  using T = T_;
  static constexpr int D = D_, H = H_, L = L_, V = V_, HG = HG_;
  static constexpr bool E = E_, P = P_;
  static constexpr int GL = L * HG;  // lanes of a group
  static constexpr int HB = H / HG;  // head blocks: the groups of one node
  static constexpr int C = (D + L * V - 1) / (L * V);
  static constexpr int R = C * V;
  static_assert(H % HG == 0 && GL <= 32 && (GL & (GL - 1)) == 0, "a group spans whole heads inside a warp");
  static constexpr int kMinBlocks = 0;  // resident blocks per SM asked of ptxas (Resident below)
};

// G with BLOCKS blocks per SM asked to stay resident. The host names it for a dropout kernel (the
// runtime's ModuleCache): BLOCKS is the occupancy of the same kernel without dropout, the one the
// tuner timed. Unasked, the mask's few registers can take ptxas over an occupancy step (GAT 1x7's
// row pass: 32 -> 40 registers, 75% of the warps) and dropout would cost its passes 20-30%.
template <typename G, int BLOCKS>
struct Resident : G {
  static constexpr int kMinBlocks = BLOCKS;
};

// Loads V consecutive elements with one aligned vector load when their bytes allow it.
template <typename T, int V>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, float* out) {
  constexpr int bytes = V * static_cast<int>(sizeof(T));
  if constexpr (bytes == 16) {
    uint4 u = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int v = 0; v < V; ++v) out[v] = to_float(e[v]);
  } else if constexpr (bytes == 8) {
    uint2 u = *reinterpret_cast<const uint2*>(p);
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int v = 0; v < V; ++v) out[v] = to_float(e[v]);
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) out[v] = to_float(p[v]);
  }
}

template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, const float* in) {
  constexpr int bytes = V * static_cast<int>(sizeof(T));
  if constexpr (bytes == 16 || bytes == 8) {
    T e[V];
#pragma unroll
    for (int v = 0; v < V; ++v) e[v] = from_float<T>(in[v]);
    if constexpr (bytes == 16) *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(e);
    else *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(e);
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) p[v] = from_float<T>(in[v]);
  }
}

// Channel index of register slot r of lane gl.
template <typename G>
__device__ __forceinline__ int channel(int gl, int r) { return ((r / G::V) * G::L + gl) * G::V + (r % G::V); }

// Fragment of one (node, head) row: base points at element [node][head][0]. Channels >= D read 0.
// V > 1 is only chosen when D % V == 0 and the base pointers are aligned (checked on the host).
template <typename G, typename T>
__device__ __forceinline__ void load_frag(const T* __restrict__ base, int gl, float (&f)[G::R]) {
#pragma unroll
  for (int c = 0; c < G::C; ++c) {
    const int d0 = (c * G::L + gl) * G::V;
    if (G::D % (G::L * G::V) == 0 || d0 < G::D) {
      load_vec<T, G::V>(base + d0, &f[c * G::V]);
    } else {
#pragma unroll
      for (int v = 0; v < G::V; ++v) f[c * G::V + v] = 0.f;
    }
  }
}

template <typename G, typename T>
__device__ __forceinline__ void store_frag(T* base, int gl, const float (&f)[G::R]) {
#pragma unroll
  for (int c = 0; c < G::C; ++c) {
    const int d0 = (c * G::L + gl) * G::V;
    if (G::D % (G::L * G::V) == 0 || d0 < G::D) store_vec<T, G::V>(base + d0, &f[c * G::V]);
  }
}

template <int R>
__device__ __forceinline__ float dot(const float (&a)[R], const float (&b)[R]) {
  float s = 0.f;
#pragma unroll
  for (int r = 0; r < R; ++r) s = fmaf(a[r], b[r], s);
  return s;
}

template <int R>
__device__ __forceinline__ void fill(float (&a)[R], float x) {
#pragma unroll
  for (int r = 0; r < R; ++r) a[r] = x;
}

// Sum over the L lanes of a group; every lane gets the result. mask = the group's lanes.
template <int L>
__device__ __forceinline__ float group_sum(float x, unsigned mask) {
#pragma unroll
  for (int o = L / 2; o > 0; o /= 2) x += __shfl_xor_sync(mask, x, o, L);
  return x;
}

}  // namespace dfgnn
