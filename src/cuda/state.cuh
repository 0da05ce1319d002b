// Recurrent-state storage types on the device (model::StateType): the one place that says how
// a stored state value becomes an f32 and back. Every kernel that reads or writes a state
// (gdn_recurrence in gdn.cu, copy_state in elementwise.cu) goes through these, so a gather
// (copy_state slot → f32 work), the f32 recurrence and a scatter (copy_state work → slot)
// round exactly as the fused recurrence that reads and writes the slot itself:
//   load  (widen):  f16/bf16 → f32 is exact (every f16 and bf16 value is an f32 value);
//   store (narrow): f32 → f16/bf16 rounds to nearest, ties to even (__float2half_rn,
//                   __float2bfloat16_rn: subnormals kept, overflow to ±inf), once.
// An f32 state is stored as is.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "model/rungs.h"

namespace gdn::cuda::state {

template <model::StateType kType>
struct Storage;

template <>
struct Storage<model::StateType::F32> {
  using T = float;
  static constexpr model::StateType kType = model::StateType::F32;
  static __device__ __forceinline__ float load(T v) { return v; }
  static __device__ __forceinline__ T store(float v) { return v; }
};

template <>
struct Storage<model::StateType::F16> {
  using T = __half;
  static constexpr model::StateType kType = model::StateType::F16;
  static __device__ __forceinline__ float load(T v) { return __half2float(v); }
  static __device__ __forceinline__ T store(float v) { return __float2half_rn(v); }
};

template <>
struct Storage<model::StateType::BF16> {
  using T = __nv_bfloat16;
  static constexpr model::StateType kType = model::StateType::BF16;
  static __device__ __forceinline__ float load(T v) { return __bfloat162float(v); }
  static __device__ __forceinline__ T store(float v) { return __float2bfloat16_rn(v); }
};

// Calls f(Storage<t>{}) for the run-time type t: on the host it picks a kernel instantiation,
// in a kernel the load or store loop. Returns false for a value outside the enum.
#pragma nv_exec_check_disable
template <class F>
__host__ __device__ __forceinline__ bool dispatch(model::StateType t, F&& f) {
  switch (t) {
    case model::StateType::F32:
      f(Storage<model::StateType::F32>{});
      return true;
    case model::StateType::F16:
      f(Storage<model::StateType::F16>{});
      return true;
    case model::StateType::BF16:
      f(Storage<model::StateType::BF16>{});
      return true;
  }
  return false;
}

}  // namespace gdn::cuda::state
