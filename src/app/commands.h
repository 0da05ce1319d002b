// The `gdn` subcommands. Each registers its options on a CLI11 subcommand and returns the
// function that runs it after parsing.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>

namespace gdn::app {

using Run = std::function<int()>;

// Bounds of count options (tokens, repetitions): CLI::Range's message names the option and the
// range, where CLI::PositiveNumber's spells out DBL_MAX.
inline const CLI::Range kCount(0, INT32_MAX);
inline const CLI::Range kPositiveCount(1, INT32_MAX);

Run add_eval(CLI::App& app);
Run add_synth(CLI::App& app);
Run add_convert(CLI::App& app);
Run add_bench(CLI::App& app);
Run add_ops(CLI::App& app);
Run add_run(CLI::App& app);
Run add_tokenize(CLI::App& app);

}  // namespace gdn::app
