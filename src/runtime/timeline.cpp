#include "runtime/timeline.h"

#include <algorithm>
#include <map>

namespace gdn::runtime {

std::vector<KindTime> sum_by_kind(const std::vector<std::vector<StepTime>>& forwards) {
  std::vector<KindTime> kinds;
  std::map<std::string, size_t> index;
  for (const std::vector<StepTime>& steps : forwards) {
    for (const StepTime& st : steps) {
      auto [it, added] = index.try_emplace(st.kind, kinds.size());
      if (added) kinds.push_back({st.kind});
      KindTime& k = kinds[it->second];
      k.steps += 1;
      k.launches += st.launches;
      k.us += st.us;
      k.weight_bytes += st.weight_bytes;
    }
  }
  std::stable_sort(kinds.begin(), kinds.end(),
                   [](const KindTime& a, const KindTime& b) { return a.us > b.us; });
  return kinds;
}

}  // namespace gdn::runtime
