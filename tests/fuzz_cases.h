// Bookkeeping shared by the fuzz and property tests: each case is either refused with a
// gdn::Error (the expected outcome for most hostile inputs) or accepted and then checked.
// Anything else (another exception type, or a failed check) is a failure; the first few are
// reported in full, since a systematic bug would otherwise print thousands.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "common/error.h"

namespace gdn::testing {

class FuzzCases {
 public:
  int cases() const { return cases_; }
  int accepted() const { return accepted_; }

  // Runs accept(), which throws gdn::Error to refuse the input and may call fail(); returns
  // whether the input was accepted.
  template <typename F>
  bool run(const std::string& what, F&& accept) {
    ++cases_;
    try {
      accept();
      ++accepted_;
      return true;
    } catch (const Error&) {
      return false;
    } catch (const std::exception& e) {
      fail(what, std::string("unexpected exception: ") + e.what());
      return false;
    }
  }

  void fail(const std::string& what, const std::string& problem) {
    if (++failures_ <= 10) ADD_FAILURE() << what << ": " << problem;
  }

 private:
  int cases_ = 0, accepted_ = 0, failures_ = 0;
};

}  // namespace gdn::testing
