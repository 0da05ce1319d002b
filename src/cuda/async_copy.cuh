// Shared-memory mbarriers, bulk copies (cp.async.bulk, sm_90), 16-byte cp.async and the acquire
// load of a GPU-wide counter: the pieces of a kernel that streams weights into shared memory and
// meets at grid barriers (the GEMV chain, q1_chain.cu; the split-K MLP of branch
// exp/s27-split-k-mlp used them too), of the int8 prefill product's staging, and of the
// hand-offs into a cluster's first CTA by st.async (the GDN recurrence's codes out, attention's
// merge).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gdn::cuda::mm {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, unsigned parity) {
  asm volatile(
      "{\n .reg .pred p;\n W%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra W%=;\n}" ::"r"(smem_addr(b)),
      "r"(parity)
      : "memory");
}
// As mbar_wait, with acquire at cluster scope: for phases completed by other CTAs' st_async.
__device__ __forceinline__ void mbar_wait_cluster(uint64_t* b, unsigned parity) {
  asm volatile(
      "{\n .reg .pred p;\n W%=:\n"
      " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra W%=;\n}" ::"r"(smem_addr(b)),
      "r"(parity)
      : "memory");
}
// Stores v at dst's counterpart in the cluster's CTA `rank` (st.async), completing 4
// transaction bytes on b's counterpart there. The sender neither fences nor waits: unlike a
// cluster barrier's release, it does not wait for this thread's earlier global stores. Only in
// clusters of more than one CTA: the PTX ISA leaves st.async undefined in a cluster of one.
__device__ __forceinline__ void st_async_to_rank(float* dst, unsigned rank, float v, uint64_t* b) {
  uint32_t to, bar;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(to) : "r"(smem_addr(dst)), "r"(rank));
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(bar) : "r"(smem_addr(b)), "r"(rank));
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(to),
      "r"(__float_as_uint(v)), "r"(bar)
      : "memory");
}
// Orders mbarrier initialisation before a later relaxed cluster arrive (other CTAs use it).
__device__ __forceinline__ void fence_mbar_init_cluster() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// bytes (a multiple of 16) from global src to shared dst (both 16-byte aligned), completing
// as transaction bytes on the mbarrier b.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* b) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(b))
      : "memory");
}

// 16 bytes from global src to shared dst (both 16-byte aligned), or 16 zero bytes when !valid
// (src is then not read): cp.async with the source size 0 fills the rest with zeros. Completes
// with the thread's next cp_async_commit group.
__device__ __forceinline__ void cp_async_or_zero(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

}  // namespace gdn::cuda::mm
