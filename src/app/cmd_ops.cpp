// gdn ops: every CUDA kernel against the CPU reference (and, with --perf, its speed).
#include <fmt/format.h>

#include <memory>

#include "app/commands.h"
#include "common/error.h"
#ifdef GDN_HAVE_CUDA
#include "cuda/device.h"
#include "cuda/op_check.h"
#endif

namespace gdn::app {
namespace {

struct OpsArgs {
  std::string op;
  bool perf = false;
  uint64_t seed = 1;
};

int run_ops(const OpsArgs& a) {
#ifdef GDN_HAVE_CUDA
  if (!cuda::available()) fail("gdn ops needs a CUDA GPU and none is available");
  return cuda::opcheck::run(a.op, a.perf, a.seed) == 0 ? 0 : 1;
#else
  (void)a;
  fail("gdn ops needs the CUDA backend, which this build does not have");
#endif
}

}  // namespace

Run add_ops(CLI::App& app) {
  auto a = std::make_shared<OpsArgs>();
  app.add_option("--op", a->op,
                 "only ops whose name starts with this, or one check family by name (matmul, "
                 "matmul_fused, norms, gdn, ...): only the families it can select run");
  app.add_flag("--perf", a->perf, "also time each case against copy and read ceilings");
  app.add_option("--seed", a->seed, "random seed of the inputs");
  return [a] { return run_ops(*a); };
}

}  // namespace gdn::app
