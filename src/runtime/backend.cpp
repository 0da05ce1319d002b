#include "runtime/backend.h"

#include "common/error.h"
#include "cpu/cpu_executor.h"

namespace gdn::runtime {

std::unique_ptr<Executor> make_executor(const std::string& backend, const model::Model& model,
                                        const ExecutorOptions& opts) {
  if (backend == "cpu" || backend == "auto") return std::make_unique<cpu::CpuExecutor>(model, opts);
  fail("unknown backend '{}' (this build has: cpu)", backend);
}

}  // namespace gdn::runtime
