// Picks an executor by name: "cpu" (the reference) or "cuda".
#pragma once

#include <memory>
#include <string>

#include "model/weights.h"
#include "runtime/executor.h"

namespace gdn::runtime {

bool cuda_built();   // this binary has the CUDA backend
bool cuda_usable();  // ... and a GPU is present
// "auto" -> "cuda" when usable, else "cpu"; throws for unknown or unavailable backends.
std::string resolve_backend(const std::string& backend);

// Memory bandwidth the backend's roofline is computed from (bytes/s): the GPU's measured
// device-to-device copy bandwidth; 0 for the CPU (not measured).
double roofline_bandwidth(const std::string& backend);
// "NVIDIA H200, 132 SMs, ..." or "cpu, N threads".
std::string describe_backend(const std::string& backend, int n_threads);

// "auto" picks the fastest backend this build and machine have. Throws naming the backend
// when it is unknown or unavailable — never falls back to another one silently.
std::unique_ptr<Executor> make_executor(const std::string& backend, const model::Model& model,
                                        const ExecutorOptions& opts);

}  // namespace gdn::runtime
