#include "hal/registry.h"

#include <algorithm>
#include <exception>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hal/compat/error_message.h"

namespace kiln {
namespace {

absl::Status ValidateName(absl::string_view what, absl::string_view name) {
  const bool valid = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_' || c == '-';
  });
  if (!valid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid accelerator ", what, " '", name, "': use lower-case letters, digits, '_' and '-'"));
  }
  if (name == "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("accelerator ", what, " 'auto' is reserved: it asks Kiln to choose; pick another name"));
  }
  return absl::OkStatus();
}

// " (registered in backends/cpu/cpu_accelerator.cc)", or nothing when the origin is unknown.
std::string FromOrigin(const std::string& origin) {
  return origin.empty() ? "" : absl::StrCat(" (registered in ", origin, ")");
}

}  // namespace

AcceleratorRegistry& AcceleratorRegistry::Default() {
  static auto* const registry = new AcceleratorRegistry();
  return *registry;
}

absl::Status AcceleratorRegistry::Register(AcceleratorSpec spec, RegisterOptions options) {
  spec.name = absl::AsciiStrToLower(spec.name);
  // Aliases in lower case, each once, and none repeating the name: what the registry stores is what it answers to.
  std::vector<std::string> aliases;
  for (const std::string& alias : spec.aliases) {
    std::string lower = absl::AsciiStrToLower(alias);
    if (lower != spec.name && std::find(aliases.begin(), aliases.end(), lower) == aliases.end()) {
      aliases.push_back(std::move(lower));
    }
  }
  spec.aliases = std::move(aliases);
  if (absl::Status status = ValidateName("name", spec.name); !status.ok()) return status;
  for (const std::string& alias : spec.aliases) {
    if (absl::Status status = ValidateName("alias", alias); !status.ok()) return status;
  }
  if (!spec.factory) {
    return absl::InvalidArgumentError(absl::StrCat("accelerator '", spec.name, "' was registered without a factory"));
  }

  absl::MutexLock lock(&mutex_);
  auto existing = entries_.find(spec.name);
  if (existing != entries_.end() && !options.override_existing) {
    return absl::AlreadyExistsError(absl::StrCat("accelerator name '", spec.name, "'", FromOrigin(spec.origin),
                                                 " is already taken by accelerator '", spec.name, "'",
                                                 FromOrigin(existing->second.spec.origin)));
  }
  if (auto owner = aliases_.find(spec.name); owner != aliases_.end()) {
    return absl::AlreadyExistsError(absl::StrCat("accelerator name '", spec.name, "'", FromOrigin(spec.origin),
                                                 " is already an alias of accelerator '", owner->second, "'",
                                                 FromOrigin(entries_.at(owner->second).spec.origin)));
  }
  for (const std::string& alias : spec.aliases) {
    auto owner = aliases_.find(alias);
    const bool taken_by_other_alias = owner != aliases_.end() && owner->second != spec.name;
    const bool taken_by_name = alias != spec.name && entries_.count(alias) > 0;
    if (taken_by_other_alias || taken_by_name) {
      const std::string& taker = taken_by_name ? alias : owner->second;
      return absl::AlreadyExistsError(absl::StrCat("alias '", alias, "' of accelerator '", spec.name, "'",
                                                   FromOrigin(spec.origin), " is already taken by accelerator '",
                                                   taker, "'", FromOrigin(entries_.at(taker).spec.origin)));
    }
  }
  if (existing != entries_.end()) {
    for (const std::string& alias : existing->second.spec.aliases) aliases_.erase(alias);
    entries_.erase(existing);
  }
  for (const std::string& alias : spec.aliases) aliases_[alias] = spec.name;
  std::string name = spec.name;
  entries_.emplace(std::move(name), Entry{std::move(spec), nullptr});
  return absl::OkStatus();
}

absl::StatusOr<const AcceleratorRegistry::Entry*> AcceleratorRegistry::FindLocked(
    absl::string_view name_or_alias) const {
  std::string key = absl::AsciiStrToLower(name_or_alias);
  if (auto alias = aliases_.find(key); alias != aliases_.end()) key = alias->second;
  auto entry = entries_.find(key);
  if (entry == entries_.end()) {
    // An empty registry is a program that links no backend: the link is what to fix, not the name.
    if (entries_.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "unknown accelerator '", name_or_alias, "'; registered: (none): this program links no accelerator "
          "backend. Add \"@kiln//backends:linked\" (every backend Kiln's programs link; \"//backends:linked\" "
          "inside Kiln) or \"@kiln//backends:builtin\" (cpu, cuda, hpu) to its deps"));
    }
    return absl::NotFoundError(absl::StrCat("unknown accelerator '", name_or_alias, "'; registered: ",
                                            NameListLocked(), ". Pick one of these, or \"auto\"."));
  }
  return &entry->second;
}

absl::StatusOr<AcceleratorSpec> AcceleratorRegistry::Find(absl::string_view name_or_alias) const {
  absl::MutexLock lock(&mutex_);
  absl::StatusOr<const Entry*> entry = FindLocked(name_or_alias);
  if (!entry.ok()) return entry.status();
  return (*entry)->spec;
}

absl::StatusOr<std::shared_ptr<Accelerator>> AcceleratorRegistry::Get(absl::string_view name_or_alias) const {
  absl::MutexLock lock(&mutex_);
  absl::StatusOr<const Entry*> found = FindLocked(name_or_alias);
  if (!found.ok()) return found.status();
  const Entry& entry = **found;
  if (entry.instance == nullptr) {
    try {
      entry.instance = entry.spec.factory();
    } catch (const std::exception& e) {
      return absl::InternalError(
          absl::StrCat("the factory of accelerator '", entry.spec.name, "' threw: ", compat::ExceptionMessage(e)));
    }
    if (entry.instance == nullptr) {
      return absl::InternalError(absl::StrCat("the factory of accelerator '", entry.spec.name, "' returned null"));
    }
  }
  return entry.instance;
}

std::vector<AcceleratorSpec> AcceleratorRegistry::List() const {
  std::vector<AcceleratorSpec> specs;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [name, entry] : entries_) specs.push_back(entry.spec);
  }
  std::stable_sort(specs.begin(), specs.end(), [](const AcceleratorSpec& a, const AcceleratorSpec& b) {
    return a.priority > b.priority;
  });
  return specs;
}

std::string AcceleratorRegistry::NameListLocked() const {
  if (entries_.empty()) return "(none)";
  std::vector<absl::string_view> names;
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return absl::StrJoin(names, ", ");
}

std::string AcceleratorRegistry::NameList() const {
  absl::MutexLock lock(&mutex_);
  return NameListLocked();
}

absl::Status AcceleratorRegistry::StartupStatus() const {
  absl::MutexLock lock(&mutex_);
  if (startup_errors_.empty()) return absl::OkStatus();
  std::vector<absl::string_view> errors;
  for (const absl::Status& error : startup_errors_) errors.push_back(error.message());
  return absl::FailedPreconditionError(absl::StrCat(
      "the backends linked into this program do not register cleanly: ", absl::StrJoin(errors, "; "),
      ". Every linked backend needs its own name and aliases: change the name or alias in the "
      "KILN_REGISTER_ACCELERATOR line of the backend you own (its source file is named above), or drop one of them "
      "from kiln_backends in the WORKSPACE"));
}

void AcceleratorRegistry::AddStartupError(absl::Status error) {
  absl::MutexLock lock(&mutex_);
  startup_errors_.push_back(std::move(error));
}

namespace internal {

bool RegisterAtStartup(AcceleratorSpec spec, const char* origin) {
  spec.origin = origin;
  AcceleratorRegistry& registry = AcceleratorRegistry::Default();
  if (absl::Status status = registry.Register(std::move(spec)); !status.ok()) {
    registry.AddStartupError(std::move(status));
    return false;
  }
  return true;
}

}  // namespace internal
}  // namespace kiln
