#include "trainer/profilers/advanced_profiler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln {
namespace {

// One row as pstats prints it: ncalls (9 wide), tottime, percall, cumtime, percall (%8.3f each), then the name.
std::string Row(const std::string& name, const AdvancedProfiler::Stats& stats) {
  const double calls = static_cast<double>(std::max<int64_t>(stats.calls, 1));
  return absl::StrFormat("%9d %8.3f %8.3f %8.3f %8.3f %s\n", stats.calls, stats.exclusive, stats.exclusive / calls,
                         stats.inclusive, stats.inclusive / calls, name);
}

}  // namespace

AdvancedProfiler::AdvancedProfiler(std::string dirpath, std::string filename)
    : Profiler(std::move(dirpath), std::move(filename)) {}

const AdvancedProfiler::Action* AdvancedProfiler::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &actions_[it->second];
}

void AdvancedProfiler::start(absl::string_view action_name) {
  stack_.push_back({std::string(action_name), Clock::now(), 0});
}

void AdvancedProfiler::stop(absl::string_view action_name) {
  const Clock::time_point end = Clock::now();
  if (stack_.empty() || stack_.back().name != action_name) return;
  Frame frame = std::move(stack_.back());
  stack_.pop_back();
  const double inclusive = std::chrono::duration<double>(end - frame.start).count();
  const double exclusive = std::max(0.0, inclusive - frame.nested);
  auto [index, inserted] = index_.try_emplace(frame.name, actions_.size());
  if (inserted) actions_.push_back({frame.name, {}, {}, {}});
  Stats& own = actions_[index->second].stats;
  ++own.calls;
  own.inclusive += inclusive;
  own.exclusive += exclusive;
  if (!stack_.empty()) {
    Frame& parent = stack_.back();
    parent.nested += inclusive;
    auto [parent_index, parent_inserted] = index_.try_emplace(parent.name, actions_.size());
    if (parent_inserted) actions_.push_back({parent.name, {}, {}, {}});
    Action& outer = actions_[parent_index->second];
    auto [child, child_inserted] = outer.children.try_emplace(frame.name);
    if (child_inserted) outer.child_order.push_back(frame.name);
    ++child->second.calls;
    child->second.inclusive += inclusive;
    child->second.exclusive += exclusive;
  }
}

std::string AdvancedProfiler::summary() {
  std::vector<std::pair<std::string, std::string>> stats;
  for (const Action& action : actions_) {
    if (action.stats.calls == 0) continue;  // Still running (an outer action summary() was called inside).
    int64_t calls = action.stats.calls;
    std::vector<std::pair<std::string, Stats>> rows;
    for (const std::string& child : action.child_order) {
      const Stats& child_stats = action.children.at(child);
      calls += child_stats.calls;
      rows.emplace_back(child, child_stats);
    }
    std::stable_sort(rows.begin(), rows.end(),
                     [](const auto& a, const auto& b) { return a.second.inclusive > b.second.inclusive; });
    std::string text = absl::StrFormat(
        "         %d action calls in %.3f seconds\n\n   Ordered by: cumulative time\n\n"
        "   ncalls  tottime  percall  cumtime  percall action (tottime: less the actions nested in it)\n",
        calls, action.stats.inclusive);
    absl::StrAppend(&text, Row(action.name, action.stats));
    for (const auto& [name, child_stats] : rows) absl::StrAppend(&text, Row(name, child_stats));
    stats.emplace_back(action.name, std::move(text));
  }
  if (stats.empty()) return "";
  return StatsToString(stats) + "\n";
}

}  // namespace kiln
