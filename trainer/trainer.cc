#include "trainer/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <tuple>
#include <utility>

#include "ATen/Context.h"
#include "ATen/Parallel.h"
#include "absl/strings/str_cat.h"
#include "connector/connector.h"
#include "glog/logging.h"
#include "torch/utils.h"
#include "trainer/callbacks/model_checkpoint.h"
#include "trainer/callbacks/model_summary_callback.h"
#include "trainer/callbacks/timer.h"
#include "trainer/checkpoint/checkpoint_io.h"
#include "trainer/core/meta_device.h"
#include "trainer/layer_sync.h"
#include "trainer/loggers/csv_logger.h"
#include "trainer/loggers/log_dir.h"
#include "trainer/loggers/tensorboard_logger.h"
#include "trainer/loops/call_user.h"
#include "trainer/loops/evaluation_loop.h"
#include "trainer/loops/fit_loop.h"
#include "trainer/loops/loop_context.h"
#include "trainer/loops/prediction_loop.h"
#include "trainer/plugins/precision/precision_plugin.h"
#include "trainer/profilers/profiler.h"
#include "trainer/progress.h"
#include "trainer/strategies/fsdp_options.h"
#include "trainer/strategies/distributed_program.h"
#include "trainer/strategies/model_parallel_options.h"
#include "trainer/strategies/strategy.h"
#include "trainer/strategies/strategy_factories.h"
#include "trainer/trainer_options.h"

namespace kiln {
namespace {

// Makes sure teardown runs however a loop ends.
class TeardownGuard {
 public:
  explicit TeardownGuard(Strategy& strategy) : strategy_(strategy) {}
  ~TeardownGuard() {
    if (absl::Status status = strategy_.Teardown(); !status.ok()) {
      LOG(WARNING) << "tearing down the device failed: " << status;
    }
  }

 private:
  Strategy& strategy_;
};

const char* StageName(Stage stage) {
  switch (stage) {
    case Stage::kFit:
      return "fit";
    case Stage::kValidate:
      return "validate";
    case Stage::kTest:
      return "test";
    case Stage::kPredict:
      return "predict";
  }
  return "an entry point";
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// BatchLimit

absl::StatusOr<int64_t> BatchLimit::Resolve(int64_t available, absl::string_view flag) const {
  if (const auto* count = std::get_if<int64_t>(&value_)) {
    if (*count < 0) {
      return absl::InvalidArgumentError(absl::StrCat(flag, "=", *count,
                                                     " must be >= 0 (a number of batches) or a "
                                                     "fraction in [0.0, 1.0]"));
    }
    return std::min(*count, available);
  }
  const double fraction = std::get<double>(value_);
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, "=", fraction,
                                                   " must be a fraction in [0.0, 1.0] or an "
                                                   "int number of batches"));
  }
  return static_cast<int64_t>(std::floor(fraction * static_cast<double>(available)));
}

bool BatchLimit::is_zero() const {
  if (const auto* count = std::get_if<int64_t>(&value_)) return *count == 0;
  return std::get<double>(value_) == 0.0;
}

std::string BatchLimit::ToString() const {
  if (const auto* count = std::get_if<int64_t>(&value_)) return absl::StrCat(*count);
  return absl::StrCat(std::get<double>(value_));
}

// ---------------------------------------------------------------------------------------------------------------
// Set-up

Trainer::Trainer(TrainerOptions options) : options_(std::move(options)) {
  // The loops get what they need of the trainer explicitly, and keep their progress themselves.
  loop_context_ = std::make_unique<LoopContext>(LoopContext{
      .trainer = *this,
      .callbacks = callbacks_,
      .optimizers = optimizers_,
      .optimizer_parameters = optimizer_parameters_,
      .callback_metrics = callback_metrics_,
      .live_step_metrics = live_step_metrics_,
      .progress = progress_,
      .resumed_from = resumed_from_,
      .setup_loggers = [this] { return SetupLoggers(); },
      .finalize_loggers = [this](bool succeeded) { return FinalizeLoggers(succeeded); },
      .restore_checkpoint =
          [this](LightningModule& model, const std::string& ckpt_path, bool restore_training, DataModule* data) {
            return RestoreCheckpoint(model, ckpt_path, restore_training, data);
          },
      .resolve_checkpoint_path = [this](const std::string& ckpt_path) { return ResolveCheckpointPath(ckpt_path); }});
  fit_loop_ = std::make_unique<FitLoop>(*loop_context_);
  if (options_.fast_dev_run > 0) {
    // Lightning's fast_dev_run: N batches of everything, one epoch, no sanity check, no checkpoints or logs.
    const int64_t n = options_.fast_dev_run;
    options_.limit_train_batches = n;
    options_.limit_val_batches = n;
    options_.limit_test_batches = n;
    options_.limit_predict_batches = n;
    options_.max_steps = n;
    options_.max_epochs = 1;
    options_.num_sanity_val_steps = 0;
    options_.val_check_interval = 1.0;
    options_.check_val_every_n_epoch = 1;
  }
  if (!options_.overfit_batches.is_zero()) {
    options_.limit_train_batches = options_.overfit_batches;
    options_.limit_val_batches = options_.overfit_batches;
  }
  // Lightning's logger=True, with a CSV logger beside its TensorBoard logger; each has its own version folder, as
  // Lightning's loggers do, claimed only when a run sets them up (the CSV logger's first: it holds the checkpoints).
  if (options_.logger && options_.loggers.empty() && options_.fast_dev_run == 0) {
    const LogDirOptions folder{.save_dir = options_.default_root_dir};
    options_.loggers = {std::make_shared<CsvLogger>(folder), std::make_shared<TensorBoardLogger>(folder)};
  }
}

Trainer::~Trainer() = default;

const MetricMap& Trainer::callback_metrics() const {
  if (live_step_metrics_ != nullptr) Merge(callback_metrics_, live_step_metrics_->StepMetrics());
  return callback_metrics_;
}

int64_t Trainer::current_epoch() const { return fit_loop_->epoch_progress().current; }
int64_t Trainer::global_step() const { return fit_loop_->epoch_loop().global_step(); }
int64_t Trainer::skipped_batches() const { return fit_loop_->epoch_loop().skipped_batches(); }
int64_t Trainer::num_training_batches() const { return fit_loop_->num_training_batches(); }
int64_t Trainer::num_val_batches() const { return fit_loop_->num_val_batches(); }
DataLoader* Trainer::train_dataloader() const { return fit_loop_->train_loader(); }
bool Trainer::sanity_checking() const { return fit_loop_->sanity_checking(); }
bool Trainer::should_stop() const { return fit_loop_->should_stop(); }
void Trainer::set_should_stop() { fit_loop_->set_should_stop(); }
int64_t Trainer::max_epochs() const { return fit_loop_->max_epochs(); }
int64_t Trainer::logged_step() const { return fit_loop_->epoch_loop().batches_that_stepped(); }

const Plan& Trainer::RankPlan() const {
  if (plan_.has_value()) return *plan_;
  if (!rank_plan_.has_value()) {
    // Before the first entry point: the plan that it would resolve, from the options and the environment this process
    // was started with (a started process has LOCAL_RANK). Options that cannot be resolved: one process (the entry
    // point says what is wrong with them).
    absl::StatusOr<Plan> plan = ResolveOptions();
    rank_plan_ = plan.ok() ? *std::move(plan) : Plan{};
  }
  return *rank_plan_;
}

int Trainer::global_rank() const { return strategy_ != nullptr ? strategy_->global_rank() : RankPlan().global_rank; }
int Trainer::local_rank() const { return RankPlan().local_rank; }
int Trainer::node_rank() const { return RankPlan().node_rank; }
int Trainer::world_size() const { return strategy_ != nullptr ? strategy_->world_size() : RankPlan().world_size; }
int Trainer::num_nodes() const { return RankPlan().num_nodes; }
int Trainer::num_devices() const { return std::max(1, RankPlan().num_devices()); }
bool Trainer::is_global_zero() const { return global_rank() == 0; }

std::string Trainer::checkpoint_dir() const {
  for (const auto& logger : options_.loggers) {
    if (!logger->log_dir().empty()) return logger->log_dir() + "/checkpoints";
  }
  return options_.default_root_dir + "/checkpoints";
}

ModelCheckpoint* Trainer::checkpoint_callback() const {
  for (const auto& callback : callbacks_) {
    if (auto* checkpoint = dynamic_cast<ModelCheckpoint*>(callback.get())) return checkpoint;
  }
  return nullptr;
}

void Trainer::log_metrics(MetricMap metrics, int64_t step) {
  if (!is_global_zero() || metrics.empty() || options_.fast_dev_run > 0 || sanity_checking()) return;
  // Every row says its epoch, as Lightning's loggers do, so that a table of them groups by epoch.
  metrics.emplace("epoch", static_cast<double>(current_epoch()));
  for (const auto& logger : options_.loggers) {
    if (absl::Status status = logger->log_metrics(metrics, step); !status.ok()) {
      LOG(WARNING) << "logger '" << logger->name() << "' failed: " << status;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Set-up: the options, the plan, the strategy and the callbacks

void Trainer::CallOnException(LightningModule& model, const absl::Status& error) {
  const absl::Status called =
      CallUser("on_exception",
               [&] {
                 loop_context_->CallCallbacks("on_exception",
                                              [&](Callback& c) { c.on_exception(*this, model, error); });
               });
  if (!called.ok()) LOG(WARNING) << "on_exception failed (the run's error stands): " << called;
}

absl::Status Trainer::CheckOptions() const {
  // Each option's one check, shared with fit (trainer_options.inc); the connector checks the hardware options.
  return CheckTrainerOptions(options_);
}

absl::StatusOr<std::shared_ptr<Strategy>> Trainer::MakeStrategy(const Plan& plan) const {
  // fsdp's options by name are refused where no fsdp made by name reads them, rather than ignored.
  absl::StatusOr<FSDPOptions> fsdp = EffectiveFsdpOptions(options_);
  if (!fsdp.ok()) return fsdp.status();
  const bool fsdp_by_name =
      plan.strategy_instance == nullptr && (plan.strategy == kFsdpStrategy || plan.strategy == kFsdpCpuOffloadStrategy);
  if (!FsdpOptionsSet(*fsdp).empty() && !fsdp_by_name) {
    return absl::InvalidArgumentError(absl::StrCat(
        FsdpOptionNames(), " are fsdp's options, but the strategy is '", plan.strategy, "'",
        plan.strategy_instance != nullptr ? " (an instance): set them in its own options (FSDPOptions)"
                                          : ": use strategy fsdp, or leave them unset"));
  }
  // model_parallel's sizes likewise.
  const bool model_parallel_by_name = plan.strategy_instance == nullptr && plan.strategy == kModelParallelStrategy;
  ModelParallelOptions model_parallel;
  for (const auto& [name, text, field] :
       {std::make_tuple("data_parallel_size", &options_.data_parallel_size, &model_parallel.data_parallel_size),
        std::make_tuple("tensor_parallel_size", &options_.tensor_parallel_size,
                        &model_parallel.tensor_parallel_size)}) {
    absl::StatusOr<std::optional<int>> size = ParseParallelSize(name, *text);
    if (!size.ok()) return size.status();
    if (size->has_value() && !model_parallel_by_name) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, "=", *text, " is model_parallel's option, but the strategy is '", plan.strategy, "'",
          plan.strategy_instance != nullptr ? " (an instance): set it in its own options (ModelParallelOptions)"
                                            : ": use strategy model_parallel, or leave it \"auto\""));
    }
    *field = *size;
  }
  if (!options_.save_distributed_checkpoint && !model_parallel_by_name) {
    return absl::InvalidArgumentError(absl::StrCat(
        "save_distributed_checkpoint=false is model_parallel's option, but the strategy is '", plan.strategy, "'",
        plan.strategy_instance != nullptr ? " (an instance): set it in its own options (ModelParallelOptions)"
                                          : ": use strategy model_parallel, or leave it true"));
  }
  model_parallel.save_distributed_checkpoint = options_.save_distributed_checkpoint;
  std::shared_ptr<Strategy> strategy = std::dynamic_pointer_cast<Strategy>(plan.strategy_instance);
  if (plan.strategy_instance != nullptr && strategy == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("strategy instance '", plan.strategy,
                     "' describes itself to the connector but is not a kiln::Strategy; "
                     "derive it from kiln::Strategy (trainer/strategies/strategy.h) so that the trainer can run it"));
  }
  if (strategy == nullptr) {
    // Every strategy named by the plan, built-in or registered by a user, comes from its registry entry's factory.
    SetBuiltinStrategyFactories();
    absl::StatusOr<StrategySpec> spec = StrategyRegistry::Default().Find(plan.strategy);
    if (!spec.ok() || !spec->factory) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strategy '", plan.strategy, "' is registered without a factory, so the trainer cannot make it; register "
          "it with StrategySpec::factory (connector/strategy_registry.h) or pass a kiln::Strategy instance as "
          "`strategy`"));
    }
    StrategyArguments arguments;
    arguments.process_group_timeout = options_.process_group_timeout;
    if (fsdp_by_name) {
      FSDPOptions typed = *fsdp;
      typed.process_group_backend.reset();  // TrainerOptions::process_group_backend's, through the plan.
      arguments.options = std::move(typed);
    }
    if (model_parallel_by_name) arguments.options = model_parallel;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    // The deprecated text a factory of one's own may still read (remove with StrategyArguments' fields).
    arguments.sharding_strategy = FsdpFieldText(fsdp->sharding_strategy);
    arguments.auto_wrap_policy = fsdp->auto_wrap_policy.module_types;
    arguments.auto_wrap_min_num_params = fsdp->auto_wrap_policy.min_num_params;
    arguments.activation_checkpointing_policy = fsdp->activation_checkpointing_policy;
    arguments.state_dict_type = FsdpFieldText(fsdp->state_dict_type);
#pragma GCC diagnostic pop
    std::shared_ptr<StrategyDescriptor> made = spec->factory(arguments);
    strategy = std::dynamic_pointer_cast<Strategy>(made);
    if (strategy == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strategy '", plan.strategy, "''s factory made ", made == nullptr ? "nothing" : "a strategy that is not a "
          "kiln::Strategy", "; it must return a kiln::Strategy (trainer/strategies/strategy.h)"));
    }
  }
  return strategy;
}

absl::Status Trainer::AddCallbacks(Stage stage) {
  callbacks_ = options_.callbacks;
  if (stage == Stage::kFit) {
    const bool has_checkpoint = std::any_of(callbacks_.begin(), callbacks_.end(), [](const auto& callback) {
      return dynamic_cast<ModelCheckpoint*>(callback.get()) != nullptr;
    });
    if (options_.enable_checkpointing && !has_checkpoint) {
      default_checkpoint_ = std::make_shared<ModelCheckpoint>();
      callbacks_.push_back(default_checkpoint_);
    }
    if (!options_.enable_checkpointing && has_checkpoint) {
      return absl::InvalidArgumentError(
          "Trainer was configured with `enable_checkpointing=False` but found `ModelCheckpoint` in callbacks list; "
          "remove the callback or enable checkpointing");
    }
    if (options_.max_time.has_value()) {
      callbacks_.push_back(std::make_shared<Timer>(TimerOptions{.duration = *options_.max_time}));
    }
    const bool has_summary = std::any_of(callbacks_.begin(), callbacks_.end(), [](const auto& callback) {
      return dynamic_cast<ModelSummaryCallback*>(callback.get()) != nullptr;
    });
    if (options_.enable_model_summary && !has_summary) callbacks_.push_back(std::make_shared<ModelSummaryCallback>());
  }
  // validate, test and predict after fit find the files of the ModelCheckpoint that fit added (ckpt_path="best").
  if (stage != Stage::kFit && default_checkpoint_ != nullptr) callbacks_.push_back(default_checkpoint_);
  for (const auto& callback : callbacks_) {
    if (absl::Status status = callback->validate_config(*this); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<Plan> Trainer::ResolveOptions() const {
  ConnectorOptions connector;
  connector.accelerator = options_.accelerator;
  connector.devices = options_.devices;
  connector.strategy = options_.strategy;
  connector.process_group_backend = options_.process_group_backend;
  absl::StatusOr<std::string> precision_flag = PrecisionFlag(options_.precision, options_.precision_plugin.get());
  if (!precision_flag.ok()) return precision_flag.status();
  connector.precision = *precision_flag;
  connector.num_nodes = options_.num_nodes;
  return ResolvePlan(connector, options_.registry != nullptr ? *options_.registry : AcceleratorRegistry::Default());
}

absl::Status Trainer::Prepare(Stage stage) {
  if (absl::Status checked = CheckOptions(); !checked.ok()) return checked;
  absl::StatusOr<Plan> plan = ResolveOptions();
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::shared_ptr<Strategy>> strategy = MakeStrategy(*plan);
  if (!strategy.ok()) return strategy.status();
  absl::StatusOr<std::shared_ptr<PrecisionPlugin>> precision =
      SelectPrecisionPlugin(plan->precision, plan->root_device(), options_.precision_plugin);
  if (!precision.ok()) return precision.status();

  if (absl::Status added = AddCallbacks(stage); !added.ok()) return added;
  for (const std::string& warning : plan->warnings) LOG(WARNING) << warning;
  plan_ = std::move(plan).value();
  strategy_ = *std::move(strategy);
  precision_ = std::move(precision).value();
  progress_ = std::make_unique<ProgressReporter>(
      options_.enable_progress_bar && stage == Stage::kFit && plan_->global_rank == 0, options_.log_every_n_steps);
  if (options_.profiler.instance() != nullptr) {
    profiler_ = options_.profiler.instance();  // The program's own object, shared.
  } else if (!options_.profiler.name().empty() && profiler_ == nullptr) {
    absl::StatusOr<std::unique_ptr<Profiler>> made =
        MakeProfiler(options_.profiler.name(), options_.profiler_dirpath, options_.profiler_filename);
    if (!made.ok()) return made.status();
    profiler_ = *std::move(made);
  }
  if (options_.seed.has_value()) torch::manual_seed(*options_.seed);
  at::globalContext().setDeterministicAlgorithms(options_.deterministic, /*warn_only=*/false);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------------------------
// The entry points

absl::Status Trainer::SetupStrategy(Stage stage, LightningModule& model) {
  if (strategy_->IsDistributed() && plan_->num_devices() > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) {
    // The local processes share this machine's cores, as under torchrun (which sets OMP_NUM_THREADS=1): each
    // starting one intra-op thread per core oversubscribes the cores, and the threads' spin-waits then cost several
    // times the training itself (a 2-process CPU run on 2 busy cores: 35 s against 3.5 s). Processes this one
    // launches inherit the variable; an OMP_NUM_THREADS the user (or the launcher) set is kept.
    const int cores = at::get_num_threads();
    const int threads = std::max(1, cores / plan_->num_devices());
    at::set_num_threads(threads);
    ::setenv("OMP_NUM_THREADS", absl::StrCat(threads).c_str(), /*overwrite=*/0);
    LOG(INFO) << "ddp: " << plan_->num_devices() << " local processes share " << cores << " intra-op thread(s): "
              << threads << " each (set OMP_NUM_THREADS to choose)";
  }
  DistributedProgram& program = DistributedProgram::Get();
  if (strategy_->IsDistributed() && !plan_->creates_processes_externally) {
    // Once per program: the processes started here live through every later entry point, which meets them again.
    if (absl::Status launched = program.Launch(*plan_); !launched.ok()) return launched;
  }
  program.BeginEntryPoint(StageName(stage));
  // Lightning's order: the strategy's environment (model_parallel: the processes meet and make the device mesh), then
  // configure_model, before anything converts, places or broadcasts the model.
  if (absl::Status status = strategy_->SetupEnvironment(*plan_); !status.ok()) return status;
  if (absl::Status status = CallUser("configure_model", [&] { model.configure_model(); }); !status.ok()) {
    return status;
  }
  // sync_batchnorm converts before the strategy places and broadcasts the module, as Lightning's DDPStrategy does,
  // and for fit alone.
  // A model configure_model built on the meta device (kiln::MetaDeviceScope) has no values yet: what the conversions
  // do to it is recorded too, and replayed after its construction when it is given its values (meta_device.h), by
  // the strategy one part at a time (fsdp), or here, whole.
  const bool meta = HasMetaTensors(model);
  {
    std::optional<MetaDeviceScope> record;
    if (meta) record.emplace();
    layer_sync_ = std::make_unique<LayerSync>(model);
    if (stage == Stage::kFit && options_.sync_batchnorm) layer_sync_->ConvertBatchNorms(*plan_, *strategy_);
    if (absl::Status status = precision_->ConvertModule(model); !status.ok()) return status;
  }
  if (meta && !strategy_->MaterializesMetaTensors()) {
    if (absl::Status status = MaterializeMetaTensors(model); !status.ok()) return status;
  }
  if (absl::Status status = strategy_->Setup(*plan_, model); !status.ok()) return status;
  if (absl::Status status = layer_sync_->Attach(*strategy_); !status.ok()) return status;
  if (layer_sync_->check_callback() != nullptr) callbacks_.push_back(layer_sync_->check_callback());
  return absl::OkStatus();
}

std::unique_ptr<MetaDeviceScope> Trainer::init_module(bool empty_init) const {
  return empty_init ? std::make_unique<MetaDeviceScope>() : nullptr;
}

absl::Status Trainer::FinishStrategy(absl::Status status) {
  // The other processes go on to the program's next entry point; after a failure here, they cannot.
  if (status.ok() || strategy_ == nullptr || !strategy_->IsDistributed()) return status;
  if (const std::string failed = DistributedProgram::Get().Stop(status); !failed.empty()) {
    // The likely cause of this process's error: say which rank ended first, and how.
    status = absl::Status(status.code(), absl::StrCat(failed, "; ", status.message()));
  }
  return status;
}

namespace {

// What a module sees of the run (LightningModule::current_epoch and the rest), for the length of an entry point:
// the trainer's public state.
class TrainerRunView final : public RunView {
 public:
  explicit TrainerRunView(Trainer& trainer) : trainer_(trainer) {}
  int64_t current_epoch() const override { return trainer_.current_epoch(); }
  int64_t global_step() const override { return trainer_.global_step(); }
  c10::Device device() const override {
    return trainer_.strategy() != nullptr ? trainer_.strategy()->root_device() : c10::Device(c10::DeviceType::CPU);
  }
  Trainer* trainer() const override { return &trainer_; }
  int global_rank() const override { return trainer_.global_rank(); }
  int local_rank() const override { return trainer_.local_rank(); }
  Batch MoveBatch(const Batch& batch, c10::Device device) const override {
    if (trainer_.strategy() != nullptr && device == trainer_.strategy()->root_device()) {
      return trainer_.strategy()->BatchToDevice(batch);
    }
    return kiln::MoveBatch(batch, device);
  }
  void ClipGradientsNorm(const std::vector<at::Tensor>& parameters, double max_norm) const override {
    if (trainer_.strategy() == nullptr) return RunView::ClipGradientsNorm(parameters, max_norm);
    trainer_.strategy()->ClipGradientsNorm(parameters, max_norm);
  }
  std::shared_ptr<const DeviceMesh> device_mesh() const override {
    return trainer_.strategy() != nullptr ? trainer_.strategy()->device_mesh() : nullptr;
  }

 private:
  Trainer& trainer_;
};

}  // namespace

absl::Status Trainer::RunEntryPoint(Stage stage, LightningModule& model, absl::FunctionRef<absl::Status()> body) {
  TrainerRunView view(*this);
  model.set_run_view(&view);
  struct Detach {
    ~Detach() { model.set_run_view(nullptr); }
    LightningModule& model;
  } detach{model};
  if (absl::Status status = Prepare(stage); !status.ok()) return status;
  absl::Status status = SetupStrategy(stage, model);
  if (!status.ok()) {
    layer_sync_.reset();
    if (absl::Status teardown = strategy_->Teardown(); !teardown.ok()) LOG(WARNING) << teardown;
    return FinishStrategy(status);
  }
  if (profiler_ != nullptr) {
    // Lightning's profiler.setup: the stage, the local rank when there are several processes, the log folder
    // (dirpath's default: rank zero's first logger's folder, the one it claims; default_root_dir without a logger,
    // and on the other ranks, whose loggers claim none).
    std::string log_dir = options_.default_root_dir;
    if (is_global_zero() && !options_.loggers.empty() && !options_.loggers.front()->log_dir().empty()) {
      log_dir = options_.loggers.front()->log_dir();
    }
    ProfilerSetup setup{.stage = StageName(stage),
                        .local_rank = strategy_->world_size() > 1 ? std::optional<int>(local_rank()) : std::nullopt,
                        .log_dir = std::move(log_dir),
                        .accelerator = plan_->accelerator.get(),
                        .device = plan_->root_logical_device()};
    if (absl::Status started = profiler_->setup(setup); !started.ok()) {
      if (absl::Status teardown = strategy_->Teardown(); !teardown.ok()) LOG(WARNING) << teardown;
      return FinishStrategy(started);
    }
    loop_context_->profiler = profiler_.get();
  }
  {
    TeardownGuard teardown(*strategy_);
    // A loss scaler's inf/NaN check counts on every rank where ranks hold different parts of the gradients.
    precision_->SetOverflowAgreement(strategy_->GradientOverflowAgreement());
    status = body();
    precision_->SetOverflowAgreement(nullptr);
    // A strategy that sharded the model makes it whole again on every rank (after a failure it cannot: its peers
    // may be gone).
    if (status.ok()) status = strategy_->Finish();
    if (!status.ok()) CallOnException(model, status);
    // The BatchNorms back in place, and the process group released with the strategy's.
    layer_sync_.reset();
    model_ = nullptr;
    data_ = nullptr;
    // Every checkpoint this run saved is on disk before it returns.
    if (checkpoint_writer_ != nullptr) {
      if (absl::Status written = checkpoint_writer_->Flush(); !written.ok() && status.ok()) status = written;
      checkpoint_writer_.reset();
    }
  }
  if (loop_context_->profiler != nullptr) {
    // Lightning's profiler.describe at teardown: the report, written or printed (rank zero), however the run ended.
    loop_context_->profiler = nullptr;
    if (absl::Status described = profiler_->describe(); !described.ok()) {
      if (status.ok()) status = described;
      else LOG(WARNING) << "profiler: " << described;
    }
  }
  status = FinishStrategy(status);
  if (stage != Stage::kFit) return status;  // validate and test finalize their loggers themselves (EvaluationLoop).
  if (absl::Status finalized = FinalizeLoggers(status.ok()); !finalized.ok() && status.ok()) status = finalized;
  return status;
}

absl::Status Trainer::FinalizeLoggers(bool succeeded) {
  absl::Status status = absl::OkStatus();
  if (!is_global_zero()) return status;  // Only rank zero logs.
  for (const auto& logger : options_.loggers) {
    if (absl::Status finalized = logger->finalize_with_status(succeeded ? "success" : "failed");
        !finalized.ok() && status.ok()) {
      status = absl::Status(finalized.code(), absl::StrCat("logger '", logger->name(), "': ", finalized.message()));
    }
  }
  return status;
}

absl::Status Trainer::SetupLoggers() {
  if (!is_global_zero() || options_.fast_dev_run > 0) return absl::OkStatus();  // Nothing is logged then.
  for (const auto& logger : options_.loggers) {
    if (absl::Status status = logger->setup(); !status.ok()) {
      return absl::Status(status.code(), absl::StrCat("logger '", logger->name(), "': ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::fit(LightningModule& model, DataModule& data, const std::string& ckpt_path) {
  return RunEntryPoint(Stage::kFit, model, [&] {
    model_ = &model;  // For save_checkpoint, while the loop runs.
    data_ = &data;
    return fit_loop_->Run(model, data, ckpt_path);
  });
}

absl::Status Trainer::RunLoopsInternal(Stage stage, LightningModule& model,
                                       absl::FunctionRef<absl::Status(FitLoop&)> body) {
  return RunEntryPoint(stage, model, [&] { return body(*fit_loop_); });
}

absl::StatusOr<MetricMap> Trainer::validate(LightningModule& model, DataModule& data, const std::string& ckpt_path) {
  absl::StatusOr<MetricMap> metrics = absl::UnknownError("not run");
  absl::Status status = RunEntryPoint(Stage::kValidate, model, [&] {
    metrics = EvaluationLoop(*loop_context_, Stage::kValidate).RunStage(model, data, ckpt_path);
    return metrics.status();
  });
  if (!status.ok()) return status;
  return metrics;
}

absl::StatusOr<MetricMap> Trainer::test(LightningModule& model, DataModule& data, const std::string& ckpt_path) {
  absl::StatusOr<MetricMap> metrics = absl::UnknownError("not run");
  absl::Status status = RunEntryPoint(Stage::kTest, model, [&] {
    metrics = EvaluationLoop(*loop_context_, Stage::kTest).RunStage(model, data, ckpt_path);
    return metrics.status();
  });
  if (!status.ok()) return status;
  return metrics;
}

absl::StatusOr<std::vector<at::Tensor>> Trainer::predict(LightningModule& model, DataModule& data,
                                                         const std::string& ckpt_path) {
  absl::StatusOr<std::vector<at::Tensor>> predictions = absl::UnknownError("not run");
  absl::Status status = RunEntryPoint(Stage::kPredict, model, [&] {
    predictions = PredictionLoop(*loop_context_).Run(model, data, ckpt_path);
    return predictions.status();
  });
  if (!status.ok()) return status;
  return predictions;
}

}  // namespace kiln
