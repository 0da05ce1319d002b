// Picks an executor by name: "cpu" (the reference) or, in later builds, "cuda".
#pragma once

#include <memory>
#include <string>

#include "model/weights.h"
#include "runtime/executor.h"

namespace gdn::runtime {

// "auto" picks the fastest backend this build and machine have. Throws naming the backend
// when it is unknown or unavailable — never falls back to another one silently.
std::unique_ptr<Executor> make_executor(const std::string& backend, const model::Model& model,
                                        const ExecutorOptions& opts);

}  // namespace gdn::runtime
