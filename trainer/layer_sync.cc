#include "trainer/layer_sync.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "trainer/trainer.h"

namespace kiln {
namespace {

// Checks, after the first training batch, that every converted layer's forwards went through its
// kiln::SyncBatchNorm: a BatchNorm held and called as a member keeps running unsynchronised after the conversion,
// which can only replace the registered child. Every rank agrees (one ReduceAny), so that all stop together.
class SyncBatchNormCheck final : public Callback {
 public:
  explicit SyncBatchNormCheck(std::shared_ptr<SyncBatchNormConversion> conversion)
      : conversion_(std::move(conversion)) {}
  std::string state_key() const override { return "SyncBatchNormCheck"; }
  void on_train_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch,
                            int64_t batch_idx) override {
    if (state_ != State::kWaiting) return;
    conversion_->BeginCheck();
    state_ = State::kChecking;
  }
  void on_train_batch_end(Trainer& trainer, LightningModule& module, const at::Tensor& outputs, const Batch& batch,
                          int64_t batch_idx) override {
    if (state_ != State::kChecking) return;
    state_ = State::kDone;
    const std::vector<std::string> bypassed = conversion_->Bypassed();
    const bool any = trainer.strategy() != nullptr ? trainer.strategy()->ReduceAny(!bypassed.empty())
                                                   : !bypassed.empty();
    if (!any) return;
    const std::string where =
        bypassed.empty() ? std::string("on another rank")
                         : absl::StrCat("'", absl::StrJoin(bypassed, "', '"), "'");
    throw std::invalid_argument(absl::StrCat(
        "sync_batchnorm: the BatchNorm ", bypassed.size() > 1 ? "layers " : "layer ", where,
        " ran outside the kiln::SyncBatchNorm it was converted to, so it normalised with this process's batch alone: "
        "the conversion replaces the registered child, but a member that holds the BatchNorm (torch::nn::BatchNorm2d "
        "bn_; bn_(x)) still calls the original. Declare the layer as kiln::SyncBatchNorm (trainer/core/"
        "sync_batch_norm.h; the same options and state dict), call the registered child (e.g. inside a "
        "torch::nn::Sequential), or set sync_batchnorm=false"));
  }

 private:
  enum class State { kWaiting, kChecking, kDone };
  std::shared_ptr<SyncBatchNormConversion> conversion_;
  State state_ = State::kWaiting;
};

}  // namespace

LayerSync::~LayerSync() {
  for (const auto& layer : attached_) layer->set_process_group({});
  if (conversion_ != nullptr) conversion_->Revert();
}

void LayerSync::ConvertBatchNorms(const Plan& plan, const Strategy& strategy) {
  if (!strategy.IsDistributed() || plan.world_size <= 1) {
    // As Lightning: its TorchSyncBatchNorm applies to parallel strategies alone.
    LOG(INFO) << "sync_batchnorm=True has no effect with one process (strategy '" << plan.strategy << "', "
              << plan.world_size << " process): BatchNorm layers normalise with the local batch";
    return;
  }
  conversion_ = std::make_shared<SyncBatchNormConversion>(SyncBatchNormConversion::Convert(model_));
  if (conversion_->empty()) {
    LOG(WARNING) << "sync_batchnorm=True, but the model registers no torch::nn::BatchNorm1d/2d/3d: nothing was "
                    "converted (kiln::SyncBatchNorm layers synchronise without it; a TorchScript module's are not "
                    "converted)";
    conversion_.reset();
    return;
  }
  const std::vector<std::string> paths = conversion_->paths();
  LOG(INFO) << "sync_batchnorm: " << paths.size() << " BatchNorm layer(s) synchronised across " << plan.world_size
            << " processes: " << absl::StrJoin(paths, ", ");
  const std::vector<std::string> unchecked = conversion_->UncheckedPaths();
  if (!unchecked.empty()) {
    LOG(WARNING) << "sync_batchnorm: " << absl::StrJoin(unchecked, ", ")
                 << " track no running statistics and are still held elsewhere (a member?): whether their forwards "
                    "go through kiln::SyncBatchNorm cannot be checked; call the registered child, or declare "
                    "kiln::SyncBatchNorm";
  }
  check_ = std::make_shared<SyncBatchNormCheck>(conversion_);
}

absl::Status LayerSync::Attach(const Strategy& strategy) {
  c10::intrusive_ptr<c10d::ProcessGroup> group = strategy.LayerSyncProcessGroup();
  if (!group) {
    if (conversion_ != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sync_batchnorm: strategy '", strategy.name(), "' runs several processes but gives no process group for "
          "synchronised layers (Strategy::LayerSyncProcessGroup); return its group there, or set "
          "sync_batchnorm=false"));
    }
    return absl::OkStatus();
  }
  for (const std::shared_ptr<torch::nn::Module>& module : model_.modules(/*include_self=*/false)) {
    auto layer = std::dynamic_pointer_cast<SyncBatchNormImpl>(module);
    if (layer == nullptr || layer->process_group()) continue;
    layer->set_process_group(group);
    attached_.push_back(std::move(layer));
  }
  return absl::OkStatus();
}

}  // namespace kiln
