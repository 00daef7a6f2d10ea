#include "trainer/strategies/fsdp_options.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kiln {
namespace {

constexpr const char* kShardingNames[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"};
constexpr const char* kStateDictNames[] = {"full", "sharded"};

constexpr char kShardingAccepted[] = "pass FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD";
constexpr char kStateDictAccepted[] = "pass full or sharded";
constexpr char kModuleTypesAccepted[] =
    "pass module type names separated by commas, as LibTorch spells the classes (e.g. Linear)";
constexpr char kCountAccepted[] = "pass an int >= 0 (0: off)";
constexpr const char* kDtypeNames[] = {"float32", "bfloat16", "float16"};
constexpr char kDtypeAccepted[] = "pass float32 (fp32), bfloat16 (bf16), float16 (fp16), or nothing (no cast)";

}  // namespace

absl::StatusOr<ShardingStrategy> ParseShardingStrategy(const std::string& text) {
  const std::string upper = absl::AsciiStrToUpper(text);
  for (int i = 0; i < 4; ++i) {
    if (upper == kShardingNames[i]) return static_cast<ShardingStrategy>(i);
  }
  return absl::InvalidArgumentError(absl::StrCat("sharding_strategy '", text, "' is not one of ",
                                                 absl::StrJoin(kShardingNames, ", ")));
}

const char* ShardingStrategyName(ShardingStrategy strategy) { return kShardingNames[static_cast<int>(strategy)]; }

absl::StatusOr<StateDictType> ParseStateDictType(const std::string& text) {
  if (text == "full") return StateDictType::kFull;
  if (text == "sharded") return StateDictType::kSharded;
  return absl::InvalidArgumentError(absl::StrCat("state_dict_type '", text, "' is not full or sharded"));
}

const char* StateDictTypeName(StateDictType type) { return kStateDictNames[static_cast<int>(type)]; }

absl::StatusOr<FsdpDtype> ParseFsdpDtype(const std::string& text) {
  std::string name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (absl::StartsWith(name, "torch.")) name = name.substr(6);
  if (name == "float32" || name == "fp32" || name == "32" || name == "float") return FsdpDtype::kFloat32;
  if (name == "bfloat16" || name == "bf16") return FsdpDtype::kBFloat16;
  if (name == "float16" || name == "fp16" || name == "16" || name == "half") return FsdpDtype::kFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("fsdp mixed precision dtype '", text, "' is not float32 (fp32), bfloat16 (bf16) or float16 (fp16)"));
}

const char* FsdpDtypeName(FsdpDtype dtype) { return kDtypeNames[static_cast<int>(dtype)]; }

FsdpMixedPrecision FsdpMixedPrecisionFor(absl::string_view precision) {
  std::optional<FsdpDtype> dtype;
  if (precision == "16-mixed" || precision == "16-true") dtype = FsdpDtype::kFloat16;
  if (precision == "bf16-mixed" || precision == "bf16-true") dtype = FsdpDtype::kBFloat16;
  if (precision == "32-true") dtype = FsdpDtype::kFloat32;
  return {.param_dtype = dtype, .reduce_dtype = dtype, .buffer_dtype = dtype};
}

std::vector<std::string> SplitModuleTypes(absl::string_view list) {
  std::vector<std::string> names;
  for (absl::string_view name : absl::StrSplit(list, ',')) {
    name = absl::StripAsciiWhitespace(name);
    if (!name.empty()) names.emplace_back(name);
  }
  return names;
}

std::optional<std::string> SetFsdpField(ShardingStrategy& field, const std::string& text) {
  absl::StatusOr<ShardingStrategy> parsed = ParseShardingStrategy(text);
  if (!parsed.ok()) return kShardingAccepted;
  field = *parsed;
  return std::nullopt;
}

std::optional<std::string> SetFsdpField(StateDictType& field, const std::string& text) {
  absl::StatusOr<StateDictType> parsed = ParseStateDictType(text);
  if (!parsed.ok()) return kStateDictAccepted;
  field = *parsed;
  return std::nullopt;
}

std::optional<std::string> SetFsdpField(std::vector<std::string>& module_types, const std::string& text) {
  std::vector<std::string> names = SplitModuleTypes(text);
  if (std::optional<std::string> refused = CheckFsdpField(names)) return refused;
  module_types = std::move(names);
  return std::nullopt;
}

std::optional<std::string> SetFsdpField(int64_t& count, const int64_t& value) {
  if (std::optional<std::string> refused = CheckFsdpField(value)) return refused;
  count = value;
  return std::nullopt;
}

std::optional<std::string> SetFsdpField(std::optional<FsdpDtype>& dtype, const std::string& text) {
  if (absl::StripAsciiWhitespace(text).empty() || absl::AsciiStrToLower(text) == "none") {
    dtype.reset();
    return std::nullopt;
  }
  absl::StatusOr<FsdpDtype> parsed = ParseFsdpDtype(text);
  if (!parsed.ok()) return kDtypeAccepted;
  dtype = *parsed;
  return std::nullopt;
}

std::optional<std::string> CheckFsdpField(ShardingStrategy field) {
  if (static_cast<int>(field) >= 0 && static_cast<int>(field) < 4) return std::nullopt;
  return kShardingAccepted;
}

std::optional<std::string> CheckFsdpField(StateDictType field) {
  if (field == StateDictType::kFull || field == StateDictType::kSharded) return std::nullopt;
  return kStateDictAccepted;
}

std::optional<std::string> CheckFsdpField(const std::vector<std::string>& module_types) {
  for (const std::string& name : module_types) {
    const bool valid = std::all_of(name.begin(), name.end(), [](char c) {
      return absl::ascii_isalnum(c) || c == '_' || c == ':';
    });
    if (!valid) return kModuleTypesAccepted;
  }
  return std::nullopt;
}

std::optional<std::string> CheckFsdpField(int64_t count) {
  if (count >= 0) return std::nullopt;
  return kCountAccepted;
}

std::optional<std::string> CheckFsdpField(const std::optional<FsdpDtype>& dtype) {
  if (!dtype.has_value() || (static_cast<int>(*dtype) >= 0 && static_cast<int>(*dtype) < 3)) return std::nullopt;
  return kDtypeAccepted;
}

std::string FsdpFieldText(ShardingStrategy field) {
  return CheckFsdpField(field) ? absl::StrCat(static_cast<int>(field)) : ShardingStrategyName(field);
}
std::string FsdpFieldText(StateDictType field) {
  return CheckFsdpField(field) ? absl::StrCat(static_cast<int>(field)) : StateDictTypeName(field);
}
std::string FsdpFieldText(const std::vector<std::string>& module_types) { return absl::StrJoin(module_types, ","); }
std::string FsdpFieldText(int64_t count) { return absl::StrCat(count); }
std::string FsdpFieldText(const std::optional<FsdpDtype>& dtype) {
  if (!dtype.has_value()) return "";
  return CheckFsdpField(dtype) ? absl::StrCat(static_cast<int>(*dtype)) : FsdpDtypeName(*dtype);
}

std::vector<std::string> FsdpOptionsSet(const FSDPOptions& options) {
  static const FSDPOptions defaults;
  std::vector<std::string> set;
#define KILN_FSDP_OPTION(type, name, field, fit_default, init_arg, help) \
  if (!(options.field == defaults.field)) set.push_back(#name);
#include "trainer/strategies/fsdp_options.inc"
  return set;
}

std::string FsdpOptionNames() {
  std::vector<std::string> names;
#define KILN_FSDP_OPTION(type, name, field, fit_default, init_arg, help) names.push_back(#name);
#include "trainer/strategies/fsdp_options.inc"
  if (names.size() < 2) return absl::StrJoin(names, "");
  const std::string last = names.back();
  names.pop_back();
  return absl::StrCat(absl::StrJoin(names, ", "), " and ", last);
}

const char* FsdpOptionForInitArg(absl::string_view init_arg) {
#define KILN_FSDP_OPTION(type, name, field, fit_default, lightning_init_arg, help)                     \
  if (const char* argument = lightning_init_arg; argument != nullptr && init_arg == argument) return #name;
#include "trainer/strategies/fsdp_options.inc"
  return nullptr;
}

}  // namespace kiln
