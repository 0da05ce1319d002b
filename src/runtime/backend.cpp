#include "runtime/backend.h"

#include <fmt/format.h>

#include <thread>

#include "common/error.h"
#include "cpu/cpu_executor.h"
#ifdef GDN_HAVE_CUDA
#include "cuda/cuda_executor.h"
#include "cuda/device.h"
#endif

namespace gdn::runtime {

bool cuda_built() {
#ifdef GDN_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_usable() {
#ifdef GDN_HAVE_CUDA
  return cuda::available();
#else
  return false;
#endif
}

std::string resolve_backend(const std::string& backend) {
  if (backend == "auto") return cuda_usable() ? "cuda" : "cpu";
  if (backend == "cpu") return backend;
  if (backend == "cuda") {
    if (!cuda_built())
      fail("backend 'cuda' is not in this build (nvcc was not found at configure)");
    if (!cuda_usable()) fail("backend 'cuda' needs a CUDA GPU and none is available");
    return backend;
  }
  fail("unknown backend '{}' (known: auto, cpu, cuda)", backend);
}

double roofline_bandwidth(const std::string& backend) {
#ifdef GDN_HAVE_CUDA
  if (resolve_backend(backend) == "cuda") return cuda::measure_copy_bandwidth(nullptr);
#endif
  (void)backend;
  return 0.0;
}

std::string describe_backend(const std::string& backend, int n_threads) {
#ifdef GDN_HAVE_CUDA
  if (resolve_backend(backend) == "cuda") return cuda::describe_device();
#endif
  (void)backend;
  const unsigned hw = std::thread::hardware_concurrency();
  return fmt::format("cpu, {} threads", n_threads > 0 ? unsigned(n_threads) : hw);
}

std::unique_ptr<Executor> make_executor(const std::string& backend, const model::Model& model,
                                        const ExecutorOptions& opts) {
  const std::string name = resolve_backend(backend);
#ifdef GDN_HAVE_CUDA
  if (name == "cuda") return std::make_unique<cuda::CudaExecutor>(model, opts);
#endif
  return std::make_unique<cpu::CpuExecutor>(model, opts);
}

}  // namespace gdn::runtime
