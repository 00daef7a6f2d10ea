#include "trainer/cli/model_factory.h"

#include <cmath>
#include <functional>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainer/checkpoint/format/zip_checksums.h"
#include "trainer/cli/input_guard.h"
#include "trainer/models/conv_net.h"
#include "trainer/models/mlp.h"
#include "trainer/models/torchscript_module.h"

namespace kiln {
namespace {

// Builds a built-in model, which allocates every parameter: sizes the flags accept can still ask for more memory than
// the machine has. Then ResourceExhausted names `--flag=sizes`.
absl::StatusOr<std::shared_ptr<SupervisedModule>> Build(
    const std::string& model, absl::string_view flag, const std::string& sizes,
    const std::function<std::shared_ptr<SupervisedModule>()>& make) {
  return GuardedLoad<std::shared_ptr<SupervisedModule>>(
      absl::StrCat("--", flag, "=", sizes, ": cannot build the ", model, " model"), "pass smaller sizes",
      [&]() -> absl::StatusOr<std::shared_ptr<SupervisedModule>> { return make(); });
}

}  // namespace

absl::StatusOr<std::shared_ptr<SupervisedModule>> MakeModel(const ModelSpec& spec, const LoadedData& data) {
  SupervisedOptions options{.task = data.task,
                            .optimizer = spec.optimizer,
                            .fused_optimizer = spec.fused_optimizer,
                            .learning_rate = spec.learning_rate,
                            .momentum = spec.momentum,
                            .weight_decay = spec.weight_decay,
                            .lr_scheduler = spec.lr_scheduler,
                            .input_shape = spec.input_shape};
  const std::string shape = absl::StrJoin(spec.input_shape, ",");
  if (!spec.input_shape.empty()) {
    const int64_t per_example =
        std::accumulate(spec.input_shape.begin(), spec.input_shape.end(), int64_t{1}, std::multiplies<int64_t>());
    if (per_example != data.num_features) {
      return FlagError("input_shape", shape,
                       absl::StrCat("it holds ", per_example, " values per example, but the data has ",
                                    data.num_features, " features; pass C,H,W with C*H*W = ", data.num_features));
    }
  }

  std::shared_ptr<SupervisedModule> model;
  std::map<std::string, std::string> hparams = {
      {"model", spec.model},
      {"task", TaskName(data.task)},
      {"optimizer", spec.optimizer},
      {"learning_rate", absl::StrCat(spec.learning_rate)},
      {"num_features", absl::StrCat(data.num_features)},
      {"num_outputs", absl::StrCat(data.num_outputs)},
  };
  if (spec.optimizer == "sgd") hparams["momentum"] = absl::StrCat(spec.momentum);
  if (spec.weight_decay.has_value()) hparams["weight_decay"] = absl::StrCat(*spec.weight_decay);
  if (!spec.input_shape.empty()) hparams["input_shape"] = shape;
  if (spec.lr_scheduler.name != "none") hparams["lr_scheduler"] = spec.lr_scheduler.name;
  if (spec.lr_scheduler.warmup_iters > 0) hparams["warmup_iters"] = absl::StrCat(spec.lr_scheduler.warmup_iters);
  if (spec.model == "mlp") {
    hparams["hidden_sizes"] = absl::StrJoin(spec.hidden_sizes, ",");
    hparams["activation"] = kMlpActivation;
    absl::StatusOr<std::shared_ptr<SupervisedModule>> built =
        Build(spec.model, "hidden_sizes", hparams["hidden_sizes"], [&] {
          return std::make_shared<Mlp>(
              MlpSizes{
                  .input_size = data.num_features, .hidden_sizes = spec.hidden_sizes, .num_outputs = data.num_outputs},
              options);
        });
    if (!built.ok()) return built.status();
    model = *std::move(built);
  } else if (spec.model == "cnn") {
    if (options.input_shape.empty()) {
      const int64_t side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(data.num_features))));
      if (side * side != data.num_features) {
        return FlagError("model", "cnn",
                         absl::StrCat("the data has ", data.num_features,
                                      " features, which is not a square image; "
                                      "pass --input_shape=C,H,W with C*H*W = ",
                                      data.num_features));
      }
      options.input_shape = {1, side, side};
      hparams["input_shape"] = absl::StrJoin(options.input_shape, ",");
    }
    hparams["channels"] = absl::StrJoin(spec.channels, ",");
    absl::StatusOr<std::shared_ptr<SupervisedModule>> built = Build(spec.model, "channels", hparams["channels"], [&] {
      return std::make_shared<ConvNet>(ConvNetSizes{.input_shape = options.input_shape,
                                                    .channels = spec.channels,
                                                    .kernel_size = spec.kernel_size,
                                                    .num_outputs = data.num_outputs},
                                       options);
    });
    if (!built.ok()) return built.status();
    model = *std::move(built);
    hparams["kernel_size"] = absl::StrCat(spec.kernel_size);
    hparams["activation"] = kConvNetActivation;
    hparams["padding"] = kConvNetPadding;
    hparams["pooling"] = kConvNetPooling;
  } else {
    // LibTorch allocates each record's stated size as it reads the archive: what its deflated records inflate to
    // together is held to --max_inflated_mib first, from the zip's directory, as for a checkpoint. Any other fault
    // of the file is LibTorch's to name (not a TorchScript module).
    if (absl::Status verified = VerifyZipChecksums(spec.model);
        verified.code() == absl::StatusCode::kResourceExhausted) {
      return absl::ResourceExhaustedError(absl::StrCat("--model=", spec.model, ": ", verified.message()));
    }
    absl::StatusOr<std::shared_ptr<TorchScriptModule>> script = TorchScriptModule::Load(spec.model, options);
    if (!script.ok()) return script.status();
    model = *std::move(script);
  }
  if (absl::Status checked = model->CheckOutputShape(data.num_features, data.num_outputs); !checked.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--model=", spec.model, ": ", checked.message()));
  }
  // Regression learns standardised targets: the training rows' mean and spread (restored from a checkpoint's
  // buffers when there is one).
  if (data.statistics != nullptr) {
    model->set_target_statistics(data.statistics->target_mean, data.statistics->target_std);
  }
  model->save_hyperparameters(std::move(hparams));
  return model;
}

}  // namespace kiln
