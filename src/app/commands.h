// The `gdn` subcommands. Each registers its options on a CLI11 subcommand and returns the
// function that runs it after parsing.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace gdn::app {

using Run = std::function<int()>;

Run add_eval(CLI::App& app);
Run add_synth(CLI::App& app);
Run add_convert(CLI::App& app);
Run add_bench(CLI::App& app);
Run add_ops(CLI::App& app);
Run add_run(CLI::App& app);
Run add_tokenize(CLI::App& app);

}  // namespace gdn::app
