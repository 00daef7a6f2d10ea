#include "trainer/loops/loop_context.h"

#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "c10/util/Type.h"
#include "trainer/strategies/strategy.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

// Lightning's `obj.__class__.__name__`: the object's dynamic type, without its namespaces.
template <typename T>
std::string ClassName(const T& object) {
  return ShortTypeName(c10::demangle(typeid(object).name()));
}

}  // namespace

std::string LoopContext::CallbackAction(const Callback& callback, const char* hook_name) const {
  return absl::StrCat("[Callback]", callback.state_key(), ".", hook_name);
}

std::string LoopContext::ModuleAction(const LightningModule& model, const char* hook_name) const {
  return absl::StrCat("[LightningModule]", ClassName(model), ".", hook_name);
}

std::string LoopContext::DataModuleAction(const DataModule& data, const char* hook_name) const {
  return absl::StrCat("[LightningDataModule]", ClassName(data), ".", hook_name);
}

std::string LoopContext::StrategyAction(const char* hook_name) const {
  const Strategy* strategy = trainer.strategy();
  return absl::StrCat("[Strategy]", strategy != nullptr ? ClassName(*strategy) : std::string("Strategy"), ".",
                      hook_name);
}

}  // namespace kiln
