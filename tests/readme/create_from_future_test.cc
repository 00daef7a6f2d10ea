// What docs/collectives.md says of c10d::Work::create_from_future, measured on the LibTorch Kiln builds with: the Work
// it makes refuses a wait() with a finite timeout (so nothing bounds a collective that never completes), and its
// result() cannot read a C++ tensor list. If a LibTorch release fixes either, this test fails and the page changes.
#include <chrono>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/core/ivalue.h"
#include "gtest/gtest.h"
#include "torch/csrc/distributed/c10d/Work.hpp"

namespace {

TEST(CreateFromFutureTrap, RefusesAFiniteWaitAndCannotReadItsResult) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  c10::intrusive_ptr<c10d::Work> work = c10d::Work::create_from_future(future);
  EXPECT_FALSE(work->isCompleted());
  EXPECT_ANY_THROW(work->wait(std::chrono::milliseconds(100))) << "a finite wait is refused, never bounded";
  future->markCompleted(c10::IValue(std::vector<at::Tensor>{at::ones({2})}));
  EXPECT_TRUE(work->isCompleted());
  EXPECT_ANY_THROW(work->result()) << "result() reads a Python object";
}

}  // namespace
